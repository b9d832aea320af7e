"""``to_messages``: messages in any supported shape to the neutral :class:`Message` list.

What :meth:`ctxengine.Session.ingest`, :meth:`~ctxengine.Session.extend` and
:func:`ctxengine.fitting.fit` accept: neutral :class:`Message` objects, a :class:`Transcript`,
OpenAI Chat dicts and SDK objects, OpenAI Responses items, Anthropic and Gemini messages (dicts
or SDK objects), LangChain ``BaseMessage`` objects, or a request payload dict. A list may mix
neutral messages with one foreign shape per run between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import TranscriptError
from .importers.common import short
from .importers.langchain import is_langchain_message
from .loader import load
from .model import Message, Transcript

__all__ = ("to_messages",)

_EXPECTED = (
    "a Message, a message dict (OpenAI Chat, Responses, Anthropic, Gemini), an SDK message "
    "object or a LangChain BaseMessage"
)


def _supported(item: object) -> bool:
    if isinstance(item, Mapping):  # a message dict names its role, item type or parts
        return any(key in item for key in ("role", "type", "parts"))
    return (
        isinstance(item, Message)
        or is_langchain_message(item)
        or callable(getattr(item, "model_dump", None))
    )


def _runs(items: list[Any]) -> list[tuple[int, list[Any]]]:
    """Consecutive items of one kind (neutral / LangChain / other), with their start index."""
    runs: list[tuple[int, list[Any]]] = []
    kind_of_last: str | None = None
    for i, item in enumerate(items):
        kind = (
            "neutral"
            if isinstance(item, Message)
            else "langchain"
            if is_langchain_message(item)
            else "data"
        )
        if kind != kind_of_last:
            runs.append((i, []))
            kind_of_last = kind
        runs[-1][1].append(item)
    return runs


def to_messages(messages: object) -> list[Message]:
    """Neutral messages from ``messages`` in any supported shape (see the module docstring).

    Everything is converted before anything is returned, so a caller that appends the result
    never half-adds a list.

    Raises:
        TranscriptError: an item has an unknown shape, or a foreign run does not load; the
            message names the item's index and value.
    """
    if type(messages) is list or type(messages) is tuple:  # no ABC check for the usual shape
        items = list(messages)
        if {*map(type, items)} == {Message}:  # neutral messages already
            return items
    if isinstance(messages, Transcript):
        return list(messages.messages)
    if isinstance(messages, Mapping):  # a request payload
        return list(load(messages).messages)
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise TranscriptError(f"messages is {short(messages)}; expected a list of messages")
    items = list(messages)
    if {*map(type, items)} == {Message}:  # the common case: neutral messages already
        return items
    for i, item in enumerate(items):
        if not _supported(item):
            raise TranscriptError(
                f"messages[{i}] is {short(item)} ({type(item).__name__}); expected {_EXPECTED}"
            )
    out: list[Message] = []
    for start, run in _runs(items):
        if isinstance(run[0], Message):
            out.extend(run)
            continue
        try:
            out.extend(load(run).messages)
        except TranscriptError as exc:
            if len(run) == len(items):
                raise
            where = f"messages[{start}:{start + len(run)}]"
            raise TranscriptError(f"{where}, indices counted from {start}: {exc}") from None
    return out
