"""One render, step by step: collect → fuse → before_render → sync → plan → compact → inject.

The heavy steps (counting, scoring, allocation, the trim ladder, ordering) run in the Rust
:class:`~ctxengine._core.Assembly` with the GIL released; this module moves only what changed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from . import _core
from .errors import CtxEngineError
from .events import AfterRender, BeforeRender, OverBudget
from .grain import ContextGrain
from .history import FLAG, KIND, HistoryItem
from .plugins.dispatch import PluginFault
from .render import compose, payload_tokens
from .report import GrainDecision, RenderReport
from .scene import ContextScene
from .splitter import TextSplitter
from .tokens import count_many
from .transcript.providers import check_provider
from .transcript.render import render as render_payload

if TYPE_CHECKING:
    from .engine import RenderedContext, Session, _TurnState

__all__ = ("run_render",)

FRAMING_TOKENS = 8  # reply priming (3) + system message framing (4) + 1 spare
CONTEXT_OVERHEAD = 2  # separator between grains in the system message
HISTORY_PRIORITY = 100
MAX_COMPACTIONS = 3
SPLIT_CHARS = 80_000  # DESIGN.md §4 step 0


def _latest_user_text(session: Session) -> str:
    for message in reversed(session.messages):
        if message.role == "user":
            return message.text
    return ""


async def _collect(session: Session, provider: str, state: _TurnState) -> list[ContextGrain]:
    engine = session.engine
    raw = _latest_user_text(session)
    redacted = session.redact(raw)
    scene = ContextScene(
        session_id=session.id,
        turn=session.turn,
        user_message=redacted,
        raw_user_message=raw if redacted != raw else None,
        transcript=session.messages,
        model=engine.model,
        provider=provider,
        budget=engine.budget,
        task_id=session.task_id,
    )
    outcome = await session.dispatcher.collect(scene)
    state.faults.extend(outcome.faults)
    queued, session._queued = session._queued, []
    stored = [s.grain for s in session._stored.values()]
    return _admit(session, queued + list(outcome.grains) + stored, state, windows=False)


def _fuse(session: Session, grains: list[ContextGrain], state: _TurnState) -> list[ContextGrain]:
    """Merge grains sharing a node_id: the lower priority wins, the others are shadowed."""
    if not grains:
        return []
    ranks = [session._rank(g.origin) for g in grains]
    winner_of, order = _core.fuse(
        [g.node_id for g in grains],
        [g.priority for g in grains],
        ranks,
        list(range(len(grains))),
    )
    for i, w in enumerate(winner_of):
        if w == i:
            continue
        loser, winner = grains[i], grains[w]
        entry = {"node_id": loser.node_id, "origin": loser.origin, "priority": loser.priority}
        shadowed = winner.meta.setdefault("shadowed", [])
        if entry not in shadowed:
            shadowed.append(entry)
        state.shadowed.append({**entry, "winner": winner.origin})
        state.extra.append(_shadowed_decision(loser, winner, session))
    return [grains[i] for i in order]


def _report_window(session: Session, grain: ContextGrain) -> str:
    """The window to report ``grain`` under; an invalid explicit window (a plugin fault that
    ``_admit`` reports) falls back to the prefix's, so reporting never breaks the turn."""
    budget = session.engine.budget
    node_id = grain.node_id if isinstance(grain.node_id, str) else ""
    window = grain.window if isinstance(grain.window, str) else None
    try:
        return budget.window_of(node_id, window)
    except CtxEngineError:
        return budget.window_of(node_id)


def _shadowed_decision(
    loser: ContextGrain, winner: ContextGrain, session: Session
) -> GrainDecision:
    window = _report_window(session, loser)
    return GrainDecision(
        loser.node_id,
        loser.origin,
        window,
        "shadowed",
        "shadowed",
        "fuse",
        f"shadowed by {winner.origin} (priority {winner.priority} < {loser.priority})",
        0,
        0,
    )


def _compacted_decision(grain: ContextGrain, session: Session) -> GrainDecision:
    return GrainDecision(
        grain.node_id,
        grain.origin,
        _report_window(session, grain),
        "dropped",
        "dropped",
        "compaction",
        "its history item was summarized into mem.summary by an earlier compaction",
        0,
        0,
    )


def _apply_overrides(
    session: Session, grains: list[ContextGrain], state: _TurnState
) -> list[ContextGrain]:
    """A plugin grain with a history node_id (e.g. a compressed tool result) replaces the
    history item's content when it is more important; otherwise it is shadowed."""
    context: list[ContextGrain] = []
    overrides: dict[str, ContextGrain] = {}
    for grain in grains:
        item = session._items.get(grain.node_id)
        if grain.node_id in session._compacted:  # its history item now lives in mem.summary
            session._stored.pop(grain.node_id, None)
            state.extra.append(_compacted_decision(grain, session))
        elif item is None:
            context.append(grain)
        elif grain.priority <= HISTORY_PRIORITY:
            overrides[grain.node_id] = grain
            state.extra.append(_shadowed_decision(item.grain, grain, session))
            entry = {"node_id": grain.node_id, "origin": "transcript", "priority": HISTORY_PRIORITY}
            shadowed = grain.meta.setdefault("shadowed", [])
            if entry not in shadowed:
                shadowed.append(entry)
        else:
            state.extra.append(_shadowed_decision(grain, item.grain, session))
    changed = overrides.keys() | session._overrides.keys()
    session._overrides = overrides
    for node_id in changed:
        session._dirty.add(node_id)
    return context


def _split_large(
    session: Session, grains: list[ContextGrain], state: _TurnState
) -> list[ContextGrain]:
    """Guard: a grain over ``SPLIT_CHARS`` becomes ``<node_id>.<i>`` chunks (cached by content)."""
    out: list[ContextGrain] = []
    splits, session._splits = session._splits, {}  # keep only grains still present
    for grain in grains:
        text = grain.text
        if len(text) <= SPLIT_CHARS:
            out.append(grain)
            continue
        key = (text, grain.origin, grain.priority, grain.lifespan, grain.window, grain.protected)
        cached = splits.get(grain.node_id)
        if cached is not None and cached[0] == key:
            chunks = cached[1]
        else:
            chunks = [
                dataclasses.replace(
                    grain,
                    node_id=f"{grain.node_id}.{i}",
                    content=piece,
                    meta={**grain.meta, "split_from": grain.node_id, "chunk": i},
                )
                for i, piece in enumerate(TextSplitter(SPLIT_CHARS).split(text))
            ]
        session._splits[grain.node_id] = (key, chunks)
        window = _report_window(session, grain)
        reason = f"{len(text):,} chars split into {len(chunks)} chunks {grain.node_id}.<i>"
        tokens = session.engine.tokenizer.count(text)
        state.extra.append(
            GrainDecision(
                grain.node_id, grain.origin, window, "folded", "split", "guard", reason, tokens, 0
            )
        )
        out.extend(chunks)
    return out


def _admit(
    session: Session, grains: list[ContextGrain], state: _TurnState, *, windows: bool = True
) -> list[ContextGrain]:
    """Grains the core can take; a plugin grain it cannot is reported and left out. Before
    fusion (``windows=False``) only the grains' own fields are checked."""
    budget = session.engine.budget
    out: list[ContextGrain] = []
    for grain in grains:
        try:
            grain.check()  # it may have been changed since it was made
            if not windows:
                out.append(grain)
                continue
            budget.window_of(grain.node_id, grain.window)
            if grain.node_id == "hist.removed":
                raise CtxEngineError("node id 'hist.removed' is reserved for the trim placeholder")
        except CtxEngineError as exc:
            origin = grain.origin if isinstance(grain.origin, str) else "unknown"
            fault = PluginFault(origin, "render", "invalid", str(exc))
            if fault not in state.faults:  # _admit runs again after on_over_budget
                state.faults.append(fault)
                state.extra.append(
                    GrainDecision(
                        _safe_id(grain.node_id),
                        origin,
                        _report_window(session, grain),
                        "dropped",
                        "dropped",
                        "admission",
                        str(exc),
                        0,
                        0,
                    )
                )
            continue
        out.append(grain)
    return out


def _safe_id(node_id: object) -> str:
    return node_id if isinstance(node_id, str) else f"<{type(node_id).__name__} node_id>"


def _rejected_decisions(session: Session, state: _TurnState) -> None:
    """A ``dropped`` decision for every grain a plugin fault rejected (invalid grains the
    dispatcher refused), so nothing leaves the context without a trace in the report."""
    budget = session.engine.budget
    for fault in state.faults:
        if fault.node_id is not None and fault.kind == "invalid":
            window = budget.window_of(fault.node_id)
            decision = ("dropped", "dropped", "admission", fault.message, 0, 0)
            state.extra.append(GrainDecision(fault.node_id, fault.plugin, window, *decision))


def _tree_context(
    session: Session, tree: list[ContextGrain], state: _TurnState
) -> list[ContextGrain]:
    """The non-history grains of the tree the core can take, and their emission order."""
    context = _admit(session, [g for g in tree if g.node_id not in session._items], state)
    session._order = {g.node_id: n for n, g in enumerate(context)}
    return context


def _item_text(session: Session, item: HistoryItem) -> str:
    override = session._overrides.get(item.node_id)
    return (override or item.grain).text


def _sync_history(session: Session, scan: bool) -> None:
    """Upsert new history items and those whose content changed since the last render."""
    items = list(session._pending)
    session._pending.clear()
    candidates = (
        session._items.values()
        if scan
        else (session._items[n] for n in session._dirty if n in session._items)
    )
    texts = [_item_text(session, i) for i in items]
    seen = {id(i) for i in items}
    for item in candidates:
        if id(item) in seen:
            continue
        text = _item_text(session, item)
        if text is not item.text:
            items.append(item)
            texts.append(text)
    session._dirty.clear()
    if not items:
        return
    extra = count_many([t for i in items for t in i.overhead_texts], model=session.engine.model)
    overheads, k = [], 0
    for item in items:
        n = len(item.overhead_texts)
        overheads.append(item.overhead + sum(extra[k : k + n]))
        k += n
    windows = session._window_index
    session._asm.upsert(
        [i.node_id for i in items],
        texts,
        [windows[session.engine.budget.window_of(i.node_id)] for i in items],
        [0 if i.kind == KIND["context"] else HISTORY_PRIORITY for i in items],
        [0] * len(items),
        [i.index * 1024 + max(i.result, 0) for i in items],
        [i.kind for i in items],
        [i.role for i in items],
        [i.turn for i in items],
        [i.flags for i in items],
        overheads,
        [i.label for i in items],
        [None] * len(items),
    )
    for item, text in zip(items, texts, strict=True):
        item.text = text


def _context_key(session: Session, grain: ContextGrain) -> tuple[Any, ...]:
    """Everything the core holds of a context grain. By value, not by ``id()``: content can
    change in place (a list grown by the app) and a freed grain's id can be reused. For ``str``
    content the text is the content itself, so an unchanged grain compares by identity."""
    summary = grain.meta.get("summary")
    return (
        grain.text,
        grain.priority,
        grain.protected,
        grain.window,
        session._rank(grain.origin),
        session._order.get(grain.node_id, 0),
        str(grain.meta.get("label", f"{grain.origin} grain")),
        summary if isinstance(summary, str) else None,
    )


def _sync_context(session: Session, grains: list[ContextGrain]) -> None:
    """Upsert context grains that are new or changed; remove those no longer present."""
    budget = session.engine.budget
    present = {g.node_id: g for g in grains}
    gone = [n for n in session._in_asm if n not in present]
    if gone:
        session._asm.remove(gone)
        for n in gone:
            del session._in_asm[n]
    keys = {n: _context_key(session, g) for n, g in present.items()}
    fresh = [g for n, g in present.items() if session._in_asm.get(n) != keys[n]]
    if not fresh:
        return
    windows = session._window_index
    session._asm.upsert(
        [g.node_id for g in fresh],
        [keys[g.node_id][0] for g in fresh],
        [windows[budget.window_of(g.node_id, g.window)] for g in fresh],
        [g.priority for g in fresh],
        [keys[g.node_id][4] for g in fresh],
        [keys[g.node_id][5] for g in fresh],
        [KIND["context"]] * len(fresh),
        [0] * len(fresh),
        [0] * len(fresh),
        [FLAG["protected"] if g.protected else 0 for g in fresh],
        [CONTEXT_OVERHEAD] * len(fresh),
        [keys[g.node_id][6] for g in fresh],
        [keys[g.node_id][7] for g in fresh],
    )
    for g in fresh:
        session._in_asm[g.node_id] = keys[g.node_id]


async def _run_tree_hook(session: Session, event: Any, state: _TurnState) -> None:
    outcome = await session.dispatcher.fire(event)
    state.faults.extend(outcome.faults)


def _merge_summaries(session: Session, previous: str, text: str) -> str:
    """``previous`` then ``text``, dropping the oldest lines of ``previous`` while the whole
    would pass the summary window's share of the target. Appending without bound would
    eventually fold the summary to a stand-in, losing everything compaction kept."""
    engine = session.engine
    budget = engine.budget
    share = budget.windows[budget.window_of("mem.summary")]
    limit = int(engine.tokens_total * budget.pretrim_ratio * share)
    lines = previous.splitlines()
    counts = engine.tokenizer.count_many(lines)
    total = engine.tokenizer.count(text) + sum(counts) + len(lines)
    drop = 0
    while drop < len(lines) and total > limit:
        total -= counts[drop] + 1
        drop += 1
    return "\n".join([*lines[drop:], text])


async def _compact(session: Session, turns: list[int], state: _TurnState) -> bool:
    """Summarize the history turns the plan could not keep into the session summary grain.

    On failure nothing is written: the turns stay dropped for this render only.
    """
    engine = session.engine
    doomed = [i for i in session._items.values() if i.turn in set(turns) and i.kind != 0]
    indexes = sorted({i.index for i in doomed})
    messages = [session.messages[i] for i in indexes]
    previous = session._summary.text if session._summary is not None else ""
    try:
        text = await engine.summarizer.summarize(messages, previous)
    except Exception as exc:  # a summarizer fault is reported, never fatal
        state.compactions.append({"turns": turns, "ok": False, "error": repr(exc)})
        return False
    if previous:
        text = _merge_summaries(session, previous, text)
    summary = ContextGrain(
        "mem.summary",
        "compaction",
        text,
        priority=50,
        lifespan="session",
        meta={"label": "summary of earlier turns", "turns": len(turns)},
    )
    session._summary = summary
    session.add(summary)
    ids = [i.node_id for i in doomed]
    budget = engine.budget
    for item in doomed:
        state.extra.append(
            GrainDecision(
                item.node_id,
                "transcript",
                budget.window_of(item.node_id),
                "dropped",
                "dropped",
                "compaction",
                f"summarized into mem.summary with {len(messages)} earlier messages",
                session._asm.tokens(item.node_id) or 0,
                0,
            )
        )
    session._asm.remove(ids)
    for node_id in ids:
        del session._items[node_id]
        session._overrides.pop(node_id, None)
        session._stored.pop(node_id, None)  # e.g. a compressed copy of a compacted result
        session._guarded.pop(node_id, None)
    session._compacted.update(ids)
    state.compactions.append(
        {"turns": turns, "ok": True, "messages": len(messages), "summary_chars": len(text)}
    )
    return True


async def run_render(session: Session, provider: str, **options: Any) -> RenderedContext:
    """The body of :meth:`Session.render`."""
    from .engine import RenderedContext, _TurnState

    check_provider(provider)
    started = time.perf_counter()
    state = _TurnState()
    state.faults.extend(session._faults)
    session._faults = []

    grains = _apply_overrides(
        session, _fuse(session, await _collect(session, provider, state), state), state
    )
    grains = _split_large(session, grains, state)
    timings = {"collect": time.perf_counter() - started}
    before, over = session.has_hook("on_before_render"), session.has_hook("on_over_budget")
    # History grains join the tree only when a handler will see it: building and re-filtering
    # a list of every history item would otherwise cost O(session) on every warm render.
    tree = grains + [i.grain for i in session._items.values()] if before or over else grains
    if before:
        await _run_tree_hook(session, BeforeRender(tree), state)
    context = _tree_context(session, tree, state)
    _sync_context(session, context)
    _sync_history(session, scan=before or over)
    budget = session.engine.tokens_total - FRAMING_TOKENS
    plan = session._asm.plan(budget)
    if plan.total_before > plan.target and over:
        await _run_tree_hook(
            session, OverBudget(tree, session.engine.budget, plan.total_before - plan.target), state
        )
        context = _tree_context(session, tree, state)
        _sync_context(session, context)
        _sync_history(session, scan=True)
        plan = session._asm.plan(budget)
    for _ in range(MAX_COMPACTIONS):
        if not plan.compaction_turns or not await _compact(session, plan.compaction_turns, state):
            break
        # The new summary replaces any stored one that came in with this turn's context.
        summary = session._summary
        context = [g for g in context if summary is None or g.node_id != summary.node_id]
        context += [summary] if summary is not None else []
        _sync_context(session, context)
        plan = session._asm.plan(budget)
    timings.update({f"core.{k}": v for k, v in plan.timings.items()})
    by_id = {g.node_id: g for g in context}
    injected = render_payload(compose(session, plan, by_id), provider, **options)
    payload, transcript = injected.payload, injected.transcript
    if provider == "openai":
        tokens = session._token_cache.openai_tokens(transcript, payload, session.engine.model)
    else:
        tokens = payload_tokens(payload, provider, session.engine.model)
    timings["total"] = time.perf_counter() - started
    _rejected_decisions(session, state)
    report = _report(session, provider, plan, tokens, by_id, state, timings)
    injected_info = injected.to_dict()
    report.hygiene = injected_info.get("hygiene", {})
    report.cache_breakpoints = injected_info.get("cache_breakpoints", [])
    rendered_tree = [by_id[n] for n in plan.context_order if n in by_id] + [
        session._items[n].grain for n in plan.history_order if n in session._items
    ]
    rendered = RenderedContext(payload, tokens, rendered_tree, report, transcript)
    if session.has_hook("on_after_render"):
        outcome = await session.dispatcher.fire(AfterRender(payload, tokens, report))
        report.faults.extend(f.to_dict() for f in outcome.faults)
    session.turn += 1
    return rendered


def _report(
    session: Session,
    provider: str,
    plan: Any,
    tokens: int,
    by_id: dict[str, ContextGrain],
    state: _TurnState,
    timings: dict[str, float],
) -> RenderReport:
    origins = {n: g.origin for n, g in by_id.items()}
    origins.update({n: g.origin for n, g in session._overrides.items()})
    windows = [
        {"window": name, "demand": demand, "alloc": alloc, "used": used}
        for name, demand, alloc, used in plan.windows
    ]
    return RenderReport(
        provider=provider,
        model=session.engine.model,
        budget=session.engine.tokens_total,
        target=plan.target,
        tokens=tokens,
        tokens_estimated=plan.total_after + FRAMING_TOKENS,
        fits=tokens <= session.engine.tokens_total,
        windows=windows,
        timings=timings,
        faults=(session.engine.setup_faults if session.turn == 0 else [])
        + [f.to_dict() for f in state.faults],
        shadowed=state.shadowed,
        compactions=state.compactions,
        _columns=_LazyColumns(plan),
        _origins=_Origins(origins),
        _window_names=session.engine.windows,
        _extra=state.extra,
        _guarded=session._guarded,
    )


class _LazyColumns:
    """Fetches the plan's per-grain columns only when the report is read."""

    __slots__ = ("_plan",)

    def __init__(self, plan: Any) -> None:
        self._plan = plan

    def __iter__(self) -> Any:
        return iter(self._plan.decisions())


class _Origins(dict[str, str]):
    """Origins of context grains; anything else came from the transcript."""

    def __missing__(self, key: str) -> str:
        return "transcript"

    def get(self, key: str, default: str | None = None) -> str:  # type: ignore[override]
        return self[key]
