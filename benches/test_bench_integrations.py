"""``trim_messages``: ours vs LangChain's, on 1,000 messages of real shared transcripts.

Three groups, each with LangChain's ``trim_messages`` as the baseline:

- ``trim-exact``: an exact tiktoken count. LangChain gets a list counter (Python tiktoken,
  OpenAI's chat framing); ours gets ``token_counter="gpt-4o"`` (the same numbers from
  ctxengine's tokenizer). Ours is measured warm (counts cached between calls, the agent-loop
  case) and cold (caches cleared every round).
- ``trim-approx``: both get ``count_tokens_approximately``.
- ``trim-cached-counter``: both get the same per-message counter that caches its counts by
  message between calls (a fair warm baseline for LangChain).

Run ``pytest benches/test_bench_integrations.py --benchmark-enable --benchmark-only``; the
summary prints every median relative to its group's baseline.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.messages import trim_messages as lc_trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from ctxengine import clear_cache
from ctxengine.integrations import _lc_trim
from ctxengine.integrations.langchain import trim_messages
from ctxengine.transcript import load
from offline_tiktoken import TRANSCRIPTS, encoding

MAX_TOKENS = 16_000
N = 1_000


@pytest.fixture(scope="module")
def messages() -> list[BaseMessage]:
    """1,000 LangChain messages: the pi/OpenClaw session, then a Claude Code session."""
    out: list[dict[str, Any]] = []
    for path in (
        TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl",
        TRANSCRIPTS / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    ):
        out += [m for m in load(path).to("openai")["messages"] if m["role"] != "system"]
    lc = convert_to_messages(out[:N])
    assert len(lc) == N
    return lc


def _tiktoken_list_counter() -> Any:
    enc = encoding("o200k_base")
    roles = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}

    def count(messages: list[BaseMessage]) -> int:
        total = 3
        for m in messages:
            content = m.content if isinstance(m.content, str) else str(m.content)
            total += 3 + len(enc.encode_ordinary(content)) + len(enc.encode_ordinary(roles[m.type]))
            for call in getattr(m, "tool_calls", None) or []:
                total += len(enc.encode_ordinary(call["name"] + str(call["args"])))
        return total

    return count


def _cached_per_message_counter() -> Any:
    cache: dict[int, int] = {}

    def count(message: BaseMessage) -> int:
        key = id(message)
        n = cache.get(key)
        if n is None:
            n = cache[key] = count_tokens_approximately([message])
        return n

    count.__annotations__["message"] = BaseMessage
    return count


def _run(benchmark: Any, fn: Any, messages: list[BaseMessage], impl: str, **kw: Any) -> None:
    kwargs = {"max_tokens": MAX_TOKENS, "strategy": "last", "include_system": True, **kw}
    fn(messages, **kwargs)  # warm-up (and the caches of warm runs)
    benchmark.extra_info.update(impl=impl, baseline=impl.startswith("langchain"))
    kept = benchmark(fn, messages, **kwargs)
    assert 0 < len(kept) < len(messages)


@pytest.mark.benchmark(group="trim-exact")
def test_langchain_trim_exact(benchmark: Any, messages: list[BaseMessage]) -> None:
    counter = _tiktoken_list_counter()
    _run(benchmark, lc_trim_messages, messages, "langchain tiktoken", token_counter=counter)


@pytest.mark.benchmark(group="trim-exact")
def test_ctxengine_trim_exact_warm(benchmark: Any, messages: list[BaseMessage]) -> None:
    _run(benchmark, trim_messages, messages, "ctxengine exact, warm", token_counter="gpt-4o")


@pytest.mark.benchmark(group="trim-exact")
def test_ctxengine_trim_exact_cold(benchmark: Any, messages: list[BaseMessage]) -> None:
    def cold(msgs: list[BaseMessage], **kwargs: Any) -> list[BaseMessage]:
        clear_cache()
        _lc_trim._EXACT_CACHES.clear()
        return trim_messages(msgs, **kwargs)  # type: ignore[no-any-return]

    _run(benchmark, cold, messages, "ctxengine exact, cold", token_counter="gpt-4o")


@pytest.mark.benchmark(group="trim-approx")
def test_langchain_trim_approx(benchmark: Any, messages: list[BaseMessage]) -> None:
    _run(
        benchmark,
        lc_trim_messages,
        messages,
        "langchain approximate",
        token_counter=count_tokens_approximately,
    )


@pytest.mark.benchmark(group="trim-approx")
def test_ctxengine_trim_approx(benchmark: Any, messages: list[BaseMessage]) -> None:
    _run(
        benchmark,
        trim_messages,
        messages,
        "ctxengine approximate",
        token_counter=count_tokens_approximately,
    )


@pytest.mark.benchmark(group="trim-cached-counter")
def test_langchain_trim_cached_counter(benchmark: Any, messages: list[BaseMessage]) -> None:
    counter = _cached_per_message_counter()
    _run(benchmark, lc_trim_messages, messages, "langchain cached counter", token_counter=counter)


@pytest.mark.benchmark(group="trim-cached-counter")
def test_ctxengine_trim_cached_counter(benchmark: Any, messages: list[BaseMessage]) -> None:
    counter = _cached_per_message_counter()
    _run(benchmark, trim_messages, messages, "ctxengine cached counter", token_counter=counter)
