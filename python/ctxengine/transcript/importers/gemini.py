"""Gemini ``contents`` (``functionCall``/``functionResponse`` parts): import and export.

Both camelCase (REST) and snake_case (python SDK) keys are read; camelCase is written. A
``thoughtSignature`` on a non-thought part is kept as ``Thinking("", signature)`` right before
the block it belongs to, and written back onto that part. Calls without an id get
``call_<message>_<part>`` and responses are matched to them by name, in order. A part of a
kind this reader does not know (``executableCode``, a newer kind) is skipped and counted in
``meta["skipped_blocks"]`` by its field name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult
from .common import Loc, skip_block, tool_call

__all__ = "load_gemini"

_FAMILY = {"provider_family": "gemini"}


def _get(obj: Mapping[str, Any], camel: str) -> Any:
    """``obj[camel]`` or its snake_case twin."""
    if camel in obj:
        return obj[camel]
    snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
    return obj.get(snake)


def _media(part: Mapping[str, Any], loc: Loc) -> Image | None:
    inline = _get(part, "inlineData")
    if isinstance(inline, Mapping):
        data = inline.get("data")
        if not isinstance(data, str):
            loc.at("inlineData").fail("data", data, "a base64 string")
        return Image(str(_get(inline, "mimeType") or "application/octet-stream"), data=data)
    file = _get(part, "fileData")
    if isinstance(file, Mapping):
        uri = _get(file, "fileUri")
        if not isinstance(uri, str):
            loc.at("fileData").fail("fileUri", uri, "a URI string")
        return Image(str(_get(file, "mimeType") or "application/octet-stream"), url=uri)
    return None


def _response_content(fr: Mapping[str, Any], loc: Loc) -> tuple[tuple[Text | Image, ...], bool]:
    response = fr.get("response")
    content: list[Text | Image] = []
    is_error = False
    if isinstance(response, Mapping):
        keys = set(response)
        if keys == {"output"} and isinstance(response["output"], str):
            content.append(Text(response["output"]))
        elif keys == {"error"} and isinstance(response["error"], str):
            content.append(Text(response["error"]))
            is_error = True
        else:
            content.append(Text(json.dumps(response, ensure_ascii=False)))
    elif response is not None:
        loc.at("response").fail("response", response, "a JSON object")
    for i, part in enumerate(fr.get("parts") or []):
        media = _media(loc.at("parts").at(i).obj(part), loc.at("parts").at(i))
        if media is not None:
            content.append(media)
    return tuple(content), is_error


class _Calls:
    """Ids of calls awaiting a response, for responses that carry only a name."""

    def __init__(self) -> None:
        self.pending: dict[str, list[str]] = {}

    def add(self, call: ToolCall) -> None:
        self.pending.setdefault(call.name, []).append(call.id)

    def take(self, name: str, call_id: object) -> str:
        ids = self.pending.get(name, [])
        if isinstance(call_id, str) and call_id:
            if call_id in ids:
                ids.remove(call_id)
            return call_id
        return ids.pop(0) if ids else f"call_{name}"


#: Part fields that only annotate the part's data.
_PART_META = frozenset({"thought", "thoughtSignature", "thought_signature", "videoMetadata"})
_PART_META |= {"video_metadata", "partMetadata", "part_metadata", "mediaResolution"}
_KNOWN_DATA = frozenset({"text", "functionCall", "functionResponse", "inlineData", "fileData"})
_KNOWN_DATA |= {"function_call", "function_response", "inline_data", "file_data"}


def _skip(part: Mapping[str, Any], loc: Loc, expected: str) -> None:
    """Leave out (and count, by its data field) a part of a kind this reader does not know,
    e.g. ``executableCode``; a part without a data field is an error."""
    data = sorted(k for k in part if k not in _PART_META and part[k] is not None)
    if not data or any(k in _KNOWN_DATA for k in data):  # none, or a known one malformed
        loc.fail("part", part, expected)
    skip_block(data[0], loc, "part", expected)


def _model_parts(parts: list[Any], index: int, loc: Loc, calls: _Calls) -> list[Block]:
    out: list[Block] = []
    for j, raw in enumerate(parts):
        at = loc.at(j)
        part = at.obj(raw)
        sig = _get(part, "thoughtSignature")
        sig = sig if isinstance(sig, str) else None
        text = part.get("text")
        fc = _get(part, "functionCall")
        if part.get("thought") and isinstance(text, str):
            out.append(Thinking(text, sig))
            continue
        if sig:
            out.append(Thinking("", sig))
        if isinstance(fc, Mapping):
            call = tool_call(
                fc.get("id") or f"call_{index}_{j}", fc.get("name"), fc.get("args"), at
            )
            calls.add(call)
            out.append(call)
        elif isinstance(text, str):
            if text:
                out.append(Text(text))
        elif (media := _media(part, at)) is not None:
            out.append(media)
        elif not sig:
            _skip(part, at, "text, thought, functionCall, inlineData or fileData")
    return out


def _user_parts(parts: list[Any], loc: Loc, calls: _Calls) -> list[Message]:
    results: list[Block] = []
    other: list[Block] = []
    for j, raw in enumerate(parts):
        at = loc.at(j)
        part = at.obj(raw)
        fr = _get(part, "functionResponse")
        if isinstance(fr, Mapping):
            name = at.at("functionResponse").need(fr, "name", str)
            content, is_error = _response_content(fr, at.at("functionResponse"))
            results.append(ToolResult(calls.take(name, fr.get("id")), content, is_error, name))
        elif isinstance(part.get("text"), str):
            other.append(Text(part["text"]))
        elif (media := _media(part, at)) is not None:
            other.append(media)
        else:
            _skip(part, at, "text, functionResponse, inlineData or fileData")
    out = [Message("tool", tuple(results))] if results else []
    if other or not results:
        out.append(Message("user", tuple(other)))
    return out


def load_gemini(items: list[Any], loc: Loc) -> list[Message]:
    """Neutral messages from Gemini ``contents``.

    Raises:
        TranscriptError: a content has an unknown role or part, or a missing field (a
            chat message with ``content`` instead of ``parts`` included; a content with no
            or null ``parts`` and no other field but its role, as the API returns for an
            empty answer, is an empty turn).
    """
    out: list[Message] = []
    calls = _Calls()
    for i, raw in enumerate(items):
        at = loc.at(i)
        c = at.obj(raw)
        role = c.get("role") or "user"
        if c.get("parts") is None and c.keys() <= {"role", "parts"}:
            # a candidate's content with no parts (an empty, SAFETY or MAX_TOKENS answer; the
            # SDK's Content(parts=None)): nothing said, nothing to lose
            parts: list[Any] = []
        else:  # e.g. a chat message's "content" instead of parts: its text would be lost
            parts = at.need(c, "parts", list)
        if role == "model":
            blocks = _model_parts(parts, i, at.at("parts"), calls)
            out.append(Message("assistant", tuple(blocks), meta=_FAMILY))
        elif role in ("user", "function"):
            out.extend(_user_parts(parts, at.at("parts"), calls))
        else:
            at.at("role").fail("role", role, "'user' or 'model'")
    return out


def system_instruction(value: object, loc: Loc) -> list[Message]:
    """``system_instruction`` (a content, its parts, or a string) as a system message."""
    if value is None:
        return []
    if isinstance(value, str):
        return [Message("system", (Text(value),))]
    parts = value.get("parts") if isinstance(value, Mapping) else value
    texts = [Text(loc.at(i).need(p, "text", str)) for i, p in enumerate(loc.items(parts))]
    return [Message("system", tuple(texts))] if texts else []
