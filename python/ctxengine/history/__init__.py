"""Moved to :mod:`ctxengine.assemble.history`; this path re-exports it (no logic here).

A package rather than ``history.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..assemble.history import (
    FLAG,
    KIND,
    ROLE,
    HistoryBuilder,
    HistoryItem,
    tool_result_node_id,
)

__all__ = (
    "FLAG",
    "KIND",
    "ROLE",
    "HistoryBuilder",
    "HistoryItem",
    "tool_result_node_id",
)
