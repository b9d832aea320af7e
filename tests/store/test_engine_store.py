"""The engine wired to a store: resume on open, restore after a crash, store faults."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain, RenderedContext, Session
from ctxengine.errors import (
    ConfigError,
    ConfigTypeError,
    CtxEngineError,
    SessionIdError,
    StoreConflictError,
    StoreError,
)
from ctxengine.store import FileStore, NewEntry, Store
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
        await s.checkpoint()  # written before the next render (the writer keeps only the newest)
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
            await s.checkpoint()  # each snapshot written (the writer keeps only the newest)
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
        await s.checkpoint()  # written before the next render (the writer keeps only the newest)
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


async def test_a_transcript_emptied_under_its_snapshots_is_reported_when_reopened(
    tmp_path: Path,
) -> None:
    """transcript.jsonl emptied (or cut, or replaced) after its snapshots were taken: the
    session reopened with no message, rendered and saved, and nothing said the history was
    gone. The first render's report now carries a store fault naming the lost entry."""
    async with _engine(tmp_path).session("s") as s:
        s.extend(load(PI).messages[:20])
        await s.render()
    leaf = FileStore(tmp_path).branch("s")[-1].id
    (tmp_path / "sessions" / "s" / "transcript.jsonl").write_bytes(b"")
    async with _engine(tmp_path).session("s") as s:
        assert s.messages == []
        out = await s.render()
    said = [f["message"] for f in out.report.faults]
    assert any(f"names entry {leaf!r}, which the transcript no longer holds" in m for m in said)
    # a snapshot of another branch (before a rewrite) names an entry the store still holds
    async with _engine(tmp_path).session("r") as s:
        s.extend(load(PI).messages[:6])
        await s.render()
    store = FileStore(tmp_path)
    first = store.branch("r")[0]
    store.append(
        "r", [NewEntry("message", {"message": {"role": "user", "blocks": []}})], parent_id=first.id
    )
    async with _engine(tmp_path).session("r") as s:
        out = await s.render()
    assert not any("no longer holds" in f["message"] for f in out.report.faults)


async def test_a_damaged_line_keeps_the_messages_around_it_and_restore_works(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path)
    async with engine.session("s5") as s:
        for i in range(5):
            await s.user_message(f"question {i}")
            await s.assistant_message(f"answer {i}")
        await s.render()
        await s.checkpoint()
    engine.close()
    path = tmp_path / "sessions" / "s5" / "transcript.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:30] + b"\xff" + lines[1][31:]  # "answer 0" is damaged
    path.write_bytes(b"\n".join(lines))
    expected = ["question 0"] + [m for i in range(1, 5) for m in (f"question {i}", f"answer {i}")]
    store = FileStore(tmp_path)
    again = ContextEngine("gpt-4o", Budget(total=BUDGET), store=store)
    async with again.session("s5") as s:
        assert [m.text for m in s.messages] == expected
        out = await s.render()
    assert [m["content"] for m in out.payload["messages"]] == expected
    resumed = [f for f in out.report.faults if (f["plugin"], f["hook"]) == ("store", "resume")]
    assert len(resumed) == 2 and all(f["severity"] == "warning" for f in resumed)
    assert f"{path}: line 2 is not a complete record" in resumed[0]["message"]
    restored = await _engine(tmp_path).restore("s5")
    assert restored.payload == out.payload


async def test_a_malformed_stored_message_is_left_out_and_the_rest_resumes(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path)
    async with engine.session("s6") as s:
        for i in range(3):
            await s.user_message(f"question {i}")
            await s.assistant_message(f"answer {i}")
        await s.render()
        await s.checkpoint()
    engine.close()
    path = tmp_path / "sessions" / "s6" / "transcript.jsonl"
    lines = path.read_text().splitlines()
    bad = json.loads(lines[2])  # "question 1": valid JSON, a complete entry, a wrong role
    bad["data"]["message"]["role"] = "wizard"
    lines[2] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    expected = ["question 0", "answer 0", "answer 1", "question 2", "answer 2"]
    async with _engine(tmp_path).session("s6") as s:
        assert [m.text for m in s.messages] == expected  # not an empty session
        out = await s.render()
    faults = [f for f in out.report.faults if (f["plugin"], f["hook"]) == ("store", "resume")]
    assert len(faults) == 1 and faults[0]["severity"] == "warning"
    assert f"entry {bad['id']!r}" in faults[0]["message"] and "'wizard'" in faults[0]["message"]
    restored = await _engine(tmp_path).restore("s6")  # raised StoreError before
    assert [m["content"] for m in restored.payload["messages"]] == expected


@pytest.mark.parametrize("kind", ["file", "redis"])
async def test_an_entry_with_a_damaged_parent_id_neither_empties_the_session_nor_blocks_saves(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """One entry whose parent_id names no entry (valid JSON, a flipped hex digit) made the
    session open with none of its 20 messages, and every later save was refused as another
    writer's."""

    def store() -> Store:
        if kind == "file":
            return FileStore(tmp_path)
        from ctxengine.store import RedisStore

        return RedisStore(request.getfixturevalue("redis_url"), prefix=prefix)

    prefix = f"t{uuid.uuid4().hex[:10]}"
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET), store=store())
    async with engine.session("s7") as s:
        for i in range(10):
            await s.user_message(f"request {i}")
            await s.assistant_message(f"answer {i}")
        await s.render()
        await s.checkpoint()
    engine.close()
    if kind == "file":
        path = tmp_path / "sessions" / "s7" / "transcript.jsonl"
        lines = path.read_text().splitlines()
        bad = json.loads(lines[12])
        bad["parent_id"] = bad["parent_id"][:-1] + ("0" if bad["parent_id"][-1] != "0" else "1")
        lines[12] = json.dumps(bad)
        path.write_text("\n".join(lines) + "\n")
    else:
        import redis

        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        bad = json.loads(client.lindex(f"{prefix}:{{s7}}:log", 12))
        bad["parent_id"] = bad["parent_id"][:-1] + ("0" if bad["parent_id"][-1] != "0" else "1")
        client.lset(f"{prefix}:{{s7}}:log", 12, json.dumps(bad))
    expected = [m for i in range(10) for m in (f"request {i}", f"answer {i}")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a refused save would warn
        async with ContextEngine("gpt-4o", Budget(total=BUDGET), store=store()).session("s7") as s:
            assert [m.text for m in s.messages] == expected
            out = await s.render()
            await s.user_message("one more")
            after = await s.render()
    faults = [f for f in out.report.faults if f["plugin"] == "store"]
    assert len(faults) == 1 and (faults[0]["hook"], faults[0]["severity"]) == (
        "resume",
        "warning",
    )
    assert f"entry {bad['id']!r} names {bad['parent_id']!r} as its parent" in faults[0]["message"]
    assert not [f for f in after.report.faults if f["plugin"] == "store"]
    again = await ContextEngine("gpt-4o", Budget(total=BUDGET), store=store()).load("s7")
    assert again is not None and [m.text for m in again.messages] == [*expected, "one more"]
    if kind == "redis":
        store().delete("s7")


async def test_a_second_writer_of_one_session_id_is_refused_and_nothing_interleaves(
    make_store: Callable[[], Store],
) -> None:
    """Two sessions open on one id at once appended after the store's leaf in turn (with a
    warning after the fact): the stored branch interleaved them and a reopened session matched
    neither. A save is now a compare-and-append: the second writer is refused whole."""
    first = ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store())
    second = ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store())
    async with first.session("w") as a:
        b = await second.load("w") or Session(second, "w")  # opened before A1 was saved
        await a.user_message("A1")
        with pytest.warns(RuntimeWarning, match="appended to by another writer"):
            await b.user_message("B1")  # b saw an empty session; the store holds A1
        assert b.unsaved == 1 and b.leaf_id is None
        with pytest.raises(StoreConflictError) as info:
            await b.save()  # called directly it raises, and keeps refusing
        assert (info.value.session_id, info.value.expected) == ("w", None)
        assert info.value.actual == make_store().leaf("w") == a.leaf_id
        assert "nothing of this append was written" in str(info.value)
        assert isinstance(info.value, StoreError)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the first writer goes on untroubled
            await a.assistant_message("A2")
            out = await a.render()
        assert not [f for f in out.report.faults if f["plugin"] == "store"]
        with pytest.warns(RuntimeWarning, match="appended to by another writer"):
            refused = await b.render()
        said = [f for f in refused.report.faults if (f["plugin"], f["hook"]) == ("store", "append")]
        assert said and "its leaf is" in said[0]["message"]
        with pytest.warns(RuntimeWarning, match="appended to by another writer"):
            await b.close()
    stored = make_store()
    assert [e.data["message"]["blocks"][0]["text"] for e in stored.branch("w")] == ["A1", "A2"]
    assert len(stored.entries("w")) == 2  # nothing of B1 on any branch
    again = await ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store()).load("w")
    assert again is not None and [m.text for m in again.messages] == ["A1", "A2"]


async def test_a_refused_writer_rebases_with_its_grains_and_loses_no_message(
    make_store: Callable[[], Store],
) -> None:
    """The refused writer could only be reopened, losing the messages it had queued. Now the
    refusal carries them and rebase() appends them after the other writer's, keeping the
    grains the writer added."""
    first = ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store())
    second = ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store())
    a = Session(first, "w")
    b = Session(second, "w")
    await a.user_message("A1")
    b.add(ContextGrain("note.b", content="B's standing note.", lifespan="session"))
    b.add(ContextGrain("turn.b", content="B's one-turn hint."))
    b.extend([Message.user("B1"), Message.assistant("B2")])
    with pytest.raises(StoreConflictError) as info:
        await b.save()
    assert [m.text for m in info.value.unsaved] == ["B1", "B2"] and b.unsaved == 2
    await a.assistant_message("A2")
    assert await b.rebase() == 2
    assert b.unsaved == 0 and b.leaf_id == make_store().leaf("w")
    assert [m.text for m in b.messages] == ["A1", "A2", "B1", "B2"]
    stored = make_store()
    assert [e.data["message"]["blocks"][0]["text"] for e in stored.branch("w")] == [
        "A1",
        "A2",
        "B1",
        "B2",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no conflict left
        out = await b.render()
    text = json.dumps(out.payload)
    assert "B's standing note." in text and "B's one-turn hint." in text
    assert not [f for f in out.report.faults if f["plugin"] == "store"]
    # Without another writer in between a rebase is a save; A is now the stale one.
    await b.user_message("B3")
    assert await b.rebase() == 0
    a.extend([Message.user("A3")])
    with pytest.warns(RuntimeWarning, match="appended to by another writer"):
        await a.close()  # refused: the message stays queued on the closed session
    assert a.closed and a.unsaved == 1
    assert await a.rebase() == 1
    assert a.closed and [m.text for m in a.messages] == ["A1", "A2", "B1", "B2", "B3", "A3"]
    texts = [e.data["message"]["blocks"][0]["text"] for e in make_store().branch("w")]
    assert texts == ["A1", "A2", "B1", "B2", "B3", "A3"]


async def test_a_reopened_session_saves_without_a_writer_conflict(
    make_store: Callable[[], Store],
) -> None:
    async with ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store()).session("w") as s:
        await s.user_message("one")
        await s.assistant_message("two")
    make_store().append("w", [NewEntry("note", {"not": "a message"})])  # the leaf is no message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a conflict warning would fail here
        async with ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store()).session(
            "w"
        ) as s:
            await s.user_message("three")
            out = await s.render()
    assert not [f for f in out.report.faults if f["plugin"] == "store"]
    assert [m.text for m in s.messages] == ["one", "two", "three"]


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


@pytest.mark.parametrize("session_id", ["../escape", "chat 1", "{tag}", ""])
async def test_an_invalid_session_id_with_a_store_raises_on_open(
    tmp_path: Path, session_id: str
) -> None:
    """It was reported as a store fault (a RuntimeWarning) and the session opened in memory:
    every message then failed to save, one warning each, and nothing of it was ever stored."""
    engine = _engine(tmp_path)
    with pytest.raises(SessionIdError, match="session id") as info:
        async with engine.session(session_id):
            pass
    assert isinstance(info.value, ValueError)
    assert repr(session_id) in str(info.value) or "1 to 128" in str(info.value)
    assert engine.store is not None and engine.store.sessions() == []


async def test_close_saves_what_extend_added(make_store: Callable[[], Store]) -> None:
    """extend() leaves its messages to the next call; closing without one (no render) saves
    them, so the reopened session has them, in order, once."""
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store())
    async with engine.session("x1") as s:
        await s.user_message("first request")
        s.extend([Message.assistant("answer 1"), Message.user("second"), Message.assistant("2")])
        assert s.unsaved == 3
    assert s.unsaved == 0
    engine.close()
    again = ContextEngine("gpt-4o", Budget(total=BUDGET), store=make_store())
    async with again.session("x1") as s2:
        assert [m.text for m in s2.messages] == ["first request", "answer 1", "second", "2"]
        await s2.user_message("third")
    again.close()
    texts = [e.data["message"]["blocks"][0]["text"] for e in make_store().branch("x1")]
    assert texts == ["first request", "answer 1", "second", "2", "third"]


async def test_close_warns_when_it_cannot_save(tmp_path: Path) -> None:
    """A store failing at close is reported as every call's save reports it (a warning, never
    raised: the block's own exception, if any, is what the caller sees)."""
    engine = _engine(tmp_path)
    async with engine.session("x2") as s:
        await s.user_message("kept")
        s.extend([Message.assistant("lost with the store")])
        _chattr("+i", tmp_path / "sessions" / "x2" / "transcript.jsonl")
        try:
            with pytest.warns(RuntimeWarning, match=r"ctxengine store \(append\)"):
                await s.close()
        finally:
            _chattr("-i", tmp_path / "sessions" / "x2" / "transcript.jsonl")
        assert s.closed and s.unsaved == 1
    assert [e.data["message"]["role"] for e in FileStore(tmp_path).branch("x2")] == ["user"]


def test_messages_kept_out_of_the_snapshot_state() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
    state = engine.new_state("x")
    state.append(Message.user("hi"))
    data = state.to_json(messages=False)
    assert data["messages"] is None
    with pytest.raises(ValueError, match="no messages"):
        engine.state_from_json(data)


# -- store failures at the engine level: read-only folder, file-size limit --------------------


def _chattr(flag: str, *paths: Path) -> None:
    """``chattr -R +i`` makes files immutable even for root (chmod does not stop root)."""
    subprocess.run(["chattr", "-R", flag, *map(str, paths)], check=True)


async def _turn(s: Session, i: int, size: int = 300) -> RenderedContext:
    await s.user_message(f"question {i}")
    await s.assistant_message(f"looking {i}", [ToolCall(f"c{i}", "read", {"path": f"f{i}.py"})])
    await s.tool_result(f"c{i}", f"line {i}\n" * size, name="read")
    return await s.render()


async def test_a_snapshot_failing_in_the_background_is_a_fault_of_the_next_render(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = _engine(tmp_path)
    objects = tmp_path / "sessions" / "s5" / "objects"
    async with engine.session("s5") as s:
        kept = await _turn(s, 0)
        first = await s.checkpoint()
        assert first is not None
        _chattr("+i", objects)  # no new snapshot file can be created; appends still work
        try:
            with caplog.at_level(logging.WARNING, logger="ctxengine.store"):
                failed = await _turn(s, 1)  # renders; its snapshot fails in the writer thread
                with pytest.raises(StoreError, match="read-only or not writable") as err:
                    await s.checkpoint()
                assert err.value.errno in (1, 13, 30)
                assert s.unsaved == 0  # the messages were stored all the same
                nxt = await s.render()  # the turn goes on; the failure is in its report
                with pytest.raises(StoreError, match="read-only"):
                    await s.checkpoint()  # nxt's own snapshot fails as well
        finally:
            _chattr("-i", objects)
        said = [f for f in nxt.report.faults if f["plugin"] == "store"]
        assert [f["hook"] for f in said] == ["snapshot"], nxt.report.faults
        assert said[0]["message"].startswith("snapshot not written: cannot create")
        assert str(objects) in said[0]["message"]
        assert not [f for f in failed.report.faults if f["plugin"] == "store"]
        logged = [r.getMessage() for r in caplog.records if r.name == "ctxengine.store"]
        assert any("snapshot of session 's5' not written" in m for m in logged), logged
        assert nxt.payload == failed.payload  # nothing changed in between: same context
        again = await s.render()  # nxt's snapshot failed too (still read-only then)
        assert [f["hook"] for f in again.report.faults if f["plugin"] == "store"] == ["snapshot"]
        again = await s.render()
        assert not [f for f in again.report.faults if f["plugin"] == "store"]  # reported once
        last = await s.checkpoint()  # the folder is writable again
        assert last is not None
    store = FileStore(tmp_path)  # the failed snapshots left no index line, no file
    ids = [i.id for i in store.snapshots("s5")]
    # first, then the renders after the folder became writable again: the first of the two
    # `again` renders has its own snapshot unless the writer took both at once (it keeps only
    # the newest of the snapshots waiting for it)
    assert ids[0] == first.id and ids[-1] == last.id and len(ids) in (2, 3), ids
    assert store.problems == [] and not list(objects.glob(".*.tmp"))
    restored = await _engine(tmp_path).restore("s5", snapshot=first.id)
    assert restored.payload == kept.payload
    assert (await _engine(tmp_path).restore("s5")).payload == again.payload


async def test_a_read_only_folder_raises_from_save_and_the_session_renders_on(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path)
    folder = tmp_path / "sessions" / "s6"
    async with engine.session("s6") as s:
        await _turn(s, 0)
        acked = await _turn(s, 1)
        await s.checkpoint()
        before = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        _chattr("+i", tmp_path)
        try:
            with pytest.warns(RuntimeWarning, match="read-only or not writable"):
                await s.user_message("while read-only")  # never raises: a fault
            assert s.unsaved == 1
            with pytest.raises(StoreError, match="read-only or not writable") as err:
                await s.save()
            assert err.value.errno in (1, 13, 30) and err.value.path is not None
            assert str(folder) in str(err.value) and s.unsaved == 1  # still queued
            with pytest.warns(RuntimeWarning, match="read-only or not writable"):
                out = await s.render()  # in memory, the session goes on
            assert out.payload["messages"][-1] == {"role": "user", "content": "while read-only"}
            assert [f["hook"] for f in out.report.faults if f["plugin"] == "store"] == [
                "append",
                "append",
            ]
            with pytest.raises(StoreError, match="read-only"):
                await s.checkpoint()
            # another worker restores from the store: the state acknowledged before
            restored = await _engine(tmp_path).restore("s6")
            assert restored.payload == acked.payload
        finally:
            _chattr("-i", tmp_path)
        after = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        assert after == before  # nothing already written was touched
        await s.save()  # writable again: the queued message goes in
        assert s.unsaved == 0
    texts = [e.data["message"]["blocks"][0] for e in FileStore(tmp_path).branch("s6")]
    assert texts[-1] == {"type": "text", "text": "while read-only"} and len(texts) == 7


FSIZE_CHILD = r"""
import asyncio, json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from ctxengine import Budget, ContextEngine, FileStore, StoreError
from ctxengine.store.snapshot import payload_hash
from ctxengine.transcript import ToolCall

def say(*parts):
    print(*parts, flush=True)

async def main(root):
    engine = ContextEngine("gpt-4o", Budget(total=6000), store=FileStore(root))
    async with engine.session("s7") as s:
        for i in range(3):
            await s.user_message(f"question {i}")
            await s.assistant_message("", [ToolCall(f"c{i}", "read", {"path": f"f{i}"})])
            await s.tool_result(f"c{i}", f"line {i}\n" * 400, name="read")
            out = await s.render()
            await s.checkpoint()
        say("ACKED", payload_hash(out.payload))
        size = (engine.store.root / "sessions" / "s7" / "transcript.jsonl").stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 400, size + 400))
        await s.user_message("a question that still fits under the limit")
        await s.assistant_message("y" * 5000)  # this one does not: a fault, never raised
        try:
            await s.save()
        except StoreError as exc:
            say("SAVE", exc.errno, exc)
        out = await s.render()
        faults = [f["hook"] for f in out.report.faults if f["plugin"] == "store"]
        say("RENDERED", json.dumps([len(out.payload["messages"]), faults, s.unsaved]))

asyncio.run(main(sys.argv[1]))
"""


async def test_a_file_size_limit_raises_from_save_and_damages_nothing(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::RuntimeWarning", "-c", FSIZE_CHILD, str(tmp_path)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["SAVE"].startswith("27 ") and "File too large" in lines["SAVE"]
    assert "file size limit was reached" in lines["SAVE"]
    n, faults, unsaved = json.loads(lines["RENDERED"])
    assert faults == ["append", "append"] and unsaved == 1
    assert int(n) >= 3  # it rendered, with the messages only memory holds
    store = FileStore(tmp_path)
    branch = store.branch("s7")
    assert store.problems == []  # the failed appends cut their partial bytes off again
    assert branch[-1].data["message"]["blocks"][0]["text"].startswith("a question that")
    assert len(branch) == 10  # 3 turns of 3, and the one that fit under the limit
    # restore: the acknowledged state plus the stored message after it
    engine = ContextEngine("gpt-4o", Budget(total=6000), store=store)
    at = await engine.load("s7", snapshot=store.snapshots("s7")[-1].id)
    assert at is not None
    at.persist = False
    assert payload_hash((await at.render()).payload) == lines["ACKED"]
    restored = await engine.restore("s7")
    assert restored.payload["messages"][-1]["content"].startswith("a question that")


@pytest.mark.parametrize("with_block", [True, False])
def test_a_blocking_session_that_fails_to_open_closes_its_event_loop(
    tmp_path: Path, with_block: bool
) -> None:
    """Its loop stayed open (an epoll descriptor and a socket pair each time, and a
    ResourceWarning when collected): a ``with`` block whose ``__enter__`` raised never
    reaches ``__exit__``, and the caller of ``open()`` got no session to close."""
    engine = _engine(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sync = engine.session_sync("../escape")
        loop = sync._runner.loop
        with pytest.raises(SessionIdError, match="session id"):
            if with_block:
                with sync:
                    pass  # pragma: no cover - never entered
            else:
                sync.open()
        assert loop.is_closed()
        with pytest.raises(CtxEngineError, match=r"'\.\./escape' is closed"):
            sync.open()
        sync.close()  # still idempotent
        del sync, loop
        gc.collect()
    assert not [w for w in caught if "unclosed" in str(w.message)]
    engine.close()


def test_a_blocking_session_saves_and_checkpoints(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.session_sync("s8") as s:
        assert s.checkpoint() is None  # nothing rendered yet
        s.extend([Message.user("hi")])
        s.save()
        out = s.render()
        info = s.checkpoint()
        assert info is not None and info.meta["payload_hash"] == payload_hash(out.payload)
    engine.close()
    assert [e.id for e in FileStore(tmp_path).branch("s8")] == [info.leaf_id]


class _OwnStore:
    """A store of one's own, by delegation: every method the engine calls, no ``problems``
    list (optional in the protocol's use by the engine)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name == "problems":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_of_ones_own_without_problems_opens_renders_and_resumes(tmp_path: Path) -> None:
    import anyio

    store = _OwnStore(FileStore(tmp_path))
    assert not hasattr(store, "problems")

    async def main() -> tuple[int, int]:
        engine = ContextEngine("gpt-4o", Budget(total=8_000), store=store)  # type: ignore[arg-type]
        async with engine.session("own") as s:
            await s.user_message("hello there, check module_1.py")
            first = await s.render()
        async with engine.session("own") as again:
            second = await again.render()
        return len(first.payload["messages"]), len(second.payload["messages"])

    first, second = anyio.run(main)
    assert first == second >= 1


@pytest.mark.parametrize(
    ("timeout", "error", "named"),
    [
        ("x", ConfigTypeError, "timeout is 'x' (str); expected a number of seconds >= 0 or None"),
        (True, ConfigTypeError, "timeout is True (bool)"),
        (-1, ConfigError, "timeout is -1; expected a number of seconds >= 0 or None"),
        (float("nan"), ConfigError, "timeout is nan"),
    ],
)
async def test_checkpoint_flush_and_close_refuse_a_timeout_that_is_not_seconds(
    tmp_path: Path, timeout: object, error: type[Exception], named: str
) -> None:
    """checkpoint(timeout="x") was taken: it returned the snapshot when it was already
    written, and failed with a bare TypeError in the writer's wait only when it was not."""
    engine = _engine(tmp_path)
    async with engine.session("s9") as s:
        await s.user_message("hi")
        await s.render()
        assert await s.checkpoint(timeout=5) is not None  # written: the timeout is not used
        with pytest.raises(error) as info:
            await s.checkpoint(timeout=timeout)  # type: ignore[arg-type]
        assert str(info.value).startswith(named)
        with pytest.raises(error, match="timeout is"):
            engine.flush(timeout)  # type: ignore[arg-type]
        with pytest.raises(error, match="timeout is"):
            engine.close(timeout)  # type: ignore[arg-type]
    assert engine.writer is not None and engine.flush(5)  # the refused close left it running
    engine.close()
    sync = engine.session_sync("s10")
    with sync, pytest.raises(error, match="timeout is"):
        sync.checkpoint(timeout)  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["user_message", "extend", "ingest"])
async def test_a_lone_surrogate_is_stored_as_the_session_holds_it(tmp_path: Path, how: str) -> None:
    # the session repairs it to U+FFFD on entry; the store got the raw message, could not
    # encode it, and every later save (and render, and close) failed with it queued
    call = ToolCall("c\ud800", "re\udc00ad", {"path": "a\ud800.py"})
    bad = [
        Message.user("bad \ud800 text"),
        Message.assistant("", [call]),
        Message.tool("c\ud800", "out \udfff put"),
    ]
    engine = _engine(tmp_path)
    async with engine.session("sur") as s:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a store fault is a RuntimeWarning
            if how == "user_message":
                await s.user_message("bad \ud800 text")
            elif how == "extend":
                s.extend(bad)
                await s.save()
            else:
                await s.ingest(bad)
            out = await s.render()
        assert s.unsaved == 0 and not out.report.faults
        held = s.messages
    engine.flush()
    texts = [e.data["message"] for e in FileStore(tmp_path).branch("sur")]
    assert "\ufffd" in json.dumps(texts, ensure_ascii=False)
    async with _engine(tmp_path).session("sur") as again:
        assert again.messages == held
        assert (await again.render()).payload == out.payload


async def test_session_messages_is_a_copy_appending_to_it_changes_nothing(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    async with engine.session("copy") as s:
        await s.user_message("hello")
        held = s.messages
        held.append(Message.user("not added"))
        assert [m.text for m in s.messages] == ["hello"] and s.messages is not s.messages
        out = await s.render()
    async with _engine(tmp_path).session("copy") as again:
        assert [m.text for m in again.messages] == ["hello"]
        assert (await again.render()).payload == out.payload


async def test_calls_of_one_session_at_once_save_in_turn(tmp_path: Path) -> None:
    # each save read the leaf; the second's append, refused on the first's new leaf, was taken
    # for another writer's: its message was not stored when its call returned
    import anyio

    engine = _engine(tmp_path)
    late: list[str] = []
    async with engine.session("gather") as s:
        await s.user_message("hello")

        async def say(text: str) -> None:
            await s.user_message(text)
            if not any(
                e.data["message"]["blocks"][0]["text"] == text
                for e in FileStore(tmp_path).branch("gather")
            ):
                late.append(text)

        for r in range(5):
            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(say, f"m{r}.{i}")
        out = await s.render()
    assert late == [] and not out.report.faults
    assert len(FileStore(tmp_path).branch("gather")) == 21


@pytest.mark.parametrize("kind", ["file", "redis"])
async def test_a_session_deleted_after_close_stays_deleted(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    # close returned with the last render's snapshot still queued: written after the delete,
    # it brought the session back (listed, a snapshot readable, no transcript)
    import uuid

    from ctxengine.store import RedisStore

    if kind == "file":
        store: Store = FileStore(tmp_path)
    else:
        url = request.getfixturevalue("redis_url")
        store = RedisStore(url, prefix=f"t{uuid.uuid4().hex[:8]}")
    engine = ContextEngine("gpt-4o", Budget(total=3000), store=store)
    for i in range(5):
        async with engine.session(f"gone{i}") as s:
            await s.user_message("secret data " * 200)
            await s.render()
        assert store.delete(f"gone{i}")
    engine.flush()
    assert store.sessions() == [] and not any(store.snapshots(f"gone{i}") for i in range(5))
    engine.close()


@pytest.mark.parametrize("field", ["meta", "id", "signature", "image"])
async def test_a_lone_surrogate_outside_the_text_is_stored_repaired(
    tmp_path: Path, field: str
) -> None:
    # the blocks' text was repaired on entry, a message's meta, id, a thinking signature or
    # an image's name not: the store refused them, and every later save failed
    from ctxengine.transcript import Image, Text, Thinking

    bad = "x\ud800y"
    if field == "meta":
        message = Message("user", (Text("hi"),), meta={"k": bad, bad: [bad]})
    elif field == "id":
        message = Message("user", (Text("hi"),), id=bad)
    elif field == "signature":
        message = Message("assistant", (Text("hi"), Thinking("t", signature=bad)))
    else:
        message = Message("user", (Text("hi"), Image("image/png", data="aGk=", name=bad)))
    async with _engine(tmp_path).session("sur2") as s:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            await s.ingest([Message.user("first"), message])
            out = await s.render()
        assert s.unsaved == 0 and not out.report.faults
    stored = json.dumps([e.data for e in FileStore(tmp_path).branch("sur2")], ensure_ascii=False)
    assert "x\ufffdy" in stored


async def test_a_second_close_at_once_fires_the_close_hook_once(tmp_path: Path) -> None:
    import anyio

    fired: list[str] = []

    class Closing:
        name, version, priority, enabled = "closing", "1", 10, True

        async def collect(self, scene: object) -> list[object]:
            return []

        async def on_session_close(self, event: object) -> None:
            fired.append("closed")

    engine = ContextEngine(
        "gpt-4o", Budget(total=3000), store=FileStore(tmp_path), plugins=[Closing()]
    )
    s = engine.session("twice")
    session = await s.__aenter__()
    await session.user_message("hi")
    await session.render()
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.close)
        tg.start_soon(session.close)
    assert fired == ["closed"]
