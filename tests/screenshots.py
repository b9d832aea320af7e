"""Screenshot sessions, as computer-use and browser agents make them, and the image parts of
a payload: what the image-limit tests and benchmarks build and count."""

from __future__ import annotations

from typing import Any

from ctxengine.transcript import Image, Message, Text, ToolCall, ToolResult


def data(i: int) -> str:
    """Base64 of screenshot ``i``: distinct, in the base64 alphabet without ``+`` and ``/``
    (the Gemini SDK's check writes bytes back URL-safe), a length divisible by four."""
    return f"iVBORw0KGgo{i:09d}"


def shot(i: int) -> Image:
    return Image("image/png", data(i), name=f"shot{i}.png")


def screenshots(n: int, where: str, start: int = 0) -> list[Message]:
    """``n`` agent steps, each taking a screenshot: in the tool result (Anthropic
    ``tool_result`` content, a Responses ``function_call_output``, a Gemini
    ``functionResponse``'s parts) or, as agents on OpenAI Chat send it (its tool messages take
    text only), in a user message after a text result."""
    out: list[Message] = []
    for i in range(start, start + n):
        call = ToolCall(f"call{i}", "screenshot", {"step": i})
        out.append(Message("assistant", (Text(f"Step {i}: taking a screenshot."), call)))
        if where == "tool":
            result = ToolResult(f"call{i}", (Text(f"screenshot {i}"), shot(i)))
            out.append(Message("tool", (result,)))
        else:
            out.append(Message("tool", (ToolResult(f"call{i}", (Text("taken"),)),)))
            out.append(Message("user", (Text(f"screenshot {i}"), shot(i))))
    return out


def image_parts(value: Any) -> int:
    """Image parts of a payload, in every provider's shape (nested tool results included)."""
    if isinstance(value, list):
        return sum(image_parts(v) for v in value)
    if not isinstance(value, dict):
        return 0
    if value.get("type") in ("image", "image_url", "input_image"):
        return 1
    for key in ("inlineData", "fileData"):
        media = value.get(key)
        if isinstance(media, dict) and str(media.get("mimeType", "")).startswith("image/"):
            return 1
    return sum(image_parts(v) for v in value.values())
