"""Blocking versions of the async session API, for scripts and sync frameworks.

``engine.session_sync(id)`` gives a :class:`SyncSession`: the same calls as
:class:`~ctxengine.Session` without ``await``. Each session owns one event loop; a call runs it
on the calling thread (no hop to another thread), or on a helper thread when the caller is
itself inside a running event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

from .compaction import CompactionResult
from .errors import CtxEngineError
from .grain import ContextGrain
from .inject.turn import RenderedContext
from .store.base import SnapshotInfo
from .transcript import Message, ToolCall, Transcript

__all__ = ("LoopRunner", "SyncSession")

T = TypeVar("T")


class LoopRunner:
    """Runs coroutines to completion on one private event loop, from sync code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # held while the loop runs a call, and by close: a close from another thread waits for
        # the call to end (reentrant: a close from inside a call does not wait for itself)
        self._lock = threading.RLock()
        # A runner dropped without close() closes its loop (fit's runner of a thread that
        # ended): closing never runs the loop, so the thread collecting the runner may do it.
        self._closer = weakref.finalize(self, _close_loop, self.loop)

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)`` on the private loop and return its result.

        Raises:
            CtxEngineError: called from code the private loop is running (a plugin hook or a
                summarizer of this very session): that call would wait for itself forever.
        """
        calls = _RUNNING.get()
        if any(c.runner is self and not c.done for c in calls):
            raise CtxEngineError(
                f"{getattr(fn, '__qualname__', fn)!s} was called through the sync session from "
                "code run by that session's own call (a plugin hook or summarizer of this "
                "session, on its event loop or a thread of it, or of a session it called); "
                "that call would wait for itself forever. Await the async session instead"
            )
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            running = False
        else:
            running = True
        with self._lock:
            if self.loop.is_closed():
                raise CtxEngineError(
                    f"{getattr(fn, '__qualname__', fn)!s} was called after its sync session "
                    "(or fit's runner) closed; open a new one"
                )
            if not running:
                return self.loop.run_until_complete(_call(self, calls, fn, args, kwargs))
            # Called from async code: this thread's loop is busy, so ours runs on a helper.
            with ThreadPoolExecutor(1, thread_name_prefix="ctxengine-sync") as pool:
                job = pool.submit(
                    self.loop.run_until_complete, _call(self, calls, fn, args, kwargs)
                )
                return job.result()

    def close(self) -> None:
        """Close the loop (idempotent), once the call another thread runs on it ended."""
        with self._lock:
            if not self.loop.is_closed():
                with suppress(RuntimeError):  # closed from inside its own call: left running
                    self.loop.close()
        self._closer.detach()


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    if not loop.is_closed():
        with suppress(RuntimeError):  # running, on the thread that holds the runner
            loop.close()


@dataclass(eq=False, slots=True)
class _Call:
    """One call of a :class:`LoopRunner`, running until ``done``."""

    runner: LoopRunner
    done: bool = False


#: The runners' calls the code of this context runs inside (the calls of a plugin hook's
#: session, and of the sessions that called it): none may be called again from here until it
#: ended (the threads that code starts with the context copied, as sync hooks are, see them).
_RUNNING: ContextVar[frozenset[_Call]] = ContextVar("ctxengine_sync_running", default=frozenset())


async def _call(
    runner: LoopRunner,
    calls: frozenset[_Call],
    fn: Callable[..., Awaitable[T]],
    args: Any,
    kwargs: Any,
) -> T:
    """``await fn(*args, **kwargs)`` inside a new call of ``runner``, the ``calls`` of its
    caller's context still running (this task's own context: gone when it ends)."""
    call = _Call(runner)
    _RUNNING.set(calls | {call})
    try:
        return await fn(*args, **kwargs)
    finally:
        call.done = True  # a task a hook started outlives it: it may call the runner again


class AsyncSession(Protocol):
    """What :class:`SyncSession` drives: the async calls of :class:`ctxengine.Session`."""

    messages: list[Message]

    def transcript(self) -> Transcript: ...
    async def user_message(self, text: str) -> None: ...
    async def assistant_message(
        self, text: str = ..., tool_calls: Sequence[ToolCall] = ...
    ) -> None: ...
    async def tool_result(
        self, call_id: str, output: str, *, name: str | None = ..., is_error: bool = ...
    ) -> None: ...
    async def ingest(self, messages: Iterable[Any] | Transcript) -> None: ...
    def extend(self, messages: Iterable[Any] | Transcript) -> None: ...
    def add(self, grain: ContextGrain) -> None: ...
    def remove(self, node_id: str) -> bool: ...
    def end_task(self) -> None: ...
    async def render(self, provider: str = ..., **options: Any) -> RenderedContext: ...
    async def save(self) -> None: ...
    async def rebase(self) -> int: ...
    async def checkpoint(self, timeout: float | None = ...) -> SnapshotInfo | None: ...
    async def compact(self) -> CompactionResult: ...
    async def run(
        self,
        call_model: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        provider: str = ...,
        max_compactions: int = ...,
        shrink: float = ...,
        **options: Any,
    ) -> tuple[Any, RenderedContext]: ...


class SessionOpener(Protocol):
    """What :class:`SyncSession` needs of the engine: ``session(id)``."""

    def session(self, session_id: str) -> AbstractAsyncContextManager[Any]: ...


class SyncSession:
    """A :class:`~ctxengine.Session` driven from sync code; see :meth:`ContextEngine.session_sync`.

    Use it as a context manager (``with engine.session_sync("id") as s``), or call
    :meth:`open` / :meth:`close` for a session that outlives one block (e.g. an agent middleware).
    """

    def __init__(self, engine: SessionOpener, session_id: str) -> None:
        self.engine = engine
        self.session_id = session_id
        self._cm = engine.session(session_id)
        self._runner = LoopRunner()
        self._session: AsyncSession | None = None
        #: Held while the session opens or closes: threads making their first call at once
        #: open it once, and a close waits for an open under way.
        self._state_lock = threading.RLock()

    def open(self) -> SyncSession:
        """Start the session (``on_session_start``); returns ``self``.

        When opening fails (e.g. :class:`~ctxengine.SessionIdError` for an id the store cannot
        hold), the session's event loop is closed before the error propagates: a ``with``
        block never reaches ``__exit__`` then, and the sync session cannot be opened again.

        Raises:
            CtxEngineError: the session was closed (or failed to open before).
        """
        with self._state_lock:
            if self._runner.loop.is_closed():
                raise CtxEngineError(f"sync session {self.session_id!r} is closed")
            if self._session is None:
                try:
                    self._session = self._runner.run(self._cm.__aenter__)
                except BaseException:
                    self._runner.close()  # nothing else will: the caller got no open session
                    raise
        return self

    def close(self) -> None:
        """Close the session (``on_session_close``) and its loop; idempotent. A call another
        thread is making ends first; calls after it raise :class:`CtxEngineError`."""
        with self._state_lock:
            if self._session is not None:
                self._session = None
                self._runner.run(self._cm.__aexit__, None, None, None)
            self._runner.close()

    def __enter__(self) -> SyncSession:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def session(self) -> AsyncSession:
        """The underlying async session (opened on first use)."""
        session = self._session
        if session is None:
            self.open()
            session = self._session
        if session is None:  # closed by another thread meanwhile
            raise CtxEngineError(f"sync session {self.session_id!r} is closed")
        return session

    @property
    def messages(self) -> list[Message]:
        """The session's messages so far."""
        return self.session.messages

    def transcript(self) -> Transcript:
        """See :meth:`Session.transcript`."""
        return self.session.transcript()

    def user_message(self, text: str) -> None:
        """See :meth:`Session.user_message`."""
        self._runner.run(self.session.user_message, text)

    def assistant_message(self, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> None:
        """See :meth:`Session.assistant_message`."""
        self._runner.run(self.session.assistant_message, text, tool_calls)

    def tool_result(
        self, call_id: str, output: str, *, name: str | None = None, is_error: bool = False
    ) -> None:
        """See :meth:`Session.tool_result`."""
        self._runner.run(self.session.tool_result, call_id, output, name=name, is_error=is_error)

    def ingest(self, messages: Iterable[Any] | Transcript) -> None:
        """See :meth:`Session.ingest` (fires the events)."""
        self._runner.run(self.session.ingest, messages)

    def extend(self, messages: Iterable[Any] | Transcript) -> None:
        """See :meth:`Session.extend` (no events)."""
        self.session.extend(messages)

    def add(self, grain: ContextGrain) -> None:
        """See :meth:`Session.add`."""
        self.session.add(grain)

    def remove(self, node_id: str) -> bool:
        """See :meth:`Session.remove`."""
        return self.session.remove(node_id)

    def end_task(self) -> None:
        """See :meth:`Session.end_task`."""
        self.session.end_task()

    def render(self, provider: str = "openai", **options: Any) -> RenderedContext:
        """See :meth:`Session.render`."""
        return self._runner.run(self.session.render, provider, **options)

    def save(self) -> None:
        """See :meth:`Session.save`."""
        self._runner.run(self.session.save)

    def rebase(self) -> int:
        """See :meth:`Session.rebase`."""
        return self._runner.run(self.session.rebase)

    def checkpoint(self, timeout: float | None = None) -> SnapshotInfo | None:
        """See :meth:`Session.checkpoint`."""
        return self._runner.run(self.session.checkpoint, timeout)

    def compact(self) -> CompactionResult:
        """See :meth:`Session.compact`."""
        return self._runner.run(self.session.compact)

    def run(
        self,
        call_model: Callable[[dict[str, Any]], Any],
        *,
        provider: str = "openai",
        max_compactions: int = 3,
        shrink: float = 0.75,
        **options: Any,
    ) -> tuple[Any, RenderedContext]:
        """See :meth:`Session.run`: render, ``call_model(payload)``, recover from an overflow.

        ``call_model`` may be a plain function (a sync SDK client's ``create``) or return an
        awaitable; a plain one runs on the session's loop, which has nothing else to do then.
        """

        async def call(payload: dict[str, Any]) -> Any:
            answer = call_model(payload)
            return await answer if inspect.isawaitable(answer) else answer

        return self._runner.run(
            self.session.run,
            call,
            provider=provider,
            max_compactions=max_compactions,
            shrink=shrink,
            **options,
        )
