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

from .cache import MAX_BREAKPOINTS, Breakpoint, plan_cache_breakpoints
from .loader import FORMATS, Format, detect_format, load, load_all
from .model import (
    Block,
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
from .render import Rendered, render
from .report import Change, Problem, Report

__all__ = (
    "FORMATS",
    "MAX_BREAKPOINTS",
    "PROVIDERS",
    "Block",
    "Breakpoint",
    "Change",
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
    "load",
    "load_all",
    "plan_cache_breakpoints",
    "render",
)
