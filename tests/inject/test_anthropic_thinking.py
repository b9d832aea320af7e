"""Anthropic's two rules for thinking in an assistant message: when it holds thinking, its
first blocks are thinking ("If an assistant message contains any thinking blocks, the first
block must be thinking or redacted_thinking"), and its last block is not ("The final block in
an assistant message cannot be `thinking`"). Both broke: an aborted turn whose call pairing
cut kept its thinking alone, and two assistant turns merged for alternation put text first."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, fit
from ctxengine.transcript import Message, Text, Thinking, ToolCall, load
from ctxengine.transcript.providers import exported_blocks, thinking_first
from offline_tiktoken import TRANSCRIPTS

pytestmark = pytest.mark.anyio

SIG = "EqQBCkgIARABGAIiQLx"
THINKING = ("thinking", "redacted_thinking")


def _check(payload: dict[str, Any]) -> int:
    """Assert both rules on every assistant message; the number holding thinking."""
    seen = 0
    for m in payload["messages"]:
        if m["role"] != "assistant" or isinstance(m["content"], str):
            continue
        kinds = [b["type"] for b in m["content"]]
        assert kinds, m
        assert kinds[-1] not in THINKING, kinds
        if any(k in THINKING for k in kinds):
            seen += 1
            lead = next(i for i, k in enumerate(kinds) if k not in THINKING)
            assert all(k not in THINKING for k in kinds[lead:]), kinds
    return seen


def test_an_aborted_turn_leaves_no_thinking_alone() -> None:
    aborted = Message(
        "assistant",
        (Thinking("I'll run pytest", signature=SIG), ToolCall("toolu_01", "bash", {"c": "x"})),
        stop_reason="aborted",
    )
    messages = [
        Message.user("run the tests"),
        aborted,
        Message.user("no, only the unit tests"),
        Message.assistant("Running unit tests."),
        Message.user("and?"),
    ]
    out = fit(messages, model="claude-sonnet-4-5", budget=5000, provider="anthropic")
    _check(out.payload)
    roles = [m["role"] for m in out.payload["messages"]]
    assert roles == ["user", "assistant", "user"]  # the aborted turn is gone, users merged
    assert "no, only the unit tests" in str(out.payload["messages"][0])


def test_merged_turns_put_thinking_first() -> None:
    messages = [
        Message.user("list files"),
        Message.assistant("Sure, one moment."),
        Message("assistant", (Thinking("run ls", signature=SIG), ToolCall("t2", "bash", {}))),
        Message.tool("t2", "a.py"),
    ]
    out = fit(messages, model="claude-sonnet-4-5", budget=5000, provider="anthropic")
    assert _check(out.payload) == 1
    blocks = out.payload["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    assert blocks[0]["signature"] == SIG and blocks[1]["text"] == "Sure, one moment."


def test_thinking_first_keeps_order_and_other_providers_are_untouched() -> None:
    a, b = Thinking("a", signature=SIG), Thinking("b", signature=SIG)
    text, call = Text("t"), ToolCall("c", "f", {})
    assert thinking_first([text, a, call, b]) == [a, b, text, call]
    assert thinking_first([a, b, text]) == [a, b, text]
    assert thinking_first([a, b]) == [] and thinking_first([text]) == [text]
    m = Message("assistant", (text, a, call), meta={"provider_family": "anthropic"})
    assert exported_blocks(m, "anthropic", "anthropic") == [a, text, call]
    assert exported_blocks(m, "openai", "anthropic") == [text, call]  # not its thinking


@pytest.mark.parametrize(
    "name",
    ["ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl", "subagent.jsonl", "tool_heavy.jsonl"],
)
async def test_every_anthropic_render_of_a_claude_code_session_keeps_both_rules(
    name: str,
) -> None:
    messages = list(load(TRANSCRIPTS / "claude-code-spotter" / name).messages)
    seen = 0
    for budget in (4000, 32000):
        engine = ContextEngine("claude-sonnet-4-5", Budget(total=budget))
        async with engine.session(f"thinking-{budget}") as s:
            for k in range(0, len(messages), 25):
                s.extend(messages[k : k + 25])
                seen += _check((await s.render("anthropic")).payload)
    assert seen > 0


SPLIT = [
    Message.user("list files"),
    Message(
        "assistant", (Thinking("run ls", signature=SIG),), meta={"provider_family": "anthropic"}
    ),
    Message("assistant", (ToolCall("toolu_1", "bash", {"c": "ls"}),)),
    Message.tool("toolu_1", "a.py"),
]


async def test_a_turn_logged_as_thinking_then_its_call_keeps_its_thinking() -> None:
    """A turn logged as two assistant messages ([thinking], then [tool_use]): the thinking
    alone counted as empty and was dropped before the merge, so the tool-loop turn went out
    without the thinking Anthropic requires first in it."""
    want = ["thinking", "tool_use"]
    out = fit(SPLIT, model="claude-sonnet-4-5", budget=5000, provider="anthropic")
    assert [b["type"] for b in out.payload["messages"][1]["content"]] == want
    from ctxengine.transcript import Transcript

    sent = Transcript(tuple(SPLIT)).to("anthropic")["messages"][1]["content"]
    assert [b["type"] for b in sent] == want
    engine = ContextEngine("claude-sonnet-4-5", Budget(total=5000))
    async with engine.session("split") as s:
        s.extend(SPLIT)
        for _ in range(2):  # from scratch, then warm
            out = await s.render("anthropic")
            assert [b["type"] for b in out.payload["messages"][1]["content"]] == want
            _check(out.payload)
            await s.user_message("and?")


def test_a_prefill_ending_in_space_before_its_thinking_is_stripped() -> None:
    """[text ending in a space, signed thinking]: the strip stopped at the thinking, which the
    exporter then moved first, so the request ended with the space (a 400)."""
    from ctxengine.inject.hygiene import validate
    from ctxengine.transcript import Transcript

    last = Message(
        "assistant",
        (Text("Let me check "), Thinking("hmm", signature=SIG)),
        meta={"provider_family": "anthropic"},
    )
    out = fit(
        [Message.user("hi"), last], model="claude-sonnet-4-5", budget=5000, provider="anthropic"
    )
    assert out.payload["messages"][-1]["content"][-1] == {"type": "text", "text": "Let me check"}
    assert [p.code for p in validate(Transcript((Message.user("hi"), last)), "anthropic")] == [
        "trailing_whitespace"
    ]


def _loop() -> list[Message]:
    """An agent loop whose turns are logged as [thinking], then [tool_use]."""

    def think(text: str) -> Message:
        return Message(
            "assistant", (Thinking(text, signature=SIG),), meta={"provider_family": "anthropic"}
        )

    messages = [Message.user("start " + "x " * 200)]
    for i in range(6):
        messages += [
            Message.user(f"q{i} " + "w " * 100),
            think(f"plan {i} " + "t " * 150),
            Message("assistant", (ToolCall(f"toolu_{i}", "bash", {"c": "ls"}),)),
            Message.tool(f"toolu_{i}", "out " * 100),
        ]
    messages += [
        Message.user("go " + "g " * 50),
        think("final plan " + "t " * 300),
        Message("assistant", (ToolCall("toolu_z", "bash", {"c": "ls"}),)),
        Message.tool("toolu_z", "res " * 50),
    ]
    return messages


@pytest.mark.parametrize("budget", range(1000, 8000, 300))
def test_a_trim_never_parts_a_turns_thinking_from_its_call(budget: int) -> None:
    """The [thinking] and the [tool_use] message were two history steps: a trim could keep the
    call and drop its thinking, and the tool loop went out without it (11 of these budgets).
    From 1,000 tokens on a call is kept (below, none is, and nothing here could fail)."""
    out = fit(_loop(), model="claude-sonnet-4-5", budget=budget, provider="anthropic")
    _check(out.payload)
    calls = [
        [b["type"] for b in m["content"]]
        for m in out.payload["messages"]
        if m["role"] == "assistant"
        and isinstance(m["content"], list)
        and any(b["type"] == "tool_use" for b in m["content"])
    ]
    assert calls, budget
    for kinds in calls:
        assert kinds[0] == "thinking", (budget, kinds)
