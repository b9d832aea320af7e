"""History items: what each transcript message costs in the plan (issue 9 regressions)."""

from __future__ import annotations

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.transcript import Message, Text, Thinking, ToolCall

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


def _thinking_session(signature: str | None) -> list[Message]:
    return [
        Message.user("where is the report?"),
        Message("assistant", (Thinking("ponder " * 400, signature=signature), Text("in ./out"))),
        Message.user("thanks, and the log?"),
    ]


@pytest.mark.parametrize(
    ("provider", "signature", "sent"),
    [
        ("openai", "sig", False),  # OpenAI Chat never takes reasoning
        ("anthropic", None, False),  # Anthropic needs the signature
        ("anthropic", "sig", True),
        ("gemini", None, True),  # Gemini takes its own thought text
    ],
)
async def test_thinking_counts_only_where_the_export_sends_it(
    provider: str, signature: str | None, sent: bool
) -> None:
    # An aider session with unsigned thinking at 1,500 tokens was planned at 723 tokens and
    # rendered 305: the plan counted thinking no payload carried, and cut what would have fit.
    engine = ContextEngine("gpt-4o", Budget(total=2000))
    async with engine.session("think") as s:
        s.extend(_thinking_session(signature))
        out = await s.render(provider)
    carried = "ponder" in str(out.payload)
    assert carried is sent
    assert abs(out.report.tokens_estimated - out.tokens) <= 20  # the plan counts what is sent
    assert (out.report.tokens_estimated > 400) is sent


async def test_a_render_for_another_provider_recounts_thinking() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=2000))
    async with engine.session("think") as s:
        s.extend(_thinking_session("sig"))
        estimates = {}
        for provider in ("openai", "anthropic", "openai", "anthropic"):
            out = await s.render(provider)
            assert abs(out.report.tokens_estimated - out.tokens) <= 20, provider
            estimates.setdefault(provider, set()).add(out.report.tokens_estimated)
    assert len(estimates["openai"]) == len(estimates["anthropic"]) == 1  # stable per provider
    assert min(estimates["anthropic"]) > max(estimates["openai"]) + 400


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
async def test_the_calls_of_a_failed_turn_are_not_counted(provider: str) -> None:
    """Found by the sweep of the shared sessions (pi, 32k): an assistant turn that ended in an
    error held 16 edit calls (17,000 characters of arguments); hygiene strips them, but the
    plan counted them, 5,600 tokens over the payload, and the render used 69 % of its target
    while the plan thought it full."""
    calls = tuple(
        ToolCall(f"c{i}", "edit", {"path": "a.ts", "old": "x = 1;\n" * 60, "new": "y"})
        for i in range(16)
    )
    engine = ContextEngine("gpt-4o", Budget(total=50_000))
    async with engine.session("failed") as s:
        await s.user_message("fix the renderer")
        s.extend([Message("assistant", (Text("editing"), *calls), stop_reason="error")])
        await s.user_message("ok, I removed them myself")
        out = await s.render(provider)
    assert not any(isinstance(b, ToolCall) for m in out.transcript.messages for b in m.blocks)
    assert abs(out.report.tokens_estimated - out.tokens) <= 0.05 * out.tokens + 8
