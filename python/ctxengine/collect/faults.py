"""Plugin faults: the leaf every collect module shares (no imports from the rest of collect/).

:class:`PluginFault` records one plugin failure for the turn's report; :func:`call_plugin` runs
one plugin callable under a timeout and turns whatever goes wrong into a fault kind.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio

__all__ = ("FaultKind", "PluginFault", "PluginWarning", "call_plugin", "is_async_callable")

FaultKind = Literal["raised", "timeout", "invalid", "denied", "quarantined", "provenance"]


class PluginWarning(UserWarning):
    """A plugin failed where nothing can report it (``teardown``): names plugin and hook."""


@dataclass(frozen=True, slots=True)
class PluginFault:
    """One plugin failure, recorded in the turn's report.

    Attributes:
        plugin: Plugin name.
        hook: ``collect``, a handler name, ``bus:<event>``, ``setup`` or ``teardown``.
        kind: ``raised``, ``timeout``, ``invalid`` (returned something that is not grains),
            ``denied`` (used a privileged ability without consent; its changes were undone),
            ``quarantined`` (skipped for the rest of the session) or ``provenance`` (emitted a
            grain under another plugin's name; corrected).
        message: Human-readable detail.
        severity: ``error`` or ``warning`` (``provenance`` and ``teardown`` faults).
    """

    plugin: str
    hook: str
    kind: FaultKind
    message: str
    severity: Literal["error", "warning"] = "error"

    def to_dict(self) -> dict[str, str]:
        """JSON-serializable form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PluginFault:
        """The fault :meth:`to_dict` wrote."""
        return cls(**data)


def is_async_callable(obj: object) -> bool:
    """Whether calling ``obj`` returns an awaitable (``async def``, or async ``__call__``)."""
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)  # noqa: B004 - we need the bound __call__ itself
    return call is not None and inspect.iscoroutinefunction(call)


def describe_exc(exc: BaseException) -> str:
    """``Type: message`` (or just the type when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def call_plugin(
    fn: Callable[[Any], Any], arg: Any, timeout: float | None
) -> tuple[Any, str, str]:
    """Call ``fn(arg)`` (sync in a worker thread) under ``timeout``.

    Returns ``(result, kind, message)`` with kind ``""`` on success.
    """
    result: Any = None
    try:
        with anyio.move_on_after(timeout) as scope:
            if is_async_callable(fn):
                result = await fn(arg)
            else:
                result = await anyio.to_thread.run_sync(fn, arg, abandon_on_cancel=True)
                if inspect.isawaitable(result):
                    result = await result
    except Exception as exc:
        return None, "raised", describe_exc(exc)
    if scope.cancelled_caught:
        return None, "timeout", f"did not finish within {timeout:g} s"
    return result, "", ""
