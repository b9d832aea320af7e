"""OpenAI Chat Completions ``messages``: import (incl. legacy ``function_call``) and export."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import Block, Image, Message, Text, Thinking, ToolResult
from ..providers import AUDIO_MEDIA_TYPES
from .common import Loc, file_from_data, image_from_url, skip_block, tool_call

__all__ = ("content_parts", "load_openai")


def content_parts(content: object, loc: Loc, *, images: bool) -> list[Text | Image]:
    """Blocks from a string or a list of content parts; a part of an unknown type is skipped
    (counted), a known one where it cannot be (an image outside user and tool content) or
    without its field is an error."""
    if isinstance(content, str):
        return [Text(content)]
    if content is None:
        return []
    out: list[Text | Image] = []
    for i, raw in enumerate(loc.items(content)):
        part = loc.at(i).obj(raw)
        kind = part.get("type")
        expected = "a text or image_url, file or input_audio part" if images else "a text part"
        if kind in ("text", "refusal"):
            out.append(Text(loc.at(i).need(part, kind, str)))
        elif kind == "image_url" and images:
            url = part.get("image_url")
            detail = url.get("detail") if isinstance(url, Mapping) else None
            url = url.get("url") if isinstance(url, Mapping) else url
            if not isinstance(url, str):
                loc.at(i).at("image_url").fail("url", url, "a URL string")
            out.append(image_from_url(url, detail=detail))
        elif kind == "file" and images and isinstance(part.get("file"), Mapping):
            file = part["file"]
            if isinstance(file.get("file_data"), str):
                out.append(file_from_data(file["file_data"], file.get("filename")))
            else:  # an uploaded file (file_id): nothing the model can hold
                skip_block(kind, loc.at(i), "content part type", expected)
        elif kind == "input_audio" and images:
            out.append(_audio(part, loc.at(i)))
        elif kind in ("image_url", "file", "input_audio"):  # in assistant or system content
            loc.at(i).fail("content part type", kind, expected)
        else:
            skip_block(kind, loc.at(i), "content part type", expected)
    return out


def _audio(part: Mapping[str, Any], loc: Loc) -> Image:
    """An ``input_audio`` part: base64 ``data`` in a ``format`` (``wav`` or ``mp3``)."""
    audio = loc.need(part, "input_audio", Mapping)
    data = loc.at("input_audio").need(audio, "data", str)
    fmt = loc.at("input_audio").need(audio, "format", str)
    media = AUDIO_MEDIA_TYPES.get(fmt)
    if media is None:
        loc.at("input_audio.format").fail("audio format", fmt, "'wav' or 'mp3'")
    return Image(media, data=data)


def _assistant(m: Mapping[str, Any], index: int, loc: Loc) -> Message:
    blocks: list[Block] = [
        b for b in content_parts(m.get("content"), loc.at("content"), images=False) if b != Text("")
    ]
    refusal = m.get("refusal")  # the model's refusal, with content None: text, as its part is
    if refusal is not None and not isinstance(refusal, str):
        loc.at("refusal").fail("refusal", refusal, "a string or null")
    if refusal:
        blocks.append(Text(refusal))
    calls = loc.at("tool_calls").items(m.get("tool_calls") or [])
    family = "openai"
    for j, raw in enumerate(calls):
        at = loc.at("tool_calls").at(j)
        fn = at.need(at.obj(raw), "function", Mapping)
        signature = _gemini_signature(raw)
        if signature is not None:
            # Gemini's own signature of its call: sent back to Gemini only (its exporter puts
            # an empty thinking block's signature on the functionCall part after it)
            blocks.append(Thinking("", signature))
            family = "gemini"
        blocks.append(tool_call(raw.get("id"), fn.get("name"), fn.get("arguments"), at))
    legacy = m.get("function_call")
    if isinstance(legacy, Mapping):
        at = loc.at("function_call")
        blocks.append(tool_call(f"call_{index}", legacy.get("name"), legacy.get("arguments"), at))
    return Message("assistant", tuple(blocks), meta=_named({"provider_family": family}, m))


def _gemini_signature(call: Mapping[str, Any]) -> str | None:
    """The thought signature Gemini's OpenAI-compatible endpoint gives a tool call
    (``extra_content.google.thought_signature``; Gemini 3 refuses a function call of the
    current turn sent back without it), or None."""
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, Mapping) else None
    signature = google.get("thought_signature") if isinstance(google, Mapping) else None
    return signature if isinstance(signature, str) and signature else None


def _named(meta: dict[str, Any], m: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` with the message's participant ``name`` (sent back by the Chat exporter)."""
    name = m.get("name")
    if isinstance(name, str) and name:
        meta["name"] = name
    return meta


def load_openai(items: list[Any], loc: Loc) -> list[Message]:
    """Neutral messages from a Chat Completions ``messages`` list.

    Raises:
        TranscriptError: an entry has an unknown role, a missing field or an unsupported part.
    """
    out: list[Message] = []
    pending_legacy: dict[str, list[str]] = {}  # function name -> ids of unanswered legacy calls
    for i, raw in enumerate(items):
        at = loc.at(i)
        m = at.obj(raw)
        role = at.need(m, "role", str)
        if role in ("system", "developer"):
            blocks = content_parts(m.get("content"), at.at("content"), images=False)
            meta = {"openai_role": role} if role == "developer" else {}
            out.append(Message("system", tuple(blocks), meta=_named(meta, m)))
        elif role == "user":
            parts = content_parts(m.get("content"), at.at("content"), images=True)
            out.append(Message("user", tuple(parts), meta=_named({}, m)))
        elif role == "assistant":
            msg = _assistant(m, i, at)
            if isinstance(m.get("function_call"), Mapping):
                call = msg.tool_calls[-1]
                pending_legacy.setdefault(call.name, []).append(call.id)
            out.append(msg)
        elif role == "tool":
            call_id = at.need(m, "tool_call_id", str)
            content = content_parts(m.get("content"), at.at("content"), images=True)
            out.append(Message("tool", (ToolResult(call_id, tuple(content)),)))
        elif role == "function":
            name = at.need(m, "name", str)
            ids = pending_legacy.get(name)
            call_id = ids.pop(0) if ids else f"call_{name}"
            content = content_parts(m.get("content"), at.at("content"), images=False)
            out.append(Message("tool", (ToolResult(call_id, tuple(content), name=name),)))
        else:
            at.at("role").fail(
                "role",
                role,
                "one of 'system', 'developer', 'user', 'assistant', 'tool', 'function'",
            )
    return out
