"""`FileStore`: the embedded, crash-safe :class:`~ctxengine.Store` on a local directory.

Layout (see docs/store.md)::

    ROOT/sessions/<session_id>/transcript.jsonl   one entry per line, append-only
    ROOT/sessions/<session_id>/snapshots.jsonl    one index line per snapshot
    ROOT/sessions/<session_id>/objects/<sha256>.json   snapshot contents, stored once by hash

Retention (:mod:`ctxengine.store.retention`): an index line also lists (``"prunes"``) the older
snapshots whose content its writer removes; the line is fsynced before their content files
are unlinked, so a crash in between leaves files no live line names (removed by a later
sweep, below), never a live line without its content.

Durability. An append is one ``write`` of complete lines (each JSON + ``\\n``) on an ``O_APPEND``
descriptor, followed by ``fsync``; the call returns (is acknowledged) only after both. A snapshot's
content goes to a temporary file that is fsynced, renamed over its final name (atomic) and its
directory fsynced, before its index line is appended the same way. So after a crash:

- a torn last line (the process died inside ``write``) is detected on reading, reported in
  ``problems`` and skipped, never fatal; the next append starts on a new line, so the torn bytes
  stay one invalid line forever and no later read takes them for an entry. The first line of
  an append of several entries says how many it wrote (``"batch"``): an append cut short
  after some of its lines is taken as not written, none of its lines read (reported too);
- an index line whose content file is missing or fails its hash is reported and skipped, and
  ``load_snapshot()`` returns the newest intact snapshot;
- a content file whose index line was never written, or a temp file never renamed (killed in
  between), or the content of a pruned snapshot not unlinked yet, is removed by a later
  snapshot of the session: a writer holds the index's exclusive ``flock`` from its temp file to
  its index line, so a temp file, or a content file no live line names, seen under that flock,
  is an orphan. A store looks for them on its first snapshot of a session, when the
  ``objects`` folder changed since its own last snapshot (another process wrote there), and
  every :data:`SWEEP_EVERY` snapshots, never on every write: that scan grows with the folder.

A write that fails (full disk, read-only folder) raises :class:`~ctxengine.StoreError` naming the
path and the OS error; the failed append's own partial bytes are cut off again, so what was
written before stays intact and readable, and the caller may carry on in memory.

Several processes may share a directory: appends hold an exclusive ``flock`` on the file and
readers a shared one, and every call first reads what other processes appended since.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno as errno_codes
import fcntl
import hashlib
import itertools
import json
import logging
import math
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar, final

from ..errors import ConfigTypeError, StoreError
from .base import (
    LEAF,
    MORE,
    WHOLE,
    BranchTail,
    Entry,
    Leaf,
    NewEntry,
    Piece,
    Snapshot,
    SnapshotInfo,
    StoreProblem,
    TranscriptGaps,
    branch_of,
    build_entries,
    canonical_json,
    check_tail_args,
    compact_json,
    conflict_error,
    content_hash,
    entry_items,
    new_id,
    parse_content,
    snapshot_json,
    snapshot_meta,
    tail_of,
    validate_session_id,
)
from .retention import (
    DEFAULT_KEEP_COMPACTIONS,
    DEFAULT_KEEP_SNAPSHOTS,
    UNKNOWN,
    Retention,
    check_retention,
    line_summary,
    pruned_error,
    stored_summary,
)

__all__ = ("FileStore",)

log = logging.getLogger("ctxengine.store")

TRANSCRIPT = "transcript.jsonl"
INDEX = "snapshots.jsonl"
OBJECTS = "objects"
#: Seconds since its last write after which a snapshot temp file is a leftover of a writer
#: killed before its rename: a live writer renames within moments of its last write, so no
#: live writer can still be writing a file this old (it is safe to remove).
STALE_TEMP_SECONDS: Final = 3600.0
#: A writer looks for what killed writers left (temp files, content files no index line
#: names) on its first snapshot of a session, when the ``objects`` folder changed since its
#: own last snapshot (another process wrote there), and at least every this many snapshots:
#: a scan per write would cost the size of the folder on every render.
SWEEP_EVERY: Final = 64
#: Bytes of a log's start kept to tell it from another file made in its place (they hold the
#: first entry's random id and time).
HEAD_BYTES: Final = 256

T = TypeVar("T")


def _os_error(action: str, path: Path | str, exc: OSError) -> StoreError:
    reason = exc.strerror or str(exc)
    hint = ""
    if exc.errno == errno_codes.ENOSPC:
        hint = " (the disk is full)"
    elif exc.errno in (errno_codes.EROFS, errno_codes.EACCES, errno_codes.EPERM):
        hint = " (the folder is read-only or not writable)"
    elif exc.errno == errno_codes.EFBIG:
        hint = " (the file size limit was reached)"
    elif exc.errno == errno_codes.EISDIR:
        hint = " (a folder where the store expects a file)"
    return StoreError(
        f"cannot {action} {path}: [Errno {exc.errno}] {reason}{hint}; "
        "what was already stored is intact",
        path=str(path),
        errno=exc.errno,
    )


def _remove_stale_temps(objects: Path, *, locked: bool = False) -> None:
    """Remove the snapshot temp files (``.<hash>.<pid>.<rand>.tmp``) of writers killed before
    their rename: nothing else ever removes them, so each crash mid-snapshot would leave one
    for good. Without ``locked``, only files last written over :data:`STALE_TEMP_SECONDS` ago
    go (a live writer, of this process or another, renames its own long before). With
    ``locked`` (the caller holds the index's exclusive flock, which every writer holds from
    creating its temp file to renaming it) every one goes: no live writer can own one then.
    Best effort: a folder that is read-only or missing is left as it is."""
    try:
        names = os.listdir(objects)
    except OSError:
        return
    cutoff = math.inf if locked else time.time() - STALE_TEMP_SECONDS
    for name in names:
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        path = objects / name
        try:
            if path.lstat().st_mtime < cutoff:
                path.unlink()
                log.info("ctxengine store: removed %s, left by an interrupted snapshot", path)
        except OSError:
            continue


def _remove_orphans(objects: Path, named: Container[str], before: float) -> None:
    """Remove the content files (``<sha256>.json``) no index line names, last written before
    ``before``: left by writers killed between a content file's rename and its index line, a
    snapshot that was never acknowledged and that nothing else would ever remove. The caller
    holds the index's exclusive flock, which every writer holds from its content file to its
    index line, so no live writer's file can be among them. Best effort: a file that cannot be
    removed now is removed by a later snapshot."""
    try:
        names = os.listdir(objects)
    except OSError:
        return
    for name in names:
        digest, dot, ext = name.partition(".")
        if ext != "json" or not dot or len(digest) != 64 or digest in named:
            continue
        if not all(c in "0123456789abcdef" for c in digest):
            continue
        path = objects / name
        try:
            if path.lstat().st_mtime < before:
                path.unlink()
                log.info(
                    "ctxengine store: removed %s, never indexed (an interrupted snapshot)", path
                )
        except OSError:
            continue


def _is_session_id(name: str) -> bool:
    """Whether the folder ``name`` can be a session's (not a delete's leftover, not a stray)."""
    try:
        validate_session_id(name)
    except ValueError:
        return False
    return True


@dataclass(slots=True)
class _Log(Generic[T]):
    """One append-only JSONL file and what has been parsed of it so far."""

    path: Path
    parse: Callable[[object], object]  # a T, or a _BatchStart (the transcript's)
    items: list[T] = field(default_factory=list)
    offset: int = 0  # bytes consumed: everything before is parsed (or reported)
    lines: int = 0  # complete lines consumed
    ino: int | None = None
    #: The file's first bytes as last read (its first line's id and time): with ``ino``, what
    #: tells this file from another made in its place (a deleted file's inode number is
    #: handed to the next new file at once on ext4).
    head: bytes = b""
    reported: set[int] = field(default_factory=set)  # offsets of problems already reported

    def reset(self) -> None:
        self.items, self.offset, self.lines, self.ino, self.head = [], 0, 0, None, b""
        self.reported.clear()

    def same_file(self, fd: int, st: os.stat_result) -> bool:
        """Whether ``fd`` (``st``: its stat) is still the file read so far, grown or not (the
        caller holds a flock); its first bytes are kept for the next call."""
        head = os.pread(fd, min(HEAD_BYTES, st.st_size), 0)
        same = self.ino == st.st_ino and st.st_size >= self.offset
        same = same and head[: len(self.head)] == self.head
        if len(head) > len(self.head) or not same:
            self.head = head
        return same


@dataclass(frozen=True, slots=True)
class _Skipped:
    """Where a damaged transcript line was, in the order of the entries around it."""

    where: str


@dataclass(slots=True)
class _BatchStart:
    """The first line of an append of several entries: it says how many lines the append
    wrote (``"batch"``), so an append cut short (a process killed inside its one ``write``)
    is known on reading and none of it is taken as written."""

    entry: Entry
    size: int
    where: str = ""


def _transcript_line(obj: object) -> Entry | _BatchStart:
    """One transcript line: its entry, and the size of the append it starts when it says so.

    Raises:
        StoreError: not a complete entry, or a ``"batch"`` that is no count of entries.
    """
    entry = Entry.from_json(obj)
    size = obj.get("batch") if isinstance(obj, dict) else None
    if size is None:  # one entry of its own, or a line written before "batch" existed
        return entry
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise StoreError(f"entry {entry.id!r}: batch is {size!r}; expected a count of entries")
    return _BatchStart(entry, size) if size > 1 else entry


def _entry_lines(entries: list[Entry]) -> list[str]:
    """The lines of one append: the first of several says how many there are (``"batch"``)."""
    lines = []
    for i, e in enumerate(entries):
        obj = e.to_json()
        if i == 0 and len(entries) > 1:
            data = obj.pop("data")
            obj["batch"] = len(entries)
            obj["data"] = data
        lines.append(compact_json(obj))
    return lines


def _batch_complete(new: list[Any], i: int) -> bool:
    """Whether every line of the append starting at ``new[i]`` (a :class:`_BatchStart`) was
    read: its last line is an intact entry of the same ``write`` (every entry of one append
    has the same ``ts``; a later append's, another). A write cut short keeps only a start of
    its lines, so with its last line read the lines before it were written too: one of them
    damaged since is stepped over as any damaged line (its parent_id too: not checked here)."""
    start: _BatchStart = new[i]
    end = i + start.size - 1
    if end >= len(new):
        return False
    last = new[end]
    return isinstance(last, Entry) and last.ts == start.entry.ts


def _whole_appends(parsed: list[Entry | _BatchStart]) -> list[Entry] | None:
    """The entries of ``parsed`` (lines read from a transcript's end); None when an append of
    several entries is cut short there (:func:`_batch_complete`)."""
    out: list[Entry] = []
    for i, item in enumerate(parsed):
        if isinstance(item, _BatchStart):
            if not _batch_complete(parsed, i):
                return None
            item = item.entry
        out.append(item)
    return out


#: Bytes a read from the end of a transcript takes first (:meth:`FileStore.branch_tail`); it
#: doubles each time the walk needs entries before them.
TAIL_CHUNK: Final = 16 * 1024


def _tail_piece(buf: bytes) -> tuple[list[Entry], int] | str:
    """The entries of ``buf``, the end of a transcript from an offset past its start, as the
    whole read (``FileStore._refresh``) takes them, and the length of its torn last line (0:
    none); else ``MORE`` (read further back) or ``WHOLE`` (only the whole read can tell). The
    caller then walks the piece (:class:`~ctxengine.store.base.Piece`).

    The piece is what the whole read finds there, from these lines alone:

    - it starts at the first line of an append: the first line of ``buf`` (after a partial
      one) that has another ``ts`` than the intact entry before it (every entry of one append
      has the same ``ts``), so no append reaches into it from before, and an append of
      several entries it starts is judged by its own lines;
    - every line is an intact entry (a damaged line or an append cut short is ``WHOLE``: how
      the whole read steps over them depends on what came before), but the last line without
      a newline, taken or skipped as torn as the whole read does;
    - the lines' ``ts`` never go back (appends are written in turn under the ``flock``, each
      stamped there): a line older than the one before it (a line copied from before, whose
      id an entry before the piece may hold too, or the clock set back) is ``WHOLE``. So an
      id the piece holds is no id of an entry before it: an id twice is either all in the
      piece (``WHOLE``) or all before it.

    An entry's parent counts only when it is an entry before it in the piece
    (:class:`~ctxengine.store.base.Piece`).
    """
    first = buf.find(b"\n")
    if first < 0:
        return MORE
    body = buf[first + 1 :]
    end = body.rfind(b"\n") + 1
    parsed: list[Entry | _BatchStart] = []
    before: Entry | None = None  # the complete line before the piece
    for raw in body[:end].split(b"\n")[:-1]:
        if not raw.strip():
            if before is None:
                return MORE
            continue
        try:
            line = _transcript_line(json.loads(raw))
        except (ValueError, StoreError):
            return WHOLE
        if before is None:
            before = line.entry if isinstance(line, _BatchStart) else line
            continue
        parsed.append(line)
    torn = body[end:]
    if torn:
        try:
            parsed.append(_transcript_line(json.loads(torn)))  # complete, without its newline
            torn = b""
        except (ValueError, StoreError):
            pass
    # The piece starts at the first line of another ts than the line before it: the lines
    # before that one may belong to an append that starts before the piece.
    if before is None:
        return MORE
    stamps = [before.ts, *((x.entry if isinstance(x, _BatchStart) else x).ts for x in parsed)]
    if any(b < a for a, b in itertools.pairwise(stamps)):
        return WHOLE  # a line older than the one before it: copied from before, or clock set back
    start = next((i for i in range(len(parsed)) if stamps[i + 1] != stamps[i]), None)
    if start is None:
        return MORE
    kept = _whole_appends(parsed[start:])
    return WHOLE if kept is None else (kept, len(torn))


@dataclass(frozen=True, slots=True)
class _IndexLine:
    """One line of ``snapshots.jsonl``: the snapshot, and the earlier snapshots whose content
    its writer pruned (``"prunes"``, recorded with the line, removed after it is durable)."""

    info: SnapshotInfo
    prunes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: object) -> _IndexLine:
        info = SnapshotInfo.from_json(obj)
        prunes = obj.get("prunes") if isinstance(obj, dict) else None
        if prunes is None:
            return cls(info)
        if not isinstance(prunes, list) or not all(isinstance(p, str) for p in prunes):
            raise StoreError(f"snapshot {info.id!r}: prunes is {prunes!r}; expected snapshot ids")
        return cls(info, tuple(prunes))


@dataclass(slots=True)
class _Tail:
    """The newest entries of a transcript that this store read from its end (it has not read
    the whole): what the next read from the end goes on from, reading only the lines
    appended since (``end``: the size of the file then, ending with a complete line)."""

    ino: int
    head: bytes  # the file's first bytes (see _Log.head)
    end: int
    last_ts: float
    piece: Piece

    def catch_up(self, fd: int, size: int) -> bool:
        """Add the lines appended since (the caller holds a flock on ``fd``); False when only
        a read afresh can tell: a line that is not an intact entry, no newline at the end,
        an append cut short, a ``ts`` going back, an id twice."""
        if size == self.end:
            return True
        new = os.pread(fd, size - self.end, self.end)
        if len(new) != size - self.end or not new.endswith(b"\n"):
            return False
        parsed: list[Entry | _BatchStart] = []
        for raw in new.split(b"\n")[:-1]:
            if not raw.strip():
                continue
            try:
                parsed.append(_transcript_line(json.loads(raw)))
            except (ValueError, StoreError):
                return False
        entries = _whole_appends(parsed)
        if entries is None:
            return False
        stamps = [self.last_ts, *(e.ts for e in entries)]
        if any(b < a for a, b in itertools.pairwise(stamps)) or not self.piece.add(entries):
            return False
        self.end, self.last_ts = size, stamps[-1]
        return True


@dataclass(slots=True)
class _Session:
    dir: Path
    transcript: _Log[Entry]
    index: _Log[_IndexLine]
    retention: Retention
    by_id: dict[str, Entry] = field(default_factory=dict)
    gaps: TranscriptGaps = field(default_factory=TranscriptGaps)  # damaged lines stepped over
    intact: dict[str, bool] = field(default_factory=dict)  # snapshot hash -> content verified
    unswept: int | None = None  # snapshots written since the last sweep (None: none yet)
    objects_mtime: int | None = None  # of the objects folder after this store's last snapshot
    tail: _Tail | None = None  # the end of a transcript this store has not read whole


@final
class FileStore:
    """A :class:`~ctxengine.Store` on a local directory (created if missing).

    Args:
        path: The root directory.
        fsync: Flush each write to the disk before acknowledging it (default). ``False`` is
            for throwaway data only: a crash of the machine may then lose acknowledged writes.
        keep_snapshots: Snapshots of a session whose content is kept: the newest ones (see
            :mod:`ctxengine.store.retention`); each snapshot written removes the content of
            those that fell out. None keeps every one.
        keep_compactions: Besides those, the first snapshots after this many of the latest
            compactions (None: after every one).

    Raises:
        ConfigTypeError: ``path`` is not a ``str`` or ``os.PathLike`` of one, or a ``keep_``
            argument is not an int or None.
        ConfigError: ``keep_snapshots`` below 1 or ``keep_compactions`` below 0.
        StoreError: ``path`` exists and is not a directory, or cannot be created.
    """

    __slots__ = ("_fsync", "_keep", "_lock", "_sessions", "problems", "root")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = True,
        keep_snapshots: int | None = DEFAULT_KEEP_SNAPSHOTS,
        keep_compactions: int | None = DEFAULT_KEEP_COMPACTIONS,
    ) -> None:
        self._keep = check_retention(keep_snapshots, keep_compactions)
        try:
            self.root = Path(path)
        except TypeError as exc:  # FileStore(5), FileStore(None), a bytes path
            raise ConfigTypeError(
                f"path is {path!r} ({type(path).__name__}); expected a directory path "
                "(a str or os.PathLike)"
            ) from exc
        self._fsync = fsync
        self._lock = threading.RLock()
        self._sessions: dict[str, _Session] = {}
        self.problems: list[StoreProblem] = []
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(
                f"store path {self.root} exists and is not a directory", path=str(self.root)
            )

    def __repr__(self) -> str:
        return f"ctxengine.FileStore({str(self.root)!r})"

    # -- files --------------------------------------------------------------------------------

    def _session(self, session_id: str) -> _Session:
        validate_session_id(session_id)
        s = self._sessions.get(session_id)
        if s is None:
            d = self.root / "sessions" / session_id
            s = _Session(
                d,
                _Log(d / TRANSCRIPT, _transcript_line),
                _Log(d / INDEX, _IndexLine.from_json),
                Retention(*self._keep),
            )
            self._sessions[session_id] = s
            _remove_stale_temps(d / OBJECTS)
        return s

    def _report(self, session_id: str, where: Path, message: str) -> None:
        problem = StoreProblem(session_id, str(where), message)
        self.problems.append(problem)
        log.warning("ctxengine store: %s", problem)

    def _refresh(self, s: _Session, lg: _Log[Any], fd: int, session_id: str) -> list[Any]:
        """Parse what was appended to ``lg`` since the last call (caller holds a flock)."""
        if lg is s.transcript:
            s.tail = None  # read whole from now on
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):  # a folder in its place: say so, naming the path
                raise IsADirectoryError(errno_codes.EISDIR, os.strerror(errno_codes.EISDIR))
            if not lg.same_file(fd, st):  # replaced or truncated: restart
                head = lg.head
                self._forget(s, lg)
                lg.ino, lg.head = st.st_ino, head
            if st.st_size == lg.offset:
                return []
            buf = os.pread(fd, st.st_size - lg.offset, lg.offset)
        except OSError as exc:
            raise _os_error("read", lg.path, exc) from exc
        end = buf.rfind(b"\n") + 1
        new: list[Any] = []
        pos = lg.offset
        for raw in buf[:end].split(b"\n")[:-1]:
            lg.lines += 1
            label = f"line {lg.lines}"
            parsed = not raw.strip() or self._parse_line(lg, raw, pos, new, session_id, label)
            if not parsed and lg is s.transcript:  # the entries after may name it as parent
                new.append(_Skipped(label))
            pos += len(raw) + 1
        lg.offset = pos
        tail = buf[end:]
        if tail:
            got = len(new)
            self._parse_line(lg, tail, pos, new, session_id, "last line", quiet=True)
            if len(new) > got:  # a complete entry that only lacks its newline
                lg.offset = st.st_size
            else:
                self._torn_once(lg, session_id, pos, len(tail))
        if lg is s.transcript:
            new = self._index_entries(s, new, session_id)
        else:
            self._track(s, new)
        lg.items.extend(new)
        return new

    def _forget(self, s: _Session, lg: _Log[Any]) -> None:
        """Drop what was parsed of ``lg``: it is read again from its start."""
        lg.reset()
        if lg is s.transcript:
            s.by_id.clear()
            s.gaps.clear()
        else:
            s.retention = Retention(*self._keep)

    @staticmethod
    def _track(s: _Session, lines: list[_IndexLine]) -> None:
        """Feed index lines to the retention: a content another writer pruned is no longer
        taken as stored (a snapshot of the same content writes it again)."""
        for line in lines:
            info = line.info
            s.retention.add(info.id, info.hash, line_summary(info.meta))
            for digest in s.retention.prune(line.prunes):
                s.intact.pop(digest, None)

    def _parse_line(
        self,
        lg: _Log[Any],
        raw: bytes,
        pos: int,
        out: list[Any],
        session_id: str,
        label: str,
        *,
        quiet: bool = False,
    ) -> bool:
        """Parse one line into ``out``; False (reported unless ``quiet``) when it is damaged."""
        try:
            parsed = lg.parse(json.loads(raw))
            if isinstance(parsed, _BatchStart):  # where it is, for the report of a cut append
                parsed.where = label
            out.append(parsed)
            return True
        except (ValueError, StoreError) as exc:
            if not quiet and pos not in lg.reported:
                lg.reported.add(pos)
                self._report(
                    session_id,
                    lg.path,
                    f"{label} is not a complete record (torn or damaged write: {exc}): skipped",
                )
            return False

    def _index_entries(
        self, s: _Session, new: list[Entry | _BatchStart | _Skipped], session_id: str
    ) -> list[Entry]:
        kept: list[Entry] = []
        i = 0
        while i < len(new):
            item = new[i]
            intact = kept or s.transcript.items
            previous = intact[-1].id if intact else None
            if isinstance(item, _Skipped):
                s.gaps.skipped(item.where, previous)
                i += 1
                continue
            if isinstance(item, _BatchStart):
                if not _batch_complete(new, i):
                    i += self._skip_batch(s, new, i, session_id)
                    continue
                item = item.entry
            i += 1
            if item.id in s.by_id:
                self._report(
                    session_id,
                    s.transcript.path,
                    f"entry {item.id!r} appears twice: the later copy is skipped",
                )
                continue
            bridged = s.gaps.link(item, s.by_id, previous)
            if bridged is not None:
                self._report(session_id, s.transcript.path, bridged)
            s.by_id[item.id] = item
            kept.append(item)
        return kept

    def _skip_batch(self, s: _Session, new: list[Any], i: int, session_id: str) -> int:
        """Skip the lines of the append cut short that starts at ``new[i]``: its first entry
        and those after it of the same ``write`` (chained, the same ``ts``). It was never
        acknowledged, so none of it is taken as written (a rewrite cut short must not become
        the session's branch): the session goes on from the leaf it had before. Returns how
        many were skipped."""
        start: _BatchStart = new[i]
        got = [start.entry]
        for item in new[i + 1 :]:
            if not isinstance(item, Entry) or item.ts != start.entry.ts:
                break
            if item.parent_id != got[-1].id:
                break
            got.append(item)
        self._report(
            session_id,
            s.transcript.path,
            f"{start.where} starts an append of {start.size} entries of which only "
            f"{len(got)} reached the file (an interrupted write, never acknowledged): "
            f"skipped, entries {got[0].id!r} to {got[-1].id!r}",
        )
        return len(got)

    @contextlib.contextmanager
    def _reading(self, s: _Session, session_id: str, *lgs: _Log[Any]) -> Iterator[None]:
        """Bring ``lgs`` up to date under shared flocks (missing files read as empty)."""
        for lg in lgs:
            try:
                fd = os.open(lg.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                if lg.ino is not None:  # deleted since: forget it
                    self._forget(s, lg)
                continue
            except OSError as exc:
                raise _os_error("read", lg.path, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                self._refresh(s, lg, fd, session_id)
            finally:
                os.close(fd)
        yield

    @contextlib.contextmanager
    def _writing(
        self, s: _Session, lg: _Log[Any], session_id: str
    ) -> Iterator[Callable[[list[str]], bool]]:
        """Open ``lg`` for appending under an exclusive flock, up to date; yield ``write(lines)``,
        which returns True when the cache may take the lines as they are (no torn tail before)."""
        created = not lg.path.exists()
        if created:
            self._make_dirs(lg.path.parent)
        try:
            fd = os.open(lg.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _os_error("open for appending", lg.path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._refresh(s, lg, fd, session_id)

            def write(lines: list[str]) -> bool:
                fast = self._write_lines(lg, fd, lines)
                if created:
                    self._sync_dir(lg.path.parent)
                return fast

            yield write
        finally:
            os.close(fd)

    def _write_lines(self, lg: _Log[Any], fd: int, lines: list[str]) -> bool:
        size = os.fstat(fd).st_size
        lead = b""
        if size and os.pread(fd, 1, size - 1) != b"\n":
            lead = b"\n"  # repair: a torn last line must not swallow our first line
        data = lead + "".join(line + "\n" for line in lines).encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if self._fsync:
                os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # cut our own partial bytes off again
                os.ftruncate(fd, size)
            raise _os_error("append to", lg.path, exc) from exc
        if lg.offset != size:  # a torn tail sits before our lines: the next refresh reads them
            return False
        lg.offset = size + len(data)  # we had read everything: no need to parse our own lines
        lg.lines += len(lines) + (1 if lead else 0)
        return True

    def _make_dirs(self, d: Path) -> None:
        missing = []
        p = d
        while not p.exists():
            missing.append(p)
            p = p.parent
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _os_error("create the directory", d, exc) from exc
        for m in reversed(missing):
            self._sync_dir(m.parent)

    def _sync_dir(self, d: Path) -> None:
        if not self._fsync:
            return
        try:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _os_error("open the directory", d, exc) from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _os_error("sync the directory", d, exc) from exc
        finally:
            os.close(fd)

    # -- transcript ---------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """See :meth:`ctxengine.Store.append`. Returns after the lines are fsynced."""
        return self._append(session_id, entries, parent_id, check=False, expected=None)

    def append_if(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        expected_leaf: str | None,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """See :meth:`ctxengine.store.ConditionalStore.append_if`: the leaf is read and the
        lines appended and fsynced under one exclusive ``flock`` on the transcript, so no other
        process (or thread) appends in between."""
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
        items = entry_items(entries)
        with self._lock:
            s = self._session(session_id)
            if not items:
                return []
            if s.transcript.offset == 0 and all(i.id is None for i in items):
                cold = self._append_cold(s, session_id, items, parent_id, check, expected)
                if cold is not None:
                    return cold
            with self._writing(s, s.transcript, session_id) as write:
                if check:
                    actual = s.transcript.items[-1].id if s.transcript.items else None
                    if actual != expected:
                        raise conflict_error(
                            session_id, expected, actual, path=str(s.transcript.path)
                        )
                parent = self._resolve(s, parent_id, session_id)
                new = build_entries(items, parent, s.by_id)
                if write(_entry_lines(new)):
                    s.transcript.items.extend(new)
                    s.by_id.update((e.id, e) for e in new)
            if new[-1].id not in s.by_id:  # a torn tail was before them: read them back
                with self._reading(s, session_id, s.transcript):
                    pass
            return new

    def _append_cold(
        self,
        s: _Session,
        session_id: str,
        items: list[NewEntry],
        parent_id: str | Leaf | None,
        check: bool,
        expected: str | None,
    ) -> list[Entry] | None:
        """:meth:`_append` on a transcript this store has not read, reading only its end (a
        store opened for one request: a pop's marker): under the exclusive ``flock``, the leaf
        and ``parent_id`` are found in the newest entries (:meth:`_from_end`), the lines
        written and fsynced as any append's, and the store still holds nothing of the file
        (its next call reads it again, from the end or whole). None when only a read of the
        whole file can tell (the caller appends the usual way). Only for entries whose ids
        the store generates: fresh ids (the time in ms and 32 random bits) are checked against
        the entries read, those of the caller need every stored id."""
        lg = s.transcript
        try:
            fd = os.open(lg.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except OSError:
            return None  # missing (created by the usual append), or its error reported there

        def judge(piece: Piece) -> Piece | str:
            if isinstance(parent_id, str) and parent_id not in piece.by_id:
                return MORE  # before the piece (or nowhere: the whole read says so)
            return piece

        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            piece = self._from_end(s, session_id, fd, judge)
            if piece is None:
                return None
            leaf = piece.leaf
            if check and leaf != expected:
                raise conflict_error(session_id, expected, leaf, path=str(lg.path))
            new = build_entries(items, leaf if parent_id is LEAF else parent_id, piece.by_id)
            kept, s.tail = s.tail, None  # given back once the lines are written
            self._write_lines(lg, fd, _entry_lines(new))
            if kept is not None and new[0].ts >= kept.last_ts and kept.piece.add(new):
                kept.end, kept.last_ts = os.fstat(fd).st_size, new[-1].ts  # ours, under the flock
                s.tail = kept
            return new
        finally:
            os.close(fd)

    def _resolve(self, s: _Session, parent_id: str | Leaf | None, session_id: str) -> str | None:
        if parent_id is LEAF:
            return s.transcript.items[-1].id if s.transcript.items else None
        if parent_id is not None and (not isinstance(parent_id, str) or parent_id not in s.by_id):
            raise StoreError(f"session {session_id!r} has no entry {parent_id!r} to branch from")
        return parent_id

    def entries(self, session_id: str) -> list[Entry]:
        """See :meth:`ctxengine.Store.entries`."""
        with self._lock:
            s = self._session(session_id)
            with self._reading(s, session_id, s.transcript):
                return list(s.transcript.items)

    def branch(self, session_id: str, leaf_id: str | None = None) -> list[Entry]:
        """See :meth:`ctxengine.Store.branch`."""
        with self._lock:
            s = self._session(session_id)
            with self._reading(s, session_id, s.transcript):
                items = s.transcript.items
                leaf = leaf_id if leaf_id is not None else (items[-1].id if items else None)
                return branch_of(s.by_id, leaf, session_id, s.gaps)

    def branch_tail(
        self, session_id: str, count: int, *, kinds: Container[str] | None = None
    ) -> BranchTail:
        """See :meth:`ctxengine.store.TailStore.branch_tail`.

        A transcript this store has read goes on from where it was (what others appended
        since is read first), and the walk from the leaf stops at the ``count``-th entry of
        ``kinds``. One it has not read yet (a store opened for one request) is read from its
        end back, in chunks of :data:`TAIL_CHUNK` bytes and more, only as far as that walk
        goes (:func:`_tail_piece` says how it stays what a whole read finds); when that
        piece holds a damaged line, an append cut short, an entry id twice, or the walk
        leads to the file's start, the whole file is read as :meth:`branch` reads it."""
        check_tail_args(count, kinds)
        with self._lock:
            s = self._session(session_id)
            if s.transcript.offset == 0:
                found = self._tail_cold(s, session_id, count, kinds)
                if found is not None:
                    return found
            with self._reading(s, session_id, s.transcript):
                items = s.transcript.items
                leaf = items[-1].id if items else None
                walked = tail_of(s.by_id, leaf, count, kinds, session_id, s.gaps)
                return BranchTail(walked or [], leaf)  # None only from a partial walk

    def _from_end(
        self,
        s: _Session,
        session_id: str,
        fd: int,
        judge: Callable[[Piece], T | str],
    ) -> T | None:
        """``judge``'s answer on the newest entries of the transcript open as ``fd`` (the
        caller holds a flock on it); None when only a read of the whole file can tell.

        What this store read from the end before (``s.tail``) goes on with the lines appended
        since. Otherwise the file is read from its end back, in chunks of :data:`TAIL_CHUNK`
        bytes and more, until ``judge`` answers something else than ``MORE``, and what was
        read is kept for the next call when the file ends with a complete line. None for
        ``WHOLE``, a piece that would be the whole file, or a file of :data:`TAIL_CHUNK` bytes
        or less (the caller reads it whole)."""
        lg = s.transcript
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size <= TAIL_CHUNK:
                s.tail = None
                return None
            kept, s.tail = s.tail, None  # given back below while it holds
            if (
                kept is not None
                and kept.ino == st.st_ino
                and st.st_size >= kept.end
                and os.pread(fd, len(kept.head), 0) == kept.head  # not a file made anew
                and kept.catch_up(fd, st.st_size)
            ):
                found = judge(kept.piece)
                if not isinstance(found, str):
                    s.tail = kept
                    return found
                if found == WHOLE:
                    return None
            start, want, buf = st.st_size, TAIL_CHUNK, b""
            while (at := start - want) > 0:  # else the whole file: read as a whole
                buf = os.pread(fd, start - at, at) + buf
                start = at
                want *= 2
                parsed = _tail_piece(buf)
                if parsed == MORE:
                    continue
                if isinstance(parsed, str):
                    return None
                entries, torn = parsed
                piece = Piece()
                if not piece.add(entries):
                    return None
                found = judge(piece)
                if found == MORE:
                    continue
                if isinstance(found, str):
                    return None
                if torn:
                    self._report_torn(s, session_id, st, torn)
                elif buf.endswith(b"\n"):
                    head = os.pread(fd, min(HEAD_BYTES, st.st_size), 0)
                    s.tail = _Tail(st.st_ino, head, st.st_size, entries[-1].ts, piece)
                return found
            return None
        except OSError as exc:
            raise _os_error("read", lg.path, exc) from exc

    def _tail_cold(
        self, s: _Session, session_id: str, count: int, kinds: Container[str] | None
    ) -> BranchTail | None:
        """:meth:`branch_tail` from the end of a transcript this store has not read; None
        when only a read of the whole file can tell (the caller reads it). Under a shared
        ``flock``, as every read: an append (exclusive) is either all in or not begun."""
        try:
            fd = os.open(s.transcript.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None  # missing, or an error the whole read reports
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return self._from_end(
                s, session_id, fd, lambda piece: piece.tail(count, kinds, session_id)
            )
        finally:
            os.close(fd)

    def _report_torn(self, s: _Session, session_id: str, st: os.stat_result, torn: int) -> None:
        """Report a torn last line a read from the end stepped over, as a whole read reports
        it: once per store (a whole read of the same file later does not report it again)."""
        lg = s.transcript
        if lg.ino != st.st_ino:  # another file than the one reported on before
            lg.reported.clear()
            lg.ino = st.st_ino
        self._torn_once(lg, session_id, st.st_size - torn, torn)

    def _torn_once(self, lg: _Log[Any], session_id: str, pos: int, size: int) -> None:
        """Report the torn last line of ``lg`` at ``pos`` (``size`` bytes), once per store."""
        if pos not in lg.reported:
            lg.reported.add(pos)
            self._report(
                session_id,
                lg.path,
                f"last line is torn ({size} bytes without a newline, an interrupted write): "
                "skipped",
            )

    def leaf(self, session_id: str) -> str | None:
        """See :meth:`ctxengine.Store.leaf`."""
        with self._lock:
            s = self._session(session_id)
            with self._reading(s, session_id, s.transcript):
                return s.transcript.items[-1].id if s.transcript.items else None

    # -- snapshots ----------------------------------------------------------------------------

    def write_snapshot(
        self,
        session_id: str,
        content: Mapping[str, Any],
        *,
        meta: Mapping[str, Any] | None = None,
        leaf_id: str | Leaf | None = LEAF,
    ) -> SnapshotInfo:
        """See :meth:`ctxengine.Store.write_snapshot`. The content file is fsynced and renamed
        into place before the index line is appended and fsynced. The line also records the
        snapshots the retention prunes (see :mod:`ctxengine.store.retention`); their content
        files are removed once it is durable."""
        data = snapshot_json(content).encode("utf-8")  # encoded once: hashed, written
        clean_meta = snapshot_meta(meta)
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            s = self._session(session_id)
            with contextlib.ExitStack() as held:
                if leaf_id is LEAF:
                    # The leaf stays held (a shared flock on the transcript, which an append
                    # takes exclusive) until the index line is written: no append lands in
                    # between, so the line names the leaf the store had when it was written.
                    leaf = held.enter_context(self._leaf_held(s, session_id))
                else:
                    leaf = leaf_id
                # Under the index's exclusive flock from the content file to the index line, so
                # a content file no index line names, seen under that flock, is a killed
                # writer's.
                with self._writing(s, s.index, session_id) as write:
                    sweep = self._sweep_due(s)
                    self._store_object(s, digest, data)
                    info = SnapshotInfo(
                        new_id(), session_id, digest, len(data), time.time(), leaf, clean_meta
                    )
                    line, fast = self._write_index_line(s, info, write)
                    self._sweep(s, info.created_at, sweep)
            if fast:
                s.index.items.append(line)
            else:
                with self._reading(s, session_id, s.index):
                    pass
            return info

    def _write_index_line(
        self, s: _Session, info: SnapshotInfo, write: Callable[[list[str]], bool]
    ) -> tuple[_IndexLine, bool]:
        """Append ``info``'s line with the ids it prunes, then remove their content files.

        The prunes are durable before any file goes: a process killed in between leaves
        content files no live line names (the next sweep removes them), never a live line
        whose content is missing. Caller holds the index's exclusive flock."""
        retention = s.retention
        retention.add(info.id, info.hash, line_summary(info.meta))
        due = retention.due(lambda sid, digest: self._stored_summary(s, digest))
        obj = info.to_json()
        if due:
            obj["prunes"] = due
        try:
            fast = write([canonical_json(obj)])
        except BaseException:
            self._forget(s, s.index)  # the retention counted the line: read it all again
            s.unswept = None  # and look for the content file this left unindexed
            raise
        for digest in retention.prune(due):
            s.intact.pop(digest, None)
            path = s.dir / OBJECTS / f"{digest}.json"
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:  # named by no live line: a later sweep removes it
                log.warning("ctxengine store: cannot remove pruned %s: %s", path, exc)
        return _IndexLine(info, tuple(due)), fast

    def _stored_summary(self, s: _Session, digest: str) -> str | None:
        """The summary hash of a stored content (an index line from before retention)."""
        try:
            raw = (s.dir / OBJECTS / f"{digest}.json").read_bytes()
        except OSError:
            return UNKNOWN
        return stored_summary(raw)

    @staticmethod
    def _sweep_due(s: _Session) -> bool:
        """Whether this snapshot looks for what killed writers left: on this store's first
        snapshot of the session, when another process changed the ``objects`` folder since
        this store's last one (its mtime moved), and every :data:`SWEEP_EVERY` snapshots.
        Read before this snapshot changes the folder; caller holds the index's flock."""
        if s.unswept is None or s.unswept >= SWEEP_EVERY:
            return True
        try:
            return os.stat(s.dir / OBJECTS).st_mtime_ns != s.objects_mtime
        except OSError:
            return True

    def _sweep(self, s: _Session, before: float, due: bool) -> None:
        """When ``due``, remove what killed writers left in ``objects`` (temp files, content
        files no live index line names, last written before ``before``); then note the
        folder's mtime. Caller holds the index's exclusive flock, which every writer holds
        from its temp file to its index line, so no live writer's file is among them."""
        objects = s.dir / OBJECTS
        if due:
            _remove_stale_temps(objects, locked=True)
            _remove_orphans(objects, s.retention.refs, before)
            s.unswept = 0
        s.unswept = (s.unswept or 0) + 1
        try:
            s.objects_mtime = os.stat(objects).st_mtime_ns
        except OSError:
            s.objects_mtime = None

    @contextlib.contextmanager
    def _leaf_held(self, s: _Session, session_id: str) -> Iterator[str | None]:
        """The transcript's leaf, with a shared ``flock`` on the transcript held until the
        block exits, so no append (which takes it exclusive) lands in between. A missing
        transcript is created empty, so that a session's first append waits as well."""
        lg = s.transcript
        created = not lg.path.exists()
        if created:
            self._make_dirs(lg.path.parent)
        try:
            fd = os.open(lg.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _os_error("open", lg.path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._refresh(s, lg, fd, session_id)
            if created:
                self._sync_dir(lg.path.parent)
            yield lg.items[-1].id if lg.items else None
        finally:
            os.close(fd)

    def _store_object(self, s: _Session, digest: str, data: bytes) -> None:
        objects = s.dir / OBJECTS
        final_path = objects / f"{digest}.json"
        if s.intact.get(digest) or self._object_intact(final_path, digest):
            return  # stored once by hash
        self._make_dirs(objects)
        tmp = objects / f".{digest}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _os_error("create", tmp, exc) from exc
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise _os_error("write the snapshot", final_path, exc) from exc
        self._sync_dir(objects)
        s.intact[digest] = True

    @staticmethod
    def _object_intact(path: Path, digest: str) -> bool:
        try:
            return content_hash(path.read_bytes().decode("utf-8", errors="replace")) == digest
        except OSError:
            return False

    def snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """See :meth:`ctxengine.Store.snapshots`: every index line, a pruned one with
        ``pruned=True``."""
        with self._lock:
            s = self._session(session_id)
            with self._reading(s, session_id, s.index):
                pruned = s.retention.pruned
                return [
                    dataclasses.replace(line.info, pruned=True)
                    if line.info.id in pruned
                    else line.info
                    for line in s.index.items
                ]

    def load_snapshot(self, session_id: str, snapshot_id: str | None = None) -> Snapshot | None:
        """See :meth:`ctxengine.Store.load_snapshot`. The latest skips pruned snapshots
        quietly; one asked for by id raises a :class:`~ctxengine.StoreError` saying it was
        pruned by retention."""
        with self._lock:
            s = self._session(session_id)
            with self._reading(s, session_id, s.index):
                infos = [line.info for line in s.index.items]
            if snapshot_id is not None:
                found = [i for i in infos if i.id == snapshot_id]
                if not found:
                    raise StoreError(f"session {session_id!r} has no snapshot {snapshot_id!r}")
                return Snapshot(found[0], self._read_kept(s, session_id, found[0]))
            for info in reversed(infos):
                if info.id in s.retention.pruned:
                    continue
                try:
                    return Snapshot(info, self._read_kept(s, session_id, info))
                except StoreError as exc:
                    if info.id not in s.retention.pruned:  # pruned meanwhile: not a problem
                        self._report(session_id, s.dir / OBJECTS, f"{exc}: skipped")
            return None

    def _read_kept(self, s: _Session, session_id: str, info: SnapshotInfo) -> dict[str, Any]:
        """:meth:`_read_object`, or the pruned error when the retention removed it (also by
        another process since the index was read)."""
        path = str(s.dir / OBJECTS / f"{info.hash}.json")
        if info.id in s.retention.pruned:
            raise pruned_error(session_id, info.id, path=path)
        try:
            return self._read_object(s, info)
        except StoreError:
            with self._reading(s, session_id, s.index):
                if info.id in s.retention.pruned:
                    raise pruned_error(session_id, info.id, path=path) from None
            raise

    def _read_object(self, s: _Session, info: SnapshotInfo) -> dict[str, Any]:
        path = s.dir / OBJECTS / f"{info.hash}.json"
        try:
            raw = path.read_bytes()
        except FileNotFoundError as exc:
            raise StoreError(
                f"snapshot {info.id!r}: content file {path} is missing", path=str(path)
            ) from exc
        except OSError as exc:
            raise _os_error("read", path, exc) from exc
        try:
            return parse_content(raw, info)
        except (ValueError, StoreError) as exc:
            raise StoreError(
                f"snapshot {info.id!r}: content file {path} is damaged ({exc})", path=str(path)
            ) from exc

    # -- sessions -----------------------------------------------------------------------------

    def sessions(self) -> list[str]:
        """See :meth:`ctxengine.Store.sessions`."""
        base = self.root / "sessions"
        try:
            names = os.listdir(base)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _os_error("list", base, exc) from exc
        return sorted(n for n in names if _is_session_id(n) and self._holds(base / n))

    @staticmethod
    def _holds(d: Path) -> bool:
        return (d / TRANSCRIPT).is_file() or (d / INDEX).is_file()

    def exists(self, session_id: str) -> bool:
        """See :meth:`ctxengine.Store.exists`."""
        validate_session_id(session_id)
        return self._holds(self.root / "sessions" / session_id)

    def delete(self, session_id: str) -> bool:
        """See :meth:`ctxengine.Store.delete`."""
        validate_session_id(session_id)
        d = self.root / "sessions" / session_id
        with self._lock:
            self._sessions.pop(session_id, None)
            if not d.exists():
                return False
            # Renamed away first (atomic), then removed: a process killed inside the removal
            # leaves a hidden folder no listing or reader takes for a session, never a session
            # with its transcript gone and its snapshots still there.
            gone = d.parent / f".deleted.{session_id}.{secrets.token_hex(4)}"
            try:
                os.rename(d, gone)
            except OSError as exc:
                raise _os_error("delete", d, exc) from exc
            self._sync_dir(d.parent)
            self._remove_deleted(d.parent)
            return True

    @staticmethod
    def _remove_deleted(base: Path) -> None:
        """Remove the renamed-away folders of deletes (this one's, and any a killed delete
        left); best effort: one that cannot be removed now is removed by a later delete."""
        try:
            names = os.listdir(base)
        except OSError:
            return
        for name in names:
            if name.startswith(".deleted."):
                shutil.rmtree(base / name, ignore_errors=True)

    def close(self) -> None:
        """Forget cached state (no file stays open between calls)."""
        with self._lock:
            self._sessions.clear()
