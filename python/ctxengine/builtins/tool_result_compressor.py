"""`tool_result_compressor`: large tool outputs become head + tail + a summary line."""

from __future__ import annotations

import json
from typing import Any

from ..collect.events import ToolResult
from ..collect.namespaces import own_tool_result_id
from ..collect.scene import ContextScene
from ..errors import PluginError
from ..grain import ContextGrain, Lifespan, content_text

__all__ = ("ToolResultCompressor", "compress_output", "summarize_output")


def summarize_output(text: str) -> str:
    """A short description of ``text``: JSON shape when it parses, else line/char counts."""
    stripped = text.strip()
    if stripped[:1] in "[{":
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, list):
            return f"JSON array of {len(data):,} items"
        if isinstance(data, dict):
            keys = ", ".join(list(map(str, data))[:8])
            more = ", ..." if len(data) > 8 else ""
            return f"JSON object with {len(data):,} keys ({keys}{more})"
    return f"{text.count(chr(10)) + 1:,} lines"


def _cut_head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    return text[: cut if cut > limit // 2 else limit]


def _cut_tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    start = len(text) - limit
    cut = text.find("\n", start)
    return text[cut + 1 if 0 <= cut < start + limit // 2 else start :]


def compress_output(text: str, *, head_chars: int, tail_chars: int, label: str) -> str:
    """``[summary]`` + head + omission notice + tail, cut at line boundaries when possible.

    The tail is kept because errors and final status lines are usually at the end.
    """
    head = _cut_head(text, head_chars)
    tail = _cut_tail(text[len(head) :], tail_chars)
    omitted = text[len(head) : len(text) - len(tail)]
    lines = omitted.count("\n")
    summary = (
        f"[{label}: {summarize_output(text)}, {len(text):,} chars; showing the first "
        f"{len(head):,} and last {len(tail):,} chars]"
    )
    notice = f"[... {len(omitted):,} chars ({lines:,} lines) omitted ...]"
    return "\n".join(
        part for part in (summary, head.rstrip("\n"), notice, tail.lstrip("\n")) if part
    )


class ToolResultCompressor:
    """Replace large tool outputs with head + tail and a one-line summary.

    Emits ``act.tool_result.<call_id>``, the node id of the tool result itself, so fusion keeps
    this compressed version (higher rank than the raw result) and records the raw one as
    shadowed. Outputs of at most ``threshold_chars`` characters are left alone.

    Args:
        threshold_chars: Outputs longer than this are compressed.
        head_chars: Characters kept from the start.
        tail_chars: Characters kept from the end.
        lifespan: Lifespan of the compressed grain (``session``: it keeps replacing the raw
            result in later turns).
        priority: Plugin priority; the grain gets ``priority`` too.

    Raises:
        PluginError: sizes are not positive or head + tail >= threshold.
    """

    name = "tool_result_compressor"
    version = "1.0.0"

    def __init__(
        self,
        *,
        threshold_chars: int = 4000,
        head_chars: int = 1500,
        tail_chars: int = 1000,
        lifespan: Lifespan = "session",
        priority: int = 20,
    ) -> None:
        if (
            min(threshold_chars, head_chars, tail_chars) <= 0
            or head_chars + tail_chars >= threshold_chars
        ):
            raise PluginError(
                "need positive sizes with head_chars + tail_chars < threshold_chars; got "
                f"{head_chars} + {tail_chars} vs {threshold_chars}",
                plugin=self.name,
            )
        self.threshold_chars = threshold_chars
        self.head_chars = head_chars
        self.tail_chars = tail_chars
        self.lifespan: Lifespan = lifespan
        self.priority = priority
        self.enabled = True

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Nothing per turn: work happens in :meth:`on_tool_result`."""
        return []

    def on_tool_result(self, event: ToolResult) -> list[ContextGrain] | None:
        """Return the compressed grain for a large output, else ``None``."""
        output: Any = event.output
        text = output if isinstance(output, str) else content_text(_jsonable(output))
        if len(text) <= self.threshold_chars:
            return None
        label = f"tool result: {event.name}" + (" (error)" if event.is_error else "")
        content = compress_output(
            text, head_chars=self.head_chars, tail_chars=self.tail_chars, label=label
        )
        return [
            ContextGrain(
                node_id=own_tool_result_id(event.call_id),
                origin=self.name,
                content=content,
                priority=self.priority,
                lifespan=self.lifespan,
                meta={
                    "call_id": event.call_id,
                    "tool": event.name,
                    "is_error": event.is_error,
                    "original_chars": len(text),
                    "compressed": True,
                },
            )
        ]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return value
    return str(value)
