"""Values nested past what the JSON encoder takes, and the recursion limit it checks them by."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def nested_dict(depth: int = 3000) -> dict[str, Any]:
    """``{"a": {"a": ...}}``, ``depth`` dicts deep."""
    top: dict[str, Any] = {}
    node = top
    for _ in range(depth):
        node["a"] = node = {}
    return top


@contextmanager
def recursion_limit(limit: int = 1000) -> Iterator[None]:
    """The interpreter's recursion limit at ``limit`` inside (another test may have raised it,
    and the JSON encoder's depth check follows it)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)
