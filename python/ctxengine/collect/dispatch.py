"""Runs plugin hooks for one session: isolation, timeouts, deterministic order, quarantine.

The engine holds one :class:`SessionDispatcher` per session and calls::

    outcome = await dispatcher.fire(UserMessage(sid, turn, text))   # each lifecycle moment
    outcome = await dispatcher.collect(scene)                       # once per turn
    outcome = await dispatcher.fire(BeforeRender(tree))             # tree: list of grains

``outcome.grains`` join the turn; ``outcome.faults`` go into the turn's report. A plugin that
raises (any exception, ``SystemExit``, ``KeyboardInterrupt`` and ``CancelledError`` included),
hangs past its timeout or returns something that is not valid grains becomes a
:class:`PluginFault` and is skipped; it never breaks the dispatch. A grain in an engine
namespace (:mod:`.namespaces`) from a plugin without the dangerous consent is refused the same
way (a ``denied`` fault naming it). What a tree handler leaves in the tree is checked the same
way, and for shadowing another owner's protected grain (:meth:`SessionDispatcher._check_tree`,
:meth:`SessionDispatcher._check_shadowing`). Plugin code runs off the
render's loop (:mod:`.runner`), so a hung or loop-blocking plugin is abandoned, not awaited. A
plugin is quarantined for the rest of the session (reported once) after ``max_failures``
consecutive failures, after ``max_failures`` timeouts in the session (successes in between do
not reset them), or at once when it blocked its event loop.

Order: grains and faults come out sorted by plugin priority, then registration order, then
emission order, whatever order the concurrent calls finished in. Handlers of tree events
(``BeforeRender``, ``OverBudget``) run one at a time in that order because they mutate the tree.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
from collections.abc import Callable, Collection, MutableSequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import GrainError, PluginError
from ..grain import ContextGrain
from .events import (
    TREE_EVENTS,
    BeforeRender,
    CustomEvent,
    EventBus,
    OverBudget,
    ToolResult,
    bound,
    hook_for,
)
from .faults import FaultKind, PluginFault, PluginWarning, call_plugin, describe_exc
from .namespaces import emitter_of, engine_namespace, own_tool_result_id, shadowing_refusals
from .protocol import subscriptions_of
from .scene import ContextScene, Copies

if TYPE_CHECKING:
    from .registry import PluginEntry, Registry

__all__ = (
    "Outcome",
    "PluginFault",
    "PluginWarning",
    "SessionDispatcher",
    "TreeRemoval",
)

logger = logging.getLogger("ctxengine.plugins")

_Key = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TreeRemoval:
    """A grain a tree handler took out of ``event.tree`` (or renamed, or changed the content
    of), as it was before the handler ran.

    Attributes:
        plugin: The handler's plugin.
        hook: ``on_before_render`` or ``on_over_budget``.
        node_id: The grain's node id.
        origin: The grain's origin.
        window: The grain's explicit window, or None.
    """

    plugin: str
    hook: str
    node_id: str
    origin: str
    window: str | None


@dataclass(slots=True)
class Outcome:
    """Result of one dispatch: grains that join the turn, and faults for the report.

    For tree events the returned grains have already been appended to ``event.tree``;
    ``grains`` lists them for reporting only, ``removed`` the grains the handlers took out
    of the tree (the render reports each one that leaves the render), ``renamed`` the
    grains they gave another node id, each as it was before (its node id the old one), and
    ``changed`` the grains of another owner whose content they changed in place (kept in the
    tree under their node id; a consented handler's: the dispatcher undoes the others').
    """

    grains: list[ContextGrain] = field(default_factory=list)
    faults: list[PluginFault] = field(default_factory=list)
    removed: list[TreeRemoval] = field(default_factory=list)
    renamed: list[TreeRemoval] = field(default_factory=list)
    changed: list[TreeRemoval] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether no fault of severity ``error`` was recorded."""
        return all(f.severity != "error" for f in self.faults)


@dataclass(slots=True)
class _Result:
    key: _Key
    grains: list[ContextGrain] = field(default_factory=list)
    faults: list[PluginFault] = field(default_factory=list)
    removed: list[TreeRemoval] = field(default_factory=list)
    renamed: list[TreeRemoval] = field(default_factory=list)
    changed: list[TreeRemoval] = field(default_factory=list)
    hook: str = ""


def _safe_id(value: object) -> str:
    return value if isinstance(value, str) else f"<{type(value).__name__} node_id>"


def safe_copy(value: Any) -> Any:
    """A deep copy of ``value``; a shallow one when it cannot be deep-copied (not copyable, or
    nested past the recursion limit)."""
    try:
        return copy.deepcopy(value)
    except Exception:  # not copyable, or nested past the recursion limit
        return copy.copy(value)


def _fields(grain: ContextGrain) -> tuple[Any, ...]:
    meta = safe_copy(grain.meta)
    return (
        grain.node_id,
        grain.origin,
        safe_copy(grain.content),
        grain.priority,
        grain.lifespan,
        grain.window,
        grain.protected,
        meta,
    )


def _with_tree(event: Any, tree: Any) -> Any:
    if isinstance(event, (BeforeRender, OverBudget)):
        return dataclasses.replace(event, tree=tree)
    return event


def _restore(grain: ContextGrain, saved: tuple[Any, ...]) -> None:
    names = ("node_id", "origin", "content", "priority", "lifespan", "window", "protected", "meta")
    for name, value in zip(names, saved, strict=True):
        setattr(grain, name, value)


class SessionDispatcher:
    """Dispatches ``collect`` and lifecycle events to the plugins of a registry, for one session.

    Args:
        registry: The engine's plugin registry (read at every dispatch, so plugins registered,
            enabled or disabled at runtime take effect at the next one).
        session_id: Session this dispatcher serves.
        timeout: Seconds each plugin call may take (``None``: no limit).
        max_failures: Consecutive failures after which a plugin is quarantined.
        allow_dangerous: The engine's consent for privileged abilities: bool or plugin names;
            ``None`` (default) uses the registry's ``allow_dangerous`` (itself ``False`` by
            default), so one setting on the engine governs registration and runtime alike.

    Raises:
        PluginError: ``timeout`` is not positive or ``max_failures`` < 1.
    """

    def __init__(
        self,
        registry: Registry,
        session_id: str,
        *,
        timeout: float | None = 2.0,
        max_failures: int = 3,
        allow_dangerous: bool | Collection[str] | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise PluginError(
                f"timeout must be a positive number of seconds or None; got {timeout!r}"
            )
        if max_failures < 1:
            raise PluginError(f"max_failures must be >= 1; got {max_failures!r}")
        self.registry = registry
        self.session_id = session_id
        self.timeout = timeout
        self.max_failures = max_failures
        self.allow_dangerous = allow_dangerous
        self.bus = EventBus(self._run_subscriber)
        self._failures: dict[str, int] = {}
        self._strikes: dict[str, int] = {}  # timeouts in this session; successes do not reset
        self._quarantined: set[str] = set()
        self._wired: set[str] = set()
        self._bus_results: list[_Result] = []
        self._seq: dict[str | None, int] = {}
        self._copies: dict[str, Copies] = {}  # each plugin's copies of transcript messages

    # -- state ------------------------------------------------------------------------------

    @property
    def quarantined(self) -> frozenset[str]:
        """Plugins quarantined in this session."""
        return frozenset(self._quarantined)

    def release(self, name: str) -> None:
        """Lift the quarantine of ``name`` and reset its failure count."""
        self._quarantined.discard(name)
        self._failures.pop(name, None)
        self._strikes.pop(name, None)

    def privileged(self, name: str) -> bool:
        """Whether ``name`` may use privileged abilities in this session."""
        entry = self.registry.lookup(name)
        if entry is None or not entry.dangerous:
            return False
        consent = self.allow_dangerous
        if consent is None:
            return self.registry.consents(name)
        return consent if isinstance(consent, bool) else name in consent

    def _active(self, hook: str | None = None) -> list[PluginEntry]:
        """The enabled plugins (implementing ``hook``, when given). A plugin whose ``enabled``
        raised, or whose hook it registered with is no longer callable, is left out of this
        call with a fault (in the next outcome), never silently."""
        out = []
        for e in self.registry.entries():
            if e.name in self._quarantined:
                continue
            if e.state != "enabled":
                error = e.take_flag_error()
                if error is not None:
                    why = f"reading its enabled flag raised {error}; skipped"
                    self._late_fault(e, hook or "enabled", "raised", why)
                continue
            if hook is None:
                out.append(e)
                continue
            try:
                fn = getattr(e.provider, hook, None)
            except Exception as exc:
                self._late_fault(e, hook, "raised", f"reading {hook} raised {describe_exc(exc)}")
                continue
            if callable(fn):
                out.append(e)
            elif hook in e.hooks:  # it had the hook when registered
                why = f"its {hook} is now {type(fn).__name__}, not callable; skipped"
                self._late_fault(e, hook, "invalid", why)
        return out

    def _late_fault(self, entry: PluginEntry, hook: str, kind: FaultKind, message: str) -> None:
        """A fault found before any call, reported with the next outcome's; not counted
        towards quarantine (every lookup of a turn meets it: a flag that recovers is used
        again)."""
        slot = _Result((entry.priority, entry.index, 0))
        self._fail(entry.name, hook, kind, message, slot.faults, count=False)
        self._bus_results.append(slot)

    def _wire(self) -> None:
        for entry in self._active():
            if entry.name in self._wired or self.bus.closed:
                continue
            self._wired.add(entry.name)
            for event, fn in subscriptions_of(entry.provider).items():
                self.bus.subscribe(event, fn, owner=entry.name)

    # -- dispatch ---------------------------------------------------------------------------

    async def collect(self, scene: ContextScene) -> Outcome:
        """Call ``collect`` on every enabled plugin concurrently; return grains and faults.

        Each plugin receives its own view of ``scene`` (privileged only if dangerous and
        consented).
        """
        self._wire()
        entries = self._active("collect")
        if not entries:  # no task group to open for nobody (most of a small warm render's rest)
            return self._merge([])
        slots = [_Result((e.priority, e.index, 0)) for e in entries]
        async with anyio.create_task_group() as tg:
            for entry, slot in zip(entries, slots, strict=True):
                copies = self._copies.setdefault(entry.name, {})
                privileged = self.privileged(entry.name)
                view = scene.for_plugin(entry.name, privileged=privileged, copies=copies)
                tg.start_soon(self._run_into, slot, entry, "collect", entry.provider.collect, view)
        return self._merge(slots)

    async def fire(self, event: object) -> Outcome:
        """Deliver a lifecycle event to every enabled plugin that handles it.

        Raises:
            PluginError: ``event`` is not a lifecycle event.
        """
        hook = hook_for(event)
        self._wire()
        entries = self._active(hook)
        if isinstance(event, TREE_EVENTS):
            slots = await self._fire_tree(event, hook, entries)
        else:
            slots = [_Result((e.priority, e.index, 0)) for e in entries]
            async with anyio.create_task_group() as tg:
                for entry, slot in zip(entries, slots, strict=True):
                    tg.start_soon(
                        self._run_into, slot, entry, hook, getattr(entry.provider, hook), event
                    )
        outcome = self._merge(slots)
        if hook == "on_session_close":
            self.bus.close()
        return outcome

    def _merge(self, slots: list[_Result]) -> Outcome:
        results = slots + self._bus_results
        self._bus_results = []
        results.sort(key=lambda r: r.key)
        outcome = Outcome()
        for result in results:
            outcome.grains.extend(result.grains)
            outcome.faults.extend(result.faults)
            outcome.removed.extend(result.removed)
            outcome.renamed.extend(result.renamed)
            outcome.changed.extend(result.changed)
        return outcome

    async def _run_into(
        self, slot: _Result, entry: PluginEntry, hook: str, fn: Any, arg: Any
    ) -> None:
        grains = await self._invoke(entry, hook, fn, arg, slot.faults)
        slot.grains.extend(grains or ())

    async def _invoke(
        self, entry: PluginEntry, hook: str, fn: Any, arg: Any, faults: list[PluginFault]
    ) -> list[ContextGrain] | None:
        """Run one hook with isolation; ``None`` means it failed (faults appended)."""
        runner = entry.call_runner()
        if runner.busy:  # an abandoned call still holds its thread: do not pile up more
            message = "skipped: an earlier call that timed out is still running"
            self._fail(entry.name, hook, "timeout", message, faults)
            return None
        with bound(self.bus, self.session_id, entry.name):
            call = await call_plugin(fn, arg, self.timeout, runner)
        if call.kind:
            self._fail(entry.name, hook, call.kind, call.message, faults)
            return None
        grains, ok = self._accept(entry.name, hook, call.value, faults, event=arg)
        if grains is None:
            return None
        if ok:
            self._failures[entry.name] = 0
        return grains

    def _accept(
        self, name: str, hook: str, result: Any, faults: list[PluginFault], *, event: Any = None
    ) -> tuple[list[ContextGrain] | None, bool]:
        """The grains of a hook's result, and whether all of it was valid. Invalid grains, and
        grains in an engine namespace from a plugin without the consent, are dropped, each with
        a fault naming it (one failure for the call)."""
        if result is None:
            return [], True
        if not isinstance(result, (list, tuple)):
            self._fail(
                name,
                hook,
                "invalid",
                f"returned {type(result).__name__}; expected a list of ContextGrain or None",
                faults,
            )
            return None, False
        for i, item in enumerate(result):
            if not isinstance(item, ContextGrain):
                self._fail(
                    name,
                    hook,
                    "invalid",
                    f"returned a list whose item {i} is {type(item).__name__}, not ContextGrain",
                    faults,
                )
                return None, False
        valid: list[ContextGrain] = []
        bad = 0
        for i, grain in enumerate(result):
            if type(grain) is not ContextGrain:
                try:  # a subclass: its fields as a plain grain (its own properties are not run)
                    grain = _plain(grain)
                except Exception as exc:
                    bad += 1
                    node_id = _safe_id(getattr(grain, "node_id", "?"))
                    message = (
                        f"grain {i} ({node_id}), a {type(grain).__name__}, could not be read: "
                        f"{exc!r}; dropped"
                    )
                    self._fail(name, hook, "invalid", message, faults, count=bad == 1)
                    continue
            try:
                grain.check()
            except GrainError as exc:
                bad += 1
                node_id = _safe_id(grain.node_id)
                message = f"grain {i} ({node_id}) is invalid, dropped: {exc}"
                self._fail(name, hook, "invalid", message, faults, node_id=node_id, count=bad == 1)
                continue
            refusal = self._trespass(name, grain.node_id, event)
            if refusal:
                bad += 1
                self._fail(
                    name, hook, "denied", refusal, faults, node_id=grain.node_id, count=bad == 1
                )
                continue
            valid.append(self._stamp(name, hook, grain, faults, copy_=True))
        return valid, not bad

    def _trespass(self, name: str, node_id: str, event: Any = None) -> str:
        """Why plugin ``name`` may not write ``node_id`` (an engine namespace), or ``""``.

        Without the consent only one write there is allowed: an ``on_tool_result`` handler
        returning the replacement of that very result (a compressed or summarized version)."""
        where = engine_namespace(node_id)
        if where is None or self.privileged(name):
            return ""
        if isinstance(event, ToolResult) and node_id == own_tool_result_id(event.call_id):
            return ""
        return (
            f"plugin {name!r}: grain {node_id!r} is in the engine's namespace {where}; writing "
            "there needs `dangerous: true` and the engine's consent "
            "(ContextEngine(allow_dangerous=...)); refused"
        )

    def _stamp(
        self, name: str, hook: str, grain: ContextGrain, faults: list[PluginFault], *, copy_: bool
    ) -> ContextGrain:
        """Fill or correct ``origin`` (provenance must never lie); copy to isolate sessions."""
        if copy_:
            grain = dataclasses.replace(grain, meta=safe_copy(grain.meta))
        claimed = grain.origin
        if not claimed:
            grain.origin = name
        elif claimed != name and claimed in self.registry:
            grain.origin = name
            grain.meta["claimed_origin"] = claimed
            fault = PluginFault(
                name,
                hook,
                "provenance",
                f"grain {grain.node_id!r} claimed origin {claimed!r}; corrected to {name!r}",
                "warning",
            )
            faults.append(fault)
            logger.warning("plugin %s %s: %s", name, hook, fault.message)
        elif claimed != name:  # always set: who emitted a grain must not be forgeable
            grain.meta["emitted_by"] = name
        return grain

    def _fail(
        self,
        name: str,
        hook: str,
        kind: FaultKind,
        message: str,
        faults: list[PluginFault],
        *,
        node_id: str | None = None,
        count: bool = True,
    ) -> None:
        faults.append(PluginFault(name, hook, kind, message, node_id=node_id))
        logger.warning("plugin %s %s failed (%s): %s", name, hook, kind, message)
        if not count:
            return
        failures = self._failures.get(name, 0) + 1
        self._failures[name] = failures
        strikes = self._strikes.get(name, 0) + (kind in ("timeout", "blocked"))
        self._strikes[name] = strikes
        if name in self._quarantined:
            return
        if kind == "blocked":
            why = "it blocked its event loop"
        elif strikes >= self.max_failures:
            why = f"{strikes} timeouts"
        elif failures >= self.max_failures:
            why = f"{failures} consecutive failures"
        else:
            return
        self._quarantined.add(name)
        text = f"quarantined for session {self.session_id!r}: {why} (last: {hook} {kind})"
        faults.append(PluginFault(name, hook, "quarantined", text))
        logger.warning("plugin %s %s", name, text)

    # -- tree events ------------------------------------------------------------------------

    async def _fire_tree(self, event: Any, hook: str, entries: list[PluginEntry]) -> list[_Result]:
        tree = event.tree
        guard = isinstance(tree, MutableSequence)
        slots: list[_Result] = []
        for entry in entries:
            slot = _Result((entry.priority, entry.index, 0))
            slots.append(slot)
            before = list(tree) if guard else []
            saved = {id(g): _fields(g) for g in before if isinstance(g, ContextGrain)}
            # Each handler edits its own copy of the list: one abandoned after a timeout cannot
            # reach the tree the render goes on with.
            work = list(tree) if guard else tree
            grains = await self._invoke(
                entry, hook, getattr(entry.provider, hook), _with_tree(event, work), slot.faults
            )
            if not guard:
                slot.grains.extend(grains or ())
                continue
            problem = "" if grains is not None else "failed"
            if not problem:
                try:
                    problem = self._check_tree(entry.name, hook, work, before, saved, slot.faults)
                    if not problem:
                        problem = self._check_shadowing(
                            entry.name, hook, work, grains or [], saved, slot.faults
                        )
                except Exception as exc:  # e.g. a grain's meta replaced by a non-dict
                    problem = f"invalid: left the tree in a state it cannot be checked in: {exc!r}"
            if problem:
                for g in before:
                    if id(g) in saved:
                        _restore(g, saved[id(g)])
                if problem != "failed":
                    self._fail(entry.name, hook, *self._split(problem), slot.faults)
                continue
            kept = {id(g) for g in work}
            for g in before:
                fields = saved.get(id(g))
                if fields is None:
                    continue
                gone = id(g) not in kept
                if gone or g.node_id != fields[0]:
                    node_id, origin, *_, window, _protected, _meta = fields
                    edit = TreeRemoval(entry.name, hook, node_id, origin, window)
                    (slot.removed if gone else slot.renamed).append(edit)
                elif fields[1] != entry.name and g.content != fields[2]:
                    node_id, origin, *_, window, _protected, _meta = fields
                    slot.changed.append(TreeRemoval(entry.name, hook, node_id, origin, window))
            tree[:] = work
            tree.extend(grains or ())
            slot.grains.extend(grains or ())
        if guard:  # grains from bus subscribers join this tree too
            for result in self._bus_results:
                result.grains[:] = self._refuse_shadows(tree, result.grains, result)
                tree.extend(result.grains)
        return slots

    def _refuse_shadows(
        self, tree: MutableSequence[Any], grains: list[ContextGrain], result: _Result
    ) -> list[ContextGrain]:
        """``grains`` (a bus subscriber's, joining ``tree``) without those that would shadow
        another owner's protected grain in it, a ``denied`` fault each."""
        present = [g for g in tree if isinstance(g, ContextGrain)]
        refused = self._shadows(present + grains)
        is_plugin = self.registry.__contains__
        return self._deny_joining(
            grains,
            refused,
            len(present),
            lambda g: emitter_of(g, is_plugin) or str(g.origin),
            result.hook,
            result.faults,
        )

    def _deny_joining(
        self,
        grains: list[ContextGrain],
        refused: dict[int, str],
        offset: int,
        who: Callable[[ContextGrain], str],
        hook: str,
        faults: list[PluginFault],
    ) -> list[ContextGrain]:
        """``grains`` (joining a tree at index ``offset`` of :meth:`_shadows`' list) without
        the ``refused`` ones, a ``denied`` fault for each (not counted toward quarantine)."""
        kept = []
        for i, grain in enumerate(grains):
            why = refused.get(offset + i)
            if why is None:
                kept.append(grain)
            else:
                self._fail(
                    who(grain), hook, "denied", why, faults, node_id=grain.node_id, count=False
                )
        return kept

    def _shadows(self, grains: list[ContextGrain]) -> dict[int, str]:
        """Indexes of ``grains`` that would shadow another owner's protected grain, with why."""
        registry = self.registry
        return shadowing_refusals(
            grains, is_plugin=registry.__contains__, privileged=self.privileged, rank=registry.rank
        )

    def _check_shadowing(
        self,
        name: str,
        hook: str,
        tree: MutableSequence[Any],
        returned: list[ContextGrain],
        saved: dict[int, tuple[Any, ...]],
        faults: list[PluginFault],
    ) -> str:
        """Refuse what a tree handler did that would shadow another owner's protected grain:
        a grain it put into the tree or changed makes it return ``"denied: ..."`` (all of its
        edits are undone); a grain it returned is taken out of ``returned``, a ``denied`` fault
        naming it. Like collected grains, a shadowing refusal does not count toward quarantine.
        """
        present = [g for g in tree if isinstance(g, ContextGrain)]
        refused = self._shadows(present + returned)
        if not refused:
            return ""
        for i in sorted(refused):
            if i >= len(present):
                continue
            g = present[i]
            if id(g) not in saved:
                return f"denied: put grain {g.node_id!r} into the tree: {refused[i]}"
            if _fields(g) != saved[id(g)]:
                return f"denied: changed grain {saved[id(g)][0]!r}: {refused[i]}"
        returned[:] = self._deny_joining(
            returned, refused, len(present), lambda g: name, hook, faults
        )
        return ""

    @staticmethod
    def _split(problem: str) -> tuple[FaultKind, str]:
        kind, _, message = problem.partition(":")
        return kind, message.strip()  # type: ignore[return-value]

    def _check_tree(
        self,
        name: str,
        hook: str,
        tree: MutableSequence[Any],
        before: list[Any],
        saved: dict[int, tuple[Any, ...]],
        faults: list[PluginFault],
    ) -> str:
        """Validate a handler's edits; returns ``"kind: message"`` when they must be undone."""
        privileged = self.privileged(name)
        current = {id(g) for g in tree}
        for g in before:
            if not isinstance(g, ContextGrain):
                continue
            if id(g) in current and _fields(g) != saved[id(g)]:
                try:
                    g.check()
                except GrainError as exc:
                    node = _safe_id(g.node_id)
                    return f"invalid: changed grain {node} into an invalid one: {exc}"
            if g.origin == saved[id(g)][1] == name:
                # its own grain: a new node id must be one the plugin may write
                if id(g) in current and g.node_id != saved[id(g)][0]:
                    refusal = self._trespass(name, g.node_id)
                    if refusal:
                        return f"denied: renamed its grain {saved[id(g)][0]!r}: {refusal}"
                continue
            if id(g) not in current:
                change = "removed"
            elif _fields(g) != saved[id(g)]:
                change = "changed"
            else:
                continue
            if not privileged:
                return (
                    f"denied: {change} grain {g.node_id!r} of plugin {saved[id(g)][1]!r}; "
                    "changing or removing another plugin's grains needs dangerous: true and "
                    "the engine's consent"
                )
            if change == "changed":
                g.meta.setdefault("modified_by", [])
                if name not in g.meta["modified_by"]:
                    g.meta["modified_by"].append(name)
        known = {id(g) for g in before}
        for i, g in enumerate(tree):
            if id(g) in known:
                continue
            if not isinstance(g, ContextGrain):
                kind = type(g).__name__
                return f"invalid: put {kind} into the tree at index {i}, not a ContextGrain"
            try:
                g.check()
            except GrainError as exc:
                return f"invalid: put an invalid grain into the tree at index {i}: {exc}"
            refusal = self._trespass(name, g.node_id)
            if refusal:
                return f"denied: {refusal}"
            self._stamp(name, hook, g, faults, copy_=False)
        return ""

    # -- bus ----------------------------------------------------------------------------------

    async def _run_subscriber(
        self, owner: str | None, hook: str, handler: Any, event: CustomEvent
    ) -> None:
        if owner is None:
            result = handler(event)
            if inspect.isawaitable(result):
                await result
            return
        entry = self.registry.lookup(owner)
        if entry is None or entry.state != "enabled" or owner in self._quarantined:
            return
        sender = self.registry.lookup(event.sender or "")
        seq = self._seq.get(event.sender, 0)
        self._seq[event.sender] = seq + 1
        key = (
            entry.priority,
            entry.index,
            1,
            *((sender.priority, sender.index) if sender else (-1, -1)),
            seq,
        )
        result = _Result(key, hook=hook)
        grains = await self._invoke(entry, hook, handler, event, result.faults)
        result.grains.extend(grains or ())
        self._bus_results.append(result)


def _plain(grain: ContextGrain) -> ContextGrain:
    """A :class:`ContextGrain` subclass instance as a plain grain with the same fields: a grain
    is a value, and a subclass's own properties or methods (a ``text`` that raises) must not
    run inside the engine, where they would break the turn."""
    values = {
        f.name: object.__getattribute__(grain, f.name) for f in dataclasses.fields(ContextGrain)
    }
    plain: ContextGrain = object.__new__(ContextGrain)
    for key, value in values.items():
        object.__setattr__(plain, key, value)
    return plain
