"""Plugins through the real engine: a broken plugin never breaks a render, faults are reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from plugin_helpers import Simple

from ctxengine import ContextEngine
from ctxengine.builtins import EnvInfoProvider, ToolResultCompressor
from ctxengine.grain import ContextGrain
from ctxengine.transcript import ToolCall

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plugins"
pytestmark = pytest.mark.anyio


class Broken(Simple):
    async def collect(self, scene: Any) -> list[ContextGrain]:
        raise RuntimeError("database down")


class Stuck(Simple):
    async def collect(self, scene: Any) -> list[ContextGrain]:
        await anyio.sleep(30)
        return []


class Junk(Simple):
    async def collect(self, scene: Any) -> Any:
        return "not grains"


async def test_render_survives_broken_plugins_and_reports_them() -> None:
    engine = ContextEngine(
        "gpt-4o",
        4000,
        plugins=[
            EnvInfoProvider(),
            ToolResultCompressor(),
            Broken("broken"),
            Stuck("stuck"),
            Junk("junk"),
        ],
        plugin_timeout=0.2,
    )
    engine.load_plugins(EXAMPLES)
    async with engine.session("s1") as session:
        await session.user_message("Please read the log")
        await session.assistant_message("", [ToolCall("c1", "read_file", {"path": "app.log"})])
        await session.tool_result("c1", "log line\n" * 2000 + "FATAL: disk full")
        rendered = await session.render()
    nodes = [g.node_id for g in rendered.tree]
    assert "sys.env" in nodes and "sys.workspace_rules" in nodes
    faults = {(f["plugin"], f["kind"]) for f in rendered.report.faults}
    assert {("broken", "raised"), ("stuck", "timeout"), ("junk", "invalid")} <= faults
    tool_text = str(rendered.payload)
    assert "FATAL: disk full" in tool_text and "omitted" in tool_text
    assert rendered.tokens <= 4000


class Lifetime(Simple):
    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("task.lifetime", content="alive")]


def test_a_dropped_engine_stops_its_plugins_loop() -> None:
    """An async plugin runs on an event loop in a thread of its own, stopped when the engine is
    collected. That loop was made in the caller's context, which holds the session's event bus,
    and a loop keeps the context it was made in: through the bus the registry and the plugin's
    runner stayed reachable, its finalizer never ran, and each engine a server made and dropped
    left a thread and three file descriptors behind (a test run reached the 1,024 descriptors
    ``select`` takes). A sync test: no loop of the test's own is alive around the engines."""
    import gc
    import threading
    import weakref

    name = "ctxengine plugin lifetime"
    engines: list[weakref.ref[ContextEngine]] = []

    async def once() -> None:
        engine = ContextEngine("gpt-4o", 4000, plugins=[Lifetime("lifetime")])
        engines.append(weakref.ref(engine))
        async with engine.session("s") as session:
            await session.user_message("hello")
            out = await session.render()
        assert "alive" in str(out.payload)

    for _ in range(4):
        anyio.run(once)
    gc.collect()
    assert [ref() for ref in engines] == [None] * 4  # every engine was collected
    for thread in [t for t in threading.enumerate() if t.name == name]:
        thread.join(timeout=10)  # its loop was told to stop
    # none per engine is left: before, all four were (the last one's runner can still be held
    # by the frames of what ran it, depending on the tests run before this one)
    assert len([t for t in threading.enumerate() if t.name == name]) <= 1


async def test_an_engine_calls_its_own_plugins_not_the_default_registrys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/plugins.md: each engine has its own registry; the module-level default one is a
    registry apart (the page said registering there at import time registered with the
    engine, and such a plugin was never called)."""
    import ctxengine.collect.registry as registry_module

    monkeypatch.setattr(registry_module, "default_registry", registry_module.Registry())
    registry_module.register(Simple("module_level"))
    for engine, called in (
        (ContextEngine("gpt-4o", 2_000), False),
        (ContextEngine("gpt-4o", 2_000, plugins=[Simple("module_level")]), True),
    ):
        async with engine.session("s") as s:
            await s.user_message("hi")
            out = await s.render()
        assert any(g.node_id == "task.module_level.0" for g in out.report) is called
