"""An independent count of a rendered payload: Python tiktoken (offline), OpenAI's documented
rule for Chat Completions, every sent text leaf plus framing for the other shapes, each image
part by its provider's documented rule for its size (read by Pillow, not by ctxengine's header
reader), for a model of neither Claude's nor Gemini's family (what the contract tests render
with). Shared by the contract tests (imported as a plain module)."""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from PIL import Image as PILImage

from offline_tiktoken import encoding

IMAGE_TOKENS = 85 + 4 * 170  # OpenAI's tile rule for a 2 x 2-tile high-detail image


def _size(data: Any) -> tuple[int, int] | None:
    """The size of base64 (or ``data:`` URL) image data, by Pillow; None when it cannot tell."""
    if not isinstance(data, str):
        return None
    if data.startswith("data:"):
        data = data.partition(",")[2]
    try:
        with PILImage.open(io.BytesIO(base64.b64decode(data))) as im:
            return im.size
    except Exception:  # anything Pillow cannot read is of unknown size
        return None


def image_cost(provider: str, data: Any, detail: Any = None) -> int:
    """The documented count of one image for ``provider`` (OpenAI: the tile rule; Anthropic:
    pixels / 750 after scaling to 2576 px on the long edge, at most 5000, the tier a model
    not named as an older Claude gets; Gemini: the larger of 258 per 768 px tile and Gemini
    3's 1120), :data:`IMAGE_TOKENS` for an image of unknown size."""
    size = _size(data)
    if size is None:
        return IMAGE_TOKENS
    w, h = float(size[0]), float(size[1])
    if provider == "anthropic":
        if max(w, h) > 2576:
            w, h = w * 2576 / max(w, h), h * 2576 / max(w, h)
        return min(5000, math.ceil(w * h / 750))
    if provider == "gemini":
        tiles = 1 if max(w, h) <= 384 else math.ceil(w / 768) * math.ceil(h / 768)
        return max(258 * tiles, 1120)
    if detail == "low":
        return 85
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def _part_cost(provider: str, part: Mapping[str, Any]) -> int:
    """:func:`image_cost` of an exported image part or Gemini media value."""
    source, url = part.get("source"), part.get("image_url")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        return image_cost(provider, source.get("data"))
    if isinstance(url, Mapping):
        return image_cost(provider, url.get("url"), url.get("detail"))
    if isinstance(url, str):
        return image_cost(provider, url, part.get("detail"))
    mime = part.get("mimeType", part.get("mime_type"))
    if isinstance(mime, str) and mime.startswith("image/"):
        return image_cost(provider, part.get("data"))
    return IMAGE_TOKENS


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


def _leaves(value: Any, provider: str, key: str = "") -> Iterator[str | int]:
    """Every text the payload sends; an image's count for one. A Gemini function response that
    is not ``{"output"|"error": str}`` is an object the model reads whole, keys too: its JSON."""
    if key in _SKIP:
        return
    if key in _MEDIA:
        yield _part_cost(provider, value) if isinstance(value, Mapping) else IMAGE_TOKENS
    elif isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        if key in {"input", "args", "arguments"} or (
            key == "response" and not _text_response(value)
        ):
            yield json.dumps(value, ensure_ascii=False)
        elif value.get("type") in _IMAGE_TYPES:
            yield _part_cost(provider, value)
        else:
            for k, v in value.items():
                yield from _leaves(v, provider, k)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v, provider, key)
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
                            total += _part_cost(provider, p)
        return total
    items = payload.get("messages") or payload.get("input") or payload.get("contents") or []
    outer = {"messages", "input", "contents"}
    strings = [x for k, v in payload.items() if k not in outer for x in _leaves(v, provider, k)]
    strings += [x for item in items for x in _leaves(item, provider)]
    texts = sum(n(s) for s in strings if isinstance(s, str))
    images = sum(s for s in strings if isinstance(s, int))
    return texts + images + 4 * (len(items) + 1) + 3
