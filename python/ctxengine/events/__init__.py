"""Moved to :mod:`ctxengine.collect.events`; this path re-exports it (no logic here).

A package rather than ``events.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..collect.events import (
    HOOK_NAMES,
    HOOKS,
    TREE_EVENTS,
    AfterRender,
    BeforeRender,
    CustomEvent,
    Event,
    EventBus,
    OverBudget,
    SessionClose,
    SessionStart,
    Subscription,
    ToolResult,
    UserMessage,
    current_bus,
    current_session,
    hook_for,
)

__all__ = (
    "HOOKS",
    "HOOK_NAMES",
    "TREE_EVENTS",
    "AfterRender",
    "BeforeRender",
    "CustomEvent",
    "Event",
    "EventBus",
    "OverBudget",
    "SessionClose",
    "SessionStart",
    "Subscription",
    "ToolResult",
    "UserMessage",
    "current_bus",
    "current_session",
    "hook_for",
)
