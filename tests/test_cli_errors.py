"""Bad command-line input is one error line on stderr with exit status 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxengine.cli import main
from offline_tiktoken import TRANSCRIPTS


def test_demo_budget_above_the_model_window_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--model", "gpt-4", "--budget", "50000"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "50,000" in lines[0] and "8,192" in lines[0] and "gpt-4" in lines[0]
    assert "within budget" not in captured.out


def test_replay_of_a_markdown_file_that_is_not_an_aider_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = TRANSCRIPTS / "README.md"
    assert main(["replay", str(readme)]) == 2
    err = capsys.readouterr().err
    assert "no '# aider chat started at' line" in " ".join(err.split())
    assert "Traceback" not in err


def test_replay_of_json_that_is_no_transcript_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "obj.json"
    path.write_text('{"a": 1}')
    assert main(["replay", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}: payload keys are ['a']" in err and "Traceback" not in err


def test_replay_of_a_non_utf8_file_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"role": "user", "content": "caf\xe9"}\n')
    assert main(["replay", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "byte offset 32" in err and "Traceback" not in err


def test_an_unknown_model_hints_only_at_options_the_command_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = str(Path(__file__).resolve().parents[1] / "README.md")
    assert main(["count", readme, "--model", "llama-3-70b"]) == 2
    count = capsys.readouterr().err
    assert "Pass --encoding cl100k_base or --encoding o200k_base" in count  # count has it
    assert main(["demo", "--model", "llama-3-70b"]) == 2
    demo = capsys.readouterr().err
    assert demo.startswith('error: unknown model or encoding "llama-3-70b"; known families:')
    assert "claude-* and gemini-* (estimated), also as ft: fine-tunes and Bedrock ids." in demo
    assert "encoding=" not in demo and "--encoding" not in demo  # demo has no such option
    assert demo.count("\n") == 1


def test_an_unknown_model_is_told_the_model_option_that_works(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``demo``/``replay`` have no ``--encoding``: their hint was dropped, leaving none; the
    engine takes an encoding as its model, which the hint now says as this command's flag."""
    small = str(TRANSCRIPTS / "claude-code-spotter" / "subagent.jsonl")
    assert main(["replay", small, "--model", "llama-3-70b"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "Pass --model o200k_base or --model cl100k_base for any other model" in err
    assert "model=" not in err
    assert main(["replay", small, "--model", "o200k_base", "--json"]) == 0  # the advice works
    assert '"within_budget": true' in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["count", str(TRANSCRIPTS / "README.md")],
        ["count", str(TRANSCRIPTS / "README.md"), "--json"],
        ["plugins", "list"],
        ["replay", str(TRANSCRIPTS / "openhands" / "output.jsonl"), "--budget", "4000"],
    ],
    ids=lambda argv: " ".join(a for a in argv if not a.startswith("/")),
)
def test_a_closed_stdout_exits_141_quietly(argv: list[str]) -> None:
    # rich's console turned the closed pipe into SystemExit(1), a failed check; docs/cli.md: 141
    read, write = os.pipe()
    os.close(read)  # the reader went away before the first byte: every write is EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ctxengine", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_replay_of_a_claude_code_record_of_the_wrong_kind_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cc.jsonl"
    user = '{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}'
    path.write_text(user + '\n{"type":"assistant","uuid":"a1","parentUuid":"u1","message":5}\n')
    assert main(["replay", str(path), "--format", "claude-code"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in lines[0]
    assert "cc.jsonl line 2.message: value is 5; expected an object" in lines[0]


@pytest.mark.parametrize("command", ["demo", "restore agent-1"])
def test_a_budget_beyond_any_count_is_refused_as_the_budget_option(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A huge --budget was passed on to the library, whose message named its own keyword
    argument ('total must be a positive int ...'), not the option the user typed."""
    huge = "99999999999999999999999"
    assert main([*command.split(), "--budget", huge]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert f"argument --budget: '{huge}' is not a token count" in err
    assert "1,099,511,627,776" in err and "total" not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["plugins", "list", "--plugins", ""],
            "argument --plugins: '' is empty; expected a folder",
        ),
        (["demo", "--plugins", ""], "argument --plugins: '' is empty; expected a folder"),
        (["restore", "s", "--plugins", ""], "argument --plugins: '' is empty; expected a folder"),
        (["count", "-", "--encoding", ""], "argument --encoding: '' is empty; expected an enc"),
        (["count", ""], "argument FILE: '' is empty; expected a file name"),
        (["replay", ""], "argument FILE: '' is empty; expected a file name"),
    ],
)
def test_an_empty_value_is_refused_not_taken_as_no_option(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    """'--plugins "$DIR"' with DIR unset ran without the plugins, '--encoding ""' counted with
    the model's, and an empty FILE was reported as the folder '.' (replay) or ':' (count)."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert expected in captured.err


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["demo", "--jsn"], "ctxengine demo"),
        (["context", "list", "s", "--ful"], "ctxengine context list"),
        (["plugins", "list", "extra"], "ctxengine plugins list"),
    ],
)
def test_an_unknown_option_names_the_command_it_was_given_to(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str
) -> None:
    """A mistyped option was reported by the top-level parser, which pointed at
    'ctxengine --help', where the command's options are not listed."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {prog}: unrecognized arguments: {argv[-1]} ")
    assert err.endswith(f"(see '{prog} --help')\n")


@pytest.mark.parametrize(
    "given",
    ["aider", "claude-code", "openai", "openai-responses", "anthropic", "gemini", "swe-agent"],
)
def test_replay_with_a_format_the_file_plainly_is_not_names_the_option_to_use(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """``replay pi.jsonl --format aider`` replayed the pi session as one aider reply of 308k
    tokens (status 0); ``--format claude-code`` said ``format='auto'``, a keyword argument
    of the library, and ``--format openai`` named a missing key with no word of the format."""
    pi = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
    assert main(["replay", str(pi), "--format", given, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {pi}: "), captured.err
    assert f"format {given!r}" in lines[0] and "format=" not in lines[0]
    assert lines[0].endswith("; it looks like 'pi' (pass --format pi, or --format auto)")
