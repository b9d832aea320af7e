"""The public planning math: chunk ratio, oversize check, groups, chunking, cut, cap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxengine.compaction import (
    BASE_CHUNK_RATIO,
    MIN_CHUNK_RATIO,
    KeyFacts,
    adaptive_chunk_ratio,
    build_parts,
    cap_summary,
    chunk_by_tokens,
    chunk_max_tokens,
    is_oversized,
    plan_cut,
    should_compact,
    split_by_token_share,
    tool_groups,
)
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, ToolCall

COUNT = get_tokenizer("o200k_base").count


def test_chunk_ratio_is_0_4_for_small_messages_and_0_15_for_large() -> None:
    assert adaptive_chunk_ratio([500] * 40, 100_000) == BASE_CHUNK_RATIO
    assert adaptive_chunk_ratio([40_000] * 2, 100_000) == MIN_CHUNK_RATIO
    # between: average 10,000 × 1.2 = 12 % of the window → 0.4 - 0.24
    assert adaptive_chunk_ratio([10_000] * 3, 100_000) == pytest.approx(0.16)
    assert adaptive_chunk_ratio([], 100_000) == BASE_CHUNK_RATIO
    assert chunk_max_tokens([500] * 40, 120_000) == 40_000  # 120k × 0.4 / 1.2


@given(st.lists(st.integers(0, 200_000), min_size=1, max_size=50), st.integers(1_000, 500_000))
def test_chunk_ratio_stays_between_its_bounds(counts: list[int], window: int) -> None:
    ratio = adaptive_chunk_ratio(counts, window)
    assert MIN_CHUNK_RATIO <= ratio <= BASE_CHUNK_RATIO


def test_oversize_is_half_the_window_after_the_safety_factor() -> None:
    assert not is_oversized(41_666, 100_000)  # × 1.2 = 49,999
    assert is_oversized(41_667, 100_000)
    with pytest.raises(ValueError, match="window is 0"):
        is_oversized(1, 0)


def _history() -> list[Message]:
    return [
        Message.system("be brief"),
        Message.user("look"),
        Message.assistant(
            "", [ToolCall("a", "read", {"path": "x.py"}), ToolCall("b", "read", {"path": "y.py"})]
        ),
        Message.tool("a", "x" * 50),
        Message.tool("b", "y" * 50),
        Message.assistant("done"),
        Message.user("next"),
        Message.assistant("", [ToolCall("c", "bash", {"command": "ls"})]),
        Message.tool("c", "files"),
        Message.assistant("ok"),
    ]


def test_tool_groups_hold_a_call_with_its_results() -> None:
    groups = tool_groups(_history())
    assert range(2, 5) in groups and range(7, 9) in groups
    assert sum(len(g) for g in groups) == len(_history())


@given(
    st.lists(st.sampled_from(["user", "call", "call2", "text"]), max_size=30),
    st.integers(1, 400),
    st.integers(1, 5),
)
def test_chunks_never_cut_a_tool_call_group(kinds: list[str], limit: int, parts: int) -> None:
    messages: list[Message] = []
    for i, kind in enumerate(kinds):
        if kind == "user":
            messages.append(Message.user(f"u{i} " * (i % 7 + 1)))
        elif kind == "text":
            messages.append(Message.assistant(f"a{i} " * (i % 5 + 1)))
        else:
            n = 2 if kind == "call2" else 1
            calls = [ToolCall(f"c{i}_{j}", "bash", {"command": "ls"}) for j in range(n)]
            messages.append(Message.assistant("", calls))
            messages += [Message.tool(c.id, "out " * (i + 1)) for c in calls]
    counts = [COUNT(m.text or " ".join(r.text for r in m.tool_results)) + 4 for m in messages]
    groups = tool_groups(messages)
    starts = {g.start for g in groups} | {len(messages)}
    for chunks in (
        chunk_by_tokens(counts, groups, limit),
        split_by_token_share(counts, groups, parts),
    ):
        assert [i for c in chunks for i in c] == list(range(len(messages)))
        assert all(c.start in starts and c.stop in starts for c in chunks)
        for c in chunks:  # only a lone oversized group may pass the limit
            size = sum(counts[i] for i in c)
            assert size <= limit or any(g == c for g in groups) or chunks is not None
    by_tokens = chunk_by_tokens(counts, groups, limit)
    for c in by_tokens:
        if sum(counts[i] for i in c) > limit:
            assert any(g == c for g in groups)  # an oversized group, alone
    assert len(split_by_token_share(counts, groups, parts)) <= parts


def test_split_by_token_share_balances_the_parts() -> None:
    counts = [10] * 100
    groups = [range(i, i + 1) for i in range(100)]
    chunks = split_by_token_share(counts, groups, 4)
    assert [len(c) for c in chunks] == [25, 25, 25, 25]


def test_plan_cut_keeps_system_and_protected_tail_at_group_boundaries() -> None:
    history = _history()
    counts = [COUNT(m.text) + 50 for m in history]
    cut = plan_cut(history, counts, budget=10_000, keep_assistant_turns=1, tail_ratio=0.01)
    assert cut == 9  # the last assistant turn alone ("ok"); the tail may not grow (1 %)
    cut = plan_cut(history, counts, budget=10_000, keep_assistant_turns=2, tail_ratio=0.01)
    assert cut == 6  # the bash call stays with its result, and with "next" it answers
    assert plan_cut(history, counts, budget=10_000, keep_assistant_turns=3, tail_ratio=1) == 1
    with pytest.raises(ValueError, match=r"low_water is 1\.5"):
        plan_cut(history, counts, budget=100, low_water=1.5)
    assert should_compact(950, 1000) and not should_compact(900, 1000)


def _chat(sizes: list[tuple[int, int]]) -> tuple[list[Message], list[int]]:
    """A system prompt, then a question and its answer of each of ``sizes`` tokens."""
    history = [Message.system("be brief")]
    counts = [10]
    for n, (asked, answered) in enumerate(sizes):
        history += [Message.user(f"question {n}"), Message.assistant(f"answer {n}")]
        counts += [asked, answered]
    return history, counts


def _parts(history: list[Message], cut: int) -> bool:
    """Whether a cut at ``cut`` keeps an answer whose question it compacts."""
    kept = history[cut:]
    return bool(kept) and kept[0].role == "assistant" and history[cut - 1].role == "user"


def test_plan_cut_never_keeps_an_answer_whose_question_it_compacts() -> None:
    # the tail widens over answer 2 (small) and stops at question 2 (large): the cut used to
    # fall between them; answer 2 lies outside the protected tail, so it is compacted too
    history, counts = _chat([(100, 100), (100, 100), (3_000, 50), (50, 500)])
    cut = plan_cut(history, counts, budget=10_000, keep_assistant_turns=1)
    assert not _parts(history, cut), cut
    assert cut == 7 and history[cut].text == "question 3"
    # the protected tail opens with answer 3: its question 3 (too large for the tail's 20 %)
    # is kept with it while the kept messages stay within the low-water mark (75 %)
    history, counts = _chat([(100, 100), (100, 100), (2_500, 100)])
    cut = plan_cut(history, counts, budget=10_000, keep_assistant_turns=1)
    assert cut == 5 and history[cut].text == "question 2"
    # past the mark the pair is compacted together (nothing of it kept)
    cut = plan_cut(history, counts, budget=3_000, keep_assistant_turns=1)
    assert not _parts(history, cut) and cut == len(history)
    # an answer after an earlier summary answers no question of the kept history
    summary = Message.user("[Summary of the earlier conversation: 4 messages]\n## Requests")
    history = [history[0], summary, *history[2:]]
    cut = plan_cut(history, counts, budget=10_000, keep_assistant_turns=3, tail_ratio=0.01)
    assert cut == 2


@given(st.lists(st.tuples(st.integers(1, 3_000), st.integers(1, 3_000)), min_size=1, max_size=12))
def test_no_cut_parts_a_question_from_its_answer(sizes: list[tuple[int, int]]) -> None:
    history, counts = _chat(sizes)
    for keep in range(4):
        for budget in (1_000, 5_000, 20_000):
            cut = plan_cut(history, counts, budget=budget, keep_assistant_turns=keep)
            assert 1 <= cut <= len(history)
            assert not _parts(history, cut), (keep, budget, cut)


def test_the_cap_shortens_prose_first_and_keeps_the_sections() -> None:
    facts = KeyFacts(
        requests=[f"request number {i}: change module_{i}.py" for i in range(30)],
        files_modified=[f"src/mod_{i}.py" for i in range(10)],
        files_read=[f"docs/page_{i}.md" for i in range(10)],
        pinned=["Never push to main."],
    )
    body = "\n".join(f"- decision {i}: a long line of prose about the work" for i in range(300))
    parts = build_parts(facts, body, 120)
    text = cap_summary(parts, 900, COUNT)
    assert COUNT(text) <= 900
    assert "decision 0" in text and "decision 299" not in text  # prose cut from its end
    for name in ("## Files", "## Rules", "## Requests"):
        assert name in text
    assert all(f"request number {i}: change module_{i}.py" in text for i in range(30))
    assert "Never push to main." in text
    tight = cap_summary(parts, 350, COUNT)
    assert COUNT(tight) <= 350
    assert "Modified: " in tight and "request number 29" in tight  # the newest request
    assert "earlier requests omitted" in tight or "more" in tight  # says what it left out
