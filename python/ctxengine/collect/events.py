"""Lifecycle events passed to plugin handlers, and the event bus for custom events.

Each lifecycle event is a small frozen dataclass; :data:`HOOKS` maps its type to the handler
name a plugin defines to receive it (``UserMessage`` -> ``on_user_msg``). A handler may be sync
or async and may return a list of :class:`~ctxengine.ContextGrain` (or ``None``); returned grains
join the turn.

Custom events between plugins go through an :class:`EventBus`, one per session::

    from ctxengine.events import current_bus

    class Keywords:
        async def on_user_msg(self, event):
            await current_bus().emit("keywords.extracted", extract(event.user_message))

    class Docs:
        subscriptions = {"keywords.extracted": "on_keywords"}

        async def on_keywords(self, event):  # event: CustomEvent
            return [ContextGrain("rag.kw", content=lookup(event.payload))]

Why the bus is a direct, awaited call and not a set of memory streams: grains a subscriber
returns must join the *same* turn as the emission, and handlers must run in a deterministic
order. ``await bus.emit(...)`` runs every subscriber in subscription order before it returns,
so back-pressure is inherent (the emitter waits), nothing outlives the turn, and there is no
background task group to own or close. Re-entrant emission is bounded by ``max_depth``.
"""

from __future__ import annotations

import contextvars
import inspect
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import PluginError

__all__ = (
    "HOOKS",
    "HOOK_NAMES",
    "TREE_EVENTS",
    "AfterRender",
    "BeforeRender",
    "CustomEvent",
    "Event",
    "EventBus",
    "OverBudget",
    "SessionClose",
    "SessionStart",
    "Subscription",
    "ToolResult",
    "UserMessage",
    "current_bus",
    "current_session",
    "hook_for",
)


@dataclass(frozen=True, slots=True)
class SessionStart:
    """A session was opened (``on_session_start``)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A new user message arrived (``on_user_msg``); ``user_message`` is after redaction."""

    session_id: str
    turn: int
    user_message: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool call returned (``on_tool_result``); ``output`` is text or structured data."""

    session_id: str
    call_id: str
    name: str
    output: Any
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class BeforeRender:
    """The tree is about to be rendered (``on_before_render``).

    ``tree`` is the engine's mutable list of grains for this render. Handlers run one at a time
    in plugin order and may append grains, or fold/drop/change *their own* grains. Changing or
    removing another plugin's grain requires ``dangerous`` and the engine's consent; otherwise the
    dispatcher undoes the handler's changes and reports a ``denied`` fault.
    """

    tree: Any


@dataclass(frozen=True, slots=True)
class OverBudget:
    """The estimate passed the pre-trim threshold (``on_over_budget``), before the trim ladder.

    Same tree rules as :class:`BeforeRender`. ``budget`` is the engine's budget object and
    ``over_by`` the number of tokens above it.
    """

    tree: Any
    budget: Any
    over_by: int


@dataclass(frozen=True, slots=True)
class AfterRender:
    """The payload was rendered for the provider (``on_after_render``).

    ``report`` is the render manifest: an iterable of per-grain entries (mappings or objects)
    with ``node_id``, ``origin``, ``window``, ``decision`` and ``tokens_after``/``tokens``.
    """

    payload: Any
    tokens: Any
    report: Any


@dataclass(frozen=True, slots=True)
class SessionClose:
    """The session is closing (``on_session_close``)."""

    session_id: str


Event = (
    SessionStart | UserMessage | ToolResult | BeforeRender | OverBudget | AfterRender | SessionClose
)

HOOKS: Final[dict[type, str]] = {
    SessionStart: "on_session_start",
    UserMessage: "on_user_msg",
    ToolResult: "on_tool_result",
    BeforeRender: "on_before_render",
    OverBudget: "on_over_budget",
    AfterRender: "on_after_render",
    SessionClose: "on_session_close",
}
"""Lifecycle event type -> handler attribute name."""

HOOK_NAMES: Final[tuple[str, ...]] = tuple(HOOKS.values())
"""Every lifecycle handler name, in lifecycle order."""

TREE_EVENTS: Final[tuple[type, ...]] = (BeforeRender, OverBudget)
"""Events whose handlers mutate a shared tree: run sequentially, in plugin order."""


def hook_for(event: object) -> str:
    """Return the handler name for a lifecycle event.

    Raises:
        PluginError: ``event`` is not one of the lifecycle event types.
    """
    try:
        return HOOKS[type(event)]
    except KeyError:
        names = ", ".join(t.__name__ for t in HOOKS)
        raise PluginError(
            f"{type(event).__name__} is not a lifecycle event; expected one of {names} "
            "(custom events go through EventBus.emit)"
        ) from None


@dataclass(frozen=True, slots=True)
class CustomEvent:
    """What a bus subscriber receives: event ``name``, ``payload`` and ``sender`` (plugin name,
    or ``None`` when the engine emitted it)."""

    name: str
    payload: Any
    sender: str | None = None


Handler = Callable[[CustomEvent], Any]
Runner = Callable[[str | None, str, Handler, CustomEvent], Awaitable[None]]
"""``runner(owner, hook, handler, event)`` calls one subscriber in isolation (dispatcher)."""

_EVENT_NAME = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
_bus_var: contextvars.ContextVar[EventBus | None] = contextvars.ContextVar(
    "ctxengine_bus", default=None
)
_session_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ctxengine_session", default=None
)
_sender_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ctxengine_sender", default=None
)
# Nesting depth of emissions in the *current task*: concurrent emitters do not add up.
_depth_var: contextvars.ContextVar[int] = contextvars.ContextVar("ctxengine_depth", default=0)


@dataclass(slots=True)
class Subscription:
    """A handle returned by :meth:`EventBus.subscribe`; ``cancel()`` unsubscribes."""

    name: str
    handler: Handler
    owner: str | None
    _bus: EventBus | None = field(default=None, repr=False)

    def cancel(self) -> None:
        """Stop receiving events (idempotent)."""
        if self._bus is not None:
            self._bus.discard(self)
            self._bus = None


class EventBus:
    """Custom events between plugins within one session.

    Subscribers run in subscription order, each awaited before the next, via ``runner`` (the
    session dispatcher supplies one that applies timeouts, fault reporting and quarantine).
    Without a runner, a subscriber's exception propagates to the emitter.

    Args:
        runner: Calls one subscriber in isolation; ``None`` calls it directly.
        max_depth: Maximum nesting of emissions from inside subscribers.
    """

    def __init__(self, runner: Runner | None = None, *, max_depth: int = 8) -> None:
        self._runner = runner
        self._max_depth = max_depth
        self._subs: list[Subscription] = []
        self._closed = False

    def subscribe(self, name: str, handler: Handler, *, owner: str | None = None) -> Subscription:
        """Call ``handler(CustomEvent)`` for every ``emit(name, ...)``; sync or async.

        ``owner`` names the plugin the handler belongs to, so its faults, timeouts and returned
        grains are attributed to it. Defaults to the plugin currently running, if any. A handler
        without an owner (the engine's own) is called directly: what it returns is ignored and
        what it raises propagates to the emitter.

        Raises:
            PluginError: invalid event name, handler not callable, or the bus is closed.
        """
        if not isinstance(name, str) or not _EVENT_NAME.fullmatch(name):
            raise PluginError(
                f"event name must be a dotted name like 'keywords.extracted'; got {name!r}"
            )
        if not callable(handler):
            raise PluginError(f"handler for {name!r} is not callable: {handler!r}")
        if self._closed:
            raise PluginError(f"cannot subscribe to {name!r}: the event bus is closed")
        sub = Subscription(name, handler, owner if owner is not None else _sender_var.get(), self)
        self._subs.append(sub)
        return sub

    def discard(self, sub: Subscription) -> None:
        """Drop ``sub`` (what :meth:`Subscription.cancel` calls)."""
        self._subs = [s for s in self._subs if s is not sub]

    def subscribers(self, name: str) -> list[Subscription]:
        """The current subscriptions to ``name``, in call order."""
        return [s for s in self._subs if s.name == name]

    async def emit(self, name: str, payload: Any = None) -> int:
        """Deliver ``payload`` to every subscriber of ``name``; returns how many were called.

        Raises:
            PluginError: the bus is closed, or emissions nested deeper than ``max_depth``
                (an event loop between plugins).
        """
        if self._closed:
            raise PluginError(f"cannot emit {name!r}: the event bus is closed")
        depth = _depth_var.get()
        if depth >= self._max_depth:
            raise PluginError(
                f"event {name!r} nested {depth} deep: a loop between subscribers?",
                plugin=_sender_var.get(),
            )
        event = CustomEvent(name, payload, _sender_var.get())
        subs = self.subscribers(name)
        token = _depth_var.set(depth + 1)
        try:
            for sub in subs:
                if self._runner is not None:
                    await self._runner(sub.owner, f"bus:{name}", sub.handler, event)
                else:
                    result = sub.handler(event)
                    if inspect.isawaitable(result):
                        await result
        finally:
            _depth_var.reset(token)
        return len(subs)

    def close(self) -> None:
        """Drop every subscription; later ``emit``/``subscribe`` raise :class:`PluginError`."""
        self._closed = True
        self._subs.clear()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed


def current_bus() -> EventBus:
    """The event bus of the session whose hook is running.

    Raises:
        PluginError: called outside a plugin hook run by a session dispatcher.
    """
    bus = _bus_var.get()
    if bus is None:
        raise PluginError("current_bus() is only available inside a plugin hook")
    return bus


def current_session() -> str | None:
    """The id of the session whose hook is running, or ``None`` outside a hook."""
    return _session_var.get()


@contextmanager
def bound(bus: EventBus, session_id: str, sender: str | None) -> Iterator[None]:
    """Bind bus, session and running plugin for the current context (used by the dispatcher)."""
    tokens = (_bus_var.set(bus), _session_var.set(session_id), _sender_var.set(sender))
    try:
        yield
    finally:
        _sender_var.reset(tokens[2])
        _session_var.reset(tokens[1])
        _bus_var.reset(tokens[0])
