"""Store fixtures: one factory per store kind (the Redis server is ``redis_url`` of
tests/conftest.py: a real server, never a mock)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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
