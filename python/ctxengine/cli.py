"""The ``ctxengine`` command line (DESIGN.md §9)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .cli_replay import add_commands
from .errors import CtxEngineError, EncodingError
from .tokens import cache_info, get_tokenizer

__all__ = ("main",)


def _count(args: argparse.Namespace, console: Console) -> int:
    tokenizer = get_tokenizer(args.encoding or args.model)
    rows = []
    for name in args.files:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CtxEngineError(f"cannot read {name!r} as UTF-8 text: {exc}") from exc
        rows.append({"file": name, "chars": len(text), "tokens": tokenizer.count(text)})
    total = sum(r["tokens"] for r in rows)
    summary = {
        "tokens": total,
        "files": rows,
        "model": None if args.encoding else args.model,
        "encoding": tokenizer.name,
        "exact": tokenizer.exact,
        "cache": cache_info(),
    }
    if args.json:
        console.print_json(json.dumps(summary))
        return 0
    table = Table(title=f"tokens ({tokenizer.name}, {'exact' if tokenizer.exact else 'estimate'})")
    table.add_column("file")
    table.add_column("chars", justify="right")
    table.add_column("tokens", justify="right")
    for r in rows:
        table.add_row(r["file"], f"{r['chars']:,}", f"{r['tokens']:,}")
    if len(rows) > 1:
        table.add_row("total", f"{sum(r['chars'] for r in rows):,}", f"{total:,}")
    console.print(table)
    return 0


def _plugins_list(args: argparse.Namespace, console: Console) -> int:
    from .plugins.cli import plugins_list

    return plugins_list(args.plugins, args.json, console=console)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="ctxengine", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ctxengine {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    count = sub.add_parser("count", help="count the tokens of files")
    count.add_argument("files", nargs="+", metavar="FILE")
    count.add_argument("--model", default="gpt-4o", help="model name (default: gpt-4o)")
    count.add_argument("--encoding", help="encoding name instead of a model")
    count.add_argument("--json", action="store_true", help='print {"tokens": N, ...}')
    count.set_defaults(run=_count)
    add_commands(sub)
    plugins = sub.add_parser("plugins", help="plugin commands")
    plugins_sub = plugins.add_subparsers(dest="plugins_command", required=True)
    listing = plugins_sub.add_parser("list", help="list plugins, their hooks and state")
    listing.add_argument("--plugins", metavar="DIR", help="also load plugin folders from DIR")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=_plugins_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    console = Console(soft_wrap=True)
    try:
        return int(args.run(args, console))
    except CtxEngineError as exc:
        hint = " (on the command line: --encoding NAME)" if isinstance(exc, EncodingError) else ""
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}{hint}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
