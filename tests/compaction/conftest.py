"""Fixtures shared by the compaction tests."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import pytest

from ctxengine.compaction import ExtractiveSummarizer
from ctxengine.transcript import Message


@pytest.fixture
def summaries_collector(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the cyclic collector was enabled during each extractive summary, and each
    reading of a stretch's prose by the pipeline (a list the patched
    :meth:`ExtractiveSummarizer.summarize` and :meth:`ExtractiveSummarizer.summary_prose`
    append to)."""
    seen: list[bool] = []
    summarize = ExtractiveSummarizer.summarize
    prose = ExtractiveSummarizer.summary_prose

    async def spy(self: Any, messages: Sequence[Message], instructions: str = "", **kw: Any) -> str:
        seen.append(gc.isenabled())
        return await summarize(self, messages, instructions, **kw)

    def prose_spy(self: Any, messages: Sequence[Message]) -> str:
        seen.append(gc.isenabled())
        return prose(self, messages)

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", spy)
    monkeypatch.setattr(ExtractiveSummarizer, "summary_prose", prose_spy)
    return seen
