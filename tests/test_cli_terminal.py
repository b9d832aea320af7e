"""The command line as a person sees it: a real pseudo-terminal of 80 columns (pexpect)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pexpect
import pytest

from offline_tiktoken import TRANSCRIPTS

COLUMNS = 80
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
README = Path(__file__).resolve().parents[1] / "README.md"


def _spawn(args: str, *, shell: str = "") -> pexpect.spawn:
    """``python -m ctxengine ARGS`` in an 80x24 terminal (``shell`` wraps it in /bin/sh)."""
    command = f"{shlex.quote(sys.executable)} -m ctxengine {args}"
    if shell:
        return pexpect.spawn(
            "/bin/sh", ["-c", f"exec {command} {shell}"], dimensions=(24, COLUMNS), timeout=600
        )
    argv = shlex.split(command)
    return pexpect.spawn(argv[0], argv[1:], dimensions=(24, COLUMNS), timeout=600)


def _finish(child: pexpect.spawn) -> tuple[int, list[str]]:
    """Read to the end; the exit status and the screen lines (escapes and progress redraws cut)."""
    child.expect(pexpect.EOF)
    child.close()
    raw = child.before.decode("utf-8", errors="replace")
    lines = [line.split("\r")[-1] for line in _ANSI.sub("", raw).split("\r\n")]
    assert child.exitstatus is not None, f"killed by signal {child.signalstatus}"
    return child.exitstatus, lines


def _assert_fits(lines: list[str]) -> None:
    too_long = [line for line in lines if len(line) > COLUMNS]
    assert not too_long, too_long[:3]


def test_demo_fits_80_columns_shows_compactions_and_stays_within_budget() -> None:
    status, lines = _finish(_spawn("demo"))
    text = "\n".join(lines)
    assert status == 0, text[-2000:]
    _assert_fits(lines)
    assert "Traceback" not in text
    assert "compactions (older history summarized into mem.summary)" in text
    assert "largest cuts" in text
    summary = next(line for line in lines if " calls · peak " in line)
    assert re.match(
        r"\d+ calls · peak [\d,]+ tokens \(\d+% of 16,000\) · [1-9]\d* compactions", summary
    )
    assert "every call within budget" in text


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad")
    (root / "binary.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x01\n")
    (root / "empty.jsonl").write_bytes(b"")
    (root / "a folder").mkdir()
    return root


BAD_INPUTS = {
    "missing file": ("replay {root}/missing.jsonl", "", "missing.jsonl: no such file"),
    "directory": ("replay '{root}/a folder'", "", "is a folder; expected a transcript file"),
    "binary file": ("replay {root}/binary.jsonl", "", "not UTF-8 text"),
    "empty file": ("replay {root}/empty.jsonl", "", "file is empty"),
    "unknown model": ("count {readme} --model llama-3-70b", "", "unknown model or encoding"),
    "bad budget": ("demo --budget lots", "", "'lots' is not a token count"),
    "unknown provider": ("demo --provider bard", "", "invalid choice: 'bard'"),
    "bad plugin folder": ("demo --plugins {root}/nope", "", "does not exist or is not a folder"),
    "stdin closed": ("count -", "<&-", "standard input is closed"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_wrapped_error_with_status_2(case: str, bad_files: Path) -> None:
    args, shell, expected = BAD_INPUTS[case]
    child = _spawn(args.format(root=bad_files, readme=README), shell=shell)
    status, lines = _finish(child)
    text = "\n".join(lines)
    assert status == 2, text
    assert "Traceback" not in text
    _assert_fits(lines)
    printed = [line for line in lines if line.strip()]
    assert printed[0].startswith("error: ")
    assert all(line.startswith("  ") for line in printed[1:])  # continuation of the one message
    assert expected in " ".join(line.strip() for line in printed)


def test_ctrl_c_exits_130_quietly() -> None:
    child = _spawn(f"replay {TRANSCRIPTS / 'pi-openclaw-session' / 'large-session.jsonl'}")
    child.expect("replaying")  # the progress bar is up: the replay is running
    child.sendintr()
    status, lines = _finish(child)
    text = "\n".join(lines)
    assert status == 130
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    _assert_fits(lines)


def test_help_fits_80_columns_and_speaks_plainly() -> None:
    for args in ("--help", "demo --help", "replay --help", "count --help", "plugins list --help"):
        status, lines = _finish(_spawn(args))
        assert status == 0
        _assert_fits(lines)
        text = "\n".join(lines)
        assert "``" not in text and "DESIGN.md" not in text
