"""The default summarizer: deterministic, offline, extractive.

It writes what a model needs to carry on — the goal, the decisions taken, where the work stands,
every user request (first line; the newest in full), the files read and modified, the tool
failures and the open asks — and quotes tool output instead of obeying it. Given earlier
summaries among its messages it merges them section by section, so a summary of summaries
keeps every line of its parts (only the size cap shortens, and says so).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final

from .._core import read_prose
from ..errors import ConfigError
from ..tokens import Tokenizer
from ..transcript import Message
from .facts import (
    MARK_EVERY,
    MAX_LINE,
    RESUMABLE,
    extract_facts,
    facts_of,
    first_line,
    longest_shared,
    memoized,
    message_scope,
    paused_collector,
    scope_memo,
    stretch_memo,
)
from .protocol import Count, counter
from .requests import goal_text, written_by_harness
from .sections import SummaryParts, build_parts, cap_summary, request_lines

__all__ = ("ExtractiveSummarizer", "goal_text")

_FENCE: Final = re.compile(r"```.*?(?:```|\Z)", re.S)
#: The lookahead (a first letter of one of the phrases: what ``re.I`` folds to it as well) lets
#: the search skip the positions no phrase can start at, about twice as fast; the matches are
#: the same.
_DECISION: Final = re.compile(
    r"(?=[iwldgcsrtpaIWLDGCSRTPA])\b(?:I'll|I will|we'll|we will|let's|let me|decided|decision|"
    r"going to|instead of|chose|switch(?:ed)? to|the fix is|root cause|plan is|approach)\b",
    re.I,
)
_GOAL_CHARS: Final = 600
#: A markdown list marker at the start of a line (``-``, ``*``, ``+``, ``1.``, ``1)``): a
#: section lists its lines with a marker of its own.
_LIST_MARKER: Final = re.compile(r"^(?:[-*+]|\d{1,3}[.)])\s+")


@dataclass(slots=True)
class _Stretch:
    """One summarizer's reading of one stretch of messages inside a message scope: the
    uncapped parts, their rendering and its tokens, and the summary per cap asked for."""

    owner: ExtractiveSummarizer
    messages: tuple[Message, ...]
    parts: SummaryParts
    text: str | None = None
    tokens: int | None = None
    capped: dict[int, str] = field(default_factory=dict)


def _prose(m: Message, text: str) -> tuple[tuple[str, ...], str]:
    """The decision lines and the first line of an assistant message's text (read once per
    message inside a :func:`~ctxengine.compaction.facts.message_scope`): prose lines (code
    fences blanked) of 12 to 240 characters that state a decision, whitespace collapsed, and
    :func:`~ctxengine.compaction.facts.first_line`. An ASCII text is read natively
    (``_core.read_prose``), any other by :func:`_scanned_prose`, the reference."""
    if not text.isascii():  # (see _read_identifiers)
        return _mixed_prose(text)
    native = read_prose(text, MAX_LINE)
    return native if native is not None else _scanned_prose(text)


def _mixed_prose(text: str) -> tuple[tuple[str, ...], str]:
    """:func:`_scanned_prose` of a text that is not ASCII: its lines that are not ASCII in
    Python, each run of ASCII lines between them natively (``_core.read_prose``, one call a
    run: such texts are mostly ASCII, an arrow or a check mark in a few lines).

    A line states a decision whatever the lines around it (once the fences are blanked,
    which is done first here too), and a run of lines, joined by newlines, splits back into
    the same lines natively (no ASCII line holds a line break), so the decisions are those
    of the whole text, in order. The first line is read as :func:`_scanned_prose` reads it."""
    fenced = "```" in text
    prose = _FENCE.sub(" ", text) if fenced else text
    if not _may_decide(prose):
        return _scanned_prose(text)  # the first line alone
    first: str | None = None
    found: list[str] = []
    run: list[str] = []  # ASCII lines not read yet
    for raw in prose.splitlines():
        if first is None:
            line = " ".join(raw.split())
            first = line or None
        if raw.isascii():
            run.append(raw)
            continue
        if run:
            found += _run_decisions(run)
            run = []
        line = " ".join(raw.split())
        if (
            12 <= len(line) <= 240
            and not raw.startswith(("    ", "\t", "|", ">"))
            and _DECISION.search(line)
        ):
            found.append(unlisted(line))
    if run:
        found += _run_decisions(run)
    if fenced or first is None:
        return tuple(found), unlisted(first_line(text))
    return tuple(found), _clipped(unlisted(first))


def _run_decisions(lines: list[str]) -> tuple[str, ...]:
    """The decision lines of ASCII ``lines`` (no fence among them), read natively."""
    text = "\n".join(lines)
    native = read_prose(text, MAX_LINE)
    return (native if native is not None else _scanned_prose(text))[0]


def _scanned_prose(text: str) -> tuple[tuple[str, ...], str]:
    """:func:`_prose` in Python (any text): the first line is taken from the same lines as
    the decisions when the text has no fence (one pass over it instead of two)."""
    fenced = "```" in text
    prose = _FENCE.sub(" ", text) if fenced else text
    if not _may_decide(prose):  # no line states a decision: only the first line is read
        if fenced:
            return (), unlisted(first_line(text))
        return (), _clipped(unlisted(first_line(text, sys.maxsize)))  # the first line, whole
    first: str | None = None
    found: list[str] = []
    for raw in prose.splitlines():
        line = " ".join(raw.split())
        if first is None and line:
            first = line
        if (
            12 <= len(line) <= 240
            and not raw.startswith(("    ", "\t", "|", ">"))
            and _DECISION.search(line)
        ):
            found.append(unlisted(line))
    if fenced or first is None:
        return tuple(found), unlisted(first_line(text))
    return tuple(found), _clipped(unlisted(first))


def _clipped(line: str) -> str:
    """``line``, cut to :data:`MAX_LINE` characters with an ellipsis when longer."""
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def _may_decide(text: str) -> bool:
    """Whether a line of ``text`` may state a decision (:data:`_DECISION` may match it once
    its whitespace is collapsed); False only when none does. A short text is searched with
    the pattern, whitespace runs taken for the phrases' spaces (:data:`_MAY_DECIDE`); a long
    one may (its lines are searched one by one then), several times faster than the pattern
    on a long text. (The native reading of an ASCII text first looks for a word of each
    phrase: rust/src/reading.rs.)"""
    return len(text) >= _WORDS_FROM or _MAY_DECIDE.search(text) is not None


#: :data:`_DECISION` with a run of whitespace (a line break too) for each space of a phrase.
_MAY_DECIDE: Final = re.compile(_DECISION.pattern.replace(" ", r"\s+"), re.I)
#: From this length on :func:`_may_decide` takes a text as one that may decide.
_WORDS_FROM: Final = 256


def unlisted(line: str) -> str:
    """``line`` without the list marker it starts with, if any (``- x``, ``* x``, ``2. x``):
    Decisions and Progress list their lines with a ``- `` of their own."""
    return _LIST_MARKER.sub("", line, count=1) if line[:1] in "-*+0123456789" else line


class ExtractiveSummarizer:
    """Deterministic, offline summary of a conversation (see the module docstring).

    Args:
        max_items: Most decisions and progress notes kept (the newest).
        tokenizer: Counts tokens for ``max_tokens`` (a :class:`~ctxengine.Tokenizer`, a model
            or encoding name, or a ``str -> int`` function); default ``o200k_base``.
    """

    #: It never changes the messages it reads, so :func:`~ctxengine.compaction.protocol.
    #: call_summarizer` hands it the session's own (what it read of each is kept by identity);
    #: any other summarizer, a subclass of this one too, gets copies.
    reads_only: ClassVar[bool] = True

    def __init__(self, max_items: int = 12, *, tokenizer: Tokenizer | Count | str | None = None):
        if max_items < 1:
            raise ConfigError(f"max_items is {max_items}; expected at least 1")
        self.max_items = max_items
        self._count = counter(tokenizer)

    async def summarize(
        self,
        messages: Sequence[Message],
        instructions: str = "",
        *,
        max_tokens: int | None = None,
    ) -> str:
        """Summarize ``messages`` in at most ``max_tokens`` (None: uncapped).

        ``instructions`` is accepted for the protocol; an extractive summary does not follow
        prose instructions. Also callable as ``summarize(messages, instructions)``.
        """
        return self.summarize_sync(messages, max_tokens=max_tokens)

    def summarize_sync(self, messages: Sequence[Message], *, max_tokens: int | None = None) -> str:
        """The same summary, without an event loop."""
        with message_scope(), paused_collector():  # the facts and the prose read once
            return self._summary(messages, max_tokens)

    def summary_prose(self, messages: Sequence[Message]) -> str:
        """The prose of a summary of ``messages`` — the goal, the newest decisions and
        progress notes — without its structured sections and uncapped, read in one pass over
        the whole stretch (each message's prose once inside a message scope). What the
        compaction pipeline takes from this summarizer: it builds the sections from the
        stretch's facts itself and caps the summary once."""
        with message_scope(), paused_collector():
            return self._body(messages)

    def _summary(self, messages: Sequence[Message], max_tokens: int | None) -> str:
        """:meth:`summarize_sync` inside a message scope: a stretch read before (the same
        messages: the trials of a landing share most of their chunks) is not read again, and
        a summary under a cap is the same under any larger one (the cap changes nothing
        that fits: :func:`~ctxengine.compaction.sections.capped_parts`)."""
        memo = stretch_memo()
        key = (id(self), self.max_items, *map(id, messages))
        entry: _Stretch | None = memo.get(key) if memo is not None else None
        if (
            entry is None
            or entry.owner is not self
            or len(entry.messages) != len(messages)
            or any(a is not b for a, b in zip(entry.messages, messages, strict=True))
        ):
            facts = extract_facts(messages)
            parts = build_parts(facts, self._body(messages), len(messages))
            entry = _Stretch(self, tuple(messages), parts)
            if memo is not None:
                memo[key] = entry
        if entry.text is None:
            entry.text = entry.parts.render()
        if max_tokens is None:
            return entry.text
        hit = entry.capped.get(max_tokens)
        if hit is None:
            if entry.tokens is None:
                entry.tokens = self._count(entry.text)
            if entry.tokens <= max_tokens:
                hit = entry.text
            else:
                hit = cap_summary(entry.parts, max_tokens, self._count)
            entry.capped[max_tokens] = hit
        return hit

    def _body(self, messages: Sequence[Message]) -> str:
        read = _prose_scan(messages)
        decisions, progress = read.decisions, read.progress
        keep = self.max_items
        out: list[str] = []
        goal = read.goal or read.fallback
        if goal:
            goal = goal if len(goal) <= _GOAL_CHARS else goal[: _GOAL_CHARS - 1] + "…"
            out += ["## Goal", goal]
        decided = list(dict.fromkeys(decisions))[-keep:]
        if decided:
            out += ["", "## Decisions", *(f"- {d}" for d in decided)]
        # a message's first line that states a decision is listed once, under Decisions
        # (the prose is cut from its end: Progress goes first); a decision older than the
        # kept ones stays a progress note
        listed = set(decided)
        recent = [p for p in dict.fromkeys(progress) if p and p not in listed][-min(keep, 5) :]
        if recent:
            out += ["", "## Progress", *(f"- {p}" for p in recent)]
        return "\n".join(out)


class _ProseScan:
    """What :meth:`ExtractiveSummarizer._body` reads of a stretch before it writes: the goal
    (the first substantive request, :func:`goal_text`), its fallback (the first user message
    the harness did not write), the decisions and the progress notes, oldest first. Read
    message by message, each step depending only on what came before; a scan of a long
    stretch is kept in the stretch memo, with marks every :data:`MARK_EVERY` messages, so a
    stretch sharing a prefix with it (the trials of a landing) resumes it instead of reading
    the prefix again: the same steps on the same messages, so the same reading."""

    __slots__ = ("decisions", "fallback", "goal", "marks", "messages", "progress")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.goal: str | None = None
        self.fallback: str | None = None
        self.decisions: list[str] = []
        self.progress: list[str] = []
        #: (messages read, goal, fallback, decisions, progress) before a message (the lists
        #: only grow: their lengths)
        self.marks: list[tuple[int, str | None, str | None, int, int]] = []

    def resumed(self, at: int) -> _ProseScan:
        """A new scan of this one's first messages, up to the last mark at most ``at``."""
        n, goal, fallback, decided, noted = next(m for m in reversed(self.marks) if m[0] <= at)
        out = _ProseScan()
        out.messages = self.messages[:n]
        out.goal, out.fallback = goal, fallback
        out.decisions = self.decisions[:decided]
        out.progress = self.progress[:noted]
        out.marks = [m for m in self.marks if m[0] < n]  # extend marks n again
        return out

    def extend(self, messages: Sequence[Message]) -> None:
        """Read ``messages`` after those read so far."""
        goal, fallback = self.goal, self.fallback
        decisions, progress, done = self.decisions, self.progress, self.messages
        n = len(done)
        memo = scope_memo()
        for m in messages:
            if n % MARK_EVERY == 0:
                self.marks.append((n, goal, fallback, len(decisions), len(progress)))
            n += 1
            done.append(m)
            seen = memo.get(id(m)) if memo is not None else None
            read = seen.facts if seen is not None and seen.message is m else None
            if read is None:
                read = facts_of(m)  # the text, and an earlier summary's sections, read once
            if read.carried is not None:
                carried = read.carried
                if goal is None:
                    earlier = " ".join(carried.get("Goal", []))
                    goal = (earlier if goal_text(earlier) else None) or _first_request(carried)
                    fallback = fallback or earlier or _first_request(carried, any_kind=True)
                # an earlier version's "- - x" (a list item of the source kept its marker)
                decisions += map(unlisted, carried.get("Decisions", []))
                progress += map(unlisted, carried.get("Progress", []))
                continue
            text = read.text
            if m.role == "user" and goal is None and text.strip():
                if fallback is None and not written_by_harness(text, m.meta):
                    fallback = " ".join(text.split())
                wanted = goal_text(text, m.meta)
                if wanted is not None:
                    goal = " ".join(wanted.split())
            elif m.role == "assistant" and text.strip():
                # its reading, from the entry at hand when the scope has one (a stretch is
                # read once per trial of a landing)
                if seen is not None and seen.message is m:
                    prose = seen.prose
                    if prose is None:
                        prose = seen.prose = _prose(m, seen.text)  # memoized(m, ...), inline
                else:
                    prose = memoized(m, "prose", _prose)
                found, first = prose
                decisions += found
                progress.append(first)
        self.goal, self.fallback = goal, fallback


def _prose_scan(messages: Sequence[Message]) -> _ProseScan:
    """The :class:`_ProseScan` of ``messages``: from :func:`RESUMABLE` messages on inside a
    message scope, one kept in the stretch memo when it read them all, else one resumed from
    the kept scan sharing the longest prefix with them (kept for the next stretch)."""
    memo = stretch_memo()
    if memo is None or len(messages) < RESUMABLE:
        scan = _ProseScan()
        scan.extend(messages)
        return scan
    scans: list[_ProseScan] = memo.setdefault(("prose scans", id(messages[0])), [])
    best, shared = longest_shared(scans, messages)
    if best is not None and shared == len(best.messages) == len(messages):
        return best
    scan = best.resumed(shared) if best is not None and shared >= MARK_EVERY else _ProseScan()
    scan.extend(messages[len(scan.messages) :])
    scans.append(scan)
    return scan


def _first_request(carried: dict[str, list[str]], *, any_kind: bool = False) -> str | None:
    """An earlier summary's first substantive request (:func:`goal_text`; ``any_kind``: its
    first request), when the cap took its goal with the prose or its goal is not one: the
    goal stays the session's first request instead of the first one of the newer stretch."""
    # a compact list's excerpts one by one: its first is the oldest request still listed (it
    # was skipped, and the goal became the newest request, read after it)
    for line in request_lines(carried.get("Requests", [])):
        if line.startswith("("):  # "(N earlier requests omitted)"
            continue
        if any_kind:
            return line
        wanted = goal_text(line)
        if wanted is not None:
            return " ".join(wanted.split())
    return None
