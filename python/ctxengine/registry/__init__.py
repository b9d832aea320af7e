"""Moved to :mod:`ctxengine.collect.registry`; this path re-exports it (no logic here).

A package rather than ``registry.py``, so version control follows the old file to its new home.
"""

from __future__ import annotations

from ..collect.registry import (
    ENTRY_POINT_GROUP,
    PluginEntry,
    Registry,
    default_registry,
    load_entry_points,
    load_plugins,
    register,
)

__all__ = (
    "ENTRY_POINT_GROUP",
    "PluginEntry",
    "Registry",
    "default_registry",
    "load_entry_points",
    "load_plugins",
    "register",
)
