"""Waking a task of any event loop from any thread, and an async lock built on it.

``anyio.Lock``, ``anyio.Event`` and ``asyncio.Lock`` belong to the event loop that waits on
them: set or released from another thread, they wake the waiter with a call that is not
thread-safe (``loop.call_soon``), which queues the wake-up without waking the loop. A loop asleep
in ``select()`` with nothing else to do never runs it, and the waiter hangs. An engine is shared
by sessions on several loops (each :class:`~ctxengine.sync.SyncSession` has its own, and threads
may each run ``asyncio.run``), so what it shares between sessions uses these instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from types import TracebackType

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = ("CrossLoopLock", "notifier")


def notifier(event: anyio.Event) -> Callable[[], bool]:
    """A callable any thread may call, without blocking, to set ``event`` on the current loop.

    It returns False when the wake-up cannot be delivered (the waiter's loop is closed: nobody
    waits any more).
    """
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # another anyio backend
        loop = None
    if loop is not None:
        running = loop

        def notify() -> bool:
            try:
                running.call_soon_threadsafe(event.set)
            except RuntimeError:  # the waiter's loop closed
                return False
            return True

        return notify
    token = anyio.lowlevel.current_token()

    def deliver() -> None:
        with contextlib.suppress(BaseException):
            anyio.from_thread.run_sync(event.set, token=token)

    def start() -> bool:
        threading.Thread(target=deliver, daemon=True).start()
        return True

    return start


class _Waiter:
    """A task waiting for a :class:`CrossLoopLock`: how to wake it, and whether it was given
    the lock."""

    __slots__ = ("granted", "wake")

    def __init__(self, wake: Callable[[], bool]) -> None:
        self.wake = wake
        self.granted = False


class CrossLoopLock:
    """An async lock shared by tasks of any event loops, on any threads (``async with lock``).

    The state is guarded by a thread lock; ``release`` hands the lock to the longest waiting
    task and wakes it through its own loop (:func:`notifier`). A waiter cancelled after the
    lock was handed to it passes the lock on; one whose loop closed is skipped.
    """

    __slots__ = ("_held", "_mutex", "_waiters")

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_Waiter] = deque()

    def locked(self) -> bool:
        """Whether a task holds the lock."""
        return self._held

    async def acquire(self) -> None:
        """Wait until the lock is free, then hold it."""
        with self._mutex:
            if not self._held:
                self._held = True
                return
            event = anyio.Event()
            waiter = _Waiter(notifier(event))
            self._waiters.append(waiter)
        try:
            await event.wait()
        except BaseException:
            with self._mutex:
                granted = waiter.granted
                if not granted and waiter in self._waiters:
                    self._waiters.remove(waiter)
            if granted:  # the lock was handed over as the cancellation came: pass it on
                self.release()
            raise

    def release(self) -> None:
        """Hand the lock to the longest waiting task, or free it."""
        with self._mutex:
            while self._waiters:
                waiter = self._waiters.popleft()
                if waiter.wake():  # schedules the wake-up, never blocks
                    waiter.granted = True
                    return
            self._held = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
