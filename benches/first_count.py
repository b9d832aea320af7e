"""The first count in a new process, against the peers: each builds its vocabulary then.

    PYTHONPATH=python python benches/first_count.py [--rounds 9] [--encoding o200k_base]

Every round starts one fresh interpreter per counter, in an order that rotates from round to
round, and each child reports the time of its first count of one short string: the
vocabulary's build (ctxengine, toktok-rs, quicktok: tables made from their embedded data;
tiktoken: its rank file read from the shared folder and parsed, as in the tests) plus one
count. Interpreter start and import are not in it (``test_import_time`` has those). The
report is the median per counter over the rounds, wall and CPU time of the child (CPU time
includes any thread the build starts), and each peer's median over ours.

Extra arguments ``NAME=PATH`` add a ctxengine from another tree (its ``python`` folder) as
one more counter, e.g. to compare two builds of ours in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What each child runs, timed: ``{name}`` is the encoding.
COUNTERS = {
    "ctxengine": (
        "import ctxengine\ntimed = lambda: ctxengine.count_tokens('hello world', encoding='{name}')"
    ),
    "toktok-rs": "import toktok\ntimed = lambda: toktok.batch_count(['hello world'], '{name}')[0]",
    "quicktok": (
        "import quicktok\ntimed = lambda: quicktok.get_encoding('{name}').count('hello world')"
    ),
    "tiktoken": (
        f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from offline_tiktoken import encoding\n"
        "timed = lambda: len(encoding('{name}').encode_ordinary('hello world'))"
    ),
}

CHILD = """{setup}
import json, time
wall, cpu = time.perf_counter(), time.process_time()
n = timed()
print(json.dumps({{"n": n, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}}))
"""


def script(code: str, name: str) -> str:
    """The child's program: ``code`` (one of :data:`COUNTERS`) for ``name``, then the timing."""
    return CHILD.format(setup=code.format(name=name))


def child(code: str, name: str, pythonpath: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-c", script(code, name)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--encoding", default="o200k_base", choices=["cl100k_base", "o200k_base"])
    parser.add_argument("trees", nargs="*", help="NAME=PATH: another ctxengine tree's python/")
    args = parser.parse_args()
    counters: list[tuple[str, str, str | None]] = [
        (label, code, None) for label, code in COUNTERS.items()
    ]
    for tree in args.trees:
        label, _, path = tree.partition("=")
        if not path:
            parser.error(f"expected NAME=PATH, got {tree!r}")
        counters.append((f"ctxengine {label}", COUNTERS["ctxengine"], path))
    times: dict[str, dict[str, list[float]]] = {c[0]: {"wall": [], "cpu": []} for c in counters}
    counts: dict[str, set[int]] = {c[0]: set() for c in counters}
    for r in range(args.rounds):
        k = r % len(counters)
        for label, code, path in counters[k:] + counters[:k]:
            got = child(code, args.encoding, path)
            counts[label].add(int(got["n"]))
            for clock in ("wall", "cpu"):
                times[label][clock].append(got[clock])
    agreed = {n for ns in counts.values() for n in ns}
    if len(agreed) != 1:
        print(f"the counters disagree: {counts}", file=sys.stderr)
        return 1
    ours = {clock: statistics.median(times["ctxengine"][clock]) for clock in ("wall", "cpu")}
    print(f"first count, {args.encoding}, median of {args.rounds} fresh processes each")
    print(f"{'counter':<22}{'wall ms':>10}{'cpu ms':>10}{'wall / ours':>13}")
    for label, clocks in times.items():
        wall = statistics.median(clocks["wall"])
        cpu = statistics.median(clocks["cpu"])
        print(f"{label:<22}{wall * 1e3:>10.1f}{cpu * 1e3:>10.1f}{wall / ours['wall']:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
