"""The render contract on every shared real transcript, replayed at 300 … 200,000 tokens for
every provider: no render over its budget (an independent tiktoken count of the payload), and
the ladder uses the room it has: at least 95 % of the target whenever it cut something that
would fit in the room left (a render whose only cuts are larger than the room — one 500-token
message at a 300 budget — cannot do better).

A render that compacted is held to the same 95 %: it lands at the compaction's low-water mark
(``CompactionConfig.render_low_water`` of the target, measured with the actual summary), and a
summarized turn that would still fit in the room left counts as a cut that fits (the
compaction could have kept it verbatim), a request with the answer after it when both were cut
(one never comes back without the other). ``BudgetError`` is accepted only
when it says the protected content alone (e.g. a first user message longer than the budget)
exceeds the budget.

In ``pytest`` each transcript is rendered at two points of its replay (half and all of it);
``CTXENGINE_SWEEP=full`` renders before every assistant turn, as ``ctxengine replay`` does
(about 12,000 renders, 5 minutes on one core; ``.ci/run`` runs it beside its other steps).
``CTXENGINE_SWEEP_REPORT=<file>`` appends one
JSON line per render (for the figures in the report).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from contract_count import independent_count
from ctxengine import Budget, BudgetError, ContextEngine
from ctxengine.assemble.pipeline import FRAMING_TOKENS
from ctxengine.compaction.facts import SUMMARY_META
from ctxengine.replay import _feed
from ctxengine.transcript import Message, Transcript
from transcript.helpers import named_transcripts

BUDGETS = (300, 1_500, 8_000, 32_000, 200_000)
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")
MODEL = "gpt-4.1"  # a 1M-token window: 200k budgets are accepted; o200k_base counts exactly
FULL = os.environ.get("CTXENGINE_SWEEP") == "full"
REPORT = os.environ.get("CTXENGINE_SWEEP_REPORT")
#: Use of the target required whenever a render cut something that would fit in the room left.
MIN_USE = 0.95


TRANSCRIPTS = named_transcripts()


def _render_points(messages: list[Message]) -> set[int]:
    """Indices before which a render happens (before an assistant turn)."""
    turns = [
        i
        for i, m in enumerate(messages)
        if m.role == "assistant" and i > 0 and messages[i - 1].role != "assistant"
    ]
    turns.append(len(messages))
    if FULL:
        return set(turns)
    return {turns[min(len(turns) - 1, (len(turns) * k) // 4)] for k in (2, 4)}


def _plan_cut(g: Any) -> bool:
    """Whether the plan cut ``g`` (an item hygiene left out of the payload was kept by the
    plan: no backfill can bring it back)."""
    return g.status != "kept" and g.stage != "hygiene"


def _cut(out: Any) -> bool:
    return any(map(_plan_cut, out.report))


def _room_left_for_a_cut(out: Any, messages: list[Message]) -> bool:
    """Whether some cut item would fit in what the plan left below its target (then backfill
    should have used it): a render whose every cut is larger than the room cannot do better.
    A turn comes back whole (a summarized turn too: the compaction could keep it), and a
    request only with the assistant message answering it when that was cut too (the engine
    never keeps a request verbatim whose answer it summarized)."""
    room = out.report.target - (out.report.tokens_estimated - FRAMING_TOKENS)
    costs: dict[str, int] = {}
    cut_at: dict[int, str] = {}  # message index -> its unit's key
    for g in out.report:
        if not _plan_cut(g) or g.stage == "guard":  # the guard's cap: no backfill undoes it
            continue
        turn = re.match(r"turn (\d+) ", g.reason) or re.search(r"\(turn (\d+)\)$", g.reason)
        key = f"turn {turn.group(1)}" if turn else g.node_id
        costs[key] = costs.get(key, 0) + g.tokens_before - g.tokens_after
        if g.node_id.startswith("hist.") and g.node_id[5:].isdigit():
            cut_at[int(g.node_id[5:])] = key
    for i, key in sorted(cut_at.items()):
        if messages[i].role != "user":
            continue
        j = i + 1
        while j < len(messages) and messages[j].role == "tool":
            j += 1
        answer = cut_at.get(j) if j < len(messages) and messages[j].role == "assistant" else None
        if answer is not None and answer != key and answer in costs and key in costs:
            costs[key] += costs.pop(answer)  # the request's unit takes its answer's turn
            cut_at.update({k: key for k, v in cut_at.items() if v == answer})
    return any(0 < c <= room for c in costs.values())


def _empty_sections(text: str) -> list[str]:
    """The ``## `` headings of a summary with no line of their own before the next heading
    or the end (a section its cap emptied)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return [
        ln
        for k, ln in enumerate(lines)
        if ln.startswith("## ") and (k + 1 == len(lines) or lines[k + 1].startswith("## "))
    ]


async def _sweep(name: str, t: Transcript, budget: int) -> list[dict[str, Any]]:
    messages = list(t)
    points = _render_points(messages)
    engine = ContextEngine(MODEL, Budget(total=budget))
    rows: list[dict[str, Any]] = []
    async with engine.session("sweep") as s:
        for i in range(len(messages) + 1):
            if i in points and len(s.messages):
                for provider in PROVIDERS:
                    try:
                        out = await s.render(provider)
                    except BudgetError as exc:  # only when protected content alone is over
                        need = re.search(r"protected items alone need (\d+) tokens", str(exc))
                        assert need and int(need.group(1)) > budget - FRAMING_TOKENS, exc
                        rows.append({"transcript": name, "budget": budget, "refused": True})
                        continue
                    counted = independent_count(out.payload, provider)
                    rows.append(
                        {
                            "transcript": name,
                            "budget": budget,
                            "provider": provider,
                            "at": i,
                            "tokens": out.tokens,
                            "counted": counted,
                            "target": out.report.target,
                            "cut": _cut(out),
                            "compacted": bool(out.report.compactions),
                            "use": out.tokens / out.report.target,
                            "room_for_a_cut": _room_left_for_a_cut(out, s.messages),
                        }
                    )
                    assert counted <= budget, rows[-1]
                    assert out.tokens <= budget, rows[-1]
                    for m in out.transcript.messages:
                        if m.meta.get(SUMMARY_META):
                            assert not _empty_sections(m.text), (rows[-1], m.text)
                    if rows[-1]["cut"] and rows[-1]["room_for_a_cut"]:
                        assert rows[-1]["use"] >= MIN_USE, rows[-1]
            if i < len(messages):
                await _feed(s, messages[i])
    if REPORT:
        with Path(REPORT).open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize(("name", "transcript"), TRANSCRIPTS, ids=[n for n, _ in TRANSCRIPTS])
def test_replayed_renders_keep_the_budget_and_use_the_room(
    name: str, transcript: Transcript, budget: int
) -> None:
    rows = anyio.run(_sweep, name, transcript, budget)
    assert rows  # every transcript renders (or is refused) at each render point
    rendered = [r for r in rows if not r.get("refused")]
    assert not rendered or {r["provider"] for r in rendered} == set(PROVIDERS)
