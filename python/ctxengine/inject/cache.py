"""Prompt-cache breakpoints for Anthropic (up to 4 ``cache_control`` markers).

Anthropic caches the prompt prefix that ends at a marked block; a later request reads it back
when its prefix is byte-identical up to that block (the lookup also checks about 20 blocks
before each marker). So markers belong on content that will not change: the system prompt
first, then message boundaries, newest last. :func:`plan_cache_breakpoints` says where and
why; the Anthropic exporter puts the marker on the last cacheable block of each planned message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ..errors import AdapterError
from ..transcript.model import Thinking, Transcript
from ..transcript.providers import exported_blocks, family_of

__all__ = ("MAX_BREAKPOINTS", "Breakpoint", "plan_cache_breakpoints")

MAX_BREAKPOINTS: Final = 4


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """A cache marker on the last cacheable block of message ``index``.

    Attributes:
        index: Index of the message in the transcript that is rendered.
        reason: Why this prefix is worth caching.
    """

    index: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form."""
        return {"index": self.index, "reason": self.reason}


def _cacheable(t: Transcript, i: int) -> bool:
    m = t.messages[i]
    blocks = exported_blocks(m, "anthropic", family_of(m, t))
    return any(not isinstance(b, Thinking) for b in blocks)


def _last_cacheable(t: Transcript, upto: int, floor: int = 0) -> int | None:
    for i in range(upto, floor - 1, -1):
        if _cacheable(t, i):
            return i
    return None


def _candidates(t: Transcript) -> list[tuple[int | None, str]]:
    msgs = t.messages
    lead = next((i for i, m in enumerate(msgs) if m.role != "system"), len(msgs))
    users = [i for i, m in enumerate(msgs) if m.role == "user" and i >= lead]
    return candidates_at(t, lead, users[0] if users else None, users[-1] if users else None)


def candidates_at(
    t: Transcript, lead: int, first_user: int | None, last_user: int | None
) -> list[tuple[int | None, str]]:
    """The candidate markers of :func:`plan_cache_breakpoints`, given the index of the first
    non-system message and of the first and last user message from there (None: no user)."""
    msgs = t.messages
    out: list[tuple[int | None, str]] = []
    if lead:
        out.append((_last_cacheable(t, lead - 1), "system prompt: identical on every request"))
    if len(msgs) > lead:
        out.append(
            (
                _last_cacheable(t, len(msgs) - 1, lead),
                "tail: the whole history, read back by the next request",
            )
        )
    if first_user is not None and last_user is not None and last_user != first_user:
        out.append(
            (
                _last_cacheable(t, last_user - 1, lead),
                "previous turn: the prefix the previous request ended with",
            )
        )
    if first_user is not None:
        out.append(
            (
                _last_cacheable(t, first_user, lead),
                "task prefix: up to the first user message, never pruned or limited away",
            )
        )
    return out


def check_breakpoints(n: object) -> None:
    """Raise :class:`AdapterError` unless ``n`` is a valid ``cache_breakpoints`` value."""
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_BREAKPOINTS:
        raise AdapterError(
            f"cache_breakpoints is {n!r}; expected an int from 0 to {MAX_BREAKPOINTS}"
        )


def choose(candidates: list[tuple[int | None, str]], n: int) -> list[Breakpoint]:
    """The first ``n`` distinct candidates, in message order."""
    chosen: dict[int, str] = {}
    for index, reason in candidates:
        if len(chosen) >= n:
            break
        if index is not None and index not in chosen:
            chosen[index] = reason
    return [Breakpoint(i, chosen[i]) for i in sorted(chosen)]


def plan_cache_breakpoints(t: Transcript, n: int = MAX_BREAKPOINTS) -> list[Breakpoint]:
    """Where to put up to ``n`` Anthropic cache markers on ``t``, in message order.

    Priority: the system prompt, the end of the history (the next request reads it back), the
    end of the previous turn (what the previous request wrote), the first user message (the
    task statement, a prefix pruning never touches). Plan on the transcript you render, after
    hygiene (:func:`ctxengine.transcript.render` does).

    Raises:
        AdapterError: ``n`` is not between 0 and 4.
    """
    check_breakpoints(n)
    if n == 0:
        return []
    return choose(_candidates(t), n)
