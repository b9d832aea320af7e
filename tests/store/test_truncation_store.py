"""A persistent truncation (Session.run's overflow recovery) is stored as a rewrite branch, so
a reopened session holds the truncated messages, as the live one does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, Session
from ctxengine.errors import StoreConflictError, StoreError
from ctxengine.store import FileStore
from ctxengine.store.codec import message_to_json
from ctxengine.transcript import Message, ToolCall

pytestmark = pytest.mark.anyio

OVERFLOW = "Error code: 400 - prompt is too long: 208423 tokens > 200000 maximum"
BUDGET = 16000
BIG = "line\n" * 9000  # far above what the truncation keeps of one tool result at this budget


class Model:
    """Rejects the first call as too long (running ``before_reject`` first), accepts the rest."""

    def __init__(self, before_reject: Any = None) -> None:
        self.calls = 0
        self.before_reject = before_reject

    async def __call__(self, payload: dict[str, Any]) -> str:
        self.calls += 1
        if self.calls == 1:
            if self.before_reject is not None:
                self.before_reject()
            raise RuntimeError(OVERFLOW)
        return "accepted"


class Flaky:
    """A FileStore whose appends fail while ``failing`` is set (a disk that comes back)."""

    def __init__(self, root: Path) -> None:
        self.inner = FileStore(root)
        self.problems = self.inner.problems
        self.failing = False

    def _check(self) -> None:
        if self.failing:
            raise StoreError("cannot append: [Errno 28] No space left on device", errno=28)

    def append(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self.inner.append(*args, **kwargs)

    def append_if(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self.inner.append_if(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _engine(store: Any) -> ContextEngine:
    return ContextEngine("gpt-4o", Budget(total=BUDGET), store=store)


async def _fill(s: Session, n: int = 6) -> None:
    for i in range(n):
        await s.user_message(f"step {i}: read file_{i}.py")
        await s.assistant_message("", [ToolCall(f"c{i}", "read", {"path": f"file_{i}.py"})])
        await s.tool_result(f"c{i}", BIG if i == n - 2 else f"contents {i}\n", name="read")


def _json(messages: list[Message]) -> list[dict[str, Any]]:
    return [message_to_json(m) for m in messages]


def _longest_result(messages: list[Message]) -> int:
    return max(len(m.text) for m in messages if m.role == "tool")


async def _reopened(store: Any, session_id: str) -> Session:
    """Session ``session_id`` loaded anew from ``store`` (another process's view of it)."""
    again = await _engine(store).load(session_id)
    assert again is not None
    return again


async def test_a_truncation_with_unsaved_messages_is_stored_as_the_live_session_holds_it(
    tmp_path: Path,
) -> None:
    """The rewrite was skipped while messages were unsaved, and those were saved later as they
    were before the cut: the reopened session had the full tool result back."""
    store = Flaky(tmp_path)
    engine = _engine(store)
    async with engine.session("t") as s:
        await _fill(s, 3)
        await s.user_message("now read the big one")
        await s.assistant_message("", [ToolCall("big", "read", {"path": "big.txt"})])
        store.failing = True  # the disk fills up: the big result stays unsaved
        with pytest.warns(RuntimeWarning, match="No space left"):
            await s.tool_result("big", BIG, name="read")
        assert s.unsaved == 1

        def disk_back() -> None:
            store.failing = False

        with pytest.warns(RuntimeWarning, match="No space left"):  # run's first render saves
            answer, out = await s.run(Model(disk_back), max_compactions=0)
        assert answer == "accepted"
        assert [r["step"] for r in out.report.recovery][:2] == ["render", "truncate_tool_results"]
        assert s.unsaved == 0
        live = list(s.messages)
        assert _longest_result(live) < len(BIG)  # the live session holds the cut result
    engine.close()
    again = await _reopened(FileStore(tmp_path), "t")
    assert _json(again.messages) == _json(live)
    assert again.leaf_id == s.leaf_id


async def test_a_truncation_over_a_message_left_out_on_resume_is_stored(tmp_path: Path) -> None:
    """The rewrite was skipped when the stored branch held another number of messages than the
    session (here a malformed one resume left out): the reopened session was not truncated."""
    engine = _engine(FileStore(tmp_path))
    async with engine.session("m") as s:
        await _fill(s)
    engine.close()
    path = tmp_path / "sessions" / "m" / "transcript.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"role":"assistant"', '"role":"wizard"')  # malformed, kept
    path.write_text("\n".join(lines) + "\n")
    engine = _engine(FileStore(tmp_path))
    async with engine.session("m") as s:
        assert len(s.messages) == len(lines) - 1  # the malformed one is left out (a warning)
        answer, out = await s.run(Model(), max_compactions=0)
        assert answer == "accepted" and out.report.recovery[1]["step"] == "truncate_tool_results"
        live = list(s.messages)
        assert _longest_result(live) < len(BIG)
        assert not [f for f in out.report.faults if f["hook"] == "rewrite"]
    engine.close()
    store = FileStore(tmp_path)
    again = await _reopened(store, "m")
    assert _json(again.messages) == _json(live)
    rewrites = [e for e in store.branch("m") if e.kind == "rewrite"]
    assert [e.data["reason"] for e in rewrites] == ["truncate_tool_results"]
    assert rewrites[0].parent_id == store.entries("m")[0].id  # from the last message both hold


@pytest.mark.parametrize("call", ["truncate", "rebase"])
async def test_a_rewrite_or_rebase_waits_for_a_save_of_the_session_in_progress(
    tmp_path: Path, call: str
) -> None:
    """Both wrote to the store beside a save of the same session (a save's leaf check and the
    rewrite's could both pass on one leaf); they take the session's save lock as saves do."""
    import anyio

    store = FileStore(tmp_path)
    engine = _engine(store)
    async with engine.session("w") as s:
        await _fill(s)
        await s.user_message("one more")
        before = len(store.branch("w"))
        done = anyio.Event()

        async def go() -> None:
            if call == "truncate":
                assert await s._truncate_results(BUDGET, [])
            else:
                await s.rebase()
            done.set()

        if call == "rebase":  # another writer appended: rebase re-reads, then appends
            other = _engine(FileStore(tmp_path))
            async with other.session("w") as o:
                await o.user_message("the other writer's message")
            other.close()
            before = len(store.branch("w"))
        await s._save_lock.acquire()  # a save of the session in progress
        s.extend([Message.user("queued while the save runs")])
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await anyio.sleep(0.2)
            assert not done.is_set() and len(store.branch("w")) == before
            s._save_lock.release()
        assert done.is_set() and s.unsaved == 0
        kinds = [e.kind for e in store.branch("w")]
        assert kinds.count("rewrite") == (call == "truncate")
        live = list(s.messages)
        if call == "rebase":
            texts = [m.text for m in live]
            assert texts[-2:] == ["the other writer's message", "queued while the save runs"]
    engine.close()
    again = await _reopened(FileStore(tmp_path), "w")
    assert _json(again.messages) == _json(live)


async def test_a_message_added_while_a_truncation_waits_is_stored(tmp_path: Path) -> None:
    """The truncation read the messages and swapped the state before it waited for the save
    lock, then took every queued message as part of its rewrite: one added meanwhile was
    dropped from the queue and never stored."""
    import anyio

    store = FileStore(tmp_path)
    engine = _engine(store)
    async with engine.session("w") as s:
        await _fill(s)

        async def go() -> None:
            assert await s._truncate_results(BUDGET, [])

        await s._save_lock.acquire()  # a save of the session in progress
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await anyio.sleep(0.1)
            s.extend([Message.user("added while the rewrite waited")])
            s._save_lock.release()
        await s.save()
        live = list(s.messages)
        assert live[-1].text == "added while the rewrite waited"
        assert _longest_result(live) < len(BIG)
    engine.close()
    again = await _reopened(FileStore(tmp_path), "w")
    assert _json(again.messages) == _json(live)


@pytest.mark.parametrize("cut", ["inside a line", "at a line's end"])
async def test_a_truncation_cut_short_on_disk_reopens_on_the_branch_before_it(
    tmp_path: Path, cut: str
) -> None:
    """The rewrite is one append (its marker, then the new branch). A process killed inside
    that write left its start on disk: the reopened session ended on those first entries,
    the latest request gone, and only the torn line was reported."""
    engine = _engine(FileStore(tmp_path))
    async with engine.session("k") as s:
        await _fill(s)
        await s.user_message("FINAL REQUEST: sum up file_4.py")
        before = list(s.messages)  # all acknowledged by the store
        _, out = await s.run(Model(), max_compactions=0)
        assert out.report.recovery[1]["step"] == "truncate_tool_results"
        s.persist = False  # no answer stored: the store holds the rewrite last
    engine.close()
    path = tmp_path / "sessions" / "k" / "transcript.jsonl"
    lines = path.read_bytes().split(b"\n")[:-1]
    at = [json.loads(x)["kind"] for x in lines].index("rewrite")
    assert json.loads(lines[at])["batch"] == len(lines) - at > 3
    tail = lines[at + 2][:20] if cut == "inside a line" else b""
    path.write_bytes(b"\n".join([*lines[: at + 2], tail]))  # the marker and one message

    engine = _engine(FileStore(tmp_path))
    async with engine.session("k") as s:
        assert _json(s.messages) == _json(before)
        out = await s.render()
        faults = [f["message"] for f in out.report.faults if f["plugin"] == "store"]
        assert any(
            f"line {at + 1} starts an append of {len(lines) - at} entries of which only 2" in m
            for m in faults
        ), faults
        await s.user_message("one more")  # saved after the branch it holds
        assert s.unsaved == 0
    engine.close()
    again = await _reopened(FileStore(tmp_path), "k")
    assert _json(again.messages) == _json([*before, Message.user("one more")])


class LostReply(Flaky):
    """A FileStore whose next append, once ``armed``, is written and then fails as a dropped
    connection does when the server applied the write before its reply was lost."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.armed = False

    def append_if(self, *args: Any, **kwargs: Any) -> Any:
        written = self.inner.append_if(*args, **kwargs)
        if self.armed:
            self.armed = False
            raise StoreError("cannot append: connection lost while reading the reply")
        return written


@pytest.mark.parametrize("then", ["save", "rebase"])
async def test_a_rewrite_applied_before_its_reply_was_lost_is_found_not_refused(
    tmp_path: Path, then: str
) -> None:
    """The store writes the truncation's rewrite and the reply never comes back: the session
    kept the leaf before it, so every later save was refused as another writer's (the
    session never saved again), and ``rebase()`` stored the queued request a second time.
    The next save, or a rebase, now finds the rewrite whole after its parent and goes on from
    its last entry."""
    store = LostReply(tmp_path)
    engine = _engine(store)
    async with engine.session("r") as s:
        await _fill(s)
        s.extend([Message.user("FINAL REQUEST: sum up file_4.py")])  # queued: the rewrite holds it
        store.armed = True
        with pytest.warns(RuntimeWarning, match="connection lost"):
            assert await s._truncate_results(BUDGET, [])
        assert s.unsaved == 1 and not store.armed  # written, its reply lost
        if then == "rebase":
            await s.rebase()
        else:
            await s.user_message("after the outage")
        assert s.unsaved == 0
        live = list(s.messages)
        assert _longest_result(live) < len(BIG)
        assert [m.text for m in live].count("FINAL REQUEST: sum up file_4.py") == 1
        out = await s.render()
        said = [f["hook"] for f in out.report.faults if f["plugin"] == "store"]
        assert said == ["rewrite"], out.report.faults  # the lost reply, no refusal after it
    engine.close()
    reopened = FileStore(tmp_path)
    again = await _reopened(reopened, "r")
    assert _json(again.messages) == _json(live)
    assert again.leaf_id == s.leaf_id
    assert [e.kind for e in reopened.branch("r")].count("rewrite") == 1


class LostThenDown(LostReply):
    """:class:`LostReply` whose appends also fail while ``failing`` is set (the server still
    down after the one that lost its reply)."""

    def append_if(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().append_if(*args, **kwargs)


async def test_a_rewrite_whose_reply_was_lost_is_found_after_a_save_failed_too(
    tmp_path: Path,
) -> None:
    """The server writes the rewrite and dies before replying, and the message after it is
    saved while the server is still down (a second failure). The session kept only the
    last failed append to look for, the save, which went on after the leaf before the
    rewrite and is not in the store: the rewrite was never found, every later save was
    refused as another writer's, and ``rebase()`` stored the queued request a second time."""
    store = LostThenDown(tmp_path)
    engine = _engine(store)
    async with engine.session("d") as s:
        await _fill(s)
        s.extend([Message.user("FINAL REQUEST: sum up file_4.py")])
        store.armed = True
        with pytest.warns(RuntimeWarning, match="connection lost"):
            assert await s._truncate_results(BUDGET, [])
        store.failing = True
        with pytest.warns(RuntimeWarning, match="No space left"):
            await s.user_message("asked while the store was down")
        store.failing = False
        await s.user_message("asked after it came back")
        assert s.unsaved == 0
        await s.rebase()
        live = list(s.messages)
        assert [m.text for m in live].count("FINAL REQUEST: sum up file_4.py") == 1
    engine.close()
    reopened = FileStore(tmp_path)
    again = await _reopened(reopened, "d")
    assert _json(again.messages) == _json(live)
    assert [e.kind for e in reopened.branch("d")].count("rewrite") == 1


class LostThenUnread(LostReply):
    """:class:`LostReply` whose reads fail while ``failing`` is set."""

    def branch(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self.inner.branch(*args, **kwargs)


@pytest.mark.parametrize("reads", ["work", "fail"])
async def test_a_save_whose_reply_was_lost_is_found_after_a_truncation(
    tmp_path: Path, reads: str
) -> None:
    """A tool result's save is written and its reply lost, then the session truncates the
    result (its rewrite refused: the store's leaf moved) and queues its cut form in its
    place. The next save looked for the failed one's messages in the queue, found the cut
    form there instead, and was refused as another writer's; ``rebase()`` then stored the
    result twice (as written, then cut, an orphan). The truncation now finds the save first
    and writes its rewrite after it; when the store cannot be read then, the next save
    finds it, the cut form standing for the result in the queue (the store keeps the
    result as written, as after any rewrite that failed)."""
    store = LostThenUnread(tmp_path)
    engine = _engine(store)
    async with engine.session("t") as s:
        await _fill(s, 3)
        await s.assistant_message("", [ToolCall("big", "read", {"path": "big.log"})])
        store.armed = True
        with pytest.warns(RuntimeWarning, match="connection lost"):
            await s.tool_result("big", BIG, name="read")
        assert s.unsaved == 1
        store.failing = reads == "fail"
        if reads == "fail":
            with pytest.warns(RuntimeWarning, match="No space left"):
                assert await s._truncate_results(BUDGET, [])
        else:
            assert await s._truncate_results(BUDGET, [])
        store.failing = False
        await s.user_message("next")
        assert s.unsaved == 0
        await s.rebase()
        live = list(s.messages)
        assert [m.role for m in live].count("tool") == 4
        assert _longest_result(live) < len(BIG)
    engine.close()
    again = await _reopened(FileStore(tmp_path), "t")
    assert [m.role for m in again.messages] == [m.role for m in live]
    if reads == "work":
        assert _json(again.messages) == _json(live)


async def test_a_failed_save_is_not_taken_for_another_writers_equal_messages(
    tmp_path: Path,
) -> None:
    """A save fails before the store writes it; another writer then appends a message equal
    to its first one (a "yes"), and one that differs. A store writes an append whole or not
    at all, so that part of the save is another writer's; it was taken for the save's own
    (its "yes" dropped from the queue), and the rebase after the refusal stored only the
    rest."""
    store = Flaky(tmp_path)
    engine = _engine(store)
    async with engine.session("w") as a:
        await a.user_message("hello")
        await a.assistant_message("hi")
        a.extend([Message.user("yes"), Message.assistant("answer A")])
        store.failing = True
        with pytest.raises(StoreError):
            await a.save()
        store.failing = False
        other = _engine(FileStore(tmp_path))
        async with other.session("w") as b:
            await b.user_message("yes")
            await b.assistant_message("answer B")
        other.close()
        with pytest.raises(StoreConflictError):
            await a.save()
        assert a.unsaved == 2
        await a.rebase()
        texts = ["hello", "hi", "yes", "answer B", "yes", "answer A"]
        assert [m.text for m in a.messages] == texts
    engine.close()
    again = await _reopened(FileStore(tmp_path), "w")
    assert [m.text for m in again.messages] == texts
