"""Persistence: the `Store` protocol, `InMemoryStore`, `FileStore`, `RedisStore`, snapshots.

See DESIGN.md §7 and docs/store.md for the formats on disk and the guarantees.
``RedisStore`` is imported on first use, so ``import ctxengine`` never imports redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import (
    LEAF,
    BranchTail,
    ConditionalStore,
    Entry,
    NewEntry,
    Snapshot,
    SnapshotInfo,
    Store,
    StoreProblem,
    TailStore,
    branch_tail,
    compare_and_append,
    validate_session_id,
)
from .file import FileStore
from .memory import InMemoryStore

if TYPE_CHECKING:
    from .redis_store import RedisStore

__all__ = (
    "LEAF",
    "BranchTail",
    "ConditionalStore",
    "Entry",
    "FileStore",
    "InMemoryStore",
    "NewEntry",
    "RedisStore",
    "Snapshot",
    "SnapshotInfo",
    "Store",
    "StoreProblem",
    "TailStore",
    "branch_tail",
    "compare_and_append",
    "validate_session_id",
)


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from .redis_store import RedisStore

        return RedisStore
    raise AttributeError(f"module 'ctxengine.store' has no attribute {name!r}")
