"""An independent count of a rendered payload: Python tiktoken (offline), OpenAI's documented
rule for Chat Completions, every sent text leaf plus framing for the other shapes, each image
part at OpenAI's tile rule. Shared by the contract tests (imported as a plain module)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from offline_tiktoken import encoding

IMAGE_TOKENS = 85 + 4 * 170  # OpenAI's tile rule for a 2 x 2-tile high-detail image


_SKIP = frozenset(
    {"type", "role", "cache_control", "media_type", "mime_type", "mimeType", "signature", "data"}
)
_IMAGE_TYPES = frozenset({"image", "input_image", "image_url"})
_MEDIA = frozenset({"inline_data", "file_data", "inlineData", "fileData"})


def _text_response(value: Mapping[str, Any]) -> bool:
    """Whether a Gemini ``functionResponse.response`` is ``{"output"|"error": str}``."""
    return (
        len(value) == 1
        and set(value) <= {"output", "error"}
        and isinstance(next(iter(value.values())), str)
    )


def _leaves(value: Any, key: str = "") -> Iterator[str | None]:
    """Every text the payload sends; ``None`` for an image. A Gemini function response that is
    not ``{"output"|"error": str}`` is an object the model reads whole, keys too: its JSON."""
    if key in _SKIP:
        return
    if key in _MEDIA:
        yield None
    elif isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        if key in {"input", "args", "arguments"} or (
            key == "response" and not _text_response(value)
        ):
            yield json.dumps(value, ensure_ascii=False)
        elif value.get("type") in _IMAGE_TYPES:
            yield None
        else:
            for k, v in value.items():
                yield from _leaves(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v, key)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def independent_count(payload: dict[str, Any], provider: str) -> int:
    enc = encoding("o200k_base")

    def n(s: str) -> int:
        return len(enc.encode(s, disallowed_special=()))

    if provider == "openai":  # OpenAI's documented rule for chat models
        total = 3
        for m in payload["messages"]:
            total += 3
            for k, v in m.items():
                if k == "tool_calls":
                    total += sum(
                        n(c["function"]["name"]) + n(c["function"]["arguments"]) for c in v
                    )
                elif isinstance(v, str):
                    total += n(v) + (1 if k == "name" else 0)
                elif isinstance(v, list):
                    for p in v:
                        if isinstance(p.get("text"), str):
                            total += n(p["text"])
                        elif p.get("type") in _IMAGE_TYPES:
                            total += IMAGE_TOKENS
        return total
    items = payload.get("messages") or payload.get("input") or payload.get("contents") or []
    outer = {"messages", "input", "contents"}
    strings = [x for k, v in payload.items() if k not in outer for x in _leaves(v, k)]
    strings += [x for item in items for x in _leaves(item)]
    texts = sum(n(s) for s in strings if s is not None)
    images = sum(1 for s in strings if s is None)
    return texts + images * IMAGE_TOKENS + 4 * (len(items) + 1) + 3
