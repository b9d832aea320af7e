"""Per-message work of a render, kept between the renders of one session.

A session renders the same frozen :class:`~ctxengine.transcript.Message` objects turn after turn
(compose reuses them, hygiene returns unchanged messages as they are), so what a render derives
from one message alone can be reused while that object is alive: whether the provider receives
anything of it, and its exported provider dicts. Entries are keyed by the message's identity and
hold the message (so the identity stays valid); an entry not used by a render is dropped at the
end of the next one, so the memo follows the kept window, not the session's length.
Per-position values of the last sequence (:class:`~ctxengine.inject.align.Aligned`) spare a
warm render even that lookup per message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..transcript.changes import Change
from ..transcript.model import Message, Text, Transcript
from ..transcript.providers import sends_any
from .align import Aligned, Aligner
from .warm import Warm

__all__ = ("RenderMemo",)

V = TypeVar("V")


class _Table(Generic[V]):
    """``message -> value`` for the messages of this render and of the one before."""

    __slots__ = ("first", "first_old", "new", "old")

    def __init__(self) -> None:
        self.new: dict[int, tuple[Message, V]] = {}
        self.old: dict[int, tuple[Message, V]] = {}
        #: The messages and values of the table's first :meth:`many`, put in the table only
        #: once it is looked up (:meth:`settle`): a session's first render fills several
        #: tables, a value per message, that the renders after it mostly do not read (they
        #: take the values by position, :class:`~ctxengine.inject.align.Aligned`).
        self.first: tuple[Sequence[Message], list[V]] | None = None
        self.first_old = False  # whether those are entries of :attr:`old` (else of :attr:`new`)

    def settle(self) -> None:
        """Put the values of the first :meth:`many` in the table, if they are not yet."""
        first = self.first
        if first is not None:
            self.first = None
            ms, made = first
            table = self.old if self.first_old else self.new
            table.update(zip(map(id, ms), zip(ms, made, strict=True), strict=True))

    def get(self, m: Message, make: Callable[[Message], V]) -> V:
        """The value of ``m``, made by ``make(m)`` when no render before this one made it."""
        if self.first is not None:
            self.settle()
        key = id(m)  # valid: every entry holds its message
        entry = self.new.get(key)
        if entry is None:
            entry = self.old.get(key)
            if entry is None:
                entry = (m, make(m))
            self.new[key] = entry
        return entry[1]

    def many(self, ms: Sequence[Message], make: Callable[[Message], V]) -> list[V]:
        """``[self.get(m, make) for m in ms]``, in one loop."""
        if self.first is not None:
            self.settle()
        new, old = self.new, self.old
        if not new and not old:  # the session's first render: nothing to look up
            made = list(map(make, ms))
            if len(set(map(id, ms))) == len(ms):
                # copies: a caller may change either list after (values are spliced in place)
                self.first, self.first_old = (tuple(ms), made.copy()), False
                return made
            # a message given twice: one value for both, as below
        out: list[V] = []
        for m in ms:
            key = id(m)
            entry = new.get(key)
            if entry is None:
                entry = old.get(key)
                if entry is None:
                    entry = (m, make(m))
                new[key] = entry
            out.append(entry[1])
        return out

    def roll(self) -> None:
        """End a render: what it did not use is dropped (a table it did not use at all, as
        when the render reused the previous one's work, is kept as it is)."""
        if self.first is not None and not self.first_old:
            self.old, self.new, self.first_old = self.new, {}, True  # ``new`` is empty
        elif self.new:
            self.old, self.new = self.new, {}


class RenderMemo:
    """What renders of one session derive from each message, reused while it is unchanged.

    One table per kind of work and its parameters (provider, the transcript's source format,
    options), so a lookup is one dict access by identity.
    """

    def __init__(self) -> None:
        self._tables: dict[tuple[Any, ...], _Table[Any]] = {}
        self._aligned: dict[tuple[Any, ...], Aligned[Any]] = {}
        #: The previous renders, for a render that only dropped leading turns and appended.
        self.align = Aligner()
        self.warm = Warm(self.align)
        self._made: dict[tuple[Any, ...], Message] = {}
        self._made_old: dict[tuple[Any, ...], Message] = {}
        #: The history compose made last (see :func:`ctxengine.inject.compose.compose`).
        self.composed: Any = None
        #: (provider, max_images) -> the last image cuts made
        #: (:func:`~ctxengine.inject.images.limit_images`).
        self.image_cuts: dict[tuple[str, int | None], list[Any]] = {}
        #: The last changes of a render of merged turns put at the indices of the turns as
        #: composed: (changes, merged positions, the answer) (see ``inject.turn``).
        self.as_composed: tuple[tuple[Change, ...], list[int], tuple[Change, ...] | None] | None = (
            None
        )

    def table(self, *key: Any) -> _Table[Any]:
        """The table for ``key`` (kind of work and everything besides the message it reads)."""
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Table()
        return table

    def aligned(self, *key: Any) -> Aligned[Any]:
        """The :class:`Aligned` values for ``key`` (kind of work and its parameters)."""
        got = self._aligned.get(key)
        if got is None:
            got = self._aligned[key] = Aligned(self.align)
        return got

    def nonempty(self, t: Transcript, provider: str) -> list[bool]:
        """For each message of ``t``: whether ``provider``'s exporter sends any of its blocks
        (a list kept for the next call: not to be changed)."""
        return self.nonempty_counted(t, provider)[0]

    def nonempty_counted(self, t: Transcript, provider: str) -> tuple[list[bool], int]:
        """:meth:`nonempty`, and how many of the messages are sent (kept along the renders:
        a render that sends every message finds it out without a look at each)."""

        def make(m: Message) -> bool:
            return sends_any(m, provider, t)

        key = ("nonempty", provider, t.source_format)
        table = self.table(*key)
        return self.aligned(*key).counted(  # type: ignore[return-value]
            t.messages, make, lambda: table.many(t.messages, make)
        )

    def message(self, role: str, text: str) -> Message:
        """A one-text message made by compose, the same object as in the render before when
        the text is the same (so the work of that render is reused for it)."""
        return self.made((role, text), lambda: Message(role, (Text(text),)))  # type: ignore[arg-type]

    def made(self, key: tuple[Any, ...], make: Callable[[], Message]) -> Message:
        """The message compose made for ``key`` in this render or the one before, else
        ``make()`` (kept for the next render)."""
        m = self._made.get(key)
        if m is None:
            m = self._made_old.get(key)
            if m is None:
                m = make()
            self._made[key] = m
        return m

    def end_render(self) -> None:
        """Drop what the render before this one used and this one did not."""
        for table in self._tables.values():
            table.roll()
        self._made_old, self._made = self._made, {}
