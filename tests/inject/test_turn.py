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


@pytest.mark.parametrize(("provider", "key"), [("anthropic", "messages"), ("gemini", "contents")])
async def test_a_whitespace_user_message_gives_a_non_empty_payload(provider: str, key: str) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=1000))
    async with engine.session("blank") as s:
        await s.user_message("   ")
        out = await s.render(provider)
    messages = out.payload[key]
    assert len(messages) == 1
    assert messages[0]["role"] == "user"
    assert out.transcript.messages[-1].text.strip()
    assert out.tokens <= 1000
