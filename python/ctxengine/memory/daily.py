"""The memory folder layout: ``MEMORY.md`` (long-term) and ``memory/YYYY-MM-DD.md`` (daily logs)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from datetime import date, datetime
from pathlib import Path
from typing import Final

from ..errors import ConfigError, ConfigTypeError, EncodingError
from ..transcript.model import lone_surrogate

__all__ = (
    "DAILY_DIR",
    "LONG_TERM",
    "MAX_TEXT_CHARS",
    "append_block",
    "append_daily",
    "check_text",
    "daily_path",
)

LONG_TERM: Final = "MEMORY.md"
DAILY_DIR: Final = "memory"


def daily_path(folder: str | Path, when: datetime | date) -> Path:
    """``<folder>/memory/YYYY-MM-DD.md`` for the day of ``when`` (made of its year, month and
    day numbers, so no ``__format__`` of a subclass can name another path)."""
    return Path(folder) / DAILY_DIR / f"{when.year:04d}-{when.month:02d}-{when.day:02d}.md"


#: Most characters one write may hold: a memory entry is a note, not a document (every search
#: reads, splits and embeds every entry).
MAX_TEXT_CHARS: Final = 1_000_000


def check_text(text: object) -> str:
    """``text`` stripped, when a memory file can hold it as an entry of its own.

    Raises:
        EncodingError: ``text`` is not a str, or holds a lone surrogate or a NUL character,
            naming the type or the first bad character's position.
        ConfigError: ``text`` is blank, or longer than :data:`MAX_TEXT_CHARS`.
    """
    if not isinstance(text, str):
        raise EncodingError(f"memory text is {type(text).__name__}; expected a str")
    at = lone_surrogate(text)
    if at is not None:
        raise EncodingError(
            f"memory text holds a lone surrogate {text[at]!r} at character {at}; "
            "expected valid Unicode text"
        )
    at = text.find("\0")
    if at >= 0:
        # a Markdown file holding a NUL reads as binary to grep, git and editors
        raise EncodingError(
            f"memory text holds a NUL character at character {at} ({text[max(0, at - 20) : at]!r} "
            "before it); expected text without NUL"
        )
    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(
            f"memory text is {len(text)} characters ({text[:40]!r}...); expected at most "
            f"{MAX_TEXT_CHARS}"
        )
    block = text.strip()
    if not block:
        raise ConfigError(f"memory text is {text!r:.60}; expected some text (it is blank)")
    return block


def append_block(path: Path, block: str) -> Path:
    """Add ``block`` at the end of ``path`` as an entry of its own, durably, creating folders
    as needed; the file is replaced whole, so a crash or a failed write at any point leaves
    it as it was (an append cut short by a crash left part of a block, read back as a fact).

    Under an exclusive ``flock`` on the file's folder (which the rename leaves in place), the
    file is read, written with the block after it to a temporary file in the same folder
    (``.<name>.<pid>.<random>.tmp``, the file's permissions), ``fsync``-ed, renamed over the
    file, and the folder ``fsync``-ed. Processes and threads adding at once each get a whole
    entry, separated from the others by a blank line, whatever the file ended with (a file
    edited by hand may end without a newline). A file that is a symbolic link is replaced
    where it leads (the link stays). Temporary files a killed writer left are removed by the
    next write (none can be in use: a writer holds the lock while its own exists). Each
    write costs the file's size: memory files are notes, read whole by every search anyway.

    Raises:
        OSError: the folder or file cannot be read or written (the file is left as it was,
            and no temporary file).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    folder = target.parent
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        _remove_leftovers(folder, target.name)
        try:
            with open(target, "rb") as f:
                old = f.read()
                mode: int | None = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
        except FileNotFoundError:
            old, mode = b"", None  # a new file: 0o644 less the umask, as open() makes it
        # a blank line between the file's last text and the block
        head = b"" if old[-2:] in (b"", b"\n\n") else b"\n" if old.endswith(b"\n") else b"\n\n"
        data = old + head + (block + "\n").encode("utf-8")
        tmp = folder / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{_TMP}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                if mode is not None:  # the umask takes bits off os.open's mode, not fchmod's
                    os.fchmod(fd, mode)
                view = memoryview(data)
                while view:  # a short write (full disk, signal): finish it
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)  # releases the flock
    return path


#: The suffix of the temporary files :func:`append_block` writes.
_TMP: Final = ".tmp"


def _remove_leftovers(folder: Path, name: str) -> None:
    """Remove the temporary files of ``name`` a writer killed before its rename left in
    ``folder`` (called under the folder's lock)."""
    prefix = f".{name}."
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(prefix) and entry.name.endswith(_TMP):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def append_daily(folder: str | Path, text: str, when: datetime | date) -> Path:
    """Append ``text`` (a block; a blank line separates blocks) to the daily log of ``when``,
    creating folders as needed, durably (:func:`append_block`): a reader, or a crash, sees
    either the whole block or none of it. Returns the file's path.

    Raises:
        OSError: the folder or file cannot be written.
        EncodingError: ``text`` is not a str, or holds a lone surrogate or a NUL (nothing is
            written).
        ConfigError: ``text`` is blank or longer than :data:`MAX_TEXT_CHARS`.
        ConfigTypeError: ``when`` is not a date or datetime.
    """
    block = check_text(text)
    if not isinstance(when, date):
        raise ConfigTypeError(
            f"when is {type(when).__name__} {when!r:.60}; expected a datetime or a date"
        )
    return append_block(daily_path(folder, when), block)
