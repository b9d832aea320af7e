"""Warm renders follow what changed (issue 14): per-position work reused along the previous render.

:func:`align` and :class:`Aligner` find how a transcript continues the previous one; the checks
of hygiene, compose's history and the warm record reuse their values along it. Here the
correspondence is checked against its definition on random sequences, and every stage of the
inject phase, run with the session's memo over growing real sessions, is compared with the same
stage run from scratch, for the four providers; a caller editing a payload never reaches the
next one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxengine.inject.turn as turn_module
from ctxengine import Budget, ContextEngine
from ctxengine._core import differing
from ctxengine.inject.align import Aligned, Aligner, align
from ctxengine.inject.compose import compose
from ctxengine.inject.memo import RenderMemo
from ctxengine.inject.render import Rendered, render
from ctxengine.transcript import Message, Transcript, load
from offline_tiktoken import TRANSCRIPTS

PROVIDERS = {
    "openai": {},
    "openai-responses": {},
    "anthropic": {"cache_breakpoints": 4},
    "gemini": {},
}
SESSIONS = [
    TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl",
    TRANSCRIPTS / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
]
POOL = [Message.user(f"m{i}") for i in range(40)]  # distinct objects


def _dump(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, ensure_ascii=False)


# -- the correspondence ------------------------------------------------------------------------


@st.composite
def _continuation(draw: Any) -> tuple[tuple[Message, ...], tuple[Message, ...], int, Any]:
    """An old sequence of distinct messages, a new one made from it by the edits of a render
    (leading messages dropped, new ones at either end, some kept ones replaced), a lead, and
    the answer :func:`align` must give (None: it may give up or find another)."""
    old = tuple(Message.user(f"o{i}") for i in range(draw(st.integers(0, 20))))
    dropped = draw(st.integers(0, len(old)))
    kept = list(old[dropped:])
    hits = draw(st.sets(st.integers(0, max(len(kept) - 1, 0)), max_size=3)) if kept else set()
    for i in hits:
        kept[i] = Message.user(f"r{i}")
    head = [Message.user(f"h{i}") for i in range(draw(st.integers(0, 10)))]
    tail = [Message.user(f"t{i}") for i in range(draw(st.integers(0, 20)))]
    lead = draw(st.integers(0, 3))
    new = tuple(head + kept + tail)
    cut = max(lead, len(head))
    end = len(head) + len(kept)
    expected = None
    first_kept = cut - len(head) not in hits
    ends = kept and len(kept) - 1 not in hits and len(tail) < 16
    if ends and first_kept and cut < min(lead + 8, end):
        rep = [len(head) + i for i in sorted(hits) if len(head) + i >= cut]
        expected = (cut, dropped + cut - len(head), rep)
    return old, new, lead, expected


def _holds(new: tuple[Message, ...], old: tuple[Message, ...], lead: int, got: Any) -> None:
    cut, start, replaced = got
    end = cut + len(old) - start
    assert lead <= cut <= end <= len(new) and 0 <= start <= len(old)
    assert replaced == [i for i in range(cut, end) if new[i] is not old[start + i - cut]]


@settings(max_examples=400, deadline=None, database=None)
@given(_continuation())
def test_align_answers_what_it_defines(case: Any) -> None:
    old, new, lead, expected = case
    got = align(new, old, lead)
    if got is not None:
        _holds(new, old, lead, got)
    if expected is not None:
        assert got == expected
    fresh = tuple(Message.user("x") for _ in new)
    assert align(fresh, old, lead) is None  # no message in common: no continuation


@settings(max_examples=400, deadline=None, database=None)
@given(_continuation(), st.integers(0, 3))
def test_aligner_remembers_the_same_answer_as_align(case: Any, second: int) -> None:
    old, new, lead, _ = case
    aligner = Aligner()
    assert aligner(new, old, lead) == align(new, old, lead)
    # a later stage of the same render asks again, maybe with another lead
    assert aligner(new, old, second) == align(new, old, second)
    assert aligner(new, old, lead) == align(new, old, lead)


@settings(max_examples=300, deadline=None, database=None)
@given(_continuation())
def test_align_of_tuples_natively_matches_the_pass_over_other_sequences(case: Any) -> None:
    """Tuples are compared natively (their item arrays), other sequences by a C-level pass
    over the objects: the two answer the same."""
    old, new, lead, _ = case
    assert align(new, old, lead) == align(list(new), list(old), lead)


def test_differing_lists_the_other_objects_up_to_a_limit() -> None:
    a = tuple(POOL[:6])
    b = (POOL[0], POOL[10], POOL[2], POOL[11], POOL[4], POOL[5])
    assert differing(a, 0, b, 0, 6, 8) == [1, 3]
    assert differing(a, 0, b, 0, 6, 2) == [1, 3]
    assert differing(a, 0, b, 0, 6, 1) is None
    assert differing(a, 2, b, 2, 3, 0) is None and differing(a, 4, b, 4, 2, 0) == []
    assert differing(a, 1, (POOL[1], POOL[2]), 0, 2, 0) == []  # runs at other offsets
    with pytest.raises(ValueError, match=r"old\[1:1\+6\] is out of range for a tuple of 6"):
        differing(a, 0, b, 1, 6, 8)


def test_align_finds_a_window_that_moved() -> None:
    old = tuple(POOL[:10])
    new = (POOL[20], *POOL[3:10], POOL[30], POOL[31])
    assert align(new, old) == (1, 3, [])
    swapped = (*POOL[3:6], Message.user("trimmed"), *POOL[7:10], POOL[30])
    assert align(swapped, old) == (0, 3, [3])
    assert align(tuple(reversed(old)), old) == (0, 9, [])  # m9, then nine new messages
    assert align(old[:9], old) is None  # the last message was dropped
    # a kept message removed: what is before it counts as new
    assert align((*POOL[3:5], POOL[6], *POOL[7:10]), old) == (2, 6, [])
    assert align((*POOL[3:10], *POOL[20:40]), old) is None  # more new messages than looked for


def test_aligned_values_are_those_made_from_scratch() -> None:
    made: list[Message] = []

    def make(m: Message) -> str:
        made.append(m)
        return m.text

    values: Aligned[str] = Aligned()
    first = tuple(POOL[:30])
    assert values.many(first, make, lambda: [m.text for m in first]) == [m.text for m in first]
    assert made == []  # the first call is the fallback's
    second = (POOL[35], *POOL[5:30], Message.user("x"), POOL[36])
    assert values.many(second, make, lambda: []) == [m.text for m in second]
    assert [m.text for m in made] == ["m35", "x", "m36"]  # only the new ones were made


def test_aligned_values_take_the_previous_list_over_and_keep_it_when_make_raises() -> None:
    """A continuation splices the previous list in place (no copy of the window on every warm
    render); a ``make`` that raises leaves the values of the last sequence as they were."""
    values: Aligned[int] = Aligned()
    first = tuple(POOL[:30])
    kept, _ = values.counted(first, lambda m: len(m.text), lambda: [len(m.text) for m in first])
    second = (*POOL[3:30], Message.user("new one"))
    got, got_total = values.counted(second, lambda m: len(m.text), lambda: [])
    assert got is kept
    assert got == [len(m.text) for m in second] and got_total == sum(got)

    def broken(m: Message) -> int:
        raise RuntimeError(m.text)

    before = list(got)
    with pytest.raises(RuntimeError):
        values.counted((*second[2:], Message.user("next")), broken, lambda: [])
    assert values.values == before and values.total == got_total and values.msgs is second


# -- the inject phase, stage by stage ----------------------------------------------------------


class Stages:
    """Wraps compose, the hygiene pre-passes and render of the inject phase: each result made
    with the session's memo is compared with the one made from scratch."""

    def __init__(self) -> None:
        self.renders = 0
        self.blank = 0
        self.dropped = 0

    def compose(self, state: Any, plan: Any, by_id: Any) -> Transcript:
        memo = state.token_cache.memo
        warm = compose(state, plan, by_id)
        kept = memo.composed
        memo.composed = None
        cold = compose(state, plan, by_id)
        assert warm.messages == cold.messages
        assert [m.meta for m in warm.messages] == [m.meta for m in cold.messages]
        # the grains of the tree, from the warm record, are those of the plan
        assert kept.grains == memo.composed.grains
        memo.composed = kept
        return warm

    def non_blank(self, t: Transcript, provider: str, memo: RenderMemo) -> Transcript:
        warm = turn_module_non_blank(t, provider, memo)
        cold = turn_module_non_blank(t, provider, RenderMemo())
        assert warm.messages == cold.messages
        self.blank += warm is not t
        return warm

    def non_empty(
        self, t: Transcript, provider: str, memo: RenderMemo
    ) -> tuple[Transcript, list[dict[str, Any]]]:
        warm = turn_module_non_empty(t, provider, memo)
        cold = turn_module_non_empty(t, provider, RenderMemo())
        assert warm[0].messages == cold[0].messages and warm[1] == cold[1]
        self.dropped += bool(warm[1])
        return warm

    def render(self, t: Transcript, provider: str, **options: Any) -> Rendered:
        fast = render(t, provider, **options)
        options.pop("memo")
        slow = render(t, provider, **options)
        assert _dump(fast.payload) == _dump(slow.payload)
        assert fast.transcript.messages == slow.transcript.messages
        assert fast.report == slow.report and fast.breakpoints == slow.breakpoints
        self.renders += 1
        return fast


turn_module_non_blank = turn_module._non_blank
turn_module_non_empty = turn_module._non_empty


def _chunks(messages: list[Message], start: int, size: int, n: int) -> list[tuple[int, int]]:
    """Up to ``n`` spans of about ``size`` messages from ``start``, each ending where no tool
    result follows: a call whose result the next span brings needs a synthetic result from
    hygiene, and a render that needed hygiene leaves no record for the warm path."""
    out: list[tuple[int, int]] = []
    while len(out) < n and start < len(messages):
        end = min(start + size, len(messages))
        while end < len(messages) and messages[end].role == "tool":
            end += 1
        out.append((start, end))
        start = end
    return out


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: Path(p).parent.name)
@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_every_warm_stage_equals_the_stage_from_scratch(
    path: Path, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages = Stages()
    monkeypatch.setattr(turn_module, "compose", stages.compose)
    monkeypatch.setattr(turn_module, "_non_blank", stages.non_blank)
    monkeypatch.setattr(turn_module, "_non_empty", stages.non_empty)
    monkeypatch.setattr(turn_module, "render", stages.render)
    messages = list(load(path).messages)
    engine = ContextEngine("gpt-4o", Budget(total=6_000))
    async with engine.session("stages") as session:
        session.extend(messages[:40])
        await session.user_message("   ")  # a blank user turn, kept for a few renders
        for k, (start, end) in enumerate(_chunks(messages, 40, 15, 12)):
            session.extend(messages[start:end])
            await session.user_message(f"then {k}")
            await session.render(provider, **PROVIDERS[provider])
            session.extend([Message.assistant(f"ok {k}"), Message.user(f"next {k}")])
            await session.render(provider, **PROVIDERS[provider])
        memo = session._state.token_cache.memo
    assert stages.renders >= 24
    assert memo.warm.reused > 0  # the warm path was taken, and compared
    if provider in ("anthropic", "gemini"):
        assert stages.blank > 0  # the blank turn's stand-in was compared while it was kept


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_a_caller_editing_a_warm_payload_does_not_change_the_next(provider: str) -> None:
    messages = list(load(SESSIONS[0]).messages)[:120]
    engine = ContextEngine("gpt-4o", Budget(total=8_000))
    async with engine.session("edits") as session:
        session.extend(messages)
        await session.user_message("first")
        out = await session.render(provider, **PROVIDERS[provider])
        for k in range(3):
            for value in out.payload.values():
                if isinstance(value, list):
                    for item in value:
                        item["tampered"] = k
                    value.append({"role": "user", "content": "TAMPERED"})
                    value.insert(0, {"role": "user", "content": "TAMPERED"})
            session.extend([Message.assistant(f"ok {k}"), Message.user(f"next {k}")])
            out = await session.render(provider, **PROVIDERS[provider])
            assert "tampered" not in _dump(out.payload) and "TAMPERED" not in _dump(out.payload)
            fresh = render(out.transcript, provider, **PROVIDERS[provider])
            assert _dump(out.payload) == _dump(fresh.payload)
        assert session._state.token_cache.memo.warm.reused >= 3


def _after(order: list[str], before: list[str], max_head: int) -> Any:
    """``Plan.history_after`` by its definition, on the two ``history_order`` lists."""
    for head in range(min(max_head, len(order))):
        if order[head] not in before:
            continue
        k = before.index(order[head])
        end = head + len(before) - k
        if order[head:end] != before[k:]:
            return None
        return head, k, order[:head] + order[end:]
    return None


@pytest.mark.anyio
async def test_history_after_answers_what_comparing_the_history_orders_does() -> None:
    """The plans of a session whose history grows, drops turns (a tight budget) and compacts:
    each plan against the ones before and after it, the answer of the two lists."""
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    plans: list[Any] = []
    async with engine.session("after") as session:
        for i in range(40):
            session.extend(
                [Message.user(f"question {i} " + "word " * 80), Message.assistant(f"answer {i}")]
            )
            await session.render()
            plans.append(session._state.token_cache.memo.composed.plan)
    orders = [p.history_order for p in plans]
    shapes = set()
    for i, plan in enumerate(plans):
        for j in (i - 3, i - 1, i, i + 1):
            if 0 <= j < len(plans):
                for max_head in (0, 1, 4):
                    want = _after(orders[i], orders[j], max_head)
                    assert plan.history_after(plans[j], max_head) == want
                    shapes.add(None if want is None else (want[0] > 0, want[1] > 0))
    assert None in shapes and (False, True) in shapes  # some continue after a drop, some not
