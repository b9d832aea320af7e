"""What the redaction plugins reach beyond the grains: the text sent that no grain holds.

A redaction plugin such as :class:`~ctxengine.builtins.RedactionProvider` rewrites the grains
of a render in ``on_before_render``, the history's among them. Two things the payload carries
never pass through a grain there: the arguments of tool calls (sent with their assistant
message, not in its text) and compaction's summary, which is made after that hook from the
session's messages as they were appended (and which later summaries carry on). So the engine
runs the ``redact_text`` of the privileged plugins (``Registry.payload_redactors``; kept per
session by ``assemble.sync.refresh_redaction``) over those too: each tool call's argument
values (the arguments stay a JSON object), and every message compaction reads, so what it
writes, its memory flush and a summarizer model see no secret either. The session keeps its
messages as they came; only what is sent is redacted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..collect.faults import WITHHELD, FaultKind, PluginFault, withheld
from ..transcript.model import Block, Compaction, Message, Text, ToolCall, ToolResult

__all__ = ("WITHHELD", "Redaction")


@dataclass(slots=True, eq=False)
class Redaction:
    """The session's payload redactors and what they made of its messages.

    Attributes:
        redactors: The ``redact_text`` functions, applied in turn.
        messages: Message index → (the message, its redaction): each message is redacted
            once, and its redaction is the same object every time (compaction reads each
            message once per scope by identity).
    """

    redactors: tuple[Callable[[str], str], ...]
    messages: dict[int, tuple[Message, Message]] = field(default_factory=dict)
    #: What a redactor raised since the last render took them (:meth:`take_faults`).
    faults: list[PluginFault] = field(default_factory=list)

    def text(self, text: str) -> str:
        """``text`` through every redactor. A redactor that raises withholds the whole text
        (:data:`WITHHELD` is sent instead: what it would have redacted is unknown) and the
        fault goes to the render's report; the turn goes on."""
        for redact in self.redactors:
            try:
                got = redact(text)
            except Exception as exc:
                return self._withheld(redact, "raised", repr(exc))
            if not isinstance(got, str):
                return self._withheld(redact, "invalid", f"returned {type(got).__name__}, not str")
            text = got
        return text

    def _withheld(self, redact: Callable[[str], str], kind: FaultKind, what: str) -> str:
        """:data:`WITHHELD`, and the fault of ``redact`` for the render's report."""
        owner = getattr(redact, "__self__", redact)
        name = getattr(owner, "name", None) or type(owner).__name__
        message = f"{what}; the text it was given is withheld from the payload"
        return withheld(name, kind, message, self.faults)

    def take_faults(self) -> list[PluginFault]:
        """The faults since the last call (each reported once, by the render it happened in;
        a message redacted once is not redacted again, so neither is its fault)."""
        out, self.faults[:] = list(self.faults), []
        return out

    def value(self, value: Any) -> Any:
        """Every string inside ``value`` (str, or nested lists and dicts; keys kept)
        redacted: a JSON value stays one."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def message(self, index: int, message: Message) -> Message:
        """``message`` (at ``index`` in the transcript) with its text, tool-call arguments and
        tool results redacted; the message itself when nothing in it changes. Thinking is
        left as it is: it goes back signed, and a changed one would be refused. A provider
        compaction keeps its ``item`` (sent verbatim to the provider that made it); its
        summary text, which another provider is sent, is redacted."""
        known = self.messages.get(index)
        if known is not None and known[0] is message:
            return known[1]
        blocks = tuple(map(self._block, message.blocks))
        changed = any(b is not a for a, b in zip(blocks, message.blocks, strict=True))
        out = dataclasses.replace(message, blocks=blocks) if changed else message
        self.messages[index] = (message, out)
        return out

    def _block(self, block: Block) -> Block:
        if type(block) is Compaction:
            # its provider is sent ``item`` verbatim; another reads ``text``: redacted, the
            # block kept (turned into plain text it would be a compaction no more)
            text = self.text(block.text)
            return block if text == block.text else Compaction(text, block.provider, block.item)
        if isinstance(block, Text):
            text = self.text(block.text)
            return block if text == block.text else Text(text)
        if isinstance(block, ToolCall):
            arguments = self.value(block.arguments)
            if arguments == block.arguments:
                return block
            return ToolCall(block.id, block.name, arguments)
        if isinstance(block, ToolResult):
            content = tuple(self._block(b) for b in block.content)
            if all(a is b for a, b in zip(content, block.content, strict=True)):
                return block
            return dataclasses.replace(block, content=content)  # type: ignore[arg-type]
        return block

    def texts(self, texts: Sequence[str]) -> list[str]:
        """Each of ``texts`` redacted."""
        return [self.text(t) for t in texts]
