"""Plugin machinery: the provider protocol, manifests, the per-session dispatcher and the CLI.

The registry lives in :mod:`ctxengine.registry`, events in :mod:`ctxengine.events`, the scene in
:mod:`ctxengine.scene`, and the built-in plugins in :mod:`ctxengine.builtins`.
"""

from __future__ import annotations

from .dispatch import Outcome, PluginFault, PluginWarning, SessionDispatcher
from .lifecycle import setup_plugins, teardown_plugins
from .manifest import Manifest, read_manifest
from .protocol import LIFECYCLE_HOOKS, AbstractContextProvider, hooks_of, validate_provider

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
