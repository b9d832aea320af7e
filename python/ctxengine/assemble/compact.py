"""Ladder step 3 as the engine runs it today: summarize the turns the plan could not keep."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _core
from ..grain import ContextGrain
from .report import GrainDecision

if TYPE_CHECKING:
    from ..collect.registry import Registry
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog

__all__ = ("MAX_COMPACTIONS", "compact")

MAX_COMPACTIONS = 3


def _merge_summaries(config: RenderConfig, previous: str, text: str) -> str:
    """``previous`` then ``text``, dropping the oldest lines of ``previous`` while the whole
    would pass the summary window's share of the target. Appending without bound would
    eventually fold the summary to a stand-in, losing everything compaction kept."""
    budget = config.budget
    share = budget.windows[budget.window_of("mem.summary")]
    limit = int(config.tokens_total * budget.pretrim_ratio * share)
    lines = previous.splitlines()
    counts = config.tokenizer.count_many(lines)
    total = config.tokenizer.count(text) + sum(counts) + len(lines)
    drop = 0
    while drop < len(lines) and total > limit:
        total -= counts[drop] + 1
        drop += 1
    return "\n".join([*lines[drop:], text])


def _summary_grain(text: str, turns: list[int]) -> ContextGrain:
    return ContextGrain(
        "mem.summary",
        "compaction",
        text,
        priority=50,
        lifespan="session",
        meta={"label": "summary of earlier turns", "turns": len(turns)},
    )


async def compact(
    state: SessionState, config: RenderConfig, registry: Registry, turns: list[int], log: TurnLog
) -> bool:
    """Summarize the history turns the plan could not keep into the session summary grain.

    On failure nothing is written: the turns stay dropped for this render only.
    """
    doomed = [
        i for i in state.items.values() if i.turn in set(turns) and i.kind != _core.KIND_CONTEXT
    ]
    messages = [state.messages[i] for i in sorted({i.index for i in doomed})]
    previous = state.summary.text if state.summary is not None else ""
    try:
        text = await config.summarizer.summarize(messages, previous)
    except Exception as exc:  # a summarizer fault is reported, never fatal
        log.compactions.append({"turns": turns, "ok": False, "error": repr(exc)})
        return False
    if previous:
        text = _merge_summaries(config, previous, text)
    state.summary = _summary_grain(text, turns)
    state.store(state.summary, registry.rank("compaction"))
    reason = f"summarized into mem.summary with {len(messages)} earlier messages"
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
    log.compactions.append(
        {"turns": turns, "ok": True, "messages": len(messages), "summary_chars": len(text)}
    )
    return True


def _forget(state: SessionState, ids: list[str]) -> None:
    state.asm.remove(ids)
    for node_id in ids:
        del state.items[node_id]
        state.overrides.pop(node_id, None)
        state.stored.pop(node_id, None)  # e.g. a compressed copy of a compacted result
        state.guarded.pop(node_id, None)
    state.compacted.update(ids)
