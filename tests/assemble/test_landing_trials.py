"""The trials of a compaction's landing (``ctxengine.assemble.compact._choose``): summaries
measured to find the fewest turns whose rest plus the summary lands at the low-water mark.
A cold render of the real 914-message pi session into 32k takes its first summary there (a
summary of 760 messages): each trial is a pass over the newest summarized turns, a
millisecond or two of a render of about 25."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine, clear_cache
from ctxengine.assemble import compact as C
from ctxengine.transcript import Message, load
from transcript.helpers import PI


@pytest.fixture(scope="module")
def pi() -> list[Message]:
    return list(load(PI).messages)


def _trials(monkeypatch: pytest.MonkeyPatch, messages: list[Message]) -> list[tuple[int, bool]]:
    """A cold render of ``messages`` into 32k: each summary measured by its landing, as the
    choice it was measured for and whether it landed at the mark (the rest and the summary
    within the low-water mark, as the landing reads a choice that fits)."""
    seen: list[tuple[int, bool]] = []
    summarize = C._summarize

    async def measured(
        state: Any, config: Any, land: Any, k: int, plan: Any, *args: Any, **kwargs: Any
    ) -> Any:
        result = await summarize(state, config, land, k, plan, *args, **kwargs)
        fits = result.ok and land.rest(k) + result.summary_tokens <= C._low(config, plan)
        seen.append((k, fits))
        return result

    monkeypatch.setattr(C, "_summarize", measured)

    async def render() -> None:
        clear_cache()
        engine = ContextEngine("gpt-4o", Budget(total=32_000))
        async with engine.session("trials") as session:
            session.extend(messages)
            await session.user_message("What is the status of the task?")
            out = await session.render()
            assert session._state.summary is not None and out.tokens <= 32_000

    anyio.run(render)
    return seen


def test_no_trial_summarizes_more_turns_than_one_that_landed(
    monkeypatch: pytest.MonkeyPatch, pi: list[Message]
) -> None:
    """Once a choice lands at the mark, the landing takes the fewest turns that do: a choice
    of more turns is never measured after it (the landing chose the smaller one anyway)."""
    trials = _trials(monkeypatch, pi)
    assert trials
    for n, (k, fits) in enumerate(trials):
        if fits:
            assert all(later <= k for later, _ in trials[n + 1 :]), trials


def test_a_first_summary_lands_within_a_few_turns_of_its_first_trial(
    monkeypatch: pytest.MonkeyPatch, pi: list[Message]
) -> None:
    """The first trial is chosen for a summary of at least the sections of the stretch it
    summarizes (requests, failures, files), not a 128-token guess: it falls within a few
    turns of the landing (the guess's fell 16 turns short: turns 371, 384, 387, the first
    summary alone being 3,500 tokens), and the cut lands after two moves at most (381, 388,
    389: each move summarizes a few more turns, whose failure lines, with the digests of
    their cut calls, make the summary a little larger than the one it was moved by)."""
    trials = _trials(monkeypatch, pi)
    assert len(trials) <= 3, trials
    assert trials[-1][1] and trials[-1][0] - trials[0][0] <= 10, trials
