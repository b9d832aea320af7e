"""Calibrate the Claude estimator factor on the shared transcripts (a script, not a test).

factor = Σ billed ``output_tokens`` / Σ our ``o200k_base`` count of the same assistant content
(text + thinking + each tool call's name and JSON input), over assistant messages whose billed
count is known to be final and whose content is complete.

Two sources carry Anthropic-billed output tokens:

- ``claude-code-spotter/**/*.jsonl`` (Claude Code). One API message is logged as one record per
  content block, all sharing ``message.id`` and each carrying a *snapshot* of ``usage`` taken
  while streaming; ``stop_reason`` is always null. The first snapshot is the ``message_start``
  value (1-27 output tokens, whatever the message length); the final count arrives with
  ``message_delta`` and shows up on a later record only sometimes. A message is therefore used
  only if its records show two different ``output_tokens`` values; the last one is final.
  Single-record messages and messages whose snapshots never change are dropped (unverifiable).
- ``pi-openclaw-session/large-session.jsonl`` (pi). One record per finished API message with its
  final ``usage.output``; messages that were aborted or failed are dropped.

In both, messages with a ``thinking``/``redacted_thinking`` block are dropped: Claude 4 models
return at most a summary of their reasoning (or only a signature) but bill the full reasoning.

Run: ``python benches/calibrate.py [--json]`` from the repository root.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ctxengine

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT.parent / "shared" / "data" / "transcripts"
HIDDEN = {"thinking", "redacted_thinking"}


@dataclass(frozen=True)
class Sample:
    """One assistant message with a trusted billed count."""

    source: str
    file: str
    model: str
    billed: int
    texts: tuple[str, ...]  # text blocks, then each tool call's name and JSON input
    prose: tuple[str, ...]  # the text blocks alone
    tool_calls: int


def _sample(
    source: str, path: Path, model: str, billed: int, blocks: list[dict], tool: str, args: str
) -> Sample:
    """``tool`` and ``args`` name the tool-call block type and its input field."""
    prose = tuple(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = [b for b in blocks if b.get("type") == tool]
    texts = [t for b in calls for t in (b["name"], json.dumps(b[args], ensure_ascii=False))]
    rel = str(path.relative_to(TRANSCRIPTS))
    return Sample(source, rel, model, billed, (*prose, *texts), prose, len(calls))


def claude_code(drops: dict[str, int]) -> Iterator[Sample]:
    """Messages of the Claude Code logs whose final ``output_tokens`` was recorded."""
    for path in sorted((TRANSCRIPTS / "claude-code-spotter").rglob("*.jsonl")):
        records: dict[str, list[dict]] = defaultdict(list)
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("type") == "assistant":
                records[rec["message"]["id"]].append(rec["message"])
        for msgs in records.values():
            snapshots = [m["usage"]["output_tokens"] for m in msgs]
            blocks = [b for m in msgs for b in m["content"]]
            if any(b.get("type") in HIDDEN for b in blocks):
                drops["claude-code: hidden reasoning"] += 1
            elif len(set(snapshots)) < 2:
                drops["claude-code: final usage not recorded"] += 1
            else:
                model, billed = msgs[0]["model"], snapshots[-1]
                yield _sample("claude-code", path, model, billed, blocks, "tool_use", "input")


def pi_session(drops: dict[str, int]) -> Iterator[Sample]:
    """Finished Anthropic messages of the pi session log (one record each, final usage)."""
    path = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        msg = rec.get("message", {})
        if rec.get("type") != "message" or msg.get("role") != "assistant":
            continue
        if msg.get("provider") != "anthropic" or msg.get("stopReason") not in ("stop", "toolUse"):
            drops["pi: aborted, failed or not Anthropic"] += 1
        elif any(b.get("type") in HIDDEN for b in msg["content"]):
            drops["pi: hidden reasoning"] += 1
        else:
            billed = msg["usage"]["output"]
            blocks = msg["content"]
            yield _sample("pi", path, msg["model"], billed, blocks, "toolCall", "arguments")


def prose_chars_per_token(samples: list[Sample]) -> float:
    """``o200k_base`` characters per token on the assistants' prose (text blocks only).

    Google documents ~4 characters per token for Gemini; with no Gemini usage in the shared
    transcripts this is the only reference for the Gemini factor (see docs/tokens.md).
    """
    prose = "\n".join(t for s in samples for t in s.prose)
    return len(prose) / ctxengine.count_tokens(prose, encoding="o200k_base")


@dataclass(frozen=True)
class Summary:
    """Aggregate of a group of samples."""

    messages: int
    billed: int
    counted: int
    factor: float
    median: float
    p25: float
    p75: float


def summarize(rows: list[tuple[Sample, int]]) -> Summary:
    ratios = sorted(s.billed / n for s, n in rows if n)
    billed = sum(s.billed for s, _ in rows)
    counted = sum(n for _, n in rows)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return Summary(
        len(rows), billed, counted, billed / counted, statistics.median(ratios), q[0], q[2]
    )


def fit(rows: list[tuple[Sample, int]]) -> tuple[float, float, float]:
    """Least squares ``billed ≈ a·counted + b·tool_calls + c`` (solved by Cramer's rule)."""
    xs = [(float(n), float(s.tool_calls), 1.0) for s, n in rows]
    ys = [float(s.billed) for s, _ in rows]
    m = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    v = [sum(x[i] * y for x, y in zip(xs, ys, strict=True)) for i in range(3)]

    def det(a: list[list[float]]) -> float:
        return (
            a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
        )

    d = det(m)
    out = []
    for k in range(3):
        mk = [[v[i] if j == k else m[i][j] for j in range(3)] for i in range(3)]
        out.append(det(mk) / d)
    return out[0], out[1], out[2]


def report(result: dict[str, Any]) -> None:
    """Print ``result`` as a table."""
    print(f"{'group':<72} {'msgs':>5} {'billed':>7} {'o200k':>7} {'factor':>6} ", end="")
    print(f"{'median':>6} {'p25':>5} {'p75':>5}")
    for key, g in result["groups"].items():
        print(f"{key:<72} {g['messages']:>5} {g['billed']:>7} {g['counted']:>7} ", end="")
        print(f"{g['factor']:>6.3f} {g['median']:>6.2f} {g['p25']:>5.2f} {g['p75']:>5.2f}")
    f = result["fit_all"]
    print(f"\nleast squares: billed ≈ {f['per_token']:.3f}·o200k ", end="")
    print(f"+ {f['per_tool_call']:.1f}·tool_calls + {f['per_message']:.1f}")
    print("dropped:", ", ".join(f"{k}: {v}" for k, v in sorted(result["dropped"].items())))
    cpt = result["gemini_reference"]["o200k_chars_per_token_on_prose"]
    print(f"gemini reference: o200k_base gives {cpt:.2f} characters per token on the ", end="")
    print(f"assistants' prose; Google documents ~4 for Gemini (ratio {cpt / 4:.2f})")
    print("factors in use:", result["in_use"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    drops: dict[str, int] = defaultdict(int)
    samples = [*claude_code(drops), *pi_session(drops)]
    counts = iter(
        ctxengine.count_many([t for s in samples for t in s.texts], encoding="o200k_base")
    )
    rows = [(s, sum(next(counts) for _ in s.texts)) for s in samples]

    groups: dict[str, list[tuple[Sample, int]]] = defaultdict(list)
    for s, n in rows:
        for key in ("all", f"source {s.source}", f"file {s.file}", f"model {s.model}"):
            groups[key].append((s, n))
    groups["all, messages of 500+ o200k tokens"] = [(s, n) for s, n in rows if n >= 500]
    fitted = fit(rows)
    result = {
        "groups": {k: asdict(summarize(v)) for k, v in groups.items()},
        "fit_all": dict(zip(("per_token", "per_tool_call", "per_message"), fitted, strict=True)),
        "dropped": dict(drops),
        "gemini_reference": {"o200k_chars_per_token_on_prose": prose_chars_per_token(samples)},
        "in_use": {f: ctxengine.get_tokenizer(f).factor for f in ("claude", "gemini")},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
