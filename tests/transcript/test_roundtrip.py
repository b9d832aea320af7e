"""Import -> export -> import is lossless for each provider's own format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxengine.transcript import Transcript, load

from .helpers import PROVIDERS


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
