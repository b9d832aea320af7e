"""`AbstractContextProvider`: the structural contract of a plugin, and its validation."""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

from packaging.version import InvalidVersion, Version

from ..errors import PluginError
from ..grain import ContextGrain
from .events import HOOK_NAMES
from .faults import is_async_callable
from .scene import ContextScene

__all__ = (
    "LIFECYCLE_HOOKS",
    "AbstractContextProvider",
    "hooks_of",
    "is_async_callable",
    "subscriptions_of",
    "validate_provider",
)

logger = logging.getLogger("ctxengine.plugins")

LIFECYCLE_HOOKS: Final = HOOK_NAMES
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


@runtime_checkable
class AbstractContextProvider(Protocol):
    """A source of context. No base class is needed: any object with these members works.

    Required: ``name`` (unique, e.g. ``"env_info"``), ``version`` (PEP 440, e.g. ``"1.0.0"``),
    ``priority`` (int; lower runs first and ranks its grains higher), ``enabled`` (bool) and
    ``async collect(scene) -> list[ContextGrain]``.

    Optional lifecycle handlers, sync or async, each taking one event and returning grains or
    ``None``: ``on_session_start``, ``on_user_msg``, ``on_tool_result``, ``on_before_render``,
    ``on_over_budget``, ``on_after_render``, ``on_session_close``. Optional ``async
    setup(engine)`` / ``async teardown()`` for asynchronous initialization; optional
    ``dangerous = True`` to ask for privileged abilities; optional ``subscriptions``, a mapping of
    custom event name -> method name (or callable) wired to each session's event bus.
    """

    name: str
    version: str
    priority: int
    enabled: bool

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Return the grains this plugin contributes to the current turn."""
        ...


def _refuse(name: str | None, message: str) -> PluginError:
    return PluginError(f"plugin {name or '?'!r} refused: {message}", plugin=name)


def validate_provider(provider: object) -> str:
    """Check ``provider`` against :class:`AbstractContextProvider`; return its name.

    Raises:
        PluginError: a required attribute is missing or mistyped (the message names it),
            ``collect``/``setup``/``teardown`` is not async, a handler is not callable, or
            ``version`` is not a valid PEP 440 version.
    """
    raw_name = getattr(provider, "name", None)
    name = raw_name if isinstance(raw_name, str) else None
    if isinstance(provider, type):
        raise _refuse(name, f"register an instance, not the class {provider.__name__}")
    for attr in ("name", "version", "priority", "enabled", "collect"):
        try:
            present = hasattr(provider, attr)
        except Exception:  # a property that raises (a flag service down): it is there
            present = True
        if not present:
            raise _refuse(name, f"missing required attribute {attr!r}")
    if not isinstance(raw_name, str) or not _NAME.fullmatch(raw_name):
        raise _refuse(
            name,
            f"'name' must be 1-64 chars of letters, digits, '_', '-', '.'; got {raw_name!r}",
        )
    version = getattr(provider, "version")  # noqa: B009 - checked above; keeps mypy honest
    if not isinstance(version, str):
        raise _refuse(name, f"'version' must be a str; got {type(version).__name__}")
    try:
        Version(version)
    except InvalidVersion:
        raise _refuse(name, f"'version' {version!r} is not a valid PEP 440 version") from None
    priority = getattr(provider, "priority")  # noqa: B009
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise _refuse(name, f"'priority' must be an int; got {priority!r}")
    try:
        enabled = getattr(provider, "enabled")  # noqa: B009
    except Exception:  # read again at each render: a fault then, the plugin disabled meanwhile
        enabled = False
    if not isinstance(enabled, bool):
        raise _refuse(name, f"'enabled' must be a bool; got {enabled!r}")
    if not is_async_callable(getattr(provider, "collect")):  # noqa: B009
        raise _refuse(name, "'collect' must be an async method: async def collect(self, scene)")
    for attr in ("setup", "teardown"):
        fn = getattr(provider, attr, None)
        if fn is not None and not is_async_callable(fn):
            raise _refuse(name, f"'{attr}' must be an async method")
    for hook in HOOK_NAMES:
        fn = getattr(provider, hook, None)
        if fn is not None and not callable(fn):
            raise _refuse(name, f"handler {hook!r} is not callable")
    dangerous = getattr(provider, "dangerous", False)
    if not isinstance(dangerous, bool):
        raise _refuse(name, f"'dangerous' must be a bool; got {dangerous!r}")
    subscriptions_of(provider)  # validates
    _warn_unknown_hooks(provider, raw_name)
    return raw_name


def _warn_unknown_hooks(provider: object, name: str) -> None:
    """Log handlers that look like hooks but are not (they would be skipped silently)."""
    subscribed = {v for v in _raw_subscriptions(provider).values() if isinstance(v, str)}
    for attr in dir(provider):
        if not attr.startswith("on_") or attr in HOOK_NAMES or attr in subscribed:
            continue
        if callable(getattr(provider, attr, None)):
            close = difflib.get_close_matches(attr, HOOK_NAMES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            logger.warning(
                "plugin %s defines %s, which is not a lifecycle hook and will never be called%s",
                name,
                attr,
                hint,
            )


def _raw_subscriptions(provider: object) -> Mapping[str, Any]:
    subs = getattr(provider, "subscriptions", None)
    return subs if isinstance(subs, Mapping) else {}


def subscriptions_of(provider: object) -> dict[str, Any]:
    """Resolve ``provider.subscriptions`` into ``{event name: callable}``.

    Raises:
        PluginError: ``subscriptions`` is not a mapping, or names a missing/non-callable method.
    """
    subs = getattr(provider, "subscriptions", None)
    name = getattr(provider, "name", None)
    if subs is None:
        return {}
    if not isinstance(subs, Mapping):
        raise _refuse(name, "'subscriptions' must be a mapping of event name -> method name")
    out: dict[str, Any] = {}
    for event, target in subs.items():
        fn = getattr(provider, target, None) if isinstance(target, str) else target
        if not isinstance(event, str) or not callable(fn):
            raise _refuse(name, f"subscription {event!r} -> {target!r} is not a callable handler")
        out[event] = fn
    return out


def hooks_of(provider: object) -> tuple[str, ...]:
    """The hooks ``provider`` subscribes to: ``collect``, lifecycle handlers present,
    ``setup``/``teardown`` and ``bus:<event>`` subscriptions, in a stable order."""
    hooks = ["collect"] if callable(getattr(provider, "collect", None)) else []
    hooks += [h for h in HOOK_NAMES if callable(getattr(provider, h, None))]
    hooks += [h for h in ("setup", "teardown") if callable(getattr(provider, h, None))]
    hooks += [f"bus:{e}" for e in _raw_subscriptions(provider)]
    return tuple(hooks)
