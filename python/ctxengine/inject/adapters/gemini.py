"""Gemini: export a neutral transcript as a request body.

The importer of the same shape is :mod:`ctxengine.transcript.importers.gemini`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from ...transcript.importers.common import arguments_object
from ...transcript.importers.gemini import RESPONSES_KEY, an_error, recorded_object
from ...transcript.model import (
    Block,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
)
from ...transcript.providers import exportable, family_of, image_placeholder, wire_name

__all__ = ("export_gemini", "in_call_order", "message_parts")


def _media_out(b: Image) -> dict[str, Any]:
    if b.data is not None:
        return {"inlineData": {"mimeType": b.media_type, "data": b.data}}
    return {"fileData": {"fileUri": b.url or "", "mimeType": b.media_type}}


def _response(r: ToolResult, kept: Mapping[str, Any]) -> dict[str, Any]:
    """The ``response`` of a result: the object it came as (``kept``: the importer's
    :data:`~ctxengine.transcript.importers.gemini.RESPONSES_KEY` of its message) while its text
    is still that object's JSON, parsed anew (a payload shares nothing with the transcript);
    else its text under ``output`` (``error``)."""
    text = "\n".join(c.text for c in r.content if isinstance(c, Text))
    recorded = kept.get(r.call_id) if kept else None
    if recorded is not None and recorded_object(recorded, text):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # a digest recorded by hand for other text
            value = None
        # as it came, unless the result is now flagged otherwise (an ``{"error": ...}``
        # object is an error, any other one is not)
        if isinstance(value, dict) and an_error(value) == r.is_error:
            return value
    return {"error" if r.is_error else "output": text}


def _result_out(r: ToolResult, names: Mapping[str, str], kept: Mapping[str, Any]) -> dict[str, Any]:
    fr: dict[str, Any] = {
        "id": r.call_id,
        "name": wire_name(r.name or names.get(r.call_id, "unknown"), "gemini"),
        "response": _response(r, kept),
    }
    media = [_media_out(c) for c in r.content if isinstance(c, Image)]
    if media:
        fr["parts"] = media
    return {"functionResponse": fr}


def _parts_out(
    blocks: list[Block], names: Mapping[str, str], kept: Mapping[str, Any]
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    pending_sig: str | None = None
    for b in blocks:
        if isinstance(b, Thinking):
            if b.text:
                part: dict[str, Any] = {"text": b.text, "thought": True}
                if b.signature:
                    part["thoughtSignature"] = b.signature
                parts.append(part)
            else:
                pending_sig = b.signature
            continue
        if isinstance(b, Text):
            part = {"text": b.text}
        elif isinstance(b, Image):
            part = _media_out(b) if b.data or b.url else {"text": image_placeholder(b).text}
        elif isinstance(b, ToolCall):
            args = arguments_object(b.arguments)
            part = {"functionCall": {"id": b.id, "name": wire_name(b.name, "gemini"), "args": args}}
        else:
            part = _result_out(b, names, kept)
        if pending_sig:
            part["thoughtSignature"] = pending_sig
            pending_sig = None
        parts.append(part)
    if pending_sig:
        parts.append({"text": "", "thought": True, "thoughtSignature": pending_sig})
    return parts


def message_parts(m: Message, family: str | None, names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The parts of one neutral message; ``names``: call id -> tool name, for results that do
    not carry their tool's name."""
    kept = m.meta.get(RESPONSES_KEY) if m.role == "tool" else None
    blocks = [b for b in m.blocks if exportable(b, "gemini", family)]
    return _parts_out(blocks, names, kept if isinstance(kept, Mapping) else {})


def in_call_order(parts: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
    """Put the ``functionResponse`` parts of a user content in the order of the
    ``functionCall`` parts of the model content before it (``calls``), in place: Gemini pairs
    the responses of parallel calls with the calls by position. The other parts keep their
    places; a response that answers none of ``calls`` goes after those that do."""
    slots = [k for k, p in enumerate(parts) if "functionResponse" in p]
    if len(slots) < 2:
        return
    order: dict[str, int] = {}
    for p in calls:
        fc = p.get("functionCall")
        if fc is not None:
            order.setdefault(fc.get("id"), len(order))
    responses = [parts[k] for k in slots]
    ranked = sorted(responses, key=lambda p: order.get(p["functionResponse"].get("id"), len(order)))
    for k, p in zip(slots, ranked, strict=True):
        parts[k] = p


def export_gemini(t: Transcript) -> dict[str, Any]:
    """``{"contents": [...], "system_instruction": {...}}``; tool results and user text that
    follow each other share one user content, the results in the order of their calls."""
    names = {c.id: c.name for m in t.messages for c in m.tool_calls}
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    leading = True
    for m in t.messages:
        parts = message_parts(m, family_of(m, t), names)
        if m.role == "system" and leading:
            system.extend(parts)
            continue
        leading = False
        role = "model" if m.role == "assistant" else "user"
        if contents and contents[-1]["role"] == role == "user":
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    for prev, content in pairwise(contents):
        if content["role"] == "user" and prev["role"] == "model":
            in_call_order(content["parts"], prev["parts"])
    payload: dict[str, Any] = {"contents": contents}
    if system:
        payload["system_instruction"] = {"parts": system}
    return payload
