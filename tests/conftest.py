"""Shared test setup: hypothesis settings, a clean token-count cache, a real Redis server.

``CTXENGINE_REDIS_URL`` (set by ``.ci/run``) points at a running server; without it a
``redis-server`` binary is started on a free loopback port for the test session.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings

import ctxengine

# No per-example deadline: timing belongs in benches/, and a loaded 2-core machine must not turn
# a slow example into a failure.
settings.register_profile("ctxengine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ctxengine")


@pytest.fixture
def token_cache() -> Iterator[None]:
    """An empty process-wide token cache, restored to its previous capacity afterwards."""
    capacity = ctxengine.cache_info()["capacity"]
    ctxengine.clear_cache()
    yield
    ctxengine.set_cache_capacity(capacity)
    ctxengine.clear_cache()


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio."""
    return "asyncio"


@pytest.fixture
def child_env() -> dict[str, str]:
    """The environment for a child Python that must import the same ``ctxengine`` as this run:
    the installed package in CI, the source tree (with its built extension) in development."""
    here = str(Path(ctxengine.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": here}


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
