"""What a compaction reads of a long stretch is resumed, not read again, for the next stretch
with a common prefix: its key facts (from a mark of the scan), its message counts, its chunks
and its chunks' keys. Each test compares the resumed path with a fresh computation (outside
any message scope, or with resuming off) on stretches that extend, shorten, or leave the
earlier one in the middle, with earlier summaries and tool failures among the messages; the
thresholds are lowered so that the shared transcripts' stretches are long enough.
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine, ExtractiveSummarizer, Tokenizer
from ctxengine.assemble import compact as C
from ctxengine.compaction import facts as F
from ctxengine.compaction import pipeline as P
from ctxengine.compaction import summary_message
from ctxengine.compaction.facts import extract_facts, message_scope
from ctxengine.compaction.planning import chunk_by_tokens, chunk_max_tokens, tool_groups
from ctxengine.transcript import Message, ToolCall, load

from .helpers import CC_MAIN, PI

TOK = Tokenizer("o200k_base")


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stretches of 64 messages on are resumed, marked every 16."""
    monkeypatch.setattr(F, "RESUMABLE", 64)
    monkeypatch.setattr(P, "RESUMABLE", 64)
    monkeypatch.setattr(F, "MARK_EVERY", 16)


@pytest.fixture(scope="module")
def sources() -> dict[str, list[Message]]:
    pi = list(load(PI).messages)
    cc = list(load(CC_MAIN).messages)
    # an earlier summary first, and one in the middle (its sections are carried)
    earlier = summary_message(ExtractiveSummarizer(tokenizer=TOK).summarize_sync(pi[:80]), 80)
    middle = summary_message(ExtractiveSummarizer(tokenizer=TOK).summarize_sync(cc[:60]), 60)
    mixed = [earlier, *pi[80:200], middle, *cc[60:200]]
    return {"pi": pi[:400], "cc": cc[:400], "mixed": mixed}


def _stretches(messages: list[Message]) -> list[list[Message]]:
    """Stretches in the order a landing's trials might ask for them: one, a longer one, a
    shorter one, one that leaves out a few in the middle, the first again, one starting
    elsewhere, and one that diverges right after a mark."""
    n = len(messages)
    return [
        messages[: n * 3 // 4],
        messages[: n - 5],
        messages[: n // 2 + 7],
        messages[:100] + messages[120 : n - 5],
        messages[: n * 3 // 4],
        messages[1:],
        messages[:32] + messages[33:],
        messages,
    ]


def _fresh_facts(messages: Sequence[Message]) -> F.KeyFacts:
    assert F.scope_memo() is None
    return extract_facts(messages, rules=["## Rule\nbe brief"], pinned=["pin me"])


@pytest.mark.parametrize("source", ["pi", "cc", "mixed"])
def test_resumed_key_facts_are_the_fresh_ones(
    short: None, sources: dict[str, list[Message]], source: str
) -> None:
    messages = sources[source]
    stretches = _stretches(messages)
    fresh = [_fresh_facts(s) for s in stretches]
    assert any(f.failures for f in fresh) or source == "pi"
    assert any(f.carried for f in fresh) == (source == "mixed")
    with message_scope():
        first = [
            extract_facts(s, rules=["## Rule\nbe brief"], pinned=["pin me"]) for s in stretches
        ]
        kept = copy.deepcopy(first)
        for facts in first:  # a caller changing its facts does not change the scans'
            facts.requests.append("changed by a caller")
            facts.files_read.append("changed.py")
            facts.carried.setdefault("Files", []).append("changed")
        again = [
            extract_facts(s, rules=["## Rule\nbe brief"], pinned=["pin me"]) for s in stretches
        ]
        scans = F.stretch_memo()
        assert scans is not None
        assert sum(len(v) for k, v in scans.items() if k[0] == "facts scans") >= len(stretches) - 1
        other = extract_facts(stretches[0])  # other rules and pinned facts: another scan
    assert kept == fresh
    assert again == fresh
    assert other == extract_facts(stretches[0])


def test_a_resumed_scan_keeps_the_failure_names_and_the_current_file(short: None) -> None:
    """What depends on the messages before a mark (the name of a failed call, the file a
    write without a path edits) is the same after resuming there."""
    messages: list[Message] = []
    for i in range(40):
        call = ToolCall(f"c{i}", "str_replace_editor", {"command": "view", "path": f"f{i}.py"})
        messages.append(Message.assistant(f"open f{i}.py", [call]))
        edit = ToolCall(f"e{i}", "edit", {})
        messages.append(Message.assistant("edit it", [edit]))
        messages.append(Message.tool(f"e{i}", "error: no match", is_error=True))
    stretches = [messages[:100], messages[:37] + messages[40:], messages[:50], messages]
    fresh = [_fresh_facts(s) for s in stretches]
    assert fresh[1].failures[12].name == "edit" and "f12.py" in fresh[1].files_modified
    with message_scope():
        resumed = [
            extract_facts(s, rules=["## Rule\nbe brief"], pinned=["pin me"]) for s in stretches
        ]
    assert resumed == fresh


@pytest.mark.parametrize("source", ["pi", "cc", "mixed"])
def test_resumed_counts_and_chunks_are_the_fresh_ones(
    short: None, sources: dict[str, list[Message]], source: str
) -> None:
    stretches = _stretches(sources[source])
    window = 4000  # chunks of a few messages each

    fresh_counts = [P.message_tokens(s, TOK.count) for s in stretches]
    fresh_chunks = [
        P._prepare_chunks(s, window, TOK.count, c)
        for s, c in zip(stretches, fresh_counts, strict=True)
    ]
    with message_scope():
        counts = [P.message_tokens(s, TOK.count) for s in stretches]
        got = [
            P._prepare_chunks(s, window, TOK.count, c)
            for s, c in zip(stretches, counts, strict=True)
        ]
        memo = F.stretch_memo()
        assert memo is not None
        kept = [c for k, v in memo.items() if k[0] == "chunks" for c in v]
    assert counts == fresh_counts
    assert len(fresh_chunks[0]) > 10
    assert got == fresh_chunks  # an oversized message's pieces are new messages each time
    # each kept chunking is the plain one of its stretch
    assert len(kept) == len(stretches)
    for c in kept:
        assert c.chunks == chunk_by_tokens(c.counts, tool_groups(c.messages), c.limit)
        assert c.groups == tool_groups(c.messages)
        assert c.limit == chunk_max_tokens(c.counts, window)


def test_a_chunk_key_is_not_taken_for_another_chunk_of_the_same_length() -> None:
    a, b, c = Message.user("one"), Message.user("two"), Message.user("three")
    fresh = P._digests([a, c])
    with message_scope():
        first = P._digests([a, b])
        second = P._digests([a, c])
        assert P._digests([a, b]) == first
    assert second == fresh != first


def test_the_fewest_further_turns_are_found_by_bisection_as_by_a_scan() -> None:
    import random

    rng = random.Random(7)
    for _ in range(300):
        order = list(range(rng.randint(0, 30)))
        size = {t: rng.choice([0, 0, 5, 40, 300]) for t in order}
        freed = [0]
        for t in order:
            freed.append(freed[-1] + size[t])
        land = C._Landing({}, [], order, rng.randint(0, 3000), freed, size)
        land.kept = set(rng.sample(order, min(len(order), rng.randint(0, 2))))
        for _ in range(5):
            room, smallest = rng.randint(-100, 3000), rng.randint(0, len(order) + 2)
            scan = next(
                (k for k in range(smallest, len(order) + 1) if land.rest(k) <= room), len(order)
            )
            assert land.first(room, smallest) == scan


def _render(messages: list[Message], budget: int) -> tuple[str, list[dict[str, Any]], str]:
    async def main() -> tuple[str, list[dict[str, Any]], str]:
        engine = ContextEngine("gpt-4o", Budget(total=budget))
        async with engine.session("s") as s:
            s.extend(messages)
            await s.user_message("What is the status of the task?")
            out = await s.render("openai")
            assert out.tokens <= budget
            compactions = [
                {k: v for k, v in c.items() if k not in {"calls", "cache_hits"}}
                for c in out.report.compactions
            ]
            summary = s._state.summary.text if s._state.summary is not None else ""
            return str(out.payload), compactions, summary

    return anyio.run(main)


@pytest.mark.parametrize("budget", [8_000, 32_000])
def test_a_render_that_resumes_its_trials_is_the_render_that_reads_them_afresh(
    monkeypatch: pytest.MonkeyPatch, sources: dict[str, list[Message]], budget: int
) -> None:
    messages = list(load(PI).messages)
    fresh = _render(messages, budget)
    assert fresh[1] and fresh[1][0]["ok"]
    monkeypatch.setattr(F, "RESUMABLE", 64)
    monkeypatch.setattr(P, "RESUMABLE", 64)
    monkeypatch.setattr(F, "MARK_EVERY", 16)
    assert _render(messages, budget) == fresh


def test_the_landing_runs_with_the_collector_paused_and_resumes_it(
    monkeypatch: pytest.MonkeyPatch, summaries_collector: list[bool]
) -> None:
    seen = summaries_collector
    landed: list[bool] = []
    choose = C._choose_with

    async def during(*args: Any) -> Any:
        landed.append(gc.isenabled())
        return await choose(*args)

    monkeypatch.setattr(C, "_choose_with", during)
    messages = list(load(PI).messages)
    assert gc.isenabled()
    _render(messages, 8_000)
    assert landed and not any(landed) and seen and not any(seen)
    assert gc.isenabled()


@pytest.mark.parametrize("source", ["pi", "cc", "mixed"])
def test_resumed_summary_prose_is_the_fresh_one(
    monkeypatch: pytest.MonkeyPatch, sources: dict[str, list[Message]], source: str
) -> None:
    """The extractive summary's reading of a stretch (goal, decisions, progress) resumed from
    a kept scan is the one read from scratch."""
    from ctxengine.compaction import extractive as E

    monkeypatch.setattr(E, "RESUMABLE", 64)
    monkeypatch.setattr(E, "MARK_EVERY", 16)
    summarizer = ExtractiveSummarizer(tokenizer=TOK)
    stretches = _stretches(sources[source])
    fresh = [summarizer.summary_prose(s) for s in stretches]
    assert any("## Decisions" in f for f in fresh)
    with message_scope():
        resumed = [summarizer.summary_prose(s) for s in stretches]
        again = [summarizer.summary_prose(s) for s in stretches]
        scans = F.stretch_memo()
        assert scans is not None
        assert sum(len(v) for k, v in scans.items() if k[0] == "prose scans") >= 2
    assert resumed == fresh
    assert again == fresh
