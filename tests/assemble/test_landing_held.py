"""A landing's held tokens of a choice (the summarized turns' sums, before and after the plan's
trims) from its prefix sums equal the sums over the chosen turns themselves."""

from __future__ import annotations

import random

from ctxengine.assemble.compact import _Landing


def _direct(land: _Landing, k: int) -> tuple[int, int]:
    turns = land.turns(k)
    return sum(land.size[t] for t in turns), sum(land.after[t] for t in turns)


def test_held_equals_the_sums_over_the_chosen_turns() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 40)
        turns = list(range(n))
        forced = sorted(rng.sample(turns, rng.randint(0, n // 3)))
        order = [t for t in turns if t not in forced]
        size = {t: rng.randint(0, 500) for t in turns}
        freed = [0]
        for t in order:
            freed.append(freed[-1] + size[t])
        land = _Landing({t: [] for t in turns}, forced, order, 10_000, freed, size)
        land.after.update({t: rng.randint(0, size[t]) for t in turns})
        for _ in range(5):
            land.kept = set(rng.sample(turns, rng.randint(0, n // 2)))
            for k in range(len(order) + 1):
                assert land.held(k, None) == _direct(land, k)
