"""Moved to :mod:`ctxengine.collect.scene`; this path re-exports it (no logic here).

A package rather than ``scene.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..collect.scene import (
    ContextScene,
    TranscriptView,
)

__all__ = (
    "ContextScene",
    "TranscriptView",
)
