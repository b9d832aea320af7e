"""OpenAI Responses: export a neutral transcript as a request body.

The importer of the same shape is :mod:`ctxengine.transcript.importers.responses`.
"""

from __future__ import annotations

from typing import Any

from ...transcript.importers.common import image_url
from ...transcript.importers.responses import ITEMS_KEY
from ...transcript.model import (
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
    PDF_FILENAME,
    exportable,
    family_of,
    image_placeholder,
    responses_reasoning_item,
    sent_as_image,
    wire_name,
)

__all__ = ("export_responses", "instructions_of", "message_items")


def _content_parts(blocks: tuple[Text | Image, ...] | list[Text | Image]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, Text):
            parts.append({"type": "input_text", "text": b.text})
        elif b.media_type == PDF and (b.data is not None or b.url):
            parts.append(_file_part(b))  # user messages and function call outputs take a file
        elif sent_as_image(b):
            detail = b.detail or "auto"
            parts.append({"type": "input_image", "image_url": image_url(b), "detail": detail})
        else:  # audio, video, other files: input content takes none of them
            parts.append({"type": "input_text", "text": image_placeholder(b).text})
    return parts


def _file_part(b: Image) -> dict[str, Any]:
    """An ``input_file`` part for a PDF, inline (named, as the API wants) or by URL."""
    if b.data is not None:
        return {"type": "input_file", "file_data": image_url(b), "filename": b.name or PDF_FILENAME}
    part = {"type": "input_file", "file_url": b.url or ""}
    if b.name:
        part["filename"] = b.name
    return part


def _simple(blocks: list[Text | Image]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1 and isinstance(blocks[0], Text):
        return blocks[0].text
    return _content_parts(blocks)


def _item_ids(m: Message) -> list[str | None] | None:
    """The output item id each block of ``m`` came from (the importer's ``responses_items``),
    or None when it recorded none or the blocks changed since (their number differs)."""
    spans = m.meta.get(ITEMS_KEY)
    if not isinstance(spans, (list, tuple)):
        return None
    ids: list[str | None] = []
    for span in spans:
        if not (isinstance(span, (list, tuple)) and len(span) == 2 and isinstance(span[1], int)):
            return None
        item_id = span[0] if isinstance(span[0], str) else None
        ids.extend([item_id] * span[1])
    return ids if len(ids) == len(m.blocks) else None


def _assistant_items(m: Message, family: str | None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    ids = _item_ids(m)
    for k, b in enumerate(m.blocks):
        item_id = ids[k] if ids is not None else None
        if type(b) is Compaction and b.provider == "openai-responses":
            items.append(copy_data(dict(b.item)))  # verbatim, in its place
        elif isinstance(b, Thinking):
            item = responses_reasoning_item(b.signature)
            if item is not None and exportable(b, "openai-responses", family):
                items.append(item)
        elif isinstance(b, (Text, Image)):
            text = b.text if isinstance(b, Text) else image_placeholder(b).text
            if item_id is None:
                items.append({"type": "message", "role": "assistant", "content": text})
                continue
            part = {"type": "output_text", "text": text, "annotations": []}
            last = items[-1] if items else None
            if last is not None and last.get("id") == item_id and last["type"] == "message":
                last["content"].append(part)  # one output message of several parts, as it came
                continue
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": item_id,
                    "status": "completed",
                    "content": [part],
                }
            )
        elif isinstance(b, ToolCall):
            call = {
                "type": "function_call",
                "call_id": b.id,
                "name": wire_name(b.name, "openai"),
                "arguments": b.arguments_json,
            }
            if item_id is not None:
                call["id"] = item_id
            items.append(call)
    # a reasoning item needs the item it led to after it (the API rejects one without): a
    # turn's trailing reasoning (its calls removed, or cut short) is not sent
    while items and items[-1]["type"] == "reasoning":
        items.pop()
    return items


def message_items(m: Message, family: str | None) -> list[dict[str, Any]]:
    """The ``input`` items of one neutral message (``family``: its signature family)."""
    if m.role == "system":
        texts = [b for b in m.blocks if isinstance(b, Text)]
        role = m.meta.get("openai_role", "system")
        return [{"type": "message", "role": role, "content": _simple(list(texts))}]
    if m.role == "user":
        blocks = [b for b in m.blocks if isinstance(b, (Text, Image))]
        return [{"type": "message", "role": "user", "content": _simple(blocks)}]
    if m.role == "assistant":
        return _assistant_items(m, family)
    return [
        {
            "type": "function_call_output",
            "call_id": r.call_id,
            "output": _simple(list(r.content)) if r.content else "",
        }
        for r in m.tool_results
    ]


def instructions_of(messages: tuple[Message, ...]) -> str | None:
    """The ``instructions`` text: when the messages open with exactly one single-text system
    message (and hold no other), its text; else None."""
    first = messages[0] if messages else None
    if (
        first is not None
        and first.role == "system"
        and len(first.blocks) == 1
        and "openai_role" not in first.meta
        and not any(m.role == "system" for m in messages[1:])
    ):
        return first.text
    return None


def export_responses(t: Transcript) -> dict[str, Any]:
    """``{"input": [...]}`` plus ``"instructions"`` when the transcript opens with exactly one
    single-text system message. Thinking is sent only as the reasoning item it came from, and
    only when an item of its turn follows it."""
    payload: dict[str, Any] = {}
    messages = t.messages
    instructions = instructions_of(messages)
    if instructions is not None:
        payload["instructions"] = instructions
        messages = messages[1:]
    items: list[dict[str, Any]] = []
    for m in messages:
        items.extend(message_items(m, family_of(m, t)))
    payload["input"] = items
    return payload
