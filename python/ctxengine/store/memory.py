"""`InMemoryStore`: the :class:`~ctxengine.Store` semantics held in process memory.

For tests, for integrations that bring their own durability (the OpenAI Agents session), and as
the place a session keeps going when its durable store fails. Everything stored is a private
JSON copy, so later changes to the caller's dicts never leak in.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, final

from ..errors import StoreError
from .base import (
    LEAF,
    BranchTail,
    Entry,
    Leaf,
    NewEntry,
    Snapshot,
    SnapshotInfo,
    StoreProblem,
    branch_of,
    build_entries,
    check_tail_args,
    conflict_error,
    content_hash,
    entry_items,
    new_id,
    snapshot_json,
    snapshot_meta,
    tail_of,
    validate_session_id,
)
from .retention import (
    DEFAULT_KEEP_COMPACTIONS,
    DEFAULT_KEEP_SNAPSHOTS,
    Retention,
    check_retention,
    line_summary,
    pruned_error,
)

__all__ = ("InMemoryStore",)


@dataclass(slots=True)
class _Session:
    entries: list[Entry] = field(default_factory=list)
    by_id: dict[str, Entry] = field(default_factory=dict)
    snapshots: list[SnapshotInfo] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)
    retention: Retention | None = None


@final
class InMemoryStore:
    """An in-memory :class:`~ctxengine.Store` (thread-safe; nothing survives the process).

    Args:
        keep_snapshots: Snapshots of a session whose content is kept, as in
            :class:`~ctxengine.FileStore` (None keeps every one).
        keep_compactions: Besides those, the first snapshots after this many of the latest
            compactions (None: after every one).

    Raises:
        ConfigTypeError: a ``keep_`` argument is not an int or None.
        ConfigError: ``keep_snapshots`` below 1 or ``keep_compactions`` below 0.
    """

    __slots__ = ("_keep", "_lock", "_sessions", "problems")

    def __init__(
        self,
        *,
        keep_snapshots: int | None = DEFAULT_KEEP_SNAPSHOTS,
        keep_compactions: int | None = DEFAULT_KEEP_COMPACTIONS,
    ) -> None:
        self._keep = check_retention(keep_snapshots, keep_compactions)
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self.problems: list[StoreProblem] = []

    def __repr__(self) -> str:
        return f"ctxengine.InMemoryStore({len(self._sessions)} sessions)"

    def _get(self, session_id: str) -> _Session | None:
        return self._sessions.get(validate_session_id(session_id))

    def append(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """See :meth:`ctxengine.Store.append`."""
        return self._append(session_id, entries, parent_id, check=False, expected=None)

    def append_if(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        expected_leaf: str | None,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """See :meth:`ctxengine.store.ConditionalStore.append_if` (checked under the lock)."""
        return self._append(session_id, entries, parent_id, check=True, expected=expected_leaf)

    def _append(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        parent_id: str | Leaf | None,
        *,
        check: bool,
        expected: str | None,
    ) -> list[Entry]:
        validate_session_id(session_id)
        items = entry_items(entries)
        if not items:
            return []
        with self._lock:
            s = self._sessions.get(session_id) or _Session()
            if check:
                actual = s.entries[-1].id if s.entries else None
                if actual != expected:
                    raise conflict_error(session_id, expected, actual)
            parent = _resolve_parent(s, parent_id, session_id)
            new = build_entries(items, parent, s.by_id)
            if new:
                self._sessions[session_id] = s
                s.entries.extend(new)
                s.by_id.update((e.id, e) for e in new)
            return new

    def entries(self, session_id: str) -> list[Entry]:
        """See :meth:`ctxengine.Store.entries`."""
        with self._lock:
            s = self._get(session_id)
            return list(s.entries) if s else []

    def branch(self, session_id: str, leaf_id: str | None = None) -> list[Entry]:
        """See :meth:`ctxengine.Store.branch`."""
        with self._lock:
            s = self._get(session_id) or _Session()
            leaf = leaf_id if leaf_id is not None else (s.entries[-1].id if s.entries else None)
            return branch_of(s.by_id, leaf, session_id)

    def branch_tail(
        self, session_id: str, count: int, *, kinds: Container[str] | None = None
    ) -> BranchTail:
        """See :meth:`ctxengine.store.TailStore.branch_tail`: the walk from the leaf stops at
        the ``count``-th entry of ``kinds``."""
        check_tail_args(count, kinds)
        with self._lock:
            s = self._get(session_id) or _Session()
            leaf = s.entries[-1].id if s.entries else None
            found = tail_of(s.by_id, leaf, count, kinds, session_id)
            return BranchTail(found or [], leaf)  # None only from a partial walk

    def leaf(self, session_id: str) -> str | None:
        """See :meth:`ctxengine.Store.leaf`."""
        with self._lock:
            s = self._get(session_id)
            return s.entries[-1].id if s and s.entries else None

    def write_snapshot(
        self,
        session_id: str,
        content: Mapping[str, Any],
        *,
        meta: Mapping[str, Any] | None = None,
        leaf_id: str | Leaf | None = LEAF,
    ) -> SnapshotInfo:
        """See :meth:`ctxengine.Store.write_snapshot`."""
        validate_session_id(session_id)
        text = snapshot_json(content)
        clean_meta = snapshot_meta(meta)
        with self._lock:
            s = self._sessions.setdefault(session_id, _Session())
            leaf = _resolve_parent(s, leaf_id, session_id)
            digest = content_hash(text)
            s.blobs.setdefault(digest, text)
            info = SnapshotInfo(
                new_id(), session_id, digest, len(text.encode()), time.time(), leaf, clean_meta
            )
            s.snapshots.append(info)
            retention = s.retention = s.retention or Retention(*self._keep)
            retention.add(info.id, digest, line_summary(clean_meta))
            for gone in retention.prune(retention.due()):
                del s.blobs[gone]
            return info

    def snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """See :meth:`ctxengine.Store.snapshots`."""
        with self._lock:
            s = self._get(session_id)
            if s is None:
                return []
            pruned = s.retention.pruned if s.retention else set()
            return [
                dataclasses.replace(i, pruned=True) if i.id in pruned else i for i in s.snapshots
            ]

    def load_snapshot(self, session_id: str, snapshot_id: str | None = None) -> Snapshot | None:
        """See :meth:`ctxengine.Store.load_snapshot`."""
        with self._lock:
            s = self._get(session_id)
            if s is None or not s.snapshots:
                if snapshot_id is not None:
                    raise StoreError(f"session {session_id!r} has no snapshot {snapshot_id!r}")
                return None
            if snapshot_id is None:
                info = s.snapshots[-1]  # never pruned
            else:
                found = [i for i in s.snapshots if i.id == snapshot_id]
                if not found:
                    raise StoreError(f"session {session_id!r} has no snapshot {snapshot_id!r}")
                info = found[0]
                if s.retention is not None and info.id in s.retention.pruned:
                    raise pruned_error(session_id, info.id)
            return Snapshot(info, json.loads(s.blobs[info.hash]))

    def sessions(self) -> list[str]:
        """See :meth:`ctxengine.Store.sessions`."""
        with self._lock:
            return sorted(self._sessions)

    def exists(self, session_id: str) -> bool:
        """See :meth:`ctxengine.Store.exists`."""
        with self._lock:
            return self._get(session_id) is not None

    def delete(self, session_id: str) -> bool:
        """See :meth:`ctxengine.Store.delete`."""
        validate_session_id(session_id)
        with self._lock:
            return self._sessions.pop(session_id, None) is not None

    def close(self) -> None:
        """Nothing to release."""


def _resolve_parent(s: _Session, parent_id: str | Leaf | None, session_id: str) -> str | None:
    if parent_id is LEAF:
        return s.entries[-1].id if s.entries else None
    if parent_id is not None and (not isinstance(parent_id, str) or parent_id not in s.by_id):
        raise StoreError(f"session {session_id!r} has no entry {parent_id!r} to branch from")
    return parent_id
