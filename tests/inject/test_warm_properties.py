"""Differential property tests of warm renders (issue 14).

A render given the session's memo reuses the previous render's hygiene, export and token counts
when the new transcript is the previous one with leading messages dropped and/or messages added
at either end. Here random sessions go through random edit sequences (append, drop leading
messages, replace a middle one, new head messages, system text changes) with reused message
objects, as the engine makes them; every render with the memo must equal, byte for byte, the
render from scratch of the same transcript: payload, cleaned transcript, hygiene report, cache
breakpoints, and the payload's tokens.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxengine.assemble.pipeline as pipeline
from ctxengine import Budget, ContextEngine
from ctxengine.errors import AdapterError, BudgetError
from ctxengine.inject.memo import RenderMemo
from ctxengine.inject.payload import MessageTokenCache, payload_tokens
from ctxengine.inject.render import Rendered, render
from ctxengine.transcript import Message, Text, Thinking, ToolCall, ToolResult, Transcript, load
from offline_tiktoken import TRANSCRIPTS

MODEL = "gpt-4o"
PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini"]
SETTINGS = settings(max_examples=120, deadline=None, database=None)
_IDS = ["c1", "c2", "call_3", "call|item:4", "x" * 50, "dup", "abcdefghi", "toolu_01"]


def _dump(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, ensure_ascii=False)


@st.composite
def _message(draw: Any, serial: int, hostile: bool = True) -> list[Message]:
    """One step of a session: a message, or an assistant turn with its results; with
    ``hostile`` also what hygiene must repair (and messages some providers drop)."""
    kinds = ["user", "user", "user", "assistant", "calls", "calls", "calls"] * 4
    if hostile:
        kinds += ["thinking", "system", "blank", "tool"]
    kind = draw(st.sampled_from(kinds))
    if not hostile:
        ids = [f"id{serial}x{k}" for k in range(draw(st.integers(1, 2)))]
        turn = Message.assistant(f"calling {serial}", [ToolCall(i, "read", {}) for i in ids])
        results = tuple(ToolResult(i, (Text(f"out {i}"),)) for i in ids)
        if kind == "calls":
            return [turn, Message("tool", results)]
        if kind == "assistant":
            return [Message.assistant(f"answer {serial}")]
        return [Message.user(f"question {serial}")]
    if kind == "user":
        return [Message.user(f"question {serial}")]
    if kind == "blank":
        return [Message.user("  ")]
    if kind == "system":
        return [Message.system(f"note {serial}")]
    if kind == "assistant":
        stop = draw(st.sampled_from([*[None] * 8, "error"]))
        end = draw(st.sampled_from(["", "", "", " ", " \n"]))  # Anthropic strips it when last
        return [Message("assistant", (Text(f"answer {serial}{end}"),), stop_reason=stop)]
    if kind == "thinking":
        family = draw(st.sampled_from([None, "anthropic", "gemini", "openai-responses"]))
        sig = draw(st.sampled_from([None, "sig", '{"type": "reasoning", "id": "rs_1"}']))
        blocks: tuple[Any, ...] = (Thinking(f"thought {serial}", sig),)
        if draw(st.booleans()):
            blocks += (Text(f"said {serial}"),)
        meta = {"provider_family": family} if family else {}
        return [Message("assistant", blocks, meta=meta)]
    if kind == "tool":  # a result nobody asked for (or a late duplicate)
        return [Message.tool(draw(st.sampled_from(_IDS)), f"late {serial}")]
    n = draw(st.integers(1, 2))
    ids = [draw(st.sampled_from([*_IDS, *[f"id{serial}x{k}"] * 24])) for k in range(n)]
    calls = [ToolCall(i, "read", {"n": serial}) for i in ids]
    stop = draw(st.sampled_from([*[None] * 12, "aborted"]))
    turn = Message("assistant", (Text(f"calling {serial}"), *calls), stop_reason=stop)
    answer = draw(st.sampled_from(["all"] * 12 + ["split"] * 3 + ["none", "first", "after_user"]))
    results = [ToolResult(i, (Text(f"out {i} {serial}"),)) for i in ids]
    if answer == "all":
        return [turn, Message("tool", tuple(results))]
    if answer == "split":
        return [turn] + [Message("tool", (r,)) for r in results]
    if answer == "first":
        return [turn, Message("tool", tuple(results[:1]))]
    if answer == "after_user":
        return [turn, Message.user(f"wait {serial}"), Message("tool", tuple(results))]
    return [turn]


@st.composite
def _steps(draw: Any, start: int, hostile: bool) -> list[Message]:
    out: list[Message] = []
    for k in range(draw(st.integers(1, 3))):
        out += draw(_message(start + k, hostile))
    return out


@st.composite
def sessions(draw: Any) -> tuple[str, dict[str, Any], list[Transcript]]:
    """A provider, its options and a sequence of transcripts, each an edit of the one before."""
    provider = draw(st.sampled_from(PROVIDERS))
    options: dict[str, Any] = {}
    if provider == "anthropic" and draw(st.booleans()):
        options = {"cache_breakpoints": draw(st.integers(1, 4)), "cache_ttl": "5m"}
    if draw(st.integers(0, 4)) == 0:
        options["id_mode"] = draw(st.sampled_from(["strict", "strict9"]))
    hostile = draw(st.booleans())
    system: Message | None = Message.system("you are helpful")
    history: list[Message] = [Message.user("task")]
    serial = 0
    for _ in range(draw(st.integers(0, 6))):
        serial += 10
        history += draw(_steps(serial, hostile))
    transcripts = []
    for _ in range(draw(st.integers(2, 9))):
        head = [system] if system is not None else []
        transcripts.append(Transcript((*head, *history), source_format="render"))
        edit = draw(
            st.sampled_from(
                [
                    *["append"] * 3,
                    *["drop"] * 2,
                    *["head", "head_turn", "replace", "trim", "system", "rewind"],
                ]
            )
        )
        serial += 10
        if edit == "append":
            history += draw(_steps(serial, hostile))
        elif edit == "drop" and history:
            k = draw(st.integers(1, max(1, len(history) // 2)))
            while draw(st.booleans()) and k < len(history) and history[k].role == "tool":
                k += 1  # mostly at a turn boundary, as the plan drops turns
            history = history[k:]
            if draw(st.booleans()):
                history += draw(_steps(serial + 5, hostile))
        elif edit == "head":
            history = [Message.user(f"[{serial} earlier turns removed]"), *history[1:]]
        elif edit == "head_turn":
            # the earlier turns summed up as a turn of their own, a tool call and its result,
            # put before the first kept user message (a window that slides by whole turns)
            k = next((j for j, m in enumerate(history) if j and m.role == "user"), None)
            if k is not None:
                cid = f"id{serial}h"
                history = [
                    Message.user(f"[{serial} earlier turns removed]"),
                    Message.assistant("", [ToolCall(cid, "recall", {"n": serial})]),
                    Message.tool(cid, f"summary {serial}"),
                    *history[k:],
                ]
        elif edit == "replace" and len(history) > 2:
            i = draw(st.integers(1, len(history) - 2))
            history[i] = draw(_message(serial, hostile))[0]
        elif edit == "rewind" and len(history) > 1:
            history = history[: -draw(st.integers(1, len(history) - 1))]
        elif edit == "trim" and history:
            # a soft trim: the same message with shorter text (or emptied)
            i = draw(st.integers(0, len(history) - 1))
            m = history[i]
            text = draw(st.sampled_from(["[trimmed]"] * 6 + ["", " "]))
            if m.role == "tool":
                results = tuple(
                    ToolResult(r.call_id, (Text(text),), r.is_error) for r in m.tool_results
                )
                history[i] = Message("tool", results)
            elif m.role in ("user", "assistant", "system"):
                rest = tuple(b for b in m.blocks if not isinstance(b, Text))
                blocks = ((Text(text),) if m.role != "assistant" or text else ()) + rest
                history[i] = Message(m.role, blocks, stop_reason=m.stop_reason, meta=m.meta)
        elif edit == "system":
            system = draw(
                st.sampled_from([None, Message.system("you are helpful"), Message.system("new")])
            )
    return provider, options, transcripts


STATS = [0, 0]


def _render_or_error(t: Transcript, provider: str, **options: Any) -> Rendered | str:
    try:
        return render(t, provider, **options)
    except AdapterError as e:
        return str(e)


def _tokens(memo: RenderMemo, out: Rendered) -> int:
    """The payload's tokens as the inject phase counts them (reused counts when it can)."""
    cache = MessageTokenCache()
    cache.memo = memo
    return cache.tokens(out.transcript, out.payload, out.provider, MODEL)


@SETTINGS
@given(sessions())
def test_warm_render_equals_render_from_scratch(case: Any) -> None:
    provider, options, transcripts = case
    memo = RenderMemo()
    for t in transcripts:
        before = memo.warm.reused
        fast = _render_or_error(t, provider, memo=memo, **options)
        STATS[memo.warm.reused > before] += 1
        slow = _render_or_error(t, provider, **options)
        memo.end_render()
        if isinstance(slow, str) or isinstance(fast, str):
            assert fast == slow
            continue
        assert _dump(fast.payload) == _dump(slow.payload)
        assert fast.transcript.messages == slow.transcript.messages
        assert fast.report == slow.report
        assert fast.breakpoints == slow.breakpoints
        assert _tokens(memo, fast) == payload_tokens(slow.payload, provider, MODEL)


def _tool_session(n: int) -> list[Message]:
    out: list[Message] = [Message.user("start")]
    for i in range(n):
        out.append(Message.assistant(f"step {i}", [ToolCall(f"t{i}", "read", {"i": i})]))
        out.append(Message.tool(f"t{i}", f"result {i}"))
        out.append(Message.assistant(f"done {i}"))
        out.append(Message.user(f"next {i}"))
    return out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_sliding_window_reuses_every_render(provider: str) -> None:
    """A window that drops whole leading turns and gains new ones: after the first render,
    every render reuses the previous one (and still equals the render from scratch)."""
    messages = _tool_session(60)
    system = Message.system("sys")
    memo = RenderMemo()
    options = {"cache_breakpoints": 4} if provider == "anthropic" else {}
    renders = 0
    for end in range(41, len(messages), 4):
        start = end - 40
        while messages[start].role != "assistant":  # begin at a turn (Anthropic: bootstrap)
            start += 1
        t = Transcript((system, *messages[start:end]), source_format="render")
        fast = render(t, provider, memo=memo, **options)
        slow = render(t, provider, **options)
        memo.end_render()
        assert _dump(fast.payload) == _dump(slow.payload)
        assert fast.report == slow.report
        assert _tokens(memo, fast) == payload_tokens(slow.payload, provider, MODEL)
        renders += 1
    assert memo.warm.built == 1
    assert memo.warm.reused == renders - 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_soft_trim_of_a_kept_message_is_reused(provider: str) -> None:
    """A kept tool result shortened (as the plan's soft trim does): only it is exported and
    counted again, and the payload is the one made from scratch."""
    messages = _tool_session(10)
    memo = RenderMemo()
    t = Transcript((Message.system("sys"), *messages), source_format="render")
    render(t, provider, memo=memo)
    memo.end_render()
    trimmed = list(t.messages)
    trimmed[3] = Message.tool("t0", "[trimmed]")
    t2 = t.replace((*trimmed, Message.assistant("ok"), Message.user("more")))
    fast = render(t2, provider, memo=memo)
    slow = render(t2, provider)
    assert memo.warm.reused == 1
    assert "[trimmed]" in _dump(fast.payload)
    assert _dump(fast.payload) == _dump(slow.payload)
    assert _tokens(memo, fast) == payload_tokens(slow.payload, provider, MODEL)


def test_gemini_results_in_call_order_on_warm_renders() -> None:
    """Results of parallel calls that arrived out of order are sent in call order by the warm
    path too: when they are new, kept, or soft-trimmed in place."""
    calls = Message.assistant("", [ToolCall(c, "read", {"c": c}) for c in ("a1", "b2", "c3")])
    base = (Message.user("go"), calls, *(Message.tool(c, f"out {c}") for c in ("c3", "a1", "b2")))
    steps = [base, (*base, Message.user("more"))]
    trimmed = list(steps[-1])
    trimmed[3] = Message.tool("a1", "[trimmed]")
    steps += [
        (*trimmed, Message.assistant("ok")),
        (*trimmed, Message.assistant("ok"), Message.user("x")),
    ]
    memo = RenderMemo()
    for messages in steps:
        t = Transcript((Message.system("sys"), *messages), source_format="render")
        fast = render(t, "gemini", memo=memo)
        slow = render(t, "gemini")
        memo.end_render()
        assert _dump(fast.payload) == _dump(slow.payload)
        parts = fast.payload["contents"][2]["parts"]
        assert [p["functionResponse"]["id"] for p in parts if "functionResponse" in p] == [
            "a1",
            "b2",
            "c3",
        ]
    assert memo.warm.reused == len(steps) - 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_new_head_ending_with_results_before_a_kept_user_message(provider: str) -> None:
    """New head messages ending with a tool result, then the kept history from a user
    message: Anthropic and Gemini send the results and that user text as one user turn (as a
    render from scratch does), not as two user turns in a row."""
    system = Message.system("sys")
    kept = [Message.user("u2"), Message.assistant("a2"), Message.user("u3")]
    memo = RenderMemo()
    first = Transcript((system, Message.user("u1"), Message.assistant("a1"), *kept), "render")
    render(first, provider, memo=memo)
    memo.end_render()
    head = (
        Message.user("h0"),
        Message.assistant("", [ToolCall("x1", "read", {})]),
        Message.tool("x1", "res"),
    )
    second = Transcript((system, *head, *kept, Message.assistant("a3")), "render")
    fast = render(second, provider, memo=memo)
    slow = render(second, provider)
    assert _dump(fast.payload) == _dump(slow.payload)
    assert fast.report == slow.report
    assert _tokens(memo, fast) == payload_tokens(slow.payload, provider, MODEL)


def test_reuse_refused_when_the_end_is_dropped() -> None:
    """The previous history's last messages gone (a rewrite): no reuse, the full path."""
    messages = _tool_session(5)
    t = Transcript((Message.system("sys"), *messages), source_format="render")
    memo = RenderMemo()
    render(t, "openai", memo=memo)
    shorter = t.replace(t.messages[:-3])
    out = render(shorter, "openai", memo=memo)
    assert memo.warm.reused == 0
    assert _dump(out.payload) == _dump(render(shorter, "openai").payload)


def test_reuse_refused_for_a_result_answering_a_kept_call() -> None:
    calls = Message.assistant("go", [ToolCall("k1", "read", {})])
    first = Transcript((Message.user("q"), calls, Message.tool("k1", "a")), source_format="x")
    memo = RenderMemo()
    render(first, "openai", memo=memo)
    # a second result for the kept call: hygiene drops it, so the full path must run
    second = first.replace((*first.messages, Message.tool("k1", "again")))
    out = render(second, "openai", memo=memo)
    assert memo.warm.reused == 0
    assert [c.action for c in out.report.changes] == ["dropped_duplicate", "dropped_message"]
    assert len(out.payload["messages"]) == 3


def test_payload_message_dicts_are_fresh_per_render() -> None:
    t = Transcript((Message.user("hello"), Message.assistant("hi")), source_format="x")
    memo = RenderMemo()
    first = render(t, "openai", memo=memo)
    first.payload["messages"][0]["content"] = "tampered"
    second = render(t.replace((*t.messages, Message.user("more"))), "openai", memo=memo)
    assert memo.warm.reused == 1
    assert second.payload["messages"][0]["content"] == "hello"


# -- the incremental plan ---------------------------------------------------------------------
# The core's plan follows the totals and orders upsert/remove keep up to date: every plan a
# render asks for must equal the plan recomputed from the items (``full=True``), at the render's
# budget and at tighter ones where the ladder must cut, as sessions grow, fill their budget,
# compact and slide.


def _plan_facts(plan: Any) -> tuple[Any, ...]:
    return (
        plan.budget,
        plan.available,
        plan.target,
        plan.high,
        plan.total_before,
        plan.total_after,
        plan.fits,
        plan.context_order,
        plan.history_order,
        plan.replacements,
        plan.windows,
        plan.compaction_turns,
        plan.compaction_tokens,
        plan.decisions(),
    )


def _plan_or_error(asm: Any, budget: int, full: bool, hold: float = 1.0) -> tuple[Any, ...] | str:
    try:
        return _plan_facts(asm.plan(budget, full=full, hold=hold))
    except BudgetError as exc:
        return str(exc)


class PlanChecks:
    """Wraps the assemble phase's ``plan_within``: each plan it makes is compared with the full
    plan, and so are plans for a third and an eighth of its budget."""

    def __init__(self) -> None:
        self.plans = 0
        self.cut = 0  # compared plans the ladder had to cut
        self.fast = 0  # compared plans that fit (the path that skips the history)

    def wrap(self, original: Any) -> Any:
        def plan_within(state: Any, config: Any, cut: int = 0) -> Any:
            plan = original(state, config, cut)
            hold = config.compaction.render_high_water if cut == 0 else 1.0
            assert _plan_facts(plan) == _plan_or_error(state.asm, plan.budget, True, hold)
            for budget in (plan.budget, plan.budget // 3, plan.budget // 8):
                for held in (1.0, hold):
                    fast = _plan_or_error(state.asm, budget, False, held)
                    assert fast == _plan_or_error(state.asm, budget, True, held), (budget, held)
                if not isinstance(fast, str):
                    over = fast[4] > fast[3]  # total_before > high
                    self.cut += over
                    self.fast += not over
            self.plans += 1
            return plan

        return plan_within


def _checked_plans(monkeypatch: pytest.MonkeyPatch) -> PlanChecks:
    checks = PlanChecks()
    monkeypatch.setattr(pipeline, "plan_within", checks.wrap(pipeline.plan_within))
    return checks


@pytest.mark.parametrize(
    "path",
    [
        TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl",
        TRANSCRIPTS / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    ],
    ids=lambda p: p.parent.name,
)
@pytest.mark.anyio
async def test_incremental_plan_equals_the_full_plan_on_real_sessions(
    path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = _checked_plans(monkeypatch)
    messages = list(load(path).messages)
    engine = ContextEngine(MODEL, Budget(total=12_000))
    async with engine.session("plans") as session:
        session.extend(messages[:20])
        await session.user_message("Where are we?")
        await session.render()
        step = max(2, len(messages) // 25)
        for k, start in enumerate(range(20, len(messages), step)):
            session.extend(messages[start : start + step])
            for _ in range(3):  # warm rounds: one more exchange, as the benchmarks append
                session.extend([Message.assistant(f"ok {k}"), Message.user(f"next {k}")])
                await session.render()
        compactions = session._state.summary is not None
    assert checks.plans >= 25 * 3
    assert checks.cut > 0 and checks.fast > 0, (checks.cut, checks.fast)
    assert compactions, "the budget filled up: the session compacted"


@st.composite
def _growing(draw: Any) -> tuple[int, list[list[Message]]]:
    """A budget and a session in steps: each step a few messages of random sizes."""
    budget = draw(st.sampled_from([1_500, 3_000, 6_000, 20_000]))
    steps: list[list[Message]] = []
    for i in range(draw(st.integers(3, 12))):
        step: list[Message] = [Message.user(f"request {i} " + "word " * draw(st.integers(0, 300)))]
        for j in range(draw(st.integers(0, 2))):
            cid = f"c{i}x{j}"
            step.append(Message.assistant(f"call {i}", [ToolCall(cid, "read", {"i": i})]))
            size = draw(st.sampled_from([5, 50, 400, 3_000]))
            step.append(Message.tool(cid, f"line {i}\n" * size))
        step.append(Message.assistant(f"answer {i} " + "done " * draw(st.integers(0, 200))))
        steps.append(step)
    return budget, steps


@settings(max_examples=25, deadline=None, database=None)
@given(_growing())
def test_incremental_plan_equals_the_full_plan_on_generated_sessions(case: Any) -> None:
    budget, steps = case
    checks = PlanChecks()
    original = pipeline.plan_within
    pipeline.plan_within = checks.wrap(original)  # type: ignore[assignment]
    try:
        anyio.run(_play, budget, steps)
    finally:
        pipeline.plan_within = original  # type: ignore[assignment]
    assert checks.plans >= len(steps)


async def _play(budget: int, steps: list[list[Message]]) -> None:
    engine = ContextEngine(MODEL, Budget(total=budget))
    async with engine.session("generated") as session:
        for step in steps:
            session.extend(step)
            # the latest turn alone may be over the budget: the plan check ran before
            with contextlib.suppress(BudgetError):
                await session.render()
