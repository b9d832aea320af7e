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


async def test_a_retry_waits_with_the_collector_and_the_pause_ends_after_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
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

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", flaky)
    monkeypatch.setattr(P.anyio, "sleep", sleep)
    config = CompactionConfig(backoff=0.0)
    result = await compact(
        _history(40),
        max_tokens=400,
        summarizer=ExtractiveSummarizer(tokenizer=COUNT),
        config=config,
    )
    assert result.ok and result.stats["retries"] == 1
    assert waits == [True] and len(calls) >= 2 and not any(calls)
    assert gc.isenabled()

    async def broken(
        self: Any, messages: Sequence[Message], instructions: str = "", **kw: Any
    ) -> str:
        raise RuntimeError("always fails")

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", broken)
    failed = await compact(
        _history(40),
        max_tokens=400,
        summarizer=ExtractiveSummarizer(tokenizer=COUNT),
        config=CompactionConfig(backoff=0.0, chunk_retries=1),
    )
    assert not failed.ok and "always fails" in (failed.error or "")
    assert gc.isenabled()
