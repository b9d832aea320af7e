"""Fixtures for the transcript tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ctxengine.transcript import Transcript, load_all

from .helpers import all_files


@pytest.fixture(scope="session")
def real() -> dict[Path, list[Transcript]]:
    """Every shared transcript file, loaded once: path -> its transcripts."""
    return {p: load_all(p) for p in all_files()}


@pytest.fixture()
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a text file under tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write
