"""Session.ingest / Session.extend: every supported message shape, events, atomicity."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from ctxengine import Budget, ContextEngine, TranscriptError
from ctxengine.builtins import ToolResultCompressor
from ctxengine.tokens import count_messages
from ctxengine.transcript import Message, ToolCall, load
from offline_tiktoken import TRANSCRIPTS

pytestmark = pytest.mark.anyio

SESSION = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"


def _big_tool_prefix() -> tuple[list[dict[str, Any]], str]:
    """The first messages of a real session, ending with its 43,245-char tool result."""
    transcript = load(SESSION)
    end = next(
        i for i, m in enumerate(transcript) if any(len(r.text) > 40_000 for r in m.tool_results)
    )
    call_id = transcript[end].tool_results[0].call_id
    return transcript[: end + 1].to("openai")["messages"], call_id


def _tool_tokens(payload: dict[str, Any], call_id: str) -> int:
    [msg] = [m for m in payload["messages"] if m.get("tool_call_id") == call_id]
    return count_messages([msg], model="gpt-4o")


async def _render_with(mode: str) -> tuple[int, str]:
    messages, call_id = _big_tool_prefix()
    engine = ContextEngine("gpt-4o", Budget(total=100_000), plugins=[ToolResultCompressor()])
    async with engine.session(mode) as s:
        if mode == "extend":
            s.extend(messages)
        elif mode == "ingest":
            await s.ingest(messages)
        else:  # the one-message calls
            for m in load(messages):
                if m.role == "user":
                    await s.user_message(m.text)
                elif m.role == "assistant":
                    await s.assistant_message(m.text, m.tool_calls)
                elif m.role == "tool":
                    for r in m.tool_results:
                        await s.tool_result(r.call_id, r.text, name=r.name)
                else:
                    s.extend([m])
        out = await s.render()
    return _tool_tokens(out.payload, call_id), call_id


async def test_ingest_fires_events_so_the_compressor_runs_like_tool_result() -> None:
    raw, _ = await _render_with("extend")
    ingested, _ = await _render_with("ingest")
    one_by_one, _ = await _render_with("calls")
    assert raw > 10_000  # extend fires nothing: the raw 43k-char output is sent
    assert ingested == one_by_one
    assert ingested < raw // 5


async def test_ingest_fires_on_user_msg_per_user_message() -> None:
    seen: list[str] = []

    class Spy:
        name = "spy"
        version = "1.0"
        priority = 100
        enabled = True

        async def collect(self, scene: object) -> list[object]:
            return []

        def on_user_msg(self, event: Any) -> None:
            seen.append(event.user_message)

    engine = ContextEngine("gpt-4o", 4000, plugins=[Spy()])
    async with engine.session("s") as s:
        await s.ingest([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
        await s.ingest([HumanMessage("c")])
    assert seen == ["a", "c"]


SHAPES: dict[str, list[Any]] = {
    "neutral": [Message.user("hi"), Message.assistant("hello")],
    "openai": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    "responses": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hello"}],
        },
    ],
    "anthropic": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ],
    "gemini": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "hello"}]},
    ],
    "langchain": [HumanMessage("hi"), AIMessage("hello")],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_extend_and_ingest_accept_every_shape(shape: str) -> None:
    engine = ContextEngine("gpt-4o", 4000)
    async with engine.session("s") as s:
        s.extend(SHAPES[shape])
        await s.ingest(SHAPES[shape])
        assert [(m.role, m.text) for m in s.messages] == [
            ("user", "hi"),
            ("assistant", "hello"),
        ] * 2


async def test_extend_accepts_sdk_objects() -> None:
    from anthropic.types import MessageParam  # TypedDict: a dict at runtime
    from openai.types.chat import ChatCompletionMessage

    reply = ChatCompletionMessage(role="assistant", content="hello")
    user: MessageParam = {"role": "user", "content": "hi"}
    engine = ContextEngine("gpt-4o", 4000)
    async with engine.session("s") as s:
        s.extend([user])
        s.extend([reply])
        assert [(m.role, m.text) for m in s.messages] == [("user", "hi"), ("assistant", "hello")]


async def test_langchain_tool_exchange_ingests_paired() -> None:
    engine = ContextEngine("gpt-4o", 4000)
    async with engine.session("s") as s:
        await s.ingest(
            [
                SystemMessage("be brief"),
                HumanMessage("list"),
                AIMessage("", tool_calls=[{"name": "ls", "args": {"p": "."}, "id": "c1"}]),
                ToolMessage("a.py", tool_call_id="c1"),
            ]
        )
        out = await s.render()
    roles = [m["role"] for m in out.payload["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert out.payload["messages"][-1]["tool_call_id"] == "c1"
    assert s.messages[2].tool_calls == (ToolCall("c1", "ls", {"p": "."}),)


async def test_unknown_shape_names_index_and_adds_nothing() -> None:
    engine = ContextEngine("gpt-4o", 4000)
    async with engine.session("s") as s:
        bad = [{"role": "user", "content": "ok"}, 42]
        with pytest.raises(TranscriptError, match=r"messages\[1\] is 42 \(int\)"):
            s.extend(bad)
        with pytest.raises(TranscriptError, match=r"messages\[1\]"):
            await s.ingest(bad)
        with pytest.raises(TranscriptError, match=r"messages\[1\]\.role: role is 'wizard'"):
            s.extend([{"role": "user", "content": "ok"}, {"role": "wizard", "content": "x"}])
        with pytest.raises(TranscriptError, match=r"messages\[1\] is \{'foo': 1\}"):
            s.extend([{"role": "user", "content": "ok"}, {"foo": 1}])
        assert s.messages == []


async def test_mixed_neutral_and_foreign_runs() -> None:
    engine = ContextEngine("gpt-4o", 4000)
    async with engine.session("s") as s:
        s.extend([Message.user("a"), {"role": "assistant", "content": "b"}, HumanMessage("c")])
        assert [m.text for m in s.messages] == ["a", "b", "c"]
