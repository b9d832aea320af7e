"""`RedisStore`: the :class:`~ctxengine.Store` semantics on Redis, for many workers per session.

Keys (``P`` is the prefix, default ``ctxengine``; every key of a session carries the hash tag
``{session_id}``, so a session lives in one Cluster slot and its transactions are legal there)::

    P:{sid}:log      LIST    one entry JSON per element, append order
    P:{sid}:ids      HASH    entry id -> "1"      (duplicate and parent checks)
    P:{sid}:epoch    STRING  random token set by the first write (detects delete + recreate)
    P:{sid}:snaps    LIST    one snapshot index line JSON per element
    P:{sid}:snapid   HASH    snapshot id -> its index line (the same JSON; a lookup by id
                             without reading the list)
    P:{sid}:objs     SET     content hashes stored for the session
    P:{sid}:obj:<h>  STRING  snapshot content, stored once per hash
    P:{sid}:pruned   SET     ids of the snapshots whose content the retention removed
    P:{sid}:retention STRING the retention's window (JSON: the newest snapshots, the restore
                             points kept, how many index lines it has seen)
    P:sessions       SET     session ids (its own slot; updated outside the transactions)

Appends use optimistic concurrency: ``WATCH`` the log, read the leaf and check the ids, then
``MULTI``/``EXEC`` the push; a concurrent append aborts the transaction and it is retried on the
new leaf. So appends from any number of processes are serialized: each entry lands exactly
once, and every reader sees the same order. ``append_if`` compares that leaf with the one the
writer expects before the ``MULTI``: a mismatch (on the first attempt or on a retry after a
lost race) is a :class:`~ctxengine.StoreConflictError` with nothing pushed. A retry after a
lost reply (connection dropped during ``EXEC``) finds its own ids already there and returns
them instead of pushing twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import secrets
import threading
import time
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, final
from urllib.parse import urlsplit

import redis
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    BusyLoadingError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    WatchError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import ConfigError, ConfigTypeError, StoreError
from .base import (
    LEAF,
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
    masked_url,
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
    Retention,
    check_retention,
    line_summary,
    pruned_error,
    stored_summary,
)

__all__ = ("RedisStore",)

log = logging.getLogger("ctxengine.store")

#: Attempts of one append before giving up (each lost race retries once the other finished).
MAX_ATTEMPTS = 1000
#: Attempts after a dropped connection.
MAX_RECONNECTS = 3
#: Index lines read per request when the latest snapshot is looked for from the newest back.
PAGE = 32
#: Log elements :meth:`RedisStore.branch_tail` reads first from the end of a log it has not
#: read; it doubles each time the walk needs entries before them.
TAIL_PAGE = 64
#: Seconds a command waits for its reply, and a connection to be made, unless the URL sets
#: ``socket_timeout`` / ``socket_connect_timeout`` (redis-py before 8 waited forever).
DEFAULT_TIMEOUT = 5.0


@dataclass(slots=True)
class _Cache:
    epoch: str | None = None
    entries: list[Entry] = field(default_factory=list)
    by_id: dict[str, Entry] = field(default_factory=dict)
    consumed: int = 0  # list elements read (valid or reported)
    gaps: TranscriptGaps = field(default_factory=TranscriptGaps)  # damaged elements stepped over
    checked: bool = False  # an empty log was checked for the ids of a log that is gone


@dataclass(slots=True)
class _Tail:
    """The newest entries of a log that this store read from its end (it has not read the
    whole): the next read from the end goes on with the elements pushed since."""

    epoch: Any
    end: int  # the log's length when it was read
    piece: Piece


def _url_option_problem(client: Any, url: str) -> str | None:
    """What is wrong with a URL query option the connection does not take (``?timeout=5``),
    found now rather than as a ``TypeError`` at the first command (redis-py passes such options
    through to the connection, which is only made then), or with its database: a path that is
    no number (``/sessions``) was read as database 0 and the store wrote there, a negative one
    was refused by the server at the first command. None when all is well."""
    path = urlsplit(url).path.strip("/") if url.startswith(("redis:", "rediss:")) else ""
    if path and not (path.isascii() and path.isdigit()):
        return f"the database is {path!r}; expected its number, as in redis://host:6379/0"
    pool = client.connection_pool
    db = pool.connection_kwargs.get("db", 0)
    if not isinstance(db, int) or db < 0:
        return f"the database is {db!r}; expected a number >= 0"
    try:
        pool.connection_class(**pool.connection_kwargs)  # only stores them: nothing connects
    except TypeError as exc:
        found = re.search(r"argument '(\w+)'", str(exc))
        name = repr(found.group(1)) if found else f"({exc})"
        return (
            f"unknown option {name}; expected an option of a redis-py connection "
            "(socket_timeout, client_name, ...)"
        )
    return None


def _checked_timeout(value: object) -> float | None:
    """The ``timeout`` of a :class:`RedisStore`, checked.

    Raises:
        ConfigTypeError: neither a number nor None. ConfigError: not above 0, or not finite.
    """
    expected = "expected a number of seconds above 0, or None to wait forever"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(f"timeout is {value!r} ({type(value).__name__}); {expected}")
    if not 0 < value < float("inf"):
        raise ConfigError(f"timeout is {value!r}; {expected}")
    return float(value)


#: What a refusal of the server means for the store, and what it expected instead: by the
#: redis-py error class, then by the server's error code in the message (redis-py keeps the
#: code of the errors it has no class for).
_MEANING: tuple[tuple[tuple[type[Exception], ...] | str, str], ...] = (
    (
        (AuthenticationError, AuthenticationWrongNumberOfArgsError),
        "the server refused the connection's credentials; expected the URL to carry the "
        "password the server requires, as in redis://:PASSWORD@host:port/db or, for an ACL "
        "user, redis://USER:PASSWORD@host:port/db, and none when it requires none",
    ),
    (
        (ReadOnlyError,),
        "the server is a read-only replica; expected the URL of the primary, which takes writes",
    ),
    (
        (OutOfMemoryError,),
        "the server reached its maxmemory and its maxmemory-policy evicts nothing; expected "
        "room for the session: raise maxmemory or free memory; an allkeys-* policy would "
        "evict the keys of stored sessions instead",
    ),
    (
        (NoPermissionError,),
        "the URL's user lacks an ACL permission; expected a user allowed the store's commands "
        "on its keys",
    ),
    (
        (BusyLoadingError,),
        "the server is loading its data set after a restart; expected it to answer once loaded",
    ),
    (
        "NOREPLICAS",
        "the server has fewer replicas in sync than its min-replicas-to-write; expected "
        "enough replicas for it to take writes",
    ),
    (
        "MISCONF",
        "the server refuses writes because its last save to disk failed; expected its "
        "persistence to work again: see the server's log",
    ),
    (
        "DB index is out of range",
        "the URL's database is not one the server has; expected a number below its "
        "'databases' setting (16 by default)",
    ),
    (
        "max number of clients",
        "the server has as many clients as its maxclients allows; expected a free connection: "
        "raise maxclients or close idle clients",
    ),
    (
        "MASTERDOWN",
        "the replica lost its link to the primary; expected the primary to be reachable",
    ),
)


@final
class RedisStore:
    """A :class:`~ctxengine.Store` on a Redis server (standalone or Cluster).

    Args:
        url: A ``redis://`` / ``rediss://`` / ``unix://`` URL (ignored when ``client`` is given).
        prefix: First part of every key.
        client: A ready ``redis.Redis`` or ``redis.cluster.RedisCluster`` to use instead.
        cluster: Connect with ``RedisCluster.from_url(url)``.
        keep_snapshots: Snapshots of a session whose content is kept, as in
            :class:`~ctxengine.FileStore` (None keeps every one).
        keep_compactions: Besides those, the first snapshots after this many of the latest
            compactions (None: after every one).
        timeout: Seconds a command waits for the server's reply, and a connection for the
            server to accept it (redis-py's ``socket_timeout`` and ``socket_connect_timeout``,
            unless the URL sets them: ``?socket_timeout=2``); None waits forever. A call that
            times out raises :class:`~ctxengine.StoreError` at once (a render has it as a
            fault): it is not tried again, so a stalled server holds a store call, and a
            render's save, for about this long. Not used with ``client``, which has its own.

    Raises:
        ConfigTypeError: ``url`` is not a ``str`` (and no ``client`` is given), a ``keep_``
            argument is not an int or None, or ``timeout`` not a number or None.
        ConfigError: ``keep_snapshots`` below 1, ``keep_compactions`` below 0, or
            ``timeout`` not above 0 (or not finite).
        StoreError: the URL is invalid (its database not a number >= 0 included).
    """

    __slots__ = (
        "_cache",
        "_keep",
        "_lock",
        "_r",
        "_tails",
        "prefix",
        "problems",
        "timeout",
        "url",
    )

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "ctxengine",
        client: Any = None,
        cluster: bool = False,
        keep_snapshots: int | None = DEFAULT_KEEP_SNAPSHOTS,
        keep_compactions: int | None = DEFAULT_KEEP_COMPACTIONS,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        self._keep = check_retention(keep_snapshots, keep_compactions)
        self.timeout = _checked_timeout(timeout)
        if client is None and not isinstance(url, str):
            raise ConfigTypeError(
                f"url is {url!r} ({type(url).__name__}); expected a Redis URL such as "
                "'redis://127.0.0.1:6379/0'"
            )
        self.url = url
        self.prefix = prefix
        self.problems: list[StoreProblem] = []
        self._lock = threading.Lock()
        self._cache: dict[str, _Cache] = {}
        self._tails: dict[str, _Tail] = {}  # the ends of logs this store has not read whole
        problem: str | None = None
        waits = {"socket_timeout": self.timeout, "socket_connect_timeout": self.timeout}
        try:
            if client is not None:
                self._r = client
            elif cluster:
                from redis.cluster import RedisCluster

                self._r = RedisCluster.from_url(url, **waits)
            else:
                self._r = redis.Redis.from_url(url, **waits)  # the URL's own options win
                problem = _url_option_problem(self._r, url)
        except (ValueError, RedisError) as exc:
            problem = str(exc)
        except RedisClusterException as exc:  # not a RedisError: no node, or an option
            shown = masked_url(url)
            raise StoreError(
                f"cannot open the Redis Cluster at {shown!r}: {exc}; expected a reachable "
                "cluster node and redis-py connection options",
                path=shown,
            ) from exc
        if problem is not None:
            shown = masked_url(url)
            raise StoreError(f"invalid Redis URL {shown!r}: {problem}", path=shown)

    def __repr__(self) -> str:
        return f"ctxengine.RedisStore({masked_url(self.url)!r}, prefix={self.prefix!r})"

    # -- keys ---------------------------------------------------------------------------------

    def _key(self, session_id: str, name: str) -> str:
        return f"{self.prefix}:{{{validate_session_id(session_id)}}}:{name}"

    def _error(self, action: str, session_id: str, exc: Exception) -> StoreError:
        where = self._key(session_id, "*")
        return StoreError(
            f"cannot {action} {where} on {masked_url(self.url)}: {self._why(exc)}", path=where
        )

    def _why(self, exc: Exception) -> str:
        """redis-py's message of ``exc``, followed by what it means for the store and what
        was expected instead (the server's texts say what it refused, rarely why)."""
        text = str(exc)
        meaning = next(
            (
                said
                for cause, said in _MEANING
                if (cause in text if isinstance(cause, str) else isinstance(exc, cause))
            ),
            None,
        )
        if meaning is None and isinstance(exc, RedisTimeoutError):
            waited = self._waited()
            within = f"within {waited:g} s" if waited is not None else "in time"
            meaning = (
                f"the server did not answer {within}; expected an answer within the store's "
                "timeout: the server is stalled or overloaded, or the network drops packets"
            )
        elif meaning is None and isinstance(exc, RedisConnectionError):
            meaning = "expected a Redis server answering at that address"
        return f"{text} ({meaning})" if meaning is not None else text

    def _waited(self) -> float | None:
        """The seconds a command waits for a reply (the URL's ``socket_timeout`` or the
        store's ``timeout``); None when unknown (a client of one's own) or unbounded."""
        pool = getattr(self._r, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None)
        if isinstance(kwargs, dict):
            waited = kwargs.get("socket_timeout")
            return float(waited) if isinstance(waited, (int, float)) else None
        return self.timeout

    def _report(self, session_id: str, where: str, message: str) -> None:
        problem = StoreProblem(session_id, where, message)
        self.problems.append(problem)
        log.warning("ctxengine store: %s", problem)

    def _list(self, session_id: str) -> None:
        """Add the session to the ``sessions`` listing, after a write it acknowledged. That
        write is durable whatever happens here: a server that fails now (killed, out of
        memory) is reported in :attr:`problems`, and the next write lists the session."""
        listing = f"{self.prefix}:sessions"
        try:
            self._r.sadd(listing, session_id)
        except RedisError as exc:
            self._report(
                session_id,
                listing,
                f"session {session_id!r} not added to the listing: {self._why(exc)}; what "
                "was written is stored, and the next write that works lists it",
            )

    # -- transcript ---------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """See :meth:`ctxengine.Store.append` (serialized across processes by WATCH/MULTI)."""
        return self._append(session_id, entries, parent_id, check=False, expected=None)

    def append_if(
        self,
        session_id: str,
        entries: Iterable[NewEntry],
        *,
        expected_leaf: str | None,
        parent_id: str | Leaf | None = LEAF,
    ) -> list[Entry]:
        """See :meth:`ctxengine.store.ConditionalStore.append_if`: the leaf is read after the
        ``WATCH`` of the log and compared with ``expected_leaf``; an append by anyone else
        before the ``EXEC`` aborts the transaction, and the retry then finds the new leaf and
        raises :class:`~ctxengine.StoreConflictError`."""
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
        log_key = self._key(session_id, "log")
        if not items:
            return []
        # Ids are fixed before the first attempt, so a retry recognizes its own landed entries.
        fixed = [i if i.id is not None else NewEntry(i.kind, i.data, new_id()) for i in items]
        ids = [str(i.id) for i in fixed]
        reconnects = 0
        for attempt in range(MAX_ATTEMPTS):
            try:
                try:
                    result = self._try_append(
                        session_id,
                        log_key,
                        fixed,
                        ids,
                        parent_id,
                        (check, expected),
                        reconnects > 0,
                    )
                except WatchError as exc:
                    lost = _connection_lost(exc)
                    if lost is None:  # another append came first: retried on its leaf
                        time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
                        continue
                    raise lost from exc
            except RedisTimeoutError as exc:
                # Not tried again: the server did not answer within the timeout, and would
                # make a retry wait as long (the render waiting on this call with it). The
                # push may have been applied all the same: a save of the same messages
                # finds it (Session._save looks for them on the next refusal).
                raise self._error("append to", session_id, exc) from exc
            except RedisConnectionError as exc:
                reconnects += 1
                if reconnects > MAX_RECONNECTS:
                    raise self._error("append to", session_id, exc) from exc
                continue
            except RedisError as exc:
                raise self._error("append to", session_id, exc) from exc
            self._list(session_id)
            return result
        raise StoreError(
            f"cannot append to session {session_id!r}: lost the race {MAX_ATTEMPTS} times",
            path=log_key,
        )

    def _try_append(
        self,
        session_id: str,
        log_key: str,
        items: list[NewEntry],
        ids: list[str],
        parent_id: str | Leaf | None,
        condition: tuple[bool, str | None],
        recovering: bool,
    ) -> list[Entry]:
        """One attempt. Entries already there under all of these ids are this append's own
        when an earlier attempt's connection failed (``recovering``: it landed, its reply was
        lost) or when they hold the same kinds and data (the caller retrying a call whose
        reply it lost): they are returned, nothing is written. Otherwise an id already there
        is taken: :class:`StoreError` (after the leaf check of ``append_if``)."""
        ids_key = self._key(session_id, "ids")
        with self._r.pipeline() as pipe:
            pipe.watch(log_key)
            present = pipe.hmget(ids_key, ids)
            if all(present):
                wanted = set(ids)
                landed = {e.id: e for e in self.entries(session_id) if e.id in wanted}
                same = all(
                    i in landed
                    and landed[i].kind == item.kind
                    and landed[i].data == json.loads(compact_json(dict(item.data)))
                    for i, item in zip(ids, items, strict=True)
                )
                if recovering or same:
                    pipe.unwatch()
                    return [landed[i] for i in ids if i in landed]
            check, expected = condition
            leaf: str | None = None
            if parent_id is LEAF or check:
                # The last intact entry, as every reader sees it (a damaged last element is
                # skipped there, so it must not be the parent, nor stop every append): read
                # after the WATCH, so an append in between aborts this transaction.
                with self._lock:
                    leaf = self._leaf(session_id)
            if check and leaf != expected:
                pipe.unwatch()
                raise conflict_error(session_id, expected, leaf, path=log_key)
            if parent_id is LEAF:
                parent = leaf
            else:
                if parent_id is not None and not pipe.hexists(ids_key, parent_id):
                    raise StoreError(
                        f"session {session_id!r} has no entry {parent_id!r} to branch from"
                    )
                parent = parent_id
            new = build_entries(items, parent, {i for i, p in zip(ids, present, strict=True) if p})
            pipe.multi()
            pipe.rpush(log_key, *[compact_json(e.to_json()) for e in new])
            pipe.hset(ids_key, mapping=dict.fromkeys(ids, "1"))
            pipe.set(self._key(session_id, "epoch"), secrets.token_hex(8), nx=True)
            pipe.execute()
            return new

    def _refresh(self, session_id: str) -> _Cache:
        """Bring the session's cached entries up to date (one read of the new ones, with the
        epoch: see :meth:`_with_epoch`)."""
        self._tails.pop(session_id, None)  # read whole from now on
        cache = self._cache.setdefault(session_id, _Cache())
        log_key = self._key(session_id, "log")
        epoch_raw, (raw, size) = self._with_epoch(
            session_id, ("lrange", log_key, cache.consumed, -1), ("llen", log_key)
        )
        epoch = epoch_raw.decode() if epoch_raw is not None else None
        if size < cache.consumed:  # the log lost elements read before: gone, then pushed to
            self._report(
                session_id,
                log_key,
                f"the log {log_key} holds {size} elements, fewer than the {cache.consumed} "
                "read before: it was evicted (by the server's maxmemory-policy) or cut by "
                "hand since; it is read again as it is",
            )
        if epoch != cache.epoch or size < cache.consumed:  # first read, or deleted since
            stale = cache.consumed > 0
            cache = self._cache[session_id] = _Cache(epoch)
            if stale:  # read whole (an epoch evicted alone leaves the log: not empty then)
                raw = self._r.lrange(log_key, 0, -1)
        for item in raw:
            cache.consumed += 1
            previous = cache.entries[-1].id if cache.entries else None  # the last intact entry
            try:
                entry = Entry.from_json(json.loads(item))
            except (ValueError, StoreError) as exc:
                self._report(
                    session_id,
                    self._key(session_id, "log"),
                    f"element {cache.consumed - 1} is not an entry ({exc}): skipped",
                )
                cache.gaps.skipped(f"element {cache.consumed - 1}", previous)
                continue
            if entry.id in cache.by_id:
                self._report(
                    session_id,
                    self._key(session_id, "log"),
                    f"entry {entry.id!r} appears twice: the later copy is skipped",
                )
                continue
            bridged = cache.gaps.link(entry, cache.by_id, previous)
            if bridged is not None:
                self._report(session_id, self._key(session_id, "log"), bridged)
            cache.entries.append(entry)
            cache.by_id[entry.id] = entry
        if cache.consumed == 0 and not cache.checked:
            cache.checked = True
            self._check_log_gone(session_id)
        return cache

    def _check_log_gone(self, session_id: str) -> None:
        """Report an empty log whose ids remain (each append writes both in one ``MULTI``,
        a delete removes both): the log is gone, evicted by an allkeys-* ``maxmemory-policy``
        or deleted by hand, and the session reads as empty."""
        log_key, ids = self._key(session_id, "log"), self._key(session_id, "ids")
        held = int(self._r.hlen(ids))
        if held:
            self._report(
                session_id,
                log_key,
                f"the log {log_key} is gone (evicted by the server's maxmemory-policy, or "
                f"deleted by hand), though {ids} lists {held} of its entries: their messages "
                "are lost, the session reads without them",
            )

    def _with_epoch(self, session_id: str, *reads: tuple[Any, ...]) -> tuple[Any, list[Any]]:
        """The session's epoch and the replies of ``reads`` (each a pipeline method and its
        arguments: ``("llen", key)``), read in one round trip between two reads of the
        epoch, again until both agree: what
        a ``MULTI`` gave (nothing deleted and written again in between: a new epoch), without
        one, which a server at its ``maxmemory`` with ``noeviction`` refuses, reads included
        (the log only grows at its end otherwise, so any read of it is a whole prefix)."""
        epoch_key = self._key(session_id, "epoch")
        for _ in range(MAX_ATTEMPTS):
            pipe = self._r.pipeline(transaction=False)
            pipe.get(epoch_key)
            for command, *args in reads:
                getattr(pipe, command)(*args)
            pipe.get(epoch_key)
            before, *replies, after = pipe.execute()
            if before == after:
                return before, replies
        raise StoreError(
            f"cannot read session {session_id!r}: it was deleted and written again during "
            f"each of {MAX_ATTEMPTS} reads",
            path=epoch_key,
        )

    def _read(self, session_id: str) -> _Cache:
        validate_session_id(session_id)
        try:
            with self._lock:
                return self._refresh(session_id)
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc

    def entries(self, session_id: str) -> list[Entry]:
        """See :meth:`ctxengine.Store.entries`."""
        return list(self._read(session_id).entries)

    def branch(self, session_id: str, leaf_id: str | None = None) -> list[Entry]:
        """See :meth:`ctxengine.Store.branch`."""
        cache = self._read(session_id)
        leaf = leaf_id if leaf_id is not None else (cache.entries[-1].id if cache.entries else None)
        return branch_of(cache.by_id, leaf, session_id, cache.gaps)

    def leaf(self, session_id: str) -> str | None:
        """See :meth:`ctxengine.Store.leaf`: the last intact entry (a damaged element is
        skipped, as :meth:`entries` skips it)."""
        return self._leaf_of(self._read(session_id))

    def branch_tail(
        self, session_id: str, count: int, *, kinds: Container[str] | None = None
    ) -> BranchTail:
        """See :meth:`ctxengine.store.TailStore.branch_tail`.

        A session this store has read goes on from where it was (one ``LRANGE`` of what was
        appended since), and the walk from the leaf stops at the ``count``-th entry of
        ``kinds``. One it has not read yet (a store opened for one request) is read from the
        end of its log back, :data:`TAIL_PAGE` elements and more per ``LRANGE``, only as far
        as that walk goes; when those elements hold a damaged one or an id twice, or the walk
        leads to the log's start, the whole log is read as :meth:`branch` reads it."""
        check_tail_args(count, kinds)
        validate_session_id(session_id)
        try:
            with self._lock:
                cache = self._cache.get(session_id)
                if cache is None or cache.consumed == 0:
                    found = self._tail_cold(session_id, count, kinds)
                    if found is not None:
                        return found
                cache = self._refresh(session_id)
                leaf = self._leaf_of(cache)
                walked = tail_of(cache.by_id, leaf, count, kinds, session_id, cache.gaps)
                return BranchTail(walked or [], leaf)  # None only from a partial walk
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc

    def _tail_cold(
        self, session_id: str, count: int, kinds: Container[str] | None
    ) -> BranchTail | None:
        """:meth:`branch_tail` from the end of a log this store has not read whole; None when
        only a read of the whole log can tell (the caller reads it). What this store read
        from the end before goes on with the elements pushed since (one ``LRANGE``);
        otherwise the log is read from its end back. The log only grows at its end
        (``RPUSH``), so its elements keep their index: each page is read between two reads of
        the ``epoch`` (:meth:`_with_epoch`), and a delete (and recreate) between pages is read
        afresh. What it
        cannot see: an element pushed by hand whose id an element before the pages holds
        (no append writes one: the ``ids`` hash refuses it). Caller holds the lock."""
        log_key = self._key(session_id, "log")
        kept = self._tails.pop(session_id, None)  # given back below while it holds
        if kept is not None:
            epoch, (raw,) = self._with_epoch(session_id, ("lrange", log_key, kept.end, -1))
            if epoch == kept.epoch:
                new = _parsed_entries(raw)
                if new is not None and kept.piece.add(new):
                    kept.end += len(raw)
                    found = kept.piece.tail(count, kinds, session_id)
                    if isinstance(found, BranchTail):
                        self._tails[session_id] = kept
                        return found
                    if found == WHOLE:
                        return None
        epoch, (size,) = self._with_epoch(session_id, ("llen", log_key))
        if size <= TAIL_PAGE:  # small: read as a whole (and kept, for the next call)
            return None
        start, want = int(size), TAIL_PAGE
        piece: list[Entry] = []
        while (at := start - want) > 0:  # else the whole log: read as a whole
            now, (raw,) = self._with_epoch(session_id, ("lrange", log_key, at, start - 1))
            older = _parsed_entries(raw)
            if now != epoch or older is None:  # deleted since, or a damaged element
                return None
            piece = older + piece
            start = at
            held = Piece()
            if not held.add(piece):
                return None
            found = held.tail(count, kinds, session_id)
            if isinstance(found, BranchTail):
                self._tails[session_id] = _Tail(epoch, int(size), held)
                return found
            if found == WHOLE:
                return None
            want *= 2
        return None

    def _leaf(self, session_id: str) -> str | None:
        """The leaf, read from the end of the log when this store has not read the session
        (an append of a store opened for one request reads no more). Caller holds the lock."""
        cache = self._cache.get(session_id)
        if cache is None or cache.consumed == 0:
            tail = self._tail_cold(session_id, 0, None)
            if tail is not None:
                return tail.leaf
        return self._leaf_of(self._refresh(session_id))

    @staticmethod
    def _leaf_of(cache: _Cache) -> str | None:
        return cache.entries[-1].id if cache.entries else None

    # -- snapshots ----------------------------------------------------------------------------

    def write_snapshot(
        self,
        session_id: str,
        content: Mapping[str, Any],
        *,
        meta: Mapping[str, Any] | None = None,
        leaf_id: str | Leaf | None = LEAF,
    ) -> SnapshotInfo:
        """See :meth:`ctxengine.Store.write_snapshot` (content and index line in one MULTI,
        with the retention's prunes: the pruned ids, the removal of their contents and the
        new window, so the retention never leaves a live line without its content).

        With the default ``leaf_id`` the leaf is read after a ``WATCH`` of the log, as an
        append reads it: an append before the ``EXEC`` aborts the transaction and it is retried
        on the new leaf, so the index line names the leaf the store had when it was written.
        """
        text = snapshot_json(content)
        clean = snapshot_meta(meta)
        digest = content_hash(text)
        log_key = self._key(session_id, "log")
        try:
            for attempt in range(MAX_ATTEMPTS):
                try:
                    info = self._try_snapshot(session_id, log_key, text, digest, clean, leaf_id)
                except WatchError as exc:
                    lost = _connection_lost(exc)
                    if lost is not None:  # not a race: the server failed (the next one retries)
                        raise lost from exc
                    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
                    continue
                self._list(session_id)
                return info
        except RedisError as exc:
            raise self._error("write a snapshot to", session_id, exc) from exc
        raise StoreError(
            f"cannot write a snapshot of session {session_id!r}: appends changed its leaf "
            f"{MAX_ATTEMPTS} times in a row",
            path=log_key,
        )

    def _try_snapshot(
        self,
        session_id: str,
        log_key: str,
        text: str,
        digest: str,
        meta: dict[str, Any],
        leaf_id: str | Leaf | None,
    ) -> SnapshotInfo:
        keeps = self._keep[0] is not None
        with self._r.pipeline() as pipe:
            watched = [log_key] if leaf_id is LEAF else []
            if keeps:  # another snapshot before the EXEC moves the window: retried
                watched += [self._key(session_id, "snaps"), self._key(session_id, "retention")]
            if watched:
                pipe.watch(*watched)
            if leaf_id is LEAF:
                with self._lock:
                    leaf = self._leaf(session_id)
            else:
                leaf = leaf_id
            info = SnapshotInfo(
                new_id(), session_id, digest, len(text.encode()), time.time(), leaf, meta
            )
            window = self._window(pipe, session_id) if keeps else None
            pipe.multi()
            pipe.set(self._key(session_id, f"obj:{digest}"), text, nx=True)
            pipe.sadd(self._key(session_id, "objs"), digest)
            line = canonical_json(info.to_json())
            pipe.rpush(self._key(session_id, "snaps"), line)
            pipe.hset(self._key(session_id, "snapid"), info.id, line)
            pipe.set(self._key(session_id, "epoch"), secrets.token_hex(8), nx=True)
            if window is not None:
                self._prune(pipe, session_id, window, info)
            pipe.execute()
            return info

    def _window(self, pipe: Any, session_id: str) -> Retention:
        """The session's retention, read under the WATCH, with the index lines written since
        it was saved (by a store keeping every snapshot, or before retention existed)."""
        snaps, pruned = self._key(session_id, "snaps"), self._key(session_id, "pruned")
        raw = pipe.get(self._key(session_id, "retention"))
        try:
            saved = json.loads(raw) if raw is not None else None
        except ValueError:
            saved = None
        window = Retention.from_json(saved, *self._keep)
        seen = window.lines
        new = pipe.lrange(snaps, seen, -1)
        infos: list[SnapshotInfo] = []
        for item in new:
            try:
                infos.append(SnapshotInfo.from_json(json.loads(item)))
            except (ValueError, StoreError):
                continue  # a damaged line: listed as damaged by snapshots(), nothing to keep
        gone = pipe.smismember(pruned, [i.id for i in infos]) if infos else []
        for info, was_pruned in zip(infos, gone, strict=True):
            if not was_pruned:
                window.add(info.id, info.hash, line_summary(info.meta))
        window.lines = seen + len(new)
        return window

    def _prune(self, pipe: Any, session_id: str, window: Retention, info: SnapshotInfo) -> None:
        """Queue (inside the MULTI) the new line's place in the window and what it prunes."""

        def resolve(sid: str, digest: str) -> str | None:  # a line from before retention
            return stored_summary(self._r.get(self._key(session_id, f"obj:{digest}")))

        window.add(info.id, info.hash, line_summary(info.meta))
        due = window.due(resolve)
        gone = window.prune(due)
        if due:
            pipe.sadd(self._key(session_id, "pruned"), *due)
        if gone:
            pipe.delete(*[self._key(session_id, f"obj:{h}") for h in gone])
            pipe.srem(self._key(session_id, "objs"), *gone)
        pipe.set(self._key(session_id, "retention"), canonical_json(window.to_json()))

    def snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """See :meth:`ctxengine.Store.snapshots`: every index line, a pruned one with
        ``pruned=True``."""
        key = self._key(session_id, "snaps")
        try:
            pipe = self._r.pipeline(transaction=False)  # lines and pruned ids only grow
            pipe.lrange(key, 0, -1)
            pipe.smembers(self._key(session_id, "pruned"))
            raw, pruned_raw = pipe.execute()
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc
        if not raw:
            return self._without_index(session_id)
        pruned = {m.decode() for m in pruned_raw}
        out = []
        for i, item in enumerate(raw):
            info = self._parsed(session_id, key, f"index element {i}", item)
            if info is not None:
                out.append(_marked(info, info.id in pruned))
        return out

    def _without_index(self, session_id: str) -> list[SnapshotInfo]:
        """The snapshots of a session whose index list is empty, oldest first: none, unless
        the index is gone and other keys of its snapshots remain (a server's allkeys-*
        ``maxmemory-policy`` evicts any key, or one was deleted by hand). Then the index
        lines still held by the id hash (each written with its line, in the same ``MULTI``)
        are used, in the order they were written; either way it is reported, as a restore
        without them would silently rebuild another state from the messages."""
        snaps, snapid = self._key(session_id, "snaps"), self._key(session_id, "snapid")
        objs = self._key(session_id, "objs")
        try:
            pipe = self._r.pipeline(transaction=False)
            pipe.hvals(snapid)
            pipe.scard(objs)
            pipe.smembers(self._key(session_id, "pruned"))
            lines, contents, pruned_raw = pipe.execute()
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc
        infos = [
            info
            for item in lines
            if (info := self._parsed(session_id, snapid, "a line", item)) is not None
        ]
        gone = "evicted by the server's maxmemory-policy, or deleted by hand"
        if infos:
            self._report(
                session_id,
                snaps,
                f"the snapshot index {snaps} is gone ({gone}), though {snapid} holds "
                f"{len(infos)} of its lines: the snapshots are read from those",
            )
        elif contents:
            self._report(
                session_id,
                snaps,
                f"the snapshot index {snaps} and {snapid} are gone ({gone}), though {objs} "
                f"lists {contents} snapshot contents: no snapshot can be found, the session "
                "is rebuilt from its messages",
            )
        pruned = {m.decode() for m in pruned_raw}
        infos.sort(key=lambda i: (i.created_at, i.id))
        return [_marked(info, info.id in pruned) for info in infos]

    def _parsed(self, session_id: str, key: str, name: str, raw: bytes) -> SnapshotInfo | None:
        """The index line ``raw`` (``name`` of ``key``), or None when it is damaged (reported
        and skipped)."""
        try:
            return SnapshotInfo.from_json(json.loads(raw))
        except (ValueError, StoreError) as exc:
            self._report(session_id, key, f"{name} is damaged ({exc}): skipped")
            return None

    def load_snapshot(self, session_id: str, snapshot_id: str | None = None) -> Snapshot | None:
        """See :meth:`ctxengine.Store.load_snapshot`. The latest skips pruned snapshots
        quietly; one asked for by id raises a :class:`~ctxengine.StoreError` saying it was
        pruned by retention.

        Neither reads the whole index: a snapshot asked for by id is looked up in the id hash
        (a session written before the hash existed is read whole, as before), and the latest
        is looked for from the newest index line back, :data:`PAGE` lines per request."""
        if snapshot_id is not None:
            info = self._info(session_id, snapshot_id)
            return Snapshot(info, self._read_kept(session_id, info))
        for info in self._newest_first(session_id):
            if info.pruned:
                continue
            try:
                return Snapshot(info, self._read_object(session_id, info))
            except StoreError as exc:
                if not self._was_pruned(session_id, info.id):  # pruned meanwhile: no problem
                    self._report(session_id, self._key(session_id, "snaps"), f"{exc}: skipped")
        return None

    def _info(self, session_id: str, snapshot_id: str) -> SnapshotInfo:
        """The index line of snapshot ``snapshot_id``, marked pruned when it was."""
        try:
            pipe = self._r.pipeline(transaction=False)
            pipe.hget(self._key(session_id, "snapid"), snapshot_id)
            pipe.sismember(self._key(session_id, "pruned"), snapshot_id)
            raw, pruned = pipe.execute()
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc
        key = self._key(session_id, "snapid")
        info = None if raw is None else self._parsed(session_id, key, f"id {snapshot_id!r}", raw)
        if info is None or info.id != snapshot_id:  # not in the hash: a session from before it
            found = [i for i in self.snapshots(session_id) if i.id == snapshot_id]
            if not found:
                raise StoreError(f"session {session_id!r} has no snapshot {snapshot_id!r}")
            return found[0]
        return _marked(info, pruned)

    def _newest_first(self, session_id: str) -> Iterator[SnapshotInfo]:
        """The session's index lines from the newest back, read :data:`PAGE` at a time, each
        marked pruned when it was (damaged ones reported and skipped, as :meth:`snapshots`
        does). Lines are only ever appended, so a position names the same line throughout
        (unless the session is deleted and written again meanwhile: then the pages read are
        the new session's, or empty)."""
        key, pruned_key = self._key(session_id, "snaps"), self._key(session_id, "pruned")
        try:
            end = int(self._r.llen(key))
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc
        if end == 0:
            yield from reversed(self._without_index(session_id))
        while end > 0:
            start = max(0, end - PAGE)
            try:
                raw = self._r.lrange(key, start, end - 1)
            except RedisError as exc:
                raise self._error("read", session_id, exc) from exc
            page = [
                info
                for i, item in reversed(list(enumerate(raw, start)))
                if (info := self._parsed(session_id, key, f"index element {i}", item)) is not None
            ]
            if page:
                try:  # SISMEMBERs in one round trip (SMISMEMBER needs Redis 6.2)
                    pipe = self._r.pipeline(transaction=False)
                    for info in page:
                        pipe.sismember(pruned_key, info.id)
                    flags = pipe.execute()
                except RedisError as exc:
                    raise self._error("read", session_id, exc) from exc
                for info, pruned in zip(page, flags, strict=True):
                    yield _marked(info, pruned)
            end = start

    def _was_pruned(self, session_id: str, snapshot_id: str) -> bool:
        try:
            return bool(self._r.sismember(self._key(session_id, "pruned"), snapshot_id))
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc

    def _read_kept(self, session_id: str, info: SnapshotInfo) -> dict[str, Any]:
        """:meth:`_read_object`, or the pruned error when the retention removed it (also by
        another process since the index was read)."""
        key = self._key(session_id, f"obj:{info.hash}")
        if info.pruned:
            raise pruned_error(session_id, info.id, path=key)
        try:
            return self._read_object(session_id, info)
        except StoreError:
            if self._was_pruned(session_id, info.id):
                raise pruned_error(session_id, info.id, path=key) from None
            raise

    def _read_object(self, session_id: str, info: SnapshotInfo) -> dict[str, Any]:
        key = self._key(session_id, f"obj:{info.hash}")
        try:
            raw = self._r.get(key)
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc
        if raw is None:
            raise StoreError(f"snapshot {info.id!r}: content {key} is missing", path=key)
        try:
            return parse_content(raw, info)
        except (ValueError, StoreError) as exc:
            raise StoreError(
                f"snapshot {info.id!r}: content {key} is damaged ({exc})", path=key
            ) from exc

    # -- sessions -----------------------------------------------------------------------------

    def sessions(self) -> list[str]:
        """See :meth:`ctxengine.Store.sessions`."""
        try:
            names = sorted(m.decode() for m in self._r.smembers(f"{self.prefix}:sessions"))
            return [n for n in names if self._exists(n)]
        except RedisError as exc:
            raise StoreError(
                f"cannot list sessions on {masked_url(self.url)}: {self._why(exc)}"
            ) from exc

    def _exists(self, session_id: str) -> bool:
        return bool(self._r.exists(self._key(session_id, "log"), self._key(session_id, "snaps")))

    def exists(self, session_id: str) -> bool:
        """See :meth:`ctxengine.Store.exists`."""
        try:
            return self._exists(session_id)
        except RedisError as exc:
            raise self._error("read", session_id, exc) from exc

    def delete(self, session_id: str) -> bool:
        """See :meth:`ctxengine.Store.delete`."""
        try:
            objs = self._r.smembers(self._key(session_id, "objs"))
            names = ("log", "ids", "epoch", "snaps", "snapid", "objs", "pruned", "retention")
            keys = [self._key(session_id, n) for n in names]
            keys += [self._key(session_id, f"obj:{h.decode()}") for h in objs]
            removed = int(self._r.delete(*keys))
            self._r.srem(f"{self.prefix}:sessions", session_id)
        except RedisError as exc:
            raise self._error("delete", session_id, exc) from exc
        with self._lock:
            self._cache.pop(session_id, None)
            self._tails.pop(session_id, None)
        return removed > 0

    def close(self) -> None:
        """Close the connection pool."""
        self._tails.clear()
        self._r.close()


def _connection_lost(exc: WatchError) -> RedisError | None:
    """The connection error or timeout that redis-py reported as ``exc``; None when ``exc``
    is a real one (a watched key changed before the ``EXEC``).

    redis-py raises a ``WatchError`` when the connection fails (or times out) while a key is
    watched, for the caller to run the transaction again: a retry loop took a dead or stalled
    server for lost races, and asked it again up to :data:`MAX_ATTEMPTS` times, each waiting
    for the timeout (a render held for minutes by a server paused for writes)."""
    lost = exc.__cause__ or exc.__context__
    return lost if isinstance(lost, (RedisConnectionError, RedisTimeoutError)) else None


def _parsed_entries(raw: list[bytes]) -> list[Entry] | None:
    """The entries of log elements; None when one is damaged (the whole read reports it and
    steps over it)."""
    try:
        return [Entry.from_json(json.loads(item)) for item in raw]
    except (ValueError, StoreError):
        return None


def _marked(info: SnapshotInfo, pruned: bool) -> SnapshotInfo:
    """``info``, with ``pruned=True`` when the retention removed its content."""
    return dataclasses.replace(info, pruned=True) if pruned else info
