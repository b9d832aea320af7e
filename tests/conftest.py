"""Shared test setup: hypothesis settings and a clean token-count cache."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
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
