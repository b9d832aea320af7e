"""`ctxengine count FILE...`: token counts of files from the command line."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ctxengine
from ctxengine.cli import main
from offline_tiktoken import TRANSCRIPTS, encoding

SESSION = TRANSCRIPTS / "claude-code-spotter" / "tool_heavy.jsonl"
AIDER = TRANSCRIPTS / "aider" / "mozgoslav.aider.chat.history.md"


def _tiktoken_count(path: Path, name: str) -> int:
    return len(encoding(name).encode_ordinary(path.read_text(encoding="utf-8")))


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich wraps output at the terminal width (80 without a terminal); long paths would break."""
    monkeypatch.setenv("COLUMNS", "400")


def _flat(text: str) -> str:
    """Messages as one line."""
    return " ".join(text.split())


def test_json_output_from_the_installed_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctxengine", "count", str(SESSION), "--model", "gpt-4o", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = json.loads(out.stdout)
    assert summary["tokens"] == _tiktoken_count(SESSION, "o200k_base")
    assert (summary["encoding"], summary["exact"]) == ("o200k_base", True)
    assert summary["files"] == [
        {
            "file": str(SESSION),
            "chars": len(SESSION.read_text(encoding="utf-8")),
            "tokens": summary["tokens"],
        }
    ]


def test_several_files_add_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(SESSION), str(AIDER), "--model", "gpt-4", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    per_file = [_tiktoken_count(p, "cl100k_base") for p in (SESSION, AIDER)]
    assert [f["tokens"] for f in summary["files"]] == per_file
    assert summary["tokens"] == sum(per_file)
    assert summary["encoding"] == "cl100k_base"


def test_encoding_instead_of_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(AIDER), "--encoding", "o200k_base", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == _tiktoken_count(AIDER, "o200k_base")


def test_an_estimate_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(SESSION), "--model", "claude-sonnet-4-5", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    factor = ctxengine.get_tokenizer("claude-sonnet-4-5").factor
    assert summary["exact"] is False
    assert summary["encoding"] == "claude~o200k_base"
    assert summary["tokens"] == math.ceil(_tiktoken_count(SESSION, "o200k_base") * factor)


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(SESSION), "--model", "gpt-4o"]) == 0
    out = capsys.readouterr().out
    assert f"{_tiktoken_count(SESSION, 'o200k_base'):,}" in out
    assert "o200k_base, exact" in out


def test_unknown_model_exits_2_with_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(SESSION), "--model", "llama-3-70b"]) == 2
    captured = capsys.readouterr()
    err = _flat(captured.err)
    assert 'unknown model or encoding "llama-3-70b"' in err
    assert "known families: gpt-4o" in err
    assert "--encoding o200k_base for any other model" in err  # flags, not Python keywords
    assert 'encoding="' not in err
    assert captured.out == ""


def test_unknown_model_exit_status_from_the_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctxengine", "count", str(SESSION), "--model", "nope", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert 'unknown model or encoding "nope"' in _flat(out.stderr)
    assert out.stdout == ""


def test_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    assert main(["count", str(missing), "--json"]) == 2
    err = _flat(capsys.readouterr().err)
    assert f"{missing}: No such file or directory; expected a readable file" in err


def test_binary_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"ok \xff\xfe\x00 not utf-8")
    assert main(["count", str(blob), "--model", "gpt-4o"]) == 2
    err = _flat(capsys.readouterr().err)
    assert f"{blob}: byte 0xff at offset 3 is not UTF-8" in err


def test_directory_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["count", str(tmp_path), "--model", "gpt-4o"]) == 2
    assert f"{tmp_path}: is a folder; expected a text file" in _flat(capsys.readouterr().err)


def test_dash_reads_standard_input() -> None:
    text = SESSION.read_text(encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "ctxengine", "count", "-", "--json"],
        input=text.encode(),
        capture_output=True,
        check=True,
    )
    summary = json.loads(out.stdout)
    assert summary["tokens"] == _tiktoken_count(SESSION, "o200k_base")
    assert summary["files"][0]["file"] == "-"


def test_closed_standard_input_is_a_clear_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctxengine", "count", "-"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=lambda: os.close(0),
    )
    assert out.returncode == 2
    assert out.stderr == "error: standard input is closed; give FILE names, or pipe text into it\n"


def test_empty_file_counts_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["count", str(empty), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 0


@pytest.mark.parametrize(
    "options",
    [
        ["--model", "gpt-4o", "--encoding", "cl100k_base"],
        ["--encoding", "cl100k_base", "--model", "gpt-4o"],
    ],
)
def test_a_model_and_an_encoding_together_are_refused(
    capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    """The usage is ``[--model M | --encoding E]``, yet both were taken and the encoding
    silently won: the count was not the model's."""
    assert main(["count", str(AIDER), *options, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "--model gpt-4o" in lines[0] and "--encoding cl100k_base" in lines[0]


def test_the_model_is_still_gpt_4o_when_neither_is_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["count", str(AIDER), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["model"], summary["encoding"]) == ("gpt-4o", "o200k_base")
    assert summary["tokens"] == _tiktoken_count(AIDER, "o200k_base")
    assert main(["count", str(AIDER), "--encoding", "cl100k_base", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["model"], summary["encoding"]) == (None, "cl100k_base")


def test_standard_input_given_twice_is_refused_before_it_is_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``count - -`` read standard input twice: the second read found it drained and
    counted 0 tokens, a row that looked like an empty input."""
    stdin = io.TextIOWrapper(io.BytesIO(b"some text to count"), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["count", "-", str(AIDER), "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: - (standard input) is given 2 times")
    assert captured.err.count("\n") == 1
    assert stdin.read() == "some text to count"  # nothing read
