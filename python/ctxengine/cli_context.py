"""``ctxengine context list|detail SESSION``: what is in a stored session's context window.

``list`` groups the grains by window and origin with their tokens; ``detail`` shows every grain
with its node id, origin, priority, lifespan, tokens and decision (with the stage and reason).
Both read the latest intact snapshot, which records every grain's decision; with ``--render``
(or when the session has no snapshot) they rebuild the session and render it instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, Final

from rich import box
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from .cli import Parser, add_common, print_json, stdout_console
from .cli_store import add_render_options, add_store_option, open_session, restore_session
from .errors import StoreError
from .store.base import Store
from .store.snapshot import build_snapshot, check_schema, grain_rows

__all__ = ("add_to", "context_view", "group_by_window")

#: What the payload adds around the grains (message framing, tool schemas): its own row.
FRAMING: Final = "(request framing)"


def context_view(args: argparse.Namespace, store: Store, session_id: str) -> dict[str, Any]:
    """The grains of the session's context and where they came from (a snapshot or a render).

    Raises:
        StoreError: the store failed (and for a render: BudgetError, EncodingError...).
    """
    snap = None if args.render else store.load_snapshot(session_id)
    unread: list[str] = []
    if snap is not None:
        try:
            check_schema(snap)
        except StoreError as exc:  # a newer ctxengine wrote it: rendered instead, and said so
            unread.append(f"{exc}: its grains are not shown, the session is rendered instead")
            snap = None
    if snap is not None and isinstance(snap.content.get("grains"), (list, dict)):
        content: Mapping[str, Any] = snap.content
        newer = snap.info.leaf_id != store.leaf(session_id)  # messages stored after it
        source: dict[str, Any] = {"kind": "snapshot", "snapshot": snap.info.id, "newer": newer}
    else:
        rendered, origin = restore_session(args, store, session_id)
        content = build_snapshot(rendered, session_id=session_id, turn=-1)
        source = {"kind": "render", "snapshot": origin["snapshot"], "newer": False}
    grains = grain_rows(content)
    tokens = int(content.get("tokens") or 0)
    in_grains = sum(int(g.get("tokens_after") or 0) for g in grains)
    return {
        "session": session_id,
        "source": source,
        "turn": content.get("turn") if source["kind"] == "snapshot" else None,
        "model": content.get("model"),
        "provider": content.get("provider"),
        "budget": content.get("budget"),
        "tokens": tokens,
        "framing": tokens - in_grains,
        "windows": group_by_window(grains, content.get("windows") or []),
        "grains": grains,
        "counts": _counts(grains),
        "problems": list(dict.fromkeys([*(str(p) for p in store.problems), *unread])),
    }


def _counts(grains: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in grains:
        out[g["decision"]] = out.get(g["decision"], 0) + 1
    return out


def group_by_window(
    grains: list[dict[str, Any]], windows: list[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per window (in budget order, then any other a grain names): its allocation, the tokens
    its grains occupy, and per origin the grains, their tokens and their decisions."""
    order = [str(w["window"]) for w in windows]
    order += sorted({str(g["window"]) for g in grains} - set(order))
    alloc = {str(w["window"]): w.get("alloc") for w in windows}
    out = []
    for name in order:
        mine = [g for g in grains if g["window"] == name]
        origins: dict[str, dict[str, Any]] = {}
        for g in mine:
            o = origins.setdefault(
                g["origin"] or "?",
                {
                    "origin": g["origin"] or "?",
                    "grains": 0,
                    "tokens": 0,
                    "tokens_before": 0,
                    "decisions": {},
                },
            )
            o["grains"] += 1
            o["tokens"] += int(g["tokens_after"] or 0)
            o["tokens_before"] += int(g["tokens_before"] or 0)
            o["decisions"][g["decision"]] = o["decisions"].get(g["decision"], 0) + 1
        if not mine and not alloc.get(name):
            continue
        out.append(
            {
                "window": name,
                "alloc": alloc.get(name),
                "tokens": sum(o["tokens"] for o in origins.values()),
                "grains": len(mine),
                "origins": sorted(origins.values(), key=lambda o: (-o["tokens"], o["origin"])),
            }
        )
    return out


# -- tables ------------------------------------------------------------------------------------


def _title(view: dict[str, Any]) -> str:
    src = view["source"]
    where = (
        f"snapshot of turn {view['turn']}" if src["kind"] == "snapshot" else "restored and rendered"
    )
    budget = view["budget"]
    share = f" ({100 * view['tokens'] / budget:.0f}%)" if budget else ""
    return (
        f"context of {view['session']} ({where}): {view['tokens']:,} of "
        f"{budget or 0:,} tokens{share} · {view['model']} · {view['provider']}"
    )


def _decisions(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {d}" for d, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _list_table(view: dict[str, Any]) -> Table:
    table = Table(title=_title(view), box=box.SIMPLE_HEAD, pad_edge=False, show_footer=True)
    table.add_column("window / origin", "total", no_wrap=True)
    table.add_column("grains", str(len(view["grains"])), justify="right", no_wrap=True)
    table.add_column("tokens", f"{view['tokens']:,}", justify="right", no_wrap=True)
    table.add_column("%", "100" if view["tokens"] else "", justify="right", no_wrap=True)
    table.add_column("decisions", _decisions(view["counts"]), ratio=1, overflow="fold")
    total = view["tokens"] or 1
    for w in view["windows"]:
        alloc = f" (alloc {w['alloc']:,})" if w["alloc"] else ""
        table.add_row(
            Text(f"{w['window']}{alloc}", style="bold"),
            str(w["grains"]),
            f"{w['tokens']:,}",
            f"{100 * w['tokens'] / total:.0f}",
            "",
        )
        for o in w["origins"]:
            table.add_row(
                Text(f"  {o['origin']}"),
                str(o["grains"]),
                f"{o['tokens']:,}",
                f"{100 * o['tokens'] / total:.0f}",
                Text(_decisions(o["decisions"])),
            )
    table.add_row(Text(FRAMING, style="dim"), "", f"{view['framing']:,}", "", "")
    return table


def _detail_table(view: dict[str, Any]) -> Table:
    table = Table(
        title=_title(view),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption="each grain: its node id, then its decision (status) [stage]: reason",
    )
    table.add_column("node / decision", ratio=1, overflow="fold")
    table.add_column("origin", no_wrap=True, max_width=12)
    table.add_column("prio", justify="right", no_wrap=True)
    table.add_column("life", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    for w in view["windows"]:
        table.add_section()
        grains = f"{w['grains']} grain{'s' if w['grains'] != 1 else ''}"
        table.add_row(
            Text(f"{w['window']} window: {grains}", style="bold"),
            "",
            "",
            "",
            Text(f"{w['tokens']:,}", style="bold"),
        )
        for g in (g for g in view["grains"] if g["window"] == w["window"]):
            table.add_row(*_detail_cells(g))
    return table


def _detail_cells(g: Mapping[str, Any]) -> list[Any]:
    before, after = int(g["tokens_before"] or 0), int(g["tokens_after"] or 0)
    tokens = f"{after:,}" if before == after else f"{before:,}→{after:,}"
    style = {"kept": "green", "folded": "yellow", "dropped": "red"}.get(g["decision"], "magenta")
    status = g.get("status") or g["decision"]
    node = Text(str(g["node_id"]))
    decision = Text(status if status == g["decision"] else f"{g['decision']} ({status})", style)
    reason = str(g.get("reason") or "")
    if g.get("stage") and str(g["stage"]) not in reason:
        decision.append(f" [{g['stage']}]", style="dim")
    if reason and reason != g["decision"]:
        decision.append(f": {reason}", style="dim")
    prio = g.get("priority")
    return [
        Group(node, Padding(decision, (0, 0, 0, 2))),
        Text(str(g["origin"] or "?")),
        "" if prio is None else str(prio),
        Text(str(g.get("lifespan") or "")),
        tokens,
    ]


# -- commands ----------------------------------------------------------------------------------


def _run(args: argparse.Namespace, detail: bool) -> int:
    with open_session(args) as (store, session_id):
        view = context_view(args, store, session_id)
    if args.json:
        if not detail:
            view.pop("grains")
        print_json(view)
        return 0
    console = stdout_console()
    table = _detail_table(view) if detail else _list_table(view)
    notes: list[Any] = [table]
    if view["framing"] and detail:
        notes.append(Text(f"{FRAMING}: {view['framing']:,} tokens", style="dim"))
    if view["source"]["newer"]:
        notes.append(
            Text(
                "messages were stored after this snapshot; --render shows the window with them",
                style="yellow",
            )
        )
    console.print(Group(*notes))
    return 0


def _list(args: argparse.Namespace) -> int:
    return _run(args, detail=False)


def _detail(args: argparse.Namespace) -> int:
    return _run(args, detail=True)


def _add(sub: Any, name: str, help_text: str, description: str, json_help: str) -> Parser:
    p: Parser = sub.add_parser(name, help=help_text, description=description)
    add_store_option(p)
    p.add_argument(
        "--render",
        action="store_true",
        help="rebuild the session and render it instead of reading its latest snapshot",
    )
    add_render_options(p)
    add_common(p, json_help=json_help)
    return p


def add_to(commands: Any) -> None:
    """Add ``context list`` and ``context detail`` to the command line."""
    context = commands.add_parser(
        "context",
        help="what is in a stored session's context window",
        description="What is in a stored session's context window: 'context list' by window "
        "and origin, 'context detail' grain by grain.",
    )
    sub = context.add_subparsers(dest="context_command", required=True, metavar="COMMAND")
    source = (
        "Read from the latest intact snapshot of SESSION (each render leaves one); with "
        "--render, or when there is none, the session is rebuilt from the store and rendered "
        "(--model, --budget, --provider default to the last snapshot's)."
    )
    _add(
        sub,
        "list",
        "tokens by window and origin",
        "The tokens of the context window by window and origin, with the decisions taken. "
        + source,
        "print the windows, their origins and token counts as JSON",
    ).set_defaults(run=_list)
    _add(
        sub,
        "detail",
        "every grain with its decision",
        "Every grain of the context: node id, origin, priority, lifespan, tokens and "
        "decision (kept, folded, dropped, shadowed...) with the ladder stage and reason. " + source,
        "print the windows and every grain as JSON",
    ).set_defaults(run=_detail)
