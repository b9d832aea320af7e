"""`ContextGrain`: the smallest unit of context (DESIGN.md §2)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from .errors import GrainError

__all__ = ("ContextGrain", "Lifespan", "content_text")

Lifespan = Literal["turn", "session", "task"]
LIFESPANS: Final = frozenset(get_args(Lifespan))

# Dotted path of identifiers: letters, digits, `_` and `-` per segment, no empty segment.
#: Priorities are 64-bit signed integers in the core.
PRIORITY_LIMIT: Final = 2**63
_NODE_ID = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-:]+)*")


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__, or nesting past the recursion limit
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else f"{text[:77]}..."


def content_text(content: str | list[Any] | dict[str, Any]) -> str:
    """Render grain content as text; non-text is serialized deterministically (sorted keys)."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@dataclass(slots=True)
class ContextGrain:
    """A prioritized, lifespan-tagged piece of context.

    Args:
        node_id: Dotted path, unique in a render (``sys.instructions``, ``hist.turn.17``).
        origin: Name of the plugin that produced it; the engine fills it when empty.
        content: Text, or a list/dict serialized deterministically as JSON.
        priority: Rank, lower = more important (rendered earlier, dropped last).
        lifespan: ``"turn"`` (one render), ``"session"`` or ``"task"``.
        window: Budget window; ``None`` derives it from the ``node_id`` prefix.
        protected: Never folded, summarized or dropped.
        meta: Free metadata; the engine adds provenance here. Any value in memory; the session
            state (a snapshot) stores a value JSON cannot hold as its ``repr``.

    Raises:
        GrainError: a field holds an invalid value (the message names field and value).
    """

    node_id: str
    origin: str = ""
    content: str | list[Any] | dict[str, Any] = ""
    priority: int = 100
    lifespan: Lifespan = "turn"
    window: str | None = None
    protected: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Validate every field again (a grain is mutable: it may have changed since it was made).

        The engine calls this on every grain it receives, so a grain broken after construction
        becomes a reported fault, never an exception out of a render.

        Raises:
            GrainError: a field holds an invalid value (the message names field and value).
        """
        if not isinstance(self.node_id, str) or not _NODE_ID.fullmatch(self.node_id):
            raise GrainError(
                f"node_id must be a dotted path like 'hist.turn.3' (letters, digits, '_', '-'); "
                f"got {_short(self.node_id)}"
            )
        if not isinstance(self.origin, str):
            raise GrainError(f"origin of {self.node_id!r} must be a str; got {_short(self.origin)}")
        if (
            isinstance(self.priority, bool)
            or not isinstance(self.priority, int)
            or not -PRIORITY_LIMIT <= self.priority < PRIORITY_LIMIT
        ):
            raise GrainError(
                f"priority of {self.node_id!r} must be an int in [-2**63, 2**63); "
                f"got {_short(self.priority)}"
            )
        if not isinstance(self.lifespan, str) or self.lifespan not in LIFESPANS:
            raise GrainError(
                f"lifespan of {self.node_id!r} must be one of 'turn', 'session', 'task'; "
                f"got {_short(self.lifespan)}"
            )
        if self.window is not None and (not isinstance(self.window, str) or not self.window):
            raise GrainError(
                f"window of {self.node_id!r} must be a non-empty str or None; "
                f"got {_short(self.window)}"
            )
        if not isinstance(self.protected, bool):
            raise GrainError(
                f"protected of {self.node_id!r} must be a bool; got {_short(self.protected)}"
            )
        if not isinstance(self.meta, dict):
            raise GrainError(
                f"meta of {self.node_id!r} must be a dict; got {type(self.meta).__name__}"
            )
        self._check_content()

    def _check_content(self) -> None:
        if not isinstance(self.content, (str, list, dict)):
            raise GrainError(
                f"content of {self.node_id!r} must be str, list or dict; "
                f"got {type(self.content).__name__}"
            )
        try:
            text = content_text(self.content)
        except (TypeError, ValueError, RecursionError) as exc:
            kind = "nested too deeply" if isinstance(exc, RecursionError) else "not serializable"
            raise GrainError(f"content of {self.node_id!r} is {kind} as JSON: {exc}") from None
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise GrainError(
                    f"content of {self.node_id!r} is not valid text: {exc.reason} "
                    f"{text[exc.start : exc.end]!r} at index {exc.start} (a lone surrogate, "
                    "e.g. bytes decoded with errors='surrogateescape')"
                ) from None

    @property
    def text(self) -> str:
        """The content as text (what is counted and rendered)."""
        return content_text(self.content)

    @property
    def branch(self) -> str:
        """First segment of the node id (``sys``, ``hist``, ``act``...)."""
        return self.node_id.split(".", 1)[0]
