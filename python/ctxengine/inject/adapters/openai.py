"""OpenAI Chat Completions: export a neutral transcript as a request body.

The importer of the same shape is :mod:`ctxengine.transcript.importers.openai`.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...transcript.importers.common import image_url
from ...transcript.model import Image, Message, Text, Thinking, ToolCall, Transcript
from ...transcript.providers import (
    AUDIO_FORMATS,
    OPENAI_NAMES,
    PDF,
    PDF_FILENAME,
    image_placeholder,
    sent_as_image,
    wire_name,
)


class _Memo(Protocol):
    """What the exporter needs of a session's :class:`~ctxengine.inject.memo.RenderMemo`."""

    def table(self, *key: Any) -> Any: ...


__all__ = ("export_openai", "message_dicts")


def _text_content(blocks: list[Text]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1:
        return blocks[0].text
    return [{"type": "text", "text": b.text} for b in blocks]


def _flat_text(content: tuple[Text | Image, ...]) -> list[Text]:
    """Text-only content: media become placeholders."""
    return [b if isinstance(b, Text) else image_placeholder(b) for b in content]


def _user(m: Message) -> dict[str, Any]:
    if len(m.blocks) == 1 and type(m.blocks[0]) is Text:  # the common case, one text block
        return {"role": "user", "content": m.blocks[0].text}
    blocks = [b for b in m.blocks if isinstance(b, (Text, Image))]
    if all(isinstance(b, Text) for b in blocks) and len(blocks) == 1:
        return {"role": "user", "content": blocks[0].text}  # type: ignore[union-attr]
    parts: list[dict[str, Any]] = []
    for b in blocks:
        parts.append({"type": "text", "text": b.text} if isinstance(b, Text) else _media_part(b))
    return {"role": "user", "content": parts}


def _media_part(b: Image) -> dict[str, Any]:
    """The user content part of one media item: an image, an inline PDF as a ``file`` part
    (the part takes no URL), inline WAV or MP3 audio as ``input_audio``; anything else a
    placeholder."""
    if b.data is not None and b.media_type == PDF:
        file = {"file_data": image_url(b), "filename": b.name or PDF_FILENAME}
        return {"type": "file", "file": file}
    fmt = AUDIO_FORMATS.get(b.media_type)
    if b.data is not None and fmt is not None:
        return {"type": "input_audio", "input_audio": {"data": b.data, "format": fmt}}
    if sent_as_image(b):
        if b.detail is not None:
            return {"type": "image_url", "image_url": {"url": image_url(b), "detail": b.detail}}
        return {"type": "image_url", "image_url": {"url": image_url(b)}}
    return {"type": "text", "text": image_placeholder(b).text}


def _call(c: ToolCall) -> dict[str, Any]:
    """The Chat Completions ``tool_calls`` entry of one call."""
    return {
        "id": c.id,
        "type": "function",
        "function": {
            "name": OPENAI_NAMES.get(c.name) or wire_name(c.name, "openai"),
            "arguments": c.arguments_json,
        },
    }


def _assistant_out(m: Message) -> dict[str, Any]:
    blocks = m.blocks
    if len(blocks) == 2 and type(blocks[0]) is Text and type(blocks[1]) is ToolCall:
        # a text and one call (what ``Message.assistant`` builds): the loop below, unrolled
        return {"role": "assistant", "content": blocks[0].text, "tool_calls": [_call(blocks[1])]}
    if len(blocks) == 1 and type(blocks[0]) is Text:
        return {"role": "assistant", "content": blocks[0].text}
    # One pass: text (media as placeholders) and tool calls, thinking left out.
    texts: list[Text] = []
    for b in m.blocks:
        kind = type(b)
        if kind is Text:
            texts.append(b)  # type: ignore[arg-type]
        elif kind is ToolCall or kind is Thinking:
            continue
        elif isinstance(b, Text):
            texts.append(b)
        elif isinstance(b, Image):
            texts.append(image_placeholder(b))
    if not texts:
        content: str | list[dict[str, Any]] | None = None
    elif len(texts) == 1:
        content = texts[0].text
    else:
        content = [{"type": "text", "text": b.text} for b in texts]
    out: dict[str, Any] = {"role": "assistant", "content": content}
    calls = m.tool_calls
    if calls:
        out["tool_calls"] = list(map(_call, calls))
    return out


def message_dicts(m: Message) -> list[dict[str, Any]]:
    """The Chat Completions messages of one neutral message (a tool message gives one per
    result). A participant ``name`` the message came with (``meta["name"]``) goes back."""
    role = m.role
    named = "name" in m.meta  # rare: checked inline, the function only then
    if role == "assistant":
        out = _assistant_out(m)
        return [_named(out, m) if named else out]
    if role == "user":
        out = _user(m)
        return [_named(out, m) if named else out]
    if role == "system":
        sys_role = m.meta.get("openai_role", "system")
        texts = [b for b in m.blocks if isinstance(b, Text)]
        out = {"role": sys_role, "content": _text_content(texts) if texts else ""}
        return [_named(out, m) if named else out]
    results: list[dict[str, Any]] = []
    for r in m.tool_results:
        parts = r.content
        if len(parts) == 1 and type(parts[0]) is Text:  # the common case, one text item
            content: str | list[dict[str, Any]] = parts[0].text
        else:
            texts = _flat_text(parts)
            content = _text_content(texts) if texts else ""
        results.append({"role": "tool", "tool_call_id": r.call_id, "content": content})
    return results


def _named(out: dict[str, Any], m: Message) -> dict[str, Any]:
    """``out`` with the participant name of ``m`` (its ``meta["name"]``, one is there)."""
    name = m.meta["name"]
    if isinstance(name, str) and name:
        out["name"] = wire_name(name, "openai")
    return out


def export_openai(t: Transcript, memo: _Memo | None = None) -> dict[str, Any]:
    """``{"messages": [...]}`` for Chat Completions. Thinking is left out; media in assistant
    turns and tool results become text placeholders (the API takes none there); in a user
    message an inline PDF is a ``file`` part and inline WAV or MP3 audio an ``input_audio``
    part.

    With ``memo``, each message's dicts are made once and copied (one level) into every
    payload that carries the message."""
    messages: list[dict[str, Any]] = []
    if memo is None:
        for m in t.messages:
            messages.extend(message_dicts(m))
        return {"messages": messages}
    per_message = memo.table("export", "openai").many(t.messages, message_dicts)
    messages = [d.copy() for ds in per_message for d in ds]
    return {"messages": messages}
