"""Moved to :mod:`ctxengine.inject.hygiene`; this path re-exports it (no logic here).

A package rather than ``hygiene.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..inject.hygiene import (
    BOOTSTRAP_TEXT,
    SYNTHETIC_RESULT_TEXT,
    Change,
    IdMode,
    Problem,
    Report,
    clean,
    fix_turn_order,
    repair_pairing,
    sanitize_tool_ids,
    validate,
)

__all__ = (
    "BOOTSTRAP_TEXT",
    "SYNTHETIC_RESULT_TEXT",
    "Change",
    "IdMode",
    "Problem",
    "Report",
    "clean",
    "fix_turn_order",
    "repair_pairing",
    "sanitize_tool_ids",
    "validate",
)
