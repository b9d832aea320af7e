"""The inject phase: the rendered payload is counted and kept within the budget (issue 9)."""

from __future__ import annotations

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.transcript import ToolCall

pytestmark = pytest.mark.anyio


async def test_synthetic_results_hygiene_adds_are_budgeted() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=400))
    async with engine.session("syn") as s:
        await s.user_message("hi")
        for i in range(20):
            await s.assistant_message("", [ToolCall(f"c{i}", "read", {"p": i})])
        await s.user_message("go on")
        out = await s.render("anthropic")
    assert out.report.hygiene["changes"]  # hygiene did add results for the unanswered calls
    assert out.tokens <= 400
    assert out.report.fits
    assert out.transcript.messages[-1].text == "go on"
