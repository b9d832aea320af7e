"""README.md stays true: its example prints what it says, its commands exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_example_prints_what_the_readme_says() -> None:
    code = re.search(r"```python\n(.*?)```", README, re.S)
    expected = re.search(r"prints\n\n```\n(.*?)```", README, re.S)
    assert code and expected
    out = subprocess.run(
        [sys.executable, "-c", code.group(1)], capture_output=True, text=True, check=True
    )
    assert out.stdout == expected.group(1)


def test_commands_in_readme_are_real_subcommands() -> None:
    from ctxengine.cli import build_parser

    parser = build_parser()
    for command in ("demo", "count README.md", "plugins list", "replay x.jsonl"):
        args = parser.parse_args(command.split())
        assert callable(args.run)
    assert "pip install '.[test]' && pytest" in README
    assert "pip install . && ctxengine demo" in README
