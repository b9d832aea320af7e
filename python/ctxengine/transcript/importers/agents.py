"""Agent logs: SWE-agent ``.traj`` and OpenHands event streams.

SWE-agent: ``history`` is the chat as the model saw it. Function-calling runs have OpenAI
``tool_calls`` and ``tool`` messages answering ``tool_call_ids`` (a list SWE-agent writes with
one id; a message listing several answers the first, as SWE-agent sends it, the list kept in
``meta["tool_call_ids"]``), and an assistant
message's ``thinking_blocks`` (Anthropic models through LiteLLM) become :class:`Thinking`
before its text; text-action runs have
no calls (the action is prose in the assistant text, the observation a user message, marked
``meta["kind"] = "observation"``: every user message after the agent's first action that is
not part of a demonstration). Content is a string or a list of parts; multimodal runs put
``image_url`` parts in user and tool messages, which become images. A file without
``history`` is rebuilt from its ``trajectory`` steps (``meta["rebuilt_from"] =
"trajectory"``; each step's observation a user message marked the same way).

OpenHands (V0 events): an action with ``tool_call_metadata`` becomes the assistant message of
its ``model_response`` (all calls of that response, once, after the response's
``thinking_blocks`` or ``reasoning_content``); a user ``message`` action keeps the images it
attached (``image_urls``); an observation with metadata becomes the tool result, with the
images of an IPython cell's output (``extras.image_urls``). ``system`` and ``message`` actions
become system/user/assistant text; an ``error`` observation without metadata is a user message
(OpenHands shows it to the model that way; ``meta["kind"] = "error"``); a ``recall``
observation becomes a user message (``meta["kind"] = "recall"``) only when it carries
microagent knowledge or repository instructions. Runs without function calling (older CodeAct)
have no metadata: a ``run``/``read``/``edit``/... action becomes a call with id ``event_<id>``
(after its ``thought``) and the observation whose ``cause`` is that id its result; ``finish``
and ``think`` are assistant text. A command the user ran from the UI (a ``run`` action whose
``source`` is ``user``, never with metadata) is no call of the agent: it is user text ``User
executed the command:`` and the command, and the observation it caused user text ``Observed
result of command executed by user:`` and the output, as OpenHands' conversation memory sends
them (both marked ``meta["kind"] = "observation"``). A ``condensation`` action (a condenser
forgot events and may have summarized them) is recorded in the transcript's
``meta["compactions"]``; ``view="model"`` applies them as OpenHands builds the model's view,
the latest summary a user message (``meta["kind"] = "summary"``). Other events are not model
context (counted in ``meta["skipped_events"]``). Evaluation outputs of 2024 store ``history``
as ``[action, observation]`` pairs: they are read as the events in that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..model import Block, Image, Message, Text, ToolCall, ToolResult
from .common import (
    Loc,
    image_urls,
    litellm_thinking,
    text_of,
    thinking_family,
    tool_call,
)
from .openai import content_parts, load_openai

__all__ = ("is_event_pair", "load_openhands_events", "load_swe_agent_history", "swe_agent_steps")


def load_swe_agent_history(history: list[Any], loc: Loc) -> list[Message]:
    """Neutral messages from a SWE-agent ``history`` list.

    Raises:
        TranscriptError: an entry is malformed.
    """
    out: list[Message] = []
    acted = False  # the agent acted (an assistant message not of a demonstration)
    for i, raw in enumerate(history):
        at = loc.at(i)
        m = at.obj(raw)
        role = at.need(m, "role", str)
        meta = {k: m[k] for k in ("agent", "message_type", "is_demo", "action") if k in m}
        if role == "assistant" and not m.get("is_demo"):
            acted = True
        elif role == "user" and acted and not m.get("is_demo"):
            # what the environment answered the agent's action: its output, a format error,
            # the next step's template (SWE-agent has no user after the task: its
            # message_type says "observation" for the task too)
            meta["kind"] = "observation"
        if role == "tool":
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            body = tuple(content_parts(m.get("content"), at.at("content"), images=True))
            for j, call_id in enumerate(at.items(ids)):
                if not isinstance(call_id, str):
                    at.at("tool_call_ids").at(j).fail("id", call_id, "a string")
            if len(ids) > 1:
                # one observation, of one action: SWE-agent sends it as the answer to the
                # first id only (its model layer reads ``tool_call_ids[0]``); the others
                # stay unanswered, as the model saw them, and are kept here
                meta["tool_call_ids"] = list(ids)
            out.append(Message("tool", (ToolResult(ids[0], body),), meta=meta))
            continue
        content = m.get("content")
        if role == "assistant":  # parts (with cache_control) are text for the model
            content = text_of(content, at.at("content"))
        base = {"role": role, "content": content}  # user parts may hold images (multimodal)
        if role == "assistant" and m.get("tool_calls"):
            base["tool_calls"] = m["tool_calls"]
        for msg in load_openai([base], at):
            blocks = msg.blocks
            if role == "assistant":  # the reasoning sent back with the calls (LiteLLM's)
                thinking = litellm_thinking(m, at)
                blocks = (*thinking, *blocks)
                meta.update(thinking_family(thinking, "swe-agent"))
            out.append(Message(msg.role, blocks, meta={**msg.meta, **meta}))
    return out


def swe_agent_steps(steps: list[Any], loc: Loc) -> list[Message]:
    """Messages rebuilt from a ``.traj`` that has only ``trajectory`` (no ``history``).

    The first step's ``query`` (the messages it sent, in newer versions) opens the
    conversation; then each step is the model's ``response`` (or its ``thought`` and
    ``action``) as assistant text and the ``observation`` as a user message, as text-action
    runs show them to the model.

    Raises:
        TranscriptError: a step is not an object or a ``query`` entry is malformed.
    """
    out: list[Message] = []
    for i, raw in enumerate(steps):
        at = loc.at(i)
        step = at.obj(raw)
        query = step.get("query")
        if i == 0 and isinstance(query, list):
            out.extend(load_swe_agent_history(query, at.at("query")))
        response = step.get("response")
        if not isinstance(response, str) or not response.strip():
            parts = [step.get(k) for k in ("thought", "action")]
            response = "\n".join(p for p in parts if isinstance(p, str) and p.strip())
        if response:
            out.append(Message("assistant", (Text(response),), meta={"step": i}))
        observation = step.get("observation")
        if isinstance(observation, str) and observation:
            meta = {"step": i, "kind": "observation"}
            out.append(Message("user", (Text(observation),), meta=meta))
    return out


def _tcm(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tcm = event.get("tool_call_metadata")
    return tcm if isinstance(tcm, Mapping) else None


def _model_message(tcm: Mapping[str, Any], loc: Loc) -> Message:
    response = loc.need(tcm, "model_response", Mapping)
    choices = loc.at("model_response").need(response, "choices", list)
    if not choices:
        loc.at("model_response.choices").fail("choices", choices, "at least one choice")
    message = loc.at("model_response.choices").at(0).need(choices[0], "message", Mapping)
    thinking = litellm_thinking(message, loc.at("model_response.choices[0].message"))
    blocks: list[Block] = [*thinking]
    if isinstance(message.get("content"), str) and message["content"]:
        blocks.append(Text(message["content"]))
    calls = message.get("tool_calls") or []
    for j, raw in enumerate(loc.items(calls)):
        at = loc.at("model_response.choices[0].message.tool_calls").at(j)
        fn = at.need(raw, "function", Mapping)
        blocks.append(tool_call(raw.get("id"), fn.get("name"), fn.get("arguments"), at))
    if not calls:  # metadata without the calls: rebuild the one call it names
        blocks.append(tool_call(tcm.get("tool_call_id"), tcm.get("function_name"), {}, loc))
    meta = thinking_family(thinking, "openhands")
    return Message("assistant", tuple(blocks), str(response.get("id") or "") or None, meta=meta)


def _recall_text(extras: Mapping[str, Any]) -> str:
    parts = []
    for key in ("repo_instructions", "additional_agent_instructions"):
        if isinstance(extras.get(key), str) and extras[key].strip():
            parts.append(extras[key])
    for item in extras.get("microagent_knowledge") or []:
        if isinstance(item, Mapping) and isinstance(item.get("content"), str):
            trigger = item.get("trigger", "")
            parts.append(
                "<EXTRA_INFO>\nThe following information has been included based on a keyword "
                f'match for "{trigger}".\n{item["content"]}\n</EXTRA_INFO>'
            )
    return "\n\n".join(parts)


def _action(e: Mapping[str, Any], seen: set[str], at: Loc) -> Message | None:
    tcm = _tcm(e)
    if tcm is not None:
        msg = _model_message(tcm, at.at("tool_call_metadata"))
        key = msg.id or str(tcm.get("tool_call_id"))
        if key in seen:
            return None
        seen.add(key)
        return msg
    action = e.get("action")
    args = e.get("args")
    content = args.get("content") if isinstance(args, Mapping) else None
    text = str(content if isinstance(content, str) else e.get("message") or "")
    if action == "system":
        return Message("system", (Text(text),))
    if action == "message":
        if e.get("source") != "user":
            return Message("assistant", (Text(text),))
        return Message("user", (Text(text), *_image_urls(args, at.at("args.image_urls"))))
    if action == "run" and e.get("source") == "user":
        return _user_command(e, args, seen, at)
    return _text_action(e, action, args, seen)


#: How OpenHands' conversation memory sends a command the user ran and its output
#: (``ConversationMemory._process_action`` / ``_process_observation`` in
#: OpenHands/OpenHands ``openhands/memory/conversation_memory.py``).
_USER_COMMAND = "User executed the command:\n"
_USER_COMMAND_OUTPUT = "\nObserved result of command executed by user:\n"


def _user_command(e: Mapping[str, Any], args: object, seen: set[str], at: Loc) -> Message:
    """A command the user ran from the UI (a ``run`` action with ``source`` ``user``): user
    text naming it, its id kept so that the observation it caused is read as its output, not
    as the result of a call of the agent.

    Raises:
        TranscriptError: the action has no string ``args.command``.
    """
    command = at.at("args").need(args if isinstance(args, Mapping) else {}, "command", str)
    if e.get("id") is not None:
        seen.add(f"user_run_{e['id']}")
    return Message("user", (Text(_USER_COMMAND + command),), meta={"kind": "observation"})


def _image_urls(args: object, loc: Loc) -> list[Image]:
    """The images a user message action attached (``image_urls``: ``data:`` URLs or links)."""
    urls = args.get("image_urls") if isinstance(args, Mapping) else None
    return image_urls(loc.items(urls or []), loc)


# actions of runs without function calling (no tool_call_metadata) that an observation answers
_TOOL_ACTIONS = frozenset(
    {"run", "run_ipython", "read", "write", "edit", "browse", "browse_interactive", "delegate"}
    | {"call_tool_mcp", "mcp"}
)


def _text_action(
    e: Mapping[str, Any], action: object, args: object, seen: set[str]
) -> Message | None:
    """An action of a run without function calling: a call (id ``event_<id>``) for the
    observation naming it as ``cause``, after the agent's ``thought``; ``finish`` and
    ``think`` are the agent's text."""
    args = args if isinstance(args, Mapping) else {}
    thought = args.get("thought")
    blocks: list[Block] = [Text(thought)] if isinstance(thought, str) and thought.strip() else []
    if action in ("finish", "think"):
        final = args.get("final_thought") or args.get("message")
        if isinstance(final, str) and final.strip() and final != thought:
            blocks.append(Text(final))
        return Message("assistant", tuple(blocks)) if blocks else None
    if not isinstance(action, str) or action not in _TOOL_ACTIONS or e.get("id") is None:
        return None
    call_id = f"event_{e['id']}"
    seen.add(call_id)
    arguments = {k: v for k, v in args.items() if k not in ("thought", "is_confirmed")}
    blocks.append(ToolCall(call_id, str(action), arguments))
    return Message("assistant", tuple(blocks), meta={"kind": "text_action"})


def _result_images(e: Mapping[str, Any], at: Loc) -> list[Image]:
    """The images an IPython cell's output holds (a plot): ``extras.image_urls`` of a
    ``run_ipython`` observation, which OpenHands' conversation memory sends with the result,
    the empty ones left out as it leaves them out (``_process_observation``, OpenHands/OpenHands
    ``openhands/memory/conversation_memory.py``).

    Raises:
        TranscriptError: an image url is not a string.
    """
    extras = e.get("extras")
    urls = extras.get("image_urls") if isinstance(extras, Mapping) else None
    if e.get("observation") != "run_ipython" or not urls:
        return []
    at = at.at("extras.image_urls")
    kept = [u for u in at.items(urls) if not (isinstance(u, str) and not u.strip())]
    return image_urls(kept, at)


def _observation(e: Mapping[str, Any], seen: set[str], at: Loc) -> Message | None:
    tcm = _tcm(e)
    content = str(e.get("content") or "")
    body: tuple[Text | Image, ...] = (Text(content), *_result_images(e, at))
    if tcm is not None:
        call_id = at.at("tool_call_metadata").need(tcm, "tool_call_id", str)
        name = tcm.get("function_name") if isinstance(tcm.get("function_name"), str) else None
        is_error = e.get("observation") == "error"
        return Message("tool", (ToolResult(call_id, body, is_error, name),))
    cause_id = e.get("cause")
    if e.get("observation") == "run" and f"user_run_{cause_id}" in seen:  # a user's command
        text = _USER_COMMAND_OUTPUT + content
        return Message("user", (Text(text),), meta={"kind": "observation"})
    cause = f"event_{e.get('cause')}"
    if e.get("cause") is not None and cause in seen:  # answers a call of a text-action run
        name = e.get("observation") if isinstance(e.get("observation"), str) else None
        result = ToolResult(cause, body, e.get("observation") == "error", name)
        return Message("tool", (result,))
    if e.get("observation") == "error":
        return Message("user", (Text(content),), meta={"kind": "error"})
    if e.get("observation") == _CONDENSATION:  # a condensation's summary, sent as user text
        return Message("user", (Text(content),), meta={"kind": "summary"})
    if e.get("observation") == "recall" and isinstance(e.get("extras"), Mapping):
        text = _recall_text(e["extras"])
        return Message("user", (Text(text),), meta={"kind": "recall"}) if text else None
    return None


def is_event_pair(item: object) -> bool:
    """An ``[action, observation]`` pair, as OpenHands evaluation outputs of 2024 store their
    ``history`` (``compatibility_for_eval_history_pairs``)."""
    return (
        isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], Mapping)
        and "action" in item[0]
        and isinstance(item[1], Mapping)
        and "observation" in item[1]
    )


def _events(events: list[Any], loc: Loc) -> list[tuple[Loc, object]]:
    """The events of a history with their locations, ``[action, observation]`` pairs
    flattened; a pair's ``null`` placeholders (an action that had no observation, an
    observation no action caused) are no events and left out."""
    out: list[tuple[Loc, object]] = []
    for i, raw in enumerate(events):
        if not is_event_pair(raw):
            out.append((loc.at(i), raw))
            continue
        for j, e in enumerate(raw):
            if e.get("action", e.get("observation")) != "null":
                out.append((loc.at(i).at(j), e))
    return out


def _forgotten(args: Mapping[str, Any]) -> set[str]:
    """The ids a V0 ``condensation`` action forgets (``CondensationAction.forgotten``): its
    ``forgotten_event_ids``, else the range ``forgotten_events_start_id`` to
    ``forgotten_events_end_id``, both included."""
    ids = args.get("forgotten_event_ids")
    if isinstance(ids, list):
        return {str(i) for i in ids}
    start, end = args.get("forgotten_events_start_id"), args.get("forgotten_events_end_id")
    if isinstance(start, int) and isinstance(end, int):
        return {str(i) for i in range(start, end + 1)}
    return set()


def _condensation_args(e: object) -> Mapping[str, Any] | None:
    """The ``args`` of a V0 ``condensation`` action (None for any other event)."""
    if not isinstance(e, Mapping) or e.get("action") != "condensation":
        return None
    args = e.get("args")
    return args if isinstance(args, Mapping) else {}


def _v0_compactions(flat: list[tuple[Loc, object]]) -> list[dict[str, Any]]:
    """Each V0 condensation of the history: its summary, how many events it forgot, its event
    id and its index among the events."""
    out = []
    for i, (_, e) in enumerate(flat):
        args = _condensation_args(e)
        if args is not None:
            summary = args.get("summary")
            out.append(
                {
                    "summary": summary if isinstance(summary, str) else None,
                    "forgotten": len(_forgotten(args)),
                    "event_id": e.get("id") if isinstance(e, Mapping) else None,
                    "index": i,
                }
            )
    return out


def _v0_model_view(flat: list[tuple[Loc, object]]) -> list[tuple[Loc, object]]:
    """The events the model saw, as ``View.from_events`` builds them (OpenHands/OpenHands
    ``openhands/memory/view.py``): every event a condensation forgot is dropped, and the
    condensation and condensation request actions themselves; the summary of the latest
    condensation that has one goes in at its ``summary_offset`` as an
    ``AgentCondensationObservation``, which the model reads as user text."""
    forgotten: set[str] = set()
    summary: tuple[Loc, object] | None = None
    offset = 0
    for at, e in flat:
        args = _condensation_args(e)
        if args is not None:
            forgotten |= _forgotten(args)
        if isinstance(e, Mapping) and e.get("action") in ("condensation", "condensation_request"):
            forgotten.add(str(e.get("id")))
        text, at_offset = (args or {}).get("summary"), (args or {}).get("summary_offset")
        if isinstance(text, str) and isinstance(at_offset, int) and not isinstance(at_offset, bool):
            event = {"observation": _CONDENSATION, "content": text, "extras": {}}
            summary, offset = (at, event), at_offset
    kept = [
        (at, e)
        for at, e in flat
        if not (isinstance(e, Mapping) and "id" in e and str(e["id"]) in forgotten)
    ]
    if summary is not None:
        kept.insert(min(max(offset, 0), len(kept)), summary)
    return kept


#: The observation type of a condensation's summary (``ObservationType.CONDENSE``), which
#: OpenHands' conversation memory sends as user text.
_CONDENSATION: Final = "agent_condensation"


def load_openhands_events(
    events: list[Any], loc: Loc, view: str = "full"
) -> tuple[list[Message], dict[str, Any]]:
    """Neutral messages from an OpenHands event list (or a list of ``[action, observation]``
    pairs), and the transcript meta: ``skipped_events`` (the events left out) and
    ``compactions`` (each ``condensation``). ``view="model"`` applies the condensations as
    OpenHands builds the model's view (:func:`_v0_model_view`).

    Raises:
        TranscriptError: an event is malformed.
    """
    out: list[Message] = []
    seen: set[str] = set()
    skipped = 0
    flat = _events(events, loc)
    compactions = _v0_compactions(flat)
    if view == "model":
        flat = _v0_model_view(flat)
    for at, raw in flat:
        e = at.obj(raw)
        if "action" in e:
            msg = _action(e, seen, at)
        elif "observation" in e:
            msg = _observation(e, seen, at)
        else:
            at.fail("event", e, "an action or an observation")
        if msg is None:
            skipped += 1
        else:
            out.append(msg)
    return out, {"skipped_events": skipped, "compactions": compactions}
