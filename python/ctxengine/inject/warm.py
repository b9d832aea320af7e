"""Warm renders: a render that follows what changed since the session's previous render.

A session's renders are mostly the previous transcript with whole leading turns dropped and new
messages appended: the same frozen :class:`Message` objects in the middle. When the previous
render needed no hygiene (or only the bootstrap user turn of Anthropic/Gemini), its cleaned
messages, exported provider dicts and per-message token counts are reused for that middle part,
and only the messages new at either end are checked against the hygiene rules, exported and
counted. The rules are checked exactly as :func:`~ctxengine.hygiene.clean` would find them
broken; anything else (an edit of a sent message, a result answering a call of the kept part, a
new message hygiene would change, ...) is not handled here and the render takes the full path.

Messages are split in three parts: ``lead`` (the leading system messages), an optional
bootstrap user turn, and the history. History messages carry *serials* (their index plus
``Record.hoff``) that stay the same while a message is kept, so the turn starts and user
positions of the previous render are reused by slicing, never renumbered.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from gc import is_tracked
from itertools import chain, islice
from operator import attrgetter, is_not
from typing import Any, Final

from .._core import Handout, fresh_tree, hand_out
from ..tokens import file_part_tokens, get_tokenizer, message_strings
from ..transcript.changes import Change, Report
from ..transcript.model import Message, Text, Transcript
from ..transcript.providers import (
    STRICT_ALTERNATION,
    exported_blocks,
    family_of,
    id_ok,
    strip_trailing_space,
)
from .adapters.anthropic import cache_marker, marked, message_blocks
from .adapters.gemini import in_call_order, message_parts
from .adapters.openai import message_dicts
from .adapters.responses import instructions_of, message_items
from .align import Aligner, Alignment, splice
from .cache import Breakpoint, candidates_at, choose
from .ids import fits

__all__ = ("BOOTSTRAP_TEXT", "Record", "Warm", "pieces", "trusted_transcript")

#: The text of the user turn hygiene puts first when a history does not start with one.
BOOTSTRAP_TEXT: Final = "(session bootstrap)"
_ROLE: Final = attrgetter("role")
_TURNS: Final = frozenset({"anthropic", "gemini"})
_MESSAGE_OVERHEAD: Final = 4
_REPLY_PRIMING: Final = 3

Pieces = list[dict[str, Any]]

#: Whether copies handed out before may be handed out again: their reference counts are exact
#: only while one thread at a time runs Python (a free-threaded interpreter without its GIL
#: splits them per thread), so there every payload is copied anew.
_REHAND: Final = getattr(sys, "_is_gil_enabled", lambda: True)()


def trusted_transcript(messages: tuple[Message, ...], source_format: str | None) -> Transcript:
    """A transcript of messages already known to be :class:`Message` objects (no re-check)."""
    t = object.__new__(Transcript)
    object.__setattr__(t, "messages", messages)
    object.__setattr__(t, "source_format", source_format)
    object.__setattr__(t, "meta", {})
    return t


def _bootstrap() -> Message:
    return Message("user", (Text(BOOTSTRAP_TEXT),), meta={"bootstrap": True})


def _boot_report(lead: int, role: str) -> Report:
    change = Change("fix_turn_order", "bootstrap_user", lead, f"history started with {role}")
    return Report((change,))


@dataclass(slots=True, eq=False)
class Record:
    """What one render made, in the parts the next render can reuse."""

    key: tuple[Any, ...]
    src: Transcript  # the transcript given to render
    ids: list[int]  # id() of each message of src
    lead: int  # leading system messages
    boot: Message | None  # the bootstrap user turn hygiene put after them
    cleaned: Transcript
    report: Report
    calls: set[str]  # tool call ids of src (and possibly of messages dropped since)
    hist_system: bool  # a system message in the history
    lead_pieces: list[Pieces]  # exported pieces of each lead message (and of boot, last)
    pieces: list[Pieces]  # exported pieces of each history message
    hoff: int  # serial of history message h is h + hoff
    tstart: list[int] = field(default_factory=list)  # serials of history turn starts
    turns: list[dict[str, Any]] = field(default_factory=list)  # the history turns, unmarked
    users: list[int] = field(default_factory=list)  # serials of history user messages
    payload: dict[str, Any] = field(default_factory=dict)
    breakpoints: tuple[Breakpoint, ...] = ()
    instructions: str | None = None  # OpenAI Responses
    # token counts, by model: (lead and boot, per history message, the sum of those)
    counts: dict[str, tuple[int, list[int], int]] = field(default_factory=dict)
    # OpenAI Chat / Responses: the dicts of lead_pieces then pieces, flat (what the payload
    # copies), carried over from the parent record when only messages were added or dropped
    flat: list[dict[str, Any]] | None = None
    #: For each dict of :attr:`flat`: whether it may hold a container (``gc.is_tracked``: a
    #: dict the collector does not track holds none), so that its copy must be deep.
    deep: list[bool] = field(default_factory=list)
    parent: Record | None = None  # the record this one reuses, with the history
    reused: tuple[int, int, int] = (0, 0, 0)  # (head messages, first parent index, count)
    replaced: list[int] = field(default_factory=list)  # reused positions with a new message
    _strings: Callable[[Any], Iterable[str | int]] = field(default=lambda v: (), repr=False)

    def items(self) -> int:
        """Items of the payload's message list."""
        p = self.payload
        return len(p.get("messages") or p.get("input") or p.get("contents") or [])

    def tokens(self, model: str, strings: Callable[[Any], Iterable[str | int]]) -> int:
        """Tokens of :attr:`payload` (what :func:`payload_tokens` counts, ``strings`` giving
        the leaves it counts of a non-OpenAI-Chat payload: a text, or an int for a count fixed
        by a rule, an image's), per-message counts reused from the parent record."""
        self._strings = strings
        lead, _, hist = self._counts(model)
        total = lead + hist
        if self.key[0] == "openai":
            return total + _REPLY_PRIMING
        return total + _MESSAGE_OVERHEAD * (self.items() + 1) + _REPLY_PRIMING

    def _counts(self, model: str) -> tuple[int, list[int], int]:
        """``(lead, per history message, their sum)``: what the parent record counted is
        taken over, only the new messages are counted (and the sum follows them)."""
        got = self.counts.get(model)
        if got is not None:
            return got
        parent = self.parent
        pc = parent.counts.get(model) if parent is not None else None
        lead: int | None = None
        if parent is not None and pc is not None:
            head, first, n = self.reused
            ps, end = self.pieces, len(self.src.messages) - self.lead
            # the new messages: the ``head`` before the kept ones and those after them
            counted = self._count_pieces(
                model, ps[:head] + ps[head + n : end] if head else ps[n:end]
            )
            # the parent's history from ``first`` on is kept, to its end: its list is taken
            # over (the parent is let go below), its dropped head cut in place
            hist = pc[2] + sum(counted)
            if first:
                hist -= sum(islice(pc[1], first))
            per = splice(pc[1], first, counted, head)
            if self.replaced:
                again = self._count_pieces(model, [self.pieces[h] for h in self.replaced])
                for h, c in zip(self.replaced, again, strict=True):
                    hist += c - per[h]
                    per[h] = c
            if self.lead_pieces is parent.lead_pieces and self.instructions == parent.instructions:
                lead = pc[0]
        else:
            per = self._count_pieces(model, self.pieces)
            hist = sum(per)
        if lead is None:
            if self.instructions is not None:
                lead = self._count_strings(model, [[self.instructions]])[0]
            else:
                lead = sum(self._count_pieces(model, self.lead_pieces))
        got = self.counts[model] = (lead, per, hist)
        self.parent = None  # its counts are taken over: let it go
        return got

    def _count_pieces(self, model: str, pieces: Sequence[Pieces]) -> list[int]:
        if self.key[0] == "openai":
            got = get_tokenizer(model).count_chat(pieces)  # the exported shapes, natively
            odd = []
            for i, c in enumerate(got):
                if c is None:
                    odd.append(i)
                    continue
                # the native walk leaves file (PDF) parts out: only a message whose content is
                # a list of parts can hold one
                for d in pieces[i]:
                    if type(d) is not dict or isinstance(d.get("content"), list):
                        c += file_part_tokens(d, model)
                got[i] = c
            if odd:
                again = self._count_chat(model, [pieces[i] for i in odd])
                for i, c in zip(odd, again, strict=True):
                    got[i] = c
            return got  # type: ignore[return-value]
        leaves = self._strings
        return self._count_strings(model, [[s for p in ps for s in leaves(p)] for ps in pieces])

    def _count_chat(self, model: str, pieces: Sequence[Pieces]) -> list[int]:
        """The chat rule in Python, for every shape (``count_chat`` walks the exported ones)."""
        out: list[int] = []
        per: list[list[str]] = []
        for ps in pieces:
            strings: list[str] = []
            overhead = 0
            for d in ps:
                texts, extra = message_strings(d, model)
                strings += texts
                overhead += extra
            per.append(strings)
            out.append(overhead)
        counts = self._count_strings(model, per)
        return [a + b for a, b in zip(out, counts, strict=True)]

    @staticmethod
    def _count_strings(model: str, groups: Sequence[Sequence[str | int]]) -> list[int]:
        """Tokens of each group of leaves: a text is counted, an int is its count already."""
        flat = [s for g in groups for s in g if type(s) is str]
        counts = iter(get_tokenizer(model).count_many(flat)) if flat else iter(())
        return [sum(s if type(s) is int else next(counts) for s in g) for g in groups]


class _Checker:
    """The hygiene rules, checked message by message on messages new to a render: True while
    :func:`~ctxengine.hygiene.clean` would leave every one of them as it is."""

    __slots__ = ("calls", "family", "keep", "new_ids", "prev", "provider", "strict", "wanted")

    def __init__(
        self,
        provider: str,
        keep: Callable[[str], bool],
        calls: Sequence[set[str]],
        family: Callable[[Message], str | None],
        prev: str | None,
    ) -> None:
        self.provider = provider
        self.strict = provider in STRICT_ALTERNATION
        self.keep = keep
        self.calls = calls
        self.new_ids: set[str] = set()
        self.family = family
        self.prev = prev  # role of the message before (None: the start of the history)
        self.wanted: set[str] | None = None  # calls of the open span not answered yet

    def ok(self, m: Message) -> bool:
        role = m.role
        if not exported_blocks(m, self.provider, self.family(m)):
            return False  # dropped as empty
        if role == "system" and (self.strict or self.provider == "openai-responses"):
            return False  # moved to user (strict) or changes the instructions (responses)
        if self.strict and role == self.prev and role in ("user", "assistant"):
            return False  # merged
        if role == "tool":
            wanted = self.wanted
            if wanted is None or self.prev not in ("assistant", "tool"):
                return False  # orphan, or moved up past a user message
            for r in m.tool_results:
                if r.call_id not in wanted:
                    return False  # orphan or duplicate
                wanted.discard(r.call_id)
        elif role == "assistant":
            if self.wanted:
                return False  # the span before has a call with no result
            calls = m.tool_calls
            if calls:
                if m.failed:
                    return False
                for c in calls:
                    cid = c.id
                    if not self.keep(cid) or cid in self.new_ids:
                        return False
                    if any(cid in ids for ids in self.calls):
                        return False
                    self.new_ids.add(cid)
                self.wanted = {c.id for c in calls}
                if len(self.wanted) != len(calls):  # pragma: no cover - ids checked distinct
                    return False
            else:
                self.wanted = None
        self.prev = role
        return True

    def done(self) -> bool:
        """Whether the last span has all its results."""
        return not self.wanted


class Warm:
    """The records of a session's renders, one per provider and options."""

    def __init__(self, aligner: Aligner | None = None) -> None:
        self.align = aligner or Aligner()
        self.records: dict[tuple[Any, ...], Record] = {}
        self.by_payload: tuple[int, Record] | None = None  # the last render's
        #: What ``hand_out`` handed out in the last two renders of each record: the message
        #: (or turn) dicts copied, their copies and shapes (see :meth:`_handed`).
        self.handed: dict[tuple[Any, ...], tuple[Handout, ...]] = {}
        #: Renders that reused the previous one's work, and full renders recorded for reuse.
        self.reused = 0
        self.built = 0

    def record_of(self, payload: dict[str, Any]) -> Record | None:
        """The record of the render that made ``payload`` (the last one), if any."""
        last = self.by_payload
        if last is not None and last[0] == id(payload) and last[1].payload is payload:
            return last[1]
        return None

    def _keep(self, provider: str, id_mode: str | None) -> Callable[[str], bool]:
        if id_mode is not None:
            return lambda cid: fits(cid, id_mode)
        return lambda cid: fits(cid, "strict") or id_ok(cid, provider)

    # -- the reuse path ---------------------------------------------------------------------

    def reuse(
        self, t: Transcript, key: tuple[Any, ...], n_marks: int, cache_ttl: str | None
    ) -> Record | None:
        """The record of rendering ``t`` from the previous render's, or None (full path)."""
        prev = self.records.get(key)
        if prev is None:
            return None
        msgs = t.messages
        lead = prev.lead
        pmsgs = prev.src.messages
        if len(msgs) <= lead:
            return None
        for k in range(lead):
            a, b = msgs[k], pmsgs[k]
            if a is not b and (a != b or a.meta != b.meta or family_of(a, t) != family_of(b, t)):
                return None
        if msgs[lead].role == "system" or (prev.hist_system and key[0] == "openai-responses"):
            return None
        provider = key[0]
        located = _locate(self.align(msgs, pmsgs, lead), msgs, pmsgs, prev.ids, lead)
        if located is None:
            return None
        head, start, replaced = located
        n = len(pmsgs) - start
        cut = lead + head
        for h in replaced:
            if not _same_shape(pmsgs[start + h - head], msgs[lead + h], provider, t):
                return None
        first = start - lead  # index in the previous history
        pm = pmsgs[start]
        if pm.role == "tool":
            return None  # its call was dropped: an orphan now
        turns = provider in _TURNS
        serial = first + prev.hoff
        tk = 0
        if turns:
            tk = bisect.bisect_left(prev.tstart, serial)
            if tk >= len(prev.tstart) or prev.tstart[tk] != serial:
                return None  # not at a turn boundary
        keep = self._keep(provider, key[1])

        def family(m: Message) -> str | None:
            return family_of(m, t)

        heads = msgs[lead:cut]
        tail = msgs[cut + n :]
        head_ids: set[str] = set()
        if heads:
            check = _Checker(provider, keep, (prev.calls,), family, None)
            if not all(check.ok(m) for m in heads) or not check.done():
                return None
            strict = provider in STRICT_ALTERNATION
            if strict and pm.role == check.prev and pm.role in ("user", "assistant"):
                return None
            if strict and check.prev == "tool" and pm.role == "user":
                return None  # one user turn with the head's last results (_add_turn)
            head_ids = check.new_ids
        check = _Checker(provider, keep, (prev.calls, head_ids), family, pmsgs[-1].role)
        if not all(check.ok(m) for m in tail) or not check.done():
            return None
        final = msgs[-1]
        if (
            provider == "anthropic"
            and final.role == "assistant"
            and strip_trailing_space(final.blocks) is not None
        ):
            return None  # hygiene strips a prefill's trailing whitespace
        # every check passed: from here on the previous record is superseded (and its lists
        # taken over: it is no record to reuse any more, should this one not be made)
        del self.records[key]
        prev.payload = {}  # freed before the next one is made (when the caller let it go)
        calls = prev.calls  # a superset of the calls: dropped ones stay (a reuse is refused)
        calls.update(head_ids)
        calls.update(check.new_ids)
        hist0 = msgs[lead]
        boot: Message | None = None
        report = Report()
        if provider in STRICT_ALTERNATION and hist0.role != "user":
            boot = prev.boot or _bootstrap()
            report = _boot_report(lead, hist0.role)
        cleaned = (
            t
            if boot is None
            else trusted_transcript((*msgs[:lead], boot, *msgs[lead:]), t.source_format)
        )
        names = {c.id: c.name for m in chain(heads, tail) for c in m.tool_calls}
        new_pieces = [pieces(provider, m, family(m), names) for m in chain(heads, tail)]
        lead_pieces = prev.lead_pieces
        if (boot is not None) != (prev.boot is not None):
            lead_pieces = lead_pieces[:lead]
            if boot is not None:
                lead_pieces = [*lead_pieces, pieces(provider, boot, None, names)]
        dropped = sum(map(len, islice(prev.pieces, first)))
        hist_pieces = splice(prev.pieces, first, new_pieces, head)  # taken over
        if replaced:
            hist = msgs[lead:]  # a copy of the window when ``lead``: only for what it needs
            for h in replaced:
                m = hist[h]
                hist_pieces[h] = pieces(provider, m, family(m), _names_before(hist, h))
        hoff = serial - head
        flat = None
        deep: list[bool] = []
        if prev.flat is not None and not replaced and not head and lead_pieces is prev.lead_pieces:
            # the previous flat dicts less those of the dropped messages, plus the new ones
            flat, deep = prev.flat, prev.deep
            if dropped:
                nlead = sum(map(len, lead_pieces))
                del flat[nlead : nlead + dropped]
                del deep[nlead : nlead + dropped]
            added = list(chain.from_iterable(new_pieces))
            flat += added
            deep += map(is_tracked, added)
            prev.flat = None  # taken over (extended in place)
        if replaced:
            ids = list(map(id, msgs))
        else:  # the ids of the kept part are the previous ones (the list taken over)
            ids = prev.ids
            ids[:start] = map(id, msgs[:cut])
            ids += map(id, tail)
        rec = Record(
            key=key,
            src=t,
            ids=ids,
            lead=lead,
            boot=boot,
            cleaned=cleaned,
            report=report,
            calls=calls,
            hist_system=prev.hist_system or any(m.role == "system" for m in chain(heads, tail)),
            lead_pieces=lead_pieces,
            pieces=hist_pieces,
            hoff=hoff,
            instructions=prev.instructions,
            flat=flat,
            deep=deep,
            parent=prev if prev.counts else None,
            reused=(head, first, n),
            replaced=replaced,
        )
        prev.parent = None
        if turns:
            self._turns_reuse(rec, prev, tk, heads, tail, head)
            for h in replaced:
                _rebuild_turn(rec, h)
        self._finish(rec, n_marks, cache_ttl)
        self.reused += 1
        return rec

    def _turns_reuse(
        self,
        rec: Record,
        prev: Record,
        tk: int,
        heads: Sequence[Message],
        tail: Sequence[Message],
        head: int,
    ) -> None:
        provider = rec.key[0]
        hoff = rec.hoff
        # the new head's turns, then the previous ones, then the tail's (the first of which may
        # continue the previous last turn): the previous record's lists are taken over (it is
        # superseded), their dropped head cut in place, no copy of the window
        h_start: list[int] = []
        h_turns: list[dict[str, Any]] = []
        h_users: list[int] = []
        for h, m in enumerate(heads):
            _add_turn(provider, h_turns, h_start, m, rec.pieces[h], h + hoff)
            if m.role == "user":
                h_users.append(h + hoff)
        tstart, turns, users = prev.tstart, prev.turns, prev.users
        uk = bisect.bisect_left(users, hoff + head)
        tstart[:tk] = h_start
        turns[:tk] = h_turns
        users[:uk] = h_users
        base = len(rec.src.messages) - rec.lead - len(tail)
        copied = False
        for j, m in enumerate(tail):
            h = base + j
            if not copied and turns and _role(provider, m) == turns[-1]["role"] == "user":
                last = turns[-1]
                key = "parts" if provider == "gemini" else "content"
                turns[-1] = {"role": last["role"], key: list(last[key])}
                copied = True
            if _add_turn(provider, turns, tstart, m, rec.pieces[h], h + hoff):
                copied = True
            if m.role == "user":
                users.append(h + hoff)
        rec.tstart, rec.turns, rec.users = tstart, turns, users

    # -- the full path ----------------------------------------------------------------------

    def build(
        self,
        t: Transcript,
        cleaned: Transcript,
        report: Report,
        key: tuple[Any, ...],
        n_marks: int,
        cache_ttl: str | None,
        pieces_of: Callable[[Sequence[Message]], list[Pieces]] | None,
    ) -> Record | None:
        """The record of a render the full path cleaned, when the next one can reuse it: hygiene
        changed nothing, or only added the bootstrap user turn."""
        provider = key[0]
        msgs = t.messages
        lead = next((i for i, m in enumerate(msgs) if m.role != "system"), len(msgs))
        if lead == len(msgs):
            return None
        boot: Message | None = None
        if report.changes:
            c = report.changes
            if len(c) != 1 or c[0].action != "bootstrap_user" or report.id_map:
                return None
            boot = cleaned.messages[lead]
            if (
                len(cleaned.messages) != len(msgs) + 1
                or cleaned.messages[lead + 1] is not msgs[lead]
            ):
                return None  # pragma: no cover - a bootstrap inserts one message
        elif cleaned is not t:
            return None  # pragma: no cover - clean returns its input when nothing changed
        hist = msgs[lead:]
        # the tool names of the history's calls: only a Gemini result is exported with one
        names = {c.id: c.name for m in hist for c in m.tool_calls} if provider == "gemini" else {}

        def make(m: Message) -> Pieces:
            return pieces(provider, m, family_of(m, t), names)

        if pieces_of is None:
            hist_pieces = [make(m) for m in hist]
        elif provider != "gemini":
            hist_pieces = pieces_of(hist)
        else:  # a Gemini result names its call's function: made with the names of this history
            hist_pieces = [make(m) if m.role == "tool" else pieces_of((m,))[0] for m in hist]

        lead_msgs = list(msgs[:lead]) + ([boot] if boot is not None else [])
        rec = Record(
            key=key,
            src=t,
            ids=list(map(id, msgs)),
            lead=lead,
            boot=boot,
            cleaned=cleaned,
            report=report,
            calls={c.id for m in hist for c in m.tool_calls},
            hist_system="system" in map(_ROLE, hist),  # at C speed
            lead_pieces=[pieces(provider, m, family_of(m, t), names) for m in lead_msgs],
            pieces=hist_pieces,
            hoff=0,
        )
        if provider == "openai-responses":
            rec.instructions = instructions_of(cleaned.messages)
            if rec.instructions is not None:
                rec.lead_pieces = [[]]
        if provider in _TURNS:
            for h, m in enumerate(hist):
                _add_turn(provider, rec.turns, rec.tstart, m, rec.pieces[h], h)
                if m.role == "user":
                    rec.users.append(h)
        self._finish(rec, n_marks, cache_ttl)
        self.built += 1
        return rec

    # -- both -------------------------------------------------------------------------------

    def _finish(self, rec: Record, n_marks: int, cache_ttl: str | None) -> None:
        provider = rec.key[0]
        if provider in ("openai", "openai-responses"):
            flat = rec.flat
            if flat is None:
                flat = rec.flat = list(chain.from_iterable(chain(rec.lead_pieces, rec.pieces)))
                rec.deep = list(map(is_tracked, flat))
            items = self._handed(rec.key, flat, rec.deep)
            if provider == "openai":
                rec.payload = {"messages": items}
            else:
                rec.payload = (
                    {"instructions": rec.instructions} if rec.instructions is not None else {}
                )
                rec.payload["input"] = items
        elif provider == "anthropic":
            self._anthropic(rec, n_marks, cache_ttl)
        else:
            system = [p for ps in rec.lead_pieces[: rec.lead] for p in ps]
            contents = list(rec.turns)
            if rec.boot is not None:
                contents.insert(0, {"role": "user", "parts": list(rec.lead_pieces[rec.lead])})
            payload: dict[str, Any] = {"contents": self._handed(rec.key, contents)}
            if system:
                payload["system_instruction"] = {"parts": fresh_tree(system)}
            rec.payload = payload
        self.records[rec.key] = rec
        self.by_payload = (id(rec.payload), rec)

    def _handed(
        self, key: tuple[Any, ...], flat: list[dict[str, Any]], deep: list[bool] | None = None
    ) -> list[dict[str, Any]]:
        """Copies of ``flat`` for a payload (its caller may edit it at any depth; ``deep``:
        which dicts may hold a container, all when not given).

        The copies handed out two renders ago are handed out again where their receiver let
        them go unchanged (``hand_out`` checks each against the shape its dict had when
        copied: the dicts of ``flat`` are never changed once handed out): a caller keeping
        the last payload, as ``out = await session.render()`` does during the next render,
        never holds them. Those of the last render are not, so no dict is in two payloads
        anyone holds."""
        gens = self.handed.get(key, ())
        if deep is None:
            deep = [True] * len(flat)
        items, made = hand_out(flat, deep, gens[0] if len(gens) == 2 and _REHAND else None)
        self.handed[key] = (*gens[-1:], made)
        return items

    def _anthropic(self, rec: Record, n_marks: int, cache_ttl: str | None) -> None:
        lead, boot = rec.lead, rec.boot
        b = 1 if boot is not None else 0
        plan: tuple[Breakpoint, ...] = ()
        if n_marks:
            first_user = lead if boot is not None else None
            last_user = first_user
            if rec.users:
                first_user = (
                    first_user if first_user is not None else lead + rec.users[0] - rec.hoff
                )
                last_user = lead + b + rec.users[-1] - rec.hoff
            plan = tuple(choose(candidates_at(rec.cleaned, lead, first_user, last_user), n_marks))
        rec.breakpoints = plan
        marks = {bp.index for bp in plan}
        marker = cache_marker(cache_ttl)
        system: list[dict[str, Any]] = []
        for i in range(lead):
            ps = rec.lead_pieces[i]
            system.extend(marked(ps, marker) if i in marks else ps)
        turns = list(rec.turns)
        if boot is not None:
            ps = rec.lead_pieces[lead]
            turns.insert(
                0, {"role": "user", "content": marked(ps, marker) if lead in marks else list(ps)}
            )
        off = lead + b
        for i in sorted(marks):
            h = i - off
            if h < 0:
                continue
            s = h + rec.hoff
            ti = bisect.bisect_right(rec.tstart, s) - 1
            end = rec.tstart[ti + 1] - rec.hoff if ti + 1 < len(rec.tstart) else len(rec.pieces)
            content: list[dict[str, Any]] = []
            for x in range(rec.tstart[ti] - rec.hoff, end):
                ps = rec.pieces[x]
                content.extend(marked(ps, marker) if x + off in marks else ps)
            turns[ti + b] = {"role": rec.turns[ti]["role"], "content": content}
        payload: dict[str, Any] = {"messages": self._handed(rec.key, turns)}
        if system:
            payload["system"] = fresh_tree(system)
        rec.payload = payload


#: Kept messages that may be replaced (a soft trim) before a render takes the full path.
_MAX_REPLACED: Final = 8


def _locate(
    got: Alignment | None,
    msgs: Sequence[Message],
    pmsgs: Sequence[Message],
    pids: list[int],
    lead: int,
) -> tuple[int, int, list[int]] | None:
    """``(head, start, replaced)``: the history of ``msgs`` is ``head`` new messages, then
    ``pmsgs[start:]`` (``start`` in the previous history; the same objects except at the
    history positions ``replaced``), then new ones. Found by :func:`align` when few messages
    are new at either end (``got``), else by searching the first kept message (``pids``: the
    ids of ``pmsgs``). None when the history is not such a continuation of the previous one."""
    if got is not None:
        cut, first, rep = got
        if first < lead:
            return None  # a lead message of the previous render is in the history now
        return cut - lead, first, [i - lead for i in rep]
    for head in range(min(4, len(msgs) - lead)):
        try:
            start = pids.index(id(msgs[lead + head]), lead)
        except ValueError:
            continue
        cut = lead + head
        n = len(pids) - start
        if len(msgs) < cut + n:
            return None  # the end of the previous history was dropped
        window = islice(msgs, cut, cut + n)
        flags = list(map(is_not, window, islice(pmsgs, start, None)))
        replaced: list[int] = []
        j = -1
        while True:
            try:
                j = flags.index(True, j + 1)
            except ValueError:
                return head, start, replaced
            if len(replaced) >= _MAX_REPLACED:
                return None
            replaced.append(head + j)
    return None


def _same_shape(old: Message, new: Message, provider: str, t: Transcript) -> bool:
    """Whether hygiene decides the same for ``new`` in place of ``old``: same role, call and
    result ids, failure, and something the provider receives."""
    return (
        new.role == old.role
        and new.failed == old.failed
        and [c.id for c in new.tool_calls] == [c.id for c in old.tool_calls]
        and [r.call_id for r in new.tool_results] == [r.call_id for r in old.tool_results]
        and bool(exported_blocks(new, provider, family_of(new, t)))
    )


def _names_before(hist: Sequence[Message], h: int) -> dict[str, str]:
    """Tool names of the calls a tool message at ``h`` answers (the assistant turn before)."""
    for i in range(h - 1, -1, -1):
        if hist[i].role == "assistant":
            return {c.id: c.name for c in hist[i].tool_calls}
    return {}


def _rebuild_turn(rec: Record, h: int) -> None:
    """Make the turn holding history message ``h`` again from the messages' pieces."""
    s = h + rec.hoff
    ti = bisect.bisect_right(rec.tstart, s) - 1
    end = rec.tstart[ti + 1] - rec.hoff if ti + 1 < len(rec.tstart) else len(rec.pieces)
    key = "parts" if rec.key[0] == "gemini" else "content"
    content = [p for x in range(rec.tstart[ti] - rec.hoff, end) for p in rec.pieces[x]]
    if key == "parts" and ti and rec.turns[ti]["role"] == "user":
        in_call_order(content, rec.turns[ti - 1]["parts"])
    rec.turns[ti] = {"role": rec.turns[ti]["role"], key: content}


def _role(provider: str, m: Message) -> str:
    if m.role == "assistant":
        return "model" if provider == "gemini" else "assistant"
    return "user"


def _add_turn(
    provider: str,
    turns: list[dict[str, Any]],
    tstart: list[int],
    m: Message,
    pieces: Pieces,
    serial: int,
) -> bool:
    """Append ``m``'s pieces to the turns; True when they went into a new turn. Gemini: the
    results in a user turn follow the order of the calls of the model turn before it."""
    role = _role(provider, m)
    key = "parts" if provider == "gemini" else "content"
    new = not (turns and turns[-1]["role"] == role == "user")
    if new:
        turns.append({"role": role, key: list(pieces)})
        tstart.append(serial)
    else:
        turns[-1][key].extend(pieces)
    if (
        key == "parts"
        and len(turns) > 1
        and turns[-2]["role"] == "model"
        and any("functionResponse" in p for p in pieces)
    ):
        in_call_order(turns[-1]["parts"], turns[-2]["parts"])
    return new


def pieces(provider: str, m: Message, family: str | None, names: dict[str, str]) -> Pieces:
    """The exported pieces of one message for ``provider``."""
    if provider == "openai":
        return message_dicts(m)
    if provider == "openai-responses":
        return message_items(m, family)
    if provider == "anthropic":
        return message_blocks(m, family)
    return message_parts(m, family, names)
