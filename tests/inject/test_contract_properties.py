"""The render contract (DESIGN.md §4) as a property over generated sessions, for each provider.

Sessions mix roles, tool calls with and without results, duplicate and hostile ids, thinking,
images, huge outputs, many small grains and emoji/CJK/RTL text; budgets run from 50 to 200k
tokens. Every render either raises ``BudgetError`` — and then the protected content alone does
not fit either — or gives a payload that an independent count (Python tiktoken, offline) puts
within the budget, with no validity problem, the latest user message verbatim and every
protected grain present.

A short, derandomized run by default; ``CTXENGINE_HYPOTHESIS_EXAMPLES`` sets the number of
examples of a long, random run (``.ci/run`` runs two, one per core, with distinct
``--hypothesis-seed`` values it prints: the same seed and count replay the same examples, and
a failure prints its reproduction blob).

Each example builds one session and renders it for the four providers (one engine, one
session: the same content is counted once per provider, not built four times).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from contract_count import independent_count
from ctxengine import Budget, BudgetError, ContextEngine, ContextGrain
from ctxengine.hygiene import validate
from ctxengine.transcript import Image, Message, Text, Thinking, ToolCall, ToolResult

LONG = "CTXENGINE_HYPOTHESIS_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("CTXENGINE_HYPOTHESIS_EXAMPLES", "40"))
#: The short run is derandomized (the same examples every run); the long run explores, and
#: prints the blob that replays a failing example (``@reproduce_failure``).
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not LONG,
    print_blob=LONG,
)
#: A model with a 1M-token window (budgets up to 200k are accepted) counted by o200k_base.
MODEL = "gpt-4.1"
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

WORDS = (
    "alpha",
    "beta",
    "日本語のテキスト",
    "中文内容",
    "مرحبا بالعالم",
    "שלום",
    "🙂🚀",
    "👩‍💻",
    "x" * 40,
)
HOSTILE_IDS = st.sampled_from(
    ["call_1", "call_1", "", " ", "a|b", "../../etc", "id with spaces", "ü-ñ", "x" * 90, "toolu_9"]
)


def _text(draw: Any, max_words: int = 30) -> str:
    """Up to ``max_words`` words, one byte each: one draw, not one per word (a thinking block
    of 200 words would otherwise cost 200 draws), shrinking to fewer and earlier words."""
    picks = draw(st.binary(min_size=1, max_size=max_words))
    return " ".join(WORDS[b % len(WORDS)] for b in picks)


@st.composite
def sessions(draw: Any) -> tuple[list[Message], list[ContextGrain], str]:
    """Messages, grains to add, and the latest user request."""
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message.system(_text(draw, 10)))
    for _ in range(draw(st.integers(0, 12))):
        role = draw(st.sampled_from(["user", "assistant", "assistant", "tool", "system"]))
        if role == "user":
            blocks: list[Any] = [Text(_text(draw))]
            if draw(st.integers(0, 5)) == 0:
                blocks.append(Image("image/png", PIXEL))
            msgs.append(Message("user", tuple(blocks)))
        elif role == "assistant":
            blocks = []
            if draw(st.integers(0, 3)) == 0:
                blocks.append(Thinking(_text(draw, 200), signature="sig"))
            if draw(st.booleans()):
                blocks.append(Text(_text(draw)))
            ids = draw(st.lists(HOSTILE_IDS, max_size=3))
            blocks += [ToolCall(i, "bash", {"cmd": _text(draw, 5)}) for i in ids]
            if not blocks:
                blocks.append(Text("ok"))
            msgs.append(Message("assistant", tuple(blocks)))
            for i in ids:
                fate = draw(st.sampled_from(["answer", "answer", "huge", "none", "twice"]))
                if fate == "none":
                    continue
                size = 3_000 if fate == "huge" else 1
                out = Text((_text(draw, 20) + "\n") * size if size > 1 else _text(draw, 20))
                for _ in range(2 if fate == "twice" else 1):
                    msgs.append(Message("tool", (ToolResult(i, (out,)),)))
        elif role == "tool":  # a stray result answering a hostile or unknown id
            msgs.append(Message("tool", (ToolResult(draw(HOSTILE_IDS), (Text("stray"),)),)))
        else:
            msgs.append(Message.system(_text(draw, 5)))
    grains: list[ContextGrain] = []
    for i in range(draw(st.sampled_from([0, 0, 3, 200, 2_000]))):
        grains.append(ContextGrain(f"rag.d.{i}", content=f"doc {i}", lifespan="session"))
    for i in range(draw(st.integers(0, 3))):
        grains.append(
            ContextGrain(
                f"mem.n{i}",
                content=_text(draw, 80),
                priority=draw(st.integers(1, 90)),
                lifespan="session",
            )
        )
    if draw(st.integers(0, 3)) == 0:
        grains.append(
            ContextGrain("sys.rules", content=_text(draw, 40), protected=True, lifespan="session")
        )
    latest = "LATEST " + _text(draw, 20)
    return msgs, grains, latest


# -- the property ----------------------------------------------------------------------------


def _fill(s: Any, msgs: list[Message], grains: list[ContextGrain]) -> None:
    s.extend(msgs)
    for g in grains:
        s.add(g)


async def _render_into(
    out: dict[str, Any], msgs: list[Message], grains: list[ContextGrain], latest: str, budget: int
) -> None:
    engine = ContextEngine(MODEL, Budget(total=budget))
    async with engine.session("prop") as s:
        _fill(s, msgs, grains)
        await s.user_message(latest)
        for provider in PROVIDERS:
            try:
                out[provider] = await s.render(provider)
            except BudgetError as exc:
                out[provider] = exc


def _render_all(
    msgs: list[Message], grains: list[ContextGrain], latest: str, budget: int
) -> dict[str, Any]:
    """One session's render (or ``BudgetError``) per provider. The coroutine returns nothing:
    when ``asyncio.run`` restores the SIGINT handler it replaced, ``signal`` builds the repr
    of the old one, which holds the main task and so its result (every payload, in full)."""
    out: dict[str, Any] = {}
    anyio.run(_render_into, out, msgs, grains, latest, budget)
    return out


def _protected_only(msgs: list[Message], grains: list[ContextGrain]) -> tuple[list[Message], Any]:
    return [m for m in msgs if m.role == "system"], [g for g in grains if g.protected]


@PROPERTY
@given(session=sessions(), exponent=st.floats(math.log10(50), math.log10(200_000)))
def test_every_render_keeps_the_contract(
    session: tuple[list[Message], list[ContextGrain], str], exponent: float
) -> None:
    msgs, grains, latest = session
    budget = max(50, round(10**exponent))
    rendered = _render_all(msgs, grains, latest, budget)
    failed = [p for p, r in rendered.items() if isinstance(r, BudgetError)]
    if failed:  # then the protected content alone cannot fit either
        sys_msgs, protected = _protected_only(msgs, grains)
        alone = _render_all(sys_msgs, protected, latest, budget)
        for p in failed:
            r = alone[p]
            assert isinstance(r, BudgetError) or independent_count(r.payload, p) > budget, (
                f"{p} at {budget}: {rendered[p]} but the protected content alone fits"
            )
    for provider, out in rendered.items():
        if isinstance(out, BudgetError):
            continue
        counted = independent_count(out.payload, provider)
        assert counted <= budget, f"{provider}: {counted} > {budget}"
        assert out.tokens <= budget
        assert validate(out.transcript, provider) == []
        last_user = [m for m in out.transcript.messages if m.role == "user"][-1]
        assert latest in last_user.text, provider
        text = json.dumps(out.payload, ensure_ascii=False)
        assert latest in text
        for g in grains:
            if g.protected:
                assert g.text in text, g.node_id
        reported = set(out.report.columns()["node_id"])  # what iterating it yields
        assert {g.node_id for g in grains} <= reported  # nothing leaves silently
