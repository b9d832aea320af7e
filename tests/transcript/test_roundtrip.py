"""Import -> export -> import is lossless for each provider's own format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxengine.transcript import Image, Message, Text, Transcript, load

from .helpers import PROVIDERS, assert_sdk_valid


@pytest.mark.parametrize("provider", PROVIDERS)
def test_real_payloads_round_trip(provider: str, real: dict[Path, list[Transcript]]) -> None:
    for ts in real.values():
        for t in ts:
            payload = t.to(provider)
            first = load(payload, format=provider)
            assert first.source_format == provider
            again = first.to(provider)
            assert again == payload  # export of the import is the same payload
            assert load(again, format=provider) == first  # and imports to the same transcript


HANDMADE: dict[str, Any] = {
    "openai": {
        "messages": [
            {"role": "system", "content": "s"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "r"},
        ]
    },
    "openai-responses": {
        "input": [
            {"type": "message", "role": "developer", "content": "d"},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_image", "image_url": "https://x.test/i.png", "detail": "auto"},
                ],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a": 1}'},
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [
                    {"type": "input_text", "text": "o1"},
                    {"type": "input_text", "text": "o2"},
                ],
            },
            {"type": "message", "role": "assistant", "content": "done"},
        ]
    },
    "anthropic": {
        "system": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/i.jpg"}}
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "R"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": "ok", "is_error": True}
                ],
            },
        ],
    },
    "gemini": {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "a"},
                    {"fileData": {"fileUri": "gs://b/x.pdf", "mimeType": "application/pdf"}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"text": "t", "thought": True, "thoughtSignature": "QQ=="},
                    {"functionCall": {"id": "g", "name": "f", "args": {"k": [1]}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "g", "name": "f", "response": {"output": "o"}}}
                ],
            },
            {"role": "model", "parts": [{"text": "end", "thoughtSignature": "Qg=="}]},
        ],
        "system_instruction": {"parts": [{"text": "s"}]},
    },
}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_handmade_payloads_round_trip(provider: str) -> None:
    payload = HANDMADE[provider]
    t = load(payload, format=provider)
    out = t.to(provider)
    assert out == payload
    assert load(out, format=provider) == t


#: Output items as a reasoning model returns them, with their ids: the API pairs a reasoning
#: item with the item that followed it by id ("Item 'rs_…' of type 'reasoning' was provided
#: without its required following item" when that id is missing).
WITH_IDS = [
    {"type": "message", "role": "user", "content": "What's the weather in Paris?"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E1"},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "18C, cloudy"},
    {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "E2"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "It is 18C", "annotations": []},
            {"type": "output_text", "text": " and cloudy.", "annotations": []},
        ],
    },
    {"type": "message", "role": "user", "content": "And tomorrow?"},
]


def test_output_items_keep_their_ids_through_a_round_trip_and_a_fit() -> None:
    from ctxengine import fit

    from .helpers import assert_sdk_valid

    t = load(WITH_IDS, format="openai-responses")
    assert t.to("openai-responses") == {"input": WITH_IDS}
    out = fit(WITH_IDS, model="gpt-4o", budget=8000, provider="openai-responses")
    assert out.payload == {"input": WITH_IDS}
    assert_sdk_valid(out.payload, "openai-responses")


def test_an_item_id_is_not_sent_once_its_message_changed() -> None:
    """A turn whose blocks changed since it came (a call cut from an aborted turn) no longer
    matches its items: none of them is sent with an id rather than one with another's."""
    import dataclasses

    t = load(WITH_IDS, format="openai-responses")
    turn = t.messages[1]
    cut = dataclasses.replace(turn, blocks=(turn.blocks[1],))  # the call alone, reasoning gone
    changed = Transcript((*t.messages[:1], cut, *t.messages[2:]))
    items = changed.to("openai-responses")["input"]
    (call,) = [i for i in items if i["type"] == "function_call"]
    assert "id" not in call and call["call_id"] == "call_1"
    assert [i["id"] for i in items if i["type"] == "message" and "id" in i] == ["msg_1"]


def test_image_detail_and_the_participant_name_come_back() -> None:
    """``detail: "low"`` (billed 85 tokens) came back as ``auto`` for Responses and not at all
    for Chat; Chat's participant ``name`` was dropped."""
    from ctxengine.store.codec import message_from_json, message_to_json

    url = "https://x.test/shot.png"
    chat = [
        {"role": "system", "content": "s", "name": "rules"},
        {
            "role": "user",
            "name": "alice",
            "content": [
                {"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
            ],
        },
        {"role": "assistant", "name": "bot", "content": "a cat"},
    ]
    t = load(chat, format="openai")
    assert t.to("openai") == {"messages": chat}
    stored = [message_from_json(message_to_json(m)) for m in t.messages]
    assert Transcript(tuple(stored)).to("openai") == {"messages": chat}
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is it?"},
                {"type": "input_image", "image_url": url, "detail": "low"},
            ],
        }
    ]
    assert load(items, format="openai-responses").to("openai-responses") == {"input": items}
    assert t.to("openai-responses")["input"][0]["content"][1]["detail"] == "low"


def test_an_image_given_a_data_url_as_data_is_sent_as_base64_by_every_provider() -> None:
    """``Image("image/png", "data:image/png;base64,...")`` (a data URL where the base64 goes,
    as a canvas's ``toDataURL`` or an OpenAI ``image_url`` gives it) was sent with the prefix
    twice to OpenAI (``data:image/png;base64,data:image/png;base64,...``) and inside the base64
    field of Anthropic and Gemini: every request refused. It is read as its base64 and its
    media type; the payloads are those of the image given as base64, and valid."""
    b64 = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
        "rkJggg=="
    )
    given = Image("image/jpeg", f"data:image/png;base64,{b64}", name="shot.png")
    assert (given.media_type, given.data) == ("image/png", b64)
    plain = Image("image/png", b64, name="shot.png")
    for provider in PROVIDERS:
        with_url = Transcript((Message("user", (Text("see"), given)),)).to(provider)
        assert with_url == Transcript((Message("user", (Text("see"), plain)),)).to(provider)
        assert_sdk_valid(with_url, provider)
        assert "base64,data:" not in str(with_url)
    svg = "data:image/svg+xml,%3Csvg%3E"  # not base64: left as it was given
    assert Image("image/svg+xml", svg).data == svg
