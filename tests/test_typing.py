"""The public API is typed: a usage file passes mypy --strict; every old name still imports."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

import ctxengine

USAGE = Path(__file__).parent / "typing_usage" / "public_api.py"

#: Names that left ``__all__`` (internals, errors nothing raises yet) but still import.
DROPPED = (
    "SessionDispatcher",
    "Outcome",
    "PluginFault",
    "FoldError",
    "ContextOverflowError",
)


def test_usage_file_passes_mypy_strict() -> None:
    stdout, stderr, status = api.run(
        ["--strict", "--no-incremental", "--follow-imports=silent", str(USAGE)]
    )
    assert status == 0, stdout + stderr


def test_mypy_run_does_catch_a_type_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from ctxengine import Budget\nb: Budget = Budget(total='x')\n")
    stdout, _, status = api.run(["--strict", "--no-incremental", str(bad)])
    assert status == 1 and "total" in stdout


def test_all_lists_only_public_names() -> None:
    assert not set(DROPPED) & set(ctxengine.__all__)
    assert all(hasattr(ctxengine, name) for name in ctxengine.__all__)


@pytest.mark.parametrize("name", DROPPED)
def test_dropped_names_still_import(name: str) -> None:
    assert getattr(ctxengine, name).__name__ == name
