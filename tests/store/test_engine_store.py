"""The engine wired to a store: resume on open, restore after a crash, store faults."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.errors import StoreError
from ctxengine.store import FileStore
from ctxengine.store.snapshot import payload_hash
from ctxengine.transcript import Message, ToolCall, load
from offline_tiktoken import TRANSCRIPTS

pytestmark = pytest.mark.anyio

PI = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
BUDGET = 6000


def _engine(root: Path) -> ContextEngine:
    return ContextEngine("gpt-4o", Budget(total=BUDGET), store=FileStore(root))


async def test_every_message_added_is_in_the_store_and_a_new_worker_resumes(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path)
    async with engine.session("s1") as s:
        s.extend(load(PI).messages[:120])
        await s.user_message("what next?")
        await s.assistant_message("", [ToolCall("c1", "read", {"path": "a.py"})])
        await s.tool_result("c1", "print('hi')\n" * 50, name="read")
        assert s.unsaved == 0  # extend's messages were saved by the next async call
        first = await s.render()
        await s.user_message("and then?")
        out = await s.render()
    engine.flush()
    stored = FileStore(tmp_path).branch("s1")
    assert len(stored) == 124 and stored[-1].data["message"]["role"] == "user"
    assert len(FileStore(tmp_path).snapshots("s1")) == 2
    assert FileStore(tmp_path).snapshots("s1")[-1].meta["payload_hash"] == payload_hash(out.payload)
    assert first.payload != out.payload
    # a restarted worker: a new engine on the same folder just opens the session again
    again = _engine(tmp_path)
    async with again.session("s1") as s:
        assert len(s.messages) == 124 and s.turn == 2
        back = await s.render()
        assert back.payload == out.payload


async def test_restore_gives_the_payload_of_the_last_render(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    async with engine.session("s2") as s:
        await s.ingest(load(PI).messages[:300])
        for i in range(3):
            await s.user_message(f"question {i}")
            out = await s.render()
            await s.assistant_message(f"answer {i}")
    engine.flush()
    restored = await _engine(tmp_path).restore("s2")
    # the last answer came after the last render: it is in the restored render too
    assert restored.payload["messages"][-1] == {"role": "assistant", "content": "answer 2"}
    assert restored.payload["messages"][:-1] == out.payload["messages"]
    # restore writes nothing
    assert len(FileStore(tmp_path).snapshots("s2")) == 3
    with pytest.raises(StoreError, match="holds no session 'nope'"):
        await _engine(tmp_path).restore("nope")
    with pytest.raises(StoreError, match="no store"):
        await ContextEngine("gpt-4o").restore("s2")


async def test_a_torn_last_line_and_a_damaged_snapshot_are_skipped(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    async with engine.session("s3") as s:
        s.extend(load(PI).messages[:80])
        out = await s.render()
        await s.user_message("one more")
        later = await s.render()
    engine.flush()
    folder = tmp_path / "sessions" / "s3"
    with (folder / "transcript.jsonl").open("ab") as f:  # a write killed half way
        f.write(b'{"id":"x","parent_id":null,"kind":"message","data":{"mess')
    newest = FileStore(tmp_path).snapshots("s3")[-1]
    (folder / "objects" / f"{newest.hash}.json").write_text('{"half": ')
    store = FileStore(tmp_path)
    restored = await ContextEngine("gpt-4o", Budget(total=BUDGET), store=store).restore("s3")
    assert restored.payload == later.payload  # rebuilt from the older snapshot + later messages
    assert restored.payload != out.payload
    said = " ".join(str(p) for p in store.problems)
    assert "torn" in said and "damaged" in said, store.problems


async def test_a_failing_store_is_a_fault_and_the_session_goes_on(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET), store=store)
    async with engine.session("s4") as s:
        await s.user_message("kept")
        transcript = tmp_path / "sessions" / "s4" / "transcript.jsonl"
        subprocess.run(["chattr", "+i", str(transcript)], check=True)  # even root cannot write
        try:
            with pytest.warns(RuntimeWarning, match="ctxengine store"):
                await s.user_message("hello")
            assert s.unsaved == 1
            with pytest.warns(RuntimeWarning, match="ctxengine store"):
                out = await s.render()
        finally:
            subprocess.run(["chattr", "-i", str(transcript)], check=True)
        assert out.payload["messages"][-1] == {"role": "user", "content": "hello"}
        assert any(f["plugin"] == "store" for f in out.report.faults)
        await s.user_message("after")  # the store works again: the queued message goes first
        assert s.unsaved == 0
    texts = [e.data["message"]["blocks"][0]["text"] for e in FileStore(tmp_path).branch("s4")]
    assert texts == ["kept", "hello", "after"]


def test_messages_kept_out_of_the_snapshot_state() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
    state = engine.new_state("x")
    state.append(Message.user("hi"))
    data = state.to_json(messages=False)
    assert data["messages"] is None
    with pytest.raises(ValueError, match="no messages"):
        engine.state_from_json(data)
