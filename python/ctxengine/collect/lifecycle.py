"""Engine-level plugin lifecycle: ``setup(engine)`` once, ``teardown()`` at shutdown."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any, Protocol

import anyio

from .faults import PluginFault, PluginWarning, call_plugin
from .runner import PluginRunner


class EntryLike(Protocol):
    """What the lifecycle needs of a registry entry (:class:`~.registry.PluginEntry`)."""

    name: str
    provider: Any
    index: int
    setup_done: bool
    runner: PluginRunner | None

    def call_runner(self) -> PluginRunner: ...


class RegistryLike(Protocol):
    """What the lifecycle needs of a registry (:class:`~.registry.Registry`); a protocol, so
    the registry can call these functions without an import cycle."""

    def entries(self) -> Sequence[Any]: ...
    def entry(self, name: str) -> Any: ...
    def disable(self, name: str) -> Any: ...


__all__ = ("EntryLike", "RegistryLike", "setup_plugins", "teardown_plugins")

logger = logging.getLogger("ctxengine.plugins")


async def setup_plugins(
    registry: RegistryLike, engine: Any, *, timeout: float | None = 10.0
) -> list[PluginFault]:
    """Await ``setup(engine)`` once on every registered plugin that defines it, concurrently.

    A plugin whose setup fails is disabled and reported; plugins already set up are skipped,
    so this can be called again after registering more plugins.
    """
    pending = [
        e
        for e in registry.entries()
        if callable(getattr(e.provider, "setup", None)) and not e.setup_done
    ]
    faults: list[PluginFault] = []

    async def one(entry: EntryLike) -> None:
        entry.setup_done = True
        call = await call_plugin(entry.provider.setup, engine, timeout, entry.call_runner())
        if call.kind:
            kind, message = call.kind, call.message
            faults.append(PluginFault(entry.name, "setup", kind, f"{message}; plugin disabled"))
            logger.warning("plugin %s setup failed (%s): %s; disabled", entry.name, kind, message)
            registry.disable(entry.name)

    async with anyio.create_task_group() as tg:
        for entry in pending:
            tg.start_soon(one, entry)
    return sorted(faults, key=lambda f: registry.entry(f.plugin).index)


async def teardown_plugins(
    registry: RegistryLike, *, timeout: float | None = 5.0
) -> list[PluginFault]:
    """Await ``teardown()`` on every plugin that was set up (or defines it), in reverse order.

    Failures are returned and also emitted as :class:`PluginWarning` naming plugin and hook.
    Each plugin's event loop thread is stopped afterwards (a later call starts a new one).
    """
    faults: list[PluginFault] = []
    for entry in reversed(registry.entries()):
        fn = getattr(entry.provider, "teardown", None)
        if not callable(fn):
            if entry.runner is not None:
                entry.call_runner().retire()
            continue

        async def close(_: object, fn: Any = fn) -> Any:
            return await fn()

        runner = entry.call_runner()
        call = await call_plugin(close, None, timeout, runner)
        runner.retire()
        entry.setup_done = False
        kind, message = call.kind, call.message
        if kind:
            fault = PluginFault(entry.name, "teardown", kind, message, "warning")
            faults.append(fault)
            warnings.warn(
                f"plugin {entry.name!r} hook 'teardown' failed ({kind}): {message}",
                PluginWarning,
                stacklevel=2,
            )
    return faults
