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
import json
import socket
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from ctxengine import Budget, ContextEngine, ContextGrain, RenderedContext, Session
from ctxengine.errors import ConfigError, ConfigTypeError, StoreError
from ctxengine.store import RedisStore
from ctxengine.store.codec import message_from_json
from ctxengine.transcript import Message, ToolCall

from .conftest import RedisServer

pytestmark = pytest.mark.anyio

BUDGET = 6000


class Relay:
    """A TCP relay between a store and its server that kills the server at a chosen command,
    the way a host dies (or a network drops) at the worst moment. ``arm(b"RPUSH", b"EXEC",
    then=server.kill)`` forwards the next transaction that pushes, waits for the server's reply
    to it (the transaction was applied, and with ``appendfsync always`` written to the
    append-only file before that reply), then kills the server and closes the client's
    connection without the reply; ``arm(b"SADD", then=server.kill)`` kills the server before
    the command reaches it. While the
    server is down, every connection is closed at once, as one to a dead host fails."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._trigger: tuple[tuple[bytes, ...], Callable[[], None]] | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.fired = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, *commands: bytes, then: Callable[[], None]) -> None:
        """Run ``then`` at the next request holding all of ``commands`` (``b"RPUSH",
        b"EXEC"``: an append's transaction, not the ``MULTI`` of a read)."""
        self.fired.clear()
        with self._lock:
            self._trigger = (commands, then)

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
            if self._trigger is None or any(
                b"\r\n" + command + b"\r\n" not in data for command in self._trigger[0]
            ):
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
        seen = b""  # a transaction's requests up to its EXEC (redis-py sends a value over
        # 6,000 bytes as a buffer of its own, so one transaction may take several reads)
        try:
            while data := client.recv(65536):
                seen += data
                action = self._take(seen)
                if action is None:
                    server.sendall(data)
                    if b"\r\nMULTI\r\n" not in seen or b"\r\nEXEC\r\n" in seen:
                        seen = b""
                    continue
                if b"\r\nEXEC\r\n" in data:
                    swallow.set()
                    server.sendall(data)
                    assert replied.wait(10), "the server did not answer the transaction"
                action()  # the kill reaps the server before ``fired`` says it is done
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


@pytest.fixture
def engine_on() -> Iterator[Callable[..., ContextEngine]]:
    """``engine_on(url, **store_options)``: an engine on a ``RedisStore`` of that URL (each
    closed, with its store, when the test ends)."""
    made: list[tuple[ContextEngine, RedisStore]] = []

    def make(url: str, **options: Any) -> ContextEngine:
        store = RedisStore(url, **options)
        made.append((ContextEngine("gpt-4o", Budget(total=BUDGET), store=store), store))
        return made[-1][0]

    yield make
    for engine, store in made:
        engine.close()
        store.close()


def _texts(url: str, session_id: str) -> list[str]:
    """The texts of the stored branch's messages, read by another store (a fresh process)."""
    store = RedisStore(url)
    try:
        branch = store.branch(session_id)
        return [message_from_json(e.data["message"]).text for e in branch if e.kind == "message"]
    finally:
        store.close()


async def _chat(s: Session, first: int, last: int) -> RenderedContext:
    """Turns ``first`` to ``last - 1`` (a question and an answer each), then a render."""
    for i in range(first, last):
        await s.user_message(f"question {i}: what does step {i} of the build do? " + "x" * 120)
        await s.assistant_message(f"answer {i}: it links module {i} " + "y" * 160)
    return await s.render()


async def _noted_chat(s: Session, turns: int) -> RenderedContext:
    """A standing note of the session, ``turns`` turns and a render, then a checkpoint."""
    s.add(ContextGrain("note.plan", content="Ship the build fix first.", lifespan="session"))
    out = await _chat(s, 0, turns)
    await s.checkpoint()
    return out


def _store_faults(out: RenderedContext) -> list[str]:
    return [f["message"] for f in out.report.faults if f["plugin"] == "store"]


def _cut_server(
    redis_server: Callable[..., RedisServer],
    relay: Callable[[RedisServer], Relay],
    engine_on: Callable[..., ContextEngine],
) -> tuple[RedisServer, Relay, ContextEngine]:
    """A server with an append-only file, a relay to it that can kill it, and an engine whose
    store goes through the relay."""
    server = redis_server(persist=True)
    cut = relay(server)
    return server, cut, engine_on(cut.url)


async def _assert_stored_once(
    engine_on: Callable[..., ContextEngine], url: str, sid: str, s: Session, payload: Any
) -> None:
    """Every message of ``s`` is stored once, in order, and a restore of ``sid`` from another
    process gives ``payload``."""
    held = [m.text for m in s.messages]
    assert _texts(url, sid) == held and len(set(held)) == len(held)
    back = await engine_on(url).restore(sid)
    assert back.payload == payload


async def test_a_server_killed_between_an_append_and_its_listing_loses_nothing(
    redis_server: Callable[..., RedisServer],
    relay: Callable[[RedisServer], Relay],
    engine_on: Callable[..., ContextEngine],
) -> None:
    """The append is acknowledged (its transaction's reply came back), then the server dies
    before the session is added to the ``sessions`` listing: the append is durable, so it
    returns; it used to raise redis-py's own ``ConnectionError`` out of ``user_message`` (not
    a ``StoreError``: no fault, no queued message, the caller's turn broken) though the
    message was stored."""
    server, cut, engine = _cut_server(redis_server, relay, engine_on)
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine.session(sid) as s:
        await _chat(s, 0, 5)
        await s.checkpoint()
        cut.arm(b"SADD", then=server.kill)
        await s.user_message("the question whose append is acknowledged before the server dies")
        assert cut.fired.wait(10) and s.unsaved == 0
        await s.render()  # its snapshot fails in the writer thread: the server is down
        await anyio.to_thread.run_sync(engine.flush)
        server.start()  # from its append-only file
        out = await _chat(s, 5, 7)
        said = _store_faults(out)  # the snapshot that failed, nothing else
        assert said and all(m.startswith("snapshot not written") for m in said), said
        assert s.unsaved == 0
        await s.checkpoint()
    await _assert_stored_once(engine_on, server.url, sid, s, out.payload)


async def test_an_append_applied_before_the_server_died_is_found_not_refused_nor_doubled(
    redis_server: Callable[..., RedisServer],
    relay: Callable[[RedisServer], Relay],
    engine_on: Callable[..., ContextEngine],
) -> None:
    """The server applies the append (and writes it to its append-only file), then dies before
    its reply reaches the store: the call fails, the message stays queued, and it is stored.
    At the next save the store's leaf was no longer the session's, so every save after the
    restart was refused as another writer's (the session never saved again, no snapshot), and
    ``rebase()`` would have stored the message twice. The next save now finds the failed
    one's messages after the session's leaf and goes on from them."""
    server, cut, engine = _cut_server(redis_server, relay, engine_on)
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine.session(sid) as s:
        await _chat(s, 0, 5)
        await s.checkpoint()
        cut.arm(b"RPUSH", b"EXEC", then=server.kill)
        with pytest.warns(RuntimeWarning, match="cannot append"):
            await s.user_message("the question the server stored just before it died")
        assert cut.fired.wait(10) and s.unsaved == 1
        server.start()  # from its append-only file: the message is there
        out = await _chat(s, 5, 7)  # it is found, and the new messages go after it
        said = _store_faults(out)  # the failure of the outage, no refusal after it
        assert len(said) == 1 and said[0].startswith("cannot append"), said
        assert s.unsaved == 0
        await s.checkpoint()
    await _assert_stored_once(engine_on, server.url, sid, s, out.payload)


async def test_a_rewrite_applied_before_the_server_died_is_found_not_refused_nor_doubled(
    redis_server: Callable[..., RedisServer],
    relay: Callable[[RedisServer], Relay],
    engine_on: Callable[..., ContextEngine],
) -> None:
    """The same for the rewrite of a truncation (``Session.run``'s overflow recovery), which
    also holds a queued request: applied, its reply lost. The session kept its leaf before
    the rewrite, so every save after the restart was refused as another writer's. The next
    save now finds the rewrite whole after its parent and goes on after it."""
    server, cut, engine = _cut_server(redis_server, relay, engine_on)
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine.session(sid) as s:
        await _chat(s, 0, 3)
        await s.assistant_message("reading the log", [ToolCall("big", "read", {"path": "big.log"})])
        await s.tool_result("big", "line\n" * 9000, name="read")
        await s.checkpoint()
        s.extend([Message.user("the request the rewrite holds")])
        cut.arm(b"RPUSH", b"EXEC", then=server.kill)
        with pytest.warns(RuntimeWarning, match="rewrite"):
            assert await s._truncate_results(BUDGET, [])
        assert cut.fired.wait(10) and s.unsaved == 1
        server.start()  # from its append-only file: the rewrite is there
        out = await _chat(s, 3, 5)
        assert [f["hook"] for f in out.report.faults if f["plugin"] == "store"] == ["rewrite"]
        assert s.unsaved == 0 and len(s.messages[-5].text) < 9000 * 5
        await s.checkpoint()
    await _assert_stored_once(engine_on, server.url, sid, s, out.payload)


async def _play(s: Session, engine: ContextEngine, at: Callable[[str], None]) -> RenderedContext:
    """One session's calls, compacting once; ``at(stage)`` is where a test kills or restarts
    its server: ``"between"`` renders, ``"snapshot"`` before a render whose snapshot (written
    in the writer thread) is to be cut, ``"append"`` before a message whose save is to be
    cut, ``"restart"`` after each of those."""
    await _noted_chat(s, 40)
    assert (await s.compact()).ok
    await _chat(s, 40, 42)
    await s.checkpoint()
    at("between")
    await _chat(s, 42, 43)
    await s.checkpoint()
    at("snapshot")
    await _chat(s, 43, 44)
    await anyio.to_thread.run_sync(engine.flush)
    at("restart")
    at("append")
    await s.user_message("the question saved as the server died")
    at("restart")
    await _chat(s, 44, 46)
    out = await s.render()
    await s.checkpoint()
    return out


async def test_a_session_whose_server_is_killed_three_ways_restores_as_if_never_interrupted(
    redis_server: Callable[..., RedisServer],
    relay: Callable[[RedisServer], Relay],
    engine_on: Callable[..., ContextEngine],
) -> None:
    """The server (with an append-only file) is killed between renders, while a render's
    snapshot is in flight, and while a message's append is in flight (both applied, their
    replies lost), and restarted each time. Every message is stored once, in order, and a
    restore from another process equals the same session played on a server never
    interrupted: the payload, and the compaction summary of the latest snapshot."""
    server, cut, engine = _cut_server(redis_server, relay, engine_on)
    twin, sid = f"t{uuid.uuid4().hex[:8]}", f"s{uuid.uuid4().hex[:8]}"
    quiet = engine_on(server.url)
    async with quiet.session(twin) as s:
        expected = await _play(s, quiet, lambda stage: None)

    def at(stage: str) -> None:
        if stage == "between":
            server.kill()
            server.start()
        elif stage == "snapshot":  # the snapshot's transaction: the only one with an SADD
            cut.arm(b"SADD", b"EXEC", then=server.kill)
        elif stage == "append":
            cut.arm(b"RPUSH", f"ctxengine:{{{sid}}}:log".encode(), b"EXEC", then=server.kill)
        else:
            assert cut.fired.wait(10), f"nothing was cut before the {stage}"
            server.start()

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        async with engine.session(sid) as s:
            out = await _play(s, engine, at)
    said = {str(w.message).split(":")[0] for w in warned}
    assert said == {"ctxengine store (append)"}, said  # the cut append, once; no refusal
    assert out.payload == expected.payload
    await _assert_stored_once(engine_on, server.url, sid, s, expected.payload)
    store = RedisStore(server.url)
    try:
        summaries = [store.load_snapshot(i) for i in (twin, sid)]
    finally:
        store.close()
    texts = [x.content["core_memory"].get("mem.summary") if x else None for x in summaries]
    assert texts[0] and texts[0] == texts[1]


async def test_a_server_restarted_empty_is_reported_as_such_and_rebase_stores_it_all_again(
    redis_server: Callable[..., RedisServer], engine_on: Callable[..., ContextEngine]
) -> None:
    """A server without persistence restarts empty under a session of 100 messages. Its saves
    are refused (the store must not take the session's new messages as the whole session),
    but the fault said the session "was appended to by another writer" and ``rebase()``
    replaced the session with what the store holds, nothing: the 100 messages were dropped
    from the only place that still had them. The fault now says the store lost the session,
    and ``rebase()`` writes every message of it again."""
    server = redis_server()
    engine = engine_on(server.url)
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine.session(sid) as s:
        await _noted_chat(s, 50)
        server.kill()
        server.start()  # empty
        with pytest.warns(RuntimeWarning, match="no longer holds session"):
            out = await _chat(s, 50, 51)
        said = _store_faults(out)
        assert said and all(
            f"the store no longer holds session {sid!r}" in m and "100 messages" in m for m in said
        ), said
        assert len(s.messages) == 102 and s.unsaved == 2
        assert await s.rebase() == 102
        assert s.unsaved == 0 and len(s.messages) == 102
        out = await s.render()
        assert _store_faults(out) == []
        await s.checkpoint()
    assert _texts(server.url, sid) == [m.text for m in s.messages]
    back = await engine_on(server.url).restore(sid)
    assert back.payload == out.payload


# -- refusals: each a StoreError naming the URL (never its password) and what was expected ----

PASSWORD = "s3cret-Pw-7f1"


@pytest.mark.parametrize("path", ["sessions", "-1", "0/1"])
def test_a_database_that_is_not_a_number_is_refused_when_the_store_opens(path: str) -> None:
    """``redis://host/sessions`` was taken as database 0 (redis-py drops a path it cannot
    read as a number), so the store wrote where no one expected; ``/-1`` was refused by the
    server at the first command only."""
    url = f"redis://:{PASSWORD}@127.0.0.1:6379/{path}"
    with pytest.raises(StoreError) as got:
        RedisStore(url)
    said = str(got.value)
    assert f"the database is {path!r}" in said and "expected" in said, said
    assert PASSWORD not in said and "redis://:***@127.0.0.1:6379/" in said


@pytest.mark.parametrize(
    ("timeout", "error"),
    [
        ("5", ConfigTypeError),
        (True, ConfigTypeError),
        (0, ConfigError),
        (-1.0, ConfigError),
        (float("nan"), ConfigError),
        (float("inf"), ConfigError),
    ],
)
def test_a_timeout_that_is_not_seconds_is_refused(timeout: object, error: type) -> None:
    with pytest.raises(error, match=r"timeout is .*; expected a number of seconds above 0"):
        RedisStore("redis://127.0.0.1:6379/0", timeout=timeout)  # type: ignore[arg-type]


def _refusing(kind: str, make: Callable[..., RedisServer]) -> tuple[str, str]:
    """A server refusing the store the way ``kind`` says, the URL the store is given, and
    what the store's errors must say it expected."""
    if kind == "no password":
        return make("--requirepass", PASSWORD).url, "expected the URL to carry the password"
    if kind == "wrong password":
        server = make("--requirepass", PASSWORD)
        url = server.url.replace("redis://", "redis://:not-the-Pw-9c2@")
        return url, "expected the URL to carry the password"
    if kind == "database out of range":
        server = make("--databases", "4")
        return server.url[: -len("/0")] + "/7", "expected a number below its 'databases'"
    if kind == "read-only replica":
        primary = make()
        replica = make("--replicaof", "127.0.0.1", str(primary.port))
        return replica.url, "expected the URL of the primary"
    if kind == "min-replicas-to-write":
        server = make("--min-replicas-to-write", "1", "--min-replicas-max-lag", "10")
        return server.url, "expected enough replicas"
    if kind == "failed save to disk":
        # a save point set and its folder gone: the save fails, and with
        # stop-writes-on-bgsave-error (Redis's default) every write is refused with MISCONF
        folder = Path(tempfile.mkdtemp(prefix="rdb"))
        server = make(
            "--save", "3600 1", "--stop-writes-on-bgsave-error", "yes", "--dir", str(folder)
        )
        folder.rmdir()  # ``dir`` cannot be set while it runs (a protected setting)
        client = server.client()
        client.bgsave()
        with pytest.raises(redis.exceptions.ResponseError, match=r"^MISCONF"):
            for _ in range(500):  # until the failed save is reported
                client.set("probe", "1")
                time.sleep(0.01)
        return server.url, "expected its persistence to work again"
    assert kind == "out of memory"
    server = make("--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    _fill(server.client())
    return server.url, "expected room for the session"


def _fill(client: redis.Redis) -> None:
    """Write until the server refuses a write for want of memory."""
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(100_000):
            client.set(f"filler:{i}", "f" * 4096)


@pytest.mark.parametrize(
    "kind",
    [
        "no password",
        "wrong password",
        "database out of range",
        "read-only replica",
        "min-replicas-to-write",
        "out of memory",
        "failed save to disk",
    ],
)
async def test_a_server_refusing_the_store_is_a_fault_naming_the_url_and_what_was_expected(
    kind: str,
    redis_server: Callable[..., RedisServer],
    engine_on: Callable[..., ContextEngine],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's own texts ("DB index is out of range", "NOREPLICAS Not enough good
    replicas to write", "HELLO must be called with the client already authenticated...") say
    what it refused but neither the setting behind it nor what the store needed. Each is now a
    fault of the render (and ``save()`` raises a ``StoreError``) naming the URL, password
    masked, with what was expected; no redis-py exception escapes a call."""
    url, expected = _refusing(kind, redis_server)
    engine = engine_on(url)
    sid = f"s{uuid.uuid4().hex[:8]}"
    with pytest.warns(RuntimeWarning) as warned:
        async with engine.session(sid) as s:
            out = await _chat(s, 0, 2)
            with pytest.raises(StoreError) as raised:
                await s.save()
    said = _store_faults(out)
    assert said, out.report.faults
    shown = url.replace(PASSWORD, "***").replace("not-the-Pw-9c2", "***")
    for message in [*said, str(raised.value)]:
        assert f"on {shown}" in message and expected in message, message
    everything = [*said, str(raised.value), *(str(w.message) for w in warned), caplog.text]
    assert not any(PASSWORD in t or "not-the-Pw-9c2" in t for t in everything)
    assert s.unsaved == 4  # every message still queued, none lost


async def test_a_server_out_of_memory_still_serves_the_sessions_it_holds(
    redis_server: Callable[..., RedisServer], engine_on: Callable[..., ContextEngine]
) -> None:
    """At ``maxmemory`` with ``noeviction`` a server refuses every command queued in a
    ``MULTI``, reads included, and the store read a session in a ``MULTI`` (the log with its
    epoch): a worker opening a stored session got a ``resume`` fault and an empty session, so
    it rendered without any of the history it was there to serve. Reads now go without one:
    the session opens whole, and only its saves fail, naming the cause."""
    server = redis_server("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine_on(server.url).session(sid) as s:
        first = await _noted_chat(s, 10)
    _fill(server.client())
    with pytest.warns(RuntimeWarning, match="maxmemory"):
        async with engine_on(server.url).session(sid) as s:
            assert len(s.messages) == 20
            await s.user_message("asked while the server is full")
            out = await s.render()
    said = [f for f in out.report.faults if f["plugin"] == "store"]
    assert said and all(f["hook"] == "append" for f in said), said
    assert all("expected room for the session" in f["message"] for f in said), said
    back = await engine_on(server.url).restore(sid)  # the question was never stored
    assert back.payload == first.payload


# -- evictions ------------------------------------------------------------------------------


def _session_keys(client: redis.Redis, sid: str) -> set[str]:
    return {k.decode() for k in client.keys(f"ctxengine:{{{sid}}}:*")}


@pytest.mark.parametrize(
    "evicted", ["snaps", "snaps+snapid", "log+ids", "log", "latest-content", "epoch"]
)
async def test_a_key_an_eviction_took_is_noticed_never_restored_over_silently(
    evicted: str,
    redis_server: Callable[..., RedisServer],
    engine_on: Callable[..., ContextEngine],
) -> None:
    """An allkeys-* ``maxmemory-policy`` evicts any key, so a session can lose one of its
    keys and keep the others (which one the approximated LRU takes cannot be chosen: the key
    is deleted here, as the eviction does). Without its snapshot index a restore rebuilt the
    state from the messages and said nothing (the session's standing note gone); a stale
    epoch (evicted alone) made a store that had read the session read it as empty, and the
    live session's next save was refused. Now: the index lines are read from the id hash,
    a lost index or log is a fault naming the key, and an evicted epoch changes nothing."""
    server = redis_server()
    client = server.client()
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine_on(server.url).session(sid) as s:
        last = await _noted_chat(s, 10)
        latest = RedisStore(server.url).snapshots(sid)[-1]
        names = {"latest-content": f"obj:{latest.hash}"}
        gone = [f"ctxengine:{{{sid}}}:{names.get(n, n)}" for n in evicted.split("+")]
        assert set(gone) <= _session_keys(client, sid)
        client.delete(*gone)
        back = await engine_on(server.url).restore(sid)  # another worker
        said = _store_faults(back)
        if evicted == "epoch":
            assert said == [] and back.payload == last.payload
        elif evicted == "log+ids":  # nothing left names the log: the snapshot's leaf is lost
            assert any("which the transcript no longer holds" in m for m in said), said
        else:
            assert any(gone[0] in m for m in said), said
        if evicted == "snaps":  # its lines were still in the id hash: the same state
            assert back.payload == last.payload
        if evicted.startswith("log"):
            with pytest.warns(RuntimeWarning, match="no longer holds session"):
                out = await _chat(s, 10, 11)
            assert any("no longer holds session" in m for m in _store_faults(out))
            assert await s.rebase() == 22
            out = await s.render()  # its snapshot: the first of the stored session again
        else:  # the live session goes on
            out = await _chat(s, 10, 11)
            assert _store_faults(out) == []
        await s.checkpoint()
    again = await engine_on(server.url).restore(sid)
    assert again.payload == out.payload


async def test_a_session_under_real_evictions_restores_the_same_or_says_what_it_lost(
    redis_server: Callable[..., RedisServer], engine_on: Callable[..., ContextEngine]
) -> None:
    """allkeys-lru on a real server: filler keys push a stored session's keys out a few at a
    time (the oldest first: early snapshot contents, then the rest), and after each round a
    restore from another worker gives the last render, or a fault says what is missing, or
    it refuses (the store holds nothing of the session): never another state in silence."""
    server = redis_server(
        "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", "10"
    )
    client = server.client()
    sid = f"s{uuid.uuid4().hex[:8]}"
    async with engine_on(server.url).session(sid) as s:
        last = await _noted_chat(s, 12)
    held = _session_keys(client, sid)
    rounds = 0
    for i in range(200_000):
        client.set(f"filler:{i}", "f" * 128)
        if client.exists(*held) == len(held):
            continue
        held = {k for k in held if client.exists(k)}
        rounds += 1
        try:
            back = await engine_on(server.url).restore(sid)
        except StoreError as exc:
            assert f"holds no session {sid!r}" in str(exc)
            break
        index = {f"ctxengine:{{{sid}}}:{k}" for k in ("snaps", "snapid", "objs")}
        if f"ctxengine:{{{sid}}}:log" in held and not held & index:
            # no key that lists the snapshots is left, and the log holds messages only
            # (docs/store.md, "Evictions"): the state is rebuilt from the messages, all there
            sent = json.dumps(back.payload)
            assert all(f"question {i}: " in sent for i in range(12)), sent[:300]
            continue
        assert back.payload == last.payload or _store_faults(back), sorted(held)
        if not held:
            break
    # the session was evicted, in as many steps as the server's sampling made (one filler key
    # may take several of its keys at once), each step restored and checked above
    assert rounds >= 1


# -- latency --------------------------------------------------------------------------------


async def test_a_server_that_stalls_writes_holds_a_save_for_one_timeout(
    redis_server: Callable[..., RedisServer], engine_on: Callable[..., ContextEngine]
) -> None:
    """``CLIENT PAUSE ... WRITE`` (what a failover or a stuck fsync does to writers): reads
    are answered, the ``EXEC`` waits. redis-py reports a connection that times out while a key
    is watched as a ``WatchError``, which the store took for a lost race and ran again, up to
    1,000 times, each waiting for the timeout: a render waited as long as the pause lasted. A
    timed-out save is now a fault at once: one attempt (one ``WATCH``) per save."""
    server = redis_server()
    engine = engine_on(server.url, timeout=0.5)
    sid = f"s{uuid.uuid4().hex[:8]}"
    control = server.client()
    async with engine.session(sid) as s:
        await _chat(s, 0, 2)
        await s.checkpoint()
        control.config_resetstat()
        control.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
        try:
            with pytest.warns(RuntimeWarning, match="did not answer within 0.5 s"):
                await s.user_message("asked while the server holds every write")
                out = await s.render()
            watches = control.info("commandstats")["cmdstat_watch"]["calls"]
        finally:
            control.execute_command("CLIENT", "UNPAUSE")
        said = _store_faults(out)
        assert len(said) == 2, said  # the message's save, then the render's
        assert all("did not answer within 0.5 s; expected an answer" in m for m in said), said
        assert watches == 2 and s.unsaved == 1
        out = await s.render()  # the server takes writes again: the message goes first
        assert _store_faults(out) == [] and s.unsaved == 0
        await s.checkpoint()
    assert _texts(server.url, sid) == [m.text for m in s.messages]
    back = await engine_on(server.url).restore(sid)
    assert back.payload == out.payload
