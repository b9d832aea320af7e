"""Turn one pytest-benchmark JSON run into the README's performance table and PNG plots.

    pytest benches --benchmark-enable --benchmark-only --benchmark-json=run.json
    python benches/report.py run.json --out bench-report/

writes ``report.md`` (the markdown table) and ``counting.png``, ``render.png``, ``scaling.png``
into ``--out`` and prints the table. Every figure is a median of that one run, and every ratio is
between two members of one benchmark group measured in it. Plots need matplotlib
(``pip install 'ctxengine[plots]'``); ``--no-plots`` writes the table only.

The benchmarks read (groups of ``benches/test_bench_*.py``):

- counting: groups ``count <size>MB <corpus> <encoding>``, member ``ctxengine`` and its peers
  (``toktok``, ``quicktok``, ``tiktoken``): the ratio is against the fastest peer of the run;
- batch: groups ``batch <n> x 4KB <corpus> <encoding>``, ``ctxengine count_many`` against
  ``ctxengine loop of count`` (the speedup on every core) and toktok's own threads;
- render: ``render-cold-1k-messages-32k`` and ``render-warm-1k-messages-32k``, members whose
  names start with ``test_ctxengine`` and the LangChain members (the fastest is the peer: the
  memoized one when warm);
- scaling: ``render-cold-scaling`` and ``render-warm-scaling``, parametrized by ``n`` grains;
- synthetic: ``render-warm-synthetic-<n>`` and ``render-cold-<k>k-synthetic-32k``, ctxengine
  beside LangChain on the same messages, one group per size (not required: the quick pass
  leaves the largest pair out);
- first count: groups ``first count <encoding> (new process)``, a new interpreter's start,
  import and first count (the vocabulary's build), ``ctxengine`` beside its peers (not
  required);
- quality: group ``replay-prefix-and-use``, one member per budget and provider, whose
  ``extra_info`` holds the prefix breaks of ctxengine and of a sliding last-N window and the
  budget use of the renders that cut.

With ``--strict`` a missing section is an error, so a renamed benchmark breaks CI instead of
silently dropping a line from the README.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ("Report", "load", "main", "markdown", "plot")

_COUNT_GROUP = re.compile(r"^count (?P<mb>\d+(?:\.\d+)?)\s*MB (?P<corpus>\S+) (?P<encoding>\S+)$")
_BATCH_GROUP = re.compile(r"^batch (?P<n>\d+) x 4KB (?P<corpus>\S+) (?P<encoding>\S+)$")
_FIRST_GROUP = re.compile(r"^first count (?P<encoding>\S+) \(new process\)$")
RENDER_GROUPS = {"cold": "render-cold-1k-messages-32k", "warm": "render-warm-1k-messages-32k"}
SCALING_GROUPS = {"cold": "render-cold-scaling", "warm": "render-warm-scaling"}
QUALITY_GROUP = "replay-prefix-and-use"
_SYNTHETIC_GROUP = re.compile(
    r"^render-(?:(?P<warm>warm)-synthetic-(?P<n>\d+)|(?P<cold>cold)-(?P<k>\d+)k-synthetic-32k)$"
)
#: The counting peers, by ``impl``, with the names the table gives them.
PEERS = {"toktok": "toktok-rs", "quicktok": "quicktok", "tiktoken": "tiktoken"}


@dataclass(frozen=True, slots=True)
class Counting:
    corpus: str
    encoding: str
    megabytes: float
    ctxengine_s: float
    peers: dict[str, float]  # impl -> median seconds

    @property
    def ctxengine_mbps(self) -> float:
        return self.megabytes / self.ctxengine_s

    def mbps(self, impl: str) -> float:
        return self.megabytes / self.peers[impl]

    @property
    def strongest(self) -> str:
        """The fastest peer of the run."""
        return min(self.peers, key=self.peers.__getitem__)


@dataclass(frozen=True, slots=True)
class Batch:
    corpus: str
    encoding: str
    texts: int
    many_s: float  # ctxengine count_many
    loop_s: float  # ctxengine, a loop of count
    toktok: tuple[float, float] | None  # toktok batch_count threads=1, threads=2


@dataclass(frozen=True, slots=True)
class Quality:
    budget: int
    provider: str
    calls: int
    breaks: int
    compactions: int
    last_n_breaks: int
    cut_renders: int
    median_use: float
    min_use: float


@dataclass(frozen=True, slots=True)
class Render:
    kind: str  # cold / warm
    ctxengine_s: float
    langchain_s: float
    peer: str = "LangChain `trim_messages`"


@dataclass(frozen=True, slots=True)
class Report:
    """The figures of one run that the README shows."""

    counting: list[Counting]
    render: list[Render]
    scaling: dict[str, dict[int, float]]  # cold/warm -> grains -> median seconds
    machine: str
    batch: list[Batch] = field(default_factory=list)
    quality: list[Quality] = field(default_factory=list)
    #: (warm/cold, grains) -> (ours, LangChain's) median seconds, one group per size
    synthetic: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)
    #: encoding -> implementation -> median seconds of a new process's first count
    first_count: dict[str, dict[str, float]] = field(default_factory=dict)

    def missing(self) -> list[str]:
        """The sections without data."""
        out = []
        if not self.counting:
            out.append("counting (groups 'count <N>MB <corpus> <encoding>')")
        if not self.batch:
            out.append("batch (groups 'batch <n> x 4KB <corpus> <encoding>')")
        if not self.quality:
            out.append(f"quality ({QUALITY_GROUP})")
        if len(self.render) < len(RENDER_GROUPS):
            out.append(f"render ({', '.join(RENDER_GROUPS.values())})")
        for kind, group in SCALING_GROUPS.items():
            if len(self.scaling.get(kind, {})) < 2:
                out.append(f"scaling {kind} ({group}, two sizes at least)")
        return out


def _median(bench: dict[str, Any]) -> float:
    return float(bench["stats"]["median"])


def _impl(bench: dict[str, Any]) -> str:
    return str((bench.get("extra_info") or {}).get("impl") or bench.get("name", ""))


def load(data: Any) -> Report:
    """The report's figures from a pytest-benchmark JSON document.

    Raises:
        ValueError: the document is not a pytest-benchmark run.
    """
    benches = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benches, list):
        raise ValueError("not a pytest-benchmark JSON run: no 'benchmarks' list")
    groups: dict[str, list[dict[str, Any]]] = {}
    for b in benches:
        if b.get("stats"):
            groups.setdefault(str(b.get("group") or ""), []).append(b)
    return Report(
        counting=_counting(groups),
        render=_render(groups),
        scaling={kind: _scaling(groups.get(g, [])) for kind, g in SCALING_GROUPS.items()},
        machine=_machine(data.get("machine_info") or {}),
        batch=_batch(groups),
        quality=_quality(groups.get(QUALITY_GROUP, [])),
        synthetic=_synthetic(groups),
        first_count=_first_count(groups),
    )


def _first_count(groups: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    out = {}
    for group, members in sorted(groups.items()):
        match = _FIRST_GROUP.match(group)
        by_impl = {_impl(b): _median(b) for b in members}
        if match is not None and "ctxengine" in by_impl and len(by_impl) > 1:
            out[match["encoding"]] = by_impl
    return out


def _synthetic(
    groups: dict[str, list[dict[str, Any]]],
) -> dict[tuple[str, int], tuple[float, float]]:
    out = {}
    for group, members in groups.items():
        match = _SYNTHETIC_GROUP.match(group)
        if match is None:
            continue
        kind, n = ("warm", int(match["n"])) if match["warm"] else ("cold", int(match["k"]) * 1000)
        ours = [b for b in members if _impl(b).startswith("ctxengine")]
        peers = [b for b in members if _impl(b).startswith("langchain")]
        if ours and peers:
            out[kind, n] = (_median(ours[0]), min(map(_median, peers)))
    return dict(sorted(out.items()))


def _counting(groups: dict[str, list[dict[str, Any]]]) -> list[Counting]:
    rows = []
    for group, members in sorted(groups.items()):
        match = _COUNT_GROUP.match(group)
        by_impl = {_impl(b): b for b in members}
        peers = {i: _median(by_impl[i]) for i in PEERS if i in by_impl}
        if match is None or "ctxengine" not in by_impl or not peers:
            continue
        size = (by_impl["ctxengine"].get("extra_info") or {}).get("bytes")
        megabytes = size / 2**20 if isinstance(size, int) else float(match["mb"])
        rows.append(
            Counting(
                match["corpus"], match["encoding"], megabytes, _median(by_impl["ctxengine"]), peers
            )
        )
    return rows


def _batch(groups: dict[str, list[dict[str, Any]]]) -> list[Batch]:
    rows = []
    for group, members in sorted(groups.items()):
        match = _BATCH_GROUP.match(group)
        by_impl = {_impl(b): _median(b) for b in members}
        many, loop = by_impl.get("ctxengine count_many"), by_impl.get("ctxengine loop of count")
        if match is None or many is None or loop is None:
            continue
        one = by_impl.get("toktok batch_count(threads=1)")
        two = by_impl.get("toktok batch_count(threads=2)")
        toktok = (one, two) if one is not None and two is not None else None
        rows.append(Batch(match["corpus"], match["encoding"], int(match["n"]), many, loop, toktok))
    return rows


def _quality(members: list[dict[str, Any]]) -> list[Quality]:
    rows = []
    for b in members:
        info = b.get("extra_info") or {}
        try:
            rows.append(
                Quality(
                    int(info["budget"]),
                    str(info["provider"]),
                    int(info["calls"]),
                    int(info["breaks"]),
                    int(info["compactions"]),
                    int(info["last_n_breaks"]),
                    int(info["cut_renders"]),
                    float(info["median_use"]),
                    float(info["min_use"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return sorted(rows, key=lambda q: (q.budget, q.provider))


def _render(groups: dict[str, list[dict[str, Any]]]) -> list[Render]:
    rows = []
    for kind, group in RENDER_GROUPS.items():
        members = groups.get(group, [])
        ours = [b for b in members if str(b.get("name", "")).startswith("test_ctxengine")]
        peers = [b for b in members if "langchain" in str(b.get("name", ""))]
        if ours and peers:
            best = min(peers, key=_median)  # the strongest peer: memoized, when there is one
            name = "LangChain `trim_messages`"
            if "memoized" in str(best.get("name", "")):
                name += " (exact counts memoized)"
            rows.append(Render(kind, _median(ours[0]), _median(best), name))
    return rows


def _scaling(members: list[dict[str, Any]]) -> dict[int, float]:
    out = {}
    for b in members:
        n = (b.get("params") or {}).get("n")
        if isinstance(n, int):
            out[n] = _median(b)
    return dict(sorted(out.items()))


def _machine(info: dict[str, Any]) -> str:
    cpu = (info.get("cpu") or {}).get("brand_raw") or info.get("processor") or "unknown CPU"
    return f"{cpu}, Python {info.get('python_version', '?')}"


# -- markdown ----------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"


def _ratio(slow: float, fast: float) -> str:
    return f"{slow / fast:.1f}× faster" if slow >= fast else f"{fast / slow:.1f}× slower"


def markdown(report: Report) -> str:
    """The README's table: one row per figure, ratios within the run."""
    lines = [
        "| what | ctxengine | peer | ratio |",
        "|---|---|---|---|",
    ]
    for c in report.counting:
        peers = "; ".join(
            f"{PEERS[i]}: {c.mbps(i):.1f} MB/s" for i in sorted(c.peers, key=c.peers.__getitem__)
        )
        strongest = c.strongest
        lines.append(
            f"| count {c.megabytes:.1f} MB of {c.corpus}, one thread, `{c.encoding}` "
            f"| {c.ctxengine_mbps:.1f} MB/s | {peers} "
            f"| {c.peers[strongest] / c.ctxengine_s:.2f}× the speed of {PEERS[strongest]} |"
        )
    for b in report.batch:
        theirs = (
            f"toktok-rs threads=2: {b.toktok[0] / b.toktok[1]:.2f}× its one thread"
            if b.toktok is not None
            else ""
        )
        lines.append(
            f"| batch count ({b.texts} × 4 KB of {b.corpus}), `{b.encoding}`, every core "
            f"| `count_many` {_ms(b.many_s)}, a loop of `count` {_ms(b.loop_s)} | {theirs} "
            f"| {b.loop_s / b.many_s:.2f}× our one thread |"
        )
    for r in report.render:
        what = (
            "cold render, 914-message real session (pi) into 32k tokens"
            if r.kind == "cold"
            else "warm render (one new message on that session)"
        )
        lines.append(
            f"| {what} | {_ms(r.ctxengine_s)} | {r.peer}: {_ms(r.langchain_s)} "
            f"| {_ratio(r.langchain_s, r.ctxengine_s)} |"
        )
    for kind in ("cold", "warm"):
        points = report.scaling.get(kind, {})
        if points:
            sizes = " / ".join(f"{n // 1000}k" for n in points)
            times = " / ".join(_ms(t) for t in points.values())
            lines.append(f"| {kind} render, synthetic sessions of {sizes} grains | {times} | | |")
    for (kind, n), (ours, theirs) in report.synthetic.items():
        peer = "memoized, exact" if kind == "warm" else "exact counter"
        lines.append(
            f"| {kind} render, synthetic session of {n:,} grains into 32k | {_ms(ours)} "
            f"| LangChain `trim_messages` ({peer}), same messages: {_ms(theirs)} "
            f"| {_ratio(theirs, ours)} |"
        )
    for encoding, by_impl in report.first_count.items():
        ours = by_impl["ctxengine"]
        peers = {i: t for i, t in by_impl.items() if i != "ctxengine"}
        listed = "; ".join(f"{i}: {_ms(t)}" for i, t in sorted(peers.items(), key=lambda p: p[1]))
        fastest = min(peers, key=peers.__getitem__)
        lines.append(
            f"| first count in a new process (start, import, the vocabulary's build), "
            f"`{encoding}` | {_ms(ours)} | {listed} "
            f"| {_ratio(peers[fastest], ours)} than {fastest} |"
        )
    for q in report.quality:
        lines.append(
            f"| prefix breaks, replayed real session ({q.calls} calls), {q.budget // 1000}k, "
            f"{q.provider} | {q.breaks} ({q.compactions} compactions) "
            f"| sliding last-N window: {q.last_n_breaks} "
            f"| {q.last_n_breaks / max(q.breaks, 1):.2f}× fewer |"
        )
        lines.append(
            f"| budget use of its {q.cut_renders} renders that cut, {q.budget // 1000}k, "
            f"{q.provider} | median {q.median_use:.3f}, min {q.min_use:.3f} | | |"
        )
    lines.append("")
    lines.append(f"Medians of one pytest-benchmark run on {report.machine}.")
    return "\n".join(lines) + "\n"


# -- plots -------------------------------------------------------------------------------------


def plot(report: Report, out: Path) -> list[Path]:
    """Write ``counting.png``, ``render.png`` and ``scaling.png`` into ``out``.

    Raises:
        ModuleNotFoundError: matplotlib is not installed (``pip install 'ctxengine[plots]'``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    if report.counting:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        labels = [f"{c.corpus}\n{c.encoding}" for c in report.counting]
        x = range(len(labels))
        width = 0.8 / (1 + len(PEERS))
        ax.bar(
            [i - 0.4 + width / 2 for i in x],
            [c.ctxengine_mbps for c in report.counting],
            width,
            label="ctxengine",
        )
        for k, impl in enumerate(PEERS, start=1):
            ax.bar(
                [i - 0.4 + width * (k + 0.5) for i in x],
                [c.mbps(impl) if impl in c.peers else 0.0 for c in report.counting],
                width,
                label=PEERS[impl],
            )
        ax.set_xticks(list(x), labels)
        ax.set_ylabel("MB/s, one thread (higher is better)")
        ax.set_title("Token counting throughput")
        ax.legend()
        written.append(_save(fig, out / "counting.png"))
    if report.render:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        x = range(len(report.render))
        ax.bar(
            [i - 0.2 for i in x],
            [1e3 * r.ctxengine_s for r in report.render],
            0.4,
            label="ctxengine render",
        )
        ax.bar(
            [i + 0.2 for i in x],
            [1e3 * r.langchain_s for r in report.render],
            0.4,
            label="LangChain trim_messages",
        )
        ax.set_xticks(list(x), [f"{r.kind} (914 msgs, 32k)" for r in report.render])
        ax.set_yscale("log")
        ax.set_ylabel("ms per call, log scale (lower is better)")
        ax.set_title("Fitting a real session into the budget")
        ax.legend()
        written.append(_save(fig, out / "render.png"))
    if any(report.scaling.values()):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for kind, points in report.scaling.items():
            if points:
                ax.plot(list(points), [1e3 * t for t in points.values()], marker="o", label=kind)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("grains in the session")
        ax.set_ylabel("ms per render, log scale")
        ax.set_title("Render time against session length")
        ax.legend()
        written.append(_save(fig, out / "scaling.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


# -- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python benches/report.py RUN.json [--out DIR] [--strict] [--no-plots]``."""
    parser = argparse.ArgumentParser(prog="benches/report.py", description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a pytest-benchmark JSON file (--benchmark-json)")
    parser.add_argument("--out", type=Path, default=Path("bench-report"), help="output folder")
    parser.add_argument("--strict", action="store_true", help="fail when a section is missing")
    parser.add_argument("--no-plots", action="store_true", help="write the table only")
    args = parser.parse_args(argv)
    try:
        report = load(json.loads(args.run.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        print(f"error: {args.run}: {exc}", file=sys.stderr)
        return 2
    missing = report.missing()
    if args.strict and missing:
        print(f"error: {args.run}: no data for {'; '.join(missing)}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    (args.out / "report.md").write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    if not args.no_plots:
        for path in plot(report, args.out):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
