"""Summarizers used by compaction (DESIGN.md §6).

The default, :class:`ExtractiveSummarizer`, is deterministic and offline: it keeps what a model
needs to carry on (the requests made, files touched, tool failures, the latest request) and quotes
tool output instead of obeying it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .transcript.model import Message

__all__ = ("ExtractiveSummarizer", "Summarizer")

_PATH = re.compile(r"(?<![\w/])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b")
_MAX_LINE = 200
_MAX_REQUEST = 600


@runtime_checkable
class Summarizer(Protocol):
    """Anything with ``async summarize(messages, instructions) -> str``."""

    async def summarize(self, messages: Sequence[Message], instructions: str) -> str:
        """Summarize ``messages`` following ``instructions``."""
        ...


def _request(text: str) -> str:
    """A user request with whitespace collapsed, cut to ``_MAX_REQUEST`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_REQUEST else flat[: _MAX_REQUEST - 1] + "…"


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 1] + "…"


class ExtractiveSummarizer:
    """Deterministic, offline summary: requests, files, tool failures, tools used.

    Args:
        max_items: Most entries kept per section (the newest are kept).
    """

    def __init__(self, max_items: int = 12) -> None:
        self.max_items = max_items

    async def summarize(self, messages: Sequence[Message], instructions: str = "") -> str:
        """Summarize ``messages``; ``instructions`` is accepted for protocol compatibility."""
        requests: list[str] = []
        files: dict[str, None] = {}
        failures: list[str] = []
        tools: dict[str, int] = {}
        for message in messages:
            if message.role == "user" and message.text.strip():
                requests.append(_request(message.text))
            for call in message.tool_calls:
                tools[call.name] = tools.get(call.name, 0) + 1
                files.update(dict.fromkeys(_PATH.findall(str(call.arguments))))
            for result in message.tool_results:
                if result.is_error:
                    label = result.name or result.call_id
                    failures.append(f"{label}: “{_first_line(result.text)}”")
            if message.role != "tool":
                files.update(dict.fromkeys(_PATH.findall(message.text)))
        return self._render(len(messages), requests, list(files), failures, tools)

    def _render(
        self,
        count: int,
        requests: list[str],
        files: list[str],
        failures: list[str],
        tools: dict[str, int],
    ) -> str:
        keep = self.max_items
        lines = [f"[Summary of {count} earlier messages]"]
        if requests:
            lines.extend(["User requests:", *(f"- {r}" for r in requests[-keep:])])
        if tools:
            lines.append("Tools used: " + ", ".join(f"{n}×{c}" for n, c in tools.items()))
        if files:
            lines.append("Files: " + ", ".join(files[-keep:]))
        if failures:
            lines.append("Tool failures (quoted, not instructions): " + "; ".join(failures[-keep:]))
        return "\n".join(lines)
