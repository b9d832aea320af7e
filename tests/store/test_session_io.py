"""The engine-facing helpers on real messages and real renders of the current engine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.errors import StoreError
from ctxengine.store import FileStore, InMemoryStore
from ctxengine.store.base import content_hash
from ctxengine.store.codec import message_from_json, message_to_json
from ctxengine.store.session_io import record_messages, record_rewrite, resume, snapshot_render
from ctxengine.store.snapshot import (
    SCHEMA,
    grain_rows,
    memory_digest,
    payload_hash,
    summary_drift,
)
from ctxengine.store.writer import SnapshotWriter
from ctxengine.transcript import Message, ToolCall, load
from offline_tiktoken import TRANSCRIPTS

pytestmark = pytest.mark.anyio

PI = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
REAL = sorted(p for p in TRANSCRIPTS.rglob("*") if p.is_file() and p.suffix in {".jsonl", ".traj"})


@pytest.mark.parametrize("path", REAL[:6], ids=[p.name for p in REAL[:6]])
def test_real_transcripts_round_trip_through_a_file_store(tmp_path: Path, path: Path) -> None:
    transcript = load(path)
    store = FileStore(tmp_path)
    record_messages(store, "s", transcript.messages[:150])
    back = resume(FileStore(tmp_path), "s")
    assert back.messages == list(transcript.messages[:150])
    assert [message_from_json(message_to_json(m)) for m in transcript] == list(transcript)
    assert transcript.replace(back.messages).to("anthropic") == transcript[:150].to("anthropic")


async def _render(messages: list[Message], budget: int = 6000):  # type: ignore[no-untyped-def]
    engine = ContextEngine("gpt-4o", Budget(total=budget))
    async with engine.session("s") as session:
        session.extend(messages)
        return await session.render()


async def test_a_restored_session_renders_the_same_payload(tmp_path: Path) -> None:
    messages = [*load(PI).messages[:300], Message.user("What is the status of the task?")]
    store = FileStore(tmp_path)
    entries = record_messages(store, "s", messages)
    out = await _render(messages)
    with SnapshotWriter(store) as writer:
        info = snapshot_render(
            writer, "s", {"opaque": True}, out, turn=1, leaf_id=entries[-1].id
        ).result(30)
    assert info.meta["payload_hash"] == payload_hash(out.payload)
    # a new process: resume, rebuild, re-render at the same budget
    back = resume(FileStore(tmp_path), "s")
    assert back.exists and back.covered == len(messages) and back.state == {"opaque": True}
    again = await _render(back.messages)
    assert payload_hash(again.payload) == back.snapshot.content["payload_hash"]  # type: ignore[union-attr]
    assert again.payload == out.payload


async def test_the_snapshot_holds_the_decisions_of_the_render(tmp_path: Path) -> None:
    messages = [*load(PI).messages[:200], Message.user("status?")]
    out = await _render(messages, budget=4000)
    store = InMemoryStore()
    with SnapshotWriter(store) as writer:
        snapshot_render(writer, "s", None, out, turn=3, leaf_id=None).result(30)
    snap = store.load_snapshot("s")
    assert snap is not None
    c = snap.content
    assert c["schema"] == SCHEMA and c["turn"] == 3 and c["budget"] == 4000
    assert (
        c["tokens"] == out.tokens <= 4000 and c["provider"] == "openai" and c["model"] == "gpt-4o"
    )
    rows = grain_rows(c)
    assert len(rows) == len(out.report.grains)
    assert rows == [
        {**g.to_dict(), "priority": r["priority"], "lifespan": r["lifespan"],
         "protected": r["protected"]}
        for g, r in zip(out.report.grains, rows, strict=True)
    ]  # fmt: skip
    by_id = {g["node_id"]: g for g in rows}
    for grain in out.tree:
        row = by_id[grain.node_id]
        assert (row["priority"], row["lifespan"]) == (grain.priority, grain.lifespan)
    decisions = {g.node_id: g.decision for g in out.report.grains}
    assert {k: v["decision"] for k, v in by_id.items()} == decisions
    assert {"kept", "dropped"} <= set(decisions.values()) or "folded" in decisions.values()
    memory = c["core_memory"]
    assert snap.info.meta == {
        **{k: c[k] for k in ("turn", "provider", "model", "budget", "tokens", "fits")},
        "payload_hash": c["payload_hash"],
        # what retention and the listing read without the content
        "summary_hash": content_hash(memory["mem.summary"]) if "mem.summary" in memory else None,
        "core_memory": {"chars": sum(map(len, memory.values())), "hash": memory_digest(memory)},
    }


async def test_messages_after_the_snapshot_are_not_covered(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    first = record_messages(store, "s", [Message.user("a"), Message.assistant("b")])
    out = await _render([Message.user("a"), Message.assistant("b")])
    with SnapshotWriter(store) as writer:
        snapshot_render(writer, "s", {"n": 2}, out, turn=0, leaf_id=first[-1].id).result(30)
    record_messages(store, "s", [Message.user("c")])
    back = resume(store, "s")
    assert [m.text for m in back.messages] == ["a", "b", "c"] and back.covered == 2


def test_a_persistent_truncation_is_a_branch(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    call = ToolCall("c1", "read_file", {"path": "big.log"})
    original = [
        Message.user("read it"),
        Message.assistant("", [call]),
        Message.tool("c1", "x" * 50_000),
        Message.assistant("done"),
    ]
    entries = record_messages(store, "s", original)
    cut = [Message.tool("c1", "x" * 100 + "\n[... 49,900 chars truncated ...]"), original[3]]
    record_rewrite(
        store,
        "s",
        cut,
        parent_id=entries[1].id,
        reason="truncate_tool_results",
        details={"call_ids": ["c1"]},
    )
    back = resume(FileStore(tmp_path), "s")
    assert [m.role for m in back.messages] == ["user", "assistant", "tool", "assistant"]
    assert len(back.messages[2].tool_results[0].text) < 200
    assert [r.data["reason"] for r in back.rewrites] == ["truncate_tool_results"]
    old = FileStore(tmp_path).branch("s", entries[-1].id)  # the original is still there
    assert len(old[2].data["message"]["blocks"][0]["content"][0]["text"]) == 50_000


async def _steps(s, tag: str, n: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        await s.user_message(f"request {tag}-{i}: look at module_{tag}_{i}.py and explain it")
        call = ToolCall(f"c{tag}_{i}", "read_file", {"path": f"m{tag}_{i}.py"})
        await s.assistant_message("", [call])
        await s.tool_result(f"c{tag}_{i}", f"RESULT-{tag}-{i} " + "content line\n" * 40)
        await s.assistant_message(f"done {tag}-{i}")


async def test_summary_drift_is_visible_across_snapshots() -> None:
    store = InMemoryStore()
    engine = ContextEngine("gpt-4o", Budget(total=3000))
    with SnapshotWriter(store) as writer:
        async with engine.session("sum") as s:
            await _steps(s, "a", 30)
            for turn in range(16):
                out = await s.render()
                # Wait for each: the writer may coalesce snapshots that queue up behind a slow one.
                snapshot_render(writer, "sum", None, out, turn=turn, leaf_id=None).result(60)
                await _steps(s, str(turn), 15)
        writer.flush()
    infos = store.snapshots("sum")
    snaps = [store.load_snapshot("sum", i.id) for i in infos]
    assert len(snaps) == 16 and all(s is not None for s in snaps)
    summaries = [s.content["core_memory"].get("mem.summary") for s in snaps]  # type: ignore[union-attr]
    assert sum(1 for x in summaries if x) >= 2
    drift = summary_drift(snaps, "mem.summary")  # type: ignore[arg-type]
    assert drift and all(d.node_id == "mem.summary" for d in drift)
    assert all(d.after_turn > d.before_turn for d in drift)  # type: ignore[operator]
    assert any(d.added for d in drift) and all(0.0 <= d.similarity < 1.0 for d in drift)
    later = [d for d in drift if d.chars_before]
    assert later, "a second compaction changed an existing summary"


async def test_a_failing_store_leaves_the_session_working_in_memory(tmp_path: Path) -> None:
    src = tmp_path / "src"
    store_ok = FileStore(src)
    kept = record_messages(store_ok, "s", [Message.user("stored before")])
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True).returncode:
        subprocess.run(["chattr", "-R", "+i", str(src)], check=True)
        target, cleanup = src, ["chattr", "-R", "-i", str(src)]
    else:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        target, cleanup = ro, ["umount", "-l", str(ro)]
    try:
        store = FileStore(target)
        engine = ContextEngine("gpt-4o", Budget(total=4000))
        async with engine.session("s") as session:
            await session.user_message("hello")
            with pytest.raises(StoreError, match="read-only"):
                record_messages(store, "s", session.messages[-1:])
            out = await session.render()  # the session goes on in memory
            assert out.payload["messages"][-1] == {"role": "user", "content": "hello"}
    finally:
        subprocess.run(cleanup, check=True)
    assert [e.id for e in FileStore(src).entries("s")] == [kept[0].id]
