"""The high-water mark of compaction in a render (docs/compaction.md).

Once the plan passes its target, the trim ladder would soft-trim, hard-trim and placeholder
messages the provider has already seen, breaking its prompt cache on every render. Instead the
render compacts down to the low-water mark and plans again, so between two compactions each
payload is the previous one plus what was added at its end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .compact import SUMMARY_ID, compact
from .pipeline import Assembled, plan_within
from .sync import sync_context

if TYPE_CHECKING:
    from ..collect.registry import Registry
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog

__all__ = ("compact_at_high_water",)


async def compact_at_high_water(
    state: SessionState,
    config: RenderConfig,
    registry: Registry,
    assembled: Assembled,
    log: TurnLog,
) -> Assembled:
    """The high-water mark: when the plan had to trim (its total passed the target) and no
    compaction ran in this render, compact down to the low-water mark and plan again.

    The trim ladder's soft trims, hard trims and placeholders change messages already sent,
    which breaks the provider's prompt cache on every render once the budget is full. Compacting
    at the target instead leaves the ladder nothing to do until the history has grown back to
    it: between two compactions each payload is the previous one plus what was added at its
    end. A failed compaction (timed out, empty, rejected by the gate) writes nothing; the plan
    of this render then stands as the ladder made it.
    """
    plan = assembled.plan
    if plan.total_before <= plan.target or log.compactions:
        return assembled  # under the mark, or compacted (or tried and failed) in this render
    protected = [g for g in assembled.by_id.values() if g.protected]
    if not await compact(state, config, registry, [], log, protected=protected, plan=plan):
        return assembled
    summary = state.summary
    context = [g for g in assembled.by_id.values() if summary is None or g.node_id != SUMMARY_ID]
    context += [summary] if summary is not None else []
    sync_context(state, config, registry, context)
    return Assembled(plan_within(state, config), {g.node_id: g for g in context})
