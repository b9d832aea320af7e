"""Snapshot retention: which snapshots of a session keep their content (docs/store.md).

Every render writes a snapshot, and a snapshot grows with the session (its state and grains
cover the whole history), so keeping every one grows a store quadratically over a session's
life. A store keeps the content of

- the newest ``keep_snapshots`` snapshots (what ``restore()`` and a recent
  ``restore(snapshot=...)`` read), and
- the newest ``keep_compactions`` **restore points** older than those: the snapshots whose
  compaction summary (the ``mem.summary`` grain, hashed into the index line's
  ``meta["summary_hash"]``) differs from the one of the snapshot before, i.e. the first snapshot
  after each compaction;

and removes the content of the others ("prunes" them). Every index line stays (they are small,
smaller than the transcript's messages): ``snapshots()`` lists each one, a pruned one with
``pruned=True``, and ``load_snapshot(session_id, id)`` of a pruned one raises a
:class:`~ctxengine.StoreError` saying it was pruned by retention.

:class:`Retention` decides incrementally, one index line at a time: a write costs the same
however many snapshots the session holds.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from ..errors import ConfigError, ConfigTypeError, StoreError
from .base import content_hash

__all__ = (
    "DEFAULT_KEEP_COMPACTIONS",
    "DEFAULT_KEEP_SNAPSHOTS",
    "Retention",
    "check_retention",
    "pruned_error",
    "stored_summary",
    "summary_hash",
)

#: Snapshots whose content a store keeps by default: the newest 50 (a restore reads the newest;
#: 50 renders back covers the turns one would step back to by hand, at 8k tokens about 3 MB).
DEFAULT_KEEP_SNAPSHOTS: Final = 50
#: Restore points kept by default beyond those: the first snapshots after the last 20
#: compactions (each one a state the session can be taken back to before a summary).
DEFAULT_KEEP_COMPACTIONS: Final = 20
#: Index line meta key holding the sha256 of the compaction summary (None: no summary yet).
SUMMARY_KEY: Final = "summary_hash"
#: The grain holding the compaction summary.
SUMMARY_GRAIN: Final = "mem.summary"
#: A summary hash not known: an index line written before retention existed (read from the
#: content when needed), or one whose content is gone.
UNKNOWN: Final = "?"

#: Reads the summary hash of a snapshot from its content: ``(snapshot id, content hash)``;
#: :data:`UNKNOWN` when the content cannot be read.
Resolver = Callable[[str, str], str | None]


def check_retention(
    keep_snapshots: object, keep_compactions: object
) -> tuple[int | None, int | None]:
    """The retention arguments of a store, checked (None: keep every one).

    Raises:
        ConfigTypeError: one is neither an int nor None.
        ConfigError: ``keep_snapshots`` below 1 (the newest snapshot is what a restore reads)
            or ``keep_compactions`` below 0.
    """
    out: list[int | None] = []
    for name, value, low in (
        ("keep_snapshots", keep_snapshots, 1),
        ("keep_compactions", keep_compactions, 0),
    ):
        expected = f"expected an int >= {low}, or None to keep every one"
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigTypeError(f"{name} is {value!r} ({type(value).__name__}); {expected}")
        if value is not None and value < low:
            raise ConfigError(f"{name} is {value!r}; {expected}")
        out.append(value)
    return out[0], out[1]


def summary_hash(content: Mapping[str, Any]) -> str | None:
    """sha256 of the snapshot's compaction summary (``core_memory["mem.summary"]``), or None."""
    memory = content.get("core_memory")
    text = memory.get(SUMMARY_GRAIN) if isinstance(memory, Mapping) else None
    return content_hash(text) if isinstance(text, str) else None


def stored_summary(raw: str | bytes | None) -> str | None:
    """:func:`summary_hash` of a stored snapshot content (its JSON text); :data:`UNKNOWN` when
    it is missing or unreadable. How a store resolves an index line written before retention
    (:meth:`Retention.due`)."""
    try:
        content = json.loads(raw) if raw is not None else None
    except ValueError:
        return UNKNOWN
    return summary_hash(content) if isinstance(content, dict) else UNKNOWN


def line_summary(meta: Mapping[str, Any]) -> str | None:
    """The summary hash an index line records; :data:`UNKNOWN` for a line without one."""
    if SUMMARY_KEY not in meta:
        return UNKNOWN
    value = meta[SUMMARY_KEY]
    return value if isinstance(value, str) else None


def pruned_error(session_id: str, snapshot_id: str, *, path: str | None = None) -> StoreError:
    """The error of loading a snapshot whose content retention removed."""
    return StoreError(
        f"session {session_id!r}: snapshot {snapshot_id!r} was pruned by retention (its "
        "content was removed; its index line is kept for the listing): restore the latest "
        "snapshot or a kept one (ctxengine snapshots lists which), or keep more with the "
        "store's keep_snapshots / keep_compactions",
        path=path,
    )


class Retention:
    """Which snapshots of one session hold content, fed the index lines in order.

    ``add()`` each index line (id, content hash, summary hash), ``prune()`` each recorded
    prune; a writer asks :meth:`due` which ids to prune with its new line, records them with
    the line, then calls :meth:`prune` and removes the contents it returns.
    """

    __slots__ = (
        "keep_compactions",
        "keep_snapshots",
        "lines",
        "live",
        "marks",
        "previous",
        "pruned",
        "recent",
        "refs",
    )

    def __init__(self, keep_snapshots: int | None, keep_compactions: int | None) -> None:
        self.keep_snapshots = keep_snapshots
        self.keep_compactions = keep_compactions
        self.lines = 0  # index lines added
        self.recent: deque[tuple[str, str, str | None]] = deque()  # newest lines: id, hash, summary
        self.marks: deque[tuple[str, str]] = deque()  # restore points older than ``recent``
        self.previous: str | None = None  # summary of the last line that left ``recent``
        self.live: dict[str, str] = {}  # id -> content hash of every line not pruned
        self.refs: dict[str, int] = {}  # content hash -> live lines naming it
        self.pruned: set[str] = set()

    def add(self, snapshot_id: str, digest: str, summary: str | None) -> None:
        """A new index line (its content stored)."""
        self.lines += 1
        if snapshot_id in self.live or snapshot_id in self.pruned:
            return  # a duplicate line: counted once
        self.live[snapshot_id] = digest
        self.refs[digest] = self.refs.get(digest, 0) + 1
        self.recent.append((snapshot_id, digest, summary))

    def prune(self, ids: Iterable[str]) -> list[str]:
        """Record ``ids`` as pruned; returns the content hashes no live line names any more
        (the contents to remove)."""
        gone: list[str] = []
        for sid in ids:
            digest = self.live.pop(sid, None)
            self.pruned.add(sid)
            if digest is None:
                continue
            left = self.refs[digest] - 1
            if left:
                self.refs[digest] = left
            else:
                del self.refs[digest]
                gone.append(digest)
        return gone

    def due(self, resolve: Resolver | None = None) -> list[str]:
        """The live ids outside what is kept, oldest first: to prune with the next line.

        Pops them from the window (call it only when the caller will prune them, or drop this
        object). ``resolve`` reads the summary of a line that does not record it (one written
        before retention existed); without it such a line counts as no restore point.
        """
        out: list[str] = []
        if self.keep_snapshots is None:
            return out
        while len(self.recent) > self.keep_snapshots:
            sid, digest, summary = self.recent.popleft()
            if summary == UNKNOWN and resolve is not None and sid in self.live:
                summary = resolve(sid, digest)
            previous, self.previous = self.previous, summary
            if sid not in self.live:
                continue
            # A restore point: a summary unlike the line's before (one not known counts as
            # unlike, so an old session keeps its compactions rather than losing them).
            if summary is not None and summary != UNKNOWN and summary != previous:
                self.marks.append((sid, digest))
            else:
                out.append(sid)
        while self.keep_compactions is not None and len(self.marks) > self.keep_compactions:
            sid, _ = self.marks.popleft()
            if sid in self.live:
                out.append(sid)
        return out

    def to_json(self) -> dict[str, Any]:
        """The window as JSON (what :class:`~ctxengine.RedisStore` keeps between writes)."""
        return {
            "lines": self.lines,
            "previous": self.previous,
            "recent": [list(r) for r in self.recent],
            "marks": [list(m) for m in self.marks],
        }

    @classmethod
    def from_json(
        cls, obj: object, keep_snapshots: int | None, keep_compactions: int | None
    ) -> Retention:
        """Parse :meth:`to_json` output (every line of it live); a fresh one for anything else."""
        out = cls(keep_snapshots, keep_compactions)
        if not isinstance(obj, dict):
            return out
        try:
            recent = [(str(a), str(b), c) for a, b, c in obj["recent"]]
            marks = [(str(a), str(b)) for a, b in obj["marks"]]
            lines, previous = int(obj["lines"]), obj["previous"]
        except (KeyError, TypeError, ValueError):
            return cls(keep_snapshots, keep_compactions)
        for sid, digest in marks:
            out.marks.append((sid, digest))
            out.live[sid] = digest
            out.refs[digest] = out.refs.get(digest, 0) + 1
        for sid, digest, summary in recent:
            out.add(sid, digest, summary if isinstance(summary, str) else None)
        out.lines = lines
        out.previous = previous if isinstance(previous, str) else None
        return out
