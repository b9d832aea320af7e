"""LangChain messages into the neutral model: the media blocks LangChain passes to providers."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

import ctxengine
from ctxengine.errors import TranscriptError
from ctxengine.transcript import Image, Text, load

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
    "rkJggg=="
)
PDF_DATA = "JVBERi0xLjQK"
PDF = "application/pdf"

#: (block, the neutral block it is read as)
BLOCKS: dict[str, tuple[dict[str, Any], Text | Image]] = {
    "anthropic image base64": (
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        Image("image/png", data=PNG),
    ),
    "anthropic image url": (
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        Image("image/jpeg", url="https://example.com/a.png"),
    ),
    "v1 file base64": (
        {"type": "file", "base64": PDF_DATA, "mime_type": PDF},
        Image(PDF, data=PDF_DATA),
    ),
    "v1 file base64 with a filename": (
        {"type": "file", "base64": PDF_DATA, "mime_type": PDF, "filename": "report.pdf"},
        Image(PDF, data=PDF_DATA, name="report.pdf"),
    ),
    "v1 file base64 without a mime type": (
        {"type": "file", "base64": PDF_DATA, "extras": {"filename": "scan.png"}},
        Image("image/png", data=PDF_DATA, name="scan.png"),
    ),
    "v1 file url": (
        {"type": "file", "url": "https://example.com/report"},
        Image(PDF, url="https://example.com/report"),
    ),
    "v0 file base64": (
        {"type": "file", "source_type": "base64", "data": PDF_DATA, "mime_type": PDF},
        Image(PDF, data=PDF_DATA),
    ),
    "openai file part": (
        {
            "type": "file",
            "file": {"file_data": f"data:{PDF};base64,{PDF_DATA}", "filename": "a.pdf"},
        },
        Image(PDF, data=PDF_DATA, name="a.pdf"),
    ),
    "anthropic document base64": (
        {
            "type": "document",
            "source": {"type": "base64", "media_type": PDF, "data": PDF_DATA},
            "title": "Q3",
        },
        Image(PDF, data=PDF_DATA, name="Q3"),
    ),
    "anthropic document text": (
        {"type": "document", "source": {"type": "text", "data": "the terms"}},
        Text("the terms"),
    ),
}


@pytest.mark.parametrize("shape", sorted(BLOCKS))
def test_media_blocks_are_read_in_user_and_tool_messages(shape: str) -> None:
    # Anthropic-native images and documents and LangChain's file blocks were refused
    block, expected = BLOCKS[shape]
    messages = [
        HumanMessage([{"type": "text", "text": "describe"}, block]),
        AIMessage("", tool_calls=[{"name": "fetch", "args": {}, "id": "c1"}]),
        ToolMessage([block], tool_call_id="c1"),
    ]
    transcript = load(messages)
    assert transcript[0].blocks == (Text("describe"), expected)
    assert transcript[2].tool_results[0].content == (expected,)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_fit_sends_an_anthropic_image_and_a_pdf(provider: str) -> None:
    image = BLOCKS["anthropic image base64"][0]
    pdf = BLOCKS["v1 file base64 with a filename"][0]
    out = ctxengine.fit(
        [HumanMessage([{"type": "text", "text": "compare"}, image, pdf])],
        model="claude-sonnet-4-5",
        budget=5_000,
        provider=provider,
    )
    text = str(out.payload)
    assert PNG in text and PDF_DATA in text


def test_a_block_naming_only_an_upload_is_refused_by_name() -> None:
    with pytest.raises(TranscriptError, match=r"content\[0\]: file block is .*'file_id'.*url"):
        load([HumanMessage([{"type": "file", "file_id": "file-123"}])])
    with pytest.raises(TranscriptError, match=r"content\[0\]: image block is .*'file_id'"):
        load([HumanMessage([{"type": "image", "file_id": "file-123"}])])
    with pytest.raises(TranscriptError, match=r"'document'; expected a block a system message"):
        load([SystemMessage([{"type": "document", "source": {"type": "text", "data": "x"}}])])


def test_an_image_url_block_keeps_its_detail() -> None:
    block = {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}}
    out = ctxengine.fit(
        [HumanMessage(content=[{"type": "text", "text": "hi"}, block])], model="gpt-4o", budget=5000
    )
    assert out.payload["messages"][0]["content"][1] == block


#: An ``AIMessage`` whose call's arguments did not parse, as LangChain's output parsers make it
#: (``langchain_core.output_parsers.openai_tools.make_invalid_tool_call``: the raw text kept in
#: ``args``), and the error ``ToolMessage`` ``create_agent`` adds for it before the next model
#: call (``langchain/agents/factory.py``: ``_patch_invalid_tool_calls`` and
#: ``_invalid_tool_call_message``).
BROKEN_ARGS = '{"path": "a.py"'
INVALID_CALL = {
    "type": "invalid_tool_call",
    "name": "read",
    "args": BROKEN_ARGS,
    "id": "bad1",
    "error": "Function read arguments: Expecting ',' delimiter",
}
PATCHED = ToolMessage(
    "Tool call read with id bad1 could not be executed - arguments were malformed or truncated.",
    name="read",
    tool_call_id="bad1",
    status="error",
)


def test_an_invalid_tool_call_is_read_as_a_call_with_its_raw_arguments() -> None:
    """ChatOpenAI sends ``invalid_tool_calls`` as ``tool_calls`` after the valid ones, the
    arguments as the raw text (langchain_openai ``chat_models/base.py``:
    ``_convert_message_to_dict`` and ``_lc_invalid_tool_call_to_openai_tool_call``), so the
    call and the error result LangChain's agent patched in for it are a pair the model sees.
    They were dropped: the call was not read, and its result was then an orphan."""
    call = {"name": "read", "args": {"path": "b.py"}, "id": "ok1", "type": "tool_call"}
    ok = ToolMessage("b", tool_call_id="ok1")
    history = [
        HumanMessage("read a.py and b.py"),
        AIMessage("", tool_calls=[call], invalid_tool_calls=[INVALID_CALL]),
        ok,
        PATCHED,
        HumanMessage("try again"),
    ]
    sent = load(history).to("openai")["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[1]["tool_calls"] == [
        {
            "id": "ok1",
            "type": "function",
            "function": {"name": "read", "arguments": '{"path": "b.py"}'},
        },
        {"id": "bad1", "type": "function", "function": {"name": "read", "arguments": BROKEN_ARGS}},
    ]
    assert sent[3]["tool_call_id"] == "bad1"


def test_of_invalid_tool_calls_only_those_with_an_id_are_read() -> None:
    """LangChain's agent adds no result for an invalid call without an id (its
    ``_invalid_tool_call_message`` returns None), so nothing could answer it: it is left out;
    one without a name is named ``"unknown"``, as that function names its result."""
    no_id = {**INVALID_CALL, "id": None}
    no_name = {**INVALID_CALL, "name": None}
    message = AIMessage("trying", invalid_tool_calls=[no_id, no_name])
    sent = load([HumanMessage("go"), message, PATCHED]).to("openai")["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert [c["function"]["name"] for c in sent[1]["tool_calls"]] == ["unknown"]
    assert sent[1]["tool_calls"][0]["id"] == "bad1"


# -- thinking -----------------------------------------------------------------------------------
# ChatAnthropic keeps the API's blocks in ``AIMessage.content`` (langchain_anthropic
# ``_format_output``: ``data.model_dump()["content"]``), ``response_metadata`` naming
# ``model_provider: "anthropic"``; with ``output_version="v1"`` thinking is a ``reasoning``
# block with the signature in ``extras`` and redacted thinking a ``non_standard`` block holding
# the API's (langchain_core ``block_translators/anthropic.py``; langchain_anthropic ``_compat``
# sends both back as they were). ChatGoogleGenerativeAI writes ``thinking`` blocks with a
# ``signature`` too (``block_translators/google_genai.py``).

SIGNED = {"type": "thinking", "thinking": "Call the weather tool.", "signature": "EqQBCkgIARAB"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
USE = {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"c": "Paris"}}
CALLS = [{"name": "weather", "args": {"c": "Paris"}, "id": "toolu_01"}]


def _exchange(blocks: list[Any], provider: str | None) -> list[Any]:
    meta = {"model_provider": provider} if provider else {}
    return [
        HumanMessage("What's the weather in Paris?"),
        AIMessage(blocks, tool_calls=CALLS, response_metadata=meta),
        ToolMessage("18C, cloudy", tool_call_id="toolu_01"),
    ]


def _sent(payload: dict[str, Any], provider: str) -> list[dict[str, Any]]:
    """The blocks (parts) of the payload's one assistant (model) message."""
    if provider == "gemini":
        return next(c for c in payload["contents"] if c["role"] == "model")["parts"]  # type: ignore[no-any-return]
    return next(m for m in payload["messages"] if m["role"] == "assistant")["content"]  # type: ignore[no-any-return]


V1_REASONING = {
    "type": "reasoning",
    "reasoning": SIGNED["thinking"],
    "extras": {"signature": SIGNED["signature"]},
}


@pytest.mark.parametrize(
    "blocks",
    [[SIGNED, REDACTED, USE], [V1_REASONING, {"type": "non_standard", "value": REDACTED}]],
    ids=["v0", "v1"],
)
def test_chat_anthropic_thinking_and_redacted_thinking_go_back_to_anthropic(
    blocks: list[Any],
) -> None:
    # a redacted_thinking block was refused ("content block type is 'redacted_thinking'"), so
    # was the v1 non_standard one, and a v1 reasoning block lost its signature (then Anthropic
    # got the tool-use turn without its thinking, which it refuses with thinking enabled)
    from transcript.helpers import assert_sdk_valid

    out = ctxengine.fit(
        _exchange(blocks, "anthropic"), model="claude-sonnet-4-5", budget=5000, provider="anthropic"
    )
    assert_sdk_valid(out.payload, "anthropic")
    assert _sent(out.payload, "anthropic") == [SIGNED, REDACTED, USE]


def test_thinking_goes_back_only_to_the_provider_that_signed_it() -> None:
    # ChatAnthropic's signature went to Gemini as a thoughtSignature of its own, and
    # ChatGoogleGenerativeAI's to Anthropic as a thinking block's: each refuses the other's
    gemini_thought = {"type": "thinking", "thinking": "Look it up.", "signature": "Q2lSc2ln"}
    cases = [("anthropic", SIGNED, "anthropic"), ("google_genai", gemini_thought, "gemini")]
    for model_provider, block, signer in cases:
        messages = _exchange([block, USE], model_provider)
        for provider in ("anthropic", "gemini"):
            out = ctxengine.fit(messages, model="gpt-4.1", budget=5000, provider=provider)
            sent = str(_sent(out.payload, provider))
            assert (block["signature"] in sent) == (provider == signer), (model_provider, provider)
    # a message that names no provider is sent as before, to any that takes thinking
    for provider in ("anthropic", "gemini"):
        out = ctxengine.fit(
            _exchange([SIGNED, USE], None), model="gpt-4.1", budget=5000, provider=provider
        )
        assert SIGNED["signature"] in str(_sent(out.payload, provider))


@pytest.mark.parametrize(
    "metadata",
    [
        {"model": "claude-3-7-sonnet-20250219"},  # releases before model_provider
        {"model_provider": "google_vertexai", "model_name": "claude-sonnet-4-5@20250929"},
        {"model_provider": "bedrock_converse", "model_name": "us.anthropic.claude-sonnet-4-5"},
    ],
)
def test_a_claude_message_is_told_by_its_model_name(metadata: dict[str, str]) -> None:
    """Claude served elsewhere (Vertex AI, Bedrock), or by a release that names no
    ``model_provider``: its thinking still goes to Anthropic only."""
    messages = _exchange([SIGNED, USE], None)
    messages[1].response_metadata = metadata
    gemini = ctxengine.fit(messages, model="gpt-4.1", budget=5000, provider="gemini")
    assert SIGNED["signature"] not in str(gemini.payload)
    anthropic = ctxengine.fit(messages, model="gpt-4.1", budget=5000, provider="anthropic")
    assert _sent(anthropic.payload, "anthropic")[0] == SIGNED


def test_gemini_call_signatures_go_back_on_their_calls() -> None:
    """ChatGoogleGenerativeAI (langchain-google-genai 4) keeps each function call's thought
    signature in ``additional_kwargs["__gemini_function_call_thought_signatures__"]`` (call id
    -> base64) and sends it back on the call's ``functionCall`` part; Gemini 3 refuses the
    calls of the current turn without it. They were dropped; no other provider is sent them."""
    from transcript.helpers import assert_sdk_valid

    signatures = {"__gemini_function_call_thought_signatures__": {"c1": "Q2lSc2lnbmF0dXJl"}}
    calls = [
        {"name": "weather", "args": {"c": "Paris"}, "id": "c1"},
        {"name": "weather", "args": {"c": "Rome"}, "id": "c2"},
    ]
    messages = [
        HumanMessage("Weather in Paris and Rome?"),
        AIMessage("", tool_calls=calls, additional_kwargs=signatures),
        ToolMessage("18C", tool_call_id="c1"),
        ToolMessage("25C", tool_call_id="c2"),
    ]
    gemini = ctxengine.fit(messages, model="gpt-4.1", budget=5000, provider="gemini")
    assert_sdk_valid(gemini.payload, "gemini")
    parts = _sent(gemini.payload, "gemini")
    assert [p.get("thoughtSignature") for p in parts] == ["Q2lSc2lnbmF0dXJl", None]
    assert [p["functionCall"]["id"] for p in parts] == ["c1", "c2"]
    for provider in ("openai", "openai-responses", "anthropic"):
        out = ctxengine.fit(messages, model="gpt-4.1", budget=5000, provider=provider)
        assert "Q2lSc2lnbmF0dXJl" not in str(out.payload), provider
