"""Property tests: random transcripts with dropped, duplicated, shuffled and orphan results."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxengine.hygiene import clean, fix_turn_order, repair_pairing, sanitize_tool_ids, validate
from ctxengine.transcript import Message, Text, ToolCall, ToolResult, Transcript
from transcript.helpers import PROVIDERS

FAST = settings(max_examples=150, deadline=None, database=None)


def _result(call_id: str, text: str = "r") -> Message:
    return Message("tool", (ToolResult(call_id, (Text(text),)),))


@st.composite
def _assistant_step(draw: Any, ids: list[str]) -> tuple[Message, list[ToolResult]]:
    stop = draw(st.sampled_from([None, None, None, "error", "aborted"]))
    text = draw(st.sampled_from(["", "  ", "working"]))
    calls = tuple(ToolCall(i, draw(st.sampled_from(["bash", "read"])), {"n": i}) for i in ids)
    blocks = ((Text(text),) if text else ()) + calls
    results = [ToolResult(i, (Text(f"out {i}"),)) for i in ids]
    return Message("assistant", blocks, stop_reason=stop), results


@st.composite
def messy_transcripts(draw: Any) -> Transcript:
    msgs: list[Message] = []
    loose: list[ToolResult] = []
    if draw(st.booleans()):
        msgs.append(Message.system("sys"))
    if draw(st.booleans()):
        msgs.append(Message.assistant("I start"))
    counter = 0
    for _ in range(draw(st.integers(0, 4))):
        msgs.append(Message.user(draw(st.sampled_from(["u", "", "next"]))))
        for _ in range(draw(st.integers(0, 3))):
            n = draw(st.integers(0, 3))
            ids = [f"c{counter + k}" for k in range(n)]
            counter += n
            assistant, results = draw(_assistant_step(ids))
            msgs.append(assistant)
            for r in results:
                fate = draw(st.sampled_from(["keep", "keep", "keep", "drop", "dup", "move"]))
                if fate in ("keep", "dup"):
                    msgs.append(Message("tool", (r,)))
                if fate in ("dup", "move"):
                    loose.append(r)
    for r in loose:  # duplicates and moved results land anywhere, even before their call
        msgs.insert(draw(st.integers(0, len(msgs))), Message("tool", (r,)))
    for _ in range(draw(st.integers(0, 2))):  # orphans answering no call at all
        msgs.insert(draw(st.integers(0, len(msgs))), _result("ghost"))
    if draw(st.booleans()):  # shuffle the order of a run of results
        runs = [i for i in range(len(msgs) - 1) if msgs[i].role == msgs[i + 1].role == "tool"]
        if runs:
            i = draw(st.sampled_from(runs))
            msgs[i], msgs[i + 1] = msgs[i + 1], msgs[i]
    return Transcript(tuple(msgs))


@FAST
@given(messy_transcripts())
def test_repair_then_order_is_valid_for_every_provider(t: Transcript) -> None:
    repaired, _ = repair_pairing(t)
    for provider in PROVIDERS:
        fixed, _ = fix_turn_order(repaired, provider)
        assert validate(fixed, provider) == []


@FAST
@given(messy_transcripts())
def test_repair_is_idempotent_and_deterministic(t: Transcript) -> None:
    once, report = repair_pairing(t)
    assert repair_pairing(once)[0] is once
    assert repair_pairing(t)[0] == once
    assert report.changed == (once is not t)


@FAST
@given(messy_transcripts())
def test_repair_keeps_one_result_per_call_and_the_first_one(t: Transcript) -> None:
    once, _ = repair_pairing(t)
    calls = [c for m in once if m.role == "assistant" and not m.failed for c in m.tool_calls]
    results = [r for m in once for r in m.tool_results]
    assert sorted(r.call_id for r in results) == sorted(c.id for c in calls)
    assert not any(m.tool_calls for m in once if m.failed)


@FAST
@given(messy_transcripts())
def test_clean_is_a_fixed_point(t: Transcript) -> None:
    for provider in PROVIDERS:
        cleaned, _ = clean(t, provider)
        assert validate(cleaned, provider) == []
        again, report = clean(cleaned, provider)
        assert again is cleaned and not report.changed


_ID_CHARS = st.sampled_from(list("ab1_|:.- xyZ9"))


@FAST
@given(st.lists(st.text(_ID_CHARS, min_size=0, max_size=50), min_size=1, max_size=6))
def test_sanitized_ids_fit_every_provider_and_results_follow(ids: list[str]) -> None:
    msgs: list[Message] = [Message.user("go")]
    for i, cid in enumerate(ids):
        msgs.append(Message("assistant", (ToolCall(cid, "t", {"i": i}),)))
        msgs.append(_result(cid, f"out {i}"))
    t = Transcript(tuple(msgs))
    for mode, check in (("strict", lambda s: len(s) <= 40), ("strict9", lambda s: len(s) == 9)):
        out, _ = sanitize_tool_ids(t, mode)  # type: ignore[arg-type]
        new = [c.id for m in out for c in m.tool_calls]
        assert len(set(new)) == len(new)
        assert all(s.isascii() and s.isalnum() and check(s) for s in new)
        for provider in PROVIDERS:
            assert validate(out, provider) == []  # every result still follows its call
        texts = [r.content for m in out for r in m.tool_results]
        assert texts == [(Text(f"out {i}"),) for i in range(len(ids))]
        assert sanitize_tool_ids(out, mode)[0] is out  # type: ignore[arg-type]
