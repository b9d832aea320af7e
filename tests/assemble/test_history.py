"""History items: what each transcript message costs in the plan (issue 9 regressions)."""

from __future__ import annotations

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.transcript import Message, Text, Thinking

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
async def test_thinking_is_counted_so_a_render_fits_the_budget(provider: str) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=1000))
    async with engine.session("think") as s:
        await s.user_message("hi")
        s.extend([Message("assistant", (Thinking("step " * 5000, signature="sig"), Text("ok")))])
        await s.user_message("next")
        out = await s.render(provider)
    assert out.tokens <= 1000
    assert out.report.tokens_estimated >= out.tokens - 20  # the plan saw what it renders
    # the latest request is last; "hi" fits again (backfill) and merges with it, its answer not
    assert out.transcript.messages[-1].text.split("\n")[-1] == "next"
    assert "step" not in out.transcript.messages[-1].text
