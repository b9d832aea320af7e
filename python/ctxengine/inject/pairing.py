"""Tool call / result pairing: the repair pass and the check behind
:func:`ctxengine.hygiene.repair_pairing` and :func:`ctxengine.hygiene.validate`."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Final

from ..transcript.changes import Change, Problem
from ..transcript.model import Block, Message, Text, ToolCall, ToolResult, Transcript

__all__ = ("SYNTHETIC_RESULT_TEXT", "Pairing", "check_pairing")

SYNTHETIC_RESULT_TEXT: Final = (
    "[ctxengine] No result was recorded for this tool call (it was interrupted or its result "
    "was lost); a synthetic error result was inserted during transcript repair."
)
_ORPHAN = "result answers no call of the turn before it"


def _synthetic(call: ToolCall) -> ToolResult:
    return ToolResult(call.id, (Text(SYNTHETIC_RESULT_TEXT),), True, call.name)


@dataclasses.dataclass
class _Span:
    """What follows one assistant turn up to the next assistant turn."""

    wanted: set[str]
    found: dict[str, ToolResult] = dataclasses.field(default_factory=dict)
    direct: list[Message] = dataclasses.field(default_factory=list)
    moved: list[ToolResult] = dataclasses.field(default_factory=list)
    remainder: list[Message] = dataclasses.field(default_factory=list)


def without_calls(m: Message) -> Message:
    """``m`` without its tool calls (what pairing keeps of a failed turn)."""
    return dataclasses.replace(m, blocks=tuple(b for b in m.blocks if not isinstance(b, ToolCall)))


def dropped_calls(i: int, m: Message) -> list[Change]:
    """The changes pairing reports for the calls of failed turn ``i``, which it removes."""
    detail = f"call in a turn that ended with {m.stop_reason!r}"
    return [Change("repair_pairing", "dropped_call", i, detail, c.id) for c in m.tool_calls]


class Pairing:
    """One repair pass over the messages of a transcript."""

    def __init__(self, messages: tuple[Message, ...]) -> None:
        self.src = messages
        self.out: list[Message] = []
        self.changes: list[Change] = []

    def note(self, action: str, index: int, detail: str, call_id: str | None = None) -> None:
        self.changes.append(Change("repair_pairing", action, index, detail, call_id))

    def run(self) -> list[Message]:
        src, out = self.src, self.out
        n = len(src)
        i = 0
        while i < n:
            m = src[i]
            role = m.role
            if role == "tool":  # not right after an assistant turn with calls
                for r in m.tool_results:
                    self.note("dropped_orphan", i, _ORPHAN, r.call_id)
            elif role != "assistant" or not m.tool_calls:
                out.append(m)
            elif m.failed:
                self.strip_failed(i, m)
            else:
                i = self.span(i, m)
                continue
            i += 1
        return out

    def strip_failed(self, i: int, m: Message) -> None:
        self.changes.extend(dropped_calls(i, m))
        kept = without_calls(m)
        if kept.blocks:
            self.out.append(kept)
        else:
            self.note("dropped_message", i, f"{m.stop_reason} turn held only tool calls")

    def span(self, i: int, m: Message) -> int:
        """Handle assistant ``i`` and what follows up to the next assistant; return that index."""
        j = self.answered(i, m)
        if j:
            self.out.extend(self.src[i:j])
            return j
        span = _Span({c.id for c in m.tool_calls})
        j = i + 1
        while j < len(self.src) and self.src[j].role != "assistant":
            self.visit(i, j, self.src[j], span)
            j += 1
        extra: list[Block] = list(span.moved)
        for c in m.tool_calls:
            if c.id not in span.found:
                span.found[c.id] = _synthetic(c)
                extra.append(span.found[c.id])
                self.note("synthetic_result", i, f"no result for call {c.name!r}", c.id)
        self.out.append(m)
        self.out.extend(span.direct)
        if extra:
            self.out.append(Message("tool", tuple(extra), meta={"repaired": True}))
        self.out.extend(span.remainder)
        return j

    def answered(self, i: int, m: Message) -> int:
        """The common case, where the repair changes nothing: assistant ``i`` (distinct call
        ids) is followed by one tool message answering exactly its calls in order, and no other
        tool message comes before the next assistant. Then return the index of that assistant
        (or the end); else 0."""
        src = self.src
        end = len(src)
        n = i + 1
        if n >= end or src[n].role != "tool":
            return 0
        calls, results = m.tool_calls, src[n].tool_results
        if len(calls) == 1:  # the common case: one call, one result with its id
            if len(results) != 1 or results[0].call_id != calls[0].id:
                return 0
        else:
            ids = [c.id for c in calls]
            if [r.call_id for r in results] != ids or len(set(ids)) != len(ids):
                return 0
        j = n + 1
        while j < end:
            role = src[j].role
            if role == "assistant":
                return j
            if role == "tool":
                return 0
            j += 1
        return j

    def visit(self, i: int, j: int, mj: Message, span: _Span) -> None:
        if mj.role != "tool":
            span.remainder.append(mj)
            return
        keep = self.take(j, mj, span)
        if span.remainder:  # a user message came first: move the results up
            span.moved.extend(keep)
            for r in keep:
                self.note("moved_result", j, f"moved to follow its call at {i}", r.call_id)
        elif keep:
            same = len(keep) == len(mj.blocks)
            span.direct.append(mj if same else dataclasses.replace(mj, blocks=tuple(keep)))
        else:
            self.note("dropped_message", j, "tool message left empty")

    def take(self, j: int, mj: Message, span: _Span) -> list[ToolResult]:
        keep: list[ToolResult] = []
        for r in mj.tool_results:
            if r.call_id not in span.wanted:
                self.note("dropped_orphan", j, _ORPHAN, r.call_id)
            elif r.call_id in span.found:
                self.note("dropped_duplicate", j, "a result for this call came earlier", r.call_id)
            else:
                span.found[r.call_id] = r
                keep.append(r)
        return keep


def _check_turn(msgs: tuple[Message, ...], i: int, problems: list[Problem]) -> set[int]:
    """Check the results after assistant ``i``; return the indexes of the tool messages seen."""
    m = msgs[i]
    wanted = set() if m.failed else {c.id for c in m.tool_calls}
    got: Counter[str] = Counter()
    seen: set[int] = set()
    j = i + 1
    while j < len(msgs) and msgs[j].role == "tool":
        seen.add(j)
        for r in msgs[j].tool_results:
            got[r.call_id] += 1
            if r.call_id not in wanted:
                why = f"result for {r.call_id!r} answers no call of turn {i}"
                problems.append(Problem("orphan_result", j, why, r.call_id))
            elif got[r.call_id] == 2:
                why = f"second result for call {r.call_id!r}"
                problems.append(Problem("duplicate_result", j, why, r.call_id))
        j += 1
    for c in m.tool_calls:
        if m.failed:
            why = f"call in a turn that ended with {m.stop_reason!r}"
            problems.append(Problem("unanswerable_call", i, why, c.id))
        elif not got[c.id]:
            why = f"call {c.id!r} has no result right after its turn"
            problems.append(Problem("missing_result", i, why, c.id))
    return seen


def check_pairing(t: Transcript, problems: list[Problem]) -> None:
    """Append a problem for every call without exactly one result right after its turn, every
    call in a failed turn, and every result that does not follow its call's turn."""
    msgs = t.messages
    consumed: set[int] = set()
    for i, m in enumerate(msgs):
        if m.role == "assistant" and m.tool_calls:
            consumed |= _check_turn(msgs, i, problems)
    for j, m in enumerate(msgs):
        if m.role == "tool" and j not in consumed:
            for r in m.tool_results:
                why = f"result for {r.call_id!r} follows no assistant turn with that call"
                problems.append(Problem("orphan_result", j, why, r.call_id))
