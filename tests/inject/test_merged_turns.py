"""Same-role runs merged before hygiene (Anthropic, Gemini) render as hygiene merging them.

Hygiene merges consecutive user or assistant turns for the strict-alternation providers; a
render whose hygiene changed something cannot be reused by the next one, so a session holding
one such run rendered every turn from scratch. The inject phase merges those runs first (the
merged message the same object while its run is kept); every render must equal, byte for byte
(payload, hygiene report with its key order, transcript, tokens, breakpoints), the render of a
twin session in which hygiene merges them, and the renders after the first must reuse the
previous one's work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxengine.transcript import Message, Text, Thinking, ToolCall, ToolResult, load
from offline_tiktoken import TRANSCRIPTS

from .twins import twin_renders

SESSIONS = [
    TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl",
    TRANSCRIPTS / "openhands" / "output.jsonl",
    TRANSCRIPTS / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
]
PROVIDERS = {"anthropic": {"cache_breakpoints": 4}, "gemini": {}}


def _unmerged(t: Any, provider: str, memo: Any) -> tuple[Any, list[Any]]:
    return t, []


def _view(out: Any) -> tuple[str, str, Any, int, str]:
    return (
        json.dumps(out.payload, sort_keys=True, ensure_ascii=False),
        json.dumps(out.report.hygiene, ensure_ascii=False),  # key order included
        out.transcript.messages,
        out.tokens,
        json.dumps(out.report.cache_breakpoints),
    )


def _runs(k: int) -> list[Message]:
    """Turns with same-role runs: plain, with thinking, one ending in a tool call, users."""
    call = ToolCall(f"r{k}", "read", {"k": k})
    return [
        Message.user(f"question {k}"),
        Message.assistant(f"first {k}"),
        Message("assistant", (Thinking(f"hmm {k}", "sig"), Text(f"second {k}"))),
        Message.assistant(f"third {k}", [call]),
        Message("tool", (ToolResult(f"r{k}", (Text(f"out {k}"),)),)),
        Message.assistant(f"done {k}"),
        Message.user(f"also {k}"),
        Message.user(f"and {k}"),
        Message.assistant(f"ok {k}"),
    ]


async def _twins(
    messages: list[Message], steps: list[list[Message]], provider: str, budget: int
) -> tuple[int, int, int]:
    """Render ``messages`` then each step, in a session merging runs first and in a twin whose
    hygiene merges them; every pair of renders must be equal. Returns (renders, merged turns,
    renders that reused the previous one's work)."""
    options = PROVIDERS[provider]
    pairs, reused = await twin_renders(
        messages, steps, provider, budget, options, ("_merged", _unmerged)
    )
    for got, want in pairs:
        assert _view(got) == _view(want)
    merged = sum(got.report.hygiene.get("counts", {}).get("merged_turns", 0) for got, _ in pairs)
    return len(pairs), merged, reused


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_synthetic_runs_render_as_hygiene_merges_them(provider: str) -> None:
    steps = [_runs(k) for k in range(1, 8)]
    steps += [[Message.assistant("tail one")], [Message.assistant("tail two")]]
    renders, merged, reused = await _twins(_runs(0), steps, provider, 32_000)
    assert renders == len(steps) + 1 and merged > 0
    assert reused >= len(steps) - 1  # a run growing at the end is rendered in full once


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_a_history_opening_with_a_run_gets_the_bootstrap_turn_after_the_merges(
    provider: str,
) -> None:
    start = [Message.assistant("hello"), Message.assistant("again"), *_runs(0)]
    renders, merged, reused = await _twins(start, [_runs(1), _runs(2)], provider, 32_000)
    assert renders == 3 and merged > 0 and reused >= 1


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_runs_are_left_to_hygiene_when_it_has_more_to_repair(provider: str) -> None:
    """An orphan result and a call with no result: hygiene repairs them (and its report's
    indices are those of the transcript with the runs), so the runs are merged by hygiene."""
    orphan = [Message.tool("nobody", "late"), Message.user("then")]
    unanswered = [Message.assistant("calls", [ToolCall("u1", "read", {})]), Message.user("q")]
    steps = [_runs(1), orphan, _runs(2), unanswered, _runs(3)]
    renders, merged, _ = await _twins(_runs(0), steps, provider, 32_000)
    assert renders == len(steps) + 1 and merged > 0


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: Path(p).parent.name)
@pytest.mark.anyio
async def test_real_sessions_render_as_hygiene_merges_them(path: Path, provider: str) -> None:
    messages = list(load(path).messages)
    half = len(messages) // 2
    step = max(1, (len(messages) - half) // 5)
    steps = [
        [*messages[s : s + step], Message.user(f"next {k}")]
        for k, s in enumerate(range(half, len(messages), step))
    ]
    steps += [[Message.assistant("ok")], [Message.user("more")], [Message.assistant("fine")]]
    head = [*messages[:half], Message.user("Where are we?")]
    renders, _, _ = await _twins(head, steps, provider, 8_000)
    assert renders == len(steps) + 1


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_a_real_session_with_runs_is_rendered_warm(provider: str) -> None:
    """The pi session holds same-role runs that hygiene merges: its renders after the first
    one reuse the previous render's work (they all took the full path before)."""
    messages = [*load(SESSIONS[0]).messages, Message.user("What is the status?")]
    steps = [[Message.assistant(f"ok {k}"), Message.user(f"more {k}")] for k in range(6)]
    renders, merged, reused = await _twins(messages, steps, provider, 32_000)
    assert renders == len(steps) + 1 and merged > 0
    assert reused == len(steps)


def _thinking_runs(k: int) -> list[Message]:
    """Turns logged as [thinking], then [tool_use]: alone, and after an assistant text."""

    def thought(text: str) -> Message:
        return Message("assistant", (Thinking(text, "sig"),), meta={"provider_family": "anthropic"})

    calls = [ToolCall(f"a{k}", "read", {"k": k}), ToolCall(f"b{k}", "read", {"k": k})]
    return [
        Message.user(f"question {k}"),
        thought(f"plan {k}"),
        Message("assistant", (calls[0],)),
        Message("tool", (ToolResult(f"a{k}", (Text(f"out {k}"),)),)),
        Message.assistant(f"so far {k}"),
        thought(f"more {k}"),
        thought(f"still {k}"),
        Message("assistant", (calls[1],)),
        Message("tool", (ToolResult(f"b{k}", (Text(f"out {k}"),)),)),
        Message.assistant(f"done {k}"),
    ]


@pytest.mark.anyio
async def test_carried_thinking_is_reported_as_hygiene_reports_it() -> None:
    """Thinking alone merged into the assistant turn after it: the render's own merge pass and
    hygiene report each merged message once, at its own index."""
    steps = [_thinking_runs(k) for k in range(1, 4)]
    renders, merged, _ = await _twins(_thinking_runs(0), steps, "anthropic", 32_000)
    assert renders == len(steps) + 1 and merged > 0
