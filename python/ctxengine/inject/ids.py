"""Tool-call id rewriting behind :func:`ctxengine.hygiene.sanitize_tool_ids`."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..errors import AdapterError
from ..transcript.changes import Change
from ..transcript.importers.gemini import RESPONSES_KEY
from ..transcript.model import Block, Message, ToolCall, ToolResult, Transcript

__all__ = ("IdRewriter", "fits")

_NON_ALNUM = re.compile(r"[^A-Za-z0-9]")
RULE = "sanitize_tool_ids"


def fits(call_id: str, mode: str) -> bool:
    """True when ``call_id`` already satisfies ``mode`` (``strict`` or ``strict9``)."""
    if not call_id.isascii() or not call_id.isalnum():  # ASCII letters and digits, one at least
        return False
    return len(call_id) == 9 if mode == "strict9" else len(call_id) <= 40


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _candidates(old: str, mode: str) -> Iterator[str]:
    """The ids ``old`` may become, in order of preference (hashed lazily: the first free one
    is nearly always among the first two, and each hash costs a SHA-256)."""
    base = _NON_ALNUM.sub("", old)
    if mode == "strict9":
        if len(base) == 9:
            yield base
        for k in range(1, 1000):
            yield _digest(f"{old}#{k}", 9)
    else:
        if 0 < len(base) <= 40:
            yield base
        stem = (base or "call")[:32]
        for k in range(1, 1000):
            yield stem + _digest(f"{old}#{k}", 8)


def _new_id(old: str, mode: str, used: set[str]) -> str:
    """The alphanumeric part of ``old`` when it fits and is free; else it (cut) plus a hash."""
    for cand in _candidates(old, mode):
        if cand not in used:
            return cand
    raise AdapterError(f"cannot find a free {mode} id for {old!r}")  # pragma: no cover


class IdRewriter:
    """One pass over a transcript: keep the first use of each acceptable id, rename the rest,
    and point every result at a call with its old id.

    When one assistant message repeats an id, its calls are answered in order: the n-th result
    with that old id goes to the n-th call with it (a provider answers parallel calls in the
    order it made them). Results beyond those go to the latest earlier call with the old id,
    where pairing drops them as duplicates.
    """

    def __init__(self, t: Transcript, mode: str, keep: Callable[[str], bool]) -> None:
        self.t = t
        self.mode = mode
        calls = [c.id for m in t.messages for c in m.tool_calls]
        self.firsts = {cid for cid in calls if keep(cid)}
        self.needed = len(self.firsts) != len(calls)
        self.used = set(self.firsts)
        self.kept: set[str] = set()
        self.current: dict[str, str] = {}
        self.unanswered: dict[str, list[str]] = {}  # old id -> new ids of its latest turn
        self.changes: list[Change] = []
        self.id_map: list[tuple[str, str]] = []

    def call(self, i: int, b: ToolCall) -> ToolCall:
        if b.id in self.firsts and b.id not in self.kept:
            self.kept.add(b.id)
            self.current[b.id] = b.id
            self.unanswered[b.id].append(b.id)
            return b
        new = _new_id(b.id, self.mode, self.used)
        self.used.add(new)
        self.current[b.id] = new
        self.unanswered[b.id].append(new)
        self.id_map.append((b.id, new))
        self.changes.append(Change(RULE, "renamed_id", i, f"{b.id!r} -> {new!r}", new))
        return ToolCall(new, b.name, b.arguments)

    def result(self, i: int, b: ToolResult) -> ToolResult:
        queue = self.unanswered.get(b.call_id)
        new = queue.pop(0) if queue else self.current.get(b.call_id, b.call_id)
        if new == b.call_id:
            return b
        self.changes.append(Change(RULE, "remapped_result", i, f"{b.call_id!r} -> {new!r}", new))
        return dataclasses.replace(b, call_id=new)

    def run(self) -> list[Message]:
        out: list[Message] = []
        for i, m in enumerate(self.t.messages):
            for c in m.tool_calls:  # a new turn with an id: its calls are the ones to answer
                self.unanswered[c.id] = []
            blocks: list[Block] = []
            for b in m.blocks:
                if isinstance(b, ToolCall):
                    b = self.call(i, b)
                elif isinstance(b, ToolResult):
                    b = self.result(i, b)
                blocks.append(b)
            same = all(x is y for x, y in zip(blocks, m.blocks, strict=True))
            if same:
                out.append(m)
                continue
            meta = _followed(m.meta, m.blocks, blocks)
            out.append(dataclasses.replace(m, blocks=tuple(blocks), meta=meta))
        return out


def _followed(
    meta: Mapping[str, Any], old: tuple[Block, ...], new: list[Block]
) -> Mapping[str, Any]:
    """``meta`` of a message whose results were remapped (``old`` → ``new`` blocks), its
    record of the Gemini responses that came as objects (:data:`~ctxengine.transcript.
    importers.gemini.RESPONSES_KEY`, by call id) following them to their new ids: a result
    whose text is unchanged goes out as its object whatever id it now answers. The old ids
    stay (another result may still have one); ``meta`` itself when nothing follows."""
    kept = meta.get(RESPONSES_KEY) if meta else None
    if not isinstance(kept, Mapping):
        return meta
    moved: dict[str, Any] = {}
    for a, b in zip(old, new, strict=True):
        if isinstance(a, ToolResult) and isinstance(b, ToolResult) and a.call_id in kept:
            moved[b.call_id] = kept[a.call_id]
    if not moved:
        return meta
    return {**meta, RESPONSES_KEY: {**kept, **moved}}
