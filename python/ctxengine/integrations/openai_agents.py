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
  current branch holds exactly the session's items.
- :func:`fit_model_input` returns a ``call_model_input_filter``: each model call's instructions
  and input items go through :func:`ctxengine.fitting.fit` for the Responses API, so the model
  sees a valid history (calls paired with outputs) within the budget:
  ``RunConfig(call_model_input_filter=fit_model_input(model="gpt-4o", budget=32_000))``.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Final

import anyio
import anyio.to_thread
from agents.run_config import CallModelData, ModelInputData

from ..assemble.budget import Budget
from ..engine import RenderedContext
from ..fitting import fit
from ..store import Entry, InMemoryStore, NewEntry, Store, validate_session_id

__all__ = (
    "CLEAR_KIND",
    "ITEM_KIND",
    "POP_KIND",
    "CtxEngineSession",
    "MemoryItemStore",
    "fit_model_input",
)


#: Entry kinds in the store: an item, and the markers of ``pop_item`` / ``clear_session``.
ITEM_KIND: Final = "agents_item"
POP_KIND: Final = "agents_pop"
CLEAR_KIND: Final = "agents_clear"

#: The in-memory store, under the name this module used before it took any ctxengine
#: :class:`~ctxengine.store.Store` (kept so code passing ``MemoryItemStore()`` keeps working).
MemoryItemStore = InMemoryStore


def _plain(item: Any) -> dict[str, Any]:
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(mode="json", exclude_none=True))
    return dict(item)


class CtxEngineSession:
    """The Agents SDK session protocol over a ctxengine :class:`~ctxengine.store.Store`.

    Args:
        session_id: The conversation's id (a store session id: letters, digits, ``_.@+=-``).
        store: Where items live; default a new :class:`~ctxengine.store.InMemoryStore`.
            Sessions on the same store (a :class:`~ctxengine.store.FileStore` folder, a
            Redis server) with the same id see the same items, across processes.

    Raises:
        SessionIdError: ``session_id`` is not a valid store session id.
    """

    session_settings: Any = None

    def __init__(self, session_id: str, store: Store | None = None) -> None:
        self.session_id = validate_session_id(session_id)
        self.store: Store = store if store is not None else InMemoryStore()
        self._lock = anyio.Lock()

    def _branch(self) -> list[Entry]:
        return [e for e in self.store.branch(self.session_id) if e.kind == ITEM_KIND]

    async def _items(self) -> list[Entry]:
        return await anyio.to_thread.run_sync(self._branch)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items, oldest first (copies); with ``limit``, the latest ``limit`` of them."""
        entries = await self._items()
        if limit is not None and limit > 0:
            entries = entries[-limit:]
        return [copy.deepcopy(dict(e.data["item"])) for e in entries]

    async def add_items(self, items: list[Any]) -> None:
        """Append items (SDK objects are stored as their JSON dicts), in one store append."""
        new = [NewEntry(ITEM_KIND, {"item": _plain(i)}) for i in items]
        if not new:
            return
        async with self._lock:
            await anyio.to_thread.run_sync(self.store.append, self.session_id, new)

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item, or None when the session is empty: the leaf
        moves to the item's parent (a marker entry starting a branch there)."""
        async with self._lock:
            entries = await self._items()
            if not entries:
                return None
            last = entries[-1]
            marker = NewEntry(POP_KIND, {"popped": last.id})
            append = functools.partial(self.store.append, parent_id=last.parent_id)
            await anyio.to_thread.run_sync(append, self.session_id, [marker])
            return copy.deepcopy(dict(last.data["item"]))

    async def clear_session(self) -> None:
        """Remove every item: the leaf moves to a new, empty root (history stays readable)."""
        async with self._lock:
            append = functools.partial(self.store.append, parent_id=None)
            await anyio.to_thread.run_sync(append, self.session_id, [NewEntry(CLEAR_KIND, {})])


class _FitFilter:
    """A ``call_model_input_filter`` fitting each call with :func:`ctxengine.fitting.fit`."""

    def __init__(self, model: str, budget: Budget | int | None, options: dict[str, Any]) -> None:
        self.model = model
        self.budget = budget
        self.options = options
        self.last: RenderedContext | None = None

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        instructions = data.model_data.instructions
        items = [_plain(i) for i in data.model_data.input]
        head = [{"role": "system", "content": instructions}] if instructions else []
        out = fit(
            [*head, *items],
            model=self.model,
            budget=self.budget,
            provider="openai-responses",
            **self.options,
        )
        self.last = out
        payload = out.payload
        return ModelInputData(
            input=list(payload["input"]), instructions=payload.get("instructions")
        )


def fit_model_input(
    *, model: str = "gpt-4o", budget: Budget | int | None = None, **options: Any
) -> _FitFilter:
    """A ``RunConfig(call_model_input_filter=...)`` that fits each model call to ``budget``.

    The instructions count as the system prompt; the returned filter's ``last`` attribute holds
    the latest :class:`RenderedContext` (tokens and report). Tool schemas are not in the budget.

    Raises:
        EncodingError: unknown model; BudgetError: invalid budget (on the first call).
    """
    return _FitFilter(model, budget, options)
