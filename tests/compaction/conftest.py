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
    """Whether the cyclic collector was enabled during each extractive summary (a list the
    patched :meth:`ExtractiveSummarizer.summarize` appends to)."""
    seen: list[bool] = []
    summarize = ExtractiveSummarizer.summarize

    async def spy(self: Any, messages: Sequence[Message], instructions: str = "", **kw: Any) -> str:
        seen.append(gc.isenabled())
        return await summarize(self, messages, instructions, **kw)

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", spy)
    return seen
