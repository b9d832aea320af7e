"""Where a compacting render lands, how often compaction runs, and the back-off after a
failed one.

A render compacts at the high-water mark (the plan's target) down to
``CompactionConfig.render_low_water`` of the target, measured with the actual summary: the
render uses the room it has (the render contract: ≥ 90 % of the target whenever content was
cut) and leaves the rest for the next renders to grow into. A summarizer that fails is not
called again on every render past the mark.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.assemble.compact import MIN_ROOM, RETRY_RENDERS
from ctxengine.compaction import CompactionConfig

from .test_engine_compaction import FAST, rules, turn


class Switchable:
    """A summarizer that raises while ``broken`` is set, else writes a short summary."""

    def __init__(self) -> None:
        self.broken = True
        self.calls = 0

    async def summarize(self, messages: Any, *, instructions: str, max_tokens: int) -> str:
        self.calls += 1
        if self.broken:
            raise RuntimeError("model unavailable")
        return "The user asked for a series of small fixes; each was patched and tested."


def test_a_failing_summarizer_is_not_called_on_every_render_past_the_mark() -> None:
    summarizer = Switchable()
    attempts: list[int] = []
    deferred: list[str] = []
    written: list[int] = []

    async def main() -> None:
        engine = ContextEngine("gpt-4o", Budget(total=1500), summarizer=summarizer, compaction=FAST)
        async with engine.session("s") as s:
            s.add(rules())
            for i in range(40):
                if i == 30:
                    summarizer.broken = False  # the model is back
                await turn(s, i)
                out = await s.render("openai")
                assert out.tokens <= 1500
                for c in out.report.compactions:
                    if c.get("stage") == "deferred":
                        deferred.append(c["error"])
                        assert not c["ok"]
                    else:
                        attempts.append(i)
                if any(c["ok"] for c in out.report.compactions):
                    written.append(i)

    anyio.run(main)
    failed = [i for i in attempts if i < 30]
    past_mark = [i for i in range(30) if i >= min(failed)]
    # backed off: 4, 8, 16 renders after the 1st, 2nd, 3rd failure (or growth of the history)
    assert 2 <= len(failed) < len(past_mark) // 2, (failed, past_mark)
    assert all(b - a >= 2 for a, b in pairwise(failed)), failed
    assert deferred and all(d.startswith("compaction deferred after failure") for d in deferred)
    # once the summarizer works again, the next due attempt writes the summary
    assert written and written[0] <= 30 + RETRY_RENDERS * 8


def test_at_a_tiny_budget_compaction_does_not_run_on_every_render() -> None:
    compacted: list[bool] = []

    async def main() -> None:
        engine = ContextEngine("gpt-4o", Budget(total=600))
        async with engine.session("s") as s:
            s.add(rules())
            for i in range(26):
                await turn(s, i)
                out = await s.render("anthropic")
                assert out.tokens <= 600
                compacted.append(any(c["ok"] for c in out.report.compactions))

    anyio.run(main)
    after = compacted[compacted.index(True) :]
    assert sum(after) >= 5  # the budget is full: compaction does run
    # each compaction leaves MIN_ROOM tokens (a turn here) for the next render to grow into
    assert not any(a and b for a, b in pairwise(after)), compacted
    assert MIN_ROOM >= 64


@pytest.mark.parametrize("low", [0.0, 1.5])
def test_the_render_low_water_mark_is_a_fraction(low: float) -> None:
    with pytest.raises(ValueError, match=rf"render_low_water={low}; expected a fraction"):
        CompactionConfig(render_low_water=low)
