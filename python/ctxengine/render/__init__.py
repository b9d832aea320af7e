"""Moved to :mod:`ctxengine.inject.compose`; this path re-exports it (no logic here).

A package rather than ``render.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..inject.compose import compose
from ..inject.payload import MessageTokenCache, payload_tokens

__all__ = (
    "MessageTokenCache",
    "compose",
    "payload_tokens",
)
