"""Media other than images in payloads: non-image media by URL, OpenAI Chat ``input_audio``
and the names of PDFs, for each provider, validated against the SDK types and counted as the
plan counts them."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Any

import pytest

from ctxengine.errors import TranscriptError
from ctxengine.inject.payload import payload_tokens
from ctxengine.tokens import AUDIO_TOKENS_PER_SECOND, audio_tokens, count_messages
from ctxengine.transcript import Image, Message, Text, ToolCall, ToolResult, Transcript, load

from .helpers import PROVIDERS, assert_sdk_valid


def wav(seconds: int, byte_rate: int = 8000) -> str:
    """Base64 of a WAV file of ``seconds`` of 8-bit mono silence at ``byte_rate`` bytes/s."""
    size = byte_rate * seconds
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, byte_rate, byte_rate, 1, 8)
    head = b"RIFF" + struct.pack("<I", 36 + size) + b"WAVE" + b"fmt " + fmt
    body = head + b"data" + struct.pack("<I", size) + b"\x80" * size
    return base64.b64encode(body).decode()


WAV = wav(3)
AUDIO = Image("audio/wav", data=WAV)
PDF_DATA = "JVBERi0xLjQKJcfsj6IK"


def user(*media: Image) -> Transcript:
    return Transcript((Message("user", (Text("Look."), *media)),), "anthropic", {})


def with_result(*media: Image) -> Transcript:
    """A user turn, a call and a tool result, each carrying ``media``."""
    call = ToolCall("c1", "fetch", {"path": "a"})
    return Transcript(
        (
            Message("user", (Text("Look."), *media)),
            Message("assistant", (Text("Fetching."), call)),
            Message("tool", (ToolResult("c1", (Text("here"), *media)),)),
            Message("user", (Text("Thanks."),)),
        ),
        "anthropic",
        {},
    )


# -- 1. non-image media by URL ----------------------------------------------------------------

URL_MEDIA = [
    Image("audio/mpeg", url="https://example.com/talk.mp3"),
    Image("video/mp4", url="https://example.com/clip.mp4"),
    Image("text/plain", url="https://example.com/notes.txt"),
]


@pytest.mark.parametrize("media", URL_MEDIA, ids=lambda m: m.media_type)
def test_non_image_urls_are_no_image_parts_but_placeholders_naming_them(media: Image) -> None:
    t = with_result(media)
    placeholder = f"[{media.media_type} attachment {media.url} omitted]"
    anthropic = t.to("anthropic")
    assert_sdk_valid(anthropic, "anthropic")
    user_turn, _, results = anthropic["messages"]
    assert user_turn["content"][1] == {"type": "text", "text": placeholder}
    assert results["content"][0]["content"][1] == {"type": "text", "text": placeholder}
    chat = t.to("openai")
    assert_sdk_valid(chat, "openai")
    assert chat["messages"][0]["content"][1] == {"type": "text", "text": placeholder}
    responses = t.to("openai-responses")
    assert_sdk_valid(responses, "openai-responses")
    items = responses["input"]
    assert items[0]["content"][1] == {"type": "input_text", "text": placeholder}
    assert items[3]["output"][1] == {"type": "input_text", "text": placeholder}


@pytest.mark.parametrize("media", URL_MEDIA, ids=lambda m: m.media_type)
def test_gemini_sends_media_urls_as_file_data_with_their_type(media: Image) -> None:
    payload = with_result(media).to("gemini")
    assert_sdk_valid(payload, "gemini")
    part = {"fileData": {"fileUri": media.url, "mimeType": media.media_type}}
    first, _, results = payload["contents"]
    assert first["parts"][1] == part
    assert results["parts"][0]["functionResponse"]["parts"] == [part]


def test_image_urls_of_any_image_type_are_still_image_parts() -> None:
    svg = Image("image/svg+xml", url="https://example.com/logo.svg")
    assert user(svg).to("anthropic")["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "url", "url": svg.url},
    }
    part = user(svg).to("openai")["messages"][0]["content"][1]
    assert part == {"type": "image_url", "image_url": {"url": svg.url}}


def test_a_responses_file_url_without_extension_is_a_pdf_not_an_image() -> None:
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_file", "file_url": "https://example.com/paper"}],
        }
    ]
    t = load(items, format="openai-responses")
    assert t[0].blocks == (Image("application/pdf", url="https://example.com/paper"),)
    assert t.to("openai-responses")["input"] == items
    doc = t.to("anthropic")["messages"][0]["content"][0]
    assert doc == {
        "type": "document",
        "source": {"type": "url", "url": "https://example.com/paper"},
    }


# -- 2. audio ---------------------------------------------------------------------------------


def chat_audio(data: str = WAV, fmt: str = "wav") -> list[dict[str, Any]]:
    part = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    return [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, part]}]


@pytest.mark.parametrize(("fmt", "media_type"), [("wav", "audio/wav"), ("mp3", "audio/mpeg")])
def test_chat_input_audio_is_imported_and_round_trips_byte_equal(fmt: str, media_type: str) -> None:
    source = chat_audio(WAV, fmt)
    t = load(source, format="openai")
    assert t[0].blocks == (Text("Transcribe."), Image(media_type, data=WAV))
    assert "skipped_blocks" not in t.meta
    out = t.to("openai")
    assert_sdk_valid(out, "openai")
    assert json.dumps(out["messages"]) == json.dumps(source)


def test_audio_goes_to_gemini_inline_and_is_a_placeholder_where_it_cannot_go() -> None:
    t = load(chat_audio(), format="openai")
    payloads = {p: t.to(p) for p in PROVIDERS}
    for provider, payload in payloads.items():
        assert_sdk_valid(payload, provider)
    gemini = payloads["gemini"]["contents"][0]["parts"][1]
    assert gemini == {"inlineData": {"mimeType": "audio/wav", "data": WAV}}
    placeholder = "[audio/wav attachment omitted]"
    block = payloads["anthropic"]["messages"][0]["content"][1]
    assert block == {"type": "text", "text": placeholder}
    part = payloads["openai-responses"]["input"][0]["content"][1]
    assert part == {"type": "input_text", "text": placeholder}


def test_audio_in_chat_tool_results_and_other_audio_formats_are_placeholders() -> None:
    ogg = Image("audio/ogg", data="T2dnUw==")
    chat = with_result(AUDIO, ogg).to("openai")
    assert_sdk_valid(chat, "openai")
    user_parts = chat["messages"][0]["content"]
    assert [p["type"] for p in user_parts] == ["text", "input_audio", "text"]
    assert user_parts[2]["text"] == "[audio/ogg attachment omitted]"
    assert all(p["type"] == "text" for p in chat["messages"][2]["content"])


@pytest.mark.parametrize(
    ("audio", "pattern"),
    [
        (
            {"data": WAV, "format": "flac"},
            r"input_audio\.format: audio format is 'flac'; expected 'wav' or 'mp3'",
        ),
        ({"format": "wav"}, r"key 'data' is 'missing'; expected a string under 'data'"),
        ({"data": 3, "format": "wav"}, r"input_audio\.data: value is 3; expected a string"),
    ],
)
def test_bad_input_audio_is_an_error_naming_the_value(audio: dict[str, Any], pattern: str) -> None:
    items = [{"role": "user", "content": [{"type": "input_audio", "input_audio": audio}]}]
    with pytest.raises(TranscriptError, match=pattern):
        load(items, format="openai")


def test_input_audio_in_assistant_content_is_an_error() -> None:
    part = {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
    with pytest.raises(TranscriptError, match="content part type is 'input_audio'"):
        load([{"role": "assistant", "content": [part]}], format="openai")


def test_audio_tokens_follow_the_documented_rule() -> None:
    assert audio_tokens(wav(3)) == 3 * AUDIO_TOKENS_PER_SECOND  # from the WAV header
    assert audio_tokens(wav(3, byte_rate=16000)) == 3 * AUDIO_TOKENS_PER_SECOND
    mp3 = base64.b64encode(b"\xff\xfb" + b"\0" * 9_998).decode()  # 10,000 bytes at 4,000/s
    assert audio_tokens(mp3) == 3 * AUDIO_TOKENS_PER_SECOND
    assert audio_tokens("") == AUDIO_TOKENS_PER_SECOND  # at least one second


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_payload_counts_audio_by_its_rule(provider: str) -> None:
    short, long = user(Image("audio/wav", data=wav(1))), user(Image("audio/wav", data=wav(61)))
    counts = [payload_tokens(t.to(provider), provider, "gpt-4o") for t in (short, long)]
    assert counts[1] - counts[0] == 60 * AUDIO_TOKENS_PER_SECOND


def test_count_messages_counts_input_audio_parts() -> None:
    text = {"type": "text", "text": "x"}
    silent = count_messages([{"role": "user", "content": [text]}], model="gpt-4o")
    audio = chat_audio()[0]["content"][1]
    heard = count_messages([{"role": "user", "content": [text, audio]}], model="gpt-4o")
    assert heard == silent + audio_tokens(WAV)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_engine_plan_counts_audio_as_the_payload_carries_it(provider: str) -> None:
    """A minute of audio is 1,920 tokens, not an image's 765: the plan (``tokens_estimated``)
    and ``out.tokens`` agree where the audio is sent, and the plan never counts less than the
    payload carries where it becomes a placeholder."""
    from ctxengine import Budget, ContextEngine

    clip = Image("audio/wav", data=wav(60))

    async def run() -> list[tuple[int, int, dict[str, Any]]]:
        engine = ContextEngine("gpt-4o", Budget(total=8000))
        renders = []
        async with engine.session("audio") as s:
            s.extend([Message("user", (Text("Listen."), clip))])
            for _ in range(2):  # a cold render, then a warm one reusing its counts
                out = await s.render(provider)
                renders.append((out.tokens, out.report.tokens_estimated, out.payload))
                s.extend([Message("assistant", (Text("Heard."),)), Message("user", (Text("Ok"),))])
        return renders

    for tokens, planned, payload in asyncio.run(run()):
        assert_sdk_valid(payload, provider)
        assert planned >= 60 * AUDIO_TOKENS_PER_SECOND and planned >= tokens
        if provider in ("openai", "gemini"):
            assert tokens >= 60 * AUDIO_TOKENS_PER_SECOND
            assert abs(planned - tokens) <= 20  # framing estimates only


# -- 3. PDF names -----------------------------------------------------------------------------

NAMED = Image("application/pdf", data=PDF_DATA, name="Q3 report.pdf")
NAMED_URL = Image("application/pdf", url="https://example.com/q3", name="Q3 report.pdf")


def test_pdf_names_reach_every_provider_that_takes_one() -> None:
    t = with_result(NAMED, NAMED_URL)
    payloads = {p: t.to(p) for p in PROVIDERS}
    for provider, payload in payloads.items():
        assert_sdk_valid(payload, provider)
    docs = payloads["anthropic"]["messages"][0]["content"][1:]
    assert [d["title"] for d in docs] == ["Q3 report.pdf", "Q3 report.pdf"]
    result_docs = payloads["anthropic"]["messages"][2]["content"][0]["content"][1:]
    assert [d["title"] for d in result_docs] == ["Q3 report.pdf", "Q3 report.pdf"]
    chat = payloads["openai"]["messages"][0]["content"]
    assert chat[1]["file"]["filename"] == "Q3 report.pdf"
    assert chat[2] == {
        "type": "text",
        "text": "[application/pdf attachment 'Q3 report.pdf' https://example.com/q3 omitted]",
    }
    files = payloads["openai-responses"]["input"][0]["content"][1:]
    assert [f.get("filename") for f in files] == ["Q3 report.pdf", "Q3 report.pdf"]


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic"])
def test_pdf_names_round_trip_through_each_provider(provider: str) -> None:
    media = (NAMED,) if provider == "openai" else (NAMED, NAMED_URL)
    back = load(user(*media).to(provider), format=provider)
    assert back[0].blocks == (Text("Look."), *media)


def test_a_chat_file_name_survives_import_and_export_and_the_store_codec() -> None:
    from ctxengine.store.codec import message_from_json, message_to_json

    file = {"file_data": f"data:application/pdf;base64,{PDF_DATA}", "filename": "paper.pdf"}
    part = {"type": "file", "file": file}
    source = [{"role": "user", "content": [{"type": "text", "text": "Read."}, part]}]
    t = load(source, format="openai")
    assert t[0].blocks[1] == Image("application/pdf", data=PDF_DATA, name="paper.pdf")
    assert t.to("openai")["messages"] == source
    stored = json.loads(json.dumps(message_to_json(t[0])))
    assert message_from_json(stored) == t[0]
    nameless = message_to_json(user(Image("application/pdf", data=PDF_DATA))[0])
    assert "name" not in nameless["blocks"][1]  # stored as before when there is no name


def test_a_pdf_name_survives_a_session_state_snapshot() -> None:
    from ctxengine import Budget, ContextEngine, Session

    async def run() -> None:
        engine = ContextEngine("gpt-4o", Budget(total=20_000))  # a page: 8,000 for anthropic
        async with engine.session("named") as s:
            s.extend([Message("user", (Text("Read."), NAMED))])
            before = await s.render("anthropic")
            data = json.loads(json.dumps(s.state.to_json()))
        restored = Session.from_state(engine, engine.state_from_json(data))
        assert restored.state.messages[0].blocks[1] == NAMED
        after = await restored.render("anthropic")
        assert after.payload == before.payload
        assert after.payload["messages"][0]["content"][1]["title"] == "Q3 report.pdf"

    asyncio.run(run())
