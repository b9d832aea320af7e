"""Shared fixtures for plugin tests: anyio backend, plugin-folder factory, tiny providers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from plugin_helpers import PLUGIN_CODE, manifest_for


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_plugin(tmp_path: Path) -> Callable[..., Path]:
    """Create ``tmp_path/plugins/<folder>`` with a manifest and an entry file that leaves a
    marker file when imported. ``manifest`` may be a dict or raw text; ``...`` drops a key."""
    root = tmp_path / "plugins"
    root.mkdir()

    def make(
        plugin_name: str,
        *,
        folder: str | None = None,
        manifest: dict[str, Any] | str | None = None,
        code: str | None = None,
        **overrides: Any,
    ) -> Path:
        path = root / (folder or plugin_name)
        path.mkdir()
        if manifest is None:
            manifest = manifest_for(plugin_name, **overrides)
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (path / "manifest.json").write_text(text, encoding="utf-8")
        slug = plugin_name.replace("-", "_").replace(".", "_")
        body = code if code is not None else PLUGIN_CODE.format(name=plugin_name, slug=slug)
        (path / "plugin.py").write_text(body, encoding="utf-8")
        return path

    return make
