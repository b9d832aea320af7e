"""Sessions on a Redis server that misbehaves the way production ones do: killed and restarted
(with and without its data), refusing writes (out of memory, a read-only replica, unmet
``min-replicas-to-write``, a password), evicting keys, stalling. Each test starts its own
``redis-server`` (the ``redis_server`` fixture): the shared one is never killed.

What the engine promises (docs/store.md, "Full disk, read-only folder..."): a store failure in
a render is a fault of the report and a ``RuntimeWarning``, never an exception; the session goes
on in memory with its messages queued; they go first, once and in order, at the next save that
works; and a restore from another process gives the last render.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine, RenderedContext, Session
from ctxengine.store import RedisStore
from ctxengine.store.codec import message_from_json

from .conftest import RedisServer

pytestmark = pytest.mark.anyio

BUDGET = 6000


class Relay:
    """A TCP relay between a store and its server that kills the server at a chosen command,
    the way a host dies (or a network drops) at the worst moment. ``arm(b"EXEC", server.kill)``
    forwards the next transaction, waits for the server's reply to it (the transaction was
    applied, and with ``appendfsync always`` written to the append-only file before that
    reply), then kills the server and closes the client's connection without the reply;
    ``arm(b"SADD", server.kill)`` kills the server before the command reaches it. While the
    server is down, every connection is closed at once, as one to a dead host fails."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._trigger: tuple[bytes, Callable[[], None]] | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.fired = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, command: bytes, then: Callable[[], None]) -> None:
        self.fired.clear()
        with self._lock:
            self._trigger = (command, then)

    def close(self) -> None:
        self._listener.close()
        for s in self._sockets:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:  # the server is down
                client.close()
                continue
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _take(self, data: bytes) -> Callable[[], None] | None:
        """The action armed for a command in ``data`` (it fires once)."""
        with self._lock:
            if self._trigger is None or b"\r\n" + self._trigger[0] + b"\r\n" not in data:
                return None
            action, self._trigger = self._trigger[1], None
            return action

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        swallow = threading.Event()  # the replies from here on are lost
        replied = threading.Event()  # the transaction's own reply came back

        def back() -> None:  # server -> client
            lost = b""
            try:
                while data := server.recv(65536):
                    if not swallow.is_set():
                        client.sendall(data)
                        continue
                    lost += data  # +OK (MULTI), +QUEUED..., then EXEC's array
                    if lost.startswith(b"*") or b"\r\n*" in lost:
                        replied.set()
            except OSError:
                pass
            with contextlib.suppress(OSError):  # the server is gone: so is the connection
                client.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=back, daemon=True).start()
        try:
            while data := client.recv(65536):
                action = self._take(data)
                if action is None:
                    server.sendall(data)
                    continue
                if b"\r\nEXEC\r\n" in data:
                    swallow.set()
                    server.sendall(data)
                    assert replied.wait(10), "the server did not answer the transaction"
                action()
                self.fired.set()
                break
        except OSError:
            pass
        client.close()
        server.close()


@pytest.fixture
def relay() -> Iterator[Callable[[RedisServer], Relay]]:
    made: list[Relay] = []

    def make(server: RedisServer) -> Relay:
        made.append(Relay(server.port))
        return made[-1]

    yield make
    for r in made:
        r.close()


def _engine(url: str, **options: Any) -> ContextEngine:
    return ContextEngine("gpt-4o", Budget(total=BUDGET), store=RedisStore(url, **options))


def _texts(url: str, session_id: str) -> list[str]:
    """The texts of the stored branch's messages, read by a store of another process's kind."""
    store = RedisStore(url)
    try:
        return [message_from_json(e.data["message"]).text for e in store.branch(session_id)]
    finally:
        store.close()


async def _chat(s: Session, first: int, last: int) -> RenderedContext:
    """Turns ``first`` to ``last - 1`` (a question and an answer each), then a render."""
    for i in range(first, last):
        await s.user_message(f"question {i}: what does step {i} of the build do? " + "x" * 120)
        await s.assistant_message(f"answer {i}: it links module {i} " + "y" * 160)
    return await s.render()


def _store_faults(out: RenderedContext) -> list[str]:
    return [f["message"] for f in out.report.faults if f["plugin"] == "store"]


async def test_a_server_killed_between_an_append_and_its_listing_loses_nothing(
    redis_server: Callable[..., RedisServer], relay: Callable[[RedisServer], Relay]
) -> None:
    """The append is acknowledged (its transaction's reply came back), then the server dies
    before the session is added to the ``sessions`` listing: the append is durable, so it
    returns; it used to raise redis-py's own ``ConnectionError`` out of ``user_message`` (not
    a ``StoreError``: no fault, no queued message, the caller's turn broken) though the
    message was stored."""
    server = redis_server(persist=True)
    cut = relay(server)
    engine = _engine(cut.url)
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine.session(sid) as s:
        await _chat(s, 0, 5)
        await s.checkpoint()
        cut.arm(b"SADD", server.kill)
        await s.user_message("the question whose append is acknowledged before the server dies")
        assert cut.fired.is_set() and s.unsaved == 0
        await s.render()  # its snapshot fails in the writer thread: the server is down
        await anyio.to_thread.run_sync(engine.flush)
        server.start()  # from its append-only file
        out = await _chat(s, 5, 7)
        said = _store_faults(out)  # the snapshot that failed, nothing else
        assert said and all(m.startswith("snapshot not written") for m in said), said
        assert s.unsaved == 0
        await s.checkpoint()
    engine.close()
    held = [m.text for m in s.messages]
    assert _texts(server.url, sid) == held and len(set(held)) == len(held)
    back = await _engine(server.url).restore(sid)
    assert back.payload == out.payload
