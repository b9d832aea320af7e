"""``ctxengine snapshots`` and ``ctxengine restore``: what a store holds of a session.

``--store`` names the store: a folder is a :class:`~ctxengine.FileStore`, a ``redis://``,
``rediss://`` or ``unix://`` URL a :class:`~ctxengine.RedisStore` (``?prefix=P`` sets its key
prefix). Without it, ``$CTXENGINE_STORE``, else ``./.ctxengine``. Nothing is written to the store.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .cli import Parser, UsageError, add_common, budget_arg, given, print_json, stdout_console
from .engine import ContextEngine
from .errors import StoreError
from .inject.turn import RenderedContext
from .store.base import Snapshot, Store, canonical_json, masked_url, validate_session_id
from .store.file import FileStore
from .store.snapshot import core_memory, memory_digest, payload_hash, summary_drift
from .transcript import Message

__all__ = (
    "DEFAULT_STORE",
    "STORE_ENV",
    "add_store_option",
    "add_to",
    "open_session",
    "open_store",
    "restore_session",
)

#: Environment variable naming the store when ``--store`` is not given.
STORE_ENV: Final = "CTXENGINE_STORE"
#: The store when neither ``--store`` nor ``$CTXENGINE_STORE`` is set (the working folder's).
DEFAULT_STORE: Final = ".ctxengine"
REDIS_SCHEMES: Final = ("redis", "rediss", "unix")
PROVIDERS: Final = ("openai", "openai-responses", "anthropic", "gemini")
PREVIEW_CHARS: Final = 300
log = logging.getLogger("ctxengine.cli")


# -- the store ---------------------------------------------------------------------------------


def store_spec(value: str | None) -> str:
    """The store named by ``--store`` (``value``), else ``$CTXENGINE_STORE``, else the default.

    Raises:
        UsageError: ``--store ''`` (an unset shell variable), which must not read another store.
    """
    if value == "":
        raise UsageError("--store '': an empty name; expected a store folder or a redis:// URL")
    return value or os.environ.get(STORE_ENV) or DEFAULT_STORE


def open_store(spec: str) -> Store:
    """The store ``spec`` names: a folder (FileStore) or a Redis URL (RedisStore).

    Raises:
        UsageError: an unknown URL scheme, or a Redis URL without the redis package installed.
        StoreError: the folder is a file, or the URL is invalid.
    """
    scheme = urlsplit(spec).scheme if "://" in spec else ""
    if not scheme:
        return FileStore(spec)
    if scheme not in REDIS_SCHEMES:
        raise UsageError(
            f"--store {spec}: unknown scheme {scheme!r}; expected a folder or a "
            "redis://, rediss:// or unix:// URL"
        )
    try:
        from .store.redis_store import RedisStore
    except ImportError:
        raise UsageError(
            f"--store {masked_url(spec)}: a Redis store needs the redis package; "
            "install it with: pip install 'ctxengine[redis]'"
        ) from None
    url, prefix = _split_prefix(spec)
    return RedisStore(url, prefix=prefix) if prefix else RedisStore(url)


def _split_prefix(url: str) -> tuple[str, str | None]:
    """The URL without its ``prefix=`` query parameter, and that prefix."""
    base, _, query = url.partition("?")
    pairs = parse_qsl(query.split("#")[0], keep_blank_values=True)
    prefix = next((v for k, v in pairs if k == "prefix"), None)
    if prefix is None:
        return url, None
    if not prefix:
        raise UsageError(f"--store {masked_url(url)}: prefix= is empty; expected a key prefix")
    rest = urlencode([(k, v) for k, v in pairs if k != "prefix"])
    return (f"{base}?{rest}" if rest else base), prefix


def _where(spec: str) -> str:
    return masked_url(spec) if "://" in spec else spec


@contextmanager
def open_session(args: argparse.Namespace) -> Iterator[tuple[Store, str]]:
    """The store of ``args.store`` and ``args.session``, checked to exist; closed on exit.

    Raises:
        SessionIdError: the session id is not valid.
        UsageError: the store holds no such session.
    """
    session_id = validate_session_id(args.session)
    spec = store_spec(args.store)
    store = open_store(spec)
    try:
        if isinstance(store, FileStore) and not store.root.is_dir():
            raise UsageError(
                f"no store at {spec}: the folder does not exist; expected a store folder "
                f"(see --store, ${STORE_ENV})"
            )
        if not store.exists(session_id):
            held = store.sessions()
            shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
            has = f"it holds {shown}" if held else "it holds no sessions"
            raise UsageError(
                f"no session {session_id!r} in the store {_where(spec)} ({has}); "
                f"expected a session id of that store (see --store, ${STORE_ENV})"
            )
        yield store, session_id
    finally:
        store.close()


def add_store_option(p: Parser) -> None:
    """The ``SESSION`` argument and ``--store`` option of the store commands."""
    p.add_argument("session", metavar="SESSION", help="the session id")
    p.add_argument(
        "--store",
        metavar="DIR|URL",
        help=f"a store folder, or a redis:// URL (default: ${STORE_ENV}, else ./{DEFAULT_STORE})",
    )


# -- snapshots ---------------------------------------------------------------------------------


def _time(ts: float, previous: float) -> str:
    """``HH:MM:SS``; ``MM-DD HH:MM`` on another day than the row before."""
    when = datetime.datetime.fromtimestamp(ts)
    same_day = datetime.date.fromtimestamp(previous) == when.date()
    return when.strftime("%H:%M:%S" if same_day else "%m-%d %H:%M")


def _meta_memory(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``core_memory`` chars and hash an index line records (None: a line without them)."""
    memory = meta.get("core_memory")
    if not isinstance(memory, Mapping) or not isinstance(memory.get("chars"), int):
        return None
    digest = memory.get("hash")
    return {"grains": None, "chars": memory["chars"], "hash": digest}


def snapshot_rows(store: Store, session_id: str) -> list[dict[str, Any]]:
    """One row per index line of the session: metadata, and the summary (``core_memory``) size
    and hash read from the content; a damaged snapshot is a row with ``ok: false``. A snapshot
    whose content the store's retention removed is a row with ``pruned: true`` and the
    summary size and hash its index line records."""
    rows: list[dict[str, Any]] = []
    for n, info in enumerate(store.snapshots(session_id), 1):
        meta = dict(info.meta)
        row: dict[str, Any] = {
            "n": n,
            "id": info.id,
            "turn": meta.get("turn"),
            "created_at": info.created_at,
            "time": datetime.datetime.fromtimestamp(info.created_at).isoformat(),
            "tokens": meta.get("tokens"),
            "budget": meta.get("budget"),
            "model": meta.get("model"),
            "provider": meta.get("provider"),
            "payload_hash": meta.get("payload_hash"),
            "content_hash": info.hash,
            "size": info.size,
            "leaf_id": info.leaf_id,
            "ok": True,
            "pruned": info.pruned,
            "problem": None,
        }
        if info.pruned:
            row["core_memory"] = _meta_memory(meta)
            rows.append(row)
            continue
        try:
            snap = store.load_snapshot(session_id, info.id)
        except StoreError as exc:
            row.update(ok=False, problem=str(exc), core_memory=None)
            log.warning("snapshot %d (%s) skipped: %s", n, info.id, exc)
            rows.append(row)
            continue
        try:
            memory = core_memory(snap) if snap is not None else {}
        except StoreError as exc:  # a newer schema, a damaged shape: a row that says so
            row.update(ok=False, problem=str(exc), core_memory=None)
            log.warning("snapshot %d (%s) skipped: %s", n, info.id, exc)
            rows.append(row)
            continue
        row["core_memory"] = {
            "grains": sorted(memory),
            "chars": sum(len(t) for t in memory.values()),
            "hash": memory_digest(memory),
        }
        row["_content"] = snap.content if snap is not None else {}
        rows.append(row)
    return rows


def _snapshots_table(session_id: str, rows: list[dict[str, Any]]) -> Table:
    first = datetime.datetime.fromtimestamp(rows[0]["created_at"]).strftime("%Y-%m-%d")
    table = Table(
        title=f"snapshots of {session_id} (from {first})",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption="id: its last 8 digits; tokens of the budget; payload: its sha256; summary: "
        "chars and hash of core_memory (* changed since the row before); content: pruned = "
        "removed by the store's retention (it keeps the newest snapshots and those after "
        "compactions), listed from its index line",
    )
    for col, right in (("turn", 1), ("time", 0), ("id", 0), ("tokens", 1)):
        table.add_column(col, justify="right" if right else "left", no_wrap=True)
    table.add_column("payload", no_wrap=True)
    table.add_column("summary", no_wrap=True)
    table.add_column("content", no_wrap=True)
    previous: str | None = None
    seen = False
    last_time = rows[0]["created_at"]
    for r in rows:
        head = [_text(r["turn"]), _time(r["created_at"], last_time), r["id"][-8:]]
        last_time = r["created_at"]
        if not r["ok"]:
            table.add_row(*head, Text("damaged: skipped", style="red"), "", "", "")
            continue
        budget = f"{r['budget']:,}" if isinstance(r["budget"], int) else "?"
        tokens = f"{r['tokens']:,}/{budget}" if isinstance(r["tokens"], int) else "?"
        mem = r["core_memory"]
        if mem is None:  # pruned, and its index line predates the summary digest
            summary = Text("  ?")
            seen = False
        else:
            digest = mem["hash"]
            changed = seen and digest != previous
            seen = True
            summary = Text("*" if changed else " ", style="bold magenta")
            summary.append("-" if digest is None else f"{mem['chars']:,} {digest[:6]}")
            previous = digest
        content = Text("pruned", style="dim") if r["pruned"] else Text("kept")
        table.add_row(*head, tokens, (r["payload_hash"] or "?")[:8], summary, content)
    return table


def _drift_table(drift: list[dict[str, Any]]) -> Table:
    table = Table(
        title="summary drift (core_memory between consecutive snapshots)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("turns", no_wrap=True)
    table.add_column("grain", no_wrap=True, max_width=16)
    table.add_column("chars", justify="right", no_wrap=True)
    table.add_column("same", justify="right", no_wrap=True)
    table.add_column("facts lost (ids, files, numbers)", ratio=1, overflow="fold")
    for d in drift:
        lost = d["lost"]
        shown = ", ".join(lost[:6]) + (f" +{len(lost) - 6}" if len(lost) > 6 else "")
        table.add_row(
            f"{_text(d['before_turn'])}→{_text(d['after_turn'])}",
            Text(d["node_id"]),
            f"{d['chars_before']:,}→{d['chars_after']:,}",
            f"{100 * d['similarity']:.0f}%",
            Text(shown or "-"),
        )
    return table


def _text(value: object) -> str:
    return "?" if value is None else str(value)


def _problems(store: Store) -> list[str]:
    """What the store skipped while reading, each once."""
    return list(dict.fromkeys(str(p) for p in store.problems))


def _snapshots(args: argparse.Namespace) -> int:
    with open_session(args) as (store, session_id):
        rows = snapshot_rows(store, session_id)
        contents = [r.pop("_content") for r in rows if "_content" in r]
        drift = [asdict(d) for d in summary_drift(contents)]
        damaged = [f"snapshot {r['id']}: {r['problem']}" for r in rows if not r["ok"]]
        problems = _problems(store) + damaged
    if args.json:
        print_json(
            {
                "session": session_id,
                "store": _where(store_spec(args.store)),
                "snapshots": rows,
                "damaged": sum(not r["ok"] for r in rows),
                "pruned": sum(r["pruned"] for r in rows),
                "drift": drift,
                "problems": problems,
            }
        )
        return 0
    console = stdout_console()
    if not rows:
        console.print(Text(f"session {session_id} has no snapshots (nothing was rendered yet)"))
        return 0
    console.print(_snapshots_table(session_id, rows))
    if drift:
        console.print(_drift_table(drift))
    return 0


# -- restore -----------------------------------------------------------------------------------


def restore_session(
    args: argparse.Namespace, store: Store, session_id: str
) -> tuple[RenderedContext, dict[str, Any]]:
    """Rebuild ``session_id`` and re-run assembly; model, budget and provider default to what
    the latest intact snapshot recorded. Returns the render and what it was restored from.

    Raises:
        StoreError: the store failed. BudgetError, EncodingError, PluginError: bad options.
    """
    latest: Snapshot | None = store.load_snapshot(session_id)
    recorded: Mapping[str, Any] = {}
    if latest is not None:
        recorded = latest.content
    elif infos := store.snapshots(session_id):  # no intact content: the newest index line's
        recorded = infos[-1].meta
    model = args.model or recorded.get("model") or "gpt-4o"
    budget = args.budget or recorded.get("budget")
    provider = args.provider or recorded.get("provider") or "openai"
    engine = ContextEngine(str(model), budget if isinstance(budget, int) else None, store=store)
    try:
        if getattr(args, "plugins", None):
            engine.load_plugins(args.plugins)

        async def run() -> RenderedContext:
            return await engine.restore(session_id, provider=str(provider))

        rendered = anyio.run(run)
    finally:
        engine.close()
    origin: dict[str, Any] = {
        "snapshot": None if latest is None else latest.info.id,
        "turn": recorded.get("turn"),
        "payload_hash": recorded.get("payload_hash"),
        "model": model,
        "provider": provider,
        "budget": rendered.report.budget,
    }
    return rendered, origin


def _restore(args: argparse.Namespace) -> int:
    with open_session(args) as (store, session_id):
        rendered, origin = restore_session(args, store, session_id)
        problems = _problems(store)
    digest = payload_hash(rendered.payload)
    same = None if origin["payload_hash"] is None else digest == origin["payload_hash"]
    if args.json:
        print_json(
            {
                "session": session_id,
                "restored_from": origin,
                "payload_hash": digest,
                "same_as_snapshot": same,
                "tokens": rendered.tokens,
                "payload": rendered.payload,
                "report": rendered.report.to_dict(),
                "problems": problems,
            }
        )
        return 0
    console = stdout_console()
    console.print(_restore_header(session_id, rendered, origin, digest, same))
    console.print(_messages_view(rendered.transcript.messages, full=args.full))
    return 0


def _restore_header(
    session_id: str, rendered: RenderedContext, origin: dict[str, Any], digest: str, same: Any
) -> Text:
    r = rendered.report
    text = Text(f"session {session_id} restored", style="bold")
    if origin["snapshot"] is not None:
        text.append(f" (last snapshot: turn {_text(origin['turn'])}, {origin['snapshot'][-8:]})")
    text.append(
        f"\n{r.model} · {r.provider} · {rendered.tokens:,} of {r.budget:,} tokens · "
        f"{len(rendered.transcript.messages)} messages · payload {digest[:8]}"
    )
    if same is True:
        text.append("\nthe payload equals the last snapshot's", style="green")
    elif same is False:
        text.append(
            "\nthe payload differs from the last snapshot's (other budget, model, provider or "
            "plugins, or messages added after it)",
            style="yellow",
        )
    return text


def _messages_view(messages: tuple[Message, ...], *, full: bool) -> Group:
    parts: list[Any] = []
    for i, m in enumerate(messages, 1):
        head = Text(f"\n[{i}] {m.role}", style="bold cyan")
        if m.id:
            head.append(f" {m.id}", style="dim")
        parts.append(head)
        if m.text:
            parts.append(Text(_preview(m.text, full)))
        for call in m.tool_calls:
            args = (
                call.arguments
                if isinstance(call.arguments, str)
                else canonical_json(call.arguments)
            )
            parts.append(Text(f"→ {call.name}({_preview(args, full)})", style="magenta"))
        for result in m.tool_results:
            mark = "← error " if result.is_error else "← "
            parts.append(Text(f"{mark}{result.call_id}: {_preview(result.text, full)}"))
    return Group(*parts)


def _preview(text: str, full: bool) -> str:
    if full or len(text) <= PREVIEW_CHARS:
        return text
    cut = len(text) - PREVIEW_CHARS
    return f"{text[: PREVIEW_CHARS // 2]} … [{cut:,} chars] … {text[-PREVIEW_CHARS // 2 :]}"


def add_render_options(p: Parser) -> None:
    """``--provider``, ``--model``, ``--budget``, ``--plugins`` of a re-render from the store."""
    p.add_argument(
        "--provider",
        choices=PROVIDERS,
        metavar="P",
        help=f"request shape: {', '.join(PROVIDERS)} (default: the last snapshot's, else openai)",
    )
    p.add_argument("--model", help="model name (default: the last snapshot's, else gpt-4o)")
    p.add_argument(
        "--budget",
        type=budget_arg,
        help="input tokens (default: the last snapshot's, else the model's window)",
    )
    p.add_argument(
        "--plugins",
        metavar="DIR",
        type=given("a folder of plugin folders"),
        help="also load the plugin folders in DIR",
    )


def add_to(commands: Any) -> None:
    """Add ``snapshots`` and ``restore`` to the command line."""
    snaps: Parser = commands.add_parser(
        "snapshots",
        help="list the snapshots a store holds of a session",
        description="List the snapshots of SESSION (one per render): turn, time, tokens of the "
        "budget, payload hash, and the size and hash of the summary (core_memory), with a "
        "table of how the summary changed between snapshots (summary drift). A damaged "
        "snapshot is listed and warned about, never fatal. A snapshot whose content the "
        "store's retention removed is listed from its index line as pruned; the drift is "
        "read from the snapshots kept (the first after each recent compaction among them).",
    )
    add_store_option(snaps)
    add_common(snaps, json_help="print every snapshot, the summary drift and the problems")
    snaps.set_defaults(run=_snapshots)
    rest: Parser = commands.add_parser(
        "restore",
        help="rebuild a session from a store and print its context",
        description="Rebuild SESSION from the store (its latest intact snapshot and the "
        "messages after it), re-run assembly and print the restored context. Nothing is "
        "written to the store.",
    )
    add_store_option(rest)
    add_render_options(rest)
    rest.add_argument("--full", action="store_true", help="print whole texts, not previews")
    add_common(rest, json_help="print the payload and the report as JSON")
    rest.set_defaults(run=_restore)
