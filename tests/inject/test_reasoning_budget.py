"""Thinking is planned as the payload counts it, for every provider, so every render fits.

A reasoning model's Responses history (``include=["reasoning.encrypted_content"]``, needed with
``store=False``) carries ~2 KB of ``encrypted_content`` per reasoning item, often with an empty
``summary``. The exporter sends each item whole and the payload count reads all of it, but the
plan counted a reasoning item only by its summary: nothing at all for an empty one. Its re-plans
then cut tool outputs only, and every budget from a third to most of the history raised
``BudgetError`` ("the rendered payload has 22550 tokens, over the budget of 12000"). Reasoning
is the overhead of its turn: it goes with the turn, never alone (the API pairs a reasoning item
with the item after it by id, and a call sent again with its id needs its reasoning item).
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest

from ctxengine import Budget, BudgetError, ContextEngine, fit
from ctxengine.assemble.history import HistoryBuilder
from ctxengine.inject.payload import payload_tokens, thinking_texts
from ctxengine.transcript import Message, Thinking, ToolCall, load

pytestmark = pytest.mark.anyio

BUDGETS = range(2000, 30001, 500)
MODELS = {
    "openai-responses": "gpt-4o",
    "anthropic": "claude-sonnet-4-5",
    "gemini": "gemini-2.5-pro",
}


def _opaque(rng: random.Random, n: int) -> str:
    return base64.b64encode(rng.randbytes(n)).decode()


def _responses() -> list[dict[str, Any]]:
    """Eight turns of a reasoning model (the reproduction's shape): user message, reasoning,
    a call, its output, reasoning, the answer; each reasoning item with an empty summary and
    2 KB of encrypted content."""
    rng = random.Random(0)
    items: list[dict[str, Any]] = []
    for t in range(8):
        items += [
            {"role": "user", "content": f"Step {t}: look at module {t} and report."},
            {
                "type": "reasoning",
                "id": f"rs_{t}",
                "summary": [],
                "encrypted_content": "gAAAAA" + _opaque(rng, 1500),
            },
            {
                "type": "function_call",
                "id": f"fc_{t}",
                "call_id": f"call_{t}",
                "name": "read",
                "arguments": json.dumps({"m": t}),
            },
            {
                "type": "function_call_output",
                "call_id": f"call_{t}",
                "output": f"module {t} source\n" + "x = 1\n" * 200,
            },
            {
                "type": "reasoning",
                "id": f"rs_{t}b",
                "summary": [],
                "encrypted_content": "gAAAAA" + _opaque(rng, 1500),
            },
            {
                "type": "message",
                "id": f"msg_{t}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": f"Module {t} looks fine.", "annotations": []}
                ],
            },
        ]
    return items


def _anthropic() -> list[dict[str, Any]]:
    """The same loop signed by Anthropic: thinking with its text and signature before each
    call, redacted thinking before each answer."""
    rng = random.Random(0)
    msgs: list[dict[str, Any]] = []
    for t in range(8):
        first = {"type": "text", "text": f"Step {t}: look at module {t} and report."}
        if t:
            msgs[-1]["content"].append(first)  # type: ignore[union-attr]
        else:
            msgs.append({"role": "user", "content": [first]})
        msgs += [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": f"Module {t} first: " + "read it and check. " * 60,
                        "signature": _opaque(rng, 1500),
                    },
                    {"type": "tool_use", "id": f"toolu_{t:02d}", "name": "read", "input": {"m": t}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{t:02d}",
                        "content": f"module {t} source\n" + "x = 1\n" * 200,
                    }
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": _opaque(rng, 1500)},
                    {"type": "text", "text": f"Module {t} looks fine."},
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "Next."}]},
        ]
    return msgs


def _gemini() -> list[dict[str, Any]]:
    """The same loop from Gemini: a thought with its signature before each call."""
    rng = random.Random(0)
    contents: list[dict[str, Any]] = []
    for t in range(8):
        contents += [
            {"role": "user", "parts": [{"text": f"Step {t}: look at module {t} and report."}]},
            {
                "role": "model",
                "parts": [
                    {"text": f"Module {t} first: " + "read it and check. " * 60, "thought": True},
                    {
                        "functionCall": {"id": f"c{t}", "name": "read", "args": {"m": t}},
                        "thoughtSignature": _opaque(rng, 1500),
                    },
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": f"c{t}",
                            "name": "read",
                            "response": {"output": f"module {t} source\n" + "x = 1\n" * 200},
                        }
                    }
                ],
            },
            {"role": "model", "parts": [{"text": f"Module {t} looks fine."}]},
        ]
    return contents


SIGNED = {
    "openai-responses": "encrypted_content",
    "anthropic": "signature",
    "gemini": "thoughtSignature",
}
HISTORIES = {"openai-responses": _responses, "anthropic": _anthropic, "gemini": _gemini}


def _fit(history: list[dict[str, Any]], provider: str, budget: int) -> Any:
    return fit(history, model=MODELS[provider], budget=budget, provider=provider)


def _reasoning_items(payload: dict[str, Any]) -> list[int]:
    return [k for k, i in enumerate(payload["input"]) if i.get("type") == "reasoning"]


def test_a_reasoning_item_is_planned_as_the_payload_counts_it() -> None:
    item = _responses()[1]
    block = Thinking("", json.dumps(item, separators=(",", ":")))
    assert thinking_texts(block, "openai-responses") == ("rs_0", item["encrypted_content"])
    message = Message("assistant", (block, ToolCall("call_0", "read", {"m": 0})))
    message = Message(message.role, message.blocks, meta={"provider_family": "openai-responses"})
    built = HistoryBuilder().items(0, message)[0]
    assert built.thinking == (block,)  # an empty summary is no reason to leave it uncounted
    sent = payload_tokens({"input": [item]}, "openai-responses", "gpt-4o")
    assert sent > 900  # the encrypted content is what the payload count reads


def test_signed_thinking_of_other_providers_is_planned_as_before() -> None:
    signed = Thinking("run ls", signature="EqQBCkgIARAB")
    redacted = Thinking("", signature="EmwKAhgBEgy3", redacted=True)
    assert thinking_texts(signed, "anthropic") == ("run ls",)  # the signature is not read
    assert thinking_texts(redacted, "anthropic") == ()  # nor is redacted data
    assert thinking_texts(signed, "gemini") == ("run ls",)  # nor a thought signature


@pytest.mark.parametrize("budget", [10_000, 12_000, 20_000, 26_000])
def test_a_reasoning_history_is_cut_to_budgets_it_raised_at(budget: int) -> None:
    out = _fit(_responses(), "openai-responses", budget)
    assert out.tokens <= budget
    kept = _reasoning_items(out.payload)
    assert 0 < len(kept) < 16  # older turns went with their reasoning, newer ones kept it


@pytest.mark.parametrize("provider", sorted(HISTORIES))
def test_every_budget_renders_within_it(provider: str) -> None:
    history = HISTORIES[provider]()
    whole = _fit(history, provider, 100_000)
    assert whole.tokens > 10_000
    assert SIGNED[provider] in json.dumps(whole.payload)  # the thinking is sent back
    for budget in BUDGETS:
        out = _fit(history, provider, budget)
        assert out.tokens <= budget, (provider, budget, out.tokens)


def test_every_kept_reasoning_item_comes_with_the_item_it_led_to() -> None:
    for budget in BUDGETS:
        items = _fit(_responses(), "openai-responses", budget).payload["input"]
        ids = {i.get("id") for i in items}
        for k in _reasoning_items({"input": items}):
            after = items[k + 1]
            assert after["type"] in ("function_call", "message") and after.get("id"), after
        for t in range(8):  # a call sent with its item id has its reasoning item
            assert (f"fc_{t}" in ids) <= (f"rs_{t}" in ids), (budget, t)
            assert (f"msg_{t}" in ids) <= (f"rs_{t}b" in ids), (budget, t)


async def test_a_session_fed_turn_by_turn_renders_within_budget_for_each_provider() -> None:
    # warm renders re-plan only what changed; one for another provider re-counts the thinking
    messages = list(load(_responses()).messages)
    over: list[tuple[int, int, str, str]] = []
    for budget in (9000, 16000, 20000):
        engine = ContextEngine("gpt-4o", Budget(total=budget))
        async with engine.session(f"reasoning-{budget}") as s:
            for k in range(0, len(messages), 3):
                s.extend(messages[k : k + 3])
                for provider in ("openai-responses", "anthropic", "openai-responses"):
                    try:
                        tokens = (await s.render(provider)).tokens
                    except BudgetError as e:
                        over.append((budget, k, provider, str(e)))
                        continue
                    if tokens > budget:
                        over.append((budget, k, provider, str(tokens)))
    assert over == []
