"""Transcripts: one neutral model, importers for real formats, provider payloads (DESIGN.md §5).

>>> from ctxengine.transcript import Message, Transcript, ToolCall
>>> t = Transcript((
...     Message.user("list files"),
...     Message.assistant("", [ToolCall("call_1", "bash", {"cmd": "ls"})]),
... ))
>>> t.to("anthropic")["messages"][-1]["content"][0]["type"]  # repair added the missing result
'tool_result'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .changes import Change, Problem, Report
from .loader import FORMATS, Format, detect_format, first_session, load, load_all
from .model import (
    Block,
    Compaction,
    Image,
    Message,
    Role,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
)
from .providers import PROVIDERS, Provider

if TYPE_CHECKING:
    from ..inject.cache import MAX_BREAKPOINTS, Breakpoint, plan_cache_breakpoints
    from ..inject.render import Rendered, render

#: Names of the inject layer kept here for compatibility, resolved on first use (the neutral
#: model does not import the layer that renders it).
_INJECT = {
    "MAX_BREAKPOINTS": "cache",
    "Breakpoint": "cache",
    "plan_cache_breakpoints": "cache",
    "Rendered": "render",
    "render": "render",
}

__all__ = (
    "FORMATS",
    "MAX_BREAKPOINTS",
    "PROVIDERS",
    "Block",
    "Breakpoint",
    "Change",
    "Compaction",
    "Format",
    "Image",
    "Message",
    "Problem",
    "Provider",
    "Rendered",
    "Report",
    "Role",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "detect_format",
    "first_session",
    "load",
    "load_all",
    "plan_cache_breakpoints",
    "render",
)


def __getattr__(name: str) -> Any:
    module = _INJECT.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxengine.transcript' has no attribute {name!r}")
    from ..inject import cache, render

    return getattr(cache if module == "cache" else render, name)
