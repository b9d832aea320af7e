"""What a `Session` calls to persist itself and to resume: transcript, snapshots, restore input.

These functions are the whole contract between the engine and a store, so the wiring in
``Session`` stays one line per hook:

- after a message is recorded: ``record_messages(store, session.id, [message])``;
- after a render: ``snapshot_render(writer, session.id, state.to_json(), out, turn=...)``
  (returns at once; the snapshot is written in the background);
- when a session opens: ``resume(store, session_id)`` gives the stored messages of the current
  branch and the latest complete snapshot's state;
- a rewrite (compaction, persistent truncation): ``record_rewrite(...)`` appends the new
  messages as a branch from an earlier entry.

The store functions are synchronous and durable on return; call them from async code with
``await anyio.to_thread.run_sync(...)``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..errors import StoreError
from ..transcript import Message
from .base import (
    LEAF,
    Entry,
    Leaf,
    NewEntry,
    Snapshot,
    SnapshotInfo,
    Store,
    StoreProblem,
    compare_and_append,
)
from .codec import message_from_json, message_to_json
from .snapshot import Rendered, build_snapshot, snapshot_meta
from .writer import SnapshotWriter

__all__ = ("Resumed", "record_messages", "record_rewrite", "resume", "snapshot_render")

MESSAGE = "message"
REWRITE = "rewrite"

log = logging.getLogger("ctxengine.store")


def record_messages(
    store: Store,
    session_id: str,
    messages: Iterable[Message],
    *,
    parent_id: str | Leaf | None = LEAF,
    expected_leaf: str | Leaf | None = LEAF,
) -> list[Entry]:
    """Append ``messages`` (one entry each, kind ``"message"``) after the leaf; durable on return.

    ``expected_leaf`` (an entry id, or None for an empty session) makes it a compare-and-append
    (:func:`~ctxengine.store.compare_and_append`): written only if the session's leaf is still
    that entry. The default ``LEAF`` appends after whatever the leaf is.

    Raises:
        StoreConflictError: ``expected_leaf`` is not the leaf; nothing was written.
        StoreError: the store failed (nothing of this call may be relied on).
    """
    items = [NewEntry(MESSAGE, {"message": message_to_json(m)}) for m in messages]
    if expected_leaf is LEAF:
        return store.append(session_id, items, parent_id=parent_id)
    return compare_and_append(
        store, session_id, items, expected_leaf=expected_leaf, parent_id=parent_id
    )


def record_rewrite(
    store: Store,
    session_id: str,
    messages: Sequence[Message],
    *,
    parent_id: str | None,
    reason: str,
    details: Mapping[str, Any] | None = None,
    expected_leaf: str | Leaf | None = LEAF,
) -> list[Entry]:
    """Persist a rewrite as a branch: a ``"rewrite"`` marker whose parent is ``parent_id`` (the
    last entry kept as is; ``None`` to rewrite from the start), then ``messages``, the new
    version of everything after it. The leaf moves to the last of them; the old branch stays
    readable with :meth:`~ctxengine.Store.branch`.

    ``expected_leaf`` as for :func:`record_messages`: with an entry id (or None), the rewrite
    is written only if the session's leaf is still that entry.

    Raises:
        StoreConflictError: ``expected_leaf`` is not the leaf; nothing was written.
        StoreError: unknown ``parent_id`` or the store failed.
    """
    marker = NewEntry(REWRITE, {"reason": reason, **dict(details or {})})
    items = [marker] + [NewEntry(MESSAGE, {"message": message_to_json(m)}) for m in messages]
    if expected_leaf is LEAF:
        return store.append(session_id, items, parent_id=parent_id)
    return compare_and_append(
        store, session_id, items, expected_leaf=expected_leaf, parent_id=parent_id
    )


def snapshot_render(
    writer: SnapshotWriter,
    session_id: str,
    state: Mapping[str, Any] | None,
    rendered: Rendered,
    *,
    turn: int,
    leaf_id: str | None,
    include_payload: bool = False,
) -> Future[SnapshotInfo]:
    """Queue the snapshot of ``rendered`` (see :func:`~ctxengine.store.snapshot.build_snapshot`)
    on ``writer``; returns at once, the future resolves once it is durable. The snapshot is
    built in the writer's thread from ``rendered`` (which the session does not change after
    the render) and ``state`` (the caller passes a fresh ``to_json()`` copy).

    ``leaf_id`` is the last transcript entry the render saw (the last id ``record_messages``
    returned), so a restore knows which messages came after the snapshot.
    """

    def build() -> dict[str, Any]:
        return build_snapshot(
            rendered,
            session_id=session_id,
            turn=turn,
            state=state,
            leaf_id=leaf_id,
            include_payload=include_payload,
        )

    return writer.submit(session_id, build, meta=snapshot_meta, leaf_id=leaf_id)


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a store holds of a session, ready to rebuild it.

    Attributes:
        messages: The messages of the current branch, root first.
        entries: The message entries they came from (same order; ids for later branching).
        snapshot: The latest complete snapshot, or None.
        state: ``snapshot.content["state"]`` (opaque), or None.
        covered: How many of ``messages`` the snapshot's state already includes (those up to
            its ``leaf_id``); the rest came after it and are replayed.
        rewrites: The ``"rewrite"`` markers on the branch (compactions, truncations).
        leaf_id: The id of the branch's last entry, of any kind (None: empty).
        problems: Message entries left out because their message is malformed (also added
            to the store's ``problems`` when it has that list).
    """

    messages: list[Message]
    entries: list[Entry]
    snapshot: Snapshot | None
    state: Mapping[str, Any] | None
    covered: int
    rewrites: list[Entry] = field(default_factory=list)
    leaf_id: str | None = None
    problems: list[StoreProblem] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        """Whether anything was stored for the session."""
        return bool(self.entries) or self.snapshot is not None


def resume(store: Store, session_id: str, *, snapshot_id: str | None = None) -> Resumed:
    """Read back a session: the current branch's messages and the latest complete snapshot.

    A snapshot taken on another branch than the current one (its ``leaf_id`` is not on the
    branch, e.g. a rewrite happened after it) is still returned, with ``covered = 0``. So is one
    whose part of the branch has a hole (an entry lost to a damaged record, stepped over by the
    store): its state counts messages by position, and a message missing before its leaf would
    shift every later one, so the state is rebuilt from the intact messages instead.

    With ``snapshot_id``: that snapshot, and the branch from the root to its ``leaf_id``
    (so every message is covered; what was appended after it is left out).

    Raises:
        StoreError: the store failed, a stored message is malformed, or ``snapshot_id`` is
            not an intact snapshot of the session.
    """
    if snapshot_id is None:
        branch = store.branch(session_id)
        snapshot = store.load_snapshot(session_id)
    else:
        snapshot = store.load_snapshot(session_id, snapshot_id)
        if snapshot is None:  # a store that returns None for an unknown id
            raise StoreError(f"session {session_id!r} has no snapshot {snapshot_id!r}")
        leaf = snapshot.info.leaf_id
        branch = store.branch(session_id, leaf) if leaf is not None else []
    entries: list[Entry] = []
    messages: list[Message] = []
    problems: list[StoreProblem] = []
    bad: set[str] = set()
    for e in branch:
        if e.kind != MESSAGE:
            continue
        try:
            message = message_from_json(e.data.get("message"))
        except StoreError as exc:  # one bad record must not make the whole session unreadable
            bad.add(e.id)
            problems.append(
                StoreProblem(
                    session_id,
                    f"entry {e.id!r}",
                    f"{exc}: the message is left out, the rest of the branch is read",
                )
            )
            continue
        entries.append(e)
        messages.append(message)
    covered = 0
    if snapshot is not None and snapshot.info.leaf_id is not None:
        ids = [e.id for e in branch]
        if snapshot.info.leaf_id in ids:
            cut = ids.index(snapshot.info.leaf_id) + 1
            kept = branch[:cut]
            # The state counts messages by position: one left out before its leaf would
            # shift every later one, so the state is then rebuilt from the messages.
            if not _has_hole(kept) and not any(e.id in bad for e in kept):
                covered = sum(1 for e in kept if e.kind == MESSAGE)
        elif snapshot_id is None and _lost(store, session_id, snapshot.info.leaf_id):
            problems.append(
                StoreProblem(
                    session_id,
                    "transcript",
                    f"the latest snapshot ({snapshot.info.id!r}) names entry "
                    f"{snapshot.info.leaf_id!r}, which the transcript no longer holds (emptied, "
                    f"cut or replaced since): the session reopens with the {len(messages)} "
                    "messages it holds",
                )
            )
    state = snapshot.content.get("state") if snapshot is not None else None
    rewrites = [e for e in branch if e.kind == REWRITE]
    known = getattr(store, "problems", None)
    for problem in problems:
        log.warning("ctxengine store: %s", problem)
        if isinstance(known, list):
            known.append(problem)
    leaf = branch[-1].id if branch else None
    return Resumed(messages, entries, snapshot, state, covered, rewrites, leaf, problems)


def _lost(store: Store, session_id: str, leaf: str) -> bool:
    """Whether entry ``leaf`` is on no branch of the session (a snapshot taken on another
    branch, before a rewrite, names one the store still holds)."""
    try:
        store.branch(session_id, leaf)
    except StoreError:
        return True
    return False


def _has_hole(branch: Sequence[Entry]) -> bool:
    """Whether an entry of ``branch`` (root first) is missing: a parent link that skips one."""
    if branch and branch[0].parent_id is not None:
        return True
    return any(b.parent_id != a.id for a, b in itertools.pairwise(branch))
