"""OpenAI Responses ``input`` items: import and export.

Consecutive assistant-side items (assistant ``message``, ``function_call``, ``reasoning``) form
one neutral assistant message. A ``reasoning`` item is kept whole, as JSON, in
:attr:`Thinking.signature` (its summary is the thinking text), so it can be sent back as is.
A ``compaction`` item (what server-side compaction or ``responses.compact`` returns: an
opaque ``encrypted_content`` standing for every item before it) becomes an assistant message
of its own holding a :class:`~ctxengine.transcript.model.Compaction` that keeps the item
whole, so a render for OpenAI Responses sends it back verbatim, in its place.
A content part the model cannot hold is skipped and counted in ``meta["skipped_blocks"]``;
an item of an unknown type is an error (it may be a call whose output follows).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from ..model import (
    Block,
    Compaction,
    Image,
    Message,
    Text,
    Thinking,
    ToolResult,
    compaction_of,
    copy_data,
)
from .common import PDF, Loc, file_from_data, image_from_url, skip_block, tool_call

__all__ = ("compaction_message", "load_responses")

#: Content part types read as text (the model-input filter of the Agents SDK reads the same).
TEXT_PARTS: Final = ("input_text", "output_text", "text", "refusal")


def _parts(content: object, loc: Loc) -> list[Text | Image]:
    if isinstance(content, str):
        return [Text(content)]
    out: list[Text | Image] = []
    for i, raw in enumerate(loc.items(content)):
        part = loc.at(i).obj(raw)
        kind = part.get("type")
        if kind in TEXT_PARTS:
            key = "refusal" if kind == "refusal" else "text"
            out.append(Text(loc.at(i).need(part, key, str)))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            out.append(image_from_url(part["image_url"], detail=part.get("detail")))
        elif kind == "input_file" and isinstance(part.get("file_data"), str):
            out.append(file_from_data(part["file_data"], part.get("filename")))
        elif kind == "input_file" and isinstance(part.get("file_url"), str):
            name = part.get("filename") if isinstance(part.get("filename"), str) else None
            # a file, not an image: a URL without a known extension is taken to be a PDF
            out.append(image_from_url(part["file_url"], default=PDF, name=name))
        else:  # a part the model cannot hold (an uploaded file_id, audio, a newer type)
            expected = "input_text, output_text or input_image (URL)"
            skip_block(kind, loc.at(i), "content part type", expected)
    return out


def item_kind(item: Mapping[str, Any]) -> Any:
    """An input item's ``type`` (an easy input message may leave it out: one with a ``role``
    is a ``message``); None when it says neither."""
    return item.get("type") or ("message" if "role" in item else None)


def _reasoning(item: Mapping[str, Any], loc: Loc) -> Thinking:
    raw = item.get("summary")
    summary = [] if raw is None else loc.at("summary").items(raw)
    texts = [loc.at("summary").at(i).need(s, "text", str) for i, s in enumerate(summary)]
    return Thinking("\n\n".join(texts), json.dumps(item, ensure_ascii=False, separators=(",", ":")))


#: ``Message.meta`` key of an assistant message's output items: ``[[item id or None, number
#: of blocks it gave], ...]`` in block order, kept when one of them has an id (see
#: :func:`~ctxengine.inject.adapters.responses.message_items`).
ITEMS_KEY: Final = "responses_items"


def _assistant(out: list[Message], blocks: list[Block], item: Mapping[str, Any]) -> None:
    """Append ``blocks`` of one output ``item`` to the trailing assistant message (rebuilt), or
    to a new one; the item's id is recorded with its blocks when it has one, so the export
    sends each item again with its id (the API pairs a reasoning item with the item that
    followed it by their ids)."""
    prev: list[Block] = []
    spans: list[list[Any]] = []
    if out and out[-1].role == "assistant" and compaction_of(out[-1]) is None:
        last = out.pop()
        prev = list(last.blocks)
        spans = [list(s) for s in last.meta.get(ITEMS_KEY, ())] or [[None, len(prev)]]
    item_id = item.get("id")
    if blocks:
        spans.append([item_id if isinstance(item_id, str) and item_id else None, len(blocks)])
    meta: dict[str, Any] = {"provider_family": "openai-responses"}
    if any(s[0] is not None for s in spans):
        meta[ITEMS_KEY] = spans
    out.append(Message("assistant", (*prev, *blocks), meta=meta))


def compaction_message(item: Mapping[str, Any], loc: Loc) -> Message:
    """The assistant message of a ``compaction`` item (``ResponseCompactionItemParam``:
    ``type``, ``encrypted_content``, optional ``id``), the item kept whole.

    Raises:
        TranscriptError: ``encrypted_content`` is missing or not a string.
    """
    loc.need(item, "encrypted_content", str)
    block = Compaction("", "openai-responses", copy_data(dict(item)))
    return Message("assistant", (block,), meta={"provider_family": "openai-responses"})


def load_responses(items: list[Any], loc: Loc) -> list[Message]:
    """Neutral messages from Responses ``input`` items.

    Raises:
        TranscriptError: an item has an unknown type or role, or a missing field.
    """
    out: list[Message] = []
    for i, raw in enumerate(items):
        at = loc.at(i)
        item = at.obj(raw)
        kind = item_kind(item)
        if kind == "message":
            role = at.need(item, "role", str)
            blocks = _parts(item.get("content"), at.at("content"))
            if role == "assistant":
                _assistant(
                    out, [b for b in blocks if not (isinstance(b, Text) and not b.text)], item
                )
            elif role in ("system", "developer"):
                texts = [b for b in blocks if isinstance(b, Text)]
                out.append(Message("system", tuple(texts), meta={"openai_role": role}))
            elif role == "user":
                out.append(Message("user", tuple(blocks)))
            else:
                at.at("role").fail("role", role, "'user', 'assistant', 'system' or 'developer'")
        elif kind == "function_call":
            call = tool_call(item.get("call_id"), item.get("name"), item.get("arguments"), at)
            _assistant(out, [call], item)
        elif kind == "reasoning":
            _assistant(out, [_reasoning(item, at)], {})  # its id is in the item it keeps whole
        elif kind == "compaction":
            out.append(compaction_message(item, at))
        elif kind == "function_call_output":
            call_id = at.need(item, "call_id", str)
            output = item.get("output", "")
            content = tuple(_parts(output, at.at("output")))
            out.append(Message("tool", (ToolResult(call_id, content),)))
        else:
            at.at("type").fail(
                "item type",
                kind,
                "'message', 'function_call', 'function_call_output', 'reasoning' or 'compaction'",
            )
    return out
