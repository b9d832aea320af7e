"""Paired A/B of two builds of ctxengine on the render and counting scenarios of the benches.

    python benches/ab.py OLD=path/to/old/python NEW=path/to/new/python [--ops ...] [--rounds N]

Each side runs in its own process (``PYTHONPATH`` set to its ``python/`` folder, holding its
built extension); the driver asks both for one operation at a time, in random order, so both
see the same machine load, and reports the median of the per-round ratios NEW/OLD. On a
shared or loaded machine this is much steadier than two benchmark runs one after the other;
``--clock cpu`` measures each round in the process's CPU time instead of wall time (steadier
still when other jobs take the cores).

Operations: ``warm:real`` / ``cold:real`` (the 914-message pi session into 32k, as in
``test_bench_engine.py``), ``warm:syn1k`` / ``warm:syn10k`` / ``warm:syn100k`` /
``cold:syn1k`` / ``cold:syn10k`` / ``cold:syn100k`` (the synthetic sessions of the scaling
benchmarks; a cold round is a new engine and session, ``extend``, ``user_message`` and
``render`` with the count cache and the compaction's caches of its readings cleared, on
either side), a warm one for another provider with its name after
a ``+`` (``warm:real+anthropic``, with 4 cache breakpoints; ``warm:syn1k+gemini``, ...),
``count:o200k`` (a fresh 400 kB text, cache off) and
``lc:real`` / ``lc:syn1k`` / ... (a warm round of the memoized LangChain peer on that session:
the same code on both sides, so its line reads as the peer's time next to ours in the same
run). Sessions are
built when an operation first needs them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT.parent / "shared/data/transcripts/pi-openclaw-session/large-session.jsonl"
BUDGET = 32_000
OPS = ("warm:real", "warm:syn1k", "warm:syn10k", "count:o200k", "cold:real", "cold:syn1k")
#: Also available, not run by default (a round of ``cold:syn100k`` takes seconds).
MORE_OPS = (
    "warm:syn100k",
    "cold:syn10k",
    "cold:syn100k",
    "lc:real",
    "warm:real+anthropic",
    "warm:real+gemini",
    "warm:real+openai-responses",
)
_SIZES = {"syn1k": 1_000, "syn10k": 10_000, "syn100k": 100_000}


def _worker() -> None:  # pragma: no cover - runs in the child processes
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benches")]
    from ctxengine import Budget, ContextEngine, Tokenizer
    from ctxengine import clear_cache as clear_counts
    from ctxengine.compaction import facts
    from ctxengine.transcript import Message, Transcript, load
    from test_bench_engine import _synthetic as synthetic
    from test_bench_engine import langchain_warm_round

    def clear_cache() -> None:
        """Every cache of what was read from texts. A build before ``clear_cache`` emptied the
        compaction's caches too kept them as ``lru_cache``s, warm from the rounds before:
        emptied here as well, so that both sides of a cold round start from nothing."""
        clear_counts()
        for name in ("_cached_identifiers", "_shell_files", "_failure_line"):
            getattr(getattr(facts, name, None), "cache_clear", lambda: None)()

    loop = asyncio.new_event_loop()
    clock = (
        time.process_time if os.environ.get("CTXENGINE_AB_CLOCK") == "cpu" else time.perf_counter
    )

    opened: list[Any] = []  # context managers of the open sessions (a dropped one closes its
    # session when the collector finds it, in whatever round is running then)

    async def open_session(messages: Any) -> Any:
        engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
        cm = engine.session("bench")
        session = await cm.__aenter__()
        opened.append(cm)
        session.extend(messages)
        await session.user_message("What is the status of the task?")
        return session

    real = load(SESSION)
    sources: dict[str, Any] = {"real": real}
    warm: dict[tuple[str, str], Any] = {}

    def source(name: str) -> Any:
        if name not in sources:
            sources[name] = synthetic(_SIZES[name])
        return sources[name]

    def options(provider: str) -> dict[str, Any]:
        return {"cache_breakpoints": 4} if provider == "anthropic" else {}

    def warm_session(name: str, provider: str) -> Any:
        if (name, provider) not in warm:
            session = warm[name, provider] = loop.run_until_complete(open_session(source(name)))
            loop.run_until_complete(session.render(provider, **options(provider)))
        return warm[name, provider]

    peer: dict[str, Any] = {}
    text = "\n".join(m.text for m in real.messages)[:400_000]
    tok = Tokenizer("o200k_base")
    rounds = [0]

    def run(op: str) -> float:
        kind, name = op.split(":")
        if kind == "lc":
            if name not in peer:
                messages = source(name)
                if isinstance(messages, list):  # a synthetic session: its messages
                    messages = Transcript(tuple(messages), source_format="synthetic")
                peer[name] = langchain_warm_round(messages)[0]
            t = clock()
            peer[name]()
            return clock() - t
        if kind == "count":
            rounds[0] += 1
            fresh = text[rounds[0] % 97 :] + str(rounds[0])
            t = clock()
            tok.count(fresh, cache=False)
            return clock() - t
        if kind == "cold":
            messages = source(name)

            async def cold() -> Any:
                clear_cache()
                return await (await open_session(messages)).render()

            t = clock()
            loop.run_until_complete(cold())
            took = clock() - t
            loop.run_until_complete(opened.pop().__aexit__(None, None, None))  # untimed
            return took
        name, _, provider = name.partition("+")
        provider = provider or "openai"
        session = warm_session(name, provider)

        async def again() -> Any:
            session.extend([Message.assistant("ok"), Message.user("one more question")])
            return await session.render(provider, **options(provider))

        t = clock()
        loop.run_until_complete(again())
        return clock() - t

    print("ready", flush=True)
    for line in sys.stdin:
        print(run(line.strip()), flush=True)


def _side(python_path: str, clock: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=python_path, CTXENGINE_AB_CLOCK=clock)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the side at {python_path} did not start")
    return proc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="NAME=PYTHONPATH of the baseline build")
    parser.add_argument("new", help="NAME=PYTHONPATH of the build compared with it")
    parser.add_argument(
        "--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS + MORE_OPS)}"
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or the process's CPU time (steadier when other jobs share the cores; "
        "it adds the time of every thread, so multi-threaded counting weighs more)",
    )
    args = parser.parse_args(argv)
    sides = dict(s.split("=", 1) for s in (args.old, args.new))
    names = list(sides)
    procs = {name: _side(path, args.clock) for name, path in sides.items()}
    rng = random.Random(0)

    def once(name: str, op: str) -> float:
        proc = procs[name]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(op + "\n")
        proc.stdin.flush()
        return float(proc.stdout.readline())

    for op in args.ops.split(","):
        times: dict[str, list[float]] = {n: [] for n in names}
        ratios = []
        for _ in range(3):
            for n in names:
                once(n, op)
        for _ in range(args.rounds):
            order = names[:]
            rng.shuffle(order)
            got = {n: once(n, op) for n in order}
            for n in names:
                times[n].append(got[n])
            ratios.append(got[names[1]] / got[names[0]])
        med = {n: 1e3 * statistics.median(v) for n, v in times.items()}
        print(
            f"{op:12} {names[0]} {med[names[0]]:9.3f} ms   {names[1]} {med[names[1]]:9.3f} ms   "
            f"{names[1]}/{names[0]} {statistics.median(ratios):.3f} (median of paired ratios)",
            flush=True,
        )
    for proc in procs.values():
        proc.kill()


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker()
    else:
        main()
