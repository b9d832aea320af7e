"""Helpers shared by plugin tests (imported as a plain module)."""

from __future__ import annotations

from typing import Any

from ctxengine.grain import ContextGrain

MARKER = "IMPORTED"

PLUGIN_CODE = """
from pathlib import Path
Path(__file__).with_name("IMPORTED").write_text("imported")

from ctxengine.grain import ContextGrain


class Plugin:
    name = "{name}"
    version = "1.0.0"
    priority = 50
    enabled = True

    async def collect(self, scene):
        return [ContextGrain("task.{slug}", content="hello from {name}")]
"""


def manifest_for(plugin_name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": plugin_name,
        "version": "1.0.0",
        "entry": "plugin.py:Plugin",
        "priority": 50,
        "enabled": True,
        "dependencies": ["packaging>=20"],
        "description": f"test plugin {plugin_name}",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not ...}


class Simple:
    """A minimal valid provider; behaviour configurable per test."""

    version = "1.0.0"
    enabled = True

    def __init__(self, name: str = "simple", priority: int = 50, grains: int = 1) -> None:
        self.name = name
        self.priority = priority
        self.grains = grains

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [
            ContextGrain(f"task.{self.name}.{i}", content=f"{self.name} {i}")
            for i in range(self.grains)
        ]
