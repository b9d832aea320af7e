"""OpenAI Responses ``input`` items: import and export.

Consecutive assistant-side items (assistant ``message``, ``function_call``, ``reasoning``) form
one neutral assistant message. A ``reasoning`` item is kept whole, as JSON, in
:attr:`Thinking.signature` (its summary is the thinking text), so it can be sent back as is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._common import Loc, image_from_url, image_url, tool_call
from .model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult, Transcript
from .providers import (
    IMAGE_TYPES,
    exportable,
    family_of,
    image_placeholder,
    responses_reasoning_item,
)

__all__ = ("export_responses", "load_responses")

_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


def _parts(content: object, loc: Loc) -> list[Text | Image]:
    if isinstance(content, str):
        return [Text(content)]
    out: list[Text | Image] = []
    for i, raw in enumerate(loc.items(content)):
        part = loc.at(i).obj(raw)
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            key = "refusal" if kind == "refusal" else "text"
            out.append(Text(loc.at(i).need(part, key, str)))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            out.append(image_from_url(part["image_url"]))
        else:
            loc.at(i).fail(
                "content part type", kind, "input_text, output_text or input_image (URL)"
            )
    return out


def _reasoning(item: Mapping[str, Any], loc: Loc) -> Thinking:
    summary = item.get("summary") or []
    texts = [loc.at("summary").at(i).need(s, "text", str) for i, s in enumerate(summary)]
    return Thinking("\n\n".join(texts), json.dumps(item, ensure_ascii=False, separators=(",", ":")))


def _open_assistant(out: list[Message]) -> list[Block]:
    """Blocks of the trailing assistant message (popped so it can be rebuilt), or a new list."""
    if out and out[-1].role == "assistant":
        return list(out.pop().blocks)
    return []


def load_responses(items: list[Any], loc: Loc) -> list[Message]:
    """Neutral messages from Responses ``input`` items.

    Raises:
        TranscriptError: an item has an unknown type or role, or a missing field.
    """
    out: list[Message] = []
    family = {"provider_family": "openai-responses"}
    for i, raw in enumerate(items):
        at = loc.at(i)
        item = at.obj(raw)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = at.need(item, "role", str)
            blocks = _parts(item.get("content"), at.at("content"))
            if role == "assistant":
                prev = _open_assistant(out)
                prev.extend(b for b in blocks if not (isinstance(b, Text) and not b.text))
                out.append(Message("assistant", tuple(prev), meta=family))
            elif role in ("system", "developer"):
                texts = [b for b in blocks if isinstance(b, Text)]
                out.append(Message("system", tuple(texts), meta={"openai_role": role}))
            elif role == "user":
                out.append(Message("user", tuple(blocks)))
            else:
                at.at("role").fail("role", role, "'user', 'assistant', 'system' or 'developer'")
        elif kind == "function_call":
            call = tool_call(item.get("call_id"), item.get("name"), item.get("arguments"), at)
            out.append(Message("assistant", (*_open_assistant(out), call), meta=family))
        elif kind == "reasoning":
            thinking = _reasoning(item, at)
            out.append(Message("assistant", (*_open_assistant(out), thinking), meta=family))
        elif kind == "function_call_output":
            call_id = at.need(item, "call_id", str)
            output = item.get("output", "")
            content = tuple(_parts(output, at.at("output")))
            out.append(Message("tool", (ToolResult(call_id, content),)))
        else:
            at.at("type").fail(
                "item type",
                kind,
                "'message', 'function_call', 'function_call_output' or 'reasoning'",
            )
    return out


def _content_parts(blocks: tuple[Text | Image, ...] | list[Text | Image]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, Text):
            parts.append({"type": "input_text", "text": b.text})
        elif b.media_type in IMAGE_TYPES or b.url:
            parts.append({"type": "input_image", "image_url": image_url(b), "detail": "auto"})
        else:
            parts.append({"type": "input_text", "text": image_placeholder(b).text})
    return parts


def _simple(blocks: list[Text | Image]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1 and isinstance(blocks[0], Text):
        return blocks[0].text
    return _content_parts(blocks)


def _assistant_items(m: Message, family: str | None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for b in m.blocks:
        if isinstance(b, Thinking):
            item = responses_reasoning_item(b.signature)
            if item is not None and exportable(b, "openai-responses", family):
                items.append(item)
        elif isinstance(b, (Text, Image)):
            text = b.text if isinstance(b, Text) else image_placeholder(b).text
            items.append({"type": "message", "role": "assistant", "content": text})
        elif isinstance(b, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": b.id,
                    "name": b.name,
                    "arguments": b.arguments_json,
                }
            )
    return items


def export_responses(t: Transcript) -> dict[str, Any]:
    """``{"input": [...]}`` plus ``"instructions"`` when the transcript opens with exactly one
    single-text system message. Thinking is sent only as the reasoning item it came from."""
    payload: dict[str, Any] = {}
    messages = t.messages
    first = messages[0] if messages else None
    if (
        first is not None
        and first.role == "system"
        and len(first.blocks) == 1
        and "openai_role" not in first.meta
        and not any(m.role == "system" for m in messages[1:])
    ):
        payload["instructions"] = first.text
        messages = messages[1:]
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            texts = [b for b in m.blocks if isinstance(b, Text)]
            role = m.meta.get("openai_role", "system")
            items.append({"type": "message", "role": role, "content": _simple(list(texts))})
        elif m.role == "user":
            blocks = [b for b in m.blocks if isinstance(b, (Text, Image))]
            items.append({"type": "message", "role": "user", "content": _simple(blocks)})
        elif m.role == "assistant":
            items.extend(_assistant_items(m, family_of(m, t)))
        else:
            for r in m.tool_results:
                output = _simple(list(r.content)) if r.content else ""
                items.append(
                    {"type": "function_call_output", "call_id": r.call_id, "output": output}
                )
    payload["input"] = items
    return payload
