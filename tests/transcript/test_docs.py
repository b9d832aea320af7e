"""The docstring examples of ctxengine.transcript run (page examples: tests/test_docs.py)."""

from __future__ import annotations


def test_docstring_examples() -> None:
    import doctest

    import ctxengine.transcript

    result = doctest.testmod(ctxengine.transcript)
    assert result.attempted >= 1 and result.failed == 0
