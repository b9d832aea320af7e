"""The assemble phase of a render: fuse → overrides → guard → hooks → sync → plan → compact.

The heavy steps (counting, scoring, allocation, the trim ladder, ordering) run in the Rust
:class:`~ctxengine._core.Assembly` with the GIL released; this module moves only what changed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from .. import _core
from ..collect.dispatch import safe_copy
from ..collect.events import BeforeRender, OverBudget
from ..collect.faults import PluginFault
from ..compaction.facts import message_scope
from ..errors import BudgetError, CtxEngineError
from ..grain import ContextGrain
from .compact import MAX_COMPACTIONS, SUMMARY_ID, TAIL_LEFT, compact, unsummarized
from .core import fuse as core_fuse
from .guard import split_large
from .prune import apply_prune_options
from .report import (
    Extra,
    GrainDecision,
    compacted_decision,
    rejected_decisions,
    report_window,
    shadowed_decision,
)
from .sync import (
    CONTEXT_OVERHEAD,
    HISTORY_PRIORITY,
    item_text,
    refresh_redaction,
    sync_context,
    sync_history,
)

if TYPE_CHECKING:
    from ..collect.dispatch import SessionDispatcher, TreeRemoval
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog

__all__ = ("FRAMING_TOKENS", "Assembled", "assemble", "plan_budget", "plan_within")

FRAMING_TOKENS = 8  # reply priming (3) + system message framing (4) + 1 spare
#: The summary is counted in ``core_memory`` but sent as its own history message.
SUMMARY_FRAMING = 4
#: Tokens of text below which a shortened summary says too little to be sent: it is cut.
MIN_SUMMARY_TEXT: Final = 8
#: The hook of a fault for a grain the render itself found it cannot take (:func:`admit`).
ADMISSION_HOOK: Final = "render"


@dataclass(slots=True)
class Assembled:
    """What the assemble phase hands to inject: the plan and the context grains by id."""

    plan: Any
    by_id: dict[str, ContextGrain]


def _shadow(entry: dict[str, Any], winner: ContextGrain) -> None:
    shadowed = winner.meta.setdefault("shadowed", [])
    if entry not in shadowed:
        shadowed.append(entry)


def _fuse(
    config: RenderConfig, plugins: SessionDispatcher, grains: list[ContextGrain], log: TurnLog
) -> tuple[list[int], list[int]]:
    """Fusion of ``grains`` (:func:`~ctxengine.assemble.core.fuse`), each loser recorded as
    shadowed by its winner."""
    rank = plugins.registry.rank
    winner_of, order = core_fuse(
        [g.node_id for g in grains],
        [g.priority for g in grains],
        [rank(g.origin) for g in grains],
        list(range(len(grains))),
    )
    for i, w in enumerate(winner_of):
        if w == i:
            continue
        loser, winner = grains[i], grains[w]
        entry = {"node_id": loser.node_id, "origin": loser.origin, "priority": loser.priority}
        _shadow(entry, winner)
        log.shadowed.append({**entry, "winner": winner.origin})
        log.extra.append(shadowed_decision(loser, winner, config.budget))
    return winner_of, order


def fuse_grains(
    config: RenderConfig, plugins: SessionDispatcher, grains: list[ContextGrain], log: TurnLog
) -> list[ContextGrain]:
    """Merge grains sharing a node_id: the lower priority wins, the others are shadowed."""
    if not grains:
        return []
    _, order = _fuse(config, plugins, grains, log)
    return [grains[i] for i in order]


def apply_overrides(
    state: SessionState, config: RenderConfig, grains: list[ContextGrain], log: TurnLog
) -> list[ContextGrain]:
    """A plugin grain with a history node_id (e.g. a compressed tool result) replaces the
    history item's content when it is more important; otherwise it is shadowed
    (:func:`_override`). The other grains are returned: the context."""
    context: list[ContextGrain] = []
    overrides: dict[str, ContextGrain] = {}
    items, compacted = state.items, state.compacted
    for grain in grains:
        if grain.node_id in items or grain.node_id in compacted:
            _override(state, config, grain, overrides, log)
        else:
            context.append(grain)
    changed = overrides.keys() | state.overrides.keys()
    state.overrides = overrides
    state.dirty.update(changed)
    return context


def _override(
    state: SessionState,
    config: RenderConfig,
    grain: ContextGrain,
    overrides: dict[str, ContextGrain],
    log: TurnLog,
) -> None:
    """Judge ``grain``, the one plugin grain left by fusion for its history item's node id:
    put into ``overrides`` when it is more important than the item (the item's content is
    reported shadowed), else reported shadowed itself; the grain of an item an earlier
    compaction summarized is dropped (no longer carried), and so is the grain of an item a
    tree handler took out of this render (:func:`_unrender`), for this render."""
    budget = config.budget
    if grain.node_id in state.compacted:  # its history item now lives in mem.summary
        state.stored.pop(grain.node_id, None)
        log.extra.append(compacted_decision(grain, budget))
        return
    hook = state.unrendered.get(grain.node_id)
    if hook is not None:
        why = f"its history item was taken out of this render in {hook}"
        window = report_window(budget, grain)
        log.extra.append(
            GrainDecision(
                grain.node_id, grain.origin, window, "dropped", "dropped", hook, why, 0, 0
            )
        )
        return
    item = state.items[grain.node_id]
    if grain.priority <= HISTORY_PRIORITY:
        overrides[grain.node_id] = grain
        log.extra.append(shadowed_decision(item.grain, grain, budget))
        entry = {"node_id": grain.node_id, "origin": "transcript", "priority": HISTORY_PRIORITY}
        _shadow(entry, grain)
    else:
        log.extra.append(shadowed_decision(grain, item.grain, budget))


def _tree_overrides(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    grains: list[ContextGrain],
    log: TurnLog,
) -> None:
    """Admit ``grains``, put into the tree by its handlers with a history item's node id (a
    consented plugin's: the dispatcher refuses the others), as collected ones are
    (:func:`apply_overrides`): fused with the render's override of that item, each loser
    reported shadowed, and the winner judged against the item (:func:`_override`)."""
    by_id: dict[str, list[ContextGrain]] = {}
    for grain in grains:
        by_id.setdefault(grain.node_id, []).append(grain)
    for node_id, group in by_id.items():
        current = state.overrides.get(node_id)
        if current is not None:
            group.insert(0, current)  # the render's override first: it was there first
        winner = group[0]
        if len(group) > 1:
            winner = group[_fuse(config, plugins, group, log)[0][0]]
        if winner is current:
            continue
        if current is not None:  # it no longer replaces the item: its decision goes
            content = state.items[node_id].grain  # the one loser of that decision
            log.extra[:] = [
                d for d in log.extra if type(d) is not GrainDecision or d.grain is not content
            ]
            entry = {"node_id": node_id, "origin": "transcript", "priority": HISTORY_PRIORITY}
            shadowed = current.meta.get("shadowed")
            if isinstance(shadowed, list) and entry in shadowed:
                shadowed.remove(entry)
            del state.overrides[node_id]
        _override(state, config, winner, state.overrides, log)
        if state.overrides.get(node_id) is not current:
            state.dirty.add(node_id)


def _admission_error(grain: ContextGrain, config: RenderConfig) -> CtxEngineError | None:
    try:
        config.budget.window_of(grain.node_id, grain.window)
    except CtxEngineError as exc:
        return exc
    if grain.node_id == _core.PLACEHOLDER_ID:
        return CtxEngineError(
            f"node id {_core.PLACEHOLDER_ID!r} is reserved for the trim placeholder"
        )
    return None


def safe_id(node_id: object) -> str:
    """``node_id`` when it is a str, else a placeholder naming its type (for reports)."""
    return node_id if isinstance(node_id, str) else f"<{type(node_id).__name__} node_id>"


def admit(
    config: RenderConfig,
    grains: list[ContextGrain],
    log: TurnLog,
    *,
    windows: bool = True,
    fields: bool = True,
) -> list[ContextGrain]:
    """Grains the core can take; a plugin grain it cannot is reported and left out. Before
    fusion (``windows=False``) only the grains' own fields are checked; ``fields=False`` skips
    them when they were checked in this render and no plugin code ran since."""
    out: list[ContextGrain] = []
    for grain in grains:
        exc: CtxEngineError | None
        try:
            if fields:
                grain.check()  # it may have been changed since it was made
        except CtxEngineError as error:
            exc = error
        else:
            exc = _admission_error(grain, config) if windows else None
        if exc is None:
            out.append(grain)
            continue
        origin = grain.origin if isinstance(grain.origin, str) else "unknown"
        node_id = safe_id(grain.node_id)
        fault = PluginFault(origin, ADMISSION_HOOK, "invalid", str(exc), node_id=node_id)
        if fault not in log.faults:  # admission runs again after on_over_budget
            log.faults.append(fault)
            window = report_window(config.budget, grain)
            log.extra.append(
                GrainDecision(
                    node_id,
                    origin,
                    window,
                    "dropped",
                    "dropped",
                    "admission",
                    str(exc),
                    0,
                    0,
                )
            )
    return out


def _tree_context(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    tree: list[ContextGrain],
    log: TurnLog,
    *,
    fields: bool = True,
) -> list[ContextGrain]:
    """The non-history grains of the tree the core can take, and their emission order
    (``fields``: check the grains' fields again, as a handler may have changed them).

    A tree handler may have put a grain into the tree with the node id of another (returned,
    appended or renamed): they are fused again, the loser recorded as shadowed and taken out
    of the tree, so each node id has one grain in the render and every other a decision. A
    grain with a history item's node id (not the item's own) is admitted as a collected one
    and taken out of the tree (:func:`_tree_overrides`)."""
    items, compacted = state.items, state.compacted
    rest: list[ContextGrain] = []
    history: list[ContextGrain] = []
    for g in tree:
        item = items.get(g.node_id)
        if item is None:
            (history if g.node_id in compacted else rest).append(g)
        elif item.made_grain is not g:
            history.append(g)
    if history:
        taken = {id(g) for g in history}
        tree[:] = [g for g in tree if id(g) not in taken]
        _tree_overrides(state, config, plugins, admit(config, history, log, fields=fields), log)
    context = admit(config, rest, log, fields=fields)
    if len({g.node_id for g in context}) != len(context):
        winner_of, _ = _fuse(config, plugins, context, log)
        losers = {id(g) for i, g in enumerate(context) if winner_of[i] != i}
        context = [g for g in context if id(g) not in losers]
        tree[:] = [g for g in tree if id(g) not in losers]
    state.order = {g.node_id: n for n, g in enumerate(context)}
    return context


async def _hook(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    event: BeforeRender | OverBudget,
    log: TurnLog,
) -> None:
    """Fire a tree event; every grain a handler took out of the tree and no other grain of
    its node id stands for gets a ``dropped`` decision naming the plugin and the hook. For a
    history item's own grain (removed, or renamed: a copy goes on under the new node id) the
    item leaves this render with its turn (:func:`_unrender`)."""
    outcome = await plugins.fire(event)
    log.faults.extend(outcome.faults)
    if outcome.changed:
        _note_edits(state, outcome.changed)
    if not outcome.removed and not outcome.renamed:
        return
    present = {g.node_id for g in event.tree}
    items = state.items
    # history items whose own grain left the tree (no other grain of its node id stands for
    # it): out of this render (_unrender)
    gone: dict[str, tuple[TreeRemoval, str]] = {}
    renamed = [r for r in outcome.renamed if r.node_id in items and r.node_id not in present]
    if renamed:
        where = {id(g): k for k, g in enumerate(event.tree)}
        for removal in renamed:
            node_id = removal.node_id
            grain = items[node_id].grain
            k = where.get(id(grain))
            if k is not None and node_id not in gone:  # else renamed, then taken out: below
                # the renamed grain goes on as a copy under its new node id
                event.tree[k] = replace(grain, meta=safe_copy(grain.meta))
                gone[node_id] = (removal, f"renamed to {grain.node_id!r}")
    for removal in outcome.removed:
        node_id = removal.node_id
        if node_id in present:  # replaced
            continue
        if node_id in items:
            gone.setdefault(node_id, (removal, "removed from the tree"))
            continue
        present.add(node_id)  # one decision per node id
        reason = f"removed from the tree by plugin {removal.plugin!r} in {removal.hook}"
        log.extra.append(
            GrainDecision(
                node_id,
                removal.origin,
                report_window(config.budget, removal),  # its node id and window
                "dropped",
                "dropped",
                removal.hook,
                reason,
                0,
                0,
            )
        )
    # the item keeps its own grain and id however the grain left the tree (renamed, removed)
    for node_id in gone.keys() | {r.node_id for r in renamed}:
        own = items[node_id].made_grain
        if own is not None:
            own.node_id = node_id
    if gone:
        _unrender(state, config, gone, log)


def _note_edits(state: SessionState, changed: list[TreeRemoval]) -> None:
    """Record in ``state.edited`` the history items whose own grain a tree handler changed
    the content of in place (``changed``, the dispatcher's: a consented handler's edits of
    grains it does not own). The item is sent with that content (:func:`item_text`) in this
    render and in the next ones while its grain holds it: :func:`_edit_notes` reports it."""
    items, edited = state.items, state.edited
    for edit in changed:
        item = items.get(edit.node_id)
        own = item.made_grain if item is not None else None
        if item is None or own is None or own.node_id != edit.node_id or own.origin != edit.origin:
            continue  # not the item's own grain (a grain given for the item, a renamed copy)
        if own.text == item.grain_text:  # changed back
            edited.pop(edit.node_id, None)
            continue
        by = edited.setdefault(edit.node_id, [])
        if (edit.plugin, edit.hook) not in by:
            by.append((edit.plugin, edit.hook))


def _edit_notes(state: SessionState, log: TurnLog) -> None:
    """For each history item of the render sent with the content a tree handler gave its own
    grain in place (``state.edited``), what its decision says of the edit (``log.edited``):
    the plugins, their hooks and the change of size. The item stays the transcript's, with its
    one decision (the report adds the note to it when the item is sent, kept or folded; never
    the content it had). Not for an item whose edit is not what is sent (an override's or the
    prune options' text stands in for it) or that is not in the render (its decision says so)."""
    edited, items = state.edited, state.items
    out = state.unrendered.keys() | state.limited.keys() | state.overrides.keys()
    for node_id, by in list(edited.items()):
        item = items.get(node_id)
        if item is None or item.made_grain is None or item.made_grain.text == item.grain_text:
            del edited[node_id]  # compacted, or changed back: sent as the transcript has it
            continue
        if node_id in out or node_id in state.pruned:
            continue
        changes = ", then ".join(f"by plugin {p!r} in {h}" for p, h in by)
        log.edited[node_id] = (
            f"its content was changed in place {changes} "
            f"({len(item.grain_text):,} to {len(item.made_grain.text):,} characters)"
        )


def _unrender(
    state: SessionState,
    config: RenderConfig,
    gone: dict[str, tuple[TreeRemoval, str]],
    log: TurnLog,
) -> None:
    """Take the history items of ``gone`` (node id → the edit that took its grain out of the
    tree, and what it did) out of this render, each with its turn group, as the ladder's hard
    trim removes a turn (a tool call and its results, a request's thinking and its calls, go
    or stay together), a ``dropped`` decision each naming the plugin and the hook. They leave
    the assembly until the next render (:func:`_rerender`)."""
    items, out, limited = state.items, state.unrendered, state.limited
    cause: dict[int, str] = {}  # turn → the first node id of ``gone`` in it
    for node_id in gone:
        cause.setdefault(items[node_id].turn, node_id)
    budget, count = config.budget, config.tokenizer.count
    taken: list[str] = []
    for item in items.values():
        node_id = item.node_id
        first = cause.get(item.turn)
        if first is None or node_id in out or node_id in limited:  # out already, or dropped
            continue
        removal, what = gone.get(node_id) or gone[first]
        why = f"{what} by plugin {removal.plugin!r} in {removal.hook}"
        if node_id not in gone:
            why = f"in the turn of {first!r} (sent or left out together), {why}"
        tokens = state.asm.tokens(node_id)
        if tokens is None:  # not in the assembly yet
            tokens = count(item_text(state, item)) + item.overhead
        override = state.overrides.get(node_id)
        origin = "transcript" if override is None else override.origin
        window = budget.window_of(node_id)
        log.extra.append(
            GrainDecision(
                node_id, origin, window, "dropped", "dropped", removal.hook, why, tokens, 0
            )
        )
        out[node_id] = removal.hook
        taken.append(node_id)
    state.asm.remove(taken)


def _rerender(state: SessionState) -> None:
    """Put the history items a tree handler took out of the last render back into the
    assembly's queue (this render's handlers see them again)."""
    queued = {id(i) for i in state.pending}
    items = state.items
    for node_id in state.unrendered:
        item = items.get(node_id)  # None: compacted since
        if item is not None and id(item) not in queued:
            state.pending.append(item)
    state.unrendered.clear()


def _sync(
    state: SessionState, config: RenderConfig, plugins: SessionDispatcher, ctx: list[ContextGrain]
) -> None:
    sync_context(state, config, plugins.registry, ctx)


async def _compact_all(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    context: list[ContextGrain],
    plan: Any,
    log: TurnLog,
) -> tuple[list[ContextGrain], Any]:
    """Compaction in a render: the turns the ladder sent to compaction, and the high-water mark.

    The high-water mark (docs/compaction.md): when the plan passed its target, the render
    compacts down to the low-water mark instead of letting the ladder soft-trim, hard-trim and
    placeholder messages the provider has already seen (which breaks its prompt cache on every
    render once the budget is full). Between two compactions each payload is then the previous
    one plus what was added at its end. The mark is also checked after the ladder's own
    compaction, once, and after the mark's compaction the ladder's own picks are compacted
    too. A render that compacted records the state it left (``SessionState.settled``, kept in
    snapshots): a render of that same state past the mark does not compact it again (its
    landing may sit over the target when the ladder trims the protected tail), so rendering it
    again, or a restored snapshot of it, gives the same payload. A failed compaction
    (timed out, empty, rejected by the gate) writes nothing; the plan then stands as the ladder
    made it.

    The compactions and landing trials of a render share one message scope: what compaction
    derives from a message (text, key facts, counts) is computed once per render, however many
    summaries read it. A render that compacts nothing opens none.
    """
    marked = state.settled == (len(state.messages), plan.total_before)
    if not plan.compaction_turns and (marked or plan.total_before <= plan.high):
        return context, plan  # nothing to compact (the warm path)
    with message_scope():
        compacted = False
        why = f"the render ran its {MAX_COMPACTIONS} compactions"
        for _ in range(MAX_COMPACTIONS):
            turns = list(plan.compaction_turns)
            at_mark = not turns and not marked and plan.total_before > plan.high
            if not turns and not at_mark:
                break
            marked = marked or at_mark
            protected = [g for g in context if g.protected]
            entries = len(log.compactions)
            done = await compact(
                state, config, plugins.registry, turns, log, protected=protected, plan=plan
            )
            if not done:
                failed = log.compactions[entries:]
                why = _not_summarized(failed[-1]) if failed else TAIL_LEFT
                break
            compacted = True
            # The new summary replaces any stored one that came in with this turn's context (and
            # the decision that fitted the old one to this render: it was never sent).
            log.extra[:] = [d for d in log.extra if not _fitted_summary(d)]
            summary = state.summary
            context = [g for g in context if summary is None or g.node_id != summary.node_id]
            context += [summary] if summary is not None else []
            _sync(state, config, plugins, context)
            context = _fit_summary(state, config, plugins, context, log)
            plan = plan_within(state, config)
            # after the mark's compaction the loop goes on only for turns the ladder still sends
            # to compaction: a render of the new state with nothing added would compact them
        if compacted:
            state.settled = (len(state.messages), plan.total_before)
        # what the ladder sent to compaction and no compaction summarized: the report says so
        log.extra += unsummarized(state, config, plan, why)
        return context, plan


def _not_summarized(entry: dict[str, Any]) -> str:
    """Why a render's compaction summarized nothing, from its report entry."""
    error = str(entry.get("error") or "no summary")
    return error if entry.get("stage") == "deferred" else f"the compaction failed ({error})"


def _fitted_summary(d: Extra) -> bool:
    """Whether ``d`` is :func:`_fit_summary`'s decision on the summary (never in a block of
    decisions: those are a compaction's, on history items)."""
    return (
        type(d) is GrainDecision
        and d.node_id == SUMMARY_ID
        and d.stage == "compaction"
        and "compaction summary" in d.reason
    )


def plan_budget(state: SessionState, config: RenderConfig, cut: int = 0) -> int:
    """The budget the core plans for: the user's total less the request framing (and the
    summary's message framing when the core holds the summary), less ``cut``."""
    budget = config.tokens_total - FRAMING_TOKENS - cut
    if state.summary is not None and state.summary.node_id in state.in_asm:
        budget -= SUMMARY_FRAMING
    return max(budget, 0)


def _summary_room(state: SessionState, config: RenderConfig) -> int:
    """Tokens of text the compaction summary may have beside the protected content: the
    summary is protected (the ladder never cuts it), so it must leave the budget to the
    user's protected content (system messages, protected grains, the latest request)."""
    protected = state.asm.protected_tokens()
    if state.summary is not None:
        protected -= state.asm.tokens(state.summary.node_id) or 0
    return plan_budget(state, config) - protected - CONTEXT_OVERHEAD


def _fit_summary(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    context: list[ContextGrain],
    log: TurnLog,
) -> list[ContextGrain]:
    """``context`` with the compaction summary fitted to the room the protected content
    leaves it (:func:`_summary_room`), for this render: shortened to that room, or cut when the
    room is under :data:`MIN_SUMMARY_TEXT` tokens, with a decision in the report. The
    summary is not the user's content: it never makes a render raise ``BudgetError``. The
    session keeps the whole summary (a later render with more room sends it all)."""
    summary = state.summary
    if summary is None or summary.node_id not in state.in_asm:
        return context
    if state.asm.protected_tokens() <= plan_budget(state, config):
        return context
    room = _summary_room(state, config)
    before = state.asm.tokens(summary.node_id) or 0
    window = report_window(config.budget, summary)
    tokenizer = config.tokenizer
    text = tokenizer.truncate(summary.text, room).rstrip() if room >= MIN_SUMMARY_TEXT else ""
    if tokenizer.count(text) < MIN_SUMMARY_TEXT:
        reason = (
            f"the compaction summary ({before} tokens) was cut: the protected content leaves "
            f"it {max(room + CONTEXT_OVERHEAD, 0)} tokens of the budget of {config.tokens_total}"
        )
        log.extra.append(
            GrainDecision(
                SUMMARY_ID,
                "compaction",
                window,
                "dropped",
                "dropped",
                "compaction",
                reason,
                before,
                0,
            )
        )
        fitted = [g for g in context if g.node_id != summary.node_id]
    else:
        short = replace(summary, content=text, meta={**summary.meta, "shortened_from": before})
        after = tokenizer.count(text) + CONTEXT_OVERHEAD
        reason = (
            f"the compaction summary was shortened from {before} to {after} tokens: the "
            f"protected content leaves it {room + CONTEXT_OVERHEAD} tokens of the budget of "
            f"{config.tokens_total}"
        )
        log.extra.append(
            GrainDecision(
                SUMMARY_ID,
                "compaction",
                window,
                "folded",
                "trimmed",
                "compaction",
                reason,
                before,
                after,
            )
        )
        fitted = [short if g.node_id == summary.node_id else g for g in context]
    _sync(state, config, plugins, fitted)
    return fitted


def plan_within(state: SessionState, config: RenderConfig, cut: int = 0) -> Any:
    """The core's plan for the budget less the request framing (and less ``cut``: what the
    rendered payload was found to carry beyond the plan's estimate).

    The plan holds a total up to the high-water mark (``render_high_water`` of its target,
    at most the budget less the reserve) uncut: the ladder runs only past it, and then cuts
    (or compacts) down to the target, so between two cuts each payload is the previous one
    plus what was added at its end, and a cut leaves the render at its target. A re-plan for
    a payload found over the budget (``cut`` > 0) does not hold.

    Raises:
        BudgetError: protected content alone does not fit; the message names the user's total,
            not the framing-reduced figure the core was given.
    """
    budget = plan_budget(state, config, cut)
    try:
        hold = config.compaction.render_high_water if cut == 0 else 1.0
        return state.asm.plan(budget, hold=hold)
    except BudgetError as exc:
        message = str(exc).replace(
            f", over the budget of {budget};",
            f" but the budget of {config.tokens_total} leaves {budget} after request framing;",
        )
        raise BudgetError(message) from None


async def assemble(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    grains: list[ContextGrain],
    log: TurnLog,
    provider: str = "openai",
) -> Assembled:
    """The assemble phase: the collected grains become a plan that fits the budget (for
    ``provider``: thinking counts only where its export sends it)."""
    refresh_redaction(state, plugins.registry)
    if state.unrendered:
        _rerender(state)
    grains = admit(config, grains, log, windows=False)
    grains = apply_overrides(state, config, fuse_grains(config, plugins, grains, log), log)
    grains, state.splits = split_large(
        grains, state.splits, config.budget, config.tokenizer, log.extra, whole=(SUMMARY_ID,)
    )
    before = plugins.registry.has_hook("on_before_render")
    over = plugins.registry.has_hook("on_over_budget")
    # History grains join the tree only when a handler will see it: building and re-filtering
    # a list of every history item would otherwise cost O(session) on every warm render.
    tree = grains + [i.grain for i in state.items.values()] if before or over else grains
    if before:
        await _hook(state, config, plugins, BeforeRender(tree), log)
    # Without a before-render handler no plugin code ran since the fields were checked above.
    context = _tree_context(state, config, plugins, tree, log, fields=before)
    _sync(state, config, plugins, context)
    apply_prune_options(state, config, log)
    sync_history(state, config, scan=before or over, provider=provider)
    context = _fit_summary(state, config, plugins, context, log)
    plan = plan_within(state, config)
    if plan.total_before > plan.high and over:
        event = OverBudget(tree, config.budget, plan.total_before - plan.target)
        await _hook(state, config, plugins, event, log)
        context = _tree_context(state, config, plugins, tree, log)
        _sync(state, config, plugins, context)
        sync_history(state, config, scan=True, provider=provider)
        context = _fit_summary(state, config, plugins, context, log)
        plan = plan_within(state, config)
    context, plan = await _compact_all(state, config, plugins, context, plan, log)
    if state.edited:
        _edit_notes(state, log)
    # admission's own faults have their decision already (made with the grain's window)
    rejected = [f for f in log.faults if not (f.hook == ADMISSION_HOOK and f.kind == "invalid")]
    log.extra.extend(rejected_decisions(config.budget, rejected))
    return Assembled(plan, {g.node_id: g for g in context})
