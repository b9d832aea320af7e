"""The ctxengine error tree.

Every error the library raises derives from :class:`CtxEngineError`. Errors that describe a bad
argument also derive from :class:`ValueError`, so callers that already catch ``ValueError`` keep
working: :class:`EncodingError`, :class:`GrainError`, :class:`BudgetError`, :class:`FoldError`,
:class:`AdapterError`, :class:`TranscriptError` and :class:`ConfigError` (a setting or argument
out of its range, e.g. ``PruneSettings(soft_ratio=1.5)``; also a :class:`TypeError` when the
value is of the wrong kind). :class:`PluginError` (mostly a plugin that
failed or was refused, not a bad argument), :class:`StoreError` (I/O),
:class:`ContextOverflowError` (the provider's verdict), :class:`SummarizerError` and
:class:`EmbedderError` (a model's function that failed) do not; :class:`StoreConflictError`
(another writer appended to the session first) is a :class:`StoreError`. The Rust core raises these
same classes (it imports them from this module), so there is exactly one tree whichever side
of the boundary failed.
"""

from __future__ import annotations

from typing import Any

__all__ = (
    "AdapterError",
    "BudgetError",
    "ConfigError",
    "ConfigTypeError",
    "ContextOverflowError",
    "CtxEngineError",
    "EmbedderError",
    "EncodingError",
    "FoldError",
    "GrainError",
    "PluginError",
    "SessionIdError",
    "StoreConflictError",
    "StoreError",
    "SummarizerError",
    "TranscriptError",
)


class CtxEngineError(Exception):
    """Root of every error raised by ctxengine."""


class EncodingError(CtxEngineError, ValueError):
    """Unknown model or encoding name, or text that cannot be encoded (e.g. a lone surrogate)."""


class GrainError(CtxEngineError, ValueError):
    """A :class:`~ctxengine.ContextGrain` field holds an invalid value."""


class BudgetError(CtxEngineError, ValueError):
    """The budget cannot be met: protected grains alone exceed it, or the budget is invalid
    (an out-of-range value, a total above the model's context window)."""


class FoldError(CtxEngineError, ValueError):
    """The grain tree is malformed (cycle, missing parent) and cannot be folded."""


class PluginError(CtxEngineError):
    """A plugin is invalid, refused, or failed. ``.plugin`` names it."""

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        super().__init__(message)
        self.plugin = plugin


class AdapterError(CtxEngineError, ValueError):
    """A payload cannot be rendered for (or parsed from) the requested provider."""


class TranscriptError(CtxEngineError, ValueError):
    """A transcript cannot be loaded: unknown format or a broken line/entry."""


class StoreError(CtxEngineError):
    """The session store failed to read or write.

    ``.path`` names the file, directory or key involved and ``.errno`` the OS error number when
    the cause was an :class:`OSError` (``errno.ENOSPC`` for a full disk, ``errno.EROFS`` for a
    read-only folder), so a caller can tell "keep going in memory" from "fix the argument".
    """

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno


class StoreConflictError(StoreError):
    """A compare-and-append was refused: the session's leaf is no longer the entry the writer
    last saw (another writer appended to the session id since). Nothing of the refused append
    was written.

    ``.session_id`` names the session, ``.expected`` the leaf the writer last saw (None: it saw
    an empty session) and ``.actual`` the store's leaf now. ``.unsaved`` holds the messages of
    the refused save (:class:`~ctxengine.transcript.Message`, in order) when
    :meth:`Session.save <ctxengine.Session.save>` raised it, and is empty when a store's
    ``append_if`` did: they stay queued on the session, and
    :meth:`Session.rebase <ctxengine.Session.rebase>` appends them after the other writer's.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str,
        expected: str | None,
        actual: str | None,
        path: str | None = None,
        unsaved: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(message, path=path)
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        self.unsaved: tuple[Any, ...] = tuple(unsaved)  # Message (errors imports nothing)


class SessionIdError(StoreError, ValueError):
    """A session id is not usable as a store key (empty, too long, separators, traversal)."""


class ContextOverflowError(CtxEngineError):
    """The provider still rejects the context as too long after every recovery step.

    Attributes:
        tokens / limit: The provider's last numbers (None when its message did not say).
        tried: The steps tried, in order (``render``, ``compact``..., ``truncate``).
        recovery: Every step with its details (as in ``report.recovery``).
    """

    def __init__(
        self,
        message: str,
        *,
        tokens: int | None = None,
        limit: int | None = None,
        tried: list[str] | None = None,
        recovery: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.tokens, self.limit = tokens, limit
        self.tried = list(tried or [])
        self.recovery = list(recovery or [])


class ConfigError(CtxEngineError, ValueError):
    """A setting or argument out of its range (a fraction above 1, a non-positive size...);
    the message names the value and what was expected."""


class ConfigTypeError(ConfigError, TypeError):
    """A setting or argument of the wrong kind (an object with no ``summarize()`` given as
    the summarizer); a :class:`ConfigError` and a :class:`TypeError`."""


class SummarizerError(CtxEngineError):
    """A summarizer failed: the call raised, timed out, or returned no usable text."""


class EmbedderError(CtxEngineError):
    """An embedding function failed: the call raised, or returned vectors that cannot be
    compared (not one row of numbers per text, rows of another length than the others',
    values that are not finite). The message names the text and what came back."""
