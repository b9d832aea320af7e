"""Neutral :class:`~ctxengine.transcript.Message` objects to JSON and back, losslessly.

The shape is the store's own (``{"role", "blocks": [{"type": ...}], "id", "stop_reason",
"meta"}``), not a provider's, so nothing a provider format cannot carry (thinking signatures,
``is_error``, tool names, images by URL or data) is lost on the way through a store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import StoreError
from ..transcript import Block, Compaction, Image, Message, Text, Thinking, ToolCall, ToolResult
from ..transcript.model import valid_utf8

__all__ = ("message_from_json", "message_to_json")


def _block_to_json(block: Block) -> dict[str, Any]:
    if type(block) is Compaction:
        item = _jsonable(dict(block.item))
        return {"type": "compaction", "text": block.text, "provider": block.provider, "item": item}
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Image):
        out = {"type": "image", "media_type": block.media_type, "data": block.data}
        out["url"] = block.url
        if block.name is not None:  # only when set: entries stored before it read the same
            out["name"] = block.name
        if block.detail is not None:
            out["detail"] = block.detail
        return out
    if isinstance(block, ToolCall):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    if isinstance(block, ToolResult):
        return {
            "type": "tool_result",
            "call_id": block.call_id,
            "content": [_block_to_json(b) for b in block.content],
            "is_error": block.is_error,
            "name": block.name,
        }
    return {
        "type": "thinking",
        "text": block.text,
        "signature": block.signature,
        "redacted": block.redacted,
    }


def _jsonable(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` as JSON; values JSON cannot hold become their ``repr`` (metadata, not data),
    a lone surrogate U+FFFD (a session repairs the text it sends on entry, not its meta)."""
    text = valid_utf8(json.dumps(dict(meta), default=repr, ensure_ascii=False))
    out: dict[str, Any] = json.loads(text)
    return out


def message_to_json(message: Message) -> dict[str, Any]:
    """The message as a JSON object (see the module docstring)."""
    out: dict[str, Any] = {
        "role": message.role,
        "blocks": [_block_to_json(b) for b in message.blocks],
    }
    if message.id is not None:
        out["id"] = valid_utf8(message.id)
    if message.stop_reason is not None:
        out["stop_reason"] = message.stop_reason
    if message.meta:
        out["meta"] = _jsonable(message.meta)
    return out


def _block_from_json(obj: Mapping[str, Any]) -> Block:
    kind = obj.get("type")
    if kind == "text":
        return Text(str(obj["text"]))
    if kind == "image":
        detail = obj.get("detail")
        return Image(
            str(obj["media_type"]),
            obj.get("data"),
            obj.get("url"),
            obj.get("name"),
            detail if isinstance(detail, str) else None,
        )
    if kind == "tool_call":
        return ToolCall(str(obj["id"]), str(obj["name"]), obj["arguments"])
    if kind == "tool_result":
        content = tuple(_block_from_json(b) for b in obj["content"])
        return ToolResult(
            str(obj["call_id"]),
            content,  # type: ignore[arg-type]  # checked by ToolResult itself
            bool(obj.get("is_error", False)),
            obj.get("name"),
        )
    if kind == "thinking":
        return Thinking(str(obj["text"]), obj.get("signature"), bool(obj.get("redacted", False)))
    if kind == "compaction":
        return Compaction(str(obj["text"]), str(obj["provider"]), dict(obj["item"]))
    raise StoreError(
        f"stored block type is {kind!r}; expected text, image, tool_call, tool_result, "
        "thinking or compaction"
    )


def message_from_json(obj: object) -> Message:
    """Rebuild a :class:`Message` from :func:`message_to_json` output.

    Raises:
        StoreError: ``obj`` is not a stored message (the message says which part is wrong).
    """
    if not isinstance(obj, Mapping):
        raise StoreError(f"stored message is {type(obj).__name__}; expected an object")
    try:
        blocks = tuple(_block_from_json(b) for b in obj["blocks"])
        return Message(
            obj["role"],
            blocks,
            id=obj.get("id"),
            stop_reason=obj.get("stop_reason"),
            meta=dict(obj.get("meta") or {}),
        )
    except StoreError:
        raise
    except (KeyError, TypeError, ValueError) as exc:  # TranscriptError is a ValueError
        raise StoreError(f"stored message is malformed: {exc}") from exc
