"""Budget use: a render that cut something uses at least 95 % of its target (docs/engine.md,
"Budget use: dropping, backfill and the reserve"), and never more than its budget.

The sessions are the ones a user has where backfill had no form of a cut tool result that
fitted the room left: a result of dense tokens under ``soft_trim_chars`` (a file of 400 lines
``x = 1``: 2,400 chars, 2,000 tokens) had only its one-line placeholder, and a long log only
its fixed 3,000-char head + tail, however much room was left.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ctxengine import Budget, BudgetError, ContextEngine
from ctxengine.replay import _feed
from ctxengine.transcript import Message, ToolCall
from transcript.helpers import named_transcripts

MIN_USE = 0.95


def _reads(outputs: list[str]) -> list[Message]:
    """The agent reads one file per output (the newest is the latest turn's)."""
    messages = [Message.system("You are a coding agent.")]
    for n, output in enumerate(outputs):
        messages += [
            Message.user(f"Show me gen_{n}.py"),
            Message.assistant("", [ToolCall(f"r{n}", "read", {"path": f"gen_{n}.py"})]),
            Message.tool(f"r{n}", output, name="read"),
        ]
    return messages


#: A file of dense tokens: 400 lines (2,400 chars, under ``soft_trim_chars``: no fixed head +
#: tail) of 2,000 tokens, and 900 lines, whose fixed head + tail keeps 3,000 of 5,400 chars.
DENSE = "\n".join("x = 1" for _ in range(400))
LONG = "\n".join(f"x = {k // 300}" for k in range(900))


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize(
    ("outputs", "budget"),
    [([DENSE], 2_000), ([DENSE], 1_000), ([LONG, LONG], 8_000)],
    ids=["dense-2k", "dense-1k", "long-8k"],
)
def test_a_cut_tool_result_takes_the_room_left(
    outputs: list[str], budget: int, provider: str
) -> None:
    async def main() -> None:
        engine = ContextEngine("gpt-4.1", Budget(total=budget))
        async with engine.session("use") as s:
            s.extend(_reads(outputs))
            out = await s.render(provider)
        cut = [g for g in out.report if g.status != "kept"]
        assert [g.node_id for g in cut] == ["act.tool_result.r0"]
        assert out.tokens <= budget
        assert out.tokens >= MIN_USE * out.report.target, (out.tokens, out.report.target)
        (result,) = cut
        assert result.status == "trimmed" and "head + tail" in result.reason, result.reason
        sent = out.transcript.messages[3].tool_results[0].text
        assert sent.startswith(outputs[0][:40]) and sent.endswith(outputs[0][-40:])

    anyio.run(main)


def _soft_only(out: Any) -> bool:
    """Whether the render cut something and every cut is a soft trim (no compaction, guard
    cap or hygiene drop, whose landing backfill does not choose)."""
    stages = {g.stage for g in out.report if g.status != "kept"}
    return stages == {"soft"}


@pytest.mark.parametrize("budget", [2_000, 4_000, 8_000])
def test_shared_sessions_that_soft_trim_use_their_target(budget: int) -> None:
    """Every shared real transcript replayed as ``ctxengine replay`` does (a render before each
    assistant turn): a render whose cuts are soft trims alone uses 95 % of its target. Before,
    renders of the Claude Code, OpenHands and subagent sessions at 2k-8k cleared or trimmed
    one result to its fixed form and stopped at 73 % to 94 %."""

    async def main() -> list[tuple[str, int, float]]:
        low = []
        for name, t in named_transcripts():
            messages = list(t)
            engine = ContextEngine("gpt-4.1", Budget(total=budget))
            async with engine.session("use") as s:
                for i, m in enumerate(messages):
                    if m.role == "assistant" and i and messages[i - 1].role != "assistant":
                        out = await _render(s)
                        if out is not None and _soft_only(out):
                            assert out.tokens <= budget
                            use = out.tokens / out.report.target
                            if use < MIN_USE:
                                low.append((name, i, round(use, 3)))
                    await _feed(s, m)
        return low

    assert anyio.run(main) == []


async def _render(s: Any) -> Any:
    """The session's render for OpenAI, or None when protected content alone is over."""
    try:
        return await s.render("openai")
    except BudgetError:
        return None
