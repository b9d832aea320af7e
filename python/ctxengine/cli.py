"""The ctxengine command line: replay agent sessions, inspect stored ones, count tokens, plugins.

Each command lives in its own module (listed in :data:`COMMANDS`) with one ``add_to(commands)``
function that adds its parser and sets ``run(args) -> int``. This module owns what they share:
the parser class, the output helpers and the exit statuses.

Exit statuses: 0 success, 1 a check failed (e.g. a refused plugin) or an internal error,
2 a user error (bad value, unreadable file, unknown model...), 130 interrupted (Ctrl-C),
141 the reader of stdout went away (``ctxengine demo | head``).

Importing this module is cheap (no rich, no render pipeline): :func:`main` takes Ctrl-C in
hand before the commands' modules are imported, so an interrupt while they load is one line
too, not a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import importlib
import io
import json
import logging
import os
import re
import shutil
import signal
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Final, NoReturn, cast

from . import __version__
from ._interrupts import EXIT_INTERRUPTED, INTERRUPTED, ignore_interrupts, say_interrupted
from .errors import CtxEngineError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = (
    "COMMANDS",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "INTERRUPTED",
    "UsageError",
    "add_common",
    "budget_arg",
    "build_parser",
    "given",
    "interrupts_held",
    "main",
    "print_json",
    "stderr_console",
    "stdout_console",
    "writes_files",
)

#: The modules that add a command (``add_to(commands)``); a new command is one more module.
COMMANDS: Final = (
    "ctxengine.cli_replay",
    "ctxengine.cli_store",
    "ctxengine.cli_context",
    "ctxengine.cli_count",
    "ctxengine.plugins.cli",
)
EXIT_USAGE: Final = 2
EXIT_BROKEN_PIPE: Final = 141
_OPTIONS: Final = "encoding|format|model"  # keyword arguments of the library that are flags here


class UsageError(CtxEngineError):
    """A bad command line: the value and what was expected (exit status 2)."""


#: The attribute a parse leaves on its namespace while it runs: the innermost command's name
#: (``ctxengine demo``), which reports an unknown argument (no option can take this name).
_PROG: Final = "ctxengine prog"


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr, exit status 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, _PROG):  # the innermost command parses first
            setattr(parsed, _PROG, self.prog)
        return parsed, extras

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but an unknown argument is reported by the command it was given
        to (``ctxengine demo: unrecognized arguments: --jsn``), whose help lists the options,
        not by the top-level parser."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = getattr(parsed, _PROG, self.prog)
            raise UsageError(
                f"{prog}: unrecognized arguments: {' '.join(extras)} (see '{prog} --help')"
            )
        delattr(parsed, _PROG)
        return parsed


@functools.cache
def _console_class() -> type[Console]:
    """The rich console class of the command line (rich is imported on first use)."""
    from rich.console import Console

    class _Console(Console):
        """A rich console whose closed pipe reaches :func:`main` as the ``BrokenPipeError`` it
        is (exit status 141, quietly, like the ``--json`` output), not as rich's
        ``SystemExit(1)``, which made ``ctxengine demo | head`` look like a failed check."""

        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more to write: the buffer is dropped
            raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")

    return _Console


#: Where the data goes while a ``--json`` command runs (stdout then stands for stderr).
_data_out: list[IO[str]] = []


def stdout_console() -> Console:
    """The console for tables and text (rich markup off: data is never markup)."""
    console = _console_class()
    return console(file=_data_out[-1] if _data_out else None, highlight=False, markup=False)


def stderr_console() -> Console:
    """The console for progress bars, so that stdout carries only the result."""
    return _console_class()(stderr=True, highlight=False, markup=False)


def print_json(data: Any, out: IO[str] | None = None) -> None:
    """Print ``data`` as indented JSON, uncolored, for scripts."""
    stream = out or (_data_out[-1] if _data_out else sys.stdout)
    stream.write(json.dumps(data, ensure_ascii=False, indent=1) + "\n")


def _run_for_data(args: argparse.Namespace) -> int:
    """Run a ``--json`` command with stdout carrying the data alone: what anything else
    prints there goes to stderr, be it ``print`` (``sys.stdout``) or a write to file
    descriptor 1 itself (a plugin's ``os.write(1, ...)``, a child process inheriting it)."""
    with _descriptor_1_to_stderr() as data:
        _data_out.append(data)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                return int(args.run(args))
        finally:
            _data_out.pop()


def _descriptor(stream: IO[str] | None) -> int | None:
    try:
        return None if stream is None else stream.fileno()
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both
        return None


class _DataOut(io.TextIOBase):
    """The stream of a ``--json`` command's data while descriptor 1 points at stderr: each
    write goes through ``sys.stdout`` as the caller set it (the real stdout, or a wrapper of
    theirs that logs what it is given), with descriptor 1 pointing at stdout again for the time
    of the write. With no stdout (``>&-``), the data is written nowhere, as tables are."""

    def __init__(self, stdout: IO[str] | None, saved: int) -> None:
        super().__init__()
        self._stdout, self._saved = stdout, saved  # saved: stdout's descriptor, or -1

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stdout, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        try:
            return self._stdout is not None and bool(self._stdout.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        stdout = self._stdout
        if stdout is None:
            return len(text)
        if self._saved < 0:  # descriptor 1 was closed: not redirected
            stdout.write(text)
            stdout.flush()
            return len(text)
        try:
            stdout.flush()  # what a stray write left in its buffer goes to stderr
            os.dup2(self._saved, 1)
            stdout.write(text)
            stdout.flush()
        finally:
            _point_descriptor_1_at(2)
        return len(text)


#: The copies of stdout's descriptor while a ``--json`` command runs (descriptor 1 then points
#: at stderr); :func:`main` puts back one an interrupt left behind.
_saved_stdout: list[int] = []


@contextlib.contextmanager
def _descriptor_1_to_stderr() -> Iterator[IO[str]]:
    """Point file descriptor 1 at stderr (descriptor 2) while the block runs, and yield the
    stream for the data (:class:`_DataOut`)."""
    stdout = sys.stdout
    if stdout is not None:
        stdout.flush()
    saved = -1
    try:
        # Ctrl-C meanwhile is raised as the hold ends, inside this ``try``: descriptor 1 is
        # put back by the ``finally`` whatever moment it comes.
        with interrupts_held():
            with contextlib.suppress(OSError):  # descriptor 1 is closed: nothing writes to it
                saved = os.dup(1)
            if saved >= 0:
                _saved_stdout.append(saved)
                if sys.stderr is not None:
                    sys.stderr.flush()
                _point_descriptor_1_at(2)
        yield cast(IO[str], _DataOut(stdout, saved))  # a TextIOBase: IO[str] to typeshed
    finally:
        if saved >= 0:
            with interrupts_held():
                _restore_descriptor_1()


def _restore_descriptor_1() -> None:
    """Point descriptor 1 at stdout again (the innermost copy saved), if it was redirected."""
    if _saved_stdout:
        saved = _saved_stdout[-1]
        os.dup2(saved, 1)
        _saved_stdout.pop()
        os.close(saved)


def _point_descriptor_1_at(target: int | None) -> None:
    """Point descriptor 1 at descriptor ``target``, or at the null device if ``target`` is
    None or closed (what is then written to descriptor 1 is dropped)."""
    if target is not None:
        try:
            os.dup2(target, 1)
            return
        except OSError:  # closed
            pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
    finally:
        os.close(devnull)


def budget_arg(text: str) -> int:
    """``--budget``: a token count ≥ 1 (``32000``, ``32_000`` or ``32,000``), at most the
    largest count a :class:`~ctxengine.Budget` takes (beyond it the library's message would
    name its keyword argument, not this option)."""
    from .assemble.budget import MAX_TOKENS

    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a token count; expected an int ≥ 1")
    if value > MAX_TOKENS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a token count; expected an int from 1 to {MAX_TOKENS:,}"
        )
    return value


def given(expected: str) -> Callable[[str], str]:
    """An argument type that refuses an empty value (``--plugins "$DIR"`` with ``DIR`` unset),
    which would otherwise be taken as the option not given, or as the folder ``.``."""

    def check(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"'' is empty; expected {expected}")
        return text

    return check


def add_common(parser: argparse.ArgumentParser, *, json_help: str) -> None:
    """The options every command has: ``--json`` and ``--debug``."""
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error, and debug logs",
    )


#: The attribute :func:`writes_files` sets on a command's namespace: its options naming files.
_WRITES: Final = "_writes_files"


def writes_files(parser: argparse.ArgumentParser, *options: str) -> None:
    """Declare ``options`` of ``parser`` (``"--out"``...) as files the command writes: with
    ``--json``, one naming the file stdout is (``/dev/stdout``, or the file stdout is
    redirected to) is refused before the command runs, stdout carrying the data."""
    parser.set_defaults(**{_WRITES: options})


def _refuse_files_on_stdout(args: argparse.Namespace) -> None:
    """Refuse a file option (:func:`writes_files`) of a ``--json`` command naming the same file
    as stdout: written while descriptor 1 points at stderr, ``/dev/stdout`` would be stderr,
    and a file stdout is redirected to would get the data and the file in one. The null device
    takes both: an option naming it through stdout (``/dev/stdout`` with stdout on
    ``/dev/null``) is made to name it directly, or it would be opened as stderr."""
    try:
        stdout = os.fstat(1)
    except OSError:  # closed: there is no such file
        return
    for option in getattr(args, _WRITES, ()):
        name = option.lstrip("-").replace("-", "_")
        value = getattr(args, name, None)
        if not value:
            continue
        try:
            same = os.path.samestat(os.stat(value), stdout)
            if same and os.path.samestat(os.stat(os.devnull), stdout):
                setattr(args, name, os.devnull)
                same = False
        except (OSError, ValueError):  # no such file yet (or a bad path): not stdout's
            continue
        if same:
            raise UsageError(
                f"{option} {value}: is the same file as stdout, which carries the --json data; "
                f"expected another path for {option}, or no --json"
            )


def build_parser() -> Parser:
    """The parser of every command."""
    parser = Parser(
        prog="ctxengine",
        description="Build the context an LLM agent sends to its model: replay real agent "
        "sessions through the engine, inspect the sessions a store holds (snapshots, restore, "
        "context), count tokens, list plugins.",
        epilog="Run 'ctxengine COMMAND --help' for a command's options. Exit status: 0 ok, "
        "1 a check failed, 2 a user error, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"ctxengine {__version__}")
    parser.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).add_to(commands)
    return parser


def main(argv: Sequence[str] | None = None, *, program: bool = False) -> int:
    """Run the command line; returns the exit status. Without ``argv``, ``sys.argv[1:]``.

    Ctrl-C (SIGINT) at any moment of the command, while its modules are imported too, ends it
    with :data:`INTERRUPTED` on stderr and status 130, never a traceback; once it is caught,
    Ctrl-C is ignored while the command ends. Python's own handler stays in place while the
    command runs, so that ``asyncio.run`` (and anyio's) can cancel its main task, not stop
    the event loop half-way through a step. When ``main`` returns, the SIGINT handler it was
    called with is back, whatever the outcome and whether ``argv`` was given or not (scripts
    and tests call it in-process with ``sys.argv`` patched). A SIGINT ignored when ``main``
    starts (``command &`` in a script) stays ignored.

    ``program=True`` is for the program alone (:func:`ctxengine.__main__.run`, which the
    ``ctxengine`` script and ``python -m ctxengine`` run): Ctrl-C is ignored once the command
    is done, while the process exits (one that comes as it is done makes it status 130 too),
    and the handler is not put back."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        status = EXIT_INTERRUPTED  # what an interrupt that escapes the command leaves
        try:
            status = _main(argv)
        except KeyboardInterrupt:  # one that came while an error was reported, or as _main ended
            status = EXIT_INTERRUPTED
        while True:  # a Ctrl-C while interrupts are being ignored is taken, not raised
            try:
                if (program or status == EXIT_INTERRUPTED) and ignore_interrupts():
                    status = EXIT_INTERRUPTED
                break
            except KeyboardInterrupt:
                status = EXIT_INTERRUPTED
        if status == EXIT_INTERRUPTED:
            with contextlib.suppress(OSError):
                _restore_descriptor_1()  # left pointing at stderr by an interrupt on the way out
            say_interrupted()
        return status
    finally:  # SystemExit too (--help, --version, a parse error)
        if not program and previous is not None:  # None: a handler set outside Python
            with contextlib.suppress(ValueError):  # not the main thread: it was never changed
                signal.signal(signal.SIGINT, previous)


def _main(argv: Sequence[str] | None) -> int:
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    logger = logging.getLogger("ctxengine")
    level, handler = logger.level, _log_to_stderr(debug)
    flags: set[str] | None = None  # the options of the command run (None: not parsed yet)
    try:
        args = build_parser().parse_args(argv)
        flags = set(vars(args))
        if getattr(args, "json", False):
            _refuse_files_on_stdout(args)  # before descriptor 1 points at stderr
            status = _run_for_data(args)
        else:
            status = int(args.run(args))
        if sys.stdout is not None:
            sys.stdout.flush()  # a closed pipe is found here, not while the process exits
        return status
    except KeyboardInterrupt:
        ignore_interrupts()  # the command ends: a second Ctrl-C cuts nothing short
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except (CtxEngineError, OSError) as exc:
        _report(_one_line(exc, flags), debug)
        return EXIT_USAGE
    except Exception as exc:  # a bug: still one line, with the way to the traceback
        _report(f"internal error: {type(exc).__name__}: {exc}", debug, internal=True)
        return 1
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextlib.contextmanager
def interrupts_held() -> Iterator[Callable[[], None]]:
    """Hold Ctrl-C (SIGINT) over a step that must not stop half-way (a file created and then
    removed, a pair of files renamed into place): an interrupt that comes meanwhile is
    delivered when the step ends, or raised as ``KeyboardInterrupt`` where the step calls the
    function yielded (a point where stopping leaves nothing behind). Where no handler can be
    set (not the main thread, or a handler set outside Python) the step runs as it is, and
    so it does where SIGINT is ignored (``command &`` in a script): it stays ignored."""
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    def check() -> None:
        if pending:
            pending.clear()
            raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    try:
        if previous == signal.SIG_IGN:
            previous = None  # left ignored: nothing to hold
        if previous is not None:  # None: a handler set outside Python, left alone
            signal.signal(signal.SIGINT, hold)
    except ValueError:  # not the main thread
        previous = None
    if previous is None:
        yield lambda: None
        return
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:  # as if it came now
            signal.raise_signal(signal.SIGINT)


def _one_line(exc: BaseException, flags: set[str] | None = None) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    text = " ".join(str(exc).split())
    if flags is not None:  # a hint to pass an option this command does not have is dropped
        missing = [o for o in _OPTIONS.split("|") if o not in flags]
        if missing:
            unusable = re.compile(rf"\b({'|'.join(missing)})=")
            sentences = re.split(r"(?<=[.;])\s+", text)
            text = " ".join(t for t in sentences if not unusable.search(t)).rstrip(";")
    # Library messages name keyword arguments (encoding="o200k_base"); here they are flags.
    text = re.sub(rf'\b({_OPTIONS})="([^"]*)"', r"--\1 \2", text)
    return re.sub(rf"\b({_OPTIONS})=(?=[\s),;]|$)", r"--\1", text)


def _report(message: str, debug: bool, *, internal: bool = False) -> None:
    if debug:
        traceback.print_exc()
    elif internal:
        message += " (run it again with --debug for the traceback)"
    # wrapped to the terminal; to a pipe or file it stays one line
    sys.stderr.write(_wrap(f"error: {message}") + "\n")


class _Wrapped(logging.Formatter):
    """One record, one message: wrapped to the terminal's width like errors (one line to a
    pipe or file)."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info:  # --debug: the traceback as it is
            return super().format(record)
        return _wrap(" ".join(super().format(record).split()))


class _Once(logging.Filter):
    """Drops a message already shown (a damaged file read twice is reported once)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def _wrap(text: str) -> str:
    if not sys.stderr.isatty():
        return text
    width = shutil.get_terminal_size().columns
    lines = textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines) or text


def _log_to_stderr(debug: bool) -> logging.Handler:
    """The library logs to a NullHandler; the command line shows its warnings, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Wrapped("%(levelname)s: %(message)s"))
    handler.addFilter(_Once())
    handler.setLevel(logging.DEBUG if debug else logging.WARNING)
    logger = logging.getLogger("ctxengine")
    logger.addHandler(handler)
    if debug:
        logger.setLevel(logging.DEBUG)
    return handler


def _silence_stdout() -> None:
    """After the reader of stdout went away (``ctxengine ... | head``), exit without noise: what
    is left in ``sys.stdout``'s buffer is flushed to the null device when the process exits."""
    if _descriptor(sys.stdout) == 1:
        _point_descriptor_1_at(None)


if __name__ == "__main__":
    sys.exit(main())
