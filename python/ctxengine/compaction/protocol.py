"""The summarizer protocol and the one place the pipeline calls a summarizer.

A summarizer is anything with ``async summarize(messages, *, instructions, max_tokens) -> str``.
Summarizers written for the earlier two-argument form ``summarize(messages, instructions)`` keep
working: :func:`call_summarizer` passes ``max_tokens`` only to those that accept it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Protocol, runtime_checkable

from ..errors import ConfigTypeError
from ..tokens import Tokenizer, get_tokenizer
from ..transcript import Message
from ..transcript.model import detached

__all__ = ("Count", "Summarizer", "call_summarizer", "counter")

Count = Callable[[str], int]


@runtime_checkable
class Summarizer(Protocol):
    """Anything with ``async summarize(messages, *, instructions, max_tokens) -> str``.

    ``instructions`` says what to keep; ``max_tokens`` is the most the summary may take (None:
    no limit). Raise on failure; never return a partial or placeholder text.
    """

    async def summarize(
        self, messages: Sequence[Message], *, instructions: str, max_tokens: int | None
    ) -> str:
        """Summarize ``messages`` following ``instructions`` in at most ``max_tokens``."""
        ...


@lru_cache(maxsize=64)
def _accepts_max_tokens(kind: type) -> bool:
    try:
        params = inspect.signature(kind.summarize).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return True
    return "max_tokens" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


async def call_summarizer(
    summarizer: object,
    messages: Sequence[Message],
    *,
    instructions: str = "",
    max_tokens: int | None = None,
) -> str:
    """Call ``summarizer`` in its own style: keywords for the protocol, ``(messages,
    instructions)`` for a summarizer of the earlier two-argument form.

    Raises:
        TypeError: ``summarizer`` has no ``summarize`` method.
        Exception: whatever the summarizer raises, unchanged.
    """
    method = getattr(summarizer, "summarize", None)
    if method is None:
        raise ConfigTypeError(
            f"{type(summarizer).__name__} has no summarize(); expected a Summarizer"
        )
    if not _reads_only(type(summarizer)):
        # its own copy of what a frozen message still holds mutable (tool-call arguments,
        # meta), as a plugin gets: an edit in place, then a failure, changed the session's
        # history, which a failed summary must leave as it was
        messages = [detached(m) for m in messages]
    if _accepts_max_tokens(type(summarizer)):  # type: ignore[arg-type]
        result = await method(messages, instructions=instructions, max_tokens=max_tokens)
    else:
        result = await method(messages, instructions)
    return result  # type: ignore[no-any-return]


def _reads_only(cls: type) -> bool:
    """Whether the class whose ``summarize`` ``cls`` uses says it only reads the messages
    (``reads_only``: :class:`ExtractiveSummarizer`, and a subclass that does not override
    ``summarize``)."""
    for base in cls.__mro__:
        if "summarize" in base.__dict__:
            return bool(base.__dict__.get("reads_only", False))
    return False


def counter(tokenizer: Tokenizer | Count | str | None) -> Count:
    """A ``str -> tokens`` function from a tokenizer, a model/encoding name, a function, or
    None (``o200k_base``)."""
    if tokenizer is None or isinstance(tokenizer, str):
        return get_tokenizer(tokenizer or "o200k_base").count
    if isinstance(tokenizer, Tokenizer):
        return tokenizer.count
    return tokenizer
