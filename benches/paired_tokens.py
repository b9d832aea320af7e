"""Paired, interleaved ratios of ctxengine's counter against toktok-rs on fresh text.

    PYTHONPATH=python python benches/paired_tokens.py [--rounds 15] [--corpus transcripts code]

On a shared machine two benchmark runs one after the other see different loads; here every
round times both sides back to back, in alternating order, on two fresh rotations of the same
corpus (new ``str`` objects: each side pays CPython's UTF-8 conversion, as a real caller
does), and the report is the median of the per-round ratios. ctxengine's cache is emptied
before its side, so each of its counts is a miss through the default ``count`` (hash, count,
insert). Every round also checks that both sides gave the same count.

Two clocks per ratio: wall time, and CPU time (the calling thread's for one thread, the whole
process's for a batch). On a loaded machine the wall ratio mixes in the other jobs; the CPU
ratio of one thread does not. For a batch the CPU ratio is the *work* of the parallel count
relative to the serial one (1.00 = no work added by parallelism); its wall speedup only means
something with both cores free.

Other jobs on the machine are measured too, per timed call, from ``/proc`` (Linux): the time
this process's counting threads waited for a core while runnable (scheduler run-queue delay)
plus the time the hypervisor took the vCPUs away (steal), as a fraction of the wall time. A round is
*clean* when these waits stayed under 5 % in both of its timed calls; the batch rows also give
the medians over the clean rounds, the only wall ratios that say what two free cores do.
``--min-clean N`` keeps running batch rounds (up to ``--max-rounds``) until N were clean. On a
machine whose other jobs never leave both cores free, run the script with a higher scheduling
priority than theirs (with ``sched_autogroup``, in its own session:
``setsid sh -c 'echo -20 > /proc/self/autogroup; exec python benches/paired_tokens.py'``):
the other jobs then yield the cores while it counts, and the waits show whether they did.

Corpora and encodings as in ``test_bench_tokens.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benches")]

import toktok  # noqa: E402

import ctxengine  # noqa: E402
from test_bench_tokens import CHUNK, corpus, rotations  # noqa: E402

Timed = tuple[float, float, int, float]
"""Wall seconds, CPU seconds, result, and waits (run-queue delay + steal) as a fraction of the
wall time (0 when ``/proc`` is not there)."""

CLEAN_WAIT = 0.05


def _ticks(field: slice) -> float:
    """Sum of ``field`` of the machine's line in ``/proc/stat``, in seconds."""
    with open("/proc/stat") as f:
        values = f.readline().split()[1:]
    return sum(int(v) for v in values[field]) / os.sysconf("SC_CLK_TCK")


def _threads() -> dict[str, tuple[int, int]]:
    """Per thread of this process: (ns on a core, ns runnable but waiting for one)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran, waited = f.read().split()[:2]
            out[tid] = (int(ran), int(waited))
        except (OSError, ValueError):
            continue  # the thread exited meanwhile
    return out


Snapshot = tuple[dict[str, tuple[int, int]], float]


def snapshot() -> Snapshot:
    try:
        # /proc/stat's first line: user nice system idle iowait irq softirq steal ...
        return _threads(), _ticks(slice(7, 8))
    except (OSError, ValueError):
        return {}, 0.0


def waits(before: Snapshot, after: Snapshot, wall: float) -> float:
    """Seconds the counting threads waited for a core between the snapshots, plus steal.

    A thread that ran under a tenth of ``wall`` is not counting: rayon wakes a spare worker
    that stays runnable, yielding, for the whole batch while using well under 1 % of a core.
    """
    total = after[1] - before[1]
    for tid, (ran, waited) in after[0].items():
        ran0, waited0 = before[0].get(tid, (0, 0))
        if (ran - ran0) * 1e-9 >= wall / 10:
            total += (waited - waited0) * 1e-9
    return total


def timed(fn: Callable[[], int], clock: Callable[[], float]) -> Timed:
    s, c, w = snapshot(), clock(), time.perf_counter()
    n = fn()
    wall, cpu = time.perf_counter() - w, clock() - c
    return wall, cpu, n, waits(s, snapshot(), wall) / wall


def clean(*runs: Timed) -> bool:
    """No other job kept this process from a core for a measurable share of ``runs``."""
    return all(t[3] < CLEAN_WAIT for t in runs)


def toktok_sum(name: str, threads: int, texts: list[str]) -> int:
    return sum(int(n) for n in toktok.batch_count(texts, name, threads=threads))


def fresh(texts: list[str]) -> list[str]:
    """Copies that are new ``str`` objects (no UTF-8 form cached yet)."""
    return [t.encode().decode() for t in texts]


def pair(
    a: Callable[[], int], b: Callable[[], int], first: bool, clock: Callable[[], float]
) -> tuple[Timed, Timed]:
    """Time ``a`` and ``b`` back to back, ``a`` first when ``first``."""
    if first:
        ta = timed(a, clock)
        return ta, timed(b, clock)
    tb = timed(b, clock)
    return timed(a, clock), tb


Ratio = tuple[float, float, bool, float]  # wall, CPU, clean round, the larger waits


def report(label: str, ratios: list[Ratio], clean_rows: bool = False) -> None:
    wall = statistics.median(r[0] for r in ratios)
    cpu = statistics.median(r[1] for r in ratios)
    lo, hi = min(r[1] for r in ratios), max(r[1] for r in ratios)
    print(f"{label:58s} wall {wall:5.2f}x   cpu {cpu:5.2f}x  (cpu min {lo:.2f} max {hi:.2f})")
    if not clean_rows:
        return
    quiet = [r for r in ratios if r[2]]
    if not quiet:
        waits = statistics.median(r[3] for r in ratios)
        print(f"{'':58s} clean rounds: 0 of {len(ratios)}; waits median {waits:.1%} of the wall")
        return
    walls = sorted(r[0] for r in quiet)
    print(
        f"{'':58s} clean rounds: {len(quiet)} of {len(ratios)}, wall median"
        f" {statistics.median(walls):.2f}x (min {walls[0]:.2f} max {walls[-1]:.2f}),"
        f" cpu {statistics.median(r[1] for r in quiet):.2f}x;"
        f" waits median {statistics.median(r[3] for r in ratios):.1%} of the wall"
    )


def single(kind: str, name: str, rounds: int) -> None:
    text = corpus(kind)
    tok = ctxengine.get_tokenizer(name)
    tok.count(text, cache=False)  # build the tables and warm both sides' pretoken caches
    toktok.batch_count([text], name, threads=1)
    rots = rotations(text, 2 * rounds)
    ratios = []
    for i in range(rounds):
        x, y = fresh([rots[2 * i], rots[2 * i + 1]])
        ctxengine.clear_cache()
        ours, theirs = pair(
            partial(tok.count, x),
            partial(toktok_sum, name, 1, [y]),
            i % 2 == 0,
            time.thread_time,
        )
        assert ours[2] == toktok.batch_count([x], name)[0]
        assert theirs[2] == tok.count(y, cache=False)
        waits = max(ours[3], theirs[3])
        ratios.append((theirs[0] / ours[0], theirs[1] / ours[1], clean(ours, theirs), waits))
    report(f"{kind} {name}: count vs toktok batch_count(threads=1)", ratios)


def batch(kind: str, name: str, rounds: int, min_clean: int, max_rounds: int) -> None:
    text = corpus(kind)
    tok = ctxengine.get_tokenizer(name)
    pieces = max(rounds, max_rounds)
    rots = rotations(text, pieces + 1)
    batches = [[t[i : i + CHUNK] for i in range(0, len(t), CHUNK)] for t in rots]
    tok.count_many(batches[-1], cache=False)  # start the pool, warm its pretoken caches
    toktok.batch_count(batches[-1], name, threads=2)
    ours_ratios: list[Ratio] = []
    theirs_ratios: list[Ratio] = []
    i = 0
    while i < rounds or (
        sum(r[2] for r in ours_ratios) < min_clean and i < max(rounds, max_rounds)
    ):
        xs, ys, zs, vs = (fresh(batches[i % pieces]) for _ in range(4))

        def loop(xs: list[str] = xs) -> int:
            ctxengine.clear_cache()
            return sum(tok.count(x) for x in xs)

        def many(ys: list[str] = ys) -> int:
            ctxengine.clear_cache()
            return sum(tok.count_many(ys))

        one, two = pair(loop, many, i % 2 == 0, time.process_time)
        assert one[2] == two[2]
        ours_ratios.append((one[0] / two[0], two[1] / one[1], clean(one, two), max(one[3], two[3])))
        t1, t2 = pair(
            partial(toktok_sum, name, 1, zs),
            partial(toktok_sum, name, 2, vs),
            i % 2 == 1,
            time.process_time,
        )
        assert t1[2] == t2[2] == one[2]
        theirs_ratios.append((t1[0] / t2[0], t2[1] / t1[1], clean(t1, t2), max(t1[3], t2[3])))
        i += 1
    n = len(batches[0])
    print(f"{'':58s} (batch: wall = speedup, cpu = work of 2 threads / 1)")
    report(f"{kind} {name}: {n} x 4KB count_many vs loop of count", ours_ratios, True)
    report(f"{kind} {name}: {n} x 4KB toktok threads=2 vs threads=1", theirs_ratios, True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--corpus", nargs="+", default=["transcripts", "code"])
    parser.add_argument("--encodings", nargs="+", default=["o200k_base", "cl100k_base"])
    parser.add_argument("--no-batch", action="store_true")
    parser.add_argument("--no-single", action="store_true")
    parser.add_argument("--min-clean", type=int, default=0, help="clean batch rounds wanted")
    parser.add_argument("--max-rounds", type=int, default=60, help="cap for --min-clean")
    args = parser.parse_args()
    print("ratios > 1: ctxengine faster (single thread) / parallel faster (batch)")
    for kind in args.corpus:
        for name in args.encodings:
            if not args.no_single:
                single(kind, name, args.rounds)
            if not args.no_batch:
                rounds = max(3, args.rounds // 2)
                batch(kind, name, rounds, args.min_clean, args.max_rounds)


if __name__ == "__main__":
    main()
