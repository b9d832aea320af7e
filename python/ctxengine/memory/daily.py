"""The memory folder layout: ``MEMORY.md`` (long-term) and ``memory/YYYY-MM-DD.md`` (daily logs)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Final

from ..errors import EncodingError
from ..transcript.model import lone_surrogate

__all__ = ("DAILY_DIR", "LONG_TERM", "append_daily", "check_text", "daily_path")

LONG_TERM: Final = "MEMORY.md"
DAILY_DIR: Final = "memory"


def daily_path(folder: str | Path, when: datetime) -> Path:
    """``<folder>/memory/YYYY-MM-DD.md`` for the day of ``when``."""
    return Path(folder) / DAILY_DIR / f"{when:%Y-%m-%d}.md"


def check_text(text: object) -> None:
    """Raise :class:`EncodingError` unless ``text`` is a str UTF-8 can hold.

    Raises:
        EncodingError: naming the first lone surrogate's position, or the type given.
    """
    if not isinstance(text, str):
        raise EncodingError(f"memory text is {type(text).__name__}; expected a str")
    at = lone_surrogate(text)
    if at is not None:
        raise EncodingError(
            f"memory text holds a lone surrogate {text[at]!r} at character {at}; "
            "expected valid Unicode text"
        )


def append_daily(folder: str | Path, text: str, when: datetime) -> Path:
    """Append ``text`` (a block; a blank line separates blocks) to the daily log of ``when``,
    creating folders as needed, durably: the block goes out in one ``O_APPEND`` write, then
    ``fsync`` (and, for a new file, an ``fsync`` of its folder), so a reader sees either the
    whole block or none of it. Returns the file's path.

    Raises:
        OSError: the folder or file cannot be written.
        EncodingError: ``text`` is not a str, or holds a lone surrogate (nothing is written).
    """
    check_text(text)
    path = daily_path(folder, when)
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        block = text.strip() + "\n"
        if os.fstat(fd).st_size > 0:
            block = "\n" + block
        data = block.encode("utf-8")
        written = os.write(fd, data)
        while written < len(data):  # a short write (full disk, signal): finish the block
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    if created and hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path
