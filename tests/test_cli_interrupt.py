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


@pytest.mark.parametrize(
    ("transcript", "name", "within", "nth"),
    [
        # while the command line imports its modules (rich is first needed by the tables)
        (SMALL, "<module>", "rich/console.py", 1),
        # while the transcript file is read
        (LARGE, "load_all", "_replay", 1),
        # in the middle of a long replay
        (LARGE, "add", "_run", 40),
        # the --out folder checked with a file created beside it, not yet removed
        (SMALL, "unlink", "_probe", 1),
        # --out written to its temporary file, not yet on disk
        (SMALL, "fsync", "_write_outputs", 1),
        # --out renamed into place, --report not yet
        (SMALL, "replace", "_write_outputs", 2),
    ],
    ids=["importing", "reading", "replaying", "checking-out", "writing-out", "renaming"],
)
def test_ctrl_c_during_replay_is_one_line_130_and_no_half_output(
    child_env: dict[str, str], tmp_path: Path, transcript: str, name: str, within: str, nth: int
) -> None:
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    args = ["replay", transcript, "--budget", "4000"]
    args += ["--out", str(outputs / "out.json"), "--report", str(outputs / "report.json")]
    status, out, err = _interrupt_at(child_env, tmp_path, args, (name, within, nth))
    _assert_interrupted(status, err)
    written = sorted(p.name for p in outputs.iterdir())
    assert written in ([], ["out.json", "report.json"])  # both or neither, no temporary file
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
