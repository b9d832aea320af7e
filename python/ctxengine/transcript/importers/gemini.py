"""Gemini ``contents`` (``functionCall``/``functionResponse`` parts): import and export.

Both camelCase (REST) and snake_case (python SDK) keys are read; camelCase is written. A
``thoughtSignature`` on a non-thought part is kept as ``Thinking("", signature)`` right before
the block it belongs to, and written back onto that part. Calls without an id get
``call_<message>_<part>`` and responses are matched to them by name, in order. A part of a
kind this reader does not know (``executableCode``, a newer kind) is skipped and counted in
``meta["skipped_blocks"]`` by its field name.

A ``functionResponse.response`` is a JSON object: ``{"output": str}`` and ``{"error": str}``
are the result's text (the second an error), any other object its JSON text, recorded in
:data:`RESPONSES_KEY` so that the exporter sends the object again, as it came, while the
result still holds that text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from ..model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult
from .common import Loc, skip_block, tool_call

__all__ = (
    "RESPONSES_KEY",
    "an_error",
    "load_gemini",
    "recorded_object",
    "response_text",
    "text_digest",
)

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


#: ``Message.meta`` key of a tool message holding results that came as a JSON object other
#: than ``{"output": str}`` / ``{"error": str}``: ``{call id: text_digest(the result's text)}``
#: (a list of the digests of its results when the message repeats a call id).
#: The exporter sends such a result as that object again (parsed from its text, the object's
#: JSON) while the text is the one imported; a result the pipeline changed (trimmed, redacted,
#: summarized...) no longer matches its digest and goes out as ``{"output": text}``.
RESPONSES_KEY: Final = "gemini_responses"


def text_digest(text: str) -> str:
    """A digest of ``text``: stored in place of a second copy of a result, it tells whether
    the result's text is still the one imported."""
    # a lone surrogate as is: a session repairs it on entry (and the digest no longer matches)
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _digests(recorded: object) -> list[str]:
    """The digests a :data:`RESPONSES_KEY` entry records: one, or a list of them."""
    if isinstance(recorded, str):
        return [recorded]
    return [d for d in recorded if isinstance(d, str)] if isinstance(recorded, list) else []


def recorded_object(recorded: object, text: str) -> bool:
    """Whether ``text`` is one a :data:`RESPONSES_KEY` entry (``recorded``, its call id's)
    records: the text of a result that came as an object, unchanged."""
    digests = _digests(recorded)
    return bool(digests) and text_digest(text) in digests


def _plain(response: Mapping[str, Any]) -> tuple[str, bool] | None:
    """``(text, is_error)`` of ``{"output": str}`` or ``{"error": str}``, else None."""
    if len(response) == 1:
        ((key, value),) = response.items()
        if key in ("output", "error") and isinstance(value, str):
            return value, key == "error"
    return None


def an_error(response: Mapping[str, Any]) -> bool:
    """Whether a response object is an error: ``{"error": ...}`` and nothing else."""
    return len(response) == 1 and "error" in response


def response_text(response: Mapping[str, Any]) -> str:
    """The text of a ``functionResponse.response`` object: the string of ``{"output": str}``
    or ``{"error": str}``, else the object's JSON (the model reads its keys too). What a
    payload's count reads of it: the text the plan counted, whichever form was sent."""
    plain = _plain(response)
    if plain is not None:
        return plain[0]
    return json.dumps(response, ensure_ascii=False, default=str)


def _response_content(
    fr: Mapping[str, Any], loc: Loc
) -> tuple[tuple[Text | Image, ...], bool, bool]:
    """The result's content and whether it is an error, then whether its response is an
    object to send back as it came (:data:`RESPONSES_KEY`)."""
    response = fr.get("response")
    content: list[Text | Image] = []
    is_error = kept = False
    if isinstance(response, Mapping):
        plain = _plain(response)
        if plain is not None:
            content.append(Text(plain[0]))
            is_error = plain[1]
        else:
            try:
                text = json.dumps(response, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError):  # a datetime, a set...
                loc.at("response").fail("response", response, "a JSON object")
            content.append(Text(text))
            # ``{"error": <object>}``: an error all the same (a failure the summary lists)
            is_error, kept = an_error(response), True
    elif response is not None:
        loc.at("response").fail("response", response, "a JSON object")
    for i, part in enumerate(fr.get("parts") or []):
        media = _media(loc.at("parts").at(i).obj(part), loc.at("parts").at(i))
        if media is not None:
            content.append(media)
    return tuple(content), is_error, kept


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
    kept: dict[str, str | list[str]] = {}
    for j, raw in enumerate(parts):
        at = loc.at(j)
        part = at.obj(raw)
        fr = _get(part, "functionResponse")
        if isinstance(fr, Mapping):
            name = at.at("functionResponse").need(fr, "name", str)
            content, is_error, whole = _response_content(fr, at.at("functionResponse"))
            result = ToolResult(calls.take(name, fr.get("id")), content, is_error, name)
            if whole:  # a turn that repeats an id: each of its results' digests
                digest = text_digest(result.text)
                had = kept.get(result.call_id)
                kept[result.call_id] = digest if had is None else [*_digests(had), digest]
            results.append(result)
        elif isinstance(part.get("text"), str):
            other.append(Text(part["text"]))
        elif (media := _media(part, at)) is not None:
            other.append(media)
        else:
            _skip(part, at, "text, functionResponse, inlineData or fileData")
    meta = {RESPONSES_KEY: kept} if kept else {}
    out = [Message("tool", tuple(results), meta=meta)] if results else []
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
