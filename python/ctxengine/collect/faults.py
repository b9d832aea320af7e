"""Plugin faults: the leaf every collect module shares (no imports from the rest of collect/).

:class:`PluginFault` records one plugin failure for the turn's report; :func:`call_plugin` runs
one plugin callable on its runner (:mod:`.runner`) under a timeout and turns whatever goes wrong
into a fault kind.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = (
    "WITHHELD",
    "CallKind",
    "CallResult",
    "FaultKind",
    "PluginCaller",
    "PluginFault",
    "PluginWarning",
    "call_plugin",
    "describe_exc",
    "is_async_callable",
    "withheld",
)

FaultKind = Literal[
    "raised", "timeout", "blocked", "invalid", "denied", "quarantined", "provenance"
]
CallKind = Literal["", "raised", "timeout", "blocked"]

#: What is sent instead of a text whose ``redact_text`` raised (or returned no string): what it
#: would have redacted is unknown, so the whole text is withheld.
WITHHELD = "[REDACTED:redactor_failed]"


def withheld(plugin: str, kind: FaultKind, message: str, faults: list[PluginFault] | None) -> str:
    """:data:`WITHHELD`, sent instead of a text ``plugin``'s ``redact_text`` failed on, with
    its fault appended to ``faults`` (for the render's report)."""
    if faults is not None:
        faults.append(PluginFault(plugin, "redact_text", kind, message))
    return WITHHELD


class PluginWarning(UserWarning):
    """A plugin failed where nothing can report it (``teardown``): names plugin and hook."""


@dataclass(frozen=True, slots=True)
class PluginFault:
    """One plugin failure, recorded in the turn's report.

    Attributes:
        plugin: Plugin name.
        hook: ``collect``, a handler name, ``bus:<event>``, ``setup``, ``teardown``, or
            ``render`` (a carried grain refused when the render met it).
        kind: ``raised``, ``timeout``, ``blocked`` (an async hook blocked its event loop),
            ``invalid`` (returned something that is not grains, or an invalid grain),
            ``denied`` (used a privileged ability without consent: its tree changes were undone,
            or its grain in an engine namespace or over another's protected grain refused),
            ``quarantined`` (skipped for the rest of the session) or ``provenance`` (emitted a
            grain under another plugin's name; corrected).
        message: Human-readable detail.
        severity: ``error`` or ``warning`` (``provenance`` and ``teardown`` faults).
        node_id: The grain an ``invalid`` or ``denied`` fault is about (it gets a ``dropped``
            decision).
    """

    plugin: str
    hook: str
    kind: FaultKind
    message: str
    severity: Literal["error", "warning"] = "error"
    node_id: str | None = None

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
    """``Type: message`` (or just the type when the message is empty). An exception whose
    ``str()`` itself raises is described by its type and that failure: describing a fault
    never raises."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception as inner:
        return f"{name}: <str() raised {type(inner).__name__}>"
    return f"{name}: {text}" if text else name


class PluginCaller(Protocol):
    """Where a plugin's calls run (:class:`~ctxengine.collect.runner.PluginRunner`)."""

    async def call(
        self, fn: Callable[[Any], Any], arg: Any, timeout: float | None, *, is_async: bool
    ) -> CallResult:
        """Run ``fn(arg)``, waiting at most ``timeout`` seconds."""
        ...


@dataclass(frozen=True, slots=True)
class CallResult:
    """Outcome of one call: ``kind`` is ``""`` on success, else ``raised``/``timeout``/``blocked``.

    ``abandoned``: the call was still running when the caller gave up on it.
    """

    value: Any = None
    kind: CallKind = ""
    message: str = ""
    abandoned: bool = False


async def call_plugin(
    fn: Callable[[Any], Any], arg: Any, timeout: float | None, runner: PluginCaller
) -> CallResult:
    """Call ``fn(arg)`` on ``runner`` (off this loop) under ``timeout``; never raises for the
    plugin's sake (the caller's own cancellation propagates)."""
    return await runner.call(fn, arg, timeout, is_async=is_async_callable(fn))
