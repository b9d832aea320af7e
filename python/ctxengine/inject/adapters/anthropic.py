"""Anthropic Messages: export a neutral transcript as a request body.

The importer of the same shape is :mod:`ctxengine.transcript.importers.anthropic`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ...transcript.importers.common import arguments_object
from ...transcript.model import (
    Block,
    Compaction,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    Transcript,
    copy_data,
)
from ...transcript.providers import (
    PDF,
    exportable,
    family_of,
    image_placeholder,
    sent_as_image,
    thinking_first,
    wire_name,
)

__all__ = ("cache_marker", "export_anthropic", "marked", "message_blocks")


def _media_out(b: Text | Image) -> dict[str, Any]:
    if isinstance(b, Text):
        return {"type": "text", "text": b.text}
    if b.media_type == PDF and (b.data is not None or b.url):
        # a document block (user turns and tool results take one), titled by the file's name
        if b.data is not None:
            doc = {"type": "base64", "media_type": PDF, "data": b.data}
        else:
            doc = {"type": "url", "url": b.url or ""}
        out: dict[str, Any] = {"type": "document", "source": doc}
        if b.name:
            out["title"] = b.name
        return out
    if not sent_as_image(b):  # audio, video, other files: the API takes none of them
        return {"type": "text", "text": image_placeholder(b).text}
    if b.data is not None:
        source = {"type": "base64", "media_type": b.media_type, "data": b.data}
    else:
        source = {"type": "url", "url": b.url or ""}
    return {"type": "image", "source": source}


def _block_out(b: Block) -> dict[str, Any]:
    if type(b) is Compaction and b.provider == "anthropic":
        # verbatim, as the API asks, but for a cache marker it came with: the render places
        # its own (the API takes at most four), as it does for every other block
        block: dict[str, Any] = copy_data({k: v for k, v in b.item.items() if k != "cache_control"})
        return block
    if isinstance(b, (Text, Image)):
        return _media_out(b)
    if isinstance(b, ToolCall):
        return {
            "type": "tool_use",
            "id": b.id,
            "name": wire_name(b.name, "anthropic"),
            "input": arguments_object(b.arguments),
        }
    if isinstance(b, Thinking):
        if b.redacted:
            return {"type": "redacted_thinking", "data": b.signature or ""}
        return {"type": "thinking", "thinking": b.text, "signature": b.signature or ""}
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": b.call_id}
    if len(b.content) == 1 and isinstance(b.content[0], Text):
        out["content"] = b.content[0].text
    else:
        parts = [
            _media_out(c) for c in b.content if not (isinstance(c, Text) and not c.text.strip())
        ]
        if parts:
            out["content"] = parts
    if b.is_error:
        out["is_error"] = True
    return out


def _mark(blocks: list[dict[str, Any]], marker: dict[str, Any]) -> None:
    """Put ``cache_control`` on the last block that may carry it (not on thinking)."""
    for block in reversed(blocks):
        if block["type"] not in ("thinking", "redacted_thinking"):
            block["cache_control"] = dict(marker)
            return


def marked(blocks: list[dict[str, Any]], marker: dict[str, Any]) -> list[dict[str, Any]]:
    """``blocks`` with ``cache_control`` on a copy of the last block that may carry it; the
    list and that block are new, ``blocks`` is left as it was."""
    out = list(blocks)
    for k in range(len(out) - 1, -1, -1):
        if out[k]["type"] not in ("thinking", "redacted_thinking"):
            out[k] = {**out[k], "cache_control": dict(marker)}
            break
    return out


def message_blocks(m: Message, family: str | None) -> list[dict[str, Any]]:
    """The content blocks of one neutral message, unmarked.

    An image in an assistant message becomes a text placeholder: the API takes image blocks
    only in user turns and tool results ("'image' blocks are not permitted within assistant
    turns")."""
    if m.role == "assistant":
        sent = [b for b in m.blocks if exportable(b, "anthropic", family)]
        return [
            _assistant_image(b) if isinstance(b, Image) else _block_out(b)
            for b in thinking_first(sent)
        ]
    return [_block_out(b) for b in m.blocks if exportable(b, "anthropic", family)]


def _assistant_image(b: Image) -> dict[str, Any]:
    return {"type": "text", "text": image_placeholder(b).text}


def cache_marker(cache_ttl: str | None) -> dict[str, Any]:
    """The ``cache_control`` value for ``cache_ttl``."""
    marker: dict[str, Any] = {"type": "ephemeral"}
    if cache_ttl is not None:
        marker["ttl"] = cache_ttl
    return marker


def export_anthropic(
    t: Transcript, *, breakpoints: Collection[int] = (), cache_ttl: str | None = None
) -> dict[str, Any]:
    """``{"system": [...], "messages": [...]}``; consecutive tool/user messages share one user
    turn. ``breakpoints`` are message indices whose last block gets ``cache_control``."""
    marker = cache_marker(cache_ttl)
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    leading = True
    for i, m in enumerate(t.messages):
        blocks = message_blocks(m, family_of(m, t))
        if i in breakpoints:
            _mark(blocks, marker)
        if m.role == "system" and leading:
            system.extend(blocks)
            continue
        leading = False
        role = "assistant" if m.role == "assistant" else "user"
        if turns and turns[-1]["role"] == role == "user":
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    payload: dict[str, Any] = {"messages": turns}
    if system:
        payload["system"] = system
    return payload
