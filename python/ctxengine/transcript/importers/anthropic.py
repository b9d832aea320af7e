"""Anthropic Messages: import (``tool_use``/``tool_result``/``thinking``) and export.

A user turn holding ``tool_result`` blocks becomes a neutral ``tool`` message (all its results)
followed by a ``user`` message for any other blocks; the exporter merges them back, so the
round trip is lossless.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import Block, Image, Message, Text, Thinking, ToolResult
from .common import Loc, tool_call

__all__ = ("load_anthropic", "system_messages")


def _image(block: Mapping[str, Any], loc: Loc) -> Image:
    source = loc.need(block, "source", Mapping)
    kind = source.get("type")
    if kind == "base64":
        media = loc.at("source").need(source, "media_type", str)
        return Image(media, data=loc.at("source").need(source, "data", str))
    if kind == "url":
        url = loc.at("source").need(source, "url", str)
        return Image(str(source.get("media_type") or "image/jpeg"), url=url)
    return loc.at("source").fail("image source type", kind, "'base64' or 'url'")


def _media_block(block: Mapping[str, Any], loc: Loc) -> Text | Image:
    kind = block.get("type")
    if kind == "text":
        return Text(loc.need(block, "text", str))
    if kind == "image":
        return _image(block, loc)
    return loc.at("type").fail("block type", kind, "'text' or 'image'")


def _media(content: object, loc: Loc) -> tuple[Text | Image, ...]:
    """Content of a tool_result (or a system prompt): a string or text/image blocks."""
    if isinstance(content, str):
        return (Text(content),)
    if content is None:
        return ()
    return tuple(
        _media_block(loc.at(i).obj(b), loc.at(i)) for i, b in enumerate(loc.items(content))
    )


def _user_turn(content: object, loc: Loc) -> list[Message]:
    if isinstance(content, str):
        return [Message("user", (Text(content),))]
    results: list[Block] = []
    other: list[Block] = []
    for i, raw in enumerate(loc.items(content)):
        at = loc.at(i)
        block = at.obj(raw)
        kind = block.get("type")
        if kind == "tool_result":
            call_id = at.need(block, "tool_use_id", str)
            body = _media(block.get("content"), at.at("content"))
            results.append(ToolResult(call_id, body, bool(block.get("is_error", False))))
        elif kind in ("text", "image"):
            other.append(_media_block(block, at))
        else:
            at.at("type").fail("user block type", kind, "'text', 'image' or 'tool_result'")
    out = [Message("tool", tuple(results))] if results else []
    if other or not results:
        out.append(Message("user", tuple(other)))
    return out


def assistant_blocks(content: object, loc: Loc) -> list[Block]:
    """Neutral blocks from Anthropic assistant content (also used by the Claude Code importer)."""
    if isinstance(content, str):
        return [Text(content)] if content else []
    out: list[Block] = []
    for i, raw in enumerate(loc.items(content)):
        at = loc.at(i)
        block = at.obj(raw)
        kind = block.get("type")
        if kind == "text":
            out.append(Text(at.need(block, "text", str)))
        elif kind == "thinking":
            sig = block.get("signature")
            out.append(
                Thinking(at.need(block, "thinking", str), sig if isinstance(sig, str) else None)
            )
        elif kind == "redacted_thinking":
            out.append(Thinking("", at.need(block, "data", str), redacted=True))
        elif kind == "tool_use":
            out.append(tool_call(block.get("id"), block.get("name"), block.get("input"), at))
        elif kind == "image":
            out.append(_image(block, at))
        else:
            at.at("type").fail(
                "assistant block type",
                kind,
                "'text', 'thinking', 'redacted_thinking' or 'tool_use'",
            )
    return out


def system_messages(system: object, loc: Loc) -> list[Message]:
    """The top-level ``system`` (string or text blocks) as one system message (or none)."""
    if system is None:
        return []
    blocks = [b for b in _media(system, loc) if isinstance(b, Text)]
    return [Message("system", tuple(blocks))] if blocks else []


def load_anthropic(items: list[Any], loc: Loc) -> list[Message]:
    """Neutral messages from an Anthropic ``messages`` list.

    Raises:
        TranscriptError: an entry has an unknown role or block type, or a missing field.
    """
    out: list[Message] = []
    for i, raw in enumerate(items):
        at = loc.at(i)
        m = at.obj(raw)
        role = at.need(m, "role", str)
        if role == "user":
            out.extend(_user_turn(m.get("content"), at.at("content")))
        elif role == "assistant":
            blocks = assistant_blocks(m.get("content"), at.at("content"))
            out.append(Message("assistant", tuple(blocks), meta={"provider_family": "anthropic"}))
        else:
            at.at("role").fail("role", role, "'user' or 'assistant'")
    return out
