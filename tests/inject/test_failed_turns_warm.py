"""A failed assistant turn with tool calls in the kept history: hygiene's pairing strips its
calls on every render, which made every warm render a full one (a render whose hygiene changed
something cannot be reused by the next). The inject phase strips them first (the stripped
message the same object while it is kept); every render must equal the render of a twin
session in which hygiene strips them (payload, transcript, tokens, the changes reported), and
the renders after the first must reuse the previous one's work."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from ctxengine.transcript import Message, Text, ToolCall, load
from offline_tiktoken import TRANSCRIPTS

from .twins import twin_renders

PI = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
PROVIDERS = {
    "openai": {},
    "openai-responses": {},
    "anthropic": {"cache_breakpoints": 4},
    "gemini": {},
}


def _unstripped(t: Any, memo: Any) -> tuple[Any, list[Any]]:
    return t, []


def _changes(out: Any) -> Counter[tuple[str, str | None]]:
    return Counter((c["action"], c.get("call_id")) for c in out.report.hygiene.get("changes", []))


def _view(out: Any) -> tuple[str, Any, int]:
    return (json.dumps(out.payload, sort_keys=True), out.transcript.messages, out.tokens)


def _failed(k: int, reason: str = "error") -> list[Message]:
    call = ToolCall(f"f{k}", "bash", {"command": f"make {k}"})
    return [
        Message.user(f"build target {k}"),
        Message("assistant", (Text(f"running make {k}"), call), stop_reason=reason),
        Message.user(f"that failed, try again {k}"),
        Message.assistant(f"fixed {k}"),
    ]


async def _twins(
    messages: list[Message], steps: list[list[Message]], provider: str, budget: int
) -> tuple[int, int, int]:
    """Render ``messages`` then each step, in a session stripping failed calls first and in a
    twin whose hygiene strips them. Returns (renders, calls dropped, renders reusing the
    previous one's work)."""
    replaced = ("_failed_calls_stripped", _unstripped)
    pairs, reused = await twin_renders(
        messages, steps, provider, budget, PROVIDERS[provider], replaced
    )
    for got, want in pairs:
        assert _view(got) == _view(want)
        assert _changes(got) == _changes(want)
    dropped = sum(got.report.hygiene.get("counts", {}).get("dropped_call", 0) for got, _ in pairs)
    return len(pairs), dropped, reused


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.parametrize("reason", ["error", "aborted"])
@pytest.mark.anyio
async def test_a_kept_failed_turn_renders_warm(provider: str, reason: str) -> None:
    steps = [[Message.assistant(f"ok {k}"), Message.user(f"more {k}")] for k in range(5)]
    renders, dropped, reused = await _twins(_failed(0, reason), steps, provider, 32_000)
    assert renders == len(steps) + 1 and dropped == renders  # its call, on every render
    assert reused == len(steps)


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_failed_turns_arriving_and_their_late_results(provider: str) -> None:
    """Failed turns arrive in the steps (the next render takes the full path once), one of
    them answered by a late result (an orphan hygiene drops), and one holding only its call
    (hygiene drops it whole): every render equals the twin's."""
    only_call = Message(
        "assistant", (ToolCall("g1", "read", {"path": "a"}),), stop_reason="aborted"
    )
    late = Message.tool("f2", "late output")
    steps = [_failed(1), [*_failed(2), late], [Message.user("next"), only_call], _failed(3)]
    renders, dropped, _ = await _twins(_failed(0), steps, provider, 32_000)
    assert renders == len(steps) + 1 and dropped > renders


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.anyio
async def test_the_real_pi_session_with_failed_turns_renders_warm(provider: str) -> None:
    messages = [*load(PI).messages, Message.user("What is the status?")]
    steps = [[Message.assistant(f"ok {k}"), Message.user(f"more {k}")] for k in range(4)]
    renders, _, reused = await _twins(messages, steps, provider, 64_000)
    assert renders == len(steps) + 1
    assert reused == len(steps)
