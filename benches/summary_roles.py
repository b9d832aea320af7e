"""Count what the summaries of replayed real sessions take for the user's requests.

    PYTHONPATH=python python benches/summary_roles.py [--budgets 4000,16000] [--json F]

Each shared transcript (``CTXENGINE_SHARED``/data/transcripts) is replayed message by message
as ``ctxengine replay`` does (a render before every model call, OpenAI payloads, gpt-4.1
tokens), at each budget. Every distinct summary the renders start with is read by its
sections and checked against the messages of its transcript, classified here by rules of
this script's own (not by the library's):

- an *observation* is a user-role message a harness wrote from a command's output: in a
  SWE-agent run every user message after the agent's first action, in an OpenHands run the
  ``error`` and ``recall`` observations the importer has always tagged (``meta["kind"]``);
- *harness text* is a Claude Code user message the CLI wrote: ``isMeta`` records (a skill's
  text, a command caveat), ``<local-command-…>`` output, ``[Request interrupted by user]``;
- a *command* is a slash command (``/mcp``, ``/compact …``) or its wrapper.

It prints, per file and budget and in total, how many summaries have a goal, a latest request,
a line of ``## Requests`` or a pending ask to answer the latest request that is an observation
or harness text, and how many list a command among their requests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from ctxengine import Budget, ContextEngine
from ctxengine.replay import replay
from ctxengine.transcript import Transcript, load_all

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXENGINE_SHARED", ROOT.parents[0] / "shared"))
DATA = SHARED / "data" / "transcripts"
HEAD = "[Summary of the earlier conversation"
_HARNESS = re.compile(
    r"<local-command-|<system-reminder>|\[Request interrupted by user"
    r"|Base directory for this skill:|Here is a demonstration of how"
)
_COMMAND = re.compile(r"/[A-Za-z][\w:-]*(?:\s|$)|<command-(?:name|message)>")
KINDS = ("observation", "harness", "command")


def key(text: str) -> str:
    """How a line is matched: the first 40 characters of its first line, whitespace collapsed
    (a summary's Requests cut older lines to 80, excerpts to 40)."""
    line = next((" ".join(ln.split()) for ln in text.splitlines() if ln.strip()), "")
    return line[:40]


def classify(t: Transcript) -> dict[str, str]:
    """The key of each user message that is not a request the user typed, and its kind."""
    out: dict[str, str] = {}
    acted = False
    for m in t.messages:
        if m.role == "assistant" and not m.meta.get("is_demo"):
            acted = True
        if m.role != "user" or not m.text.strip():
            continue
        text = m.text.strip()
        kind = None
        swe = t.source_format == "swe-agent" and acted
        if swe or (t.source_format == "openhands" and m.meta.get("kind") in ("error", "recall")):
            kind = "observation"
        elif m.meta.get("is_meta") or m.meta.get("is_demo") or _HARNESS.match(text):
            kind = "harness"
        elif _COMMAND.match(text):
            kind = "command"
        if kind is not None:
            out.setdefault(key(text), kind)
    return out


def sections(summary: str) -> dict[str, list[str]]:
    """A summary's sections; the newest request's verbatim block folded to its first line."""
    found: dict[str, list[str]] = {}
    name = None
    lines = summary.split("\n")
    n = 0
    while n < len(lines):
        line = lines[n]
        if line.startswith("## "):
            name = line[3:].strip()
            found[name] = []
        elif name and line == "- (latest), verbatim:" and n + 1 < len(lines):
            fence = lines[n + 1]
            end = lines.index(fence, n + 2) if fence in lines[n + 2 :] else len(lines)
            body = next((b for b in lines[n + 2 : end] if b.strip()), "")
            found[name].append("(latest) " + body.strip())
            n = end
        elif name and line.startswith("- "):
            found[name].append(line[2:])
        elif name and line.strip() and not line.startswith("  "):
            found[name].append(line)
        n += 1
    return found


def check(summary: str, kinds: dict[str, str]) -> Counter[str]:
    """What ``summary`` takes for a request that is not one (see the module docstring)."""
    s = sections(summary)
    hits: Counter[str] = Counter()
    goal = " ".join(s.get("Goal", []))
    if goal and kinds.get(key(goal)) in ("observation", "harness"):
        hits[f"goal {kinds[key(goal)]}"] += 1
    listed: set[str] = set()
    for line in s.get("Requests", []):
        latest = line.startswith("(latest) ")
        line = line.removeprefix("(latest) ")
        excerpts = line.startswith("Excerpts:")
        items = line.removeprefix("Excerpts: ").split("; ") if excerpts else [line]
        for item in items:
            kind = next((k for c, k in kinds.items() if c and key(item)[:30] == c[:30]), None)
            if kind is None:
                continue
            listed.add(kind)
            if latest:
                hits[f"latest {kind}"] += 1
    for kind in listed:
        hits[f"requests {kind}"] += 1
    for line in s.get("Pending", []):
        if line.startswith("answer the latest request: "):
            kind = kinds.get(key(line.removeprefix("answer the latest request: ")))
            if kind in ("observation", "harness"):
                hits[f"pending {kind}"] += 1
    return hits


def summaries(t: Transcript, budget: int) -> tuple[list[str], int]:
    """The distinct summaries the renders of a replay of ``t`` start with, in order, and the
    number of compactions that failed."""

    async def main() -> tuple[list[str], int]:
        engine = ContextEngine("gpt-4.1", Budget(total=budget))
        seen: dict[str, None] = {}
        failed = 0
        async for step in replay(t, engine):
            failed += sum(not c.get("ok") for c in step.rendered.report.compactions)
            for m in step.rendered.transcript.messages:
                if m.role == "user" and m.text.startswith(HEAD):
                    seen.setdefault(m.text)
                    break
        return list(seen), failed

    return anyio.run(main)


def files() -> list[Path]:
    return sorted(p for p in DATA.rglob("*") if p.is_file() and p.name != "README.md")


def run(budgets: Sequence[int]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for path in files():
        for i, t in enumerate(load_all(path)):
            kinds = classify(t)
            for budget in budgets:
                found, failed = summaries(t, budget)
                hits: Counter[str] = Counter({"failed compactions": failed})
                for text in found:
                    hits += check(text, kinds)
                    hits["with a goal"] += bool(sections(text).get("Goal"))
                name = f"{path.relative_to(DATA)}#{i}"
                rows.append({"file": name, "budget": budget, "summaries": len(found), **hits})
                print(name, budget, len(found), dict(hits), file=sys.stderr, flush=True)
    total: Counter[str] = Counter()
    for row in rows:
        total.update({k: v for k, v in row.items() if isinstance(v, int) and k != "budget"})
    return {"rows": rows, "total": dict(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budgets", default="4000,16000")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    out = run([int(b) for b in args.budgets.split(",")])
    print(json.dumps(out["total"], indent=1, sort_keys=True))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
