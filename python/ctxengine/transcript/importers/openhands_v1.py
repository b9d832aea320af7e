"""OpenHands V1 event streams (the software-agent SDK): events tagged by ``kind``.

A conversation is a list of events, saved as ``events/event-<index>-<id>.json`` files in the
conversation folder (or dumped as a JSON list / one event per JSONL line). What the model saw:

- ``SystemPromptEvent``: the system message (``system_prompt``, then ``dynamic_context``);
- ``MessageEvent``: ``llm_message`` (role and ``text``/``image`` content) plus its
  ``extended_content`` (text the agent context added);
- ``ActionEvent``: one tool call (``tool_call`` as the model sent it, else ``tool_call_id``,
  ``tool_name`` and the ``action`` fields) after the agent's ``thought``. The actions of one
  model response share ``llm_response_id`` and make one assistant message with parallel
  calls; its thinking (``thinking_blocks``, else ``reasoning_content``; and the OpenAI
  Responses reasoning item ``responses_reasoning_item``, see :func:`_responses_reasoning`)
  comes first, taken from the first action of the response as the SDK takes it;
- ``ObservationEvent``: the result for ``tool_call_id`` (``observation.content``; an
  ``is_error`` observation is an error result); ``UserRejectObservation`` is an error result
  ``Action rejected: <reason>``, as the SDK sends it; ``AgentErrorEvent`` is an error result
  for its call, or user text when it names no call of the conversation;
- ``Condensation``: the condenser forgot ``forgotten_event_ids`` and put ``summary`` at
  ``summary_offset`` of what is left. ``view="full"`` keeps every event and records each
  condensation in ``meta["compactions"]``; ``view="model"`` applies them in order, as the
  SDK builds the model's view (the summary is a user message). A stored
  ``CondensationSummaryEvent`` is user text.

Other kinds (state updates, pauses, condensation requests, token or error notices, kinds this
reader does not know) are not model context: counted in ``meta["skipped_events"]``. Content
parts of an unknown type are skipped too (``meta["skipped_blocks"]``, by type).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ...errors import TranscriptError
from ..model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult
from ..providers import responses_reasoning_item
from .common import (
    Loc,
    image_urls,
    litellm_thinking,
    nested_too_deeply,
    parse_arguments,
    read_text,
    skip_block,
    thinking_family,
)
from .responses import ITEMS_KEY

__all__ = ("event_folder", "is_v1_event", "load_openhands_v1", "read_event_folder")

#: Event kinds of the V1 SDK (serialized as ``"kind"``); any other kind with the base event
#: fields (``id``, ``source``) is read as an event too and skipped.
V1_KINDS: Final = frozenset(
    {
        "SystemPromptEvent",
        "MessageEvent",
        "ActionEvent",
        "ObservationEvent",
        "AgentErrorEvent",
        "UserRejectObservation",
        "Condensation",
        "CondensationRequest",
        "CondensationSummaryEvent",
        "ConversationStateUpdateEvent",
        "ConversationErrorEvent",
        "PauseEvent",
        "TokenEvent",
        "LLMCompletionLogEvent",
    }
)
_SOURCES: Final = frozenset({"user", "agent", "environment", "hook"})
_EVENT_FILE = re.compile(r"event-(?P<idx>\d{5,})-[^/]*\.json")
_SUMMARY_KINDS: Final = ("CondensationSummaryEvent",)


def is_v1_event(e: object) -> bool:
    """True for a V1 event object: a known ``kind``, or a ``kind`` with ``id`` and ``source``."""
    if not isinstance(e, Mapping):
        return False
    kind = e.get("kind")
    if not isinstance(kind, str):
        return False
    return kind in V1_KINDS or ("id" in e and e.get("source") in _SOURCES)


def event_folder(path: Path) -> Path | None:
    """The ``events`` folder of a V1 conversation folder (or ``path`` itself when it holds
    event files), else None."""
    for folder in (path / "events", path):
        if folder.is_dir() and any(_EVENT_FILE.fullmatch(p.name) for p in folder.iterdir()):
            return folder
    return None


def read_event_folder(folder: Path) -> list[Any]:
    """The events of an ``events`` folder, in the order of their file index.

    Raises:
        TranscriptError: a file is not UTF-8 or not valid JSON.
    """
    files = []
    for p in folder.iterdir():
        m = _EVENT_FILE.fullmatch(p.name)
        if m:
            files.append((int(m.group("idx")), p))
    events = []
    for _, p in sorted(files):
        try:
            events.append(json.loads(read_text(p)))
        except RecursionError:
            raise nested_too_deeply(str(p)) from None
        except ValueError as exc:
            if isinstance(exc, TranscriptError):
                raise
            msg = getattr(exc, "msg", str(exc))
            raise TranscriptError(f"{p}: invalid JSON ({msg}); expected one event") from None
    return events


class _Reader:
    """Converts events to messages, keeping the state pairing needs."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        self.calls: set[str] = set()
        self.skipped = 0
        # the assistant message a later action of the same model response joins
        self.open_response: str | None = None
        self.open_index = -1

    # -- content ------------------------------------------------------------------------------

    def content(self, raw: object, loc: Loc) -> list[Text | Image]:
        """``TextContent``/``ImageContent`` parts (or a string) as blocks."""
        if raw is None:
            return []
        if isinstance(raw, str):
            return [Text(raw)] if raw else []
        out: list[Text | Image] = []
        for i, part in enumerate(loc.items(raw)):
            at = loc.at(i)
            if isinstance(part, str):
                out.append(Text(part))
                continue
            p = at.obj(part)
            kind = p.get("type")
            if kind == "text":
                out.append(Text(at.need(p, "text", str)))
            elif kind == "image":
                out += image_urls(at.need(p, "image_urls", list), at.at("image_urls"))
            else:
                skip_block(kind, at.at("type"), "content part type", "'text' or 'image'")
        return out

    # -- events -------------------------------------------------------------------------------

    def add(self, msg: Message) -> None:
        if msg.role != "tool":
            self.open_response = None
        self.out.append(msg)

    def system(self, e: Mapping[str, Any], loc: Loc) -> None:
        blocks: list[Block] = []
        for key in ("system_prompt", "dynamic_context"):
            part = e.get(key)
            if part is None and key == "dynamic_context":
                continue
            blocks.extend(b for b in self.content([part], loc.at(key)) if isinstance(b, Text))
        raw_tools = e.get("tools")
        listed = raw_tools if isinstance(raw_tools, list) else []  # not model text: no error
        tools = [t.get("name") for t in listed if isinstance(t, Mapping)]
        meta = {"tools": [t for t in tools if isinstance(t, str)]} if tools else {}
        self.add(Message("system", tuple(blocks), meta=meta))

    def message(self, e: Mapping[str, Any], loc: Loc) -> None:
        m = loc.need(e, "llm_message", Mapping)
        at = loc.at("llm_message")
        role = at.need(m, "role", str)
        if role not in ("user", "assistant", "system"):
            at.at("role").fail("role", role, "'user', 'assistant' or 'system'")
        media = self.content(m.get("content"), at.at("content"))
        media += self.content(e.get("extended_content"), loc.at("extended_content"))
        meta = {"event_id": e.get("id")}
        if isinstance(e.get("sender"), str):
            meta["sender"] = e["sender"]
        if role == "system":
            blocks: list[Block] = [b for b in media if isinstance(b, Text)]
            self.add(Message("system", tuple(blocks), meta=meta))
        elif role == "user":
            self.add(Message("user", tuple(media), meta=meta))
        else:
            rid = e.get("llm_response_id")
            blocks = [*litellm_thinking(m, at), *_responses_reasoning(m, at), *media]
            meta.update(_family(blocks))
            self.add(
                Message(
                    "assistant", tuple(blocks), rid if isinstance(rid, str) else None, meta=meta
                )
            )

    def action(self, e: Mapping[str, Any], loc: Loc) -> None:
        raw_call = e.get("tool_call")
        call = loc.at("tool_call").obj(raw_call) if raw_call is not None else {}
        call_id = call.get("id", e.get("tool_call_id"))
        name = call.get("name", e.get("tool_name"))
        if not isinstance(call_id, str) or not call_id:
            loc.fail("tool call id", call_id, "a non-empty string under 'tool_call_id'")
        if not isinstance(name, str):
            loc.fail("tool name", name, "a string under 'tool_name'")
        if "arguments" in call:
            arguments = parse_arguments(call["arguments"], loc.at("tool_call.arguments"))
        else:  # no copy of the call: the action's fields are its arguments
            action = e.get("action")
            fields = action if isinstance(action, Mapping) else {}
            arguments = {k: v for k, v in fields.items() if k != "kind"}
        self.calls.add(call_id)
        tc = ToolCall(call_id, name, arguments)
        # the Responses item id the SDK sends the call with (``MessageToolCall
        # .to_responses_dict``): its ``responses_item_id``, or for a call saved without one (an
        # SDK version before that field) the call id if it starts with ``fc``, else ``fc_`` + it
        item = call.get("responses_item_id")
        if not isinstance(item, str) or not item:
            item = call_id if call_id.startswith("fc") else f"fc_{call_id}"
        rid = e.get("llm_response_id")
        rid = rid if isinstance(rid, str) and rid else None
        if rid is not None and rid == self.open_response:  # a parallel call of that response
            prev = self.out[self.open_index]
            thought = self.content(e.get("thought"), loc.at("thought"))
            blocks = (*prev.blocks, *thought, tc)
            meta = dict(prev.meta)
            if ITEMS_KEY in meta:
                meta[ITEMS_KEY] = [*meta[ITEMS_KEY], *([None, 1] for _ in thought), [item, 1]]
            self.out[self.open_index] = Message("assistant", blocks, prev.id, meta=meta)
            return
        thought = self.content(e.get("thought"), loc.at("thought"))
        blocks_: list[Block] = [
            *litellm_thinking(e, loc),
            *_responses_reasoning(e, loc),
            *thought,
            tc,
        ]
        meta = {"event_id": e.get("id"), **_family(blocks_)}
        if meta.get("provider_family") == "openai-responses":
            # the API pairs the reasoning item with the call after it by the call's item id
            meta[ITEMS_KEY] = [*([None, 1] for _ in blocks_[:-1]), [item, 1]]
        self.add(Message("assistant", tuple(blocks_), rid, meta=meta))
        self.open_response, self.open_index = rid, len(self.out) - 1

    def result(
        self, call_id: str, content: list[Text | Image], error: bool, e: Mapping[str, Any]
    ) -> None:
        name = e.get("tool_name") if isinstance(e.get("tool_name"), str) else None
        result = ToolResult(call_id, tuple(content), error, name)
        self.add(Message("tool", (result,), meta={"event_id": e.get("id")}))

    def observation(self, e: Mapping[str, Any], loc: Loc) -> None:
        call_id = loc.need(e, "tool_call_id", str)
        obs = loc.need(e, "observation", Mapping)
        at = loc.at("observation")
        content = self.content(_observation_content(obs), at.at("content"))
        content += self.content(e.get("extended_content"), loc.at("extended_content"))
        self.result(call_id, content, obs.get("is_error") is True, e)

    def rejection(self, e: Mapping[str, Any], loc: Loc) -> None:
        call_id = loc.need(e, "tool_call_id", str)
        reason = e.get("rejection_reason")
        reason = reason if isinstance(reason, str) else "User rejected the action"
        self.result(call_id, [Text(f"Action rejected: {reason}")], True, e)

    def error(self, e: Mapping[str, Any], loc: Loc) -> None:
        text = loc.need(e, "error", str)
        call_id = e.get("tool_call_id")
        if isinstance(call_id, str) and call_id in self.calls:
            self.result(call_id, [Text(text)], True, e)
        else:
            self.add(
                Message("user", (Text(text),), meta={"event_id": e.get("id"), "kind": "error"})
            )

    def summary(self, text: str, event_id: object) -> None:
        self.add(Message("user", (Text(text),), meta={"event_id": event_id, "kind": "summary"}))


def _responses_reasoning(owner: Mapping[str, Any], loc: Loc) -> list[Thinking]:
    """The OpenAI Responses reasoning item the SDK keeps with an assistant turn
    (``responses_reasoning_item`` of an ``ActionEvent`` or of an assistant ``llm_message``: a
    ``ReasoningItemModel`` of ``id``, ``summary`` and ``content`` as lists of strings,
    ``encrypted_content``, ``status``) as :class:`Thinking`: its summary (else its content) is
    the text, and the signature is the ``reasoning`` input item the SDK sends back for it
    (``_build_reasoning_item`` in ``openhands/sdk/llm/utils/responses_serialization.py``), kept
    whole as the Responses importer keeps one. The SDK sends no item without an id: its text
    is then unsigned thinking, which no provider takes back.

    Raises:
        TranscriptError: the item is not an object, or its ``summary``/``content`` is not a
            list of strings.
    """
    raw = owner.get("responses_reasoning_item")
    if raw is None:
        return []
    at = loc.at("responses_reasoning_item")
    r = at.obj(raw)
    parts: dict[str, list[str]] = {}
    for key in ("summary", "content"):
        values = at.at(key).items(r.get(key) or [])
        for i, v in enumerate(values):
            if not isinstance(v, str):
                at.at(key).at(i).fail("value", v, "a string")
        parts[key] = values
    summary, content = parts["summary"], parts["content"]
    text = "\n\n".join(summary) or "\n\n".join(content)
    item_id = r.get("id")
    if not isinstance(item_id, str) or not item_id:
        return [Thinking(text)] if text else []
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": t} for t in summary],
    }
    if content:
        item["content"] = [{"type": "reasoning_text", "text": t} for t in content]
    for key in ("encrypted_content", "status"):
        if isinstance(r.get(key), str) and r[key]:
            item[key] = r[key]
    return [Thinking(text, json.dumps(item, ensure_ascii=False, separators=(",", ":")))]


def _family(blocks: list[Block]) -> dict[str, str]:
    """``provider_family`` of an assistant turn: OpenAI Responses when it holds a reasoning
    item (only that API takes it back), else as for LiteLLM thinking."""
    if any(
        isinstance(b, Thinking) and responses_reasoning_item(b.signature) is not None
        for b in blocks
    ):
        return {"provider_family": "openai-responses"}
    return thinking_family(blocks, "openhands")


def _observation_content(obs: Mapping[str, Any]) -> object:
    """What an observation shows the model: its ``content`` (the SDK's base field), else the
    text field older tool observations carried, else its fields as JSON."""
    content = obs.get("content")
    if content:
        return content
    for key in ("output", "text", "message", "error"):
        if isinstance(obs.get(key), str) and obs[key]:
            return obs[key]
    fields = {k: v for k, v in obs.items() if k not in ("kind", "content", "is_error")}
    return json.dumps(fields, ensure_ascii=False) if fields else ""


def _model_view(events: list[tuple[int, Mapping[str, Any]]]) -> list[tuple[int, Mapping[str, Any]]]:
    """The events the model saw: condensations applied in order (forgotten events dropped,
    the summary put at its offset), as the SDK builds its view."""
    view: list[tuple[int, Mapping[str, Any]]] = []
    for i, e in events:
        if e.get("kind") != "Condensation":
            view.append((i, e))
            continue
        forgotten = set(map(str, e.get("forgotten_event_ids") or []))
        view = [(j, x) for j, x in view if str(x.get("id")) not in forgotten]
        summary, offset = e.get("summary"), e.get("summary_offset")
        if isinstance(summary, str) and isinstance(offset, int) and not isinstance(offset, bool):
            event = {"kind": "CondensationSummaryEvent", "summary": summary, "id": e.get("id")}
            view.insert(min(max(offset, 0), len(view)), (i, event))
    return view


def load_openhands_v1(
    events: list[Any], loc: Loc, view: str = "full"
) -> tuple[list[Message], dict[str, Any]]:
    """Neutral messages from a V1 event list, and the transcript meta (``skipped_events``,
    ``compactions``).

    Raises:
        TranscriptError: an event the model reads is malformed.
    """
    indexed = [(i, loc.at(i).obj(raw)) for i, raw in enumerate(events)]
    compactions = [
        {
            "summary": e.get("summary"),
            "forgotten": len(e.get("forgotten_event_ids") or []),
            "event_id": e.get("id"),
            "index": i,
        }
        for i, e in indexed
        if e.get("kind") == "Condensation"
    ]
    if view == "model":
        indexed = _model_view(indexed)
    r = _Reader()
    handlers = {
        "SystemPromptEvent": r.system,
        "MessageEvent": r.message,
        "ActionEvent": r.action,
        "ObservationEvent": r.observation,
        "UserRejectObservation": r.rejection,
        "AgentErrorEvent": r.error,
    }
    for i, e in indexed:
        at = loc.at(i)
        kind = e.get("kind")
        handler = handlers.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(e, at)
        elif kind in _SUMMARY_KINDS:
            r.summary(str(at.need(e, "summary", str)), e.get("id"))
        else:
            r.skipped += 1
    return r.out, {"skipped_events": r.skipped, "compactions": compactions}
