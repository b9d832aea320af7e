"""Planning math of compaction (DESIGN.md §6): chunk sizes, oversize checks, tool-call groups,
chunking by tokens, and where to cut the history (the low-water mark).

Everything here is pure and works on per-message token counts, so it is cheap to test and to
call on every render. The numbers follow the seed design: chunks take 40 % of the summarizer's
window, falling to 15 % when messages are large, with a safety factor of 1.2 on every estimate;
a message whose estimate passes half the window is "oversized" and summarized alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..errors import ConfigError
from ..transcript import Message

__all__ = (
    "BASE_CHUNK_RATIO",
    "MIN_CHUNK_RATIO",
    "OVERSIZE_SHARE",
    "SAFETY_FACTOR",
    "adaptive_chunk_ratio",
    "chunk_by_tokens",
    "chunk_max_tokens",
    "is_oversized",
    "plan_cut",
    "should_compact",
    "split_by_token_share",
    "tool_groups",
)

BASE_CHUNK_RATIO: Final = 0.4
MIN_CHUNK_RATIO: Final = 0.15
SAFETY_FACTOR: Final = 1.2
OVERSIZE_SHARE: Final = 0.5
#: Above this average message share of the window (after the safety factor) chunks shrink.
_LARGE_MESSAGE_SHARE: Final = 0.1


def _check_window(window: int) -> None:
    if window <= 0:
        raise ConfigError(f"window is {window}; expected a positive number of tokens")


def adaptive_chunk_ratio(token_counts: Sequence[int], window: int) -> float:
    """The share of ``window`` one chunk may take: 0.4, reduced towards 0.15 as the average
    message (times the safety factor) grows past a tenth of the window.

    >>> adaptive_chunk_ratio([100] * 10, 100_000)
    0.4
    >>> adaptive_chunk_ratio([20_000] * 3, 100_000)
    0.15

    Raises:
        ValueError: ``window`` is not positive.
    """
    _check_window(window)
    if not token_counts:
        return BASE_CHUNK_RATIO
    average = sum(token_counts) / len(token_counts) * SAFETY_FACTOR
    share = average / window
    if share <= _LARGE_MESSAGE_SHARE:
        return BASE_CHUNK_RATIO
    reduction = min(share * 2, BASE_CHUNK_RATIO - MIN_CHUNK_RATIO)
    return max(MIN_CHUNK_RATIO, round(BASE_CHUNK_RATIO - reduction, 6))


def chunk_max_tokens(token_counts: Sequence[int], window: int) -> int:
    """The most tokens one chunk may hold: ``window * adaptive ratio / safety factor``."""
    return max(1, int(window * adaptive_chunk_ratio(token_counts, window) / SAFETY_FACTOR))


def is_oversized(tokens: int, window: int) -> bool:
    """Whether a message of ``tokens`` (times the safety factor) passes half of ``window``;
    such a message is summarized alone.

    Raises:
        ValueError: ``window`` is not positive.
    """
    _check_window(window)
    return tokens * SAFETY_FACTOR > window * OVERSIZE_SHARE


def tool_groups(messages: Sequence[Message]) -> list[range]:
    """Consecutive index ranges that must never be cut apart: an assistant message with tool
    calls together with the tool messages that answer it; every other message alone."""
    groups: list[range] = []
    roles = [m.role for m in messages]
    n = len(roles)
    i = 0
    while i < n:
        j = i + 1
        role = roles[i]
        if role == "tool" or (role == "assistant" and messages[i].tool_calls):
            while j < n and roles[j] == "tool":
                j += 1
        groups.append(range(i, j))
        i = j
    return groups


def _group_tokens(token_counts: Sequence[int], groups: Sequence[range]) -> list[int]:
    counts = list(token_counts)
    return [
        counts[g.start] if len(g) == 1 else sum(counts[g.start : g.stop : g.step]) for g in groups
    ]


def chunk_by_tokens(
    token_counts: Sequence[int], groups: Sequence[range], max_tokens: int
) -> list[range]:
    """Pack whole groups into chunks of at most ``max_tokens``; a group larger than that is a
    chunk of its own. Returns message index ranges, in order, covering every group.

    Raises:
        ValueError: ``max_tokens`` is not positive.
    """
    if max_tokens <= 0:
        raise ConfigError(f"max_tokens is {max_tokens}; expected a positive number of tokens")
    chunks: list[range] = []
    start: int | None = None
    stop = 0
    size = 0
    for group, tokens in zip(groups, _group_tokens(token_counts, groups), strict=False):
        if start is not None and (size + tokens > max_tokens or tokens > max_tokens):
            chunks.append(range(start, stop))
            start, size = None, 0
        if start is None:
            start = group.start
        stop, size = group.stop, size + tokens
        if tokens > max_tokens:  # oversized: alone
            chunks.append(range(start, stop))
            start, size = None, 0
    if start is not None:
        chunks.append(range(start, stop))
    return chunks


def split_by_token_share(
    token_counts: Sequence[int], groups: Sequence[range], parts: int
) -> list[range]:
    """Split into at most ``parts`` chunks of about equal token share, at group boundaries.

    Raises:
        ValueError: ``parts`` is below 1.
    """
    if parts < 1:
        raise ConfigError(f"parts is {parts}; expected at least 1")
    sizes = _group_tokens(token_counts, groups)
    total = sum(sizes)
    if not groups:
        return []
    share = total / parts
    chunks: list[range] = []
    start = groups[0].start
    running = 0
    for group, tokens in zip(groups, sizes, strict=False):
        running += tokens
        if len(chunks) < parts - 1 and running >= share * (len(chunks) + 1):
            chunks.append(range(start, group.stop))
            start = group.stop
    if start < groups[-1].stop:
        chunks.append(range(start, groups[-1].stop))
    return chunks


def should_compact(tokens: int, budget: int, high_water: float = 0.9) -> bool:
    """Whether a payload of ``tokens`` passed the high-water mark of ``budget``."""
    return tokens > budget * high_water


def _protected_start(messages: Sequence[Message], groups: Sequence[range], keep: int) -> int:
    """Start of the protected tail: the group of the ``keep``-th last assistant turn (a turn
    is an assistant message with the results of its tool calls); compaction summaries never
    count as part of it."""
    from .facts import is_summary

    if keep <= 0:
        return len(messages)
    seen = 0
    start = len(messages)
    for g in reversed(groups):
        if is_summary(messages[g.start]):
            break
        start = g.start
        if messages[g.start].role == "assistant":
            seen += 1
            if seen >= keep:
                break
    return start


def plan_cut(
    messages: Sequence[Message],
    token_counts: Sequence[int],
    *,
    budget: int,
    low_water: float = 0.75,
    tail_ratio: float = 0.2,
    keep_assistant_turns: int = 3,
) -> int:
    """Where to cut the history: ``messages[:cut]`` is compacted, ``messages[cut:]`` kept
    verbatim. Leading system messages are never compacted.

    The kept tail is the protected tail (from the ``keep_assistant_turns``-th last assistant
    turn on) widened backwards, group by group, while it stays within
    ``tail_ratio`` of ``budget`` — and within ``low_water * budget`` in all. The cut never
    parts a user message from the assistant message answering it (the next one, tool results
    aside): an answer outside the protected tail is compacted with its question, one opening
    the protected tail keeps its question when the kept messages stay within
    ``low_water * budget`` (else both are compacted). Compacting down to
    the low-water mark leaves room for the history to grow at its end before the next
    compaction, so the prefix of consecutive payloads stays byte-stable in between.

    Returns 0 (or the number of leading system messages) when there is nothing to compact.

    Raises:
        ValueError: a ratio is outside (0, 1] or ``budget`` is not positive.
    """
    if budget <= 0:
        raise ConfigError(f"budget is {budget}; expected a positive number of tokens")
    for name, value in (("low_water", low_water), ("tail_ratio", tail_ratio)):
        if not 0 < value <= 1:
            raise ConfigError(f"{name} is {value}; expected a fraction in (0, 1]")
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    body = messages[head:]
    groups = tool_groups(body)
    if not groups:
        return head
    protected = _protected_start(body, groups, keep_assistant_turns)
    start = protected
    tail = sum(token_counts[head + start :])
    limit = min(tail_ratio, low_water) * budget
    for g in reversed([g for g in groups if g.stop <= start]):
        size = sum(token_counts[head + k] for k in g)
        if tail + size > limit:
            break
        tail += size
        start = g.start
    question = _asked(body, start)
    if question is not None:
        # The cut would keep an answer and summarize its question: the kept history would
        # open with an answer after a summary calling its question pending. Outside the
        # protected tail the answer is summarized too (that only frees more); an answer that
        # opens the protected tail keeps its question verbatim, when the kept messages stay
        # within the low-water mark, else it goes into the summary with it.
        asked = sum(token_counts[head + question : head + start])
        if start < protected or tail + asked > low_water * budget:
            start = next((g.stop for g in groups if g.start == start), len(body))
        else:
            start = question
    return head + start


def _asked(body: Sequence[Message], start: int) -> int | None:
    """The index of the user message that ``body[start]`` answers (the message right before
    it, tool results aside, when ``body[start]`` is an assistant's), or None: the question a
    cut at ``start`` would part from its answer. An earlier summary is no question."""
    from .facts import is_summary

    if not 0 < start < len(body) or body[start].role != "assistant":
        return None
    j = start - 1
    while j >= 0 and body[j].role == "tool":
        j -= 1
    if j < 0 or body[j].role != "user" or is_summary(body[j]):
        return None
    return j
