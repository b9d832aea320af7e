"""``ctxengine count FILE... [-]``: the tokens of files or of standard input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from rich.table import Table
from rich.text import Text

from .cli import Parser, UsageError, add_common, given, print_json, stdout_console
from .tokens import cache_info, get_tokenizer

__all__ = ("add_to", "read_text")

DEFAULT_MODEL: Final = "gpt-4o"


def read_text(name: str) -> str:
    """The UTF-8 text of file ``name``, or of standard input for ``-``.

    Raises:
        UsageError: the file is missing, a folder, unreadable or not UTF-8; stdin is closed.
    """
    if name == "-":
        stream = sys.stdin
        if stream is None or stream.closed:
            raise UsageError("standard input is closed; give FILE names, or pipe text into it")
        data = stream.buffer.read() if hasattr(stream, "buffer") else stream.read().encode()
    else:
        path = Path(name)
        if path.is_dir():
            raise UsageError(f"{name}: is a folder; expected a text file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{name}: {exc.strerror or exc}; expected a readable file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "standard input" if name == "-" else name
        raise UsageError(
            f"{where}: byte {data[exc.start]:#04x} at offset {exc.start:,} is not UTF-8; "
            "expected text (can't decode it as UTF-8)"
        ) from None


def _count(args: argparse.Namespace) -> int:
    if args.model is not None and args.encoding is not None:  # which one counts? neither said
        raise UsageError(
            f"--model {args.model} and --encoding {args.encoding} are both given; expected one "
            "of them (--model M | --encoding E)"
        )
    stdin = args.files.count("-")
    if stdin > 1:  # the second would read what the first left: nothing
        raise UsageError(
            f"- (standard input) is given {stdin} times; it can be read once; expected - at "
            "most once"
        )
    model = DEFAULT_MODEL if args.model is None else args.model
    tokenizer = get_tokenizer(args.encoding or model)
    rows: list[dict[str, Any]] = []
    for name in args.files:
        text = read_text(name)
        rows.append({"file": name, "chars": len(text), "tokens": tokenizer.count(text)})
    total = sum(r["tokens"] for r in rows)
    if args.json:
        print_json(
            {
                "tokens": total,
                "files": rows,
                "model": None if args.encoding else model,
                "encoding": tokenizer.name,
                "exact": tokenizer.exact,
                "cache": cache_info(),
            }
        )
        return 0
    kind = "exact" if tokenizer.exact else "estimate"
    table = Table(title=f"tokens ({tokenizer.name}, {kind})")
    table.add_column("file", overflow="fold")
    table.add_column("chars", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    for r in rows:
        label = "(stdin)" if r["file"] == "-" else r["file"]
        table.add_row(Text(label), f"{r['chars']:,}", f"{r['tokens']:,}")
    if len(rows) > 1:
        table.add_row("total", f"{sum(r['chars'] for r in rows):,}", f"{total:,}")
    stdout_console().print(table)
    return 0


def add_to(commands: Any) -> None:
    """Add ``count`` to the command line."""
    count: Parser = commands.add_parser(
        "count",
        help="count the tokens of files or of standard input",
        description="Count the tokens of each FILE ('-' reads standard input) with the model's "
        "tokenizer: exact for OpenAI encodings, a calibrated estimate for Claude and Gemini.",
    )
    count.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        type=given("a file name, or -"),
        help="a text file, or - for stdin",
    )
    count.add_argument("--model", help=f"model name (default: {DEFAULT_MODEL})")
    count.add_argument(
        "--encoding",
        type=given("an encoding such as o200k_base"),
        help="an encoding (o200k_base, cl100k_base) instead",
    )
    add_common(count, json_help='print {"tokens": N, "files": [...], ...}')
    count.set_defaults(run=_count)
