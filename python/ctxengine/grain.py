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
_NODE_ID = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-:]+)*")


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
        meta: Free metadata; the engine adds provenance here.

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
        if not isinstance(self.node_id, str) or not _NODE_ID.fullmatch(self.node_id):
            raise GrainError(
                f"node_id must be a dotted path like 'hist.turn.3' (letters, digits, '_', '-'); "
                f"got {self.node_id!r}"
            )
        if not isinstance(self.origin, str):
            raise GrainError(f"origin must be a str; got {self.origin!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise GrainError(f"priority must be an int; got {self.priority!r}")
        if self.lifespan not in LIFESPANS:
            raise GrainError(
                f"lifespan must be one of 'turn', 'session', 'task'; got {self.lifespan!r}"
            )
        if self.window is not None and (not isinstance(self.window, str) or not self.window):
            raise GrainError(f"window must be a non-empty str or None; got {self.window!r}")
        if not isinstance(self.protected, bool):
            raise GrainError(f"protected must be a bool; got {self.protected!r}")
        if not isinstance(self.meta, dict):
            raise GrainError(f"meta must be a dict; got {type(self.meta).__name__}")
        if not isinstance(self.content, (str, list, dict)):
            raise GrainError(
                f"content must be str, list or dict; got {type(self.content).__name__}"
            )
        if not isinstance(self.content, str):
            try:
                content_text(self.content)
            except (TypeError, ValueError) as exc:
                raise GrainError(
                    f"content of {self.node_id!r} is not JSON-serializable: {exc}"
                ) from exc

    @property
    def text(self) -> str:
        """The content as text (what is counted and rendered)."""
        return content_text(self.content)

    @property
    def branch(self) -> str:
        """First segment of the node id (``sys``, ``hist``, ``act``...)."""
        return self.node_id.split(".", 1)[0]
