"""Where a compacting render lands, how often compaction runs, and the back-off after a
failed one.

A render compacts past the high-water mark (``CompactionConfig.render_high_water`` of the
plan's target) down to ``CompactionConfig.render_low_water`` of the target, measured with the
actual summary: the render uses the room it has (≥ 95 % of the target whenever content was
cut), and the renders after it grow from there up to the mark, cutting nothing. A summarizer
that fails is not called again on every render past the mark.
"""

from __future__ import annotations

from functools import partial
from itertools import pairwise
from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine, ContextGrain
from ctxengine.assemble.compact import RETRY_RENDERS
from ctxengine.assemble.pipeline import FRAMING_TOKENS
from ctxengine.compaction import CompactionConfig
from ctxengine.compaction.pipeline import EXCERPTS_HEADING
from ctxengine.compaction.sections import request_findable
from ctxengine.replay import replay
from ctxengine.transcript import Image, Message, Text, Thinking, ToolCall

from .helpers import DATA, Failing
from .test_engine_compaction import FAST, rules, turn


class Switchable:
    """A summarizer that raises while ``broken`` is set, else writes a short summary."""

    def __init__(self) -> None:
        self.broken = True
        self.calls = 0

    async def summarize(self, messages: Any, *, instructions: str, max_tokens: int) -> str:
        self.calls += 1
        if self.broken:
            raise RuntimeError("model unavailable")
        return "The user asked for a series of small fixes; each was patched and tested."


def test_a_failing_summarizer_is_not_called_on_every_render_past_the_mark() -> None:
    summarizer = Switchable()
    attempts: list[int] = []
    deferred: list[str] = []
    written: list[int] = []

    async def main() -> None:
        engine = ContextEngine("gpt-4o", Budget(total=1500), summarizer=summarizer, compaction=FAST)
        async with engine.session("s") as s:
            s.add(rules())
            for i in range(40):
                if i == 30:
                    summarizer.broken = False  # the model is back
                await turn(s, i)
                out = await s.render("openai")
                assert out.tokens <= 1500
                for c in out.report.compactions:
                    if c.get("stage") == "deferred":
                        deferred.append(c["error"])
                        assert not c["ok"]
                    else:
                        attempts.append(i)
                if any(c["ok"] for c in out.report.compactions):
                    written.append(i)

    anyio.run(main)
    failed = [i for i in attempts if i < 30]
    past_mark = [i for i in range(30) if i >= min(failed)]
    # backed off: 4, 8, 16 renders after the 1st, 2nd, 3rd failure (or growth of the history)
    assert 2 <= len(failed) < len(past_mark) // 2, (failed, past_mark)
    assert all(b - a >= 2 for a, b in pairwise(failed)), failed
    assert deferred and all(d.startswith("compaction deferred after failure") for d in deferred)
    # once the summarizer works again, the next due attempt writes the summary
    assert written and written[0] <= 30 + RETRY_RENDERS * 8


def test_at_a_tiny_budget_a_compacting_render_still_uses_nine_tenths_of_its_target() -> None:
    """The room a compaction leaves is ``render_low_water`` of the target at every budget: at
    600 tokens a turn is larger than it, so compaction runs on most renders, and each of
    them still uses at least 90 % of the target (the render contract)."""
    outs = anyio.run(partial(_growing, None, 26, budget=600, provider="anthropic"))
    uses = [o.tokens / o.report.target for o in _compacting(outs)]
    assert len(uses) >= 5  # the budget is full: compaction does run
    assert min(uses) >= 0.9, uses


async def _growing(
    high: float | None,
    turns: int,
    *,
    budget: int = 1500,
    pretrim: float = 0.8,
    provider: str = "openai",
) -> list[Any]:
    """Every render of a session growing by one turn at a time (each within its budget)."""
    compaction = CompactionConfig() if high is None else CompactionConfig(render_high_water=high)
    engine = ContextEngine(
        "gpt-4o", Budget(total=budget, pretrim_ratio=pretrim), compaction=compaction
    )
    outs: list[Any] = []
    async with engine.session("s") as s:
        s.add(rules())
        for i in range(turns):
            await turn(s, i)
            outs.append(await s.render(provider))
            assert outs[-1].tokens <= budget
    return outs


def _compacting(outs: list[Any]) -> list[Any]:
    return [o for o in outs if any(c["ok"] for c in o.report.compactions)]


def _cut(out: Any) -> bool:
    return any(g.decision != "kept" for g in out.report)


def test_a_render_between_the_target_and_the_mark_cuts_nothing() -> None:
    outs = anyio.run(_growing, None, 60)
    held = [o for o in outs if o.tokens > o.report.target and not o.report.compactions]
    assert len(held) >= 5  # the session does pass its target between compactions
    for out in held:
        assert not _cut(out) and out.tokens <= out.report.target * 1.1 + 10
        # the report says why nothing was cut: the render sat under its high-water mark
        r = out.report
        assert r.high_water == int(r.target * 1.1), (r.high_water, r.target)
        assert r.tokens_estimated - FRAMING_TOKENS <= r.high_water
        assert r.to_dict()["high_water"] == r.high_water
    compacting = _compacting(outs)
    assert len(compacting) >= 2
    # a compaction lands within 5 % of the target; the render before it was past the mark
    for out in compacting:
        assert 0.95 * out.report.target <= out.tokens <= out.report.target, out.tokens
    before = [outs[i - 1] for i, o in enumerate(outs) if o in compacting and i > 0]
    assert all(b.tokens > b.report.target for b in before)


def test_without_room_above_the_target_every_render_past_it_cuts() -> None:
    outs = anyio.run(_growing, 1.0, 60)
    past = [o for o in outs if o.report.compactions or _cut(o)]
    assert past and all(o.tokens <= o.report.target for o in past)
    assert all(o.report.high_water == o.report.target for o in outs)
    held = anyio.run(_growing, None, 60)
    # the mark makes compaction rarer
    assert len(_compacting(held)) < len(_compacting(outs))


def test_a_target_at_the_reserve_still_leaves_room_to_grow() -> None:
    """With ``pretrim_ratio=1.0`` the target is the budget less the reserve, so the high-water
    mark (capped there) is the target itself: the landing goes lower instead, keeping the
    settings' room between a compaction and the next (before: 54 compactions in 80 turns
    against 19 at the default ratio)."""
    usual = len(_compacting(anyio.run(partial(_growing, None, 80, pretrim=0.8))))
    full = len(_compacting(anyio.run(partial(_growing, None, 80, pretrim=1.0))))
    assert usual >= 5 and full <= usual * 1.5, (usual, full)


@pytest.mark.parametrize("high", [0.9, 2.5, float("nan"), True, "1.1"])
def test_the_render_high_water_mark_is_a_number_from_one_to_two(high: Any) -> None:
    with pytest.raises(ValueError, match=r"render_high_water=.*; expected a number in \[1, 2\]"):
        CompactionConfig(render_high_water=high)


@pytest.mark.parametrize("low", [0.0, 1.5])
def test_the_render_low_water_mark_is_a_fraction(low: float) -> None:
    with pytest.raises(ValueError, match=rf"render_low_water={low}; expected a fraction"):
        CompactionConfig(render_low_water=low)


_DEVICES = ("tablet", "phone", "laptop")


def _diagnosis(n: int) -> str:
    return f"Diagnosis {n}: the listener of {_DEVICES[n % 3]} window {n} keeps the key."


def _big_tail_session() -> list[Message]:
    """An aider-like session: small early turns, then a request far larger than the budget's
    room and its long answer, both in the protected tail, then a short latest request."""
    out = [Message.user("Let us work on the dictation hotkey.")]
    for i in range(4):
        out.append(Message.assistant(f"Step {i}: I looked at module_{i}.ts; it is fine."))
    # lines in a row differ by a word (a run of lines alike would be quoted as one line)
    big = "Read about the hotkey and push-to-talk, almost everything is ready.\n" + "\n".join(
        f"Log line {n}: the key-up event of push-to-talk arrives late on {_DEVICES[n % 3]} {n}."
        for n in range(200)
    )
    out.append(Message.user(big))
    out.append(Message.assistant("\n".join(_diagnosis(n) for n in range(90))))
    out.append(Message.user("where did you create the file?"))
    return out


def test_a_protected_tail_turn_larger_than_the_room_is_summarized_not_dropped() -> None:
    """The ladder sends the tail's huge turns to compaction: they are summarized with the
    rest (the request stays findable), and the summary takes the room they leave, with
    excerpts of the newest of them, so the render uses ≥ 90 % of its target. Before, they were
    dropped unsummarized ("to be summarized by compaction") and the render used about 30 %."""
    messages = _big_tail_session()

    async def main() -> Any:
        engine = ContextEngine("gpt-4.1", Budget(total=1500))
        async with engine.session("s") as s:
            s.extend(messages)
            return await s.render("openai")

    out = anyio.run(main)
    assert out.tokens <= 1500
    assert out.tokens >= 0.9 * out.report.target, (out.tokens, out.report.target)
    assert any(c["ok"] for c in out.report.compactions)
    for g in out.report:
        assert "to be summarized by compaction" not in g.reason, g
    text = "\n".join(str(m["content"]) for m in out.payload["messages"])
    assert request_findable(messages[5].text, text)
    assert out.payload["messages"][-1]["content"] == "where did you create the file?"
    assert EXCERPTS_HEADING in text
    assert _diagnosis(89) in text  # the newest line


async def _late_result_session(provider: str) -> Any:
    png = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
        "rkJggg=="
    )
    picture = Message("user", (Text("alpha"), Image("image/png", data=png)))
    call = ToolCall("call_1", "bash", {"cmd": "alpha"})
    engine = ContextEngine("gpt-4.1", Budget(total=100))
    async with engine.session("late") as s:
        s.extend(
            [
                Message("assistant", (Thinking("alpha", signature="sig"), call)),
                Message.tool("call_1", "alpha"),
                Message.assistant("ok"),
                *[picture] * 4,
                Message("assistant", (Thinking("alpha", signature="sig"),)),
                picture,
                Message.tool("call_1", "stray"),  # a second result for call_1, in the tail
                Message.assistant("ok"),
            ]
        )
        s.add(ContextGrain("sys.rules", content="alpha", protected=True, lifespan="session"))
        await s.user_message("LATEST alpha")
        return await s.render(provider)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_late_result_of_an_older_turn_in_the_tail_is_summarized_once(provider: str) -> None:
    """Found by the long contract run: a stray second result of ``call_1`` belongs to turn 0
    but lies in the protected tail; the tail's turn 0 then replaced the turn's older items in
    the landing and its items were summarized twice (``KeyError`` forgetting them)."""
    out = anyio.run(_late_result_session, provider)
    assert out.tokens <= 100
    assert out.transcript.messages[-1].text.endswith("LATEST alpha")
    ids = [d.node_id for d in out.report if "summarized into" in d.reason]
    assert len(ids) == len(set(ids))


PYDICOM = next((DATA / "swe-agent").rglob("pydicom__pydicom-1458.traj"))


def _replayed(path: Any, budget: int, **kw: Any) -> list[Any]:
    async def main() -> list[Any]:
        engine = ContextEngine("gpt-4.1", Budget(total=budget), **kw)
        return [step.rendered async for step in replay(path, engine)]

    return anyio.run(main)


def test_a_tail_turn_no_compaction_summarized_is_not_reported_as_to_be_summarized() -> None:
    """A SWE-agent run at 4k: one huge newest observation fills the protected tail, and the
    ladder drops an older tail turn for compaction, which leaves it out (the summary would
    have had to shrink). The report said "to be summarized by compaction" although that
    render's summary did not hold it; it says what happened: dropped for this render, not
    summarized, and why."""
    rendered = _replayed(PYDICOM, 4000)
    left = tail = 0
    for n, out in enumerate(rendered):
        assert out.tokens <= 4000
        summarized = {g.node_id for g in out.report if "summarized into" in g.reason}
        for g in out.report:
            assert "to be summarized by compaction" not in g.reason, (n, g)
            if "not summarized in it" in g.reason:
                left += 1
                assert g.status == "dropped" and g.stage == "compaction", g
                # why: the tail left no room, or that render's compaction failed (its
                # newest request, a long observation, passed the cap alone)
                tail += "the protected tail passes the target" in g.reason
                assert (
                    "the protected tail passes the target" in g.reason
                    or "the compaction failed (size:" in g.reason
                ), g
                assert g.node_id not in summarized
                # it stays in the session: a later render keeps it or summarizes it
                later = [r.report.get(g.node_id) for r in rendered[n + 1 :]]
                then = next(d for d in later if d is None or "not summarized" not in d.reason)
                assert then is not None, g
                assert then.status == "kept" or "summarized into" in then.reason, then
    assert left and tail  # the case happens in this run


def test_a_failed_compaction_says_its_turns_were_not_summarized() -> None:
    summarizer = Failing()
    rendered = _replayed(PYDICOM, 4000, summarizer=summarizer)
    assert summarizer.calls
    reasons = [g.reason for out in rendered for g in out.report if g.stage == "compaction"]
    assert not [r for r in reasons if "to be summarized by compaction" in r]
    assert any("not summarized in it: the compaction failed (" in r for r in reasons)
    assert any("not summarized in it: compaction deferred after failure" in r for r in reasons)


@pytest.mark.parametrize("high_water", [1.0, 1.1])
def test_a_render_whose_compaction_failed_keeps_each_request_with_its_answer(
    high_water: float,
) -> None:
    # The plan stands as the ladder made it when compaction fails. Hard trim used to remove
    # the plain answers into the placeholder and keep their requests (explicit input scores
    # above its threshold), and a short "yes" alone, keeping its answer.
    config = CompactionConfig(
        timeout=0.5, chunk_retries=0, backoff=0.0, render_high_water=high_water
    )

    async def main() -> None:
        budget = Budget(total=3000)
        engine = ContextEngine("gpt-4o", budget, summarizer=Failing(), compaction=config)
        async with engine.session("s") as s:
            for i in range(12):
                s.extend(
                    [
                        Message.user(f"question {i}: how does module {i} load its settings?"),
                        Message.assistant(f"answer {i}: " + "it reads and merges them. " * 30),
                        Message.user("yes"),
                        Message.assistant(f"step {i}: " + "done with that step. " * 20),
                    ]
                )
            s.extend([Message.user("what now?")])
            out = await s.render("openai")
            assert out.tokens <= 3000
            assert out.report.compactions and not out.report.compactions[0]["ok"]
            sent = {
                int(d.node_id[5:])
                for d in out.report
                if d.node_id.startswith("hist.") and d.decision in ("kept", "folded")
            }
            messages = s.messages
            assert len(sent) < len(messages) - 8, "the ladder cut"
            pairs = [(u, u + 1) for u, m in enumerate(messages[:-1]) if m.role == "user"]
            parted = [(u, a) for u, a in pairs if (u in sent) != (a in sent)]
            assert parted == []

    anyio.run(main)
