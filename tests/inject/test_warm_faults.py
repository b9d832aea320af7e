"""A warm render reuses the previous render's lists in place (the composed history, the
exported pieces, the message ids, the token counts, the running totals of the per-message
flags). A render that fails midway — a fault in export, in a count, in compose, a
``KeyboardInterrupt`` — must leave none of them half changed: every render of a session
after it equals, byte for byte, the render of the same messages (and the same application
grains replacing history content) on a fresh engine, for providers alternating in the
session, while the caller edits the payload it was handed. Its tokens are the payload's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxengine.inject.compose as compose
import ctxengine.inject.warm as warm
from ctxengine import Budget, ContextEngine, ContextGrain
from ctxengine.errors import BudgetError
from ctxengine.inject.payload import MessageTokenCache, payload_tokens
from ctxengine.transcript import Message, Text, ToolCall, ToolResult

MODEL = "gpt-4.1"
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")


class Fault(Exception):
    """What a faulty step raises (beside ``KeyboardInterrupt``)."""


class Faults:
    """Steps of a warm render that raise, while armed, with probability ``p``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.armed = False
        self.raised = 0

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            if self.armed and self.rng.random() < 0.3:
                self.raised += 1
                raise KeyboardInterrupt if self.rng.random() < 0.5 else Fault
            return original(*args, **kwargs)

        return step


STEPS = [
    (warm.Warm, "_finish"),
    (warm.Warm, "_turns_reuse"),
    (warm.Record, "_count_pieces"),
    (warm, "pieces"),
    (compose, "_message"),
    (MessageTokenCache, "tokens"),
]


def _dump(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, ensure_ascii=False)


def _step(rng: random.Random, serial: int) -> list[Message]:
    kind = rng.choice(["user", "calls", "calls", "assistant", "big", "failed"])
    if kind == "user":
        return [Message.user(f"question {serial} " + "w " * rng.randint(0, 30))]
    if kind == "assistant":
        return [Message.assistant(f"answer {serial}")]
    cid = f"c{serial}"
    call = Message.assistant(f"call {serial}", [ToolCall(cid, "bash", {"command": f"ls {serial}"})])
    body = f"out {serial}"
    if kind == "big":
        body = "\n".join(f"line {i} 中文 😀 {serial}" for i in range(rng.choice([50, 400])))
    return [call, Message("tool", (ToolResult(cid, (Text(body),), kind == "failed"),))]


async def _cold(messages: list[Message], provider: str, grains: list[dict[str, Any]]) -> str:
    engine = ContextEngine(MODEL, Budget(total=200_000))
    async with engine.session("cold") as session:
        session.extend(messages)
        for g in grains:
            session.add(ContextGrain(**g))
        return _dump((await session.render(provider)).payload)


async def _play(rng: random.Random, faults: Faults) -> tuple[int, int]:
    providers = rng.sample(PROVIDERS, rng.choice([1, 2]))
    engine = ContextEngine(MODEL, Budget(total=200_000))
    compared = 0
    async with engine.session("warm") as session:
        session.extend([Message.system("sys"), Message.user("task")])
        live: list[dict[str, Any]] = []  # application grains replacing history content
        for r in range(rng.randint(3, 10)):
            for _ in range(rng.randint(0, 3)):
                session.extend(_step(rng, 10 * r + len(session.messages)))
            if rng.random() < 0.25:
                g = {
                    "node_id": f"hist.{rng.randrange(len(session.messages))}",
                    "content": f"replaced {r}",
                    "priority": 50,
                    "lifespan": rng.choice(["turn", "session"]),
                }
                session.add(ContextGrain(**g))
                live.append(g)
            if rng.random() < 0.15 and live:
                gone = live.pop(rng.randrange(len(live)))["node_id"]
                session.remove(gone)
                live = [g for g in live if g["node_id"] != gone]
            provider = rng.choice(providers)
            faults.armed = rng.random() < 0.35
            try:
                out = await session.render(provider)
            except (Fault, KeyboardInterrupt, BudgetError):
                continue  # a turn grain the failed render took waits for the next one
            finally:
                faults.armed = False
            sent = list(live)
            live = [g for g in live if g["lifespan"] != "turn"]
            got = _dump(out.payload)
            assert out.tokens == payload_tokens(out.payload, provider, MODEL)
            assert got == await _cold(list(session.messages), provider, sent), (r, provider)
            compared += 1
            if rng.random() < 0.4:  # the caller edits what it was handed
                for value in out.payload.values():
                    if isinstance(value, list) and value:
                        value[0] = {"edited": True}
                        value.append({"added": True})
        reused = session.state.token_cache.memo.warm.reused
    return compared, reused


def _run(seed: int) -> tuple[int, int, int]:
    """Renders compared, renders that reused the previous one's work, faults raised."""
    rng = random.Random(seed)
    faults = Faults(rng)
    with pytest.MonkeyPatch.context() as mp:
        for owner, name in STEPS:
            mp.setattr(owner, name, faults.wrap(getattr(owner, name)))
        compared, reused = anyio.run(_play, rng, faults)
    return compared, reused, faults.raised


@settings(max_examples=40, deadline=None, database=None)
@given(st.integers(0, 2**32))
def test_a_render_after_a_failed_one_equals_a_cold_render(seed: int) -> None:
    _run(seed)


def test_the_sessions_fault_and_reuse() -> None:
    """The sessions played fail renders midway and reuse the previous render's work."""
    runs = [_run(seed) for seed in range(20)]
    assert all(compared > 0 for compared, _, _ in runs)
    assert sum(r for _, r, _ in runs) > 0 and sum(f for _, _, f in runs) > 0
