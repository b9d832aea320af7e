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

The results compaction summarized are no longer sent: the plan counts each as the placeholder
(:func:`_summarized`), and their prune records are dropped when they are summarized
(:func:`forget_pruned`), so the state and every snapshot of it hold records of the live
history only.

It runs only when :attr:`~.guard.PruneSettings.in_render` (one of those options is set).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..transcript.model import Message, Text, ToolResult, Transcript
from .guard import plan_prune, replace_results, result_text, turn_cut
from .history import KIND
from .report import GrainDecision

if TYPE_CHECKING:
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog
    from .history import HistoryItem

__all__ = ("apply_prune_options", "block_of_result", "clock", "forget_pruned")

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


def block_of_result(message: Message, position: int) -> int | None:
    """The block index of the ``position``-th tool result of ``message`` (None: none)."""
    seen = -1
    for k, block in enumerate(message.blocks):
        if isinstance(block, ToolResult):
            seen += 1
            if seen == position:
                return k
    return None


def forget_pruned(state: SessionState, items: Iterable[HistoryItem]) -> None:
    """Drop what the prune options recorded of ``items``, history compaction summarized:
    they are never sent again and the plan counts a summarized result as the placeholder
    whatever was recorded (:func:`_summarized`), so the records would only make every later
    snapshot larger."""
    pruned, results = state.pruned, state.pruned_results
    if not pruned and not results:
        return
    tool_result = KIND["tool_result"]
    for item in items:
        pruned.pop(item.node_id, None)
        if item.kind == tool_result:
            k = block_of_result(state.messages[item.index], item.result)
            if k is not None:
                results.pop((item.index, k), None)


def _summarized(
    state: SessionState, live: Mapping[tuple[int, int], str], placeholder: str
) -> dict[tuple[int, int], ToolResult]:
    """The tool results compaction summarized, by (message index, block index), each as the
    placeholder: they are not sent, so the thresholds do not count their text, and the plan
    changes none of them (what was recorded of them before they were summarized does not
    matter, so it is not kept). ``live``: (message index, result position) of the live
    tool-result items."""
    at = state.compacted_at
    indices = {at[n] for n in state.compacted if n in at}
    out: dict[tuple[int, int], ToolResult] = {}
    for index in sorted(indices):
        message = state.messages[index]
        if message.role != "tool":
            continue
        position = -1
        for k, block in enumerate(message.blocks):
            if isinstance(block, ToolResult):
                position += 1
                if (index, position) not in live:
                    out[(index, k)] = dataclasses.replace(block, content=(Text(placeholder),))
    return out


def _prune(state: SessionState, config: RenderConfig, log: TurnLog, cut: tuple[int, int]) -> None:
    start, stop = cut
    s = config.prune
    now = clock()
    cache_age = None if state.rendered_at is None else now - state.rendered_at
    state.rendered_at = now
    by_position = {
        (i.index, i.result): i.node_id
        for i in state.items.values()
        if i.kind == KIND["tool_result"]
    }
    # The transcript the model sees: earlier prunes applied, the results compaction summarized
    # as the placeholder, the dropped turns left out.
    replaced = {**state.pruned_results, **_summarized(state, by_position, s.placeholder)}
    messages = replace_results(Transcript(tuple(state.messages)), replaced).messages
    kept = Transcript((*messages[:start], *messages[stop:]))
    new, changes = plan_prune(kept, config.tokens_total, s, cache_age=cache_age)
    if not new:
        return
    shift = stop - start

    def source(i: int) -> int:
        return i if i < start else i + shift

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
