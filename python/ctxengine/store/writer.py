"""`SnapshotWriter`: snapshots written from a background thread, so renders never wait.

``submit()`` queues a snapshot and returns a :class:`concurrent.futures.Future` at once; one
daemon thread writes the queue in order. When snapshots of one session arrive faster than the
store takes them, only the newest waiting one is written: the superseded ones' futures resolve
to the :class:`~ctxengine.store.SnapshotInfo` of the snapshot that replaced them (a snapshot
is a full state, so the newest one is all a restore needs). ``content`` (and ``meta``) may be a
function: it is then called in the writer thread, so even building the snapshot (serializing
the decisions, hashing the payload) stays off the render path. ``flush()`` waits for everything
submitted so far; a write error is logged (``ctxengine.store``, warning), set on its futures and
kept in ``errors``; it never reaches the render that submitted it (a session reports it in the
next render's ``report.faults``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, final

from ..errors import CtxEngineError, StoreError
from .base import LEAF, Leaf, SnapshotInfo, Store

__all__ = ("SnapshotWriter",)

log = logging.getLogger("ctxengine.store")


Content = Mapping[str, Any] | Callable[[], Mapping[str, Any]]
Meta = Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]] | None


@dataclass(slots=True)
class _Job:
    content: Content
    meta: Meta
    leaf_id: str | Leaf | None
    futures: list[Future[SnapshotInfo]] = field(default_factory=list)


@final
class SnapshotWriter:
    """Writes snapshots to ``store`` in the background (see the module docstring).

    Args:
        store: Any :class:`~ctxengine.Store`.
    """

    __slots__ = ("_busy", "_closed", "_cond", "_order", "_pending", "_thread", "errors", "store")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.errors: list[CtxEngineError] = []
        self._cond = threading.Condition()
        self._pending: dict[str, _Job] = {}
        self._order: list[str] = []
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ctxengine-snapshots", daemon=True)
        self._thread.start()

    def submit(
        self,
        session_id: str,
        content: Content,
        *,
        meta: Meta = None,
        leaf_id: str | Leaf | None = LEAF,
    ) -> Future[SnapshotInfo]:
        """Queue a snapshot; returns at once. The future resolves once it is durable.

        ``content`` may be a function building the content, ``meta`` a function of the built
        content; both then run in the writer thread.

        Raises:
            StoreError: the writer is closed.
        """
        future: Future[SnapshotInfo] = Future()
        with self._cond:
            if self._closed:
                raise StoreError("SnapshotWriter is closed")
            job = self._pending.get(session_id)
            if job is None:
                self._pending[session_id] = _Job(content, meta, leaf_id, [future])
                self._order.append(session_id)
            else:  # supersede the waiting one: same futures, newest content
                job.content, job.meta, job.leaf_id = content, meta, leaf_id
                job.futures.append(future)
            self._cond.notify_all()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._order and not self._closed:
                    self._cond.wait()
                if not self._order:
                    return
                session_id = self._order.pop(0)
                job = self._pending.pop(session_id)
                self._busy = True
            try:
                content = job.content() if callable(job.content) else job.content
                meta = job.meta(content) if callable(job.meta) else job.meta
                info = self.store.write_snapshot(
                    session_id, content, meta=meta, leaf_id=job.leaf_id
                )
            except BaseException as exc:  # a store error, or a bug: report, keep the thread alive
                err = (
                    exc
                    if isinstance(exc, CtxEngineError)
                    else StoreError(f"snapshot write failed: {exc!r}")
                )
                self.errors.append(err)
                log.warning(
                    "ctxengine store: snapshot of session %r not written: %s", session_id, err
                )
                for f in job.futures:
                    f.set_exception(err)
            else:
                for f in job.futures:
                    f.set_result(info)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def pending(self) -> int:
        """Snapshots queued or being written."""
        with self._cond:
            return len(self._order) + (1 if self._busy else 0)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._order and not self._busy, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Write what is queued, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
