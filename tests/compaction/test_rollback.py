"""A failed, empty or timed-out compaction writes nothing: the session is as before it, in
memory and in the store (no rewrite or branch, the same leaf, no snapshot of a summary), in a
render, in ``Session.compact()`` and in ``Session.run``'s overflow ladder."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, FileStore, Session
from ctxengine.compaction import CompactionConfig

from .helpers import Empty, Failing, Hanging
from .test_engine_compaction import rules, turn

pytestmark = pytest.mark.anyio

#: A short timeout: the hanging summarizer never answers, so each compaction times out.
SHORT = CompactionConfig(timeout=0.2, chunk_retries=0, backoff=0.0)
OVERFLOW = "Error code: 400 - prompt is too long: 208423 tokens > 200000 maximum"


def _store_view(store: FileStore, sid: str) -> tuple[list[Any], str | None, list[Any]]:
    """Everything the store holds of a session: entries, leaf, snapshot index."""
    entries = [(e.id, e.parent_id, e.kind, dict(e.data)) for e in store.entries(sid)]
    snapshots = [(i.id, i.hash, i.leaf_id) for i in store.snapshots(sid)]
    return entries, store.leaf(sid), snapshots


def _memory_view(s: Any) -> tuple[Any, ...]:
    state = s.state
    return (
        list(state.messages),
        sorted(state.items),
        set(state.compacted),
        state.summary,
        s.leaf_id,
    )


def test_the_default_timeout_is_sixty_seconds() -> None:
    assert CompactionConfig().timeout == 60.0
    assert ContextEngine("gpt-4o", Budget(total=2000)).compaction.timeout == 60.0


@pytest.mark.parametrize("summarizer", [Hanging, Failing, Empty], ids=lambda c: c.__name__)
async def test_session_compact_that_fails_leaves_memory_and_store_as_before(
    tmp_path: Path, summarizer: type
) -> None:
    store = FileStore(tmp_path / "store")
    # a low-water mark of 0.3: Session.compact() has work while the renders fit the budget
    config = dataclasses.replace(SHORT, low_water=0.3)
    engine = ContextEngine(
        "gpt-4o", Budget(total=8000), summarizer=summarizer(), compaction=config, store=store
    )
    async with engine.session("s") as s:
        s.add(rules())
        for i in range(12):  # under the budget: renders snapshot, nothing compacts
            await turn(
                s, i, "\n".join(f"FAILED test_{i}_{k} - assert {k} == {i}" for k in range(30))
            )
            out = await s.render("anthropic")
            assert not out.report.compactions
        await s.save()
        assert engine.flush(5.0)
        before_store, before_memory = _store_view(store, "s"), _memory_view(s)
        assert before_store[2], "the renders were snapshotted"
        result = await s.compact()
        assert not result.ok and result.summary == "" and result.message is None
        if summarizer is Hanging:
            assert result.error is not None and "timed out after 0.2 s" in result.error
        assert engine.flush(5.0)
        assert _memory_view(s) == before_memory
        assert _store_view(store, "s") == before_store
        # the next render sends the whole history, as before the attempt
        out = await s.render("anthropic")
        assert "Summary of the earlier conversation" not in str(out.payload)
    assert not any(e.kind == "rewrite" for e in store.entries("s"))


async def test_a_render_whose_compaction_times_out_records_no_summary_in_the_store(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "store")
    engine = ContextEngine(
        "gpt-4o", Budget(total=1500), summarizer=Hanging(), compaction=SHORT, store=store
    )
    timed_out = deferred = 0
    async with engine.session("s") as s:
        s.add(rules())
        for i in range(36):
            await turn(s, i)
            out = await s.render("openai")
            assert out.tokens <= 1500  # the plan's own trims stand in for the failed summary
            errors = [c["error"] for c in out.report.compactions if not c["ok"]]
            timed_out += sum("timed out after 0.2 s" in (e or "") for e in errors)
            deferred += sum("compaction deferred after failure" in (e or "") for e in errors)
            assert all(c["ok"] is False for c in out.report.compactions)
            assert s.state.summary is None and not s.state.compacted
            await s.save()
            assert engine.flush(5.0)
            messages = [e for e in store.entries("s") if e.kind == "message"]
            assert store.leaf("s") == messages[-1].id == s.leaf_id  # no branch, no rewrite
            assert len(messages) == len(s.messages)
            last = store.load_snapshot("s")
            assert last is not None
            state = last.content["state"]
            assert state["summary"] is None and state["compacted"] == {"messages": [], "ids": []}
    # the budget filled and compaction was tried (and timed out), then backed off
    assert timed_out >= 2 and deferred >= 5
    assert {e.kind for e in store.entries("s")} == {"message"}


async def test_a_restored_session_keeps_its_compaction_backoff() -> None:
    """The backoff after failed compactions is in the session state's JSON (a snapshot): a
    session restored after a crash waits as the one before it would have, rather than pay
    the failing summarizer's timeout on its first render."""
    engine = ContextEngine("gpt-4o", Budget(total=1500), summarizer=Failing(), compaction=SHORT)
    async with engine.session("s") as s:
        s.add(rules())
        for i in range(30):
            await turn(s, i)
            await s.render("openai")
            if s.state.compaction_backoff is not None:
                break
        backoff = s.state.compaction_backoff
        assert backoff is not None and backoff[0] >= 1
        data = json.loads(json.dumps(s.state.to_json()))
        await turn(s, 99)
        expected = await s.render("openai")
    assert data["compaction_backoff"] == list(backoff)
    restored = Session.from_state(engine, engine.state_from_json(data))
    assert restored.state.compaction_backoff == backoff
    await turn(restored, 99)
    out = await restored.render("openai")
    deferred = [c["error"] for c in out.report.compactions if not c["ok"]]
    assert deferred and "compaction deferred after failure" in deferred[0]
    assert deferred == [c["error"] for c in expected.report.compactions if not c["ok"]]
    # a snapshot written before the field existed restores with no backoff
    del data["compaction_backoff"]
    assert engine.state_from_json(data).compaction_backoff is None


async def test_session_run_reports_a_timed_out_compaction_and_rolls_it_back(
    tmp_path: Path,
) -> None:
    class Model:
        def __init__(self) -> None:
            self.calls = 0

        async def __call__(self, payload: dict[str, Any]) -> str:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError(OVERFLOW)
            return "accepted"

    store = FileStore(tmp_path / "store")
    engine = ContextEngine(
        "gpt-4o", Budget(total=2400), summarizer=Hanging(), compaction=SHORT, store=store
    )
    async with engine.session("s") as s:
        s.add(rules())
        for i in range(30):
            await turn(s, i)
        await s.save()
        before = _memory_view(s)
        answer, out = await s.run(Model())
        assert answer == "accepted"
        steps = out.report.recovery
        assert [r["step"] for r in steps] == ["render", "compact"]
        assert steps[0]["compactions"] == []  # the first render fitted: nothing compacted
        compact_step = steps[-1]
        assert compact_step["ok"] and compact_step["budget"] < 2400
        assert compact_step["compactions"], "the smaller budget made the render compact"
        assert all(
            not c["ok"] and "timed out after 0.2 s" in c["error"]
            for c in compact_step["compactions"]
        )
        assert _memory_view(s) == before  # nothing summarized, nothing forgotten
        await s.save()
        assert engine.flush(5.0)
        assert {e.kind for e in store.entries("s")} == {"message"}
        assert store.leaf("s") == s.leaf_id


class _Editing:
    """Edits the messages it is handed in place (meta, a call's arguments), then fails or
    answers."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    async def summarize(self, messages: Any, instructions: str) -> str:
        for m in messages:
            m.meta["touched"] = True
            for c in m.tool_calls:
                c.arguments["path"] = "/etc/shadow"
        if self.fail:
            raise ValueError("model unavailable")
        return "The user asked for several files to be read; each was read and explained."


@pytest.mark.parametrize("fail", [True, False])
async def test_a_summarizer_editing_what_it_is_handed_changes_no_history(fail: bool) -> None:
    from ctxengine.transcript import Message, ToolCall

    engine = ContextEngine(
        "gpt-4o", Budget(total=3000), summarizer=_Editing(fail), compaction=CompactionConfig()
    )
    async with engine.session("edit") as s:
        for i in range(30):
            call = ToolCall(f"c{i}", "read_file", {"path": f"/src/f{i}.py"})
            s.extend(
                [
                    Message.user(f"task {i}: " + "details " * 40),
                    Message.assistant(f"on {i}", [call]),
                    Message.tool(f"c{i}", "line of code\n" * 60, name="read_file"),
                    Message.assistant(f"done {i} " + "explanation " * 30),
                ]
            )
        before = json.dumps([m.tool_calls[0].arguments for m in s.messages if m.tool_calls])
        await s.user_message("final?")
        out = await s.render()
        assert out.report.compactions and out.report.compactions[0]["ok"] is (not fail)
        after = json.dumps([m.tool_calls[0].arguments for m in s.messages if m.tool_calls])
        assert after == before and not any(m.meta.get("touched") for m in s.messages)
        for provider in ("anthropic", "gemini", "openai"):
            assert "/etc/shadow" not in json.dumps((await s.render(provider)).payload)


async def test_a_subclass_that_keeps_summarize_reads_the_session_own_messages() -> None:
    # handed copies, its reading cache (keyed by identity) never hit: a cold render 2.5x slower
    from ctxengine.compaction import ExtractiveSummarizer
    from ctxengine.compaction.protocol import call_summarizer
    from ctxengine.transcript import Message

    class Same(ExtractiveSummarizer):
        pass

    class Own(ExtractiveSummarizer):
        async def summarize(self, messages: Any, instructions: str = "", **kw: Any) -> str:
            got.append(messages)
            return "The user asked a question and it was answered in full detail."

    msgs = [Message.user("a question about the build"), Message.assistant("an answer")]
    got: list[Any] = []
    await call_summarizer(Own(), msgs, instructions="x")
    assert got[0][0] is not msgs[0] and got[0][0] == msgs[0]  # its own copies
    original = ExtractiveSummarizer.summarize

    async def spy(self: Any, messages: Any, **kw: Any) -> str:
        got.append(messages)
        return await original(self, messages, **kw)

    ExtractiveSummarizer.summarize = spy  # type: ignore[method-assign]
    try:
        await call_summarizer(Same(), msgs, instructions="x")
    finally:
        ExtractiveSummarizer.summarize = original  # type: ignore[method-assign]
    assert got[1][0] is msgs[0]
