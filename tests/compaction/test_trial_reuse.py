"""What a landing's trials reuse gives the same results as computing everything afresh.

Inside one message scope the trials of a landing summarize overlapping stretches under
different caps; the extractive reading of a stretch, its summary under a cap it fits, the
partial notes of a merge and the chunk keys are kept for the next trial. Each test compares
the reused path with a fresh computation (outside any scope, or in a new one) on real
transcripts: the same text, the same stats.
"""

from __future__ import annotations

import re

import anyio
import pytest

from ctxengine import ExtractiveSummarizer, Tokenizer
from ctxengine.compaction import compact
from ctxengine.compaction.facts import message_scope
from ctxengine.compaction.pipeline import SummarizerError, _usable
from ctxengine.compaction.sections import _split_list
from ctxengine.transcript import Message, load

from .helpers import CC_MAIN, PI

TOK = Tokenizer("o200k_base")


@pytest.fixture(scope="module")
def pi() -> list[Message]:
    return list(load(PI).messages)


@pytest.fixture(scope="module")
def claude_code() -> list[Message]:
    return list(load(CC_MAIN).messages)


@pytest.mark.parametrize("source", ["pi", "claude_code"])
def test_a_stretch_summarized_again_under_other_caps_gives_the_fresh_summary(
    source: str, request: pytest.FixtureRequest
) -> None:
    messages: list[Message] = request.getfixturevalue(source)[:300]
    summarizer = ExtractiveSummarizer(tokenizer=TOK)
    whole = summarizer.summarize_sync(messages)
    size = TOK.count(whole)
    caps = [size * 4, size, size - 1, size // 2, 256, size * 2]
    fresh = [summarizer.summarize_sync(messages, max_tokens=c) for c in caps]
    assert fresh[0] == fresh[1] == whole  # under a cap it fits, the summary is uncapped
    assert fresh[2] != whole and TOK.count(fresh[3]) <= size // 2
    with message_scope():
        again = [summarizer.summarize_sync(messages, max_tokens=c) for c in caps]
        # a copy of the list (the same messages) and a stretch one message shorter
        assert summarizer.summarize_sync(list(messages), max_tokens=256) == fresh[4]
        shorter = summarizer.summarize_sync(messages[:-1], max_tokens=size)
    assert again == fresh
    assert shorter == summarizer.summarize_sync(messages[:-1], max_tokens=size)


def test_another_summarizer_in_the_same_scope_does_not_reuse_a_reading(
    pi: list[Message],
) -> None:
    messages = pi[:200]
    few, many = ExtractiveSummarizer(max_items=1, tokenizer=TOK), ExtractiveSummarizer()
    with message_scope():
        first = few.summarize_sync(messages)
        second = many.summarize_sync(messages)
    assert first == ExtractiveSummarizer(max_items=1, tokenizer=TOK).summarize_sync(messages)
    assert second == ExtractiveSummarizer().summarize_sync(messages)
    assert first != second


class _Chunked(ExtractiveSummarizer):
    """Summarized chunk by chunk, then merged, as a model summarizer is (the pipeline reads
    the extractive summarizer itself in one pass, not a subclass)."""


def test_overlapping_compactions_in_one_scope_equal_fresh_ones(pi: list[Message]) -> None:
    """Like the trials of a landing: longer and longer stretches of the same history, under
    different caps, with one chunk cache, inside one scope, then each alone."""
    stretches = [(pi[:600], 3_000), (pi[:700], 3_000), (pi[:650], 6_000), (pi[:700], 9_000)]

    async def run(shared: bool) -> list[tuple[str, dict[str, object]]]:
        cache: dict[str, str] = {}
        out = []
        for messages, cap in stretches:
            result = await compact(
                messages,
                max_tokens=cap,
                summarizer=_Chunked(tokenizer=TOK),
                tokenizer=TOK,
                cache=cache if shared else {},
                room=cap * 2,
            )
            assert result.ok, result.error
            out.append((result.summary, result.entry()))
        return out

    async def in_scope() -> list[tuple[str, dict[str, object]]]:
        with message_scope():
            return await run(True)

    async def alone() -> list[tuple[str, dict[str, object]]]:
        fresh = []
        for messages, cap in stretches:
            with message_scope():
                result = await compact(
                    messages,
                    max_tokens=cap,
                    summarizer=_Chunked(tokenizer=TOK),
                    tokenizer=TOK,
                    room=cap * 2,
                )
            fresh.append((result.summary, result.entry()))
        return fresh

    shared, separate = anyio.run(in_scope), anyio.run(alone)
    assert [s for s, _ in shared] == [s for s, _ in separate]
    # the same stats except the chunk cache's hits (the shared cache is reused on purpose)
    drop = ("cache_hits", "calls")
    assert [{k: v for k, v in e.items() if k not in drop} for _, e in shared] == [
        {k: v for k, v in e.items() if k not in drop} for _, e in separate
    ]
    assert sum(int(e["cache_hits"]) for _, e in shared) > 0  # type: ignore[call-overload]


def test_carried_file_lists_keep_a_lines_own_repeats_and_drop_earlier_ones() -> None:
    items = ["Read: a, b, a (and 2 more)", "Other: x", "Read: b, c, c, d (and 3 more)"]
    assert _split_list(items, "Read") == (["a", "b", "a", "c", "c", "d"], 5)
    assert _split_list(["Read: "], "Read") == ([], 0)


def _usable_by_lists(text: str) -> bool:
    """The check written out: every word and every bad character listed."""
    stripped = text.strip()
    words = re.findall(r"[^\W_]{2,}", stripped)
    bad = re.findall(r"[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f]", stripped)
    return bool(stripped) and len(words) >= 3 and len(bad) <= len(stripped) * 0.1


@pytest.mark.parametrize(
    "text",
    [
        "two words",
        "three real words",
        "ab_cd ef",  # "_" splits words: ab, cd, ef
        "a b c d e f",  # one-letter runs are not words
        "fine words here" + "\ufffd",
        "fine words here" + "\ufffd" * 2,
        "many fine words here, more than enough of them" + "\x00" * 4,
        "many fine words here, more than enough of them" + "\x00" * 5,
        "   ",
    ],
)
def test_a_summary_is_usable_with_three_words_and_few_bad_characters(text: str) -> None:
    if _usable_by_lists(text):
        assert _usable(text) == text.strip()
    else:
        with pytest.raises(SummarizerError):
            _usable(text)
