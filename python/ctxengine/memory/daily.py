"""The memory folder layout: ``MEMORY.md`` (long-term) and ``memory/YYYY-MM-DD.md`` (daily logs)."""

from __future__ import annotations

import fcntl
import os
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
    """Append ``block`` to ``path`` as an entry of its own, durably, creating folders as needed.

    The file is opened with ``O_APPEND`` and held under an exclusive ``flock`` while the end of
    the file is read and the block written, so processes and threads appending at once each
    get a whole entry, separated from the others by a blank line, whatever the file ended with
    (a file edited by hand may end without a newline, a crash may leave part of a block). The
    block goes out in one ``write`` (finished if the system writes it short), then ``fsync``,
    and for a new file an ``fsync`` of its folder. What the file held before stays as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        created = True
    except FileExistsError:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        created = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        tail = os.pread(fd, 2, size - 2) if size >= 2 else os.pread(fd, size, 0)
        # a blank line between the file's last text and the block
        head = b"" if tail in (b"", b"\n\n") else b"\n" if tail.endswith(b"\n") else b"\n\n"
        data = head + (block + "\n").encode("utf-8")
        written = os.write(fd, data)
        while written < len(data):  # a short write (full disk, signal): finish the block
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the flock
    if created:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def append_daily(folder: str | Path, text: str, when: datetime | date) -> Path:
    """Append ``text`` (a block; a blank line separates blocks) to the daily log of ``when``,
    creating folders as needed, durably (:func:`append_block`): a reader sees either the whole
    block or none of it. Returns the file's path.

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
