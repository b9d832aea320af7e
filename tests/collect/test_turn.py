"""The collect phase: lifespans of plugin grains and the copies a render works on (issue 9)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain
from ctxengine.collect.events import BeforeRender
from ctxengine.collect.turn import render_copy

pytestmark = pytest.mark.anyio


class Once:
    """Returns a ``session`` and a ``task`` grain from its first ``collect`` only."""

    name, version, priority, enabled = "once", "1.0.0", 10, True

    def __init__(self) -> None:
        self.calls = 0

    async def collect(self, scene: Any) -> list[ContextGrain]:
        self.calls += 1
        if self.calls > 1:
            return []
        return [
            ContextGrain("mem.note", content="NOTE-SESSION", lifespan="session"),
            ContextGrain("task.step", content="STEP-TASK", lifespan="task"),
            ContextGrain("rag.now", content="ONLY-NOW"),
        ]


async def test_session_and_task_grains_from_collect_outlive_the_render() -> None:
    """Issue 9, item 9: carried until the session closes (the task ends), as DESIGN §3 says."""
    plugin = Once()
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[plugin])
    async with engine.session("life") as s:
        await s.user_message("hi")
        first = str((await s.render()).payload)
        await s.user_message("again")
        second = str((await s.render()).payload)
        s.end_task()
        third = str((await s.render()).payload)
    assert plugin.calls == 3
    assert all(t in first for t in ("NOTE-SESSION", "STEP-TASK", "ONLY-NOW"))
    assert "NOTE-SESSION" in second and "STEP-TASK" in second and "ONLY-NOW" not in second
    assert "NOTE-SESSION" in third and "STEP-TASK" not in third
    async with engine.session("other") as other:
        await other.user_message("hello")
        assert "NOTE-SESSION" not in str((await other.render()).payload)


class Repeats:
    """Returns the same session grain from every ``collect``."""

    name, version, priority, enabled = "repeats", "1.0.0", 10, True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("mem.clock", content=f"turn {scene.turn}", lifespan="session")]


async def test_a_session_grain_returned_every_turn_is_updated_not_piled_up() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[Repeats()])
    async with engine.session("rep") as s:
        await s.user_message("hi")
        for _ in range(4):
            out = await s.render()
        assert len(s.state.carried()) == 1
    assert "turn 3" in str(out.payload) and "turn 2" not in str(out.payload)
    assert [d.decision for d in out.report if d.node_id == "mem.clock"] == ["kept"]


class Redactor:
    """A consented tree handler that rewrites every grain's content and meta in place."""

    name, version, priority, enabled, dangerous = "rewriter", "1.0.0", 10, True, True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return []

    def on_before_render(self, event: BeforeRender) -> None:
        for grain in event.tree:
            if grain.node_id.startswith("rag."):
                grain.content.append("EDITED")
                grain.meta["seen"] = True


async def test_a_render_never_writes_to_the_callers_grain() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[Redactor()], allow_dangerous=True)
    mine = ContextGrain("rag.mine", content=["a"], lifespan="session", meta={"k": 1})
    async with engine.session("own") as s:
        s.add(mine)
        await s.user_message("hi")
        out = await s.render()
        mine.content.append("b")  # the caller's later change is seen by the next render
        later = await s.render()
    assert '"EDITED"' in str(out.payload)
    assert mine.content == ["a", "b"] and mine.meta == {"k": 1} and mine.origin == ""
    rendered = next(g for g in later.tree if g.node_id == "rag.mine")
    assert rendered.content == ["a", "b", "EDITED"] and rendered.origin == "session"


def test_a_render_copy_carries_every_field_of_the_grain() -> None:
    """The copy is made field by field (``copy.copy`` costs ~9x more per carried grain per
    render): a field added to ``ContextGrain`` must not be left out of it."""
    grain = ContextGrain(
        "mem.all",
        origin="me",
        content={"k": [1]},
        priority=7,
        lifespan="task",
        window="tool",
        protected=True,
        meta={"m": [2]},
    )
    copied = render_copy(grain)
    assert copied is not grain and type(copied) is ContextGrain
    for f in dataclasses.fields(ContextGrain):
        assert getattr(copied, f.name) == getattr(grain, f.name), f.name
    assert copied.meta is not grain.meta and copied.content is not grain.content


def test_a_render_copy_of_a_subclass_keeps_its_type_and_state() -> None:
    @dataclasses.dataclass(slots=True)
    class Tagged(ContextGrain):
        tag: str = "t"

    copied = render_copy(Tagged("rag.tagged", content="x", tag="kept"))
    assert isinstance(copied, Tagged) and copied.tag == "kept" and copied.origin == "session"
