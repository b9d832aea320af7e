"""Ladder step 3 and ``Session.compact()``: the compaction pipeline run on a session.

The turns the plan could not keep (or, for :func:`compact_now`, the older part of the live
history) are summarized by :func:`ctxengine.compaction.compact` into the session summary: a
``mem.summary`` grain that the Rust plan counts in ``core_memory`` and that inject composes as
the first history message (user role, "summary of the earlier conversation"), never as system
text. An earlier summary is one of the summarized messages, so the pipeline merges it section
by section (a summary of summaries). A failed, empty or timed-out summary writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from .. import _core
from ..compaction import CompactionResult, compact_history, summary_message
from ..compaction import compact as compact_messages
from ..grain import ContextGrain
from ..transcript.model import Message
from .report import GrainDecision

if TYPE_CHECKING:
    from ..collect.registry import Registry
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog

__all__ = (
    "MAX_COMPACTIONS",
    "SUMMARY_ID",
    "SUMMARY_META",
    "compact",
    "compact_now",
    "summary_limit",
    "tail_start",
)

MAX_COMPACTIONS = 3
#: Node id of the session summary grain.
SUMMARY_ID: Final = "mem.summary"
#: Meta key marking the summary grain: inject composes it as a history message.
SUMMARY_META: Final = "compaction_summary"
#: Tokens kept free below the plan's target when the summary takes its room (the summary's
#: message framing and the count's estimate of the rendered text).
SUMMARY_SLACK: Final = 16


def summary_limit(config: RenderConfig) -> int:
    """The summary window's share of the target, in tokens (the summary's cap): at least 64, but
    never more than half the target (the summary is protected: at a tiny budget a larger one
    would leave no room for the latest request)."""
    budget = config.budget
    share = budget.windows[budget.window_of(SUMMARY_ID)]
    target = int(config.tokens_total * budget.pretrim_ratio)
    return max(min(64, target // 2), int(target * share))


def _summary_grain(result: CompactionResult, turns: Sequence[int]) -> ContextGrain:
    return ContextGrain(
        SUMMARY_ID,
        "compaction",
        result.summary,
        priority=50,
        lifespan="session",
        protected=True,  # capped below the low-water mark; the ladder must not cut requests
        meta={
            "label": "summary of the earlier conversation",
            "turns": len(turns),
            "replaced": len(result.replaced),
            SUMMARY_META: True,
        },
    )


def _previous(state: SessionState) -> list[Message]:
    """The earlier summary as a message, so the pipeline merges it (summary of summaries)."""
    summary = state.summary
    if summary is None or not summary.text:
        return []
    return [summary_message(summary.text, int(summary.meta.get("replaced", 0) or 0))]


def _latest_request(state: SessionState, indices: Sequence[int]) -> str | None:
    """The newest user request when it is among the summarized messages (it must survive)."""
    newest = next(
        (i for i in range(len(state.messages) - 1, -1, -1) if state.messages[i].role == "user"),
        -1,
    )
    return state.messages[newest].text if newest in set(indices) else None


def _protected(grains: Sequence[ContextGrain]) -> list[str]:
    return [g.text for g in grains if g.protected and g.text and g.node_id != SUMMARY_ID]


def _apply(
    state: SessionState,
    config: RenderConfig,
    registry: Registry,
    result: CompactionResult,
    doomed: Sequence[Any],
    turns: Sequence[int],
    log: TurnLog | None,
) -> None:
    """Write a successful compaction: the new summary grain, the summarized items forgotten."""
    state.summary = _summary_grain(result, turns)
    state.store(state.summary, registry.rank("compaction"))
    if log is not None:
        reason = f"summarized into {SUMMARY_ID} with {len(result.replaced)} earlier messages"
        for item in doomed:
            window = config.budget.window_of(item.node_id)
            tokens = state.asm.tokens(item.node_id) or 0
            log.extra.append(
                GrainDecision(
                    item.node_id,
                    "transcript",
                    window,
                    "dropped",
                    "dropped",
                    "compaction",
                    reason,
                    tokens,
                    0,
                )
            )
    _forget(state, [i.node_id for i in doomed])


def _entry(result: CompactionResult, turns: Sequence[int]) -> dict[str, Any]:
    return {"turns": list(turns), **result.entry(), "summary_chars": len(result.summary)}


def tail_start(state: SessionState, keep: int) -> int:
    """Message index where the protected tail starts: the last ``keep`` assistant turns, from
    the user message right before the oldest of them (``len(messages)`` when ``keep`` is 0).

    When other assistant messages lie between that user message and the oldest of them (an
    agent loop: one request, many tool steps), the tail starts at the oldest of them instead,
    so that a long loop can still be compacted; the request is then kept verbatim in the
    summary (the newest one as its latest request)."""
    messages = state.messages
    if keep <= 0:
        return len(messages)
    seen = 0
    for n in range(len(messages) - 1, -1, -1):
        if messages[n].role == "assistant":
            seen += 1
            if seen == keep:
                user = next((u for u in range(n, -1, -1) if messages[u].role == "user"), n)
                loop = any(messages[k].role == "assistant" for k in range(user + 1, n))
                return n if loop else user
    return 0


def _tokens(state: SessionState, node_ids: Sequence[str]) -> int:
    return sum(state.asm.tokens(n) or 0 for n in node_ids)


def _doomed(
    state: SessionState, config: RenderConfig, turns: Sequence[int], plan: Any
) -> tuple[list[Any], list[int]]:
    """The items to summarize: those of ``turns`` outside the protected tail, then (low-water
    mark) the oldest further turns until the rest would sit at ``low_water`` of its target
    less the summary's share, so the next renders grow at their end instead of compacting
    again."""
    start = tail_start(state, config.compaction.keep_assistant_turns)
    by_turn: dict[int, list[Any]] = {}
    for item in state.items.values():
        if item.kind != _core.KIND_CONTEXT and item.index < start:
            by_turn.setdefault(item.turn, []).append(item)
    chosen = {t for t in turns if t in by_turn}
    if plan is not None:
        low = int(plan.target * config.compaction.low_water)
        goal = plan.total_before - max(0, low - summary_limit(config))
        freed = sum(_tokens(state, [i.node_id for i in by_turn[t]]) for t in chosen)
        for t in sorted(by_turn):
            if freed >= goal:
                break
            if t not in chosen:
                chosen.add(t)
                freed += _tokens(state, [i.node_id for i in by_turn[t]])
    return [i for t in sorted(chosen) for i in by_turn[t]], sorted(chosen)


def _cap(
    state: SessionState, config: RenderConfig, doomed: Sequence[Any], plan: Any
) -> tuple[int, int | None]:
    """The summary's cap and room: its window's share, or more when the plan leaves more room
    below the low-water mark; and the room up to the plan's target the summary may take
    rather than drop a request (the next render then compacts again: a long session at a
    small budget compacts more often, and loses no request)."""
    share = summary_limit(config)
    if plan is None:
        return share, None
    rest = plan.total_before - _tokens(state, [i.node_id for i in doomed])
    rest -= _tokens(state, [SUMMARY_ID]) if state.summary is not None else 0
    cap = int(max(share, int(plan.target * config.compaction.low_water) - rest))
    return cap, max(cap, plan.target - rest - SUMMARY_SLACK)


async def compact(
    state: SessionState,
    config: RenderConfig,
    registry: Registry,
    turns: list[int],
    log: TurnLog,
    protected: Sequence[ContextGrain] = (),
    plan: Any = None,
) -> bool:
    """Summarize the history turns the plan could not keep into the session summary.

    The protected tail (``CompactionConfig.keep_assistant_turns``) is never summarized; with
    ``plan`` the oldest further turns are added down to the low-water mark. ``protected``
    grains' texts must survive in the summary (the pipeline's quality gate). On failure
    nothing is written (the state is as before); the turns stay dropped for this render only,
    as the plan decided, and the report's compaction entry says why.
    """
    doomed, turns = _doomed(state, config, turns, plan)
    if not doomed:
        return False
    indices = sorted({i.index for i in doomed})
    messages = _previous(state) + [state.messages[i] for i in indices]
    cap, room = _cap(state, config, doomed, plan)
    result = await compact_messages(
        messages,
        max_tokens=cap,
        room=room,
        summarizer=config.summarizer,
        tokenizer=config.tokenizer.count,
        protected=_protected(protected),
        latest_request=_latest_request(state, indices),
        config=config.compaction,
    )
    log.compactions.append(_entry(result, turns))
    if not result.ok or not result.summary:
        return False
    _apply(state, config, registry, result, doomed, turns, log)
    return True


async def compact_now(
    state: SessionState, config: RenderConfig, registry: Registry
) -> CompactionResult:
    """``Session.compact()``: compact the live history now, down to the low-water mark.

    The live history (the earlier summary, then every history message not yet compacted) goes
    through :func:`ctxengine.compaction.compact_history` with the render budget; its protected
    tail is never compacted. On success the summarized items are forgotten and the summary
    replaced; otherwise the state is untouched.
    """
    indices = sorted(
        {
            i.index
            for i in state.items.values()
            if i.kind != _core.KIND_CONTEXT and state.messages[i.index].role != "system"
        }
    )
    previous = _previous(state)
    messages = previous + [state.messages[i] for i in indices]
    protected = _protected([s.grain for s in state.stored.values()])
    protected += _protected(state.queued)
    result = await compact_history(
        messages,
        budget=config.tokens_total,
        summarizer=config.summarizer,
        tokenizer=config.tokenizer.count,
        protected=protected,
        config=config.compaction,
    )
    if not result.ok or not result.summary:
        return result
    replaced = set(indices[: max(0, len(result.replaced) - len(previous))])
    doomed = [
        i for i in state.items.values() if i.index in replaced and i.kind != _core.KIND_CONTEXT
    ]
    turns = sorted({i.turn for i in doomed})
    _apply(state, config, registry, result, doomed, turns, None)
    return result


def _forget(state: SessionState, ids: list[str]) -> None:
    state.asm.remove(ids)
    for node_id in ids:
        del state.items[node_id]
        state.overrides.pop(node_id, None)
        state.stored.pop(node_id, None)  # e.g. a compressed copy of a compacted result
        state.guarded.pop(node_id, None)
    state.compacted.update(ids)
