"""Ctrl-C (SIGINT) at chosen moments of real commands: one line on stderr, exit status 130, no
traceback, and no half-written ``--out``/``--report`` file (docs/cli.md, exit status 130).

Each test runs ``python -m ctxengine`` in a child process whose ``sitecustomize`` (on its
``PYTHONPATH``) stops it at one call: there it prints a marker on stderr and waits for a file.
The test reads up to the marker, sends a real SIGINT, then creates the file, so the signal
reaches the child exactly at that call, with no sleep or timing in the test.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ctxengine import FileStore
from descriptors import open_descriptors
from offline_tiktoken import TRANSCRIPTS
from stored_sessions import write_session

MARKER = "<stopped here>"
INTERRUPTED = "ctxengine: interrupted"

#: Stops the child at each stop of ``CTXENGINE_TEST_STOP`` in turn (``;``-separated). The
#: first, ``name|within|nth``, is the ``nth`` call of the function ``name`` (a builtin too,
#: such as ``replace``) made while a frame of ``within`` (a function name, or a file's path
#: suffix) is on the stack. A later one, ``=module:attribute``, is the next call of that
#: function, wrapped when the stop before is reached (an exception out of a profile function
#: ends the profiling). At stop ``i`` the child prints the marker and waits for ``go.i``.
_STOP = f"""
import functools, importlib, os, sys, time

_stops = os.environ["CTXENGINE_TEST_STOP"].split(";")
_go = os.environ["CTXENGINE_TEST_GO"]
_name, _within, _nth = _stops[0].split("|")
_seen = 0


def _stop(i):
    if i + 1 < len(_stops):
        module, attribute = _stops[i + 1].removeprefix("=").split(":")
        owner = importlib.import_module(module)
        *path, last = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, last)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            _stop(i + 1)
            return original(*args, **kwargs)

        setattr(owner, last, wrapper)
    os.write(2, b"{MARKER}\\n")
    while not os.path.exists(f"{{_go}}.{{i}}"):  # the test sends SIGINT, then creates it
        time.sleep(0.005)


def _inside(frame):
    while frame is not None:
        code = frame.f_code
        if code.co_name == _within or code.co_filename.endswith(_within):
            return True
        frame = frame.f_back
    return False


def _profile(frame, event, arg):
    global _seen
    if event not in ("call", "c_call"):
        return
    called = frame.f_code.co_name if event == "call" else getattr(arg, "__name__", None)
    if called != _name or not _inside(frame):
        return
    _seen += 1
    if _seen == int(_nth):
        sys.setprofile(None)
        _stop(0)


sys.setprofile(_profile)
"""


def _interrupt_at(
    env: dict[str, str], tmp_path: Path, args: list[str], first: tuple[str, str, int], *then: str
) -> tuple[int, str, str]:
    """Run ``python -m ctxengine ARGS`` and send SIGINT at each stop (``first``: ``name,
    within, nth``; ``then``: ``module:attribute``); the exit status, stdout and stderr after
    the last marker. The child is let go on after each stop but the last of several (it must
    end without that)."""
    stops = ["|".join(map(str, first)), *(f"={t}" for t in then)]
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_STOP)
    go = tmp_path / "go"
    env = {
        **env,
        "PYTHONPATH": os.pathsep.join([str(hook), env["PYTHONPATH"]]),
        "CTXENGINE_TEST_STOP": ";".join(stops),
        "CTXENGINE_TEST_GO": str(go),
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "ctxengine", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    assert child.stderr is not None
    before: list[str] = []
    for i in range(len(stops)):
        for raw in child.stderr:
            if raw.decode("utf-8", errors="replace").rstrip("\n") == MARKER:
                break
            before.append(raw.decode("utf-8", errors="replace"))
        else:
            child.wait()
            raise AssertionError(f"never reached stop {i}: {''.join(before)[-3000:]}")
        child.send_signal(signal.SIGINT)
        if i == 0 or i < len(stops) - 1:
            Path(f"{go}.{i}").touch()
    try:  # a guard against a child that would never end, not a measure of time
        out, err = child.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise AssertionError("the child did not end after SIGINT") from None
    return child.returncode, out.decode(), err.decode()


def _assert_interrupted(status: int, err: str) -> None:
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert status == 130, err[-3000:]
    assert err == INTERRUPTED + "\n"


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


SMALL = str(TRANSCRIPTS / "openhands" / "output.jsonl")
LARGE = str(TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl")


BOTH = ["out.json", "report.json"]


@pytest.mark.parametrize(
    ("transcript", "name", "within", "nth", "expected"),
    [
        # while the command line imports its modules (rich is first needed by the tables)
        (SMALL, "<module>", "rich/console.py", 1, []),
        # while the transcript file is read
        (LARGE, "load_all", "_replay", 1, []),
        # in the middle of a long replay
        (LARGE, "add", "_run", 40, []),
        # the --out folder checked with a file created beside it, not yet removed
        (SMALL, "unlink", "_probe", 1, []),
        # --out written to its temporary file, not yet on disk: the replay stops there
        (SMALL, "fsync", "_write_outputs", 1, []),
        # --out renamed into place, --report not yet: both are put in place
        (SMALL, "replace", "_write_outputs", 2, BOTH),
    ],
    ids=["importing", "reading", "replaying", "checking-out", "writing-out", "renaming"],
)
def test_ctrl_c_during_replay_is_one_line_130_and_no_half_output(
    child_env: dict[str, str],
    tmp_path: Path,
    transcript: str,
    name: str,
    within: str,
    nth: int,
    expected: list[str],
) -> None:
    """Neither file while the temporary files are written (docs/cli.md), both once the
    renames began; never one alone, a temporary file or a half-written one."""
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    args = ["replay", transcript, "--budget", "4000"]
    args += ["--out", str(outputs / "out.json"), "--report", str(outputs / "report.json")]
    status, out, err = _interrupt_at(child_env, tmp_path, args, (name, within, nth))
    _assert_interrupted(status, err)
    written = sorted(p.name for p in outputs.iterdir())
    assert written == expected
    for name in written:  # whole files
        assert json.loads((outputs / name).read_text())
    assert "calls" not in out  # the table was not printed


def test_ctrl_c_during_replay_with_json_prints_no_partial_document(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    status, out, err = _interrupt_at(
        child_env, tmp_path, ["replay", LARGE, "--json"], ("add", "_run", 40)
    )
    _assert_interrupted(status, err)
    assert out == ""


def test_ctrl_c_during_restore_leaves_the_store_as_it_was(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    write_session(FileStore(store), "agent-1")
    before = _files(store)
    args = ["restore", "agent-1", "--store", str(store)]
    status, out, err = _interrupt_at(
        child_env, tmp_path, args, ("load_snapshot", "restore_session", 1)
    )
    _assert_interrupted(status, err)
    assert out == ""
    assert _files(store) == before


def test_a_second_ctrl_c_during_the_cleanup_is_the_same_one_line(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    """The first Ctrl-C stops the restore's render; a second one comes while the engine is
    being closed on the way out (the child is never let go on there): still one line and
    status 130, no traceback."""
    store = tmp_path / "store"
    store.mkdir()
    write_session(FileStore(store), "agent-1")
    args = ["restore", "agent-1", "--store", str(store)]
    first = ("restore", "restore_session", 1)  # the render, then the engine's close
    status, out, err = _interrupt_at(
        child_env, tmp_path, args, first, "ctxengine.engine:ContextEngine.close"
    )
    _assert_interrupted(status, err)
    assert out == ""


@pytest.mark.parametrize(
    ("name", "within"),
    [
        ("<module>", "ctxengine/cli.py"),  # the command line's module starts running
        ("<module>", "argparse.py"),  # a standard module it imports
    ],
    ids=["cli", "argparse"],
)
def test_ctrl_c_while_the_command_line_is_imported_is_one_line(
    child_env: dict[str, str], tmp_path: Path, name: str, within: str
) -> None:
    """Before ``main()`` runs, the program (``python -m ctxengine``, the ``ctxengine``
    script) imports the command line: a Ctrl-C then was Python's traceback."""
    args = ["count", str(Path(__file__))]
    status, out, err = _interrupt_at(child_env, tmp_path, args, (name, within, 1))
    _assert_interrupted(status, err)
    assert out == ""


def test_ctrl_c_as_a_command_that_succeeded_ends_is_one_line(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    """The signal comes as ``main()`` sets Ctrl-C to be ignored on its way out, after the
    command printed its output: it was a traceback out of ``main``."""
    args = ["count", str(Path(__file__)), "--json"]
    status, out, err = _interrupt_at(child_env, tmp_path, args, ("signal", "ignore_interrupts", 1))
    _assert_interrupted(status, err)
    assert json.loads(out)  # the command had printed its whole output


def test_the_program_entry_points_catch_an_interrupt_while_the_command_line_loads() -> None:
    """The ``ctxengine`` script runs what ``python -m ctxengine`` runs; the line written
    before :mod:`ctxengine.cli` is loaded is the one it writes."""
    import ctxengine.__main__ as program
    import ctxengine._interrupts as shared
    from ctxengine.cli import EXIT_INTERRUPTED
    from ctxengine.cli import INTERRUPTED as LINE

    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    scripts = pyproject.split("[project.scripts]\n", 1)[1].split("\n\n", 1)[0]
    assert scripts.splitlines() == ['ctxengine = "ctxengine.__main__:run"']
    assert program.say_interrupted is shared.say_interrupted
    assert shared.INTERRUPTED == LINE == INTERRUPTED
    assert program.EXIT_INTERRUPTED == EXIT_INTERRUPTED == 130


def _mine(signum: int, frame: object) -> None:
    """A SIGINT handler of the process calling ``main``."""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["plugins", "list"], 0),
        (["count", "no-such-file.txt"], 2),
        (["count", "--help"], "exit 0"),
    ],
    ids=["success", "error", "help"],
)
def test_main_without_argv_puts_the_callers_handler_back(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    expected: int | str,
) -> None:
    """Scripts and tests call ``main()`` in-process with ``sys.argv`` patched: it left SIGINT
    ignored for the rest of the caller's process (what only the program wants as it exits)."""
    from ctxengine.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxengine", *argv])
    previous = signal.signal(signal.SIGINT, _mine)
    try:
        try:
            status: int | str = main()
        except SystemExit as exc:
            status = f"exit {exc.code}"
        handler = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    capsys.readouterr()
    assert status == expected
    assert handler is _mine


def test_main_without_argv_interrupted_puts_the_callers_handler_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupted command is one line and 130, and Python's handler is back after it."""
    from ctxengine.cli import main

    dup2 = os.dup2

    def dup2_then_ctrl_c(fd: int, fd2: int, inheritable: bool = True) -> int:
        done = dup2(fd, fd2, inheritable)
        if (fd, fd2) == (2, 1):
            os.kill(os.getpid(), signal.SIGINT)
        return done

    monkeypatch.setattr(sys, "argv", ["ctxengine", "plugins", "list", "--json"])
    monkeypatch.setattr(os, "dup2", dup2_then_ctrl_c)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    try:
        status = main()
        handler = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    monkeypatch.undo()
    assert status == 130
    assert capsys.readouterr().err == INTERRUPTED + "\n"
    assert handler is signal.default_int_handler


def test_ctrl_c_while_json_redirects_descriptor_1_puts_it_back(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The Ctrl-C held while ``--json`` points descriptor 1 at stderr was raised as the hold
    ended, before the block that puts it back: descriptor 1 stayed on stderr, and the copy of
    stdout's descriptor was leaked."""
    from ctxengine.cli import main

    dup2 = os.dup2
    sent: list[int] = []

    def dup2_then_ctrl_c(fd: int, fd2: int, inheritable: bool = True) -> int:
        done = dup2(fd, fd2, inheritable)
        if (fd, fd2) == (2, 1) and not sent:
            sent.append(fd)
            os.kill(os.getpid(), signal.SIGINT)
        return done

    monkeypatch.setattr(os, "dup2", dup2_then_ctrl_c)
    before = open_descriptors()
    status = main(["plugins", "list", "--json"])
    after = open_descriptors()
    monkeypatch.undo()
    os.write(1, b"after the command\n")
    captured = capfd.readouterr()
    assert sent and status == 130
    assert captured.out == "after the command\n"
    assert captured.err == INTERRUPTED + "\n"
    assert after == before


def test_an_ignored_sigint_stays_ignored_and_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT ignored by whoever started the command (``ctxengine ... &`` in a script): a
    SIGINT while ``--out`` is written changes nothing. The write's hold put its own handler
    over the ignored one, and the replay was stopped with nothing written."""
    from ctxengine.cli import main

    fsync = os.fsync

    def fsync_then_sigint(fd: int) -> None:
        fsync(fd)
        os.kill(os.getpid(), signal.SIGINT)

    out = tmp_path / "out.json"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        monkeypatch.setattr(os, "fsync", fsync_then_sigint)
        status = main(["replay", SMALL, "--budget", "4000", "--out", str(out)])
        monkeypatch.undo()
        handler = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 0, capsys.readouterr().err
    assert json.loads(out.read_text())
    assert handler == signal.SIG_IGN
