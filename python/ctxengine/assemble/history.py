"""Transcript messages as assembly items: node ids, turn groups, features, token overheads.

A user or assistant message is one item (``hist.<index>``); each tool result is its own item
(``act.tool_result.<call id>``), so a large result can be trimmed alone. Items are grouped into
steps that the core keeps or removes whole: a user message alone, or an assistant message with
the results of its tool calls. So a tool call is never separated from its result, and a long
agent run under one user request can still lose its oldest steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from .. import _core
from ..grain import ContextGrain
from ..tokens import IMAGE_TOKENS
from ..transcript.model import Image, Message, Text, Thinking, ToolResult
from ..transcript.providers import family_of
from .guard import truncate_tool_result

__all__ = (
    "FLAG",
    "KIND",
    "ROLE",
    "HistoryBuilder",
    "HistoryItem",
    "tool_result_node_id",
    "transcript_grain",
)

# The codes of the core's columns, by the names this module uses (the core owns the values).
KIND: Final = {
    "context": _core.KIND_CONTEXT,
    "message": _core.KIND_MESSAGE,
    "tool_result": _core.KIND_TOOL_RESULT,
}
ROLE: Final = {
    "system": _core.ROLE_SYSTEM,
    "user": _core.ROLE_USER,
    "assistant": _core.ROLE_ASSISTANT,
    "tool": _core.ROLE_TOOL,
}
FLAG: Final = {
    "tool_call": _core.FLAG_HAS_TOOL_CALL,
    "feedback": _core.FLAG_FEEDBACK,
    "structural": _core.FLAG_STRUCTURAL,
    "image": _core.FLAG_IMAGE,
    "protected": _core.FLAG_PROTECTED,
}

#: Tokens of OpenAI message framing: 3 per message plus the role.
MESSAGE_OVERHEAD: Final = 4


_FEEDBACK = re.compile(
    r"^\s*(thanks|thank you|great|perfect|nice|good|wrong|no[,.!]|nope|not what|that's not|"
    r"that is not|doesn't work|does not work|still (fails|broken)|works|correct|incorrect|stop)\b",
    re.IGNORECASE,
)
_STRUCTURAL = re.compile(
    r"(edit|write|create|delete|remove|rename|move|patch|replace|apply|commit|insert|mkdir)",
    re.IGNORECASE,
)
_NODE_CHARS = re.compile(r"[^A-Za-z0-9_\-:]")


def transcript_grain(
    node_id: str, text: str, priority: int, protected: bool, meta: dict[str, Any]
) -> ContextGrain:
    """The ``transcript`` grain of a history item (lifespan ``session``, no window).

    Its fields are valid by construction: a node id made by :class:`HistoryBuilder`, an int
    priority, text the session repaired on entry. So for ASCII text (nothing to re-check) the
    grain is made without running :meth:`ContextGrain.check`, which costs more than the rest of
    the item on a cold render; other text is checked as usual."""
    if not text.isascii():
        return ContextGrain(node_id, "transcript", text, priority, "session", None, protected, meta)
    grain: ContextGrain = object.__new__(ContextGrain)
    grain.node_id, grain.origin, grain.content = node_id, "transcript", text
    grain.priority, grain.lifespan, grain.window = priority, "session", None
    grain.protected, grain.meta = protected, meta
    return grain


@lru_cache(maxsize=1024)
def _structural(tool_name: str) -> bool:
    """Whether a tool of this name changes things (edits, writes, commits...)."""
    return _STRUCTURAL.search(tool_name) is not None


@dataclass(slots=True)
class HistoryItem:
    """One assembly item derived from the transcript."""

    node_id: str
    index: int  # message index in the session transcript
    result: int  # index of the ToolResult inside a tool message, -1 otherwise
    text: str
    kind: int
    role: int
    turn: int
    flags: int
    overhead_texts: tuple[str, ...]  # tool call names and arguments (counted, never trimmed)
    overhead: int
    label: str
    grain: ContextGrain
    source_text: str  # the text as the message holds it (compose re-renders when they differ)
    guarded_from: int = 0  # characters before the window guard cut it (0: not cut)
    composed: tuple[str, Message] | None = None  # last rendered (text, message), reused
    thinking: tuple[Thinking, ...] = ()  # counted only for a provider its export sends it to
    family: str | None = None  # the provider whose signatures the message carries


def tool_result_node_id(call_id: str) -> str:
    """The node id of a tool result: ``act.tool_result.<call id>`` with unsafe chars as ``_``."""
    safe = _NODE_CHARS.sub("_", call_id)
    return f"act.tool_result.{safe}" if safe else ""


class HistoryBuilder:
    """Turns appended messages into items, tracking turns and tool names across calls."""

    def __init__(self) -> None:
        self.turn = -1
        self.max_result_chars: int | None = None
        self.tool_names: dict[str, str] = {}
        self.call_group: dict[str, int] = {}
        self.used_ids: set[str] = set()

    def _node_id(self, base: str) -> str:
        node_id, n = base, 1
        while node_id in self.used_ids:
            n += 1
            node_id = f"{base}-{n}"
        self.used_ids.add(node_id)
        return node_id

    def items(self, index: int, message: Message) -> list[HistoryItem]:
        """Items for ``message`` at transcript position ``index``."""
        if message.role != "tool" or self.turn < 0:
            self.turn += 1
        if message.role == "tool":
            return [self._result(index, i, r) for i, r in enumerate(message.tool_results)]
        return [self._message(index, message)]

    def _message(self, index: int, message: Message) -> HistoryItem:
        calls = message.tool_calls
        flags = 0
        if calls:
            flags = FLAG["tool_call"]
            for call in calls:
                self.tool_names[call.id] = call.name
                self.call_group[call.id] = self.turn
            if any(_structural(c.name) for c in calls):
                flags |= FLAG["structural"]
        text = message.text
        role = message.role
        if role == "user" and (len(text) > 40 or _FEEDBACK.search(text)):
            # Explicit user input: a request worth stating, or feedback on the last step.
            flags |= FLAG["feedback"]
        blocks = message.blocks
        images = 0
        thinking: tuple[Thinking, ...] = ()
        if not (len(blocks) == 1 and type(blocks[0]) is Text):  # else: one text block
            images = sum(isinstance(b, Image) for b in blocks)
            # Thinking goes back only to the provider that signed it (``exportable``): it is
            # counted for the renders that send it (never trimmed alone: the turn's overhead).
            thinking = tuple(b for b in blocks if isinstance(b, Thinking) and b.text)
        flags |= FLAG["image"] if images else 0
        kind = KIND["message"]
        if role == "system":
            kind, flags = KIND["context"], flags | FLAG["protected"]
        texts = tuple(t for c in calls for t in (c.name, c.arguments_json))
        context = kind == _core.KIND_CONTEXT
        node_id = self._node_id(f"sys.transcript.{index}" if context else f"hist.{index}")
        meta = {"message_index": index, "role": role}
        grain = transcript_grain(node_id, text, 0 if context else 100, context, meta)
        overhead = MESSAGE_OVERHEAD + images * IMAGE_TOKENS
        return HistoryItem(
            node_id,
            index,
            -1,
            text,
            kind,
            ROLE[role],
            self.turn,
            flags,
            texts,
            overhead,
            f"{role} message {index}",
            grain,
            text,
            thinking=thinking,
            family=family_of(message) if thinking else None,
        )

    def _result(self, index: int, position: int, result: ToolResult) -> HistoryItem:
        name = result.name or self.tool_names.get(result.call_id, "tool")
        content = result.content
        if len(content) == 1 and type(content[0]) is Text:
            images, source = 0, content[0].text
        else:
            images = sum(isinstance(b, Image) for b in content)
            source = "\n".join(b.text for b in content if isinstance(b, Text))
        flags = FLAG["image"] if images else 0
        node_id = self._node_id(tool_result_node_id(result.call_id) or f"act.tool_result.m{index}")
        text = source
        if self.max_result_chars is not None and len(source) > self.max_result_chars:
            text = truncate_tool_result(source, self.max_result_chars)
        meta = {"message_index": index, "role": "tool", "tool": name}
        grain = transcript_grain(node_id, text, 100, False, meta)
        return HistoryItem(
            node_id,
            index,
            position,
            text,
            KIND["tool_result"],
            ROLE["tool"],
            self.call_group.get(result.call_id, self.turn),
            flags,
            (result.call_id,),
            MESSAGE_OVERHEAD + images * IMAGE_TOKENS,
            f"tool result: {name}",
            grain,
            source,
            len(source) if text is not source else 0,
        )
