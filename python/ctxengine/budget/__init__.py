"""Moved to :mod:`ctxengine.assemble.budget`; this path re-exports it (no logic here).

A package rather than ``budget.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..assemble.budget import (
    DEFAULT_PREFIXES,
    DEFAULT_WINDOWS,
    Budget,
    context_window,
)

__all__ = (
    "DEFAULT_PREFIXES",
    "DEFAULT_WINDOWS",
    "Budget",
    "context_window",
)
