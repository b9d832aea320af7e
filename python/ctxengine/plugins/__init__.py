"""Former home of the plugin machinery, now in :mod:`ctxengine.collect` (re-exports only).

The registry is :mod:`ctxengine.collect.registry`, events :mod:`ctxengine.collect.events`, the
scene :mod:`ctxengine.collect.scene`, and the built-in plugins :mod:`ctxengine.builtins`.
"""

from __future__ import annotations

from ..collect.dispatch import Outcome, SessionDispatcher
from ..collect.faults import PluginFault, PluginWarning
from ..collect.lifecycle import setup_plugins, teardown_plugins
from ..collect.manifest import Manifest, read_manifest
from ..collect.protocol import LIFECYCLE_HOOKS, AbstractContextProvider, hooks_of, validate_provider

__all__ = (
    "LIFECYCLE_HOOKS",
    "AbstractContextProvider",
    "Manifest",
    "Outcome",
    "PluginFault",
    "PluginWarning",
    "SessionDispatcher",
    "hooks_of",
    "read_manifest",
    "setup_plugins",
    "teardown_plugins",
    "validate_provider",
)
