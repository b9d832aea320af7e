"""Sequences of messages that continue one another, and values reused along them.

A warm render's messages are mostly those of the render before, at shifted positions: leading
messages dropped, a few new ones at either end, now and then one kept message replaced (a soft
trim). :func:`align` finds that correspondence in constant time and checks it with one C-level
pass; :class:`Aligned` keeps per-message values of the last sequence by position and reuses them
along it, so the work follows the messages that changed, not the length of the sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice
from operator import is_, is_not
from typing import Final, Generic, TypeVar

from .._core import differing
from ..transcript.model import Message

__all__ = ("Aligned", "Aligner", "Alignment", "align", "splice")

V = TypeVar("V")

#: New messages looked for at either end of a sequence by :func:`align`.
_HEAD: Final = 8
_TAIL: Final = 16
#: Kept positions that may hold another message before :func:`align` gives up.
_MAX_REPLACED: Final = 8


Alignment = tuple[int, int, list[int]]


def align(new: Sequence[Message], old: Sequence[Message], lead: int = 0) -> Alignment | None:
    """Where ``new`` continues ``old``: ``(cut, start, replaced)`` such that ``new[cut:end]``
    holds the messages ``old[start:]`` (the same objects, ``end = cut + len(old) - start``),
    except at the positions of ``new`` listed in ``replaced`` (at most a few); what comes
    before ``cut`` (at most a few messages from ``lead`` on) and after ``end`` (at most a few)
    is new. None when ``new`` is not such a continuation.

    Found in constant time from the last message of ``old`` and checked with one native pass
    over the two tuples' item arrays (a C-level pass for other sequences).
    """
    if not old or len(new) <= lead:
        return None
    if new is old and not lead:
        return 0, 0, []
    last = old[-1]
    size = len(new)
    for k in range(min(_TAIL, size - lead)):
        if new[size - 1 - k] is last:
            end = size - k
            break
    else:
        return None
    for cut in range(lead, min(lead + _HEAD, end)):
        start = len(old) - (end - cut)
        if start < 0:
            continue
        if old[start] is not new[cut]:
            continue
        if type(new) is tuple and type(old) is tuple:  # the item arrays, objects untouched
            diff = differing(new, cut, old, start, end - cut, _MAX_REPLACED)
            return None if diff is None else (cut, start, [cut + j for j in diff])
        if all(map(is_, islice(new, cut, end), islice(old, start, None))):
            return cut, start, []
        flags = list(map(is_not, islice(new, cut, end), islice(old, start, None)))
        replaced: list[int] = []
        j = flags.index(True)
        while len(replaced) < _MAX_REPLACED:
            replaced.append(cut + j)
            try:
                j = flags.index(True, j + 1)
            except ValueError:
                return cut, start, replaced
        return None
    return None


class Aligner:
    """:func:`align` that remembers its last answer: the stages of one render align the same
    two transcripts in turn (what hygiene was given now and the render before), and the
    C-level pass is made once for them."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[Sequence[Message], Sequence[Message], int, Alignment] | None = None

    def __call__(
        self, new: Sequence[Message], old: Sequence[Message], lead: int = 0
    ) -> Alignment | None:
        last = self._last
        if last is not None and last[0] is new and last[1] is old and last[2] <= lead:
            cut, start, replaced = last[3]
            if lead <= cut:
                return cut, start, list(replaced)
            # the same correspondence, less its first ``lead - cut`` kept messages
            if lead not in replaced and lead < cut + len(old) - start:
                return lead, start + lead - cut, [i for i in replaced if i > lead]
        got = align(new, old, lead)
        self._last = None if got is None else (new, old, lead, got)
        return got


class Aligned(Generic[V]):
    """The values of the messages of the last sequence it was given, by position: a sequence
    that continues it (see :func:`align`) reuses the values of the messages they share, only
    the new ones are made."""

    __slots__ = ("align", "msgs", "total", "values")

    def __init__(self, aligner: Aligner | None = None) -> None:
        self.align = aligner or Aligner()
        self.msgs: Sequence[Message] = ()
        self.values: list[V] = []
        #: ``sum(values)`` when :meth:`counted` made them, else None.
        self.total: int | None = None

    def many(
        self, ms: Sequence[Message], make: Callable[[Message], V], fallback: Callable[[], list[V]]
    ) -> list[V]:
        """``[make(m) for m in ms]``, reusing the values of the sequence before when ``ms``
        continues it, else ``fallback()``. The list is kept, and changed in place by the next
        call: callers must neither change it nor hold it past that call."""
        return self._spliced(ms, make, fallback, False)

    def counted(
        self,
        ms: Sequence[Message],
        make: Callable[[Message], int],
        fallback: Callable[[], list[int]],
    ) -> tuple[list[int], int]:
        """:meth:`many` of int (or bool) values, and their sum: the sum before, less the values
        of the messages dropped, plus those of the new ones, so that a caller asking whether any
        value is set (or how many) looks at what changed, not at every message."""
        values = self._spliced(ms, make, fallback, True)  # type: ignore[arg-type]
        return values, self.total  # type: ignore[return-value]

    def _spliced(
        self,
        ms: Sequence[Message],
        make: Callable[[Message], V],
        fallback: Callable[[], list[V]],
        counting: bool,
    ) -> list[V]:
        """The values of ``ms``: the previous list with the values of the dropped messages cut
        and those of the new ones made, in place; with ``counting``, :attr:`total` kept along
        (else None)."""
        got = self.align(ms, self.msgs)
        total = self.total if counting else None
        if got is None or (counting and total is None):
            values = fallback()
            total = sum(values) if counting else None  # type: ignore[arg-type]
        else:
            cut, start, replaced = got
            old = self.values
            end = cut + len(old) - start
            new = list(map(make, ms[:cut])) if cut else []
            new += map(make, ms[end:])
            again = [make(ms[i]) for i in replaced] if replaced else ()
            # everything made: the previous list is taken over (its dropped head cut and the
            # new values put at either end in place, no copy of the window) only now, so that
            # a ``make`` that raises leaves the values of the last sequence as they were
            if total is not None:
                total += sum(new)  # type: ignore[arg-type]
                if start:
                    total -= sum(islice(old, start))  # type: ignore[arg-type]
            values = splice(old, start, new, cut)
            for i, v in zip(replaced, again, strict=True):
                if total is not None:
                    total += v - values[i]  # type: ignore[operator]
                values[i] = v
        self.msgs, self.values, self.total = ms, values, total
        return values


def splice(column: list[V], k: int, new: list[V], head: int) -> list[V]:
    """``column`` (changed in place: a render takes over the previous one's list, no copy of
    the window) less its first ``k`` values, between the first ``head`` values of ``new`` and
    the rest of them."""
    if k or head:
        column[:k] = new[:head]
    column += new[head:] if head else new
    return column
