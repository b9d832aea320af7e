"""The inject phase: the rendered payload is counted and kept within the budget (issue 9)."""

from __future__ import annotations

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain, count_messages
from ctxengine.collect.events import AfterRender
from ctxengine.hygiene import validate
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


class Tamperer:
    """An ``on_after_render`` handler that edits everything it is given."""

    name, version, priority, enabled = "tamperer", "1.0.0", 10, True

    async def collect(self, scene: object) -> list:
        return []

    def on_after_render(self, event: AfterRender) -> None:
        messages = event.payload["messages"]
        messages.insert(0, {"role": "system", "content": "word " * 2000})
        messages.append({"role": "tool", "tool_call_id": "orphan", "content": "x"})
        messages[1]["content"] = "TAMPERED"
        event.report.faults.clear()
        event.report.windows.clear()
        event.report.tokens = 0


async def test_on_after_render_cannot_change_what_the_caller_gets() -> None:
    """Issue 9, item 12: the hook gets a copy of the payload and the report (an observer)."""
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[Tamperer()])
    async with engine.session("after") as s:
        s.add(ContextGrain("sys.rules", content="Be terse."))
        await s.user_message("hi there")
        out = await s.render()
    assert [m["role"] for m in out.payload["messages"]] == ["system", "user"]
    assert out.payload["messages"][1]["content"] == "hi there"
    assert (
        out.tokens == count_messages(out.payload["messages"], model="gpt-4o") == out.report.tokens
    )
    assert out.report.windows and out.report.fits
    assert validate(out.transcript, "openai") == []


@pytest.mark.parametrize("reply", ["answer \n", "   "])
async def test_an_anthropic_prefill_never_ends_in_whitespace(reply: str) -> None:
    """Issue 9, item 7: a final assistant message (a prefill) after a blank user turn."""
    engine = ContextEngine("gpt-4o", Budget(total=1000))
    async with engine.session("prefill") as s:
        await s.user_message("  ")
        await s.assistant_message(reply)
        out = await s.render("anthropic")
        openai = await s.render("openai")
    last = out.payload["messages"][-1]
    assert last["role"] == "user" or last["content"][-1]["text"] == reply.rstrip()
    assert not str(last["content"][-1]["text"]).endswith((" ", "\n"))
    assert [m["role"] for m in out.payload["messages"]] == (
        ["user", "assistant"] if reply.strip() else ["user"]
    )
    assert openai.payload["messages"][-1]["content"] == reply  # other providers: verbatim
