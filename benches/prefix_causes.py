"""Where the prompt-cache prefix breaks fall, replaying every shared transcript.

    python benches/prefix_causes.py [--budgets 16000,64000] [--providers openai,anthropic]
                                    [--jobs 2]

Each session of the shared data set (the cases of the whole-data tests) is replayed as
``ctxengine replay`` does, one engine session per budget and provider, and each call whose
payload does not extend the one before is given its cause (:meth:`CallRow.break_cause`): a
compaction, the high-water mark (a low-water-mark trim), a step of a provider's media limit,
or elsewhere, which the engine should never produce. Prints the totals and every break
elsewhere; exits 1 when there is one. A session refused for its protected content alone
(``BudgetError`` at a tiny budget) is counted apart.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ctxengine import Budget, BudgetError, ContextEngine
from ctxengine.cli_replay import Run
from ctxengine.replay import replay
from transcript.helpers import named_transcripts

MODEL = "gpt-4.1"  # a 1M-token window, o200k_base: every budget of the sweep is accepted


def _case(args: tuple[int, int, str]) -> tuple[str, int, str, dict[str, Any] | None, list[int]]:
    index, budget, provider = args
    name, transcript = named_transcripts()[index]

    async def main() -> tuple[dict[str, Any] | None, list[int]]:
        engine = ContextEngine(MODEL, Budget(total=budget))
        run = Run(name, transcript, MODEL, provider, budget)
        try:
            async for step in replay(transcript, engine, provider=provider):
                run.add(step)
        except BudgetError:
            return None, []
        causes = zip(run.rows, run.break_causes(), strict=True)
        return run.summary(), [r.call for r, c in causes if c == "elsewhere"]

    summary, elsewhere = anyio.run(main)
    return name, budget, provider, summary, elsewhere


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="16000,64000")
    parser.add_argument("--providers", default="openai,anthropic")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    providers = args.providers.split(",")
    cases = [(i, b, p) for i in range(len(named_transcripts())) for b in budgets for p in providers]
    with Pool(args.jobs) as pool:
        results = pool.map(_case, cases)
    totals: Counter[str] = Counter()
    refused = 0
    for name, budget, provider, summary, elsewhere in results:
        if summary is None:
            refused += 1
            continue
        for key in ("calls", "compactions", "prefix_breaks"):
            totals[key] += summary[key]
        for key, value in summary.items():
            if key.startswith("prefix_breaks_"):
                totals[key] += value
        if elsewhere:
            print(f"elsewhere: {name} at {budget} for {provider}: calls {elsewhere}")
    print(f"{len(results)} replays ({refused} refused for their protected content alone)")
    for key, value in totals.items():
        print(f"{key}: {value:,}")
    return 1 if totals["prefix_breaks_elsewhere"] else 0


if __name__ == "__main__":
    sys.exit(main())
