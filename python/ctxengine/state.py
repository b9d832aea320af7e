"""`SessionState`: everything a render reads or writes, in one object (DESIGN.md §10).

A :class:`~ctxengine.Session` owns one; the pipeline phases (collect → assemble → inject)
receive it as an argument. :meth:`SessionState.to_json` gives plain JSON data (what a snapshot
stores) and :meth:`SessionState.from_json` rebuilds the state, its history items and a fresh
Rust :class:`~ctxengine._core.Assembly` (a cache of the state, never serialized).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from . import _core
from .assemble.history import HistoryBuilder, HistoryItem
from .assemble.report import Extra
from .collect.faults import PluginFault
from .compaction.facts import paused_collector
from .errors import ConfigError
from .grain import ContextGrain
from .inject.payload import MessageTokenCache
from .runs import decode_ids, decode_values, encode_ids, encode_values
from .transcript.model import (
    Block,
    Compaction,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from .transcript.model import valid_utf8 as _valid

if TYPE_CHECKING:
    from .assemble.redact import Redaction

__all__ = ("FORMAT_VERSION", "SessionState", "StoredGrain", "TurnLog", "repair_text")

#: Version of the JSON written by :meth:`SessionState.to_json`. Version 2 writes
#: ``compacted`` by message spans (:func:`_compacted_json`); version 1 states (a list of node
#: ids) are read too. Version 3 writes ``summary`` as the node id of the stored grain it is,
#: leaves the content of carried grains to the ``texts`` given (a snapshot's
#: ``core_memory``), and writes ``limited`` as runs (:mod:`ctxengine.runs`): the summary's text
#: was written three times in each snapshot, and ``limited`` grew with every item dropped.
FORMAT_VERSION: Final = 3
#: The versions :meth:`SessionState.from_json` reads.
READABLE_VERSIONS: Final = (1, 2, 3)
#: What a version 3 grain without ``content`` says instead: its content is ``texts[node_id]``.
CONTENT_IN: Final = "core_memory"


@dataclass(slots=True)
class StoredGrain:
    """A ``session`` or ``task`` grain carried across renders, with its fusion rank and seq.

    ``shadowed`` holds the other carried grains with its node id, less important (fusion
    order: priority, then rank, then seq); every render sees them all, so its fusion records
    them as shadowed and nothing carried disappears without a trace.
    """

    grain: ContextGrain
    rank: int
    seq: int
    shadowed: list[StoredGrain] = field(default_factory=list)

    @property
    def group(self) -> list[StoredGrain]:
        """This grain and the ones it shadows, in fusion order."""
        return [self, *self.shadowed]


#: Pause the cyclic garbage collector for a synchronous bulk step (loading a long transcript
#: makes several long-lived objects per message and frees none); one implementation with
#: compaction's.
bulk = paused_collector


def _fusion_key(s: StoredGrain) -> tuple[Any, ...]:
    priority = s.grain.priority
    valid = isinstance(priority, int) and not isinstance(priority, bool)
    return (0 if valid else 1, priority if valid else 0, s.rank, s.seq)


@dataclass(slots=True, eq=False)
class SessionState:
    """The state of one session's renders.

    Attributes:
        session_id: The session id.
        asm: The Rust assembly holding the items' counts and scores (a cache of this state).
        builder: Turns appended messages into history items (turn and call bookkeeping).
        messages: The transcript, every message ever appended.
        items: Live history items by node id (compacted ones removed).
        pending: Items appended since the last render, not yet in the assembly.
        stored: ``session``/``task`` grains carried across renders.
        queued: ``turn`` grains waiting for the next render.
        overrides: Plugin grains replacing a history item's content this render.
        compacted: History node ids summarized into ``mem.summary``.
        compacted_at: Node id in ``compacted`` → the index of the message its item came
            from (a snapshot writes ``compacted`` as spans of whole messages).
        summary: The compaction summary grain, if any.
        compaction_backoff: After failed compactions: (failures in a row, the render of the
            last one, the plan's total then); None after a success.
        settled: After a render that compacted: (messages, the plan's total before trimming)
            it left. A render of that same state past the high-water mark does not compact
            again (it trims as that render did, so it gives the same payload).
        faults: Plugin faults since the last render (they go into its report).
        dirty: History node ids whose content must be re-sent to the assembly.
        counted_for: The provider the assembly's thinking counts are for (thinking is sent only
            to the provider that signed it, so a render for another provider re-counts it).
        guarded: Node id → characters before the window guard cut that tool result.
        unanswered: Result node id a call waits for → the node id of the assistant item whose
            count includes the synthetic result hygiene adds while none is there.
        order: Context node id → emission order in the last render.
        seq: Last sequence number given to a stored grain.
        turn: Index of the next render.
        task_id: Current task id.
        closed: Whether the session was closed.
        redacted: The latest user text and its redaction, so it is redacted once per turn.
        in_asm: Cache: what the assembly holds of each context grain.
        splits: Cache: grains the guard split, by node id, keyed by content.
        token_cache: Cache: exact tokens of rendered messages.
        limited: History node ids the ``max_turns`` option dropped → their tokens then.
        unrendered: History node ids a tree handler took out of the last render (it removed
            or renamed the item's grain, or one of its turn group's) → that handler's hook:
            out of the assembly until the next render puts them back.
        edited: History node ids whose own grain a tree handler changed the content of in
            place → (plugin, hook) of each change, in order: the item is sent with that
            content while its grain holds it (its decision in the render's report names the
            plugins).
        pruned: Tool-result node id → the text the prune options left it (sticky: a result
            once trimmed or cleared stays so, the sent prefix does not change back).
        pruned_results: The same results by (message index, block index), as tool results.
        rendered_at: ``time.time()`` of the last render with the prune options (the cache age
            ``ttl_seconds`` is compared with).
        retexted: History node ids whose item text a sync changed since the last compose
            (compose reuses the messages of the others without looking at each item again).
        redaction: Cache: the payload redactors of the last render and the messages as they
            made them (tool-call arguments, compaction's reading); None without one.
    """

    session_id: str
    asm: _core.Assembly
    builder: HistoryBuilder
    messages: list[Message] = field(default_factory=list)
    items: dict[str, HistoryItem] = field(default_factory=dict)
    pending: list[HistoryItem] = field(default_factory=list)
    stored: dict[str, StoredGrain] = field(default_factory=dict)
    queued: list[ContextGrain] = field(default_factory=list)
    overrides: dict[str, ContextGrain] = field(default_factory=dict)
    compacted: set[str] = field(default_factory=set)
    compacted_at: dict[str, int] = field(default_factory=dict)
    summary: ContextGrain | None = None
    compaction_backoff: tuple[int, int, int] | None = None
    settled: tuple[int, int] | None = None
    faults: list[PluginFault] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)
    counted_for: str | None = None
    guarded: dict[str, int] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)
    seq: int = 0
    turn: int = 0
    task_id: str | None = None
    closed: bool = False
    redacted: tuple[str, str] | None = None
    in_asm: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    splits: dict[str, tuple[Any, list[ContextGrain]]] = field(default_factory=dict)
    token_cache: MessageTokenCache = field(default_factory=MessageTokenCache)
    limited: dict[str, int] = field(default_factory=dict)
    unrendered: dict[str, str] = field(default_factory=dict)
    edited: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    pruned: dict[str, str] = field(default_factory=dict)
    pruned_results: dict[tuple[int, int], ToolResult] = field(default_factory=dict)
    rendered_at: float | None = None
    retexted: set[str] = field(default_factory=set)
    redaction: Redaction | None = None
    #: Cache: ``(len(compacted), its JSON)`` (``compacted`` only grows between two states).
    compacted_json: tuple[int, dict[str, Any]] | None = None

    # -- changes ------------------------------------------------------------------------------

    def append(self, message: Message) -> None:
        """Append ``message`` (lone surrogates in its text repaired) and its history items."""
        self.extend((message,))

    def extend(self, messages: Iterable[Message]) -> None:
        """:meth:`append` each of ``messages``, in one loop (see :func:`bulk`).

        Every message is checked first (:func:`entering`): a call whose arguments are not JSON
        adds none of them.

        Raises:
            TranscriptError: a tool call's arguments cannot be written as JSON.
        """
        transcript, live, pending, guarded = self.messages, self.items, self.pending, self.guarded
        items_of, item_of = self.builder.items, self.builder.message_item
        index = len(transcript)
        with bulk():
            for message in entering(messages):
                transcript.append(message)
                if message.role != "tool":  # one item, never guarded (only results are)
                    item = item_of(index, message)
                    live[item.node_id] = item
                    pending.append(item)
                    index += 1
                    continue
                for item in items_of(index, message):
                    live[item.node_id] = item
                    pending.append(item)
                    if item.guarded_from:
                        guarded[item.node_id] = item.guarded_from
                index += 1
        superseded = self.builder.superseded
        if superseded:  # older provider compactions, protected no more: upserted again
            queued = {id(i) for i in pending}
            pending.extend(i for i in superseded if id(i) not in queued and i.node_id in live)
            superseded.clear()

    def store(self, grain: ContextGrain, rank: int) -> None:
        """Carry an engine grain across renders, replacing every grain with its id (the
        compaction summary)."""
        self.seq += 1
        self.stored[grain.node_id] = StoredGrain(grain, rank, self.seq)

    def carry(self, grain: ContextGrain, rank: int) -> None:
        """Carry a ``session``/``task`` grain across renders, fused with those of its node id.

        The group is kept in fusion order (lower priority, then ``rank``, then the order they
        came in), the same order as a render's fusion: the head is the winner, the others are
        shadowed, not lost. A grain with the node id, origin and priority of a carried one is
        its new version: it takes that one's place (how a source updates its grain).
        """
        self.seq += 1
        new = StoredGrain(grain, rank, self.seq)
        head = self.stored.get(grain.node_id)
        if head is None:
            self.stored[grain.node_id] = new
            return
        group = head.group
        for i, old in enumerate(group):
            if old.grain.origin == grain.origin and old.grain.priority == grain.priority:
                new.seq = old.seq
                group[i] = new
                break
        else:
            group.append(new)
        group.sort(key=_fusion_key)
        for s in group:
            s.shadowed = []
        group[0].shadowed = group[1:]
        self.stored[grain.node_id] = group[0]

    def carried(self) -> list[ContextGrain]:
        """Every carried grain, each node id's group in fusion order (winner first)."""
        return [s.grain for head in self.stored.values() for s in head.group]

    def discard(self, grain: ContextGrain) -> None:
        """Stop carrying ``grain`` (this object); the next of its group takes its place."""
        head = self.stored.get(grain.node_id) if isinstance(grain.node_id, str) else None
        if head is None:
            return
        rest = [s for s in head.group if s.grain is not grain]
        if len(rest) == len(head.shadowed) + 1:
            return
        if not rest:
            del self.stored[grain.node_id]
            return
        for s in rest:
            s.shadowed = []
        rest[0].shadowed = rest[1:]
        self.stored[grain.node_id] = rest[0]

    # -- JSON ---------------------------------------------------------------------------------

    def to_json(
        self, *, messages: bool = True, texts: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The state as JSON-serializable plain data (caches and the assembly left out).

        With ``messages=False`` the transcript is left out (``"messages": None``): a store
        holds it already, and :meth:`from_json` is then given it back. Likewise ``texts``
        (node id → text, a snapshot's ``core_memory``): a carried grain whose content is the
        text given for its node id is written without it (``"content_in": "core_memory"``),
        and :meth:`from_json` is given the same ``texts`` back.
        """
        return {
            "version": FORMAT_VERSION,
            "session_id": self.session_id,
            "messages": [_message_json(m) for m in self.messages] if messages else None,
            "stored": [_stored_json(s, texts) for s in self.stored.values()],
            "queued": [_grain_json(g) for g in self.queued],
            "overrides": [_grain_json(g) for g in self.overrides.values()],
            "compacted": self._compacted_json(),
            "summary": self._summary_json(),
            "settled": None if self.settled is None else list(self.settled),
            "compaction_backoff": (
                None if self.compaction_backoff is None else list(self.compaction_backoff)
            ),
            "faults": [f.to_dict() for f in self.faults],
            "order": dict(self.order),
            "seq": self.seq,
            "turn": self.turn,
            "task_id": self.task_id,
            "closed": self.closed,
            # What the prune options did (sticky: the prefix already sent must not change back
            # after a restore, so a restored session renders the payload the live one would).
            "limited": {
                "node_id": encode_ids(list(self.limited)),
                "tokens": encode_values(list(self.limited.values())),
            },
            "pruned": dict(self.pruned),
            "pruned_results": [
                [index, k, _block_json(result)]
                for (index, k), result in sorted(self.pruned_results.items())
            ],
            "rendered_at": self.rendered_at,
        }

    @classmethod
    def from_json(
        cls,
        data: dict[str, Any],
        asm: _core.Assembly,
        builder: HistoryBuilder,
        *,
        messages: list[Message] | None = None,
        texts: Mapping[str, str] | None = None,
    ) -> SessionState:
        """Rebuild a state from :meth:`to_json` data into a fresh ``asm`` and ``builder``.

        The history items are rebuilt by replaying the messages through ``builder`` (those
        compacted are left out) and all wait for the next render to reach ``asm``.
        ``messages`` and ``texts`` give back what :meth:`to_json` was told to leave out.

        Raises:
            ConfigError: ``data`` is not a JSON object, was written by another format version,
                lacks a field or holds one of the wrong type (the message names it and what
                was expected), holds no messages and ``messages`` is None, or a grain's
                content is in ``texts`` and they do not hold it.
        """
        if not isinstance(data, dict):
            raise ConfigError(
                f"session state is {type(data).__name__}; expected a JSON object "
                "(SessionState.to_json)"
            )
        version = data.get("version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            newer = (
                " (written by a newer ctxengine)"
                if isinstance(version, int) and not isinstance(version, bool)
                and version > FORMAT_VERSION
                else ""
            )  # fmt: skip
            raise ConfigError(
                f"session state version is {version!r}{newer}; expected "
                + " or ".join(map(str, READABLE_VERSIONS))
            )
        _check_shape(data)
        try:
            return cls._from_checked(data, asm, builder, messages, texts or {})
        except ConfigError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ConfigError(
                f"session state is malformed ({type(exc).__name__}: {exc}); expected what "
                "SessionState.to_json writes"
            ) from exc

    @classmethod
    def _from_checked(
        cls,
        data: dict[str, Any],
        asm: _core.Assembly,
        builder: HistoryBuilder,
        messages: list[Message] | None,
        texts: Mapping[str, str],
    ) -> SessionState:
        state = cls(str(data["session_id"]), asm, builder)
        if messages is None:
            if data.get("messages") is None:
                raise ConfigError("session state holds no messages and none were given")
            messages = [_message_of(raw) for raw in data["messages"]]
        for message in messages:
            state.append(message)
        state.compacted = _compacted_of(data["compacted"], state.items)
        state.compacted_at = {
            n: item.index for n in state.compacted if (item := state.items.get(n)) is not None
        }
        state.items = {n: i for n, i in state.items.items() if n not in state.compacted}
        state.pending = list(state.items.values())
        state.guarded = {n: c for n, c in state.guarded.items() if n in state.items}
        state.stored = {s["grain"]["node_id"]: _stored_of(s, texts) for s in data["stored"]}
        state.queued = [_grain_of(g) for g in data["queued"]]
        state.overrides = {g["node_id"]: _grain_of(g) for g in data["overrides"]}
        state.summary = _summary_of(data["summary"], state)
        state.faults = [PluginFault.from_dict(f) for f in data["faults"]]
        state.order = {str(k): int(v) for k, v in data["order"].items()}
        state.seq, state.turn = int(data["seq"]), int(data["turn"])
        state.task_id, state.closed = data["task_id"], bool(data["closed"])
        settled = data.get("settled")  # absent from snapshots written before it
        state.settled = None if settled is None else (int(settled[0]), int(settled[1]))
        backoff = data.get("compaction_backoff")  # the same
        if backoff is not None:
            failures, at_render, at_tokens = (int(x) for x in backoff)
            state.compaction_backoff = (failures, at_render, at_tokens)
        _prune_state_of(state, data, data["version"])
        return state

    def _compacted_json(self) -> dict[str, Any]:
        """``compacted`` as JSON: ``messages``, spans ``[start, stop)`` of message indices
        all of whose items were summarized, and ``ids``, the other node ids (of messages
        partly summarized). A long session's snapshot then grows with its compactions, not
        with every message it ever summarized (each snapshot listed them all)."""
        n = len(self.compacted)
        cached = self.compacted_json
        if cached is not None and cached[0] == n:
            return cached[1]
        at = self.compacted_at
        live = sorted({i.index for i in self.items.values()})
        live_set = set(live)
        whole = sorted({at[c] for c in self.compacted if c in at} - live_set)
        ids = sorted(c for c in self.compacted if c not in at or at[c] in live_set)
        spans: list[list[int]] = []
        for m in whole:
            if spans:
                end = spans[-1][1]
                j = bisect.bisect_left(live, end)
                if j == len(live) or live[j] >= m:  # no live message in between
                    spans[-1][1] = m + 1
                    continue
            spans.append([m, m + 1])
        out = {"messages": spans, "ids": ids}
        self.compacted_json = (n, out)
        return out

    def _summary_json(self) -> dict[str, Any] | str | None:
        """``summary`` as JSON: the node id of the stored grain it is (written once, in
        ``stored``), else the grain (or None)."""
        summary = self.summary
        if summary is None:
            return None
        stored = self.stored.get(summary.node_id)
        if stored is not None and stored.grain is summary:
            return summary.node_id
        return _grain_json(summary)

    def stored_or(self, grain: ContextGrain) -> ContextGrain:
        """The stored grain with ``grain``'s node id (the same object), else ``grain``."""
        stored = self.stored.get(grain.node_id)
        return stored.grain if stored is not None else grain


#: The fields of a session state and the JSON kind each must have (None allowed where said).
_SHAPE: Final[dict[str, tuple[tuple[type, ...], str, bool]]] = {
    # name: (accepted types, what is expected, required)
    "session_id": ((str,), "a string", True),
    "stored": ((list,), "a list of stored grains", True),
    "queued": ((list,), "a list of grains", True),
    "overrides": ((list,), "a list of grains", True),
    "compacted": ((dict, list), "an object of message spans and node ids", True),
    "summary": (
        (dict, str, type(None)),
        "a grain object, the node id of a stored grain or null",
        True,
    ),
    "faults": ((list,), "a list of faults", True),
    "order": ((dict,), "an object of node id -> int", True),
    "seq": ((int,), "an int", True),
    "turn": ((int,), "an int", True),
    "task_id": ((str, type(None)), "a string or null", True),
    "closed": ((bool,), "true or false", True),
    "settled": ((list, type(None)), "a list of 2 ints or null", False),
    "compaction_backoff": ((list, type(None)), "a list of 3 ints or null", False),
    "limited": (
        (dict,),
        "an object of runs of node ids and tokens (version 2: node id -> int)",
        False,
    ),
    "pruned": ((dict,), "an object of node id -> str", False),
    "pruned_results": ((list,), "a list of [index, k, tool_result]", False),
    "rendered_at": ((int, float, type(None)), "a number or null", False),
}
_LENGTHS: Final = {"settled": 2, "compaction_backoff": 3}


def _compacted_of(raw: Any, items: Mapping[str, HistoryItem]) -> set[str]:
    """The node ids :meth:`SessionState._compacted_json` wrote as ``raw`` (a version 1 list of
    node ids is read as it is), ``items`` the items replayed from the messages."""
    if isinstance(raw, list):
        return {str(n) for n in raw}
    spans, ids = raw.get("messages"), raw.get("ids")
    if not isinstance(spans, list) or not isinstance(ids, list):
        raise ConfigError(
            f"session state field 'compacted' is {_repr(raw)[:80]}; expected an object with "
            "lists 'messages' (spans [start, stop]) and 'ids' (node ids)"
        )
    starts: list[int] = []
    stops: list[int] = []
    for span in spans:
        if (
            not isinstance(span, list)
            or len(span) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in span)
            or not 0 <= span[0] < span[1]
            or (stops and span[0] < stops[-1])
        ):
            raise ConfigError(
                f"session state field 'compacted' has message span {_repr(span)[:40]}; "
                "expected [start, stop] with 0 <= start < stop, in order"
            )
        starts.append(span[0])
        stops.append(span[1])
    out = {str(n) for n in ids}
    if starts:
        for node_id, item in items.items():
            k = bisect.bisect_right(starts, item.index) - 1
            if k >= 0 and item.index < stops[k]:
                out.add(node_id)
    return out


def _check_shape(data: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the first field of ``data`` that is missing or of the
    wrong kind (a damaged or hand-edited snapshot must fail as a clear error, not as an
    ``AttributeError`` deep in the rebuild)."""
    for name, (kinds, expected, required) in _SHAPE.items():
        if name not in data:
            if required:
                raise ConfigError(f"session state has no field {name!r}; expected {expected}")
            continue
        value = data[name]
        wrong = not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        if not wrong and name in _LENGTHS and value is not None:
            wrong = len(value) != _LENGTHS[name]
        if wrong:
            raise ConfigError(
                f"session state field {name!r} is {_repr(value)[:80]} "
                f"({type(value).__name__}); expected {expected}"
            )


def _summary_of(raw: Any, state: SessionState) -> ContextGrain | None:
    """The summary ``raw`` names: None, a grain (the stored one with its node id, if any) or,
    from version 3, the node id of a stored grain."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return state.stored_or(_grain_of(raw))
    stored = state.stored.get(raw)
    if stored is None:
        raise ConfigError(
            f"session state field 'summary' is {_repr(raw)[:80]}, a node id no stored grain has; "
            "expected a grain object, the node id of a stored grain or null"
        )
    return stored.grain


def _limited_of(raw: dict[str, Any], version: int, items: int) -> dict[str, int]:
    """``limited`` as :meth:`SessionState.to_json` wrote it: node id → tokens (version 2), or
    runs of node ids and of their tokens (version 3). ``items``: how many history items the
    state's messages give, the most ``max_turns`` can have dropped (a run claiming more is
    damaged, and refused before it is expanded)."""
    if version < 3:
        if len(raw) > items:
            raise ConfigError(
                f"session state field 'limited' has {len(raw)} node ids; expected at most "
                f"{items}, the history items of its messages"
            )
        return {str(n): int(t) for n, t in raw.items()}
    if raw and set(raw) != {"node_id", "tokens"}:  # e.g. a version 2 object in a version 3 state
        raise ConfigError(
            f"session state field 'limited' has the keys {sorted(raw)}; expected 'node_id' "
            "and 'tokens' (runs of equal length, see ctxengine.runs) in a version 3 state"
        )
    try:
        ids = decode_ids(raw.get("node_id", []), limit=items)
        tokens = decode_values(raw.get("tokens", []), limit=items)
        if len(ids) != len(tokens):
            raise ValueError(f"{len(ids)} node ids and {len(tokens)} tokens")  # internal: caught
        bad = next((t for t in tokens if not isinstance(t, int) or isinstance(t, bool)), None)
        if bad is not None:
            raise ValueError(f"tokens {_repr(bad)[:40]} is not an int")  # internal: caught
    except ValueError as exc:
        raise ConfigError(
            f"session state field 'limited' is malformed ({exc}); expected an object with "
            f"'node_id' and 'tokens', runs of equal length of at most {items} rows (the "
            "history items of its messages; see ctxengine.runs)"
        ) from exc
    return dict(zip(ids, tokens, strict=True))


def _prune_state_of(state: SessionState, data: dict[str, Any], version: int) -> None:
    """Restore what the prune options did into ``state``. The fields are absent from states
    written before they were stored: the old behaviour then (nothing pruned yet, the next
    render prunes afresh). Records of history compaction summarized (an earlier version
    wrote them) are left out, as a live session drops them (``prune.forget_pruned``)."""
    items = state.items
    state.limited = _limited_of(data.get("limited", {}), version, len(items) + len(state.compacted))
    state.pruned = {str(n): str(t) for n, t in data.get("pruned", {}).items() if n in items}
    live = {(i.index, i.result) for i in items.values() if i.result >= 0}
    results: dict[tuple[int, int], ToolResult] = {}
    for index, k, raw in data.get("pruned_results", ()):
        result = _block_of(raw)
        if not isinstance(result, ToolResult):
            raise ConfigError(
                f"session state pruned_results[{index}, {k}] is a {raw.get('type')!r} block; "
                "expected a tool_result"
            )
        index, k = int(index), int(k)
        position = _result_position(state.messages, index, k)
        if position is None:
            raise ConfigError(
                f"session state pruned_results[{index}, {k}] names no tool result of the "
                f"{len(state.messages)} messages; expected the message and block index of one"
            )
        if (index, position) in live:
            results[(index, k)] = result
    state.pruned_results = results
    rendered_at = data.get("rendered_at")
    state.rendered_at = None if rendered_at is None else float(rendered_at)


def _result_position(messages: list[Message], index: int, k: int) -> int | None:
    """Which tool result of message ``index`` block ``k`` is (None: it is none)."""
    if not 0 <= index < len(messages):
        return None
    blocks = messages[index].blocks
    if not 0 <= k < len(blocks) or not isinstance(blocks[k], ToolResult):
        return None
    return sum(isinstance(b, ToolResult) for b in blocks[:k])


_GRAIN_FIELDS: Final = ("node_id", "origin", "content", "priority", "lifespan", "window")


def _grain_json(g: ContextGrain) -> dict[str, Any]:
    out = {name: getattr(g, name) for name in _GRAIN_FIELDS}
    out.update(protected=g.protected, meta=_meta_json(g.meta))
    content = out.get("content")
    if not isinstance(content, str):
        try:
            plain = _plain(content)
        except RecursionError:  # nested past the recursion limit: its text is what is sent
            plain = False
        if not plain:
            # structured content strict JSON cannot hold (a NaN score): stored as the text it
            # is sent as, so the snapshot is written and the reopened grain renders the same
            out["content"] = g.text
    return out


_SCALARS: Final = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON data already (str-keyed dicts, lists, scalars; a float NaN or
    infinity is not: strict JSON has none, and the store writes strict JSON)."""
    if isinstance(value, float):  # numpy's float64 too: a similarity score
        return math.isfinite(value)
    if isinstance(value, _SCALARS):
        return True
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain(v) for v in value)
    return False


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # a hostile __repr__
        return f"<{type(value).__name__}>"


def _as_json(value: Any) -> Any:
    """``value`` as JSON data: a mapping with its keys as text, a list or tuple as a list, a
    value JSON cannot hold (a datetime, a set, an object, a float NaN or infinity) as its
    ``repr``."""
    if isinstance(value, float) and not math.isfinite(value):
        return _repr(value)
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else _repr(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    return _repr(value)


def _meta_json(meta: dict[str, Any]) -> dict[str, Any]:
    """A grain's or a message's ``meta`` as the session state stores it. ``meta`` is free
    metadata (DESIGN §2), while a snapshot is JSON: one datetime in it made every snapshot of
    the session fail, and its carried grains were lost on reopening. So a value JSON cannot hold is
    stored as its ``repr`` (metadata, not data: as the store does for a message's ``meta``);
    the grain itself keeps the value."""
    try:
        if _plain(meta):
            return meta
        out: dict[str, Any] = _as_json(meta)
    except RecursionError:  # nested past the recursion limit: not storable, said so
        return {"unstored": "meta nested past the recursion limit"}
    return out


def _grain_of(d: dict[str, Any], texts: Mapping[str, str] | None = None) -> ContextGrain:
    if "content" in d or texts is None:
        return ContextGrain(**d)
    node_id, where = d.get("node_id"), d.get("content_in")
    if where != CONTENT_IN:
        raise ConfigError(
            f"session state grain {_repr(node_id)[:60]} has no content and content_in "
            f"{_repr(where)[:40]}; expected its content or content_in {CONTENT_IN!r}"
        )
    text = texts.get(node_id) if isinstance(node_id, str) else None
    if text is None:
        raise ConfigError(
            f"session state grain {_repr(node_id)[:60]} has its content in the snapshot's "
            f"{CONTENT_IN}, which does not hold it; expected SessionState.from_json(texts=) "
            f"to be given the snapshot's {CONTENT_IN}"
        )
    fields = {k: v for k, v in d.items() if k != "content_in"}
    return ContextGrain(content=text, **fields)


def _stored_json(s: StoredGrain, texts: Mapping[str, str] | None = None) -> dict[str, Any]:
    grain = _grain_json(s.grain)
    content = s.grain.content
    if texts is not None and type(content) is str and texts.get(s.grain.node_id) == content:
        del grain["content"]  # written once, by the caller (a snapshot's core_memory)
        grain["content_in"] = CONTENT_IN
    out: dict[str, Any] = {"grain": grain, "rank": s.rank, "seq": s.seq}
    if s.shadowed:
        out["shadowed"] = [_stored_json(x, texts) for x in s.shadowed]
    return out


def _stored_of(d: dict[str, Any], texts: Mapping[str, str]) -> StoredGrain:
    shadowed = [_stored_of(x, texts) for x in d.get("shadowed", ())]
    return StoredGrain(_grain_of(d["grain"], texts), d["rank"], d["seq"], shadowed)


def _block_json(b: Block) -> dict[str, Any]:
    if type(b) is Compaction:
        return {"type": "compaction", "text": b.text, "provider": b.provider, "item": dict(b.item)}
    if isinstance(b, Text):
        return {"type": "text", "text": b.text}
    if isinstance(b, Image):
        out = {"type": "image", "media_type": b.media_type, "data": b.data, "url": b.url}
        if b.name is not None:  # only when set: snapshots without names stay byte-stable
            out["name"] = b.name
        return out
    if isinstance(b, ToolCall):
        return {"type": "tool_call", "id": b.id, "name": b.name, "arguments": b.arguments}
    if isinstance(b, Thinking):
        return {
            "type": "thinking",
            "text": b.text,
            "signature": b.signature,
            "redacted": b.redacted,
        }
    content = [_block_json(c) for c in b.content]
    return {"type": "tool_result", "call_id": b.call_id, "content": content,
            "is_error": b.is_error, "name": b.name}  # fmt: skip


def _block_of(d: dict[str, Any]) -> Block:
    fields = {k: v for k, v in d.items() if k != "type"}
    kind = d["type"]
    if kind == "tool_result":
        content = tuple(_block_of(c) for c in fields.pop("content"))
        return ToolResult(content=content, **fields)  # type: ignore[arg-type]
    cls: Any = {
        "text": Text,
        "image": Image,
        "tool_call": ToolCall,
        "thinking": Thinking,
        "compaction": Compaction,
    }[kind]
    block: Block = cls(**fields)
    return block


def _message_json(m: Message) -> dict[str, Any]:
    return {
        "role": m.role,
        "blocks": [_block_json(b) for b in m.blocks],
        "id": m.id,
        "stop_reason": m.stop_reason,
        "meta": _meta_json(dict(m.meta)),  # free metadata too (a datetime is stored as text)
    }


def _message_of(d: dict[str, Any]) -> Message:
    blocks = tuple(_block_of(b) for b in d["blocks"])
    return Message(d["role"], blocks, id=d["id"], stop_reason=d["stop_reason"], meta=d["meta"])


@dataclass(slots=True)
class TurnLog:
    """What one render records for its report while it runs (not part of the session state)."""

    faults: list[PluginFault] = field(default_factory=list)
    shadowed: list[dict[str, Any]] = field(default_factory=list)
    extra: list[Extra] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    #: History node id → what its decision says of the content a tree handler gave its own
    #: grain in place, that it is sent with (the plugins, hooks and change of size).
    edited: dict[str, str] = field(default_factory=dict)


def _clean(block: Block) -> bool:
    """Whether ``block``'s text is valid UTF-8 already (the common case: nothing to copy)."""
    kind = type(block)
    if kind is Text or kind is Thinking:
        return _valid(block.text) is block.text  # type: ignore[union-attr]
    if kind is ToolResult:
        return all(_clean(b) for b in block.content)  # type: ignore[union-attr]
    return not isinstance(block, (Text, Thinking, ToolResult))


def _valid_block(block: Block) -> Block:
    if isinstance(block, Thinking):
        text, sig = _valid(block.text), block.signature
        fixed = None if sig is None else _valid(sig)
        return (
            block
            if text is block.text and fixed is sig
            else replace(block, text=text, signature=fixed)
        )
    if isinstance(block, Text):
        text = _valid(block.text)
        return block if text is block.text else replace(block, text=text)
    if isinstance(block, Image):
        name, url = _valid_name(block.name), _valid_name(block.url)
        return (
            block if name is block.name and url is block.url else replace(block, name=name, url=url)
        )
    if isinstance(block, ToolResult):
        content = tuple(_valid_block(b) for b in block.content)
        call_id, name = _valid(block.call_id), _valid_name(block.name)
        same = call_id is block.call_id and name is block.name
        if same and all(a is b for a, b in zip(content, block.content, strict=True)):
            return block
        return replace(block, call_id=call_id, name=name, content=content)  # type: ignore[arg-type]
    if isinstance(block, ToolCall):
        call_id, name, js = _valid(block.id), _valid(block.name), block.arguments_json
        fixed = _valid(js)
        if call_id is block.id and name is block.name and fixed is js:
            return block
        if fixed is js:
            args: dict[str, Any] | str = block.arguments
        elif isinstance(block.arguments, str):
            args = fixed
        else:
            args = json.loads(fixed)  # the JSON with each lone surrogate made U+FFFD
        return ToolCall(call_id, name, args)
    return block


def _valid_name(name: str | None) -> str | None:
    return None if name is None else _valid(name)


def _call_clean(call: ToolCall) -> bool:
    """Whether ``call``'s id, name and arguments (made JSON here, and kept) are valid text.

    Raises:
        TranscriptError: its arguments are not JSON.
    """
    js = call.arguments_json
    return _valid(js) is js and _valid(call.name) is call.name and _valid(call.id) is call.id


def _clean_blocks(blocks: tuple[Block, ...]) -> bool:
    """``all(_clean(b) for b in blocks)``, written out for the common exact block types (ASCII
    text needs no check); anything else goes through :func:`_clean`."""
    for b in blocks:
        kind = type(b)
        if kind is Text:
            text = b.text  # type: ignore[union-attr]
            if not text.isascii() and _valid(text) is not text:
                return False
        elif kind is Thinking:
            text, sig = b.text, b.signature  # type: ignore[union-attr]
            if not text.isascii() and _valid(text) is not text:
                return False
            if sig is not None and not sig.isascii() and _valid(sig) is not sig:
                return False
        elif kind is ToolResult:
            if not b.call_id.isascii() and _valid(b.call_id) is not b.call_id:  # type: ignore[union-attr]
                return False
            name = b.name  # type: ignore[union-attr]
            if name is not None and not name.isascii() and _valid(name) is not name:
                return False
            for c in b.content:  # type: ignore[union-attr]
                if type(c) is Text:
                    text = c.text
                    if not text.isascii() and _valid(text) is not text:
                        return False
                elif type(c) is not Image and not _clean(c):
                    return False
        elif kind is ToolCall:
            js = b.arguments_json  # type: ignore[union-attr] # made and kept (raises if not JSON)
            ascii_ = js.isascii() and b.name.isascii() and b.id.isascii()  # type: ignore[union-attr]
            if not ascii_ and not _call_clean(b):  # type: ignore[arg-type]
                return False
        elif kind is Image:
            if _valid_name(b.name) is not b.name or _valid_name(b.url) is not b.url:  # type: ignore[union-attr]
                return False
        elif not _clean(b):
            return False
    return True


def entering(messages: Iterable[Message]) -> list[Message]:
    """``messages`` as a session holds them (:func:`repair_text`, its check inline, which
    also makes each tool call's JSON), all checked before any is added.

    Raises:
        TranscriptError: a tool call's arguments cannot be written as JSON.
    """
    return [m if _clean_blocks(m.blocks) else repair_text(m) for m in messages]


def repair_text(message: Message) -> Message:
    """``message`` with valid UTF-8 text: a lone surrogate cannot be encoded, counted or sent,
    so it becomes U+FFFD when the message enters the session, in every block (text, thinking
    signatures, tool calls and results, image names; the message itself when clean). A
    message's id and ``meta`` are not sent: the store's codec writes them repaired."""
    if _clean_blocks(message.blocks):
        return message
    blocks = tuple(_valid_block(b) for b in message.blocks)
    if all(a is b for a, b in zip(blocks, message.blocks, strict=True)):
        return message
    return replace(message, blocks=blocks)
