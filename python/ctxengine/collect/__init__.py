"""Collect (DESIGN.md §1, step 1): plugins, their registry, lifecycle events and the bus.

Modules, leaves first: :mod:`.faults` (PluginFault), :mod:`.wake` (waking a task of any event
loop; the lock an engine's sessions share), :mod:`.namespaces` (who may write which node ids),
:mod:`.scene`, :mod:`.events` (events and the bus), :mod:`.protocol` (the provider protocol),
:mod:`.manifest`, :mod:`.loader`, :mod:`.lifecycle`, :mod:`.registry`, :mod:`.dispatch` (the
per-session dispatcher) and :mod:`.turn` (the collect phase of a render).
"""

from __future__ import annotations

from .dispatch import Outcome, SessionDispatcher
from .faults import PluginFault, PluginWarning
from .protocol import LIFECYCLE_HOOKS, AbstractContextProvider, hooks_of, validate_provider
from .registry import PluginEntry, Registry
from .scene import ContextScene

__all__ = (
    "LIFECYCLE_HOOKS",
    "AbstractContextProvider",
    "ContextScene",
    "Outcome",
    "PluginEntry",
    "PluginFault",
    "PluginWarning",
    "Registry",
    "SessionDispatcher",
    "hooks_of",
    "validate_provider",
)
