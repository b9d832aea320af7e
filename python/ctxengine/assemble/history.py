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
from typing import Final

from .. import _core
from ..grain import ContextGrain
from ..tokens import IMAGE_TOKENS
from ..transcript.model import Image, Message, Text, Thinking, ToolResult
from .guard import truncate_tool_result

__all__ = ("FLAG", "KIND", "ROLE", "HistoryBuilder", "HistoryItem", "tool_result_node_id")

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
    overhead_texts: tuple[str, ...]
    overhead: int
    label: str
    grain: ContextGrain
    source_text: str  # the text as the message holds it (compose re-renders when they differ)
    guarded_from: int = 0  # characters before the window guard cut it (0: not cut)
    composed: tuple[str, Message] | None = None  # last rendered (text, message), reused


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
        for call in calls:
            self.tool_names[call.id] = call.name
            self.call_group[call.id] = self.turn
        flags = FLAG["tool_call"] if calls else 0
        if message.role == "user" and (len(message.text) > 40 or _FEEDBACK.search(message.text)):
            # Explicit user input: a request worth stating, or feedback on the last step.
            flags |= FLAG["feedback"]
        if any(_STRUCTURAL.search(c.name) for c in calls):
            flags |= FLAG["structural"]
        images = sum(isinstance(b, Image) for b in message.blocks)
        flags |= FLAG["image"] if images else 0
        kind, role = KIND["message"], ROLE[message.role]
        if message.role == "system":
            kind, flags = KIND["context"], flags | FLAG["protected"]
        # Thinking is rendered for Anthropic and Gemini: it is counted (never trimmed alone, so
        # the turn's overhead), as are the tool calls' names and arguments.
        thinking = tuple(b.text for b in message.blocks if isinstance(b, Thinking) and b.text)
        texts = thinking + tuple(t for c in calls for t in (c.name, c.arguments_json))
        context = kind == _core.KIND_CONTEXT
        node_id = self._node_id(f"sys.transcript.{index}" if context else f"hist.{index}")
        text = message.text
        grain = ContextGrain(
            node_id,
            "transcript",
            text,
            priority=0 if context else 100,
            lifespan="session",
            protected=context,
            meta={"message_index": index, "role": message.role},
        )
        overhead = MESSAGE_OVERHEAD + images * IMAGE_TOKENS
        label = f"{message.role} message {index}"
        return HistoryItem(
            node_id,
            index,
            -1,
            text,
            kind,
            role,
            self.turn,
            flags,
            texts,
            overhead,
            label,
            grain,
            text,
        )

    def _result(self, index: int, position: int, result: ToolResult) -> HistoryItem:
        name = result.name or self.tool_names.get(result.call_id, "tool")
        images = sum(isinstance(b, Image) for b in result.content)
        flags = FLAG["image"] if images else 0
        node_id = self._node_id(tool_result_node_id(result.call_id) or f"act.tool_result.m{index}")
        source = "\n".join(b.text for b in result.content if isinstance(b, Text))
        text = source
        if self.max_result_chars is not None and len(source) > self.max_result_chars:
            text = truncate_tool_result(source, self.max_result_chars)
        grain = ContextGrain(
            node_id,
            "transcript",
            text,
            lifespan="session",
            meta={"message_index": index, "role": "tool", "tool": name},
        )
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
