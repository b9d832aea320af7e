"""The cyclic collector during a compaction's summaries: paused for the extractive summarizer
(whose calls never wait), resumed while a retry waits, never paused for another summarizer,
and running again afterwards, whatever the outcome."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from ctxengine.compaction import CompactionConfig, ExtractiveSummarizer, compact
from ctxengine.compaction import pipeline as P
from ctxengine.compaction.facts import PROMOTE_AT, paused_collector
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, ToolCall

pytestmark = pytest.mark.anyio
COUNT = get_tokenizer("o200k_base").count


def _history(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        out.append(Message.user(f"request {i}: check module_{i}.py for the bug"))
        out.append(Message.assistant("", [ToolCall(f"c{i}", "read", {"path": f"m_{i}.py"})]))
        out.append(Message.tool(f"c{i}", f"def f_{i}(): return {i}"))
        out.append(Message.assistant(f"module_{i} is fine; I'll check the next one"))
    return out


async def test_the_extractive_summaries_run_with_the_collector_paused(
    summaries_collector: list[bool],
) -> None:
    seen = summaries_collector
    assert gc.isenabled()
    result = await compact(
        _history(40), max_tokens=400, summarizer=ExtractiveSummarizer(tokenizer=COUNT)
    )
    assert result.ok and seen and not any(seen)
    assert gc.isenabled()


class _Other:
    """A summarizer of its own (it may wait on a model): the collector keeps running."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    async def summarize(
        self, messages: Sequence[Message], *, instructions: str, max_tokens: int | None
    ) -> str:
        self.seen.append(gc.isenabled())
        await anyio.sleep(0)
        return "The user asked to check the modules; each was fine."


class _Sub(ExtractiveSummarizer):
    """A subclass may override what it does: not taken for the extractive summarizer."""

    async def summarize(
        self, messages: Sequence[Message], instructions: str = "", *, max_tokens: int | None = None
    ) -> str:
        self.seen.append(gc.isenabled())
        return await super().summarize(messages, instructions, max_tokens=max_tokens)

    seen: list[bool]


@pytest.mark.parametrize("make", [_Other, lambda: _Sub(tokenizer=COUNT)])
async def test_other_summarizers_run_with_the_collector(make: Any) -> None:
    summarizer = make()
    summarizer.seen = []
    result = await compact(_history(40), max_tokens=400, summarizer=summarizer)
    assert result.ok and summarizer.seen and all(summarizer.seen)
    assert gc.isenabled()


async def test_a_fault_in_the_extractive_prose_fails_the_compaction_and_resumes_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The extractive summarizer itself is read once per stretch (no retry: it is
    deterministic); a fault in it is the compaction's error, never an exception of the
    caller's, and the collector runs again afterwards."""
    calls: list[bool] = []

    def broken(self: Any, messages: Sequence[Message]) -> str:
        calls.append(gc.isenabled())
        raise RuntimeError("always fails")

    monkeypatch.setattr(ExtractiveSummarizer, "summary_prose", broken)
    failed = await compact(
        _history(40),
        max_tokens=400,
        summarizer=ExtractiveSummarizer(tokenizer=COUNT),
        config=CompactionConfig(backoff=0.0, chunk_retries=3),
    )
    assert not failed.ok and "always fails" in (failed.error or "")
    assert failed.stats["retries"] == 0 and calls and not any(calls)
    assert gc.isenabled()


async def test_a_retry_of_another_summarizer_waits_with_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A summarizer that may wait is retried with backoff, the collector running during
    its calls and waits alike."""
    calls: list[bool] = []
    waits: list[bool] = []
    summarize = ExtractiveSummarizer.summarize

    async def flaky(
        self: Any, messages: Sequence[Message], instructions: str = "", **kw: Any
    ) -> str:
        calls.append(gc.isenabled())
        if len(calls) == 1:
            raise RuntimeError("first call fails")
        return await summarize(self, messages, instructions, **kw)

    async def sleep(delay: float) -> None:
        waits.append(gc.isenabled())

    monkeypatch.setattr(_Sub, "summarize", flaky)
    monkeypatch.setattr(P.anyio, "sleep", sleep)
    sub = _Sub(tokenizer=COUNT)
    sub.seen = []
    result = await compact(
        _history(40), max_tokens=400, summarizer=sub, config=CompactionConfig(backoff=0.0)
    )
    assert result.ok and result.stats["retries"] == 1
    assert waits == [True] and len(calls) >= 2 and all(calls)
    assert gc.isenabled()


def test_objects_made_while_paused_are_old_when_the_collector_resumes() -> None:
    """What a long paused step made is what it keeps: it goes to the oldest generation on
    resume, so the next young collections do not scan it again, and the collector is back on."""

    gc.collect()
    frozen = gc.get_freeze_count()  # some interpreters (3.12) start with objects frozen
    with paused_collector():
        made = [[i] for i in range(PROMOTE_AT + 1_000)]
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    old = {id(o) for o in gc.get_objects(generation=2)}
    if frozen:  # theirs stay frozen: the objects stay young (the test below)
        assert not any(id(o) in old for o in made[:100])
    else:
        assert all(id(o) in old for o in made[:100])
        assert gc.get_count()[0] < 100


def test_a_step_past_the_young_threshold_runs_no_young_collection_on_resume() -> None:
    """A step that made more objects than the collector's first threshold (loading the
    history of a 1,000-message session makes about 1,300) would have run a young collection
    on them, had the collector been on: they count as old, and none runs when it resumes."""
    gc.collect()
    frozen = gc.get_freeze_count()
    runs: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.callbacks.append(watch)
    try:
        with paused_collector():
            made = [[i] for i in range(gc.get_threshold()[0] + 300)]
        after = [[i] for i in range(100)]  # allocations that would start a young collection
    finally:
        gc.callbacks.remove(watch)
    old = {id(o) for o in gc.get_objects(generation=2)}
    if frozen:  # a process's own frozen objects stay frozen: the step's stay young
        assert id(made[0]) not in old
    else:
        assert runs == [] and id(made[0]) in old and id(after[0]) not in old


def test_a_short_step_leaves_its_objects_young() -> None:
    """A step that made few objects resumes the collector as it was: they stay young and are
    collected the usual way (a long-lived process doing many small compactions)."""
    gc.collect()
    assert PROMOTE_AT > 500
    with paused_collector():
        made = [[i] for i in range(200)]
    assert gc.isenabled()
    old = {id(o) for o in gc.get_objects(generation=2)}
    assert id(made[0]) not in old and id(made[-1]) not in old


def test_a_process_that_froze_objects_keeps_them_frozen() -> None:
    """A process that called ``gc.freeze`` itself (a server before forking) keeps its frozen
    objects frozen across a paused step; that step's objects then stay young, as before."""

    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with paused_collector():
            made = [[i] for i in range(PROMOTE_AT + 1_000)]
        assert gc.isenabled() and gc.get_freeze_count() == frozen
        old = {id(o) for o in gc.get_objects(generation=2)}
        assert id(made[0]) not in old
    finally:
        gc.unfreeze()


def test_a_function_paused_as_a_decorator_pauses_per_call_even_when_it_recurses_or_raises() -> None:
    seen: list[bool] = []

    @paused_collector()
    def step(n: int) -> int:
        seen.append(gc.isenabled())
        if n == 0:
            raise KeyError("done")
        return step(n - 1)

    assert gc.isenabled()
    with pytest.raises(KeyError):
        step(3)
    assert seen == [False] * 4 and gc.isenabled()
    assert step.__name__ == "step"
    gc.disable()
    try:  # the collector was not running: it is not started either
        with pytest.raises(KeyError):
            step(0)
        assert not gc.isenabled()
    finally:
        gc.enable()
