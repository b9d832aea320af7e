"""OpenAI Agents SDK drop-ins: a session and a model-input filter (``ctxengine[agents]``).

- :class:`CtxEngineSession` implements the SDK's session protocol (``get_items``,
  ``add_items``, ``pop_item``, ``clear_session``) over an item store: pass it as
  ``Runner.run(agent, text, session=CtxEngineSession("user-42"))``. The store is any object with
  the four methods of :class:`ItemStore`; the default is :class:`MemoryItemStore`.
- :func:`fit_model_input` returns a ``call_model_input_filter``: each model call's instructions
  and input items go through :func:`ctxengine.fitting.fit` for the Responses API, so the model
  sees a valid history (calls paired with outputs) within the budget:
  ``RunConfig(call_model_input_filter=fit_model_input(model="gpt-4o", budget=32_000))``.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Protocol

from agents.run_config import CallModelData, ModelInputData

from ..assemble.budget import Budget
from ..engine import RenderedContext
from ..fitting import fit

__all__ = (
    "CtxEngineSession",
    "ItemStore",
    "MemoryItemStore",
    "fit_model_input",
)


class ItemStore(Protocol):
    """Where a :class:`CtxEngineSession` keeps its items (JSON-able dicts, oldest first)."""

    def load(self, session_id: str) -> list[dict[str, Any]]:
        """All items of the session (a copy)."""
        ...

    def append(self, session_id: str, items: list[dict[str, Any]]) -> None:
        """Append items to the session."""
        ...

    def pop(self, session_id: str) -> dict[str, Any] | None:
        """Remove and return the newest item, or None."""
        ...

    def clear(self, session_id: str) -> None:
        """Remove every item of the session."""
        ...


class MemoryItemStore:
    """An in-process :class:`ItemStore` (lost when the process exits)."""

    def __init__(self) -> None:
        self._items: dict[str, list[dict[str, Any]]] = {}

    def load(self, session_id: str) -> list[dict[str, Any]]:
        """All items of the session (deep copies: callers cannot edit the store)."""
        return copy.deepcopy(self._items.get(session_id, []))

    def append(self, session_id: str, items: list[dict[str, Any]]) -> None:
        """Append (copies of) ``items``."""
        self._items.setdefault(session_id, []).extend(copy.deepcopy(items))

    def pop(self, session_id: str) -> dict[str, Any] | None:
        """Remove and return the newest item, or None."""
        items = self._items.get(session_id)
        return items.pop() if items else None

    def clear(self, session_id: str) -> None:
        """Forget the session."""
        self._items.pop(session_id, None)


def _plain(item: Any) -> dict[str, Any]:
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(mode="json", exclude_none=True))
    return dict(item)


class CtxEngineSession:
    """The Agents SDK session protocol over an :class:`ItemStore`.

    Args:
        session_id: The conversation's id.
        store: Where items live; default a new :class:`MemoryItemStore`.
    """

    session_settings: Any = None

    def __init__(self, session_id: str, store: ItemStore | None = None) -> None:
        self.session_id = session_id
        self.store: ItemStore = store if store is not None else MemoryItemStore()
        self._lock = asyncio.Lock()

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items, oldest first; with ``limit``, the latest ``limit`` of them."""
        items = self.store.load(self.session_id)
        return items[-limit:] if limit is not None and limit > 0 else items

    async def add_items(self, items: list[Any]) -> None:
        """Append items (SDK objects are stored as their JSON dicts)."""
        async with self._lock:
            self.store.append(self.session_id, [_plain(i) for i in items])

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item, or None when the session is empty."""
        async with self._lock:
            return self.store.pop(self.session_id)

    async def clear_session(self) -> None:
        """Remove every item."""
        async with self._lock:
            self.store.clear(self.session_id)


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
