"""`ContextScene`: what a plugin's ``collect(scene)`` sees (DESIGN.md §2)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, overload

from ..errors import PluginError
from ..transcript.model import copy_data, detached

__all__ = ("ContextScene", "Copies", "TranscriptView", "copy_data")


#: A plugin's copies of transcript messages: index → (the stored message, the copy).
Copies = dict[int, tuple[Any, Any]]


class TranscriptView(Sequence[Any]):
    """A read-only view of the session transcript: no mutating methods, and every message it
    returns is a copy of its own where the stored message holds something mutable (tool-call
    ``arguments``, ``meta``), so a plugin editing it in place changes only its copy, never the
    session's history.

    A message is copied when first read (a plugin that reads nothing costs nothing). ``copies``
    keeps the copies of one plugin across renders (the dispatcher holds one per plugin), so a
    warm render copies only new messages; a plugin that edits its copy sees its own edit again,
    no other plugin does.
    """

    __slots__ = ("_copies", "_messages")

    def __init__(self, messages: Sequence[Any], copies: Copies | None = None) -> None:
        self._messages = messages
        self._copies: Copies = {} if copies is None else copies

    def _get(self, index: int) -> Any:
        message = self._messages[index]  # IndexError as a list gives it
        i = index % len(self._messages)
        cached = self._copies.get(i)
        if cached is not None and cached[0] is message:
            return cached[1]
        copied = detached(message)
        self._copies[i] = (message, copied)
        return copied

    def fresh(self, copies: Copies | None = None) -> TranscriptView:
        """A view of the same messages sharing no copies with this one (``copies``: those of
        the plugin it is for, kept from earlier renders)."""
        return TranscriptView(self._messages, copies)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self._get(i) for i in range(len(self._messages))[index])
        return self._get(index)

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Any]:
        return (self._get(i) for i in range(len(self._messages)))

    def __repr__(self) -> str:
        return f"TranscriptView({len(self)} messages)"


class ContextScene:
    """The state of the session at the moment plugins are asked for context.

    Immutable. The dispatcher hands each plugin its own view (:meth:`for_plugin`), which decides
    whether :attr:`raw_user_message` may be read.

    Args:
        session_id: Session the turn belongs to.
        turn: Index of the turn (0-based).
        user_message: Latest user message, after redaction.
        transcript: The session transcript (a sequence of messages, or an object with
            ``.messages`` such as :class:`~ctxengine.transcript.Transcript`); exposed as a
            read-only :class:`TranscriptView`.
        model: Model name, if known.
        provider: Provider the payload is rendered for, if known.
        budget: The engine's budget object (opaque to this module).
        task_id: Current task id, if any.
        raw_user_message: The user message before redaction (privileged; see
            :attr:`raw_user_message`). ``None`` means no redaction happened.
    """

    __slots__ = (
        "_plugin",
        "_privileged",
        "_raw",
        "budget",
        "model",
        "provider",
        "session_id",
        "task_id",
        "transcript",
        "turn",
        "user_message",
    )

    session_id: str
    turn: int
    user_message: str
    transcript: TranscriptView
    model: str | None
    provider: str | None
    budget: Any
    task_id: str | None
    _raw: str | None
    _plugin: str | None
    _privileged: bool

    def __init__(
        self,
        *,
        session_id: str,
        turn: int = 0,
        user_message: str = "",
        transcript: Sequence[Any] = (),
        model: str | None = None,
        provider: str | None = None,
        budget: Any = None,
        task_id: str | None = None,
        raw_user_message: str | None = None,
    ) -> None:
        # a session's messages are a list: no ABC check for it (a few of them per render)
        if type(transcript) is not list and isinstance(transcript, TranscriptView):
            view = transcript
        else:  # a Transcript object exposes its messages as ``.messages``
            view = TranscriptView(getattr(transcript, "messages", transcript))
        for name, value in (
            ("session_id", session_id),
            ("turn", turn),
            ("user_message", user_message),
            ("transcript", view),
            ("model", model),
            ("provider", provider),
            ("budget", budget),
            ("task_id", task_id),
            ("_raw", raw_user_message),
            ("_plugin", None),
            ("_privileged", False),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"ContextScene is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"ContextScene is immutable; cannot delete {name!r}")

    def __repr__(self) -> str:
        return (
            f"ContextScene(session_id={self.session_id!r}, turn={self.turn}, "
            f"user_message={self.user_message!r}, transcript={self.transcript!r}, "
            f"model={self.model!r}, provider={self.provider!r}, task_id={self.task_id!r})"
        )

    @property
    def plugin(self) -> str | None:
        """Name of the plugin this view was handed to (``None`` for the engine's own scene)."""
        return self._plugin

    @property
    def raw_user_message(self) -> str:
        """The user message before redaction: a privileged ability.

        Raises:
            PluginError: the plugin holding this view is not ``dangerous`` or the engine did not
                consent (``ContextEngine(allow_dangerous=...)``).
        """
        if not self._privileged:
            who = f"plugin {self._plugin!r}" if self._plugin else "this scene"
            raise PluginError(
                f"{who} may not read the raw user message: it needs `dangerous: true` in its "
                "manifest (or a `dangerous = True` attribute) and the engine's consent "
                "(ContextEngine(allow_dangerous=...))",
                plugin=self._plugin,
            )
        return self._raw if self._raw is not None else self.user_message

    def for_plugin(
        self, plugin: str, *, privileged: bool = False, copies: Copies | None = None
    ) -> ContextScene:
        """A copy of this scene handed to ``plugin``; ``privileged`` unlocks the raw message.
        Its transcript view is its own (``copies``: the plugin's message copies so far)."""
        clone = object.__new__(ContextScene)
        for name in ContextScene.__slots__:
            object.__setattr__(clone, name, object.__getattribute__(self, name))
        object.__setattr__(clone, "transcript", self.transcript.fresh(copies))
        object.__setattr__(clone, "_plugin", plugin)
        object.__setattr__(clone, "_privileged", privileged)
        return clone
