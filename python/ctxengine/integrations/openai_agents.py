"""OpenAI Agents SDK drop-ins: a session and a model-input filter (``ctxengine[agents]``).

- :class:`CtxEngineSession` implements the SDK's session protocol (``get_items``,
  ``add_items``, ``pop_item``, ``clear_session``) over a ctxengine
  :class:`~ctxengine.store.Store`: pass it as
  ``Runner.run(agent, text, session=CtxEngineSession("user-42"))`` (an
  :class:`~ctxengine.store.InMemoryStore` by default) or
  ``CtxEngineSession("user-42", FileStore("sessions/"))`` to keep the conversation on disk
  (:class:`~ctxengine.store.RedisStore` works the same). Each item is one ``agents_item`` entry
  of the session's transcript tree; ``pop_item`` and ``clear_session`` append a marker that
  starts a branch (at the popped item's parent, or a new root), so nothing is erased and the
  current branch holds exactly the session's items. ``pop_item`` writes its marker only if
  the leaf is still the one it read (:func:`~ctxengine.store.compare_and_append`) and starts
  again on the new branch otherwise, so sessions in several processes or workers on one store
  and id never pop one item twice nor drop one added meanwhile. ``get_items(limit)`` follows
  the SDK's sessions: the latest ``limit`` items, none for ``limit <= 0``,
  ``session_settings.limit`` for ``None``. ``get_items(limit)`` and ``pop_item`` read only
  the newest entries of the branch (:func:`~ctxengine.store.branch_tail`), so they cost the
  items asked for, not the session, even on a store opened for one request; ``get_items()``
  without a limit reads the whole branch. Writes hold a thread lock shared by the process's
  session objects on the same store and id, so a session works from several event loops at
  once.
- :func:`fit_model_input` returns a ``call_model_input_filter``: each model call's instructions
  and input items go through :func:`ctxengine.fitting.fit` for the Responses API, so the model
  sees a valid history (calls paired with outputs) within the budget:
  ``RunConfig(call_model_input_filter=fit_model_input(model="gpt-4o", budget=32_000))``.
  Items the fit leaves as they were go back as the caller's own objects (a call that fits gets
  its input items back, but those the export leaves out); items the neutral model does not
  hold (hosted-tool calls, item references, developer messages...) pass through unchanged;
  a ``compaction`` item always stays, and an input that is a delta of a conversation kept on
  the server (``server_state=True``, or, by default, an input of tool outputs alone: see
  :func:`_delta_head`) sends the tool outputs it starts with as they are.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import threading
import weakref
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import anyio.to_thread
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)
from agents.run_config import CallModelData, ModelInputData

from ..assemble.budget import Budget
from ..compaction.facts import SUMMARY_META
from ..engine import RenderedContext
from ..errors import BudgetError, ConfigError, ConfigTypeError, StoreConflictError
from ..fitting import fit
from ..store import (
    Entry,
    InMemoryStore,
    NewEntry,
    Store,
    branch_tail,
    compare_and_append,
    validate_session_id,
)
from ..tokens import count_tokens
from ..transcript import load
from ..transcript.importers.responses import TEXT_PARTS, item_kind
from ..transcript.model import copy_data

__all__ = (
    "CLEAR_KIND",
    "ITEM_KIND",
    "MAX_POP_ATTEMPTS",
    "POP_KIND",
    "CtxEngineSession",
    "MemoryItemStore",
    "fit_model_input",
)


#: Entry kinds in the store: an item, and the markers of ``pop_item`` / ``clear_session``.
ITEM_KIND: Final = "agents_item"
POP_KIND: Final = "agents_pop"
CLEAR_KIND: Final = "agents_clear"

#: The kinds :func:`~ctxengine.store.branch_tail` reads for the session's items.
_ITEMS: Final = frozenset({ITEM_KIND})

#: Tries of one ``pop_item`` against writers that keep moving the leaf before it gives up.
MAX_POP_ATTEMPTS: Final = 100

#: The in-memory store, under the name this module used before it took any ctxengine
#: :class:`~ctxengine.store.Store` (kept so code passing ``MemoryItemStore()`` keeps working).
MemoryItemStore = InMemoryStore


def _plain(item: Any, index: int | None = None) -> dict[str, Any]:
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(mode="json", exclude_none=True))
    if not isinstance(item, Mapping):
        where = "an item" if index is None else f"item {index}"
        raise ConfigTypeError(
            f"{where} is {item!r} ({type(item).__name__}); expected a Responses input item "
            "(a dict such as {'role': 'user', 'content': 'hi'}, or an SDK item object)"
        )
    return dict(item)


class _Guard:
    """The lock of one (store, session id): every session object on that pair shares it."""

    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


_GUARDS: weakref.WeakValueDictionary[tuple[int, str], _Guard] = weakref.WeakValueDictionary()
_GUARDS_LOCK = threading.Lock()


def _guard(store: Store, session_id: str) -> _Guard:
    # Keyed by id(store): each session holds its store, so the id is not reused while a guard
    # for it is alive.
    with _GUARDS_LOCK:
        guard = _GUARDS.get((id(store), session_id))
        if guard is None:
            guard = _GUARDS[(id(store), session_id)] = _Guard()
        return guard


def _settings(value: object) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if not isinstance(value, (SessionSettings, dict)):
        raise ConfigTypeError(
            f"session_settings is {value!r} ({type(value).__name__}); expected a "
            "SessionSettings, a dict such as {'limit': 20}, or None"
        )
    try:
        return coerce_session_settings(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"session_settings is {value!r}; expected SessionSettings fields ({exc})"
        ) from exc


class CtxEngineSession:
    """The Agents SDK session protocol over a ctxengine :class:`~ctxengine.store.Store`.

    Args:
        session_id: The conversation's id (a store session id: letters, digits, ``_.@+=-``).
        store: Where items live; default a new :class:`~ctxengine.store.InMemoryStore`.
            Sessions on the same store (a :class:`~ctxengine.store.FileStore` folder, a
            Redis server) with the same id see the same items, across processes.
        session_settings: The SDK's :class:`~agents.memory.SessionSettings` (or a dict of its
            fields): ``limit`` is the number of latest items ``get_items()`` returns when it is
            given no limit (the Runner reads it too). Default ``SessionSettings()``: all items.

    Raises:
        SessionIdError: ``session_id`` is not a valid store session id.
        ConfigTypeError / ConfigError: ``session_settings`` is not settings, or holds an
            unknown field or a bad value.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store | None = None,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = validate_session_id(session_id)
        self.store: Store = store if store is not None else InMemoryStore()
        self.session_settings = _settings(session_settings)
        # A thread lock, held in the worker thread for a whole read-then-write: the session
        # can be used from several event loops (threads each running one), which a loop-bound
        # lock cannot serve.
        self._guard = _guard(self.store, self.session_id)

    def _limit(self, limit: object) -> int | None:
        settings = self.session_settings
        if settings is not None and not isinstance(settings, SessionSettings):
            settings = _settings(settings)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ConfigTypeError(
                f"limit is {limit!r} ({type(limit).__name__}); expected an int or None"
            )
        return resolve_session_limit(limit, settings)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items, oldest first (copies); with ``limit``, the latest ``limit`` of them (none
        for ``limit <= 0``). ``limit=None`` uses ``session_settings.limit`` (``None``: all).

        Raises:
            ConfigTypeError: ``limit`` is not an int or None.
        """
        n = self._limit(limit)
        if n is not None and n <= 0:
            return []

        def read() -> list[Entry]:
            if n is None:  # every item: the whole branch
                return [e for e in self.store.branch(self.session_id) if e.kind == ITEM_KIND]
            return branch_tail(self.store, self.session_id, n, kinds=_ITEMS).entries

        entries = await anyio.to_thread.run_sync(read)
        return [copy.deepcopy(dict(e.data["item"])) for e in entries]

    async def add_items(self, items: list[Any]) -> None:
        """Append items (SDK objects are stored as their JSON dicts), in one store append."""
        new = [NewEntry(ITEM_KIND, {"item": _plain(item, i)}) for i, item in enumerate(items)]
        if not new:
            return

        def append() -> None:
            with self._guard.lock:
                self.store.append(self.session_id, new)

        await anyio.to_thread.run_sync(append)

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item, or None when the session is empty: the leaf
        moves to the item's parent (a marker entry starting a branch there).

        The marker is a compare-and-append on the leaf the pop read: when another process
        added or popped an item in between, nothing is written and the pop starts again on
        the branch as it is then (the session holds nothing else to reconcile), so two pops
        never return the same item and a pop never drops an item added meanwhile.

        Raises:
            StoreConflictError: other writers moved the leaf on each of
                :data:`MAX_POP_ATTEMPTS` tries.
        """

        def pop() -> Entry | None:
            with self._guard.lock:
                conflict: StoreConflictError | None = None
                for _ in range(MAX_POP_ATTEMPTS):
                    tail = branch_tail(self.store, self.session_id, 1, kinds=_ITEMS)
                    if not tail.entries:
                        return None
                    last = tail.entries[-1]
                    marker = NewEntry(POP_KIND, {"popped": last.id})
                    try:
                        compare_and_append(
                            self.store,
                            self.session_id,
                            [marker],
                            expected_leaf=tail.leaf,
                            parent_id=last.parent_id,
                        )
                    except StoreConflictError as exc:  # another writer moved the leaf:
                        conflict = exc  # pop again from the branch as it is now
                        continue
                    return last
                assert conflict is not None
                raise conflict

        last = await anyio.to_thread.run_sync(pop)
        return None if last is None else copy.deepcopy(dict(last.data["item"]))

    async def clear_session(self) -> None:
        """Remove every item: the leaf moves to a new, empty root (history stays readable)."""

        def clear() -> None:
            with self._guard.lock:
                self.store.append(self.session_id, [NewEntry(CLEAR_KIND, {})], parent_id=None)

        await anyio.to_thread.run_sync(clear)


#: Item types besides messages the neutral model holds (``load_responses``; its content parts:
#: ``TEXT_PARTS`` and image URLs); other items pass through the filter as they are.
_ITEM_TYPES: Final = frozenset({"function_call", "function_call_output", "reasoning"})


def _parts_known(content: object) -> bool:
    if isinstance(content, str):
        return True
    if not isinstance(content, list):
        return False
    for part in content:
        if not isinstance(part, Mapping):
            return False
        kind = part.get("type")
        image = kind == "input_image" and isinstance(part.get("image_url"), str)
        if kind not in TEXT_PARTS and not image:
            return False
    return True


def _fitted_kind(item: Mapping[str, Any]) -> bool:
    """Whether the filter fits ``item`` (else it passes through unchanged): user and assistant
    messages of text and image URLs, function calls, their outputs and reasoning. System and
    developer messages in the input stay where they are, as the SDK placed them."""
    kind = item_kind(item)
    if kind == "message":
        return item.get("role") in ("user", "assistant") and _parts_known(item.get("content"))
    if kind == "function_call_output":
        return _parts_known(item.get("output", ""))
    return kind in _ITEM_TYPES


def _key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)


class _FitFilter:
    """A ``call_model_input_filter`` fitting each call with :func:`ctxengine.fitting.fit`.

    What the fit leaves as it was goes back as the caller's own item objects (the SDK matches
    them to the items it holds: ids, statuses and annotations kept); what it changed or made
    (a trimmed output, a summary) is a new dict. Items the neutral model does not hold (system
    and developer messages, hosted-tool calls, item references, file parts...) pass through
    unchanged, in their place among the sent items (system and developer messages always), and
    their tokens are reserved."""

    def __init__(
        self,
        model: str,
        budget: Budget | int | None,
        options: dict[str, Any],
        server_state: bool | None = None,
    ) -> None:
        if isinstance(budget, bool) or not (budget is None or isinstance(budget, (int, Budget))):
            raise ConfigTypeError(
                f"budget is {budget!r} ({type(budget).__name__}); expected an int, a Budget or None"
            )
        if server_state is not None and not isinstance(server_state, bool):
            raise ConfigTypeError(
                f"server_state is {server_state!r} ({type(server_state).__name__}); expected "
                "True (the conversation is kept on the server), False or None (read off the input)"
            )
        self.model = model
        self.budget = budget
        self.server_state = server_state
        self.options = options
        self.last: RenderedContext | None = None
        # the exports of the latest calls' items (a few conversations may share the filter)
        self._exports: list[_Exported] = []
        self._exports_lock = threading.Lock()

    def _exported(self, items: list[dict[str, Any]]) -> _Exported:
        """The export of ``items``, reusing the one of a previous call whose items they start
        with (an agent loop appends items between calls): only the items from the first that
        changed (or from the start of its assistant turn) are exported again."""
        with self._exports_lock:
            known = list(self._exports)
        best, reuse = _NOTHING, 0  # nothing to reuse: no other conversation's export evicted
        for old in known:
            same = old.reusable(items)
            if same > reuse:
                best, reuse = old, same
        out = _export_from(items, best, reuse)
        with self._exports_lock:
            self._exports = _newest_exports([out, *(x for x in self._exports if x is not best)])
        return out

    def _reserved(self, passed: list[dict[str, Any]]) -> Budget | int | None:
        """The budget with the tokens of the items passed through taken out."""
        if not passed:
            return self.budget
        reserve = sum(count_tokens(_key(item), model=self.model) + 4 for item in passed)
        budget = self.budget
        if isinstance(budget, Budget):
            total = budget.resolve(self.model)
        elif budget is None:
            total = Budget(model=self.model).resolve()
        else:
            total = budget
        if isinstance(total, int) and not isinstance(total, bool) and total <= reserve:
            raise BudgetError(
                f"the {len(passed)} input items the filter passes through unchanged take "
                f"{reserve} tokens; the budget is {total}: expected a budget above them"
            )
        if isinstance(budget, Budget):
            return dataclasses.replace(budget, total=total - reserve)
        return total - reserve if isinstance(total, int) else budget

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        instructions = data.model_data.instructions
        originals = list(data.model_data.input)
        items = [_plain(item, i) for i, item in enumerate(originals)]
        delta = frozenset(_delta_head(items, self.server_state))
        fitted = [k for k, item in enumerate(items) if k not in delta and _fitted_kind(item)]
        passed = [k for k, item in enumerate(items) if k in delta or not _fitted_kind(item)]
        head = [{"role": "system", "content": instructions}] if instructions else []
        out = fit(
            [*head, *(items[k] for k in fitted)],
            model=self.model,
            # a delta's outputs answer calls on the server, which holds the conversation they
            # go on: the budget cannot bound what the model sees then, and they are sent as
            # they are whatever their size (not refused, not taken out of the budget)
            budget=self._reserved([items[k] for k in passed if k not in delta]),
            provider="openai-responses",
            **self.options,
        )
        self.last = out
        payload = out.payload
        summarized = any(m.meta.get(SUMMARY_META) for m in out.transcript.messages)
        exported = self._exported([items[k] for k in fitted])
        sent = _restored(payload["input"], exported, fitted, originals, summarized)
        if delta and not fitted:  # the history is on the server: nothing to open it with
            sent = _Restored([], False)
        if passed:
            sent = _with_passed(sent, passed, fitted, items, originals, delta)
        kept = payload.get("instructions")
        given = data.model_data.input
        answer = [s.item for s in sent.items]
        if len(answer) == len(given) and all(a is b for a, b in zip(answer, given, strict=True)):
            answer = given  # nothing fitted away: the input list itself (the SDK passes a copy)
        return ModelInputData(
            input=answer,
            instructions=instructions if kept == instructions else kept,
        )


#: A call put after a lone ``reasoning`` item when it is exported alone: the exporter leaves
#: out a reasoning item with nothing after it (the API rejects one), not one in a history.
_AFTER_REASONING: Final = {"type": "function_call", "call_id": "_", "name": "_", "arguments": "{}"}


@dataclasses.dataclass(frozen=True, slots=True)
class _Sent:
    """One item of the filter's answer: ``own`` when it is the caller's own object (else the
    fit changed or made it); ``source`` the index of the input item it stands for (changed or
    not; None for what the fit made, a summary)."""

    own: bool
    item: Any
    source: int | None

    @classmethod
    def given(cls, k: int, originals: list[Any]) -> _Sent:
        """The caller's own item ``k``."""
        return cls(True, originals[k], k)

    @property
    def index(self) -> int | None:
        """Its index in the caller's input when it is the caller's own object, else None."""
        return self.source if self.own else None


@dataclasses.dataclass(frozen=True, slots=True)
class _Restored:
    """The fit's items as :class:`_Sent`; ``cut``: whether the fit left out (summarized or
    dropped) any input item older than its first item given back as the caller's own."""

    items: list[_Sent]
    cut: bool


def _export(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    exported: list[dict[str, Any]] = load(items, format="openai-responses").to(
        "openai-responses", hygiene=False
    )["input"]
    return exported


def _exported_alone(item: dict[str, Any]) -> list[str]:
    """The keys of the items ``item`` is exported as, by itself (a reasoning item with a call
    after it, which is then taken off)."""
    if item.get("type") != "reasoning":
        return [_key(x) for x in _export([item])]
    after = _key(_AFTER_REASONING)
    keys = [_key(x) for x in _export([item, _AFTER_REASONING])]
    return keys[:-1] if keys and keys[-1] == after else keys


def _owners(items: list[dict[str, Any]], exported: list[str]) -> tuple[list[int | None], set[int]]:
    """For each key of ``exported`` (the export of ``items`` together), the index of the item
    it was made from, or None when it cannot be told; and the items exported as nothing.

    Each item is exported by itself, and those exports are aligned with the whole one (they
    agree unless the export of a run differs from the export of its items, e.g. a reasoning
    item left out at the end): a difference loses the match of the items it touches only.
    The alignment is a comparison of the two lists; only the span between their common start
    and end, when they differ, is aligned item by item."""
    alone: list[str] = []
    made_from: list[int] = []
    for i, item in enumerate(items):
        keys = _exported_alone(item)
        alone += keys
        made_from += [i] * len(keys)
    empty = set(range(len(items))) - set(made_from)
    if alone == exported:
        return list(made_from), empty
    limit = min(len(alone), len(exported))
    head = 0
    while head < limit and alone[head] == exported[head]:
        head += 1
    tail = 0
    while tail < limit - head and alone[-1 - tail] == exported[-1 - tail]:
        tail += 1
    owners: list[int | None] = [None] * len(exported)
    owners[:head] = made_from[:head]
    if tail:
        owners[len(exported) - tail :] = made_from[len(alone) - tail :]
    matcher = difflib.SequenceMatcher(
        None, alone[head : len(alone) - tail], exported[head : len(exported) - tail], autojunk=False
    )
    for a, b, size in matcher.get_matching_blocks():
        for d in range(size):
            owners[head + b + d] = made_from[head + a + d]
    # an item counts only when all of what it was exported as is matched
    whole = Counter(made_from)
    found = Counter(i for i in owners if i is not None)
    return [i if i is not None and found[i] == whole[i] else None for i in owners], empty


def _assistant_side(item: Mapping[str, Any]) -> bool:
    """Whether ``item`` joins the assistant items next to it in one neutral message (the
    Responses importer's assistant messages, calls and reasoning): a message starts after any
    other item."""
    kind = item_kind(item)
    if kind == "message":
        return bool(item.get("role") == "assistant")
    return kind in ("function_call", "reasoning")


def _marks(items: list[dict[str, Any]], owners: list[int | None]) -> list[int]:
    """For each ``k`` in ``0..len(items)``, the number of exported items ``items[:k]`` make when
    ``k`` starts a neutral message (item ``k - 1`` is no assistant item) and it is known, else
    -1. Exported items come in the order of the items they were made from, so it is the first
    position of an item from ``k`` on, when the position before it has a known owner."""
    out = [0] + [-1] * len(items)
    j = 0  # the first position whose owner is known to be at least k
    for k in range(1, len(items) + 1):
        while j < len(owners) and (owners[j] is None or owners[j] < k):  # type: ignore[operator]
            j += 1
        if not _assistant_side(items[k - 1]) and (j == 0 or owners[j - 1] is not None):
            out[k] = j
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Exported:
    """The export of one call's fitted items (without hygiene): ``keys`` and ``shapes``
    (:func:`_shape`) of the exported items and, for each, the index of the item it was made
    from (``owners``: None when it cannot be told); ``empty``: the items exported alone as
    nothing. ``copies``: the items as they were (a later call reuses the export as far as its
    items are equal to them: an item edited in place since is exported again); ``marks``: see
    :func:`_marks`."""

    copies: list[Any]
    keys: list[str]
    shapes: list[tuple[Any, ...]]
    owners: list[int | None]
    empty: frozenset[int]
    marks: list[int]

    def reusable(self, items: list[dict[str, Any]]) -> int:
        """How many leading ``items`` this export holds: up to the start of the neutral message
        holding the first item that differs from ``copies``."""
        same = 0
        try:
            for old, new in zip(self.copies, items, strict=False):
                if old is not new and old != new:
                    break
                same += 1
        except Exception:  # a value whose comparison raises: taken as changed
            pass
        while same > 0 and self.marks[same] < 0:
            same -= 1
        return same


#: Exports a filter keeps from its latest calls, one per conversation it serves (a server
#: passes one filter to every run): the newest, as many as hold at most
#: :data:`_MAX_EXPORTED_ITEMS` items between them, and never fewer than :data:`_MIN_EXPORTS`.
_MAX_EXPORTS: Final = 64
_MIN_EXPORTS: Final = 4
_MAX_EXPORTED_ITEMS: Final = 50_000


def _newest_exports(exports: list[_Exported]) -> list[_Exported]:
    """The first of ``exports`` (newest first) a filter keeps (see :data:`_MAX_EXPORTS`)."""
    held = 0
    for n, export in enumerate(exports[:_MAX_EXPORTS]):
        held += len(export.copies)
        if n >= _MIN_EXPORTS and held > _MAX_EXPORTED_ITEMS:
            return exports[:n]
    return exports[:_MAX_EXPORTS]


def _export_from(items: list[dict[str, Any]], kept: _Exported, reuse: int) -> _Exported:
    """The export of ``items``: the first ``reuse`` of them are in ``kept`` (whole neutral
    messages: :meth:`_Exported.reusable`); the others are exported (together, and each by
    itself to tell which exported items it made)."""
    start = kept.marks[reuse]
    tail = items[reuse:]
    made = _export(tail) if tail else []
    keys = [_key(x) for x in made]
    owners, empty = _owners(tail, keys)
    marks = _marks(tail, owners)
    return _Exported(
        copies=[*kept.copies[:reuse], *(copy_data(x) for x in tail)],
        keys=[*kept.keys[:start], *keys],
        shapes=[*kept.shapes[:start], *(_shape(x) for x in made)],
        owners=[*kept.owners[:start], *(None if i is None else i + reuse for i in owners)],
        empty=frozenset({i for i in kept.empty if i < reuse} | {i + reuse for i in empty}),
        marks=[*kept.marks[:reuse], *(m + start if m >= 0 else -1 for m in marks)],
    )


#: The export of no item (what a call reuses when no earlier export holds its first items).
_NOTHING: Final = _Exported([], [], [], [], frozenset(), [0])


def _shape(item: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an item the fit changed keeps of the one it came from: type, role and call id."""
    return (item.get("type"), item.get("role"), item.get("call_id"))


def _restored(
    sent: list[dict[str, Any]],
    exported: _Exported,
    where: list[int],
    originals: list[Any],
    summarized: bool,
) -> _Restored:
    """``sent`` with each input item the fit left as it was replaced by the caller's own
    object (``exported``: the export of the fitted input items, ``where``: their input indices).

    When ``sent`` is the export (nothing fitted away), it is the input items, but those the
    export leaves out (a reasoning item with nothing after it, an assistant message without
    text). Else each input item is matched to what it is exported as (one item, two messages
    for an assistant message of two text parts without an id, none...); an input item whose
    whole export is in ``sent``, unchanged, in one run, goes back as the caller's object. A
    mismatch loses the match of the items it touches, not of the others. Items the fit
    changed are matched to the input item of the same type, role and call id in their place,
    so the filter knows what they stand for (``summarized``: ``sent`` opens with a summary)."""
    keys = exported.keys
    owners = exported.owners
    sent_keys = [_key(item) for item in sent]
    if sent_keys == keys and None not in owners:
        made = dict.fromkeys(i for i in owners if i is not None)  # in order: each item once
        whole = [_Sent.given(where[i], originals) for i in made]
        return _Restored(whole, False)
    groups: dict[int, list[int]] = {}
    for j, i in enumerate(owners):
        if i is not None:
            groups.setdefault(i, []).append(j)
    # sent item -> the exported item it is, unchanged (in order: each after the previous one)
    positions: dict[str, list[int]] = {}
    for j, key in enumerate(keys):
        positions.setdefault(key, []).append(j)
    same: list[int | None] = []
    after = 0
    for key in sent_keys:
        found = next((j for j in positions.get(key, ()) if j >= after), None)
        same.append(found)
        if found is not None:
            after = found + 1
    # sent item -> the exported item the next unchanged sent item is (the end when none)
    upto = [len(keys)] * len(sent)
    for s in range(len(sent) - 2, -1, -1):
        nxt = same[s + 1]
        upto[s] = nxt if nxt is not None else upto[s + 1]
    out: list[_Sent] = []
    s = 0
    bound = 0  # the exported items sent items may still stand for start here
    while s < len(sent):
        at = same[s]
        if at is None and summarized and s == 0:  # the summary stands for no one input item
            out.append(_Sent(False, sent[s], None))
            s += 1
            continue
        if at is None:  # changed: it stands for the next exported item of its shape
            shape = _shape(sent[s])
            at = next(
                (
                    x
                    for x in range(bound, upto[s])
                    if owners[x] is not None and exported.shapes[x] == shape
                ),
                None,
            )
        i = None if at is None else owners[at]
        if at is None or i is None:
            out.append(_Sent(False, sent[s], None))
            s += 1
            continue
        group = groups[i]
        if same[s] == group[0] and same[s : s + len(group)] == group:
            out.append(_Sent.given(where[i], originals))
            s += len(group)
            bound = group[-1] + 1
            continue
        out.append(_Sent(False, sent[s], where[i]))
        bound = at + 1
        s += 1
    first = next((x.index for x in out if x.index is not None), None)
    stand = {x.source for x in out} | {where[i] for i in exported.empty}
    cut = summarized or any(k not in stand for k in where if first is None or k < first)
    return _Restored(out, cut)


def _instruction(item: Mapping[str, Any]) -> bool:
    kind = item_kind(item)
    return kind == "message" and item.get("role") in ("system", "developer")


def _always(item: Mapping[str, Any]) -> bool:
    """Whether a passed-through item stays whatever the fit cut: system and developer messages
    (instructions), and a ``compaction`` item, which stands for the whole conversation before
    it (what ``responses.compact`` returns and the SDK's ``OpenAIResponsesCompactionSession``
    keeps in place of the items it compacted, ``agents/memory/
    openai_responses_compaction_session.py``): cut with the oldest items, it would take all of
    that conversation with it."""
    return _instruction(item) or item_kind(item) == "compaction"


def _delta_head(items: list[dict[str, Any]], server_state: bool | None) -> list[int]:
    """The indices of the tool outputs an input that is a delta starts with (none otherwise).

    When the conversation is kept on the server (``previous_response_id``,
    ``conversation_id``, ``auto_previous_response_id=True``), the SDK sends only the items the
    server does not hold yet (``agents/run_internal/oai_conversation.py``,
    ``OpenAIServerConversationTracker.prepare_input``), and the filter gets just those
    (``agents/run_internal/turn_preparation.py``, ``maybe_filter_model_input``): after a tool
    turn, the outputs alone, answering calls that are on the server.

    ``server_state=True`` (the caller says the conversation is on the server): the tool
    outputs (``function_call_output``, ``computer_call_output``...) the input starts with are
    a delta's. ``False``: no input is a delta. ``None``: the filter reads it off the input,
    which is a delta only when it is nothing but tool outputs (what the SDK sends after a tool
    turn). An input with anything else after its leading outputs is a history then: a client
    history cut by a session ``limit`` to ``[output, user message]`` is one, its output an
    orphan the API would reject."""
    if server_state is False:
        return []
    head: list[int] = []
    for k, item in enumerate(items):
        kind = item_kind(item)
        if not (isinstance(kind, str) and kind.endswith("_call_output")):
            break
        head.append(k)
    if server_state is None and len(head) < len(items):
        return []
    return head


def _with_passed(
    sent: _Restored,
    passed: list[int],
    fitted: list[int],
    items: list[dict[str, Any]],
    originals: list[Any],
    delta: frozenset[int] = frozenset(),
) -> _Restored:
    """``sent`` with the passed-through items put back in their places: each before the first
    item standing for a later input item (those before every fitted item first of all).

    System and developer messages always stay (instructions, as the engine keeps system
    messages), and so do ``compaction`` items (:func:`_always`) and the tool outputs a delta
    input starts with (``delta``: :func:`_delta_head`). Another item older than every item
    given back as the caller's own stays when the fit cut nothing before that item, or the
    input item after it is in the answer; else it went with the cut, unless one of the same
    ``call_id`` stays (a hosted call and its output are kept together)."""
    first = next((x.index for x in sent.items if x.index is not None), None)
    stand = {x.source for x in sent.items}

    def stays(k: int) -> bool:
        if first is None or k > first or _always(items[k]) or k in delta or not sent.cut:
            return True
        after = next((f for f in fitted if f > k), None)
        return after is not None and after in stand

    staying = [k for k in passed if stays(k)]
    calls = {_call_id(originals[k]) for k in staying} - {None}
    staying = sorted({*staying, *(k for k in passed if _call_id(originals[k]) in calls)})
    start = fitted[0] if fitted else None
    out = [_Sent.given(k, originals) for k in staying if start is None or k < start]
    pending = [k for k in staying if start is not None and k > start]
    for x in sent.items:
        while pending and x.source is not None and pending[0] < x.source:
            index = pending.pop(0)
            out.append(_Sent.given(index, originals))
        out.append(x)
    out.extend(_Sent.given(index, originals) for index in pending)
    return _Restored(out, sent.cut)


def _call_id(item: Any) -> str | None:
    value = item.get("call_id") if isinstance(item, Mapping) else getattr(item, "call_id", None)
    return value if isinstance(value, str) else None


def fit_model_input(
    *,
    model: str = "gpt-4o",
    budget: Budget | int | None = None,
    server_state: bool | None = None,
    **options: Any,
) -> _FitFilter:
    """A ``RunConfig(call_model_input_filter=...)`` that fits each model call to ``budget``.

    The instructions count as the system prompt; the returned filter's ``last`` attribute holds
    the latest :class:`RenderedContext` (tokens and report). Tool schemas are not in the budget.

    ``server_state`` says where the conversation is kept. ``True``: on the server
    (``previous_response_id``, ``conversation_id``, ``auto_previous_response_id=True``), so
    each input is a delta and the tool outputs it starts with answer calls the server holds:
    they are sent as they are, outside the budget. ``False``: in the input (a client-side
    history), where an output whose call is not in it is an orphan and is left out. ``None``
    (default): an input of nothing but tool outputs is taken for a delta (what the SDK sends
    after a tool turn), any other for a history; an input that starts with outputs followed by
    other items (``[function_call_output, user message]``) needs ``True`` to be sent as a delta.

    Raises:
        EncodingError: unknown model; BudgetError: invalid budget (on the first call).
        ConfigTypeError: ``budget`` is not an int, a Budget or None (a bool included), or
            ``server_state`` is not a bool or None.
    """
    return _FitFilter(model, budget, options, server_state)
