"""The prune options of the engine's ladder: tool allow/deny lists, TTL and a history turn limit.

:func:`apply_prune_options` runs in the assemble phase, before the history is synced to the
core. It applies to the session's history items exactly what :func:`~.guard.limit_history_turns`
and :func:`~.guard.prune_tool_results` compute for its transcript (the same code, via
:func:`~.guard.turn_cut` and :func:`~.guard.plan_prune`):

- ``max_turns``: items before the last *n* user turns (the leading system messages excepted)
  leave the assembly; each is reported ``dropped`` with stage ``max_turns``.
- ``allow``/``deny``/``ttl_seconds``/``ttl_turns`` with the soft-trim and hard-clear
  thresholds: results of the tools that may be pruned are soft-trimmed, cleared or expired to
  the placeholder; each is reported with stage ``prune``. A pruned result stays pruned in later
  renders, so the prefix already sent does not change back.

It runs only when :attr:`~.guard.PruneSettings.in_render` (one of those options is set).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..transcript.model import ToolResult, Transcript
from .guard import plan_prune, replace_results, result_text, turn_cut
from .history import KIND
from .report import GrainDecision

if TYPE_CHECKING:
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog

__all__ = ("apply_prune_options", "clock")

#: Seconds since the epoch; a module attribute so the TTL can be tested without sleeping.
clock = time.time


def _limit(state: SessionState, config: RenderConfig, log: TurnLog) -> tuple[int, int]:
    """Drop the items ``max_turns`` cuts; the dropped message range ``(start, stop)``."""
    n = config.prune.max_turns
    found = None if n is None else turn_cut(state.messages, n)
    if found is None:
        return 0, 0
    start, stop, turns = found
    fresh = [
        i.node_id
        for i in state.items.values()
        if start <= i.index < stop and i.node_id not in state.limited
    ]
    count = config.tokenizer.count
    for node_id in fresh:
        item = state.items[node_id]
        state.limited[node_id] = state.asm.tokens(node_id) or count(item.text) + item.overhead
    state.asm.remove(fresh)
    budget = config.budget
    reason = f"before the last {n} user turns (max_turns={n}; {turns} turns dropped)"
    for node_id, tokens in state.limited.items():
        window = budget.window_of(node_id)
        log.extra.append(
            GrainDecision(
                node_id, "transcript", window, "dropped", "dropped", "max_turns", reason, tokens, 0
            )
        )
    return start, stop


def _prune(state: SessionState, config: RenderConfig, log: TurnLog, cut: tuple[int, int]) -> None:
    start, stop = cut
    s = config.prune
    now = clock()
    cache_age = None if state.rendered_at is None else now - state.rendered_at
    state.rendered_at = now
    # The transcript the model sees: earlier prunes applied, the dropped turns left out.
    messages = replace_results(Transcript(tuple(state.messages)), state.pruned_results).messages
    kept = Transcript((*messages[:start], *messages[stop:]))
    new, changes = plan_prune(kept, config.tokens_total, s, cache_age=cache_age)
    if not new:
        return
    shift = stop - start

    def source(i: int) -> int:
        return i if i < start else i + shift

    by_position = {
        (i.index, i.result): i.node_id
        for i in state.items.values()
        if i.kind == KIND["tool_result"] and i.index >= stop
    }
    count = config.tokenizer.count
    budget = config.budget
    for (i, k), result in new.items():
        index = source(i)
        message = state.messages[index]
        position = sum(isinstance(b, ToolResult) for b in message.blocks[:k])
        node_id = by_position.get((index, position))
        if node_id is None:
            continue
        text = result_text(result)
        before = state.items[node_id].text
        state.pruned[node_id] = text
        state.pruned_results[(index, k)] = result
        state.dirty.add(node_id)
        change = next(c for c in reversed(changes) if c.index == i and c.call_id == result.call_id)
        cleared = change.action != "soft_trim"
        log.extra.append(
            GrainDecision(
                node_id,
                "transcript",
                budget.window_of(node_id),
                "kept",
                "cleared" if cleared else "trimmed",
                "prune",
                f"{change.action}: {change.detail}",
                count(before),
                count(text),
            )
        )


def apply_prune_options(state: SessionState, config: RenderConfig, log: TurnLog) -> None:
    """Apply the engine's prune options to the session's history items (see the module)."""
    if not config.prune.in_render:
        return
    _prune(state, config, log, _limit(state, config, log))
