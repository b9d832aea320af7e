"""Store fixtures: one factory per store kind (the Redis server is ``redis_url`` of
tests/conftest.py: a real server, never a mock), and private Redis servers for the tests that
kill, restart or misconfigure one (``redis_server``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from ctxengine.store import FileStore, InMemoryStore, Store


@pytest.fixture(params=["memory", "file", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """A factory of stores of one kind sharing one backing place (a directory, a key prefix),
    so a second store opened by a test sees what the first wrote, like a restarted worker."""
    kind = request.param
    opened: list[Store] = []
    memory = InMemoryStore()
    prefix = f"t{uuid.uuid4().hex[:10]}"

    def make() -> Store:
        if kind == "memory":
            return memory
        if kind == "file":
            store: Store = FileStore(tmp_path / "store")
        else:
            from ctxengine.store import RedisStore

            store = RedisStore(request.getfixturevalue("redis_url"), prefix=prefix)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    """A ``redis-server`` of one test's own, on a free loopback port, which the test may kill,
    restart, fill or turn into a replica (the shared server of ``redis_url`` is never touched).

    ``args`` are its configuration (``--requirepass``, ``--maxmemory``...); with
    ``persist=True`` it keeps an append-only file in ``dir``, fsynced before each reply
    (``appendfsync always``), so a restart finds everything it acknowledged."""

    dir: Path
    args: tuple[str, ...] = ()
    persist: bool = False
    port: int = field(default_factory=lambda: _free_port())
    proc: subprocess.Popen[bytes] | None = None
    clients: list[redis.Redis] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, password: str | None = None) -> redis.Redis:
        """A client of the test's own (closed with the server)."""
        self.clients.append(redis.Redis(host="127.0.0.1", port=self.port, password=password))
        return self.clients[-1]

    def start(self) -> None:
        """Start it (again: the same port and folder), and wait until it answers."""
        if self.proc is not None:  # stopped, or stopping: a kill in another thread may be
            # reaping it (``poll()`` answers "running" while that thread holds the wait lock)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                running = f"redis-server on port {self.port} is already running"
                raise AssertionError(running) from None
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (apt-get install redis-server)"
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else []
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + (persistence or ["--appendonly", "no"])
            + ["--dir", str(self.dir), *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        with socket.socket() as probe:  # a raw PING: answered (even NOAUTH) once it listens
            while True:
                assert self.proc.poll() is None, f"redis-server {self.args} exited at start"
                try:
                    probe.connect(("127.0.0.1", self.port))
                    break
                except OSError:
                    assert time.monotonic() < deadline, "redis-server did not listen within 10 s"
                    time.sleep(0.02)
            probe.sendall(b"PING\r\n")
            assert probe.recv(64)
        while self.persist and self._loading():
            assert time.monotonic() < deadline, "redis-server did not load its data within 10 s"
            time.sleep(0.02)

    def _loading(self) -> bool:
        with redis.Redis(host="127.0.0.1", port=self.port) as client:
            try:
                client.ping()
            except redis.BusyLoadingError:
                return True
        return False

    def kill(self) -> None:
        """SIGKILL, as a crashed host or an OOM killer stops it: nothing is flushed."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """A factory of private Redis servers: ``redis_server("--maxmemory", "1mb",
    persist=True)`` starts one; each is killed when the test ends."""
    made: list[RedisServer] = []

    def make(*args: str, persist: bool = False) -> RedisServer:
        folder = tmp_path / f"redis{len(made)}"
        folder.mkdir()
        server = RedisServer(folder, args, persist)
        made.append(server)
        server.start()
        return server

    yield make
    for server in made:
        server.stop()
