"""The memory folder layout: ``MEMORY.md`` (long-term) and ``memory/YYYY-MM-DD.md`` (daily logs)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Final

__all__ = ("DAILY_DIR", "LONG_TERM", "append_daily", "daily_path")

LONG_TERM: Final = "MEMORY.md"
DAILY_DIR: Final = "memory"


def daily_path(folder: str | Path, when: datetime) -> Path:
    """``<folder>/memory/YYYY-MM-DD.md`` for the day of ``when``."""
    return Path(folder) / DAILY_DIR / f"{when:%Y-%m-%d}.md"


def append_daily(folder: str | Path, text: str, when: datetime) -> Path:
    """Append ``text`` (a block; a blank line separates blocks) to the daily log of ``when``,
    creating folders as needed, and flush it to disk. Returns the file's path.

    Raises:
        OSError: the folder or file cannot be written.
    """
    path = daily_path(folder, when)
    path.parent.mkdir(parents=True, exist_ok=True)
    block = text.strip() + "\n"
    with path.open("a", encoding="utf-8") as f:
        if f.tell() > 0:
            block = "\n" + block
        f.write(block)
        f.flush()
        os.fsync(f.fileno())
    return path
