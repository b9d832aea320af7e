"""``ctxengine demo`` and ``ctxengine replay``: a recorded session through the engine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .assemble.budget import Budget
from .engine import ContextEngine
from .errors import CtxEngineError
from .replay import ReplayStep, demo_transcript_path, replay
from .transcript import load

__all__ = ("add_commands",)

_SHOWN_DECISIONS = 12


def _builtin_plugins() -> list[Any]:
    from .builtins import EnvInfoProvider, ToolResultCompressor

    return [EnvInfoProvider(), ToolResultCompressor()]


def _row(step: ReplayStep, budget: int) -> list[str]:
    report = step.rendered.report
    counts = report.counts()
    windows = {w["window"]: w["used"] for w in report.windows}
    return [
        str(step.call),
        str(step.messages),
        f"{step.rendered.tokens:,}",
        f"{100 * step.rendered.tokens / budget:.0f}%",
        str(counts.get("kept", 0)),
        str(counts.get("folded", 0)),
        str(counts.get("dropped", 0)),
        f"{windows.get('history', 0):,}",
        f"{windows.get('tool', 0):,}",
        f"{report.timings.get('total', 0) * 1e3:.1f}",
    ]


def _decisions_table(step: ReplayStep) -> Table:
    table = Table(title=f"decisions at model call {step.call} (not kept)")
    table.add_column("node", max_width=24, no_wrap=True, overflow="ellipsis")
    table.add_column("decision", no_wrap=True)
    table.add_column("tokens", no_wrap=True, justify="right")
    table.add_column("reason", min_width=24, ratio=1)
    changed = [g for g in step.rendered.report if g.decision != "kept"]
    for g in changed[-_SHOWN_DECISIONS:]:
        table.add_row(
            g.node_id,
            f"{g.decision} ({g.stage})" if g.stage else g.decision,
            f"{g.tokens_before:,}→{g.tokens_after:,}",
            f"{g.reason} [{g.origin}]",
        )
    if len(changed) > _SHOWN_DECISIONS:
        table.caption = f"{len(changed) - _SHOWN_DECISIONS} earlier decisions not shown"
    return table


async def _run(args: argparse.Namespace, path: Path, console: Console) -> int:
    engine = ContextEngine(args.model, Budget(total=args.budget), plugins=_builtin_plugins())
    if getattr(args, "plugins", None):
        engine.load_plugins(args.plugins)
    transcript = load(path, format=getattr(args, "format", "auto"))
    table = Table(title=f"{path.name}: {len(transcript)} messages, budget {args.budget:,} tokens")
    for col in ("call", "msgs", "tokens", "%", "kept", "fold", "drop", "hist", "tool", "ms"):
        table.add_column(col, justify="right")
    steps: list[ReplayStep] = []
    with Progress(console=console, transient=True, disable=args.json) as progress:
        task = progress.add_task("replaying", total=len(transcript))
        async for step in replay(transcript, engine, provider=args.provider):
            steps.append(step)
            table.add_row(*_row(step, args.budget))
            progress.update(task, completed=step.messages)
    last = steps[-1]
    if args.json:
        console.print_json(json.dumps(last.rendered.report.to_dict()))
    else:
        console.print(table)
        console.print(_decisions_table(last))
        fits = all(s.rendered.tokens <= args.budget for s in steps)
        console.print(f"{len(steps)} renders, all within budget: {fits}")
    _write_outputs(args, last)
    return 0


def _write_outputs(args: argparse.Namespace, last: ReplayStep) -> None:
    if getattr(args, "out", None):
        Path(args.out).write_text(json.dumps(last.rendered.payload, ensure_ascii=False, indent=1))
    if getattr(args, "report", None):
        Path(args.report).write_text(last.rendered.report.to_json(indent=1))


def _demo(args: argparse.Namespace, console: Console) -> int:
    return anyio.run(_run, args, demo_transcript_path(), console)


def _replay(args: argparse.Namespace, console: Console) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise CtxEngineError(f"replay: no such file {args.file!r}")
    return anyio.run(_run, args, path, console)


def _common(p: argparse.ArgumentParser, budget: int) -> None:
    p.add_argument("--model", default="gpt-4o", help="model name (default: gpt-4o)")
    p.add_argument("--budget", type=int, default=budget, help=f"token budget (default {budget})")
    p.add_argument(
        "--provider",
        default="openai",
        choices=["openai", "openai-responses", "anthropic", "gemini"],
    )
    p.add_argument("--json", action="store_true", help="print the last render's report as JSON")


def add_commands(sub: Any) -> None:
    """Register ``demo`` and ``replay`` on the CLI's subparsers."""
    demo = sub.add_parser("demo", help="replay a bundled real agent session at a tight budget")
    _common(demo, 8000)
    demo.set_defaults(run=_demo)
    rep = sub.add_parser("replay", help="replay a recorded session through the engine")
    rep.add_argument("file", metavar="FILE")
    _common(rep, 32000)
    rep.add_argument("--format", default="auto", help="transcript format (default: auto)")
    rep.add_argument("--plugins", metavar="DIR", help="load plugin folders from DIR")
    rep.add_argument("--out", metavar="F", help="write the last payload as JSON")
    rep.add_argument("--report", metavar="F", help="write the last report as JSON")
    rep.set_defaults(run=_replay)
