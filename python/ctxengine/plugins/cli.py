"""``ctxengine plugins list [--plugins DIR] [--json]``: what plugins exist and in what state."""

from __future__ import annotations

import json
from typing import Any

from ..collect.protocol import hooks_of
from ..collect.registry import PluginEntry, Registry

__all__ = ("collect_plugin_rows", "plugins_list")


def _builtin_rows() -> list[dict[str, Any]]:
    from ..builtins import BUILTINS

    rows = []
    for name, cls in BUILTINS.items():
        doc = (cls.__doc__ or "").strip().splitlines()
        rows.append(
            {
                "name": name,
                "version": getattr(cls, "version", ""),
                "priority": _default_priority(cls),
                "source": "builtin",
                "location": cls.__module__,
                "state": "available",
                "reason": "built-in; register it to use it",
                "dangerous": bool(getattr(cls, "dangerous", False)),
                "description": doc[0] if doc else "",
                "hooks": list(hooks_of(cls)),
            }
        )
    return rows


def _default_priority(cls: type) -> int | None:
    import inspect

    param = inspect.signature(cls).parameters.get("priority")
    if param is not None and isinstance(param.default, int):
        return param.default
    value = getattr(cls, "priority", None)
    return value if isinstance(value, int) else None


def collect_plugin_rows(
    plugins_dir: str | None, *, allow_dangerous: bool = False
) -> list[dict[str, Any]]:
    """Rows for every built-in, entry-point plugin and plugin folder (registered or refused).

    Raises:
        PluginError: ``plugins_dir`` is not a folder.
    """
    registry = Registry(allow_dangerous=allow_dangerous)
    registry.load_entry_points(strict=False)
    if plugins_dir is not None:
        registry.load_plugins(plugins_dir, strict=False)
    entries: list[PluginEntry] = registry.entries() + registry.refused
    return _builtin_rows() + [e.to_dict() for e in entries]


def plugins_list(
    plugins_dir: str | None, as_json: bool, console: Any = None, *, allow_dangerous: bool = False
) -> int:
    """Print each plugin: name, version, priority, source, state (+ reason) and hooks.

    Args:
        plugins_dir: Folder of plugin folders to load, or ``None``.
        as_json: Print a JSON array instead of a table.
        console: A ``rich.console.Console`` (default: a new one on stdout).
        allow_dangerous: List dangerous plugins as they would load with the engine's consent.

    Returns:
        Exit status: 0, or 1 when a plugin was refused or ``plugins_dir`` is not a folder.
    """
    from rich.console import Console
    from rich.table import Table

    from ..errors import PluginError

    console = console or Console()
    try:
        rows = collect_plugin_rows(plugins_dir, allow_dangerous=allow_dangerous)
    except PluginError as exc:
        console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        return 1
    refused = any(r["state"] == "refused" for r in rows)
    if as_json:
        console.print_json(json.dumps(rows))
        return 1 if refused else 0
    table = Table(title="ctxengine plugins")
    for column in ("plugin", "version", "priority", "source", "state", "hooks"):
        table.add_column(column, overflow="fold")
    colors = {"enabled": "green", "disabled": "yellow", "refused": "red", "available": "cyan"}
    for r in rows:
        state = f"[{colors.get(r['state'], 'white')}]{r['state']}[/]"
        if r["state"] in ("refused", "disabled") and r["reason"]:
            state += f"\n{_escape(r['reason'])}"
        name = _escape(r["name"]) + (" [magenta](dangerous)[/]" if r["dangerous"] else "")
        table.add_row(
            name,
            _escape(str(r["version"])),
            "" if r["priority"] is None else str(r["priority"]),
            r["source"],
            state,
            _escape(", ".join(r["hooks"])),
        )
    console.print(table)
    return 1 if refused else 0


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
