"""README.md stays true: its commands exist (its example runs in tests/test_docs.py)."""

from __future__ import annotations

from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_commands_in_readme_are_real_subcommands() -> None:
    from ctxengine.cli import build_parser

    parser = build_parser()
    commands = ("demo", "count README.md", "plugins list", "replay x.jsonl", "snapshots s")
    for command in (*commands, "restore s", "context list s", "context detail s"):
        args = parser.parse_args(command.split())
        assert callable(args.run)
    assert "pip install '.[test]' && pytest" in README
    assert "pip install . && ctxengine demo" in README
