"""Store fixtures: a real Redis server (never a mock) and one factory per store kind.

``CTXENGINE_REDIS_URL`` (set by ``.ci/run``) points at a running server; without it a
``redis-server`` binary is started on a free loopback port for the test session.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from ctxengine.store import FileStore, MemoryStore, Store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a live Redis server for this test session."""
    url = os.environ.get("CTXENGINE_REDIS_URL")
    if url:
        redis.Redis.from_url(url).ping()
        yield url
        return
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (apt-get install redis-server)"
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None, "redis-server exited at start"
            assert time.monotonic() < deadline, "redis-server did not answer within 10 s"
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(params=["memory", "file", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """A factory of stores of one kind sharing one backing place (a directory, a key prefix),
    so a second store opened by a test sees what the first wrote, like a restarted worker."""
    kind = request.param
    opened: list[Store] = []
    memory = MemoryStore()
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
