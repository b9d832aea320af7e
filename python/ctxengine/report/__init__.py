"""Moved to :mod:`ctxengine.assemble.report`; this path re-exports it (no logic here).

A package rather than ``report.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..assemble.report import (
    GrainDecision,
    RenderReport,
)

__all__ = (
    "GrainDecision",
    "RenderReport",
)
