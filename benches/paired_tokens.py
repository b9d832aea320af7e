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

Corpora and encodings as in ``test_bench_tokens.py``.
"""

from __future__ import annotations

import argparse
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

Timed = tuple[float, float, int]  # wall seconds, CPU seconds, result


def timed(fn: Callable[[], int], clock: Callable[[], float]) -> Timed:
    c, w = clock(), time.perf_counter()
    n = fn()
    return time.perf_counter() - w, clock() - c, n


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


def report(label: str, ratios: list[tuple[float, float]]) -> None:
    wall = statistics.median(r[0] for r in ratios)
    cpu = statistics.median(r[1] for r in ratios)
    lo, hi = min(r[1] for r in ratios), max(r[1] for r in ratios)
    print(f"{label:58s} wall {wall:5.2f}x   cpu {cpu:5.2f}x  (cpu min {lo:.2f} max {hi:.2f})")


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
        ratios.append((theirs[0] / ours[0], theirs[1] / ours[1]))
    report(f"{kind} {name}: count vs toktok batch_count(threads=1)", ratios)


def batch(kind: str, name: str, rounds: int) -> None:
    text = corpus(kind)
    tok = ctxengine.get_tokenizer(name)
    rots = rotations(text, rounds + 1)
    batches = [[t[i : i + CHUNK] for i in range(0, len(t), CHUNK)] for t in rots]
    tok.count_many(batches[-1], cache=False)  # start the pool, warm its pretoken caches
    toktok.batch_count(batches[-1], name, threads=2)
    ours_ratios, theirs_ratios = [], []
    for i in range(rounds):
        xs, ys, zs, vs = (fresh(batches[i]) for _ in range(4))

        def loop(xs: list[str] = xs) -> int:
            ctxengine.clear_cache()
            return sum(tok.count(x) for x in xs)

        def many(ys: list[str] = ys) -> int:
            ctxengine.clear_cache()
            return sum(tok.count_many(ys))

        one, two = pair(loop, many, i % 2 == 0, time.process_time)
        assert one[2] == two[2]
        ours_ratios.append((one[0] / two[0], two[1] / one[1]))
        t1, t2 = pair(
            partial(toktok_sum, name, 1, zs),
            partial(toktok_sum, name, 2, vs),
            i % 2 == 1,
            time.process_time,
        )
        assert t1[2] == t2[2] == one[2]
        theirs_ratios.append((t1[0] / t2[0], t2[1] / t1[1]))
    n = len(batches[0])
    print(f"{'':58s} (batch: wall = speedup, cpu = work of 2 threads / 1)")
    report(f"{kind} {name}: {n} x 4KB count_many vs loop of count", ours_ratios)
    report(f"{kind} {name}: {n} x 4KB toktok threads=2 vs threads=1", theirs_ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--corpus", nargs="+", default=["transcripts", "code"])
    parser.add_argument("--encodings", nargs="+", default=["o200k_base", "cl100k_base"])
    parser.add_argument("--no-batch", action="store_true")
    args = parser.parse_args()
    print("ratios > 1: ctxengine faster (single thread) / parallel faster (batch)")
    for kind in args.corpus:
        for name in args.encodings:
            single(kind, name, args.rounds)
            if not args.no_batch:
                batch(kind, name, max(3, args.rounds // 2))


if __name__ == "__main__":
    main()
