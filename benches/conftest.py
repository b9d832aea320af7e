"""Benchmark setup: the test helpers on ``sys.path``, and a ratio summary per benchmark group.

Each benchmark names its implementation and whether it is its group's baseline
(``benchmark.extra_info``). With benchmarks enabled, the run ends with every member's median
time relative to the baseline of its group, measured in that same run.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

# group -> implementation -> (median seconds, is baseline)
_MEDIANS: dict[str, dict[str, tuple[float, bool]]] = defaultdict(dict)
# group -> bytes one call processes, for groups that say (``extra_info["bytes"]``)
_BYTES: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _record_median(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    bench = request.node.funcargs.get("benchmark")
    stats = getattr(bench, "stats", None)
    if bench is None or stats is None:  # --benchmark-disable: the body ran once, untimed
        return
    impl = bench.extra_info.get("impl", request.node.name)
    _MEDIANS[bench.group or ""][impl] = (stats.stats.median, bool(bench.extra_info.get("baseline")))
    if "bytes" in bench.extra_info:
        _BYTES[bench.group or ""] = int(bench.extra_info["bytes"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _MEDIANS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("speed relative to each group's baseline (median times, this run)")
    for group, members in sorted(_MEDIANS.items()):
        base = next((t for t, is_base in members.values() if is_base), None)
        write(group)
        for impl, (median, is_base) in sorted(members.items(), key=lambda kv: kv[1][0]):
            ratio = f"{base / median:7.2f}x" if base else "       -"
            mark = "  (baseline)" if is_base else ""
            rate = f" {_BYTES[group] / median / 1e6:8.1f} MB/s" if group in _BYTES else ""
            write(f"    {impl:<44} {median * 1e3:10.3f} ms{rate} {ratio}{mark}")
