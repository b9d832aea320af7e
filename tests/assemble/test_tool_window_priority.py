"""In a tool window (``rag.``, ``task.``, ``act.`` and unknown prefixes) the soft trim took
context grains by their fused order, most important first: a priority-1 document was cleared
while a priority-900 one stayed whole. Least important first, as everywhere else."""

from __future__ import annotations

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("prefix", ["rag", "task", "custom"])
@pytest.mark.parametrize("first", ["hi", "lo"])
async def test_the_less_important_grain_is_cut_first(prefix: str, first: str) -> None:
    cut_any = False
    for total in (250, 300, 350, 400):
        engine = ContextEngine("gpt-4o", Budget(total=total))
        async with engine.session("p") as s:
            grains = {
                "hi": ContextGrain(f"{prefix}.hi", content="HIGH " * 150, priority=1),
                "lo": ContextGrain(f"{prefix}.lo", content="LOW " * 150, priority=900),
            }
            for name in (first, "lo" if first == "hi" else "hi"):
                s.add(grains[name])
            await s.user_message("hi")
            out = await s.render()
        after = {d.node_id: d.tokens_after for d in out.report}
        hi, lo = after[f"{prefix}.hi"], after[f"{prefix}.lo"]
        assert hi >= lo, (total, hi, lo)
        cut_any = cut_any or lo < 153
    assert cut_any  # the budgets do cut
