"""Small frozen records of what hygiene and the window guard found or changed.

All are JSON-serializable through ``to_dict()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ("Change", "Problem", "Report")


@dataclass(frozen=True, slots=True)
class Problem:
    """One rule a provider enforces that the transcript breaks.

    Attributes:
        code: Stable machine name (``"missing_result"``, ``"orphan_result"``...).
        index: Index of the offending message.
        message: What is wrong and what was expected.
        call_id: The tool call id involved, if any.
    """

    code: str
    index: int
    message: str
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form."""
        return {
            "code": self.code,
            "index": self.index,
            "message": self.message,
            "call_id": self.call_id,
        }


@dataclass(frozen=True, slots=True)
class Change:
    """One change made to a transcript.

    Attributes:
        rule: The function that made it (``"repair_pairing"``, ``"prune_tool_results"``...).
        action: What was done (``"synthetic_result"``, ``"dropped_orphan"``, ``"soft_trim"``...).
        index: Index of the message concerned, in the transcript given to that function.
        detail: Human-readable explanation.
        call_id: The tool call id involved, if any.
    """

    rule: str
    action: str
    index: int | None
    detail: str
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form."""
        return {
            "rule": self.rule,
            "action": self.action,
            "index": self.index,
            "detail": self.detail,
            "call_id": self.call_id,
        }


@dataclass(frozen=True, slots=True)
class Report:
    """The changes one or more steps made (empty when nothing changed).

    Attributes:
        changes: Every change, in the order made.
        id_map: Tool-call ids renamed by :func:`~ctxengine.hygiene.sanitize_tool_ids`,
            as ``(old, new)`` pairs in transcript order.
    """

    changes: tuple[Change, ...] = ()
    id_map: tuple[tuple[str, str], ...] = ()

    @property
    def changed(self) -> bool:
        """True when at least one change was made."""
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        """Number of changes per action."""
        out: dict[str, int] = {}
        for c in self.changes:  # not a Counter: every render asks, mostly of no change
            out[c.action] = out.get(c.action, 0) + 1
        return out

    def of(self, action: str) -> tuple[Change, ...]:
        """The changes with this action."""
        return tuple(c for c in self.changes if c.action == action)

    @staticmethod
    def merge(reports: Iterable[Report]) -> Report:
        """One report holding the changes of several, in order."""
        changes: list[Change] = []
        id_map: list[tuple[str, str]] = []
        for r in reports:
            changes.extend(r.changes)
            id_map.extend(r.id_map)
        return Report(tuple(changes), tuple(id_map))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form."""
        return {
            "changed": self.changed,
            "counts": self.counts(),
            "changes": [c.to_dict() for c in self.changes],
            "id_map": [list(p) for p in self.id_map],
        }
