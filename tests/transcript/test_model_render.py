"""The neutral model, rendering options and Anthropic cache breakpoints."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ctxengine.transcript import (
    Breakpoint,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
    plan_cache_breakpoints,
    render,
)

from .helpers import PROVIDERS, assert_sdk_valid

CALL = ToolCall("c1", "bash", {"cmd": "ls"})
T = Transcript(
    (
        Message.system("sys"),
        Message.user("list"),
        Message.assistant("sure", [CALL]),
        Message.tool("c1", "a.py", name="bash"),
        Message.assistant("one file"),
        Message.user("thanks"),
        Message.assistant("bye"),
    ),
    source_format="openai",
)


# -- model -------------------------------------------------------------------------------------


def _one_call(arguments: dict | str) -> Transcript:
    call = ToolCall("c1", "bash", arguments)
    return Transcript(
        (Message.user("list"), Message.assistant("", [call]), Message.tool("c1", "a.py"))
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_arguments_given_as_json_text_render_as_the_object(provider: str) -> None:
    """OpenAI hands a call's arguments as JSON text (``function.arguments``); a ``ToolCall``
    built from that text sent Anthropic and Gemini ``{"arguments": "<the text>"}`` instead of
    the object the model wrote (the importers decode it; the constructor did not)."""
    decoded = {"cmd": "ls -l", "paths": ["a.py", "b.py"], "deep": {"n": 1}}
    as_text = render(_one_call(json.dumps(decoded)), provider).payload
    assert as_text == render(_one_call(decoded), provider).payload
    assert_sdk_valid(as_text, provider)
    assert ToolCall("c1", "bash", " {} ").arguments == {}


@pytest.mark.parametrize("text", ["not json", '{"cut": ', "[1, 2]", '"a string"', "", "  "])
def test_arguments_that_are_no_json_object_stay_text(text: str) -> None:
    assert ToolCall("c1", "bash", text).arguments == text


def test_constructors_and_properties() -> None:
    m = Message.assistant("hi", [CALL])
    assert m.blocks == (Text("hi"), CALL) and m.text == "hi" and m.tool_calls == (CALL,)
    assert Message.assistant().blocks == ()
    tool = Message.tool("c1", [Text("a"), Text("b")], is_error=True)
    assert tool.tool_results == (ToolResult("c1", (Text("a"), Text("b")), True),)
    assert tool.tool_results[0].text == "a\nb"
    assert Message("assistant", [Text("x")]).blocks == (Text("x"),)  # lists become tuples
    assert Message("assistant", (), stop_reason="aborted").failed


def test_frozen_equal_and_hashable() -> None:
    m = Message.user("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.role = "assistant"  # type: ignore[misc]
    assert Message("user", (Text("x"),), meta={"a": 1}) == m  # meta is not compared
    assert hash(Message.assistant("", [CALL])) == hash(
        Message.assistant("", [ToolCall("c1", "bash", {"cmd": "ls"})])
    )
    assert ToolCall("a", "f", {"x": 1}) != ToolCall("a", "f", {"x": 2})


def test_transcript_sequence_behaviour() -> None:
    assert len(T) == 7 and list(T)[1] == Message.user("list") and T[-1].text == "bye"
    part = T[1:3]
    assert isinstance(part, Transcript) and len(part) == 2 and part.source_format == "openai"
    assert T.replace([Message.user("x")]).messages == (Message.user("x"),)
    assert repr(T) == "Transcript(7 messages, source_format='openai')"


# -- render ------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_render_returns_payload_and_manifest(provider: str) -> None:
    r = render(T, provider)
    assert r.payload == T.to(provider) and r.transcript is T and not r.report.changed
    assert_sdk_valid(r.payload, provider)
    manifest = json.loads(json.dumps(r.to_dict()))
    assert manifest["provider"] == provider and manifest["messages"] == 7


def test_system_placement_per_provider() -> None:
    assert T.to("openai")["messages"][0] == {"role": "system", "content": "sys"}
    assert T.to("openai-responses")["instructions"] == "sys"
    assert T.to("anthropic")["system"] == [{"type": "text", "text": "sys"}]
    assert T.to("gemini")["system_instruction"] == {"parts": [{"text": "sys"}]}


def test_hygiene_false_renders_as_is() -> None:
    broken = Transcript((Message.assistant("", [CALL]), Message.user("?")))
    raw = broken.to("anthropic", hygiene=False)["messages"]
    assert [m["role"] for m in raw] == ["assistant", "user"]
    fixed = broken.to("anthropic")["messages"]
    assert [m["role"] for m in fixed] == ["user", "assistant", "user"]
    assert fixed[2]["content"][0]["type"] == "tool_result" and fixed[2]["content"][0]["is_error"]


def test_thinking_goes_only_to_the_provider_that_signed_it() -> None:
    signed = Message(
        "assistant", (Thinking("why", "SIG"), Text("ok")), meta={"provider_family": "anthropic"}
    )
    t = Transcript((Message.user("q"), signed))
    assert t.to("anthropic")["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "why",
        "signature": "SIG",
    }
    assert "SIG" not in json.dumps([t.to(p) for p in ("openai", "openai-responses", "gemini")])


def test_media_without_a_slot_become_placeholders() -> None:
    from ctxengine.transcript import Image

    t = Transcript(
        (
            Message.user("shot"),
            Message.assistant("", [CALL]),
            Message("tool", (ToolResult("c1", (Image("image/png", data="AA=="),)),)),
        )
    )
    out = t.to("openai")["messages"][2]
    assert out["content"] == "[image/png attachment omitted]"
    for provider in PROVIDERS:
        assert_sdk_valid(t.to(provider), provider)


def test_anthropic_assistant_images_become_placeholders() -> None:
    """The Messages API rejects an image block in an assistant turn; user images are kept."""
    from ctxengine.transcript import Image

    image = Image("image/png", data="AA==")
    t = Transcript(
        (
            Message("user", (Text("show me"), image)),
            Message("assistant", (Text("here"), image)),
            Message.user("thanks"),
        )
    )
    user, assistant, _ = t.to("anthropic")["messages"]
    assert [b["type"] for b in user["content"]] == ["text", "image"]
    assert assistant["content"] == [
        {"type": "text", "text": "here"},
        {"type": "text", "text": "[image/png attachment omitted]"},
    ]
    assert_sdk_valid(t.to("anthropic"), "anthropic")
    # the engine's renders (cold, then warm with one more exchange) export the same way
    import asyncio

    from ctxengine import Budget, ContextEngine

    async def renders() -> list[dict[str, object]]:
        engine = ContextEngine("claude-sonnet-4-5", Budget(total=20_000))
        async with engine.session("images") as session:
            session.extend(t.messages)
            first = await session.render("anthropic")
            session.extend([Message("assistant", (image,)), Message.user("more")])
            return [first.payload, (await session.render("anthropic")).payload]

    for payload in asyncio.run(renders()):
        turns = payload["messages"]
        assert [b["type"] for b in turns[0]["content"]] == ["text", "image"]  # type: ignore[index]
        for turn in turns[1:]:  # type: ignore[index]
            assert all(b["type"] == "text" for b in turn["content"]), turn
        assert "attachment omitted" in json.dumps(turns[-2])  # the warm render's new turn


PARALLEL = Message.assistant(
    "", [ToolCall("a1", "read", {"p": "x"}), ToolCall("b2", "grep", {}), ToolCall("c3", "ls", {})]
)


def _responses(content: dict[str, object]) -> list[tuple[str, str, object]]:
    parts = content["parts"]
    assert isinstance(parts, list)
    return [
        (
            p["functionResponse"]["id"],
            p["functionResponse"]["name"],
            p["functionResponse"]["response"],
        )
        for p in parts
        if "functionResponse" in p
    ]


def test_gemini_responses_follow_the_order_of_parallel_calls() -> None:
    """Gemini pairs the responses of parallel calls with the calls by position: results that
    arrived in another order are sent in call order, each with its own call's id and name."""
    t = Transcript(
        (
            Message.user("go"),
            PARALLEL,
            Message.tool("c3", "C"),
            Message.tool("a1", "A"),
            Message.tool("b2", "B"),
            Message.user("next"),
        )
    )
    payload = t.to("gemini")
    assert_sdk_valid(payload, "gemini")
    user = payload["contents"][2]
    assert _responses(user) == [
        ("a1", "read", {"output": "A"}),
        ("b2", "grep", {"output": "B"}),
        ("c3", "ls", {"output": "C"}),
    ]
    assert user["parts"][-1] == {"text": "next"}
    # the other providers pair by id: their order is left as it came
    assert [m.get("tool_call_id") for m in t.to("openai")["messages"][2:5]] == ["c3", "a1", "b2"]


def test_gemini_synthetic_result_takes_its_call_place() -> None:
    t = Transcript((Message.user("go"), PARALLEL, Message.tool("b2", "B")))
    got = _responses(t.to("gemini")["contents"][2])
    assert [(cid, name) for cid, name, _ in got] == [("a1", "read"), ("b2", "grep"), ("c3", "ls")]
    assert got[1][2] == {"output": "B"} and "error" in got[0][2] and "error" in got[2][2]


# -- cache breakpoints -------------------------------------------------------------------------


def test_plan_prioritises_system_tail_previous_turn_then_task() -> None:
    plan = plan_cache_breakpoints(T)
    assert [b.index for b in plan] == [0, 1, 4, 6]
    reasons = {b.index: b.reason.split(":")[0] for b in plan}
    assert reasons == {0: "system prompt", 1: "task prefix", 4: "previous turn", 6: "tail"}
    assert [b.index for b in plan_cache_breakpoints(T, 2)] == [0, 6]
    assert plan_cache_breakpoints(T, 0) == []
    assert plan[0] == Breakpoint(0, plan[0].reason) and plan[0].to_dict()["index"] == 0


def test_markers_land_on_the_planned_blocks() -> None:
    r = render(T, "anthropic", cache_breakpoints=4, cache_ttl="1h")
    p = r.payload
    assert p["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    marked = [
        (i, b["type"])
        for i, m in enumerate(p["messages"])
        for b in m["content"]
        if "cache_control" in b
    ]
    # neutral 1 -> turn 0, neutral 4 -> turn 3 (assistant "one file"), neutral 6 -> turn 5
    assert marked == [(0, "text"), (3, "text"), (5, "text")]
    assert [b.index for b in r.breakpoints] == [0, 1, 4, 6]
    assert_sdk_valid(p, "anthropic")


def test_markers_skip_thinking_blocks() -> None:
    last = Message(
        "assistant", (Text("a"), Thinking("t", "S")), meta={"provider_family": "anthropic"}
    )
    t = Transcript((Message.user("q"), last))
    content = t.to("anthropic", cache_breakpoints=1)["messages"][1]["content"]
    assert [b["type"] for b in content] == ["thinking", "text"]  # thinking first, not last
    assert "cache_control" in content[1] and "cache_control" not in content[0]


def test_no_markers_by_default_and_ignored_elsewhere() -> None:
    assert "cache_control" not in json.dumps(T.to("anthropic"))
    assert render(T, "openai", cache_breakpoints=4).breakpoints == ()
