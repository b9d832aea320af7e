"""The render manifest: what happened to every grain, and why (DESIGN.md §2, issue "manifest")."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Final

from .. import _core
from ..collect.faults import PluginFault
from ..errors import CtxEngineError
from .budget import Budget

__all__ = (
    "Extra",
    "GrainDecision",
    "LazyColumns",
    "LazyDecisions",
    "Origins",
    "RenderReport",
    "compacted_decision",
    "decisions",
    "flat_extra",
    "report_window",
    "shadowed_decision",
)

#: Names of the core's status and stage codes (``Plan.decisions``).
STATUS: Final = {
    _core.STATUS_KEPT: "kept",
    _core.STATUS_TRIMMED: "trimmed",
    _core.STATUS_CLEARED: "cleared",
    _core.STATUS_FOLDED: "folded",
    _core.STATUS_DROPPED: "dropped",
}
STAGE: Final = {
    _core.STAGE_NONE: None,
    _core.STAGE_GUARD: "guard",
    _core.STAGE_SOFT: "soft",
    _core.STAGE_HARD: "hard",
    _core.STAGE_FOLD: "fold",
    _core.STAGE_COMPACTION: "compaction",
}
#: The four decisions of the manifest; trimmed and cleared grains count as folded.
DECISION: Final = {"kept": "kept", "trimmed": "folded", "cleared": "folded", "folded": "folded"}


@dataclass(frozen=True, slots=True)
class GrainDecision:
    """One grain's fate in a render.

    ``grain`` is, for a ``shadowed`` decision, the grain that lost fusion (its content stays
    reachable: ``decision.grain.content``); None otherwise. It is not part of :meth:`to_dict`.
    """

    node_id: str
    origin: str
    window: str
    decision: str  # kept / folded / dropped / shadowed
    status: str  # kept / trimmed / cleared / folded / dropped / shadowed
    stage: str | None
    reason: str
    tokens_before: int
    tokens_after: int
    grain: Any = field(default=None, compare=False, repr=False)

    @property
    def tokens(self) -> int:
        """Tokens the grain occupies in the rendered context."""
        return self.tokens_after

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict (every field but ``grain``)."""
        return {name: getattr(self, name) for name in _DECISION_FIELDS}


_DECISION_FIELDS: Final = tuple(n for n in GrainDecision.__slots__ if n != "grain")


class LazyDecisions:
    """Decisions made on first read, in their place among a render's extra decisions: a
    compaction's row per summarized item (100,000 of them on a cold render of a long session,
    whose report is mostly never read). ``make`` builds them once; they are the same objects
    on every read."""

    __slots__ = ("_make", "_rows")

    def __init__(self, make: Callable[[], list[GrainDecision]]) -> None:
        self._make: Callable[[], list[GrainDecision]] | None = make
        self._rows: list[GrainDecision] | None = None

    def rows(self) -> list[GrainDecision]:
        """The decisions (the same list on every call: callers only read it)."""
        if self._rows is None:
            assert self._make is not None
            self._rows, self._make = self._make(), None
        return self._rows


#: An entry of a render's extra decisions: one decision, or a block of them made when read.
Extra = GrainDecision | LazyDecisions


def flat_extra(extra: Iterable[Extra]) -> list[GrainDecision]:
    """``extra`` with each :class:`LazyDecisions` block as its decisions, in place."""
    out: list[GrainDecision] = []
    for d in extra:
        if type(d) is LazyDecisions:
            out += d.rows()
        else:
            out.append(d)  # type: ignore[arg-type]
    return out


#: The report's own JSON data, copied by :meth:`RenderReport.copy`.
_DATA_FIELDS: Final = (
    "windows",
    "timings",
    "faults",
    "shadowed",
    "compactions",
    "cache_breakpoints",
    "hygiene",
    "recovery",
)


@dataclass(slots=True)
class RenderReport:
    """The manifest of one render. Iterating yields a :class:`GrainDecision` per input grain.

    Per-grain entries are built on first access from the core's columns, so a render whose
    report nobody reads does not pay for them.
    """

    provider: str
    model: str
    budget: int
    target: int
    tokens: int
    tokens_estimated: int
    fits: bool
    windows: list[dict[str, Any]]
    timings: dict[str, float]
    faults: list[dict[str, Any]] = field(default_factory=list)
    shadowed: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    cache_breakpoints: list[dict[str, Any]] = field(default_factory=list)
    hygiene: dict[str, Any] = field(default_factory=dict)
    #: The overflow-recovery steps of ``Session.run`` that led to this render.
    recovery: list[dict[str, Any]] = field(default_factory=list)
    #: The high-water mark, in the units of ``target``: the ladder cuts only past it
    #: (``CompactionConfig.render_high_water`` of the target, at most the budget less the
    #: reserve), so a render between ``target`` and this mark cut nothing (it grew at its end
    #: since the last compaction). None where it was not known (a report built elsewhere).
    high_water: int | None = None
    _columns: Any = None
    _origins: Mapping[str, str] = field(default_factory=dict)
    _window_names: Sequence[str] = ()
    _extra: list[Extra] = field(default_factory=list)
    _guarded: Mapping[str, int] = field(default_factory=dict)
    #: The tokens a guarded tool result (:attr:`_guarded`) held before the guard cut it, from
    #: its node id and the tokens the plan gave it cut (counted when the report is read).
    _before_guard: Callable[[str, int], int] | None = None
    #: History nodes the plan kept but hygiene left out of the payload -> why.
    _unsent: Mapping[str, str] = field(default_factory=dict)
    #: History nodes sent with the content a tree handler gave their own grain in place ->
    #: what their decision adds to its reason when they are sent (kept or folded).
    _edited: Mapping[str, str] = field(default_factory=dict)
    _grains: list[GrainDecision] | None = None

    @property
    def grains(self) -> list[GrainDecision]:
        """Every input grain's decision (including shadowed and compacted ones)."""
        if self._grains is None:
            rows = self._build()
            extra = flat_extra(self._extra)
            at = self._planned_extra([g.node_id for g in rows], extra)
            for i, g in at.items():
                rows[i] = g
            if self._edited:
                rows = [self._edit_noted(g) for g in rows]
            used = {id(g) for g in at.values()}
            self._grains = rows + [g for g in extra if id(g) not in used]
        return self._grains

    def _edit_noted(self, g: GrainDecision) -> GrainDecision:
        """``g``, the one decision of its node, with what a tree handler's in-place edit of
        the item's own grain changed in its reason, if the item was sent with that content
        (kept or folded: an item left out sent none of it)."""
        note = self._edited.get(g.node_id)
        if note is None or g.decision not in ("kept", "folded"):
            return g
        return dataclasses.replace(g, reason=f"{g.reason}; {note}")

    def _planned_extra(
        self, ids: Sequence[str], extras: Sequence[GrainDecision]
    ) -> dict[int, GrainDecision]:
        """Row → the extra decision that replaces the plan's own for that node: the summary
        fitted to a render has one decision, the one that says what was sent (a shadowed
        grain's decision stands beside the plan's own for the grain that shadowed it)."""
        extra = {g.node_id: g for g in extras if g.stage == "compaction"}
        if not extra:
            return {}
        return {i: extra[n] for i, n in enumerate(ids) if n in extra}

    def _build(self) -> list[GrainDecision]:
        if self._columns is None:
            return []
        ids, status, stage, reason, before, after, window = self._columns
        names = self._window_names
        origins = self._origins
        out = []
        unsent = self._unsent
        for i, node_id in enumerate(ids):
            s = STATUS[status[i]]
            if unsent and node_id in unsent:
                out.append(self._unsent_decision(node_id, names[window[i]], before[i]))
                continue
            if s == "kept" and node_id in self._guarded:
                out.append(self._guard_decision(node_id, names[window[i]], before[i]))
                continue
            out.append(
                GrainDecision(
                    node_id,
                    origins.get(node_id, ""),
                    names[window[i]] if window[i] < len(names) else str(window[i]),
                    DECISION.get(s, "dropped"),
                    s,
                    STAGE[stage[i]],
                    reason[i],
                    before[i],
                    after[i],
                )
            )
        return out

    def columns(self) -> dict[str, list[Any]]:
        """The same decisions as :attr:`grains`, one list per field (``node_id``, ``origin``,
        ``window``, ``decision``, ``status``, ``stage``, ``reason``, ``tokens_before``,
        ``tokens_after``), built straight from the core's columns when :attr:`grains` was not
        read: what a snapshot stores, without one object per grain."""
        if self._grains is not None or self._columns is None:
            rows = self.grains
            return {name: [getattr(g, name) for g in rows] for name in _DECISION_FIELDS}
        ids, status, stage, reason, before, after, window = self._columns
        ids, reason, before, after = list(ids), list(reason), list(before), list(after)
        names, origins = self._window_names, self._origins
        n_names = len(names)
        statuses = [STATUS[x] for x in status]
        out: dict[str, list[Any]] = {
            "node_id": ids,
            "origin": [origins.get(i, "") for i in ids],
            "window": [names[w] if w < n_names else str(w) for w in window],
            "decision": [DECISION.get(x, "dropped") for x in statuses],
            "status": statuses,
            "stage": [STAGE[x] for x in stage],
            "reason": reason,
            "tokens_before": before,
            "tokens_after": after,
        }
        if self._guarded or self._unsent:
            for i, node_id in enumerate(ids):
                if node_id in self._unsent:
                    g = self._unsent_decision(node_id, out["window"][i], before[i])
                elif statuses[i] == "kept" and node_id in self._guarded:
                    g = self._guard_decision(node_id, out["window"][i], before[i])
                else:
                    continue
                for name in _DECISION_FIELDS:
                    out[name][i] = getattr(g, name)
        extras = flat_extra(self._extra)
        at = self._planned_extra(ids, extras)
        for i, g in at.items():
            for name in _DECISION_FIELDS:
                out[name][i] = getattr(g, name)
        if self._edited:
            decision, reason = out["decision"], out["reason"]
            for i, node_id in enumerate(ids):
                note = self._edited.get(node_id)
                if note is not None and decision[i] in ("kept", "folded"):
                    reason[i] = f"{reason[i]}; {note}"
        used = {id(g) for g in at.values()}
        for g in extras:
            if id(g) not in used:
                for name in _DECISION_FIELDS:
                    out[name].append(getattr(g, name))
        return out

    def _guard_decision(self, node_id: str, window: str, tokens: int) -> GrainDecision:
        chars = self._guarded[node_id]
        reason = f"tool result of {chars:,} chars cut to head + tail by the window guard"
        before = tokens if self._before_guard is None else self._before_guard(node_id, tokens)
        return GrainDecision(
            node_id, "transcript", window, "folded", "trimmed", "guard", reason, before, tokens
        )

    def _unsent_decision(self, node_id: str, window: str, tokens: int) -> GrainDecision:
        """The plan kept the item, but hygiene left it out of the payload (an orphan or
        duplicate tool result, an aborted turn's calls...): it is dropped and takes no room."""
        reason = self._unsent[node_id]
        origin = self._origins.get(node_id, "")
        return GrainDecision(
            node_id, origin, window, "dropped", "dropped", "hygiene", reason, tokens, 0
        )

    def copy(self) -> RenderReport:
        """A copy whose lists and dicts are its own (the per-grain decisions are frozen and the
        plan's columns read-only): changing it never changes this report."""
        data = {name: copy.deepcopy(getattr(self, name)) for name in _DATA_FIELDS}
        grains = None if self._grains is None else list(self._grains)
        return dataclasses.replace(self, **data, _extra=list(self._extra), _grains=grains)

    def __iter__(self) -> Iterator[GrainDecision]:
        return iter(self.grains)

    def __len__(self) -> int:
        return len(self.grains)

    def get(self, node_id: str) -> GrainDecision | None:
        """The decision for ``node_id``, if it was an input of this render."""
        return next((g for g in self.grains if g.node_id == node_id), None)

    def counts(self) -> dict[str, int]:
        """Number of grains per decision."""
        out: dict[str, int] = {}
        for g in self.grains:
            out[g.decision] = out.get(g.decision, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """The whole manifest as JSON-serializable data."""
        return {
            "provider": self.provider,
            "model": self.model,
            "budget": self.budget,
            "target": self.target,
            "high_water": self.high_water,
            "tokens": self.tokens,
            "tokens_estimated": self.tokens_estimated,
            "fits": self.fits,
            "windows": self.windows,
            "timings": self.timings,
            "counts": self.counts(),
            "grains": [g.to_dict() for g in self.grains],
            "faults": self.faults,
            "shadowed": self.shadowed,
            "compactions": self.compactions,
            "cache_breakpoints": self.cache_breakpoints,
            "hygiene": self.hygiene,
        }

    def to_json(self, **kwargs: Any) -> str:
        """The manifest as a JSON string."""
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)


def report_window(budget: Budget, grain: Any) -> str:
    """The window to report ``grain`` under; an invalid explicit window (a plugin fault that
    admission reports) falls back to the prefix's, so reporting never breaks the turn."""
    node_id = grain.node_id if isinstance(grain.node_id, str) else ""
    window = grain.window if isinstance(grain.window, str) else None
    try:
        return budget.window_of(node_id, window)
    except CtxEngineError:
        return budget.window_of(node_id)


def rejected_decisions(budget: Budget, faults: Iterable[PluginFault]) -> list[GrainDecision]:
    """A ``dropped`` decision for every grain a plugin fault rejected (invalid grains, and
    grains a plugin had no right to write), so nothing leaves the context without a trace in
    the report."""
    out: list[GrainDecision] = []
    for fault in faults:
        if fault.node_id is not None and fault.kind in ("invalid", "denied"):
            window = budget.window_of(fault.node_id)
            decision = ("dropped", "dropped", "admission", fault.message, 0, 0)
            out.append(GrainDecision(fault.node_id, fault.plugin, window, *decision))
    return out


def shadowed_decision(loser: Any, winner: Any, budget: Budget) -> GrainDecision:
    """``loser`` lost fusion to ``winner`` (a more important grain with its node id)."""
    window = report_window(budget, loser)
    if winner.priority == loser.priority:
        why = f"shadowed by {winner.origin} (same priority {winner.priority}, ranked first)"
    else:
        why = f"shadowed by {winner.origin} (priority {winner.priority} < {loser.priority})"
    return GrainDecision(
        loser.node_id, loser.origin, window, "shadowed", "shadowed", "fuse", why, 0, 0, loser
    )


def compacted_decision(grain: Any, budget: Budget) -> GrainDecision:
    """A grain for a history item an earlier compaction summarized."""
    return GrainDecision(
        grain.node_id,
        grain.origin,
        report_window(budget, grain),
        "dropped",
        "dropped",
        "compaction",
        "its history item was summarized into mem.summary by an earlier compaction",
        0,
        0,
    )


def decisions(
    node_ids: Sequence[str],
    origin: str,
    windows: Iterable[str],
    status: str,
    stage: str,
    reasons: Iterable[str],
    tokens_before: Iterable[int],
) -> list[GrainDecision]:
    """``[GrainDecision(n, origin, w, DECISION[status], status, stage, r, t, 0) ...]`` for the
    items a compaction summarized (one per item of a long history, so written as one pass
    per field at C level: the frozen class's own ``__init__`` sets each field through
    ``object.__setattr__`` from Python, twice as slow on a 100,000-message session)."""
    n = len(node_ids)
    out = list(map(object.__new__, repeat(GrainDecision, n)))
    for name, values in (
        ("node_id", node_ids),
        ("origin", repeat(origin, n)),
        ("window", windows),
        ("decision", repeat(DECISION.get(status, "dropped"), n)),
        ("status", repeat(status, n)),
        ("stage", repeat(stage, n)),
        ("reason", reasons),
        ("tokens_before", tokens_before),
        ("tokens_after", repeat(0, n)),
        ("grain", repeat(None, n)),
    ):
        deque(map(_SLOT[name], out, values), maxlen=0)
    return out


#: The setter of each field's slot (bypassing the frozen ``__setattr__``, as ``__init__`` does).
_SLOT: Final = {name: GrainDecision.__dict__[name].__set__ for name in GrainDecision.__slots__}


class LazyColumns:
    """Fetches the plan's per-grain columns only when the report is read."""

    __slots__ = ("_plan",)

    def __init__(self, plan: Any) -> None:
        self._plan = plan

    def __iter__(self) -> Any:
        return iter(self._plan.decisions())


class Origins(dict[str, str]):
    """Origins of context grains; anything else came from the transcript."""

    def __missing__(self, key: str) -> str:
        return "transcript"

    def get(self, key: str, default: str | None = None) -> str:  # type: ignore[override]
        return self[key]
