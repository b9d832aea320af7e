"""The snapshot schema: what one render leaves in the store, and summary drift across renders.

A snapshot is one JSON object (``SCHEMA`` names its version)::

    {
      "schema": "ctxengine.snapshot/3",
      "session_id": "s1", "turn": 7, "created_at": 1733040000.0, "leaf_id": "...",
      "provider": "openai", "model": "gpt-4o", "budget": 32000, "target": 28800,
      "high_water": 31000,                   # past it the ladder cuts (absent before it existed)
      "tokens": 27412, "tokens_estimated": 27390, "fits": true,
      "payload_hash": "sha256 of the canonical JSON of the payload",
      "payload": {...}                       # only with include_payload=True
      "state": {...} | null,                 # the session state, opaque to the store
      "core_memory": {"mem.summary": "..."}, # text of every core_memory grain rendered
      "grains": {"node_id": [...], "origin": [...], "window": [...], "priority": [...],
                 "lifespan": [...], "protected": [...], "decision": [...], "status": [...],
                 "stage": [...], "reason": [...], "tokens_before": [...], "tokens_after": [...]},
      "windows": [...], "compactions": [...], "faults": [...]
    }

``grains`` holds one column per field, every column in the same grain order (schema 1 held one
object per grain: encoding the columns costs a quarter of that). Schema 3 writes each column as
runs (:mod:`ctxengine.runs`): the report has a row for every history item a render left out
(each item ``max_turns`` dropped, each turn hard-trimmed), so with one value per row a
snapshot grew with every item the session ever had, although those rows repeat one another.
:func:`grain_rows` gives one dict per grain for every schema. ``state`` is whatever the
session's state serializes to (``SessionState.to_json(messages=False, texts=core_memory)``:
a carried grain whose content is its ``core_memory`` text is written once, in
``core_memory``); the store never looks inside it.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ..errors import StoreError
from ..runs import decode_ids, decode_values, encode_ids, encode_values
from .base import Snapshot, canonical_json, content_hash
from .retention import SUMMARY_KEY, summary_hash

__all__ = (
    "SCHEMA",
    "SummaryDrift",
    "build_snapshot",
    "check_schema",
    "core_memory",
    "grain_rows",
    "memory_digest",
    "memory_texts",
    "payload_hash",
    "snapshot_meta",
    "summary_drift",
)

SCHEMA: Final = "ctxengine.snapshot/3"
#: The schemas this version reads (schema 1 held one object per grain, schema 2 one value per
#: grain in each column).
SCHEMAS: Final = ("ctxengine.snapshot/1", "ctxengine.snapshot/2", SCHEMA)
#: Schemas whose ``grains`` columns hold one value per grain (not runs).
PLAIN_COLUMNS: Final = ("ctxengine.snapshot/2",)
#: The per-grain fields of a snapshot's ``grains`` (one column each).
GRAIN_FIELDS: Final = (
    "node_id",
    "origin",
    "window",
    "priority",
    "lifespan",
    "protected",
    "decision",
    "status",
    "stage",
    "reason",
    "tokens_before",
    "tokens_after",
)
CORE_MEMORY: Final = "core_memory"
#: Keys copied from a snapshot into its index line (what ``ctxengine snapshots`` lists).
META_KEYS: Final = ("turn", "provider", "model", "budget", "tokens", "fits", "payload_hash")


class Rendered(Protocol):
    """What :func:`build_snapshot` reads of a render: ``RenderedContext``'s public fields."""

    payload: dict[str, Any]
    tokens: int

    @property
    def tree(self) -> Sequence[Any]: ...

    @property
    def report(self) -> Any: ...


def payload_hash(payload: Mapping[str, Any]) -> str:
    """``sha256`` of the payload's canonical JSON: equal payloads, equal hashes."""
    return content_hash(canonical_json(dict(payload)))


def build_snapshot(
    rendered: Rendered,
    *,
    session_id: str,
    turn: int,
    state: Mapping[str, Any] | None = None,
    leaf_id: str | None = None,
    include_payload: bool = False,
) -> dict[str, Any]:
    """The snapshot of one render, from its public fields (see the module docstring).

    Args:
        rendered: A ``RenderedContext`` (``payload``, ``tokens``, ``tree``, ``report``).
        session_id: The session rendered.
        turn: Its turn index.
        state: The session state as JSON (opaque), or None.
        leaf_id: The transcript entry the render's history ends with.
        include_payload: Keep the whole payload too (larger; restore re-renders it anyway).
    """
    report = rendered.report
    tree = {g.node_id: g for g in rendered.tree}
    cols = report.columns()
    ids = cols["node_id"]
    nodes = [tree.get(i) for i in ids]
    from_tree = {  # the columns the report does not hold: read off the grains
        name: [getattr(g, name) if g is not None else None for g in nodes]
        for name in ("priority", "lifespan", "protected")
    }
    grains: dict[str, list[Any]] = {
        name: encode_ids(ids)
        if name == "node_id"
        else encode_values(from_tree[name] if name in from_tree else cols[name])
        for name in GRAIN_FIELDS
    }
    memory = _memory(rendered.tree, ids, cols["window"])
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "session_id": session_id,
        "turn": turn,
        "created_at": time.time(),
        "leaf_id": leaf_id,
        "provider": report.provider,
        "model": report.model,
        "budget": report.budget,
        "target": report.target,
        "high_water": report.high_water,
        "tokens": rendered.tokens,
        "tokens_estimated": report.tokens_estimated,
        "fits": report.fits,
        "payload_hash": payload_hash(rendered.payload),
        "state": dict(state) if state is not None else None,
        "core_memory": memory,
        "grains": grains,
        "windows": list(report.windows),
        "compactions": list(report.compactions),
        "faults": list(report.faults),
    }
    if include_payload:
        out["payload"] = rendered.payload
    return out


def memory_texts(tree: Iterable[Any]) -> dict[str, str]:
    """``{node_id: text}`` of the ``mem.`` grains of a render's tree: part of the snapshot's
    ``core_memory`` (which also holds the grains of the ``core_memory`` window), found without
    the report, so the session can leave these texts to it when it writes its state at the
    render (``SessionState.to_json(texts=...)``)."""
    return {g.node_id: g.text for g in tree if g.node_id.startswith("mem.")}


def _memory(tree: Iterable[Any], ids: Sequence[str], windows: Sequence[str]) -> dict[str, str]:
    window = dict(zip(ids, windows, strict=True))
    return {
        g.node_id: g.text
        for g in tree
        if window.get(g.node_id) == CORE_MEMORY or g.node_id.startswith("mem.")
    }


def grain_rows(snapshot: Snapshot | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The grains of a snapshot as one dict per grain (keys :data:`GRAIN_FIELDS`), for the
    runs of schema 3, the columns of schema 2 and the rows of schema 1 alike; ``[]`` if it
    holds none.

    Raises:
        StoreError: ``grains`` is of another kind, a column is not a list of runs (schema 3;
            the message names the column and the run), or the columns differ in length.
    """
    content = check_schema(snapshot)
    grains = content.get("grains") or []
    if not isinstance(grains, (list, dict)):
        raise StoreError(
            f"snapshot grains are {type(grains).__name__}; expected columns (an object) or a "
            "list of grain objects"
        )
    try:
        if isinstance(grains, list):
            return [dict(g) for g in grains]
        if content.get("schema") in PLAIN_COLUMNS:
            columns = [grains.get(name) or [] for name in GRAIN_FIELDS]
        else:
            columns = [_column(grains, name) for name in GRAIN_FIELDS]
        return [dict(zip(GRAIN_FIELDS, row, strict=True)) for row in zip(*columns, strict=True)]
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"snapshot grains are malformed ({exc}); expected columns of equal length "
            f"({', '.join(GRAIN_FIELDS[:2])}...) or a list of grain objects"
        ) from exc


def _column(grains: Mapping[str, Any], name: str) -> list[Any]:
    """One schema 3 column of ``grains``, decoded from its runs."""
    try:
        if name == "node_id":
            return decode_ids(grains.get(name) or [])
        return decode_values(grains.get(name) or [])
    except ValueError as exc:
        raise StoreError(
            f"snapshot grains column {name!r} is malformed: {exc} (see ctxengine.runs)"
        ) from exc


def snapshot_meta(content: Mapping[str, Any]) -> dict[str, Any]:
    """The small index-line metadata of a snapshot built by :func:`build_snapshot`: its
    :data:`META_KEYS`, ``summary_hash`` (sha256 of the compaction summary, None before one: a
    store's retention keeps the snapshots where it changes) and ``core_memory`` (chars and hash
    of every core_memory text: ``ctxengine snapshots`` lists it for a pruned snapshot too)."""
    out = {k: content[k] for k in META_KEYS if k in content}
    out[SUMMARY_KEY] = summary_hash(content)
    memory = content.get(CORE_MEMORY)
    if isinstance(memory, Mapping):
        texts = {str(k): str(v) for k, v in memory.items()}
        out[CORE_MEMORY] = {
            "chars": sum(len(t) for t in texts.values()),
            "hash": memory_digest(texts),
        }
    return out


def memory_digest(memory: Mapping[str, str]) -> str | None:
    """sha256 of the canonical JSON of ``core_memory`` texts; None when there are none."""
    return content_hash(canonical_json(dict(memory))) if memory else None


def core_memory(snapshot: Snapshot | Mapping[str, Any]) -> dict[str, str]:
    """The ``core_memory`` texts of a snapshot (``{node_id: text}``; ``{}`` if none)."""
    content = check_schema(snapshot)
    memory = content.get("core_memory") or {}
    if not isinstance(memory, Mapping):
        raise StoreError(
            f"snapshot core_memory is {type(memory).__name__}; expected an object of "
            "node id -> text"
        )
    return {str(k): str(v) for k, v in memory.items()}


def check_schema(snapshot: Snapshot | Mapping[str, Any]) -> Mapping[str, Any]:
    """The snapshot's content, once its ``schema`` is one this version reads (a content
    without one, e.g. a store's own test document, is taken as it is).

    Raises:
        StoreError: another schema (a newer ctxengine wrote it), named with the ones expected.
    """
    content = snapshot.content if isinstance(snapshot, Snapshot) else snapshot
    schema = content.get("schema")
    if schema is not None and schema not in SCHEMAS:
        where = f"snapshot {snapshot.info.id!r}" if isinstance(snapshot, Snapshot) else "snapshot"
        newer = " (written by a newer ctxengine?)" if isinstance(schema, str) else ""
        raise StoreError(
            f"{where} has schema {schema!r}{newer}; expected one of {', '.join(SCHEMAS)}"
        )
    return content


# Identifiers, paths, numbers: the facts a summary must not lose.
_TERMS: Final = re.compile(r"[A-Za-z_][\w./:-]*\d[\w./:-]*|[\w-]+\.\w{1,5}\b|\b\d{2,}\b|`[^`]+`")


def _terms(text: str) -> set[str]:
    return set(_TERMS.findall(text))


@dataclass(frozen=True, slots=True)
class SummaryDrift:
    """How one ``core_memory`` grain changed between two consecutive snapshots.

    Attributes:
        node_id: The grain (``mem.summary`` for the compaction summary).
        before_turn / after_turn: The turns of the two snapshots.
        chars_before / chars_after: Its length in each.
        similarity: ``difflib`` ratio of the two texts (1.0 = unchanged).
        lost: Identifiers, file names and numbers in the earlier text missing from the later.
        added: Those that appeared.
    """

    node_id: str
    before_turn: int | None
    after_turn: int | None
    chars_before: int
    chars_after: int
    similarity: float
    lost: tuple[str, ...]
    added: tuple[str, ...]


def summary_drift(
    snapshots: Iterable[Snapshot | Mapping[str, Any]], node_id: str | None = None
) -> list[SummaryDrift]:
    """Compare ``core_memory`` across consecutive snapshots (oldest first) to see summary drift:
    one :class:`SummaryDrift` per grain that changed between two snapshots (``node_id`` limits
    it to one grain). A summary that keeps shrinking while ``lost`` grows is drifting."""
    out: list[SummaryDrift] = []
    previous: Mapping[str, Any] | None = None
    for snap in snapshots:
        content = snap.content if isinstance(snap, Snapshot) else snap
        if previous is not None:
            before, after = core_memory(previous), core_memory(content)
            for key in sorted(set(before) | set(after)):
                if node_id is not None and key != node_id:
                    continue
                a, b = before.get(key, ""), after.get(key, "")
                if a == b:
                    continue
                ta, tb = _terms(a), _terms(b)
                out.append(
                    SummaryDrift(
                        key,
                        previous.get("turn"),
                        content.get("turn"),
                        len(a),
                        len(b),
                        round(difflib.SequenceMatcher(None, a, b, autojunk=False).ratio(), 4),
                        tuple(sorted(ta - tb)),
                        tuple(sorted(tb - ta)),
                    )
                )
        previous = content
    return out
