"""The command line as a person sees it: a real pseudo-terminal of 80 columns (pexpect)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
from pathlib import Path

import pexpect
import pytest

from ctxengine import FileStore
from offline_tiktoken import TRANSCRIPTS
from stored_sessions import write_session

COLUMNS = 80
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
README = Path(__file__).resolve().parents[1] / "README.md"


def _spawn(args: str, *, shell: str = "", columns: int = COLUMNS) -> pexpect.spawn:
    """``python -m ctxengine ARGS`` in a terminal of 24 lines and ``columns`` (80) columns
    (``shell`` wraps it in /bin/sh)."""
    command = f"{shlex.quote(sys.executable)} -m ctxengine {args}"
    # COLUMNS as the terminal says (under pytest the children were given COLUMNS=80, which
    # rich reads before the terminal's own size)
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "24"}
    size = (24, columns)
    if shell:
        return pexpect.spawn(
            "/bin/sh", ["-c", f"exec {command} {shell}"], dimensions=size, timeout=600, env=env
        )
    argv = shlex.split(command)
    return pexpect.spawn(argv[0], argv[1:], dimensions=size, timeout=600, env=env)


def _finish(child: pexpect.spawn) -> tuple[int, list[str]]:
    """Read to the end; the exit status and the screen lines (escapes and progress redraws cut)."""
    child.expect(pexpect.EOF)
    child.close()
    raw = child.before.decode("utf-8", errors="replace")
    lines = [line.split("\r")[-1] for line in _ANSI.sub("", raw).split("\r\n")]
    assert child.exitstatus is not None, f"killed by signal {child.signalstatus}"
    return child.exitstatus, lines


def _printed(lines: list[str]) -> list[str]:
    """The lines printed, without the terminal's echo of Ctrl-C (``^C``) and blank lines."""
    return [line.replace("^C", "").strip() for line in lines if line.replace("^C", "").strip()]


def _assert_fits(lines: list[str], columns: int = COLUMNS) -> None:
    too_long = [line for line in lines if len(line) > columns]
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


@pytest.mark.parametrize("columns", [60, 44])
def test_demo_on_a_narrow_terminal_leaves_columns_out_instead_of_cutting_numbers(
    columns: int,
) -> None:
    """On a terminal narrower than the calls table (80 columns show all eleven), columns go,
    the least telling first, and the caption names them: every number shown is whole. It
    used to squeeze all eleven into 60 columns, each number cut to ``1,…`` or ``12,4…``."""
    status, lines = _finish(_spawn("demo", columns=columns))
    text = "\n".join(lines)
    assert status == 0, text[-2000:]
    _assert_fits(lines, columns)
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["call"])
    header = lines[head].split()
    assert header[:4] == ["call", "msgs", "tokens", "%"] and "cmp" in header
    assert len(header) < 11 and "fold" not in header
    rows = []
    for line in lines[head + 2 :]:
        if not line.strip() or not line.split()[0].isdigit():
            break
        rows.append(line)
    assert len(rows) > 100 and not any("…" in row for row in rows), rows[:3]
    budget = 16_000
    for row in rows:  # the tokens and their share of the budget agree, so neither was cut
        tokens, share = int(row.split()[2].replace(",", "")), int(row.split()[3])
        assert tokens <= budget and share == round(100 * tokens / budget), row
    assert "not shown (terminal too narrow): fold, drop" in " ".join(text.split())


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad")
    (root / "binary.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x01\n")
    (root / "empty.jsonl").write_bytes(b"")
    (root / "a folder").mkdir()
    plugin = root / "plugins" / "bad"
    plugin.mkdir(parents=True)
    (plugin / "manifest.json").write_text('{"name": "bad", "version": "1", "entry": "x:Y"}')
    return root


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store folder holding session ``agent-1``; its latest snapshot's content is damaged."""
    root = tmp_path_factory.mktemp("store")
    write_session(FileStore(root), "agent-1")
    session = root / "sessions" / "agent-1"
    last = (session / "snapshots.jsonl").read_text().splitlines()[-1]
    digest = last.split('"hash":"')[1].split('"')[0]
    (session / "objects" / f"{digest}.json").write_text("{")
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
    "unknown session": ("snapshots nobody --store {store}", "", "no session 'nobody'"),
    "session id with a path": ("restore ../agent-1 --store {store}", "", "is not allowed"),
    "store is a file": ("context list agent-1 --store {readme}", "", "is not a directory"),
    "missing store": ("context detail agent-1 --store {root}/nope", "", "does not exist"),
    "store url scheme": ("restore agent-1 --store ftp://host/x", "", "unknown scheme 'ftp'"),
    "restore budget": ("restore agent-1 --store {store} --budget 0", "", "not a token count"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_wrapped_error_with_status_2(
    case: str, bad_files: Path, store: Path
) -> None:
    args, shell, expected = BAD_INPUTS[case]
    child = _spawn(args.format(root=bad_files, readme=README, store=store), shell=shell)
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
    assert _printed(lines)[-1:] == ["ctxengine: interrupted"]  # one line, last


@pytest.mark.parametrize("command", ["snapshots", "restore", "context list", "context detail"])
def test_store_commands_fit_80_columns_and_warn_about_a_damaged_snapshot(
    command: str, store: Path
) -> None:
    status, lines = _finish(_spawn(f"{command} agent-1 --store {store}"))
    text = "\n".join(lines)
    assert status == 0, text
    assert "Traceback" not in text
    _assert_fits(lines)
    warning = [i for i, line in enumerate(lines) if line.startswith("WARNING: ")]
    assert len(warning) == 1, text  # the damaged snapshot, said once (wrapped, not cut)
    end = next(
        (i for i in range(warning[0] + 1, len(lines)) if not lines[i].startswith("  ")), len(lines)
    )
    assert "is damaged" in " ".join(line.strip() for line in lines[warning[0] : end])


def test_a_refused_plugin_warning_is_wrapped_to_the_terminal(bad_files: Path) -> None:
    status, lines = _finish(_spawn(f"plugins list --plugins {bad_files / 'plugins'}"))
    text = "\n".join(lines)
    assert status == 1, text  # a refused plugin: a failed check, documented
    assert "Traceback" not in text
    _assert_fits(lines)
    assert "WARNING: plugin refused: bad" in text and text.count("plugin refused") == 1


def test_ctrl_c_while_a_store_command_waits_for_its_server_exits_130_quietly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "redis.sock"
    with socket.socket(socket.AF_UNIX) as server:  # accepts, reads the command, never answers
        server.bind(str(path))
        server.listen()
        server.settimeout(60)
        child = _spawn(f"snapshots agent-1 --store unix://{path}")
        conn, _ = server.accept()
        with conn:
            conn.settimeout(60)
            assert conn.recv(4096)  # the request is sent: the command waits for the reply
            child.sendintr()
            status, lines = _finish(child)
    text = "\n".join(lines)
    assert status == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert _printed(lines) == ["ctxengine: interrupted"]  # the one line, and the echo of ^C


def test_help_fits_80_columns_and_speaks_plainly() -> None:
    commands = ("demo", "replay", "count", "plugins list", "snapshots", "restore", "context")
    for args in ("--help", *(f"{c} --help" for c in (*commands, "context list", "context detail"))):
        status, lines = _finish(_spawn(args))
        assert status == 0
        _assert_fits(lines)
        text = "\n".join(lines)
        assert "``" not in text and "DESIGN.md" not in text
