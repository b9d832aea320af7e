"""Moved to :mod:`ctxengine.assemble.guard`; this path re-exports it (no logic here).

A package rather than ``guard.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..assemble.guard import (
    HARD_MAX_TOOL_RESULT_CHARS,
    MIN_KEEP_CHARS,
    TOOL_RESULT_SHARE,
    PruneSettings,
    estimate_chars,
    limit_history_turns,
    max_tool_result_chars,
    prune_tool_results,
    truncate_tool_result,
    truncate_tool_results,
)

__all__ = (
    "HARD_MAX_TOOL_RESULT_CHARS",
    "MIN_KEEP_CHARS",
    "TOOL_RESULT_SHARE",
    "PruneSettings",
    "estimate_chars",
    "limit_history_turns",
    "max_tool_result_chars",
    "prune_tool_results",
    "truncate_tool_result",
    "truncate_tool_results",
)
