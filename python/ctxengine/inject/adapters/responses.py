"""OpenAI Responses: export a neutral transcript as a request body.

The importer of the same shape is :mod:`ctxengine.transcript.importers.responses`.
"""

from __future__ import annotations

from typing import Any

from ...transcript.importers.common import image_url
from ...transcript.model import (
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    Transcript,
)
from ...transcript.providers import (
    PDF,
    PDF_FILENAME,
    exportable,
    family_of,
    image_placeholder,
    responses_reasoning_item,
    sent_as_image,
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
            parts.append({"type": "input_image", "image_url": image_url(b), "detail": "auto"})
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
