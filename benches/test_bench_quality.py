"""Prompt-cache prefix stability and budget use, replaying a real session, beside a sliding
last-N window in the same run.

The replayed session is the demo's (a real Claude Code session, ``ctxengine demo``): every
model call it made is rendered in order, as ``ctxengine replay`` does, at 16k and 64k for
OpenAI and Anthropic. A *prefix break* is a payload that does not start with the whole
previous one (``ctxengine.cli_replay.extends``: a provider's prompt cache misses from there).
The peer is the newest messages that fit the same budget (LangChain
``trim_messages(strategy="last")``'s window, counted with the same tokenizer), which breaks on
every call once the budget is full. Each case is timed (the whole replay) and records, in
``extra_info``, both break counts and the budget use (tokens / the plan's target) of the
renders that cut something; the report turns them into the README's rows. The body asserts
what the figures must show: every break of ours at a compaction, fewer breaks than last-N,
every render that cut at ≥ 95 % of its target.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from functools import cache
from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.cli_replay import extends
from ctxengine.compaction import message_tokens
from ctxengine.replay import demo_transcript_path, replay
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, Transcript, load, render

CASES = [(budget, p) for budget in (16_000, 64_000) for p in ("openai", "anthropic")]


@cache
def _transcript() -> Transcript:
    return load(demo_transcript_path())


def _calls(messages: Sequence[Message]) -> list[int]:
    """The model calls of the session: before each assistant turn, and after the last
    message (as ``replay`` renders them)."""
    return [
        k
        for k in range(1, len(messages))
        if messages[k].role == "assistant" and messages[k - 1].role != "assistant"
    ] + [len(messages)]


def _last_n(
    messages: Sequence[Message], counts: Sequence[int], end: int, budget: int
) -> Transcript:
    """System messages plus the newest of ``messages[:end]`` that fit ``budget``, not starting
    on a tool result."""
    system = [m for m in messages[:end] if m.role == "system"]
    room = budget - sum(counts[i] for i in range(end) if messages[i].role == "system")
    start, used = end, 0
    for i in range(end - 1, -1, -1):
        if messages[i].role == "system":
            continue
        if used + counts[i] > room:
            break
        used, start = used + counts[i], i
    while start < end and messages[start].role == "tool":
        start += 1
    return Transcript(tuple(system + [m for m in messages[start:end] if m.role != "system"]))


def _breaks(payloads: Sequence[dict[str, Any]]) -> list[int]:
    return [n for n in range(1, len(payloads)) if not extends(payloads[n], payloads[n - 1])]


def _replay(budget: int, provider: str) -> list[Any]:
    async def main() -> list[Any]:
        engine = ContextEngine("gpt-4o", Budget(total=budget))
        return [s.rendered async for s in replay(_transcript(), engine, provider=provider)]

    return anyio.run(main)


@pytest.mark.parametrize(("budget", "provider"), CASES, ids=[f"{b // 1000}k-{p}" for b, p in CASES])
def test_replay_prefix_and_use(benchmark: Any, budget: int, provider: str) -> None:
    benchmark.group = "replay-prefix-and-use"
    rendered = benchmark.pedantic(_replay, args=(budget, provider), rounds=1, iterations=1)
    ours = _breaks([r.payload for r in rendered])
    compacted = [any(c["ok"] for c in r.report.compactions) for r in rendered]
    messages = _transcript().messages
    counts = message_tokens(messages, get_tokenizer("o200k_base").count)
    window = [_last_n(messages, counts, k, budget) for k in _calls(messages)]
    theirs = _breaks([render(t, provider).payload for t in window])
    cut = [r for r in rendered if any(g.status != "kept" for g in r.report)]
    uses = [r.tokens / r.report.target for r in cut]
    benchmark.extra_info.update(
        impl=f"ctxengine replay {budget // 1000}k {provider}",
        budget=budget,
        provider=provider,
        calls=len(rendered),
        breaks=len(ours),
        compactions=sum(compacted),
        last_n_breaks=len(theirs),
        cut_renders=len(cut),
        median_use=statistics.median(uses) if uses else 1.0,
        min_use=min(uses, default=1.0),
    )
    assert all(compacted[n] for n in ours), "a prefix break without a compaction"
    assert all(r.tokens <= budget for r in rendered)
    assert len(ours) < len(theirs)
    assert min(uses, default=1.0) >= 0.95  # the goal: ≥ 95 % of the target whenever cut
