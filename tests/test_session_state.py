"""SessionState: one object with everything a render reads or writes, round-tripped as JSON."""

from __future__ import annotations

import json

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain, Session
from ctxengine.transcript import ToolCall

pytestmark = pytest.mark.anyio


async def _steps(s: Session, tag: str, n: int) -> None:
    for i in range(n):
        await s.user_message(
            f"request {tag}-{i}: look at module_{tag}_{i}.py and explain it carefully in depth"
        )
        call = ToolCall(f"c{tag}_{i}", "read_file", {"path": f"m{tag}_{i}.py"})
        await s.assistant_message("", [call])
        await s.tool_result(f"c{tag}_{i}", f"RESULT-{tag}-{i} " + "content line\n" * 40)
        await s.assistant_message(f"done {tag}-{i}")


async def _session(s: Session) -> None:
    s.add(ContextGrain("sys.rules", "app", "Be terse.", priority=0, lifespan="session"))
    s.add(ContextGrain("task.goal", "app", "Fix the failing test.", lifespan="task"))
    await _steps(s, "a", 30)
    s.add(ContextGrain("rag.note", "app", "A note for this turn only.", lifespan="turn"))


async def test_state_round_trips_through_json_and_renders_the_same() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("s1") as s:
        await _session(s)
        for r in range(4):  # render and grow until a compaction has happened
            first = await s.render()
            if s.state.compacted:
                break
            await _steps(s, str(r), 15)
        assert any(c["ok"] for c in first.report.compactions)
        assert s.state.compacted and s.state.summary is not None
        s.add(ContextGrain("rag.next", "app", "Queued for the next render.", lifespan="turn"))
        data = json.loads(json.dumps(s.state.to_json()))
        again = await s.render()
    restored = Session.from_state(engine, engine.state_from_json(data))
    assert restored.state is not s.state and restored.state.asm is not s.state.asm
    assert restored.state.to_json() == data
    out = await restored.render()
    assert out.payload == again.payload
    assert out.tokens == again.tokens
    decisions = {g.node_id: (g.decision, g.tokens) for g in again.report}
    assert {g.node_id: (g.decision, g.tokens) for g in out.report} == decisions


async def test_state_json_is_plain_data() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("s2") as s:
        await _session(s)
        for r in range(4):
            await s.render()
            if s.state.compacted:
                break
            await _steps(s, str(r), 15)
        data = s.state.to_json()
    assert json.loads(json.dumps(data)) == data
    assert {"messages", "stored", "queued", "compacted", "summary", "turn"} <= set(data)
    assert data["turn"] >= 1 and data["summary"]["node_id"] == "mem.summary"


async def test_shadowed_carried_grains_round_trip_and_still_render_shadowed() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("s3") as s:
        s.add(ContextGrain("mem.profile", "app", "LOSER", priority=50, lifespan="session"))
        s.add(ContextGrain("mem.profile", "app", "WINNER", priority=30, lifespan="session"))
        await s.user_message("hi")
        before = await s.render()
        data = json.loads(json.dumps(s.state.to_json()))
    restored = Session.from_state(engine, engine.state_from_json(data))
    out = await restored.render()
    for rendered in (before, out):
        assert "WINNER" in str(rendered.payload) and "LOSER" not in str(rendered.payload)
        shadowed = [d.grain.content for d in rendered.report if d.decision == "shadowed"]
        assert shadowed == ["LOSER"]
