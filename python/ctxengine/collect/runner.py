"""Where plugin code runs: off the render's event loop, so the render can always walk away.

Every plugin call goes through :meth:`PluginRunner.call`:

- an ``async`` hook runs on the plugin's own event loop, in a daemon thread created on the
  plugin's first async call and kept for the plugin's lifetime (so a client it creates in
  ``setup`` stays usable in ``collect``). A hook that blocks that loop (``time.sleep`` in async
  code) or ignores cancellation stalls only its own thread;
- a sync hook runs in a fresh daemon thread per call. A hung one cannot keep the host process
  from exiting (anyio's worker threads are not daemons).

The caller waits for the result under the timeout. On timeout an async hook is cancelled and
given a short grace period; if its loop did not even run the cancellation, the hook is reported
as ``blocked`` (it holds its thread: a blocking call in async code) and the loop is retired. A
call that is still running after the timeout is *abandoned*: the render goes on, and
:attr:`PluginRunner.busy` stays true until the call ends, so the dispatcher skips the plugin
instead of piling up threads.

Cost: two thread hops per call (a dispatch to 3 trivial async plugins measured 2.6-3.3 ms
against 1.4 ms on the render's loop, on a loaded 2-core machine) and one idle thread per async
plugin. The
price of isolation is that a plugin's coroutines do not run on the application's loop: an
object bound to that loop (a client created by the app, an ``asyncio.Lock`` shared with it)
must not be used from a plugin; create such objects in the plugin (``setup`` runs on its loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

import anyio

from .faults import CallResult, describe_exc
from .wake import notifier

__all__ = ("PluginRunner",)


class _Call:
    """State shared between the caller's loop and the thread running one plugin call."""

    __slots__ = ("cancel_seen", "done", "error", "notify", "task", "value")

    def __init__(self, notify: Callable[[], object]) -> None:
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[Any] | None = None
        self.cancel_seen = threading.Event()
        self.notify = notify

    def finish(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error, self.done = value, error, True
        self.notify()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
    finally:
        loop.close()


def _stop(loop: asyncio.AbstractEventLoop) -> None:
    if not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(loop.stop)


async def _drive(fn: Callable[[Any], Any], arg: Any, call: _Call) -> None:
    try:
        result = fn(arg)
        if inspect.isawaitable(result):
            result = await result
    except BaseException as exc:
        call.finish(error=exc)
    else:
        call.finish(result)


class PluginRunner:
    """Runs the calls of one plugin off the caller's loop; see the module docstring.

    Args:
        name: Plugin name (names the threads).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._abandoned: list[_Call] = []

    @property
    def busy(self) -> bool:
        """Whether an abandoned call of this plugin is still running."""
        self._abandoned = [c for c in self._abandoned if not c.done]
        return bool(self._abandoned)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None or not thread.is_alive() or loop.is_closed():
                # made in an empty context: a loop keeps the context it was made in (its
                # wake-up reader's), and the caller's holds the session's event bus, through
                # which the registry and this runner stayed reachable: its finalizer never
                # stopped this loop, a thread and three descriptors left per engine
                loop = contextvars.Context().run(asyncio.new_event_loop)
                thread = threading.Thread(
                    target=_serve, args=(loop,), name=f"ctxengine plugin {self.name}", daemon=True
                )
                thread.start()
                weakref.finalize(self, _stop, loop)
                self._loop, self._thread = loop, thread
            return loop

    def retire(self) -> None:
        """Stop the plugin's event loop (a blocked one stops when it unblocks); the next async
        call starts a new one."""
        with self._lock:
            loop, self._loop, self._thread = self._loop, None, None
        if loop is not None:
            _stop(loop)

    def _start_async(self, fn: Callable[[Any], Any], arg: Any, call: _Call) -> None:
        loop = self._event_loop()
        context = contextvars.copy_context()

        def start() -> None:
            call.task = context.run(loop.create_task, _drive(fn, arg, call))

        loop.call_soon_threadsafe(start)

    def _start_sync(self, fn: Callable[[Any], Any], arg: Any, call: _Call) -> None:
        context = contextvars.copy_context()

        def work() -> None:
            try:
                result = context.run(fn, arg)
                if inspect.isawaitable(result):  # a sync callable returning a coroutine
                    awaitable = result

                    async def wait() -> Any:
                        return await awaitable

                    result = asyncio.run_coroutine_threadsafe(wait(), self._event_loop()).result()
            except BaseException as exc:
                call.finish(error=exc)
            else:
                call.finish(result)

        thread = threading.Thread(target=work, name=f"ctxengine plugin {self.name}", daemon=True)
        thread.start()

    def _cancel(self, call: _Call) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def cancel() -> None:
            call.cancel_seen.set()
            if call.task is not None:
                call.task.cancel()

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(cancel)

    async def call(
        self, fn: Callable[[Any], Any], arg: Any, timeout: float | None, *, is_async: bool
    ) -> CallResult:
        """Run ``fn(arg)`` and wait for it at most ``timeout`` seconds (``None``: no limit).

        The caller's own cancellation propagates (the plugin's task is cancelled too).
        """
        event = anyio.Event()
        call = _Call(notifier(event))
        (self._start_async if is_async else self._start_sync)(fn, arg, call)
        try:
            with anyio.move_on_after(timeout):
                await event.wait()
        except BaseException:
            if is_async:
                self._cancel(call)
            raise
        if call.done:
            if call.error is not None:
                return CallResult(None, "raised", describe_exc(call.error))
            return CallResult(call.value)
        return await self._give_up(call, event, timeout or 0.0, is_async=is_async)

    async def _give_up(
        self, call: _Call, event: anyio.Event, timeout: float, *, is_async: bool
    ) -> CallResult:
        late = f"did not finish within {timeout:g} s"
        if not is_async:
            self._abandoned.append(call)
            return CallResult(None, "timeout", f"{late}; its thread was abandoned", True)
        self._cancel(call)
        with anyio.move_on_after(max(0.05, min(0.25, timeout / 4))):
            await event.wait()
        if call.done:
            return CallResult(None, "timeout", f"{late}; cancelled")
        self._abandoned.append(call)
        if not call.cancel_seen.is_set():  # its loop did not even run the cancellation
            self.retire()
            return CallResult(
                None,
                "blocked",
                f"{late} and blocked its event loop (a blocking call in async code, e.g. "
                "time.sleep); abandoned",
                True,
            )
        return CallResult(None, "timeout", f"{late} and ignored cancellation; abandoned", True)
