"""``ctxengine plugins list [--plugins DIR] [--json]``: what plugins exist and in what state."""

from __future__ import annotations

import json
from typing import Any

from ..collect.protocol import hooks_of
from ..collect.registry import PluginEntry, Registry

__all__ = ("add_to", "collect_plugin_rows", "plugins_list")


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
        Exit status: 0, or 1 when a plugin was refused (it is listed with the reason).

    Raises:
        PluginError: ``plugins_dir`` is not a folder.
    """
    from rich.console import Console

    rows = collect_plugin_rows(plugins_dir, allow_dangerous=allow_dangerous)
    refused = any(r["state"] == "refused" for r in rows)
    console = console or Console(highlight=False)
    if as_json:
        console.out(json.dumps(rows, ensure_ascii=False, indent=1), highlight=False)
    else:
        console.print(_table(rows))
    return 1 if refused else 0


def _table(rows: list[dict[str, Any]]) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title="ctxengine plugins", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("plugin (source)", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("prio", justify="right", no_wrap=True)
    table.add_column("state", ratio=1, overflow="fold")
    table.add_column("hooks", ratio=1, overflow="fold")
    colors = {"enabled": "green", "disabled": "yellow", "refused": "red", "available": "cyan"}
    for r in rows:
        name = Text(r["name"])
        name.append(f"\n({r['source']})", style="dim")
        if r["dangerous"]:
            name.append(" dangerous", style="magenta")
        state = Text(r["state"], style=colors.get(r["state"], ""))
        if r["state"] in ("refused", "disabled") and r["reason"]:
            state.append(f"\n{r['reason']}")
        table.add_row(
            name,
            Text(str(r["version"])),
            "" if r["priority"] is None else str(r["priority"]),
            state,
            Text(", ".join(r["hooks"])),
        )
    return table


def _list(args: Any) -> int:
    from ..cli import stdout_console

    return plugins_list(args.plugins, args.json, stdout_console())


def add_to(commands: Any) -> None:
    """Add ``plugins list`` to the command line."""
    from ..cli import add_common, given

    plugins = commands.add_parser(
        "plugins", help="plugin commands", description="Plugin commands: 'plugins list'."
    )
    sub = plugins.add_subparsers(dest="plugins_command", required=True, metavar="COMMAND")
    listing = sub.add_parser(
        "list",
        help="list plugins, their hooks and state",
        description="List the built-in plugins, installed entry-point plugins and, with "
        "--plugins, the plugin folders in DIR: version, priority, state (with the reason of a "
        "refusal) and hooks. Exit status 1 if a plugin was refused.",
    )
    listing.add_argument(
        "--plugins",
        metavar="DIR",
        type=given("a folder of plugin folders"),
        help="also load the plugin folders in DIR",
    )
    add_common(listing, json_help="print a JSON array, one object per plugin")
    listing.set_defaults(run=_list)
