"""The `Store` protocol and the records every store reads and writes (DESIGN.md §7).

A store keeps, per session:

- an **append-only transcript tree**: entries with an ``id`` and a ``parent_id``. Appending
  extends the current branch; a rewrite (compaction, persistent truncation) appends new entries
  whose first parent is an earlier entry, which starts a branch. The session's **leaf** is the
  last entry appended, and the current branch is the parent chain from the leaf to the root.
  Nothing is ever edited in place, so every earlier branch can still be read;
- **snapshots**: opaque JSON documents (the render state and its decisions) with an index of
  metadata, each stored once by content hash.

Concurrency model. Store methods are synchronous and thread-safe: each call is one short,
durable operation (an ``fsync``-ed append, a Redis transaction). Async code calls them in a
worker thread (``await anyio.to_thread.run_sync(store.append, ...)``), and renders never wait for
snapshots: :class:`~ctxengine.store.SnapshotWriter` writes them from a background thread and
``flush()`` waits for the ones submitted so far. A method returns only once its data is durable
(the "acknowledgement"); an exception means nothing of that call may be relied on, while
everything acknowledged before stays readable.

Several writers. :meth:`Store.append` chains after the leaf atomically, so two writers never
tear each other's appends, but two writers that each keep a session in memory would still
interleave their messages. The stores of this package also offer ``append_if`` (see
:class:`ConditionalStore`): append only if the session's leaf is still the entry the writer last
saw, else raise :class:`~ctxengine.StoreConflictError` with nothing written; the check and the
append are one atomic step (a lock, an ``flock``, a Redis ``WATCH``). :func:`compare_and_append`
calls it, and on a store without it (one of your own written before it existed) checks the
leaf, then appends: what such a store did before, not atomic, and it logs that once.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import re
import secrets
import time
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from ..errors import SessionIdError, StoreConflictError, StoreError
from ..transcript.model import lone_surrogate

__all__ = (
    "LEAF",
    "BranchTail",
    "ConditionalStore",
    "Entry",
    "Leaf",
    "NewEntry",
    "Snapshot",
    "SnapshotInfo",
    "Store",
    "StoreProblem",
    "TailStore",
    "TranscriptGaps",
    "branch_of",
    "branch_tail",
    "canonical_json",
    "compare_and_append",
    "conflict_error",
    "content_hash",
    "validate_session_id",
)

#: Longest accepted session id (a file name on every common file system, a short Redis key).
MAX_SESSION_ID: Final = 128
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+=-]*")
_ENTRY_ID: Final = re.compile(r"[A-Za-z0-9_.:@+=-]{1,128}")


class Leaf(enum.Enum):
    LEAF = "leaf"


#: ``parent_id`` default of :meth:`Store.append`: the session's current leaf.
LEAF: Final = Leaf.LEAF


@dataclass(frozen=True, slots=True)
class NewEntry:
    """An entry to append: its ``kind`` (``"message"``, ``"compaction"``...), JSON ``data`` and
    optionally its own ``id`` (a store generates one otherwise)."""

    kind: str
    data: Mapping[str, Any]
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored transcript entry. ``ts`` is the Unix time it was appended."""

    id: str
    parent_id: str | None
    kind: str
    data: Mapping[str, Any]
    ts: float

    def to_json(self) -> dict[str, Any]:
        """The entry as one JSON object (the line format of :class:`~ctxengine.FileStore`)."""
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "kind": self.kind,
            "ts": self.ts,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, obj: object) -> Entry:
        """Parse :meth:`to_json` output.

        Raises:
            StoreError: ``obj`` is not a complete entry.
        """
        if not isinstance(obj, dict):
            raise StoreError(f"entry is {type(obj).__name__}; expected a JSON object")
        eid, parent, kind, ts, data = (
            obj.get(k) for k in ("id", "parent_id", "kind", "ts", "data")
        )
        if not isinstance(eid, str) or not eid:
            raise StoreError(f"entry id is {eid!r}; expected a non-empty string")
        if parent is not None and not isinstance(parent, str):
            raise StoreError(f"entry {eid!r}: parent_id is {parent!r}; expected a string or null")
        if not isinstance(kind, str) or not isinstance(data, dict):
            raise StoreError(f"entry {eid!r}: kind must be a string and data an object")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            raise StoreError(f"entry {eid!r}: ts is {ts!r}; expected a number")
        return cls(eid, parent, kind, data, float(ts))


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One line of a session's snapshot index: metadata and the content reference.

    Attributes:
        id: The snapshot's id (starts with the time in ms, so ids sort by time to the millisecond).
        session_id: Its session.
        hash: ``sha256`` of the canonical JSON of the content; content is stored once per hash.
        size: Bytes of that canonical JSON.
        created_at: Unix time the snapshot was written.
        leaf_id: The transcript leaf the snapshot's state corresponds to (``None``: empty).
        meta: Small metadata for listings (turn, provider, model, budget, tokens, payload hash).
        pruned: Whether the store's retention removed the content (the line is kept for the
            listing; :meth:`Store.load_snapshot` of it raises). Read from the store, never
            part of the stored line.
    """

    id: str
    session_id: str
    hash: str
    size: int
    created_at: float
    leaf_id: str | None
    meta: Mapping[str, Any] = field(default_factory=dict)
    pruned: bool = False

    def to_json(self) -> dict[str, Any]:
        """The index line as a JSON object."""
        return {
            "id": self.id,
            "session_id": self.session_id,
            "hash": self.hash,
            "size": self.size,
            "created_at": self.created_at,
            "leaf_id": self.leaf_id,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, obj: object) -> SnapshotInfo:
        """Parse :meth:`to_json` output.

        Raises:
            StoreError: ``obj`` is not a complete index line.
        """
        if not isinstance(obj, dict):
            raise StoreError(f"snapshot index line is {type(obj).__name__}; expected an object")
        try:
            sid, session, digest = str(obj["id"]), str(obj["session_id"]), str(obj["hash"])
            size, created = int(obj["size"]), float(obj["created_at"])
            leaf, meta = obj.get("leaf_id"), obj.get("meta") or {}
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"snapshot index line is incomplete: {exc!r}") from exc
        if (leaf is not None and not isinstance(leaf, str)) or not isinstance(meta, dict):
            raise StoreError(f"snapshot {sid!r}: leaf_id must be a string or null, meta an object")
        return cls(sid, session, digest, size, created, leaf, meta)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot read back: its index line and its content (verified against ``info.hash``)."""

    info: SnapshotInfo
    content: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StoreProblem:
    """Something a store skipped while reading (a torn last line, a damaged snapshot).

    Problems are never fatal: the damaged piece is skipped and the rest is read.
    """

    session_id: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@runtime_checkable
class Store(Protocol):
    """Persistence for sessions: transcript tree, snapshots, listing (see the module docstring).

    Every method is synchronous, thread-safe and durable on return; every method raises
    :class:`~ctxengine.SessionIdError` (a ``ValueError``) for an invalid session id and
    :class:`~ctxengine.StoreError` (naming the path or key and the OS error) when the backend
    cannot read or write. ``problems`` lists what was skipped while reading.
    """

    problems: list[StoreProblem]

    def append(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """Append ``entries`` as a chain and move the leaf to the last one.

        The first entry's parent is ``parent_id``: the current leaf by default, an earlier entry
        to start a branch (a rewrite), or ``None`` for a new root. All entries of one call are
        acknowledged together.

        Raises:
            StoreError: unknown ``parent_id``, an entry id already in the session, data that is
                not JSON-serializable, or the backend failed.
        """
        ...

    def entries(self, session_id: str) -> list[Entry]:
        """Every entry of the session in append order (all branches); ``[]`` if none."""
        ...

    def branch(self, session_id: str, leaf_id: str | None = None) -> list[Entry]:
        """The entries from the root to ``leaf_id`` (default: the current leaf).

        Raises:
            StoreError: ``leaf_id`` is not an entry of the session.
        """
        ...

    def leaf(self, session_id: str) -> str | None:
        """The id of the session's current leaf, ``None`` for an empty session."""
        ...

    def write_snapshot(
        self,
        session_id: str,
        content: Mapping[str, Any],
        *,
        meta: Mapping[str, Any] | None = None,
        leaf_id: str | Leaf | None = LEAF,
    ) -> SnapshotInfo:
        """Store ``content`` (once per content hash) and append its index line naming
        ``leaf_id``. With the default (the session's leaf) the leaf is read atomically with the
        write: no append lands in between, so the line names the leaf the store had then.

        Raises:
            StoreError: content or meta not JSON-serializable, or the backend failed.
        """
        ...

    def snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """The session's snapshot index, oldest first (without loading the contents); a
        snapshot whose content the store's retention removed has ``pruned=True``."""
        ...

    def load_snapshot(self, session_id: str, snapshot_id: str | None = None) -> Snapshot | None:
        """The snapshot ``snapshot_id``, or the latest complete one when ``None``.

        A snapshot whose content is missing or does not match its hash is reported in
        ``problems`` and skipped (the latest complete earlier one is returned), a pruned one
        skipped quietly; ``None`` when there is none.

        Raises:
            StoreError: ``snapshot_id`` is given and that snapshot is missing, damaged, or was
                pruned by the store's retention (the message says so).
        """
        ...

    def sessions(self) -> list[str]:
        """The ids of every session held, sorted."""
        ...

    def exists(self, session_id: str) -> bool:
        """Whether the store holds any entry or snapshot of the session."""
        ...

    def delete(self, session_id: str) -> bool:
        """Remove the session entirely; False when there was nothing to remove."""
        ...

    def close(self) -> None:
        """Release connections and file handles; the store is unusable afterwards."""
        ...


@runtime_checkable
class ConditionalStore(Protocol):
    """A :class:`Store` that can append atomically on a condition (optional; every store of this
    package is one). Call it through :func:`compare_and_append`, which also serves stores
    without it."""

    def append_if(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        expected_leaf: str | None,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """:meth:`Store.append`, only if the session's leaf is ``expected_leaf`` (``None``: the
        session holds no entry), checked and appended as one atomic step. With the default
        ``parent_id`` the entries go after ``expected_leaf``; an earlier entry starts a branch.

        Raises:
            StoreConflictError: the leaf is another entry; nothing was written.
            StoreError: as :meth:`Store.append`.
        """
        ...


@dataclass(frozen=True, slots=True)
class BranchTail:
    """The newest entries of a session's current branch (:func:`branch_tail`).

    Attributes:
        entries: The latest ``count`` entries of the branch whose kind was asked for, oldest
            first (all of them when the branch holds fewer).
        leaf: The id of the session's current leaf (the branch's last entry, whatever its
            kind), ``None`` for an empty session.
    """

    entries: list[Entry]
    leaf: str | None


@runtime_checkable
class TailStore(Protocol):
    """A :class:`Store` that reads the newest entries of a branch at the cost of those entries,
    not of the session (optional; every store of this package is one). Call it through
    :func:`branch_tail`, which also serves stores without it."""

    def branch_tail(
        self, session_id: str, count: int, *, kinds: Container[str] | None = None
    ) -> BranchTail:
        """What :func:`branch_tail` returns: equal to the end of :meth:`Store.branch` (the
        entries of ``kinds``, the latest ``count`` of them) and :meth:`Store.leaf`, read in
        one step."""
        ...


def check_tail_args(count: object, kinds: object) -> None:
    """Check the arguments of :func:`branch_tail`.

    Raises:
        StoreError: ``count`` is not an int >= 0, or ``kinds`` is a str or no container of
            kinds (a str would match its substrings).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise StoreError(f"count is {count!r}; expected an int >= 0 (entries to read)")
    if kinds is not None and (isinstance(kinds, (str, bytes)) or not isinstance(kinds, Container)):
        raise StoreError(
            f"kinds is {kinds!r}; expected a collection of entry kinds such as "
            "{'message'}, or None for every kind"
        )


def branch_tail(
    store: Store, session_id: str, count: int, *, kinds: Container[str] | None = None
) -> BranchTail:
    """The latest ``count`` entries of the session's current branch whose kind is in ``kinds``
    (every kind when None), oldest first, and the session's leaf.

    ``store.branch_tail`` when the store has it (the stores of this package read only the end
    of the branch, from the leaf back to the ``count``-th such entry). Otherwise, the default
    for any store: :meth:`Store.branch` read whole, and its end kept.

    Raises:
        StoreError: ``count`` is not an int >= 0, ``kinds`` is a str or no collection of
            kinds, or the store failed.
    """
    check_tail_args(count, kinds)
    method = getattr(store, "branch_tail", None)
    if callable(method):
        result: BranchTail = method(session_id, count, kinds=kinds)
        return result
    branch = store.branch(session_id)
    chosen = [e for e in branch if kinds is None or e.kind in kinds]
    return BranchTail(
        chosen[max(0, len(chosen) - count) :] if count else [], branch[-1].id if branch else None
    )


#: What :func:`tail_of` returns when the entries it was given do not reach far enough back.
NEED_MORE: Final = None

#: The answers of a read from a session's end besides a tail: the piece does not reach far
#: enough back (read more of the session), or it holds what only a read of the whole session
#: can tell.
MORE: Final = "more"
WHOLE: Final = "whole"


@dataclass(slots=True)
class Piece:
    """The newest intact entries of a session in append order (a read from its end), kept so
    that the entries appended after them can be added (:meth:`add`) and the branch's end
    read (:meth:`tail`) as a read of the whole session would find it: an entry's parent
    counts only when it is an entry before it in the piece (the whole read takes any other
    for one lost to damage, or a damaged ``parent_id``)."""

    by_id: dict[str, Entry] = field(default_factory=dict)
    #: the entries whose parent is no entry before them in the piece
    unresolved: set[str] = field(default_factory=set)
    leaf: str | None = None

    def add(self, entries: list[Entry]) -> bool:
        """Take ``entries``, appended after those held; False, with nothing taken, when an id
        is there twice (the whole read keeps the first copy, which may be before the piece)."""
        ids = {e.id for e in entries}
        if len(ids) < len(entries) or not ids.isdisjoint(self.by_id):
            return False
        for entry in entries:
            if entry.parent_id is not None and entry.parent_id not in self.by_id:
                self.unresolved.add(entry.id)
            self.by_id[entry.id] = entry
            self.leaf = entry.id
        return True

    def tail(self, count: int, kinds: Container[str] | None, session_id: str) -> BranchTail | str:
        """:func:`branch_tail` from the piece, or :data:`MORE` when the walk from the leaf
        needs an entry before it."""
        if self.leaf is None:
            return MORE
        found = tail_of(
            self.by_id,
            self.leaf,
            count,
            kinds,
            session_id,
            unresolved=self.unresolved,
            partial=True,
        )
        return MORE if found is NEED_MORE else BranchTail(found, self.leaf)


def tail_of(
    by_id: Mapping[str, Entry],
    leaf_id: str | None,
    count: int,
    kinds: Container[str] | None,
    session_id: str,
    gaps: TranscriptGaps | None = None,
    *,
    unresolved: Container[str] = (),
    partial: bool = False,
) -> list[Entry] | None:
    """The end of :func:`branch_of`: walking parents from ``leaf_id``, the first ``count``
    entries of ``kinds`` (every kind when None), returned oldest first. It stops there, so
    it costs the walk to those entries, not to the root.

    ``partial``: ``by_id`` holds only the newest entries of the session (a read from the end);
    ``unresolved`` the ids among them whose parent is no entry read before them there. The walk
    returns :data:`NEED_MORE` (None) when it needs an entry before those (a parent ``by_id``
    does not hold, or one of ``unresolved``'s), instead of raising.

    Raises:
        StoreError: (not ``partial``) ``leaf_id`` or a parent on the way is unknown, or the
            parents form a cycle.
    """
    links: Mapping[str, str | None] = gaps.links if gaps is not None else {}
    relinked: Mapping[str, str | None] = gaps.relinked if gaps is not None else {}
    out: list[Entry] = []
    current = leaf_id
    hops = steps = 0
    while current is not None and len(out) < count:
        entry = by_id.get(current)
        if entry is None:
            if partial:
                return NEED_MORE
            if current not in links or hops >= len(links):
                raise StoreError(f"session {session_id!r} has no entry {current!r}")
            hops += 1
            current = links[current]
            continue
        steps += 1
        if steps > len(by_id):
            if partial:
                return NEED_MORE
            raise StoreError(f"session {session_id!r}: entry parents form a cycle at {current!r}")
        if kinds is None or entry.kind in kinds:
            out.append(entry)
        if partial and entry.id in unresolved:
            if len(out) < count and entry.parent_id is not None:
                return NEED_MORE
            break
        current = relinked.get(entry.id, entry.parent_id)
    out.reverse()
    return out


_NOT_ATOMIC: set[type] = set()


def compare_and_append(
    store: Store,
    session_id: str,
    entries: Iterable[NewEntry],
    *,
    expected_leaf: str | None,
    parent_id: str | Leaf | None = LEAF,
) -> list[Entry]:
    """Append ``entries`` only if the session's leaf is still ``expected_leaf``.

    ``store.append_if`` when the store has it (atomic). Otherwise the leaf is read, compared,
    and :meth:`Store.append` called: the same append as before this function existed, with a
    check that another writer can still slip past between the read and the append (logged
    once per store type on the ``ctxengine.store`` logger).

    Raises:
        StoreConflictError: the leaf is another entry; nothing was written.
        StoreError: the store failed.
    """
    method = getattr(store, "append_if", None)
    if callable(method):
        result: list[Entry] = method(
            session_id, entries, expected_leaf=expected_leaf, parent_id=parent_id
        )
        return result
    kind = type(store)
    if kind not in _NOT_ATOMIC:
        _NOT_ATOMIC.add(kind)
        logging.getLogger("ctxengine.store").warning(
            "ctxengine store: %s has no append_if(): the leaf is checked before each append, "
            "not atomically with it, so two writers racing on one session may still interleave",
            kind.__qualname__,
        )
    actual = store.leaf(session_id)
    if actual != expected_leaf:
        raise conflict_error(session_id, expected_leaf, actual)
    return store.append(session_id, entries, parent_id=parent_id)


def conflict_error(
    session_id: str, expected: str | None, actual: str | None, *, path: str | None = None
) -> StoreConflictError:
    """The :class:`~ctxengine.StoreConflictError` of a refused compare-and-append."""
    return StoreConflictError(
        f"session {session_id!r} was appended to by another writer: its leaf is {actual!r}, "
        f"not {expected!r}, the entry this writer last saw; nothing of this append was "
        "written (Session.rebase() appends this writer's messages after the other's, or open "
        "the session again to go on from what the store holds)",
        session_id=session_id,
        expected=expected,
        actual=actual,
        path=path,
    )


# -- helpers shared by the implementations ----------------------------------------------------


def validate_session_id(session_id: object) -> str:
    """``session_id`` if it is safe as a file name and a Redis hash tag.

    Raises:
        SessionIdError: not a str; empty; longer than 128 chars; or holding anything but ASCII
            letters, digits and ``_ . @ + = -`` (so no ``/``, ``\\``, ``:``, ``{}``, spaces or
            control characters), or starting with anything but a letter or digit (no ``..``).
    """
    if not isinstance(session_id, str):
        raise SessionIdError(f"session id must be a str; got {type(session_id).__name__}")
    if not session_id or len(session_id) > MAX_SESSION_ID:
        raise SessionIdError(
            f"session id must be 1 to {MAX_SESSION_ID} characters; got {len(session_id)}"
        )
    if not _SESSION_ID.fullmatch(session_id):
        raise SessionIdError(
            f"session id {session_id!r} is not allowed: expected ASCII letters, digits and "
            "'_ . @ + = -', starting with a letter or digit (no path separators or '..')"
        )
    return session_id


def validate_entry_id(entry_id: object) -> str:
    """``entry_id`` if usable (1-128 chars of letters, digits, ``_ . : @ + = -``).

    Raises:
        StoreError: it is not.
    """
    if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
        raise StoreError(
            f"entry id {entry_id!r} is not allowed: expected 1 to 128 ASCII letters, digits "
            "or '_ . : @ + = -'"
        )
    return entry_id


def new_id() -> str:
    """A fresh id: 12 hex digits of milliseconds (so ids sort by time) + 8 random hex digits."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(4)}"


def masked_url(url: str) -> str:
    """``url`` with its password, if any, as ``***`` (for messages and ``repr``)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL (an invalid port...): nothing of it shown but its scheme
        return f"{url.split(':', 1)[0]}://***"
    query = parts.query
    if "password=" in query.lower():  # redis-py also takes ?password=...
        query = "&".join(
            f"{k}=***" if k.lower() == "password" else p
            for p in query.split("&")
            for k in [p.split("=", 1)[0]]
        )
    if password is None:
        return urlunsplit(parts._replace(query=query)) if query != parts.query else url
    host = parts.netloc.rsplit("@", 1)[-1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host, query=query))


def canonical_json(value: Any) -> str:
    """Deterministic compact JSON (sorted keys, UTF-8 kept).

    Raises:
        StoreError: ``value`` is not JSON-serializable (NaN included).
    """
    try:
        text = json.dumps(
            value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"value is not JSON-serializable: {exc}") from exc
    return _utf8(text)


def compact_json(value: Any) -> str:
    """Compact JSON that keeps key order (entries: a tool call's arguments keep their order,
    so a payload rendered from stored messages is byte-identical to the original).

    Raises:
        StoreError: ``value`` is not JSON-serializable (NaN included).
    """
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"value is not JSON-serializable: {exc}") from exc
    return _utf8(text)


def _utf8(text: str) -> str:
    """``text`` when it can be written as UTF-8 (the JSON of a str holding a lone surrogate
    cannot).

    Raises:
        StoreError: it holds a lone surrogate (named with its position).
    """
    at = lone_surrogate(text)
    if at is not None:
        raise StoreError(
            f"value holds a lone surrogate {text[at]!r} at character {at} of its JSON; "
            "expected text that is valid UTF-8"
        )
    return text


def snapshot_json(content: Any) -> str:
    """:func:`canonical_json` of a snapshot's content.

    Raises:
        StoreError: ``content`` is not a mapping, or not JSON-serializable.
    """
    if not isinstance(content, Mapping):
        raise StoreError(
            f"snapshot content is {type(content).__name__}; expected a mapping (a JSON object)"
        )
    return canonical_json(dict(content))


def entry_items(entries: Any) -> list[NewEntry]:
    """``entries`` (what :meth:`Store.append` was given) as a list of :class:`NewEntry`.

    Raises:
        StoreError: ``entries`` is one entry or not an iterable of entries, or an entry's
            ``data`` is not a mapping.
    """
    if isinstance(entries, (NewEntry, str, bytes, Mapping)):
        raise StoreError(
            f"append expects an iterable of NewEntry; got {type(entries).__name__} "
            "(wrap one entry in a list)"
        )
    try:
        items = list(entries)
    except TypeError as exc:
        raise StoreError(
            f"append expects an iterable of NewEntry; got {type(entries).__name__}"
        ) from exc
    for i, item in enumerate(items):
        if not isinstance(item, NewEntry):
            raise StoreError(f"append expects NewEntry items; item {i} is {type(item).__name__}")
        if not isinstance(item.data, Mapping):
            raise StoreError(
                f"entry {i} (kind {item.kind!r}): data is {type(item.data).__name__}; "
                "expected a mapping (a JSON object)"
            )
    return items


def content_hash(text: str) -> str:
    """``sha256`` hex digest of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build_entries(
    items: Iterable[NewEntry], parent_id: str | None, known: Mapping[str, Any] | set[str]
) -> list[Entry]:
    """Chain ``items`` after ``parent_id``: ids checked or generated, data checked as JSON.

    Raises:
        StoreError: an item is not a NewEntry, its id is invalid or taken, or its data is not
            JSON-serializable.
    """
    out: list[Entry] = []
    ts = time.time()
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, NewEntry):
            raise StoreError(f"append expects NewEntry items; got {type(item).__name__}")
        eid = validate_entry_id(item.id) if item.id is not None else new_id()
        if eid in known or eid in seen:
            raise StoreError(f"entry id {eid!r} already exists in the session")
        if not isinstance(item.kind, str) or not item.kind:
            raise StoreError(f"entry kind must be a non-empty str; got {item.kind!r}")
        data = json.loads(compact_json(dict(item.data)))  # a private, JSON-clean copy
        out.append(Entry(eid, parent_id, item.kind, data, ts))
        seen.add(eid)
        parent_id = eid
    return out


@dataclass(slots=True)
class TranscriptGaps:
    """The holes damaged records leave in a transcript's parent chain, and how to step over them.

    A store reads its records in append order and calls :meth:`skipped` for each damaged one
    and :meth:`link` for each entry it keeps. In append order an entry's parent always comes
    before it (an append names an entry the store holds), so an entry whose parent is no
    earlier entry lost it to damage:

    - a damaged record (a line that is not JSON, a torn write later followed by others) is
      skipped, but the entries after it still name it as their parent, so without this the
      walk from the leaf stops there and the whole branch is unreadable. The first entry after
      it that names an unknown parent is linked to the last intact entry before the skipped
      record (in append order the parent of a chain is the entry appended just before it),
      and :func:`branch_of` steps over the lost id to that entry (``links``, by the lost id:
      every entry naming it goes on from there). Entries of another branch may come between
      the hole and that entry: each hole stands for one lost record, the newest one not yet
      taken is the one an unknown parent is looked for in;
    - an entry that parses but names an unknown parent with no hole left to have lost it (its
      ``parent_id`` was damaged: an id no earlier entry has, its own, or a later entry's, which
      would make a cycle) goes on from the intact entry read just before it (``relinked``, by
      the entry's id).

    Entries keep their stored ``parent_id``; only the walk of :func:`branch_of` goes around.
    """

    links: dict[str, str | None] = field(default_factory=dict)  # lost id -> the entry before
    #: (where, last intact entry before) of each skipped record no lost id was found in yet
    holes: list[tuple[str, str | None]] = field(default_factory=list)
    relinked: dict[str, str | None] = field(default_factory=dict)  # entry id -> its stand-in parent

    def skipped(self, where: str, before: str | None) -> None:
        """A record at ``where`` was skipped; ``before`` is the last intact entry read before it."""
        self.holes.append((where, before))

    def link(self, entry: Entry, by_id: Mapping[str, Entry], previous: str | None) -> str | None:
        """Bridge ``entry``'s parent when it is no earlier entry (``by_id`` holds those read
        before it; ``previous`` is the last of them in append order); the problem to report,
        else None."""
        parent = entry.parent_id
        if parent is None or parent in by_id or parent in self.links:
            return None
        if self.holes:  # the lost record is the newest skipped one not yet explained
            where, before = self.holes.pop()
            self.links[parent] = before
            goes_on = f"entry {before!r}, the last intact one before it" if before else "the root"
            return (
                f"entry {entry.id!r} follows {parent!r}, which was on the skipped {where}: "
                f"its branch goes on from {goes_on}"
            )
        self.relinked[entry.id] = previous
        goes_on = f"entry {previous!r}, the intact one before it" if previous else "the root"
        return (
            f"entry {entry.id!r} names {parent!r} as its parent, which is no entry before it "
            f"(a damaged parent_id): its branch goes on from {goes_on}"
        )

    def clear(self) -> None:
        self.links.clear()
        self.relinked.clear()
        self.holes.clear()


def branch_of(
    by_id: Mapping[str, Entry],
    leaf_id: str | None,
    session_id: str,
    gaps: TranscriptGaps | None = None,
) -> list[Entry]:
    """Walk parents from ``leaf_id`` to the root; the result runs root first. A parent that was
    lost to a damaged record is stepped over through ``gaps.links``, and an entry whose own
    ``parent_id`` was damaged goes on from its ``gaps.relinked`` stand-in (see
    :class:`TranscriptGaps`).

    Raises:
        StoreError: ``leaf_id`` or a parent on the way is unknown, or the parents form a cycle.
    """
    links: Mapping[str, str | None] = gaps.links if gaps is not None else {}
    relinked: Mapping[str, str | None] = gaps.relinked if gaps is not None else {}
    chain: list[Entry] = []
    current = leaf_id
    hops = 0
    while current is not None:
        entry = by_id.get(current)
        if entry is None:
            if current not in links or hops >= len(links):
                raise StoreError(f"session {session_id!r} has no entry {current!r}")
            hops += 1
            current = links[current]
            continue
        chain.append(entry)
        if len(chain) > len(by_id):
            raise StoreError(f"session {session_id!r}: entry parents form a cycle at {current!r}")
        current = relinked.get(entry.id, entry.parent_id)
    chain.reverse()
    return chain


def snapshot_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """A JSON-clean copy of snapshot metadata.

    Raises:
        StoreError: not JSON-serializable.
    """
    out: dict[str, Any] = json.loads(canonical_json(dict(meta or {})))
    return out


def parse_content(text: str | bytes, info: SnapshotInfo) -> dict[str, Any]:
    """The snapshot content ``text`` after checking it against ``info.hash``.

    Raises:
        StoreError: the hash differs (a partial or damaged write) or it is not a JSON object.
    """
    raw = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    if content_hash(raw) != info.hash:
        raise StoreError(f"snapshot {info.id!r}: content does not match its hash {info.hash[:12]}")
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise StoreError(f"snapshot {info.id!r}: content is not a JSON object")
    return value
