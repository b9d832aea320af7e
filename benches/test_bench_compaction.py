"""Compaction benchmarks on a ~1,000-message real session (pi/OpenClaw, 914 messages, ~144k
tokens) with the extractive summarizer, beside LangChain's ``trim_messages`` (last-N, the
no-summary baseline) in the same run.

- compact-history: plan the low-water cut and compact the session to 10 % of its tokens;
- compact-fixed: summarize all but the last 4 messages into a 16k-token summary;
- facts: the key-fact extraction alone.

Run ``pytest benches/test_bench_compaction.py --benchmark-enable --benchmark-only``.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import convert_to_messages, trim_messages

from ctxengine.compaction import compact, compact_history, extract_facts, message_tokens
from ctxengine.compaction.requests import request_text
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import load
from offline_tiktoken import TRANSCRIPTS, encoding

SESSION = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
COUNT = get_tokenizer("o200k_base").count


@pytest.fixture(scope="module")
def transcript():  # type: ignore[no-untyped-def]
    return load(SESSION)


@pytest.fixture(scope="module")
def budget(transcript) -> int:  # type: ignore[no-untyped-def]
    return sum(message_tokens(transcript.messages, COUNT)) // 10


@pytest.fixture
def loop():  # type: ignore[no-untyped-def]
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.mark.benchmark(group="compaction-1k-messages")
def test_langchain_trim_last_n(benchmark, transcript, budget) -> None:  # type: ignore[no-untyped-def]
    enc = encoding("o200k_base")
    lc = convert_to_messages(transcript.to("openai")["messages"])

    def count(messages) -> int:  # type: ignore[no-untyped-def]
        return sum(4 + len(enc.encode_ordinary(str(m.content))) for m in messages)

    benchmark.extra_info.update(impl="langchain trim_messages (last)", baseline=True)
    kept = benchmark(
        trim_messages, lc, max_tokens=budget, token_counter=count, strategy="last", start_on="human"
    )
    assert 0 < len(kept) < len(lc)


@pytest.mark.benchmark(group="compaction-1k-messages")
def test_compact_history_extractive(benchmark, transcript, budget, loop) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="ctxengine compact_history (extractive)")
    result = benchmark(
        lambda: loop.run_until_complete(compact_history(transcript.messages, budget=budget))
    )
    assert result.ok and sum(message_tokens(result.history, COUNT)) <= budget


@pytest.mark.benchmark(group="compaction-1k-messages")
def test_compact_fixed_extractive(benchmark, transcript, loop) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="ctxengine compact (914 messages -> 16k summary)")
    result = benchmark(
        lambda: loop.run_until_complete(compact(transcript.messages[:-4], max_tokens=16_000))
    )
    assert result.ok


@pytest.mark.benchmark(group="compaction-1k-messages")
def test_key_facts(benchmark, transcript) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="ctxengine extract_facts")
    facts = benchmark(extract_facts, transcript.messages)
    # each user message that asks something: 83 of the session's 88 (not /mode, /them, /)
    asked = [m for m in transcript.messages if m.role == "user" and request_text(m.text, m.meta)]
    assert len(facts.requests) == len(asked) == 83
