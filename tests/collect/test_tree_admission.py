"""What a tree handler (``on_before_render``, ``on_over_budget``) leaves in ``event.tree`` is
admitted like a collected grain: no engine namespace and no shadowing of another owner's
protected grain without the consent, fusion by node id with the loser reported shadowed, and a
decision for every grain a handler removed (docs/engine.md, "Namespaces" and "Nothing is lost
silently")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from contract_count import independent_count
from ctxengine import Budget, ContextEngine, ContextGrain
from ctxengine.assemble.compact import SUMMARY_ID
from ctxengine.builtins import RedactionProvider, Redactor, UsageAuditProvider
from ctxengine.collect.events import BeforeRender, CustomEvent, OverBudget, current_bus
from ctxengine.compaction import CompactionConfig
from ctxengine.store.snapshot import build_snapshot
from ctxengine.transcript import ToolCall
from transcript.helpers import PROVIDERS, assert_sdk_valid

pytestmark = pytest.mark.anyio

RULES = "APP-RULES: answer in English"
MINE = "PLUGIN TEXT"


async def _render(plugin: Any, *, total: int = 3000, consent: bool = False) -> Any:
    engine = ContextEngine("gpt-4o", Budget(total=total), plugins=[plugin], allow_dangerous=consent)
    async with engine.session("tree") as s:
        s.add(
            ContextGrain(
                "sys.rules", content=RULES, priority=500, protected=True, lifespan="session"
            )
        )
        await s.user_message("hello")
        return await s.render()


def _texts(out: Any) -> list[str]:
    return [m["content"] for m in out.payload["messages"]]


def _faults(out: Any) -> list[tuple[str, str, str, str | None]]:
    return [(f["plugin"], f["hook"], f["kind"], f["node_id"]) for f in out.report.faults]


def _decisions(out: Any, node_id: str) -> list[tuple[str, str]]:
    return [(d.origin, d.decision) for d in out.report if d.node_id == node_id]


class Returner:
    """Returns ``grain`` from ``on_before_render``."""

    name, version, priority, enabled = "returner", "1.0.0", 10, True

    def __init__(self, grain: ContextGrain, *, dangerous: bool = False) -> None:
        self.grain = grain
        self.dangerous = dangerous

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return []

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain]:
        g = self.grain
        return [ContextGrain(g.node_id, content=g.content, priority=g.priority)]


class Appender(Returner):
    """Appends ``grain`` to ``event.tree`` in ``on_before_render``."""

    name = "appender"

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain]:
        event.tree.extend(super().on_before_render(event))
        return []


@pytest.mark.parametrize("kind", [Returner, Appender])
async def test_a_tree_handler_cannot_shadow_the_apps_protected_grain(kind: type[Returner]) -> None:
    out = await _render(kind(ContextGrain("sys.rules", content="PWNED", priority=0)))
    assert _texts(out) == [RULES, "hello"]
    [fault] = out.report.faults
    assert fault["kind"] == "denied" and fault["hook"] == "on_before_render"
    assert "would shadow the protected grain 'sys.rules' of 'session'" in fault["message"]
    assert ("session", "kept") in _decisions(out, "sys.rules")
    if kind is Returner:  # a returned grain is refused alone, with its node id and a decision
        assert fault["node_id"] == "sys.rules"
        assert _decisions(out, "sys.rules") == [("session", "kept"), ("returner", "dropped")]


@pytest.mark.parametrize("kind", [Returner, Appender])
async def test_a_tree_grain_less_important_than_a_protected_one_is_only_shadowed(
    kind: type[Returner],
) -> None:
    out = await _render(kind(ContextGrain("sys.rules", content="extra", priority=600)))
    assert out.report.faults == []
    assert _texts(out) == [RULES, "hello"]
    assert _decisions(out, "sys.rules") == [("session", "kept"), (kind.name, "shadowed")]


async def test_with_the_consent_a_tree_handler_may_shadow_a_protected_grain() -> None:
    plugin = Appender(ContextGrain("sys.rules", content="PLUGIN-RULES", priority=0), dangerous=True)
    out = await _render(plugin, consent=True)
    assert out.report.faults == []
    assert _texts(out) == ["PLUGIN-RULES", "hello"]
    assert _decisions(out, "sys.rules") == [("appender", "kept"), ("session", "shadowed")]


class Renamer:
    """Renames its own ``rag.mine`` grain to ``target`` in the tree handler ``hook``."""

    name, version, priority, enabled = "renamer", "1.0.0", 10, True

    def __init__(self, target: str, hook: str, content: str = MINE) -> None:
        self.target = target
        self.content = content
        setattr(self, hook, self._rename)

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("rag.mine", content=self.content)]

    def _rename(self, event: BeforeRender | OverBudget) -> None:
        for g in event.tree:
            if g.node_id == "rag.mine":
                g.node_id = self.target


@pytest.mark.parametrize(
    "target", [SUMMARY_ID, "hist.0", "sys.transcript.0", "act.tool_result.c1", "sys.rules"]
)
@pytest.mark.parametrize("hook", ["on_before_render", "on_over_budget"])
async def test_renaming_its_own_grain_into_an_engine_or_protected_id_is_undone(
    target: str, hook: str
) -> None:
    over = hook == "on_over_budget"
    content = "filler " * 400 if over else MINE  # over the budget: on_over_budget fires
    out = await _render(Renamer(target, hook, content), total=400 if over else 3000)
    assert _faults(out) == [("renamer", hook, "denied", None)]
    assert target in out.report.faults[0]["message"]
    assert _texts(out)[0].startswith(RULES)  # nothing injected ahead of the app's rules
    assert len(_texts(out)) == 2  # no extra system message
    assert [d.origin for d in out.report if d.node_id == "rag.mine"] == ["renamer"]
    assert ("session", "kept") in _decisions(out, "sys.rules")


class Twice:
    """``collect`` gives ``rag.a`` at priority 5; ``on_before_render`` returns a second
    ``rag.a`` at priority 50."""

    name, version, priority, enabled = "twice", "1.0.0", 10, True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("rag.a", content="FROM COLLECT", priority=5)]

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain]:
        return [ContextGrain("rag.a", content="FROM BEFORE_RENDER", priority=50)]


async def test_a_second_grain_of_a_node_id_from_a_tree_handler_is_fused() -> None:
    out = await _render(Twice())
    assert "FROM COLLECT" in _texts(out)[0] and "FROM BEFORE_RENDER" not in str(out.payload)
    assert _decisions(out, "rag.a") == [("twice", "kept"), ("twice", "shadowed")]
    shadowed = next(d for d in out.report if d.decision == "shadowed")
    assert shadowed.grain.content == "FROM BEFORE_RENDER"
    assert out.report.shadowed == [
        {"node_id": "rag.a", "origin": "twice", "priority": 50, "winner": "twice"}
    ]


class Dropper:
    """Takes its own ``rag.b`` out of the tree in ``on_before_render``."""

    name, version, priority, enabled = "dropper", "1.0.0", 10, True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("rag.b", content="B")]

    def on_before_render(self, event: BeforeRender) -> None:
        event.tree[:] = [g for g in event.tree if g.node_id != "rag.b"]


async def test_a_grain_a_tree_handler_removed_has_a_decision() -> None:
    out = await _render(Dropper())
    assert out.report.faults == []
    assert "B" not in _texts(out)[0].split("\n\n")
    [decision] = [d for d in out.report if d.node_id == "rag.b"]
    assert (decision.origin, decision.decision, decision.stage) == (
        "dropper",
        "dropped",
        "on_before_render",
    )
    assert "removed from the tree by plugin 'dropper' in on_before_render" in decision.reason


class Emitter:
    """Emits an event from ``on_before_render``; its subscriber returns a grain over the app's
    protected ``sys.rules``."""

    name, version, priority, enabled = "emitter", "1.0.0", 10, True
    subscriptions: ClassVar[dict[str, str]] = {"tree.note": "on_note"}

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return []

    async def on_before_render(self, event: BeforeRender) -> None:
        await current_bus().emit("tree.note", None)

    def on_note(self, event: CustomEvent) -> list[ContextGrain]:
        return [ContextGrain("sys.rules", content="PWNED", priority=0)]


async def test_a_bus_grain_during_a_tree_handler_cannot_shadow_a_protected_grain() -> None:
    out = await _render(Emitter())
    assert _texts(out) == [RULES, "hello"]
    assert _faults(out) == [("emitter", "bus:tree.note", "denied", "sys.rules")]
    assert _decisions(out, "sys.rules") == [("session", "kept"), ("emitter", "dropped")]


class Collector(Returner):
    """Returns ``grain`` from ``collect`` under the name ``name``: the reference a tree
    handler's grain is admitted like."""

    def __init__(self, grain: ContextGrain, name: str) -> None:
        super().__init__(grain, dangerous=True)
        self.name = name

    async def collect(self, scene: Any) -> list[ContextGrain]:
        g = self.grain
        return [ContextGrain(g.node_id, content=g.content, priority=g.priority)]

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain]:
        return []


def _explained(out: Any, node_id: str) -> list[tuple[str, str, str | None, str]]:
    return [(d.origin, d.decision, d.stage, d.reason) for d in out.report if d.node_id == node_id]


@pytest.mark.parametrize(
    ("priority", "expected"),
    [
        (0, [("kind", "kept"), ("transcript", "shadowed")]),
        (150, [("transcript", "kept"), ("kind", "shadowed")]),
    ],
)
@pytest.mark.parametrize("kind", [Returner, Appender])
async def test_a_consented_tree_handlers_history_grain_is_admitted_like_a_collected_one(
    kind: type[Returner], priority: int, expected: list[tuple[str, str]]
) -> None:
    grain = ContextGrain("hist.0", content="REWRITTEN", priority=priority)
    out = await _render(kind(grain, dangerous=True), consent=True)
    reference = await _render(Collector(grain, kind.name), consent=True)
    assert out.report.faults == reference.report.faults == []
    assert out.payload == reference.payload
    assert _texts(out)[-1] == ("REWRITTEN" if priority <= 100 else "hello")
    named = [(kind.name if o == "kind" else o, d) for o, d in expected]
    assert _decisions(out, "hist.0") == _decisions(reference, "hist.0") == named
    assert _explained(out, "hist.0") == _explained(reference, "hist.0")


class Both:
    """``collect`` gives ``hist.0`` at priority ``collected``, ``on_before_render`` returns
    another at priority ``returned``."""

    name, version, priority, enabled, dangerous = "both", "1.0.0", 10, True, True

    def __init__(self, collected: int, returned: int) -> None:
        self.collected, self.returned = collected, returned

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("hist.0", content="FROM COLLECT", priority=self.collected)]

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain]:
        return [ContextGrain("hist.0", content="FROM BEFORE_RENDER", priority=self.returned)]


async def test_a_tree_handlers_history_grain_fuses_with_a_collected_one() -> None:
    out = await _render(Both(50, 5), consent=True)
    assert out.report.faults == []
    assert _texts(out)[-1] == "FROM BEFORE_RENDER"
    assert _explained(out, "hist.0") == [
        ("both", "kept", None, "kept"),
        ("both", "shadowed", "fuse", "shadowed by both (priority 5 < 50)"),
        ("transcript", "shadowed", "fuse", "shadowed by both (priority 5 < 100)"),
    ]
    lost = next(d for d in out.report if d.decision == "shadowed" and d.origin == "both")
    assert lost.grain.content == "FROM COLLECT"
    assert lost.grain.meta.get("shadowed", []) == []  # it no longer shadows the message

    out = await _render(Both(50, 80), consent=True)
    assert _texts(out)[-1] == "FROM COLLECT"
    assert _explained(out, "hist.0") == [
        ("both", "kept", None, "kept"),
        ("transcript", "shadowed", "fuse", "shadowed by both (priority 50 < 100)"),
        ("both", "shadowed", "fuse", "shadowed by both (priority 50 < 80)"),
    ]


class OverReturner(Returner):
    """Collects a grain over the budget; returns ``grain`` from ``on_over_budget``."""

    name = "over_returner"

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("rag.filler", content="filler " * 400, priority=200)]

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain]:
        return []

    def on_over_budget(self, event: OverBudget) -> list[ContextGrain]:
        g = self.grain
        return [ContextGrain(g.node_id, content=g.content, priority=g.priority)]


async def test_a_consented_over_budget_handlers_history_grain_replaces_the_message() -> None:
    grain = ContextGrain("hist.0", content="REWRITTEN", priority=0)
    out = await _render(OverReturner(grain, dangerous=True), total=400, consent=True)
    assert out.report.faults == []
    assert _texts(out)[-1] == "REWRITTEN"
    assert _explained(out, "hist.0") == [
        ("over_returner", "kept", None, "kept"),
        ("transcript", "shadowed", "fuse", "shadowed by over_returner (priority 0 < 100)"),
    ]


class Rewriter:
    """Gives ``hist.0`` at priority 0 from ``collect`` or from ``on_before_render``."""

    name, version, priority, enabled, dangerous = "rewriter", "1.0.0", 10, True, True

    def __init__(self, hook: str) -> None:
        self.hook = hook

    def _grains(self, at: str) -> list[ContextGrain]:
        return [ContextGrain("hist.0", content="REWRITTEN", priority=0)] if at == self.hook else []

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return self._grains("collect")

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain]:
        return self._grains("on_before_render")


async def _compacted_renders(hook: str) -> list[tuple[bool, list[tuple[str, str, Any, str]]]]:
    engine = ContextEngine(
        "gpt-4o", Budget(total=3000), plugins=[Rewriter(hook)], allow_dangerous=True
    )
    renders = []
    async with engine.session("compacted") as s:
        for r in range(2):
            for i in range(12):
                await s.user_message(f"request {r}-{i}: look at module_{i}.py and explain it")
                await s.assistant_message("", [ToolCall(f"c{r}_{i}", "read_file", {"path": "m"})])
                await s.tool_result(f"c{r}_{i}", "content line\n" * 100)
                await s.assistant_message(f"done {r}-{i}")
            out = await s.render()
            assert "hist.0" in s.state.compacted
            renders.append(("REWRITTEN" in str(out.payload), _explained(out, "hist.0")))
    return renders


async def test_a_tree_handlers_grain_for_a_compacted_message_is_dropped_like_a_collected_one() -> (
    None
):
    renders = await _compacted_renders("on_before_render")
    assert renders == await _compacted_renders("collect")
    assert renders[1] == (
        False,
        [
            (
                "rewriter",
                "dropped",
                "compaction",
                "its history item was summarized into mem.summary by an earlier compaction",
            )
        ],
    )


class Cutter:
    """In the tree handler ``hook``, removes the grains of node ids ``removed`` and renames
    those of ``renamed`` (old → new), for the first ``renders`` renders."""

    name, version, priority, enabled = "cutter", "1.0.0", 10, True

    def __init__(
        self,
        hook: str,
        removed: tuple[str, ...] = (),
        renamed: dict[str, str] | None = None,
        *,
        dangerous: bool = True,
        renders: int = 1,
    ) -> None:
        self.removed, self.renamed = removed, renamed or {}
        self.dangerous, self.renders = dangerous, renders
        self.seen = 0
        setattr(self, hook, self._edit)

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return []

    def _edit(self, event: BeforeRender | OverBudget) -> None:
        self.seen += 1
        if self.seen > self.renders:
            return
        event.tree[:] = [g for g in event.tree if g.node_id not in self.removed]
        for g in event.tree:
            if g.node_id in self.renamed:
                g.node_id = self.renamed[g.node_id]


FILLER = ContextGrain("rag.filler", content="filler " * 900, priority=300)


async def _tool_session(
    plugin: Any, provider: str = "openai", *, consent: bool = True, renders: int = 1
) -> list[Any]:
    """``renders`` renders of a session of a request, a tool call with two results and a
    final answer (with a large optional grain: on_over_budget fires at the budget of 700)."""
    engine = ContextEngine("gpt-4o", Budget(total=700), plugins=[plugin], allow_dangerous=consent)
    outs = []
    async with engine.session("cut") as s:
        await s.user_message("hello")
        await s.assistant_message("HI THERE")
        await s.user_message("read two files")
        calls = [ToolCall("c1", "read_file", {"path": "a"}), ToolCall("c2", "read_file", {"p": 2})]
        await s.assistant_message("", calls)
        await s.tool_result("c1", "FILE ONE")
        await s.tool_result("c2", "FILE TWO")
        await s.assistant_message("both read")
        await s.user_message("thanks")
        for _ in range(renders):
            s.add(FILLER)
            outs.append(await s.render(provider=provider))
    return outs


def _sent(out: Any) -> str:
    return json.dumps(out.payload)


GROUP = ("hist.3", "act.tool_result.c1", "act.tool_result.c2")


@pytest.mark.parametrize(
    ("removed", "dropped"),
    [
        ("hist.1", ("hist.1",)),
        ("hist.3", GROUP),
        ("act.tool_result.c2", GROUP),
    ],
)
@pytest.mark.parametrize("hook", ["on_before_render", "on_over_budget"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_consented_tree_handlers_removal_of_a_history_item_leaves_it_out(
    removed: str, dropped: tuple[str, ...], hook: str, provider: str
) -> None:
    [out] = await _tool_session(Cutter(hook, (removed,)), provider)
    assert out.report.faults == []
    sent = _sent(out)
    texts = {
        "hist.1": "HI THERE",
        "act.tool_result.c1": "FILE ONE",
        "act.tool_result.c2": "FILE TWO",
    }
    for node_id, text in texts.items():
        assert (text in sent) == (node_id not in dropped)
    assert ("read_file" in sent) == ("hist.3" not in dropped)  # never a call without results
    for node_id in dropped:
        [(origin, decision, stage, reason)] = _explained(out, node_id)
        assert (origin, decision, stage) == ("transcript", "dropped", hook)
        why = f"removed from the tree by plugin 'cutter' in {hook}"
        assert reason == why if node_id == removed else reason.endswith(why)
        assert node_id == removed or f"in the turn of {removed!r}" in reason
    assert_sdk_valid(out.payload, provider)
    assert out.tokens <= 700 and independent_count(out.payload, provider) <= 700

    # without the consent the removal is undone with a denied fault
    plugin = Cutter(hook, (removed,), dangerous=False)
    [out] = await _tool_session(plugin, provider, consent=False)
    assert _faults(out) == [("cutter", hook, "denied", None)]
    assert f"removed grain {removed!r} of plugin 'transcript'" in out.report.faults[0]["message"]
    assert all(t in _sent(out) for t in texts.values())
    assert all(_decisions(out, n) == [("transcript", "kept")] for n in GROUP)


@pytest.mark.parametrize("hook", ["on_before_render", "on_over_budget"])
async def test_a_history_item_a_tree_handler_removed_comes_back_in_the_next_render(
    hook: str,
) -> None:
    first, second = await _tool_session(Cutter(hook, ("act.tool_result.c1",)), renders=2)
    assert "FILE ONE" not in _sent(first)
    reference = await _tool_session(Cutter(hook, renders=0), renders=2)
    assert second.payload == reference[1].payload
    assert second.tokens == reference[1].tokens
    assert all(_decisions(second, n) == [("transcript", "kept")] for n in GROUP)


@pytest.mark.parametrize("hook", ["on_before_render", "on_over_budget"])
async def test_a_history_items_grain_a_tree_handler_renamed_is_sent_once_under_its_new_id(
    hook: str,
) -> None:
    plugin = Cutter(hook, renamed={"hist.1": "rag.said"})
    first, second = await _tool_session(plugin, renders=2)
    assert first.report.faults == []
    assert _texts(first)[0].count("HI THERE") == 1  # the system message: the context grain
    assert _sent(first).count("HI THERE") == 1  # and not the assistant message
    [(origin, decision, stage, reason)] = _explained(first, "hist.1")
    assert (origin, decision, stage) == ("transcript", "dropped", hook)
    assert reason == f"renamed to 'rag.said' by plugin 'cutter' in {hook}"
    assert _decisions(first, "rag.said") == [("transcript", "kept")]
    # the item keeps its own grain: the next render sends the message again
    assert _decisions(second, "hist.1") == [("transcript", "kept")]
    assert {"role": "assistant", "content": "HI THERE"} in second.payload["messages"]
    assert "rag.said" not in [d.node_id for d in second.report]


async def test_a_history_items_grain_renamed_to_another_items_id_replaces_that_one() -> None:
    [out] = await _tool_session(Cutter("on_before_render", renamed={"hist.1": "hist.7"}))
    assert out.report.faults == []
    assert _texts(out)[-1] == "HI THERE" and _sent(out).count("HI THERE") == 1
    assert _decisions(out, "hist.1") == [("transcript", "dropped")]
    assert _decisions(out, "hist.7") == [("transcript", "kept"), ("transcript", "shadowed")]


class RenameThenRemove(Cutter):
    """Renames ``hist.1`` to ``rag.gone``, then takes ``rag.gone`` out, in one handler."""

    def __init__(self) -> None:
        super().__init__("on_before_render", ("rag.gone",), {"hist.1": "rag.gone"})

    def _edit(self, event: BeforeRender | OverBudget) -> None:
        self.seen += 1
        if self.seen > self.renders:
            return
        for g in event.tree:
            if g.node_id in self.renamed:
                g.node_id = self.renamed[g.node_id]
        event.tree[:] = [g for g in event.tree if g.node_id not in self.removed]


async def test_an_items_grain_renamed_then_taken_out_keeps_its_id_for_the_next_render() -> None:
    """The item's own grain kept the name a handler gave it before taking it out: from the
    next render on its text went out twice, as a context grain and as the message."""
    first, second = await _tool_session(RenameThenRemove(), renders=2)
    assert "HI THERE" not in _sent(first)
    assert _decisions(first, "hist.1") == [("transcript", "dropped")]
    assert _sent(second).count("HI THERE") == 1
    assert {"role": "assistant", "content": "HI THERE"} in second.payload["messages"]
    assert "rag.gone" not in [d.node_id for d in second.report]


class LateReplacer(Cutter):
    """Removes ``hist.1`` in on_before_render, then gives a grain for it in on_over_budget."""

    def __init__(self) -> None:
        super().__init__("on_before_render", ("hist.1",))

    def on_over_budget(self, event: OverBudget) -> list[ContextGrain]:
        return [ContextGrain("hist.1", content="LATE", priority=0)]


async def test_a_grain_for_an_item_taken_out_of_the_render_is_dropped() -> None:
    [out] = await _tool_session(LateReplacer())
    assert "LATE" not in _sent(out) and "HI THERE" not in _sent(out)
    assert _explained(out, "hist.1")[-1] == (
        "cutter",
        "dropped",
        "on_before_render",
        "its history item was taken out of this render in on_before_render",
    )


async def _compacting(plugin: Any, renders: int = 1) -> tuple[list[Any], list[str], set[str]]:
    """``renders`` renders of a session of twelve requests, each a file read and an answer,
    over the high-water mark of a budget of 3000 (the first render compacts); the call of
    request 1 reads ``private_1.txt``, a name only that call holds. Returns the renders, the
    summary's text after each, and the node ids compacted by the first."""
    engine = ContextEngine("gpt-4o", Budget(total=3000), plugins=[plugin], allow_dangerous=True)
    outs, summaries = [], []
    compacted: set[str] = set()
    async with engine.session("compacting") as s:
        for i in range(12):
            path = "private_1.txt" if i == 1 else f"module_{i}.py"
            await s.user_message(f"request {i}: read the file and explain it")
            await s.assistant_message("", [ToolCall(f"c{i}", "read_file", {"path": path})])
            await s.tool_result(f"c{i}", f"FILE {i}\n" + "content line\n" * 100)
            await s.assistant_message(f"done {i}")
        for r in range(renders):
            outs.append(await s.render())
            assert s.state.summary is not None
            summaries.append(s.state.summary.text)
            if r == 0:
                compacted = set(s.state.compacted)
    return outs, summaries, compacted


@pytest.mark.parametrize("hook", ["on_before_render", "on_over_budget"])
async def test_a_compaction_does_not_summarize_a_turn_a_tree_handler_took_out(hook: str) -> None:
    """The call of request 1 and its result are taken out of the render: the compaction of
    that render summarizes the turns around them, never them (their content would be sent,
    in mem.summary, by the render that left them out, and by every render after it)."""
    [out], [summary], compacted = await _compacting(Cutter(hook, ("act.tool_result.c1",)))
    assert {"hist.3", "hist.7", "act.tool_result.c2"} <= compacted  # the turns around them
    assert compacted.isdisjoint({"hist.5", "act.tool_result.c1"})
    assert "private_1.txt" not in summary and "private_1.txt" not in _sent(out)
    assert "request 1: read the file" in summary  # its request: summarized, not sent alone
    for node_id in ("hist.5", "act.tool_result.c1"):
        [(origin, decision, stage, _)] = _explained(out, node_id)
        assert (origin, decision, stage) == ("transcript", "dropped", hook)


async def test_a_compaction_does_not_summarize_a_request_taken_out_nor_its_answer() -> None:
    """The request is taken out: it and its answer stay out of the summary, so that when the
    request is back in the next render its answer is there with it, not in the summary before
    it (the request would read as still to be answered)."""
    outs, summaries, compacted = await _compacting(Cutter("on_before_render", ("hist.4",)), 2)
    first, second = outs
    assert {"hist.3", "hist.7", "act.tool_result.c2"} <= compacted
    assert compacted.isdisjoint({"hist.4", "hist.5", "act.tool_result.c1"})
    assert all("request 1: read the file" not in s for s in summaries)
    assert "private_1.txt" not in summaries[0]
    assert _decisions(first, "hist.4") == [("transcript", "dropped")]
    assert _decisions(first, "act.tool_result.c1") == [("transcript", "kept")]
    # back in the next render, before the answer that stayed with it
    texts = [str(m.get("content")) for m in second.payload["messages"]]
    at = texts.index("request 1: read the file and explain it")
    assert texts[at + 2].startswith("FILE 1")


class Editor:
    """In the tree handler ``hook``, writes ``text`` over the content of the grain of
    ``node_id`` (keeping its node id), for the first ``renders`` renders."""

    name, version, priority, enabled, dangerous = "editor", "1.0.0", 10, True, True

    def __init__(self, hook: str, node_id: str, text: str, *, renders: int = 1) -> None:
        self.node_id, self.text, self.renders = node_id, text, renders
        self.seen = 0
        setattr(self, hook, self._edit)

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return []

    def _edit(self, event: BeforeRender | OverBudget) -> None:
        self.seen += 1
        if self.seen > self.renders:
            return
        for g in event.tree:
            if g.node_id == self.node_id:
                g.content = self.text


@pytest.mark.parametrize(
    ("node_id", "text"), [("hist.1", "HI THERE"), ("act.tool_result.c1", "FILE ONE")]
)
@pytest.mark.parametrize("hook", ["on_before_render", "on_over_budget"])
async def test_a_consented_in_place_edit_of_a_history_items_grain_is_reported(
    hook: str, node_id: str, text: str
) -> None:
    """The item is sent with the plugin's content and stays the transcript's: its one decision
    says the edit (the plugin, the hook, the change of size), and no copy of the content it
    had is in the report or the snapshot."""
    first, second = await _tool_session(Editor(hook, node_id, "EDITED"), renders=2)
    assert first.report.faults == []
    assert text not in _sent(first) and "EDITED" in _sent(first)
    # the columns a snapshot stores are made without the per-grain decisions: they say the same
    columns, snapshot = first.report.columns(), build_snapshot(first, session_id="c", turn=0)
    note = (
        f"its content was changed in place by plugin 'editor' in {hook} "
        f"({len(text)} to 6 characters)"
    )
    assert _explained(first, node_id) == [("transcript", "kept", None, f"kept; {note}")]
    assert columns == _columns_of(first)
    assert text not in json.dumps(snapshot) and text not in first.report.to_json()
    # the item's grain keeps the content: the next render sends it, and says so
    assert "EDITED" in _sent(second) and text not in _sent(second)
    assert _explained(second, node_id) == _explained(first, node_id)
    # writing the content it has changes nothing; the other grains are reported as before
    reference = await _tool_session(Editor(hook, node_id, text), renders=2)
    assert _explained(reference[0], node_id) == [("transcript", "kept", None, "kept")]

    def others(out: Any) -> list[tuple[str, str, str, str]]:
        return [
            (d.node_id, d.origin, d.decision, d.reason) for d in out.report if d.node_id != node_id
        ]

    assert others(first) == others(reference[0]) and others(second) == others(reference[1])


def _columns_of(out: Any) -> dict[str, list[Any]]:
    """The report's columns as its per-grain decisions give them."""
    return {name: [d[name] for d in out.report] for name in out.report.grains[0].to_dict()}


async def test_an_edited_history_item_the_soft_trim_folds_says_the_edit() -> None:
    big = "x " * 3000
    [out] = await _tool_session(Editor("on_before_render", "act.tool_result.c1", big))
    [(origin, decision, stage, reason)] = _explained(out, "act.tool_result.c1")
    assert (origin, decision, stage) == ("transcript", "folded", "soft")
    assert reason.endswith(
        "; its content was changed in place by plugin 'editor' in on_before_render "
        "(8 to 6,000 characters)"
    )


KEY = "sk-" + "a1B2c3D4e5" * 4


async def test_the_redaction_plugins_edit_of_a_history_message_keeps_it_the_transcripts(
    tmp_path: Path,
) -> None:
    """Every message holding a secret, the latest user message too, is reported as the
    transcript's with its one decision naming the redaction; the secret is in no report,
    snapshot or audit line, and usage_audit counts the messages under ``transcript``."""
    audit = tmp_path / "audit.jsonl"
    engine = ContextEngine(
        "gpt-4o",
        Budget(total=3000),
        plugins=[RedactionProvider(), UsageAuditProvider(audit)],
        allow_dangerous={"redaction"},
    )
    first, latest = f"my key is {KEY}", "mail it to bob@example.com"
    async with engine.session("redacted") as s:
        await s.user_message(first)
        await s.assistant_message("noted")
        await s.user_message(latest)
        out = await s.render()
    sent = _sent(out)
    assert KEY not in sent and "bob@example.com" not in sent
    snapshot = json.dumps(build_snapshot(out, session_id="redacted", turn=0))
    for node_id, text in (("hist.0", first), ("hist.2", latest)):
        redacted = Redactor().redact_text(text)[0]
        assert redacted in sent
        note = (
            "its content was changed in place by plugin 'redaction' in on_before_render "
            f"({len(text)} to {len(redacted)} characters)"
        )
        assert _explained(out, node_id) == [("transcript", "kept", None, f"kept; {note}")]
        assert f"kept; {note}" in snapshot
    assert _explained(out, "hist.1") == [("transcript", "kept", None, "kept")]
    report = out.report.to_json()
    for secret in (KEY, "bob@example.com"):
        assert secret not in report and secret not in snapshot
        assert secret not in audit.read_text()
    line = json.loads(audit.read_text().splitlines()[-1])
    assert list(line["origins"]) == ["transcript"] and line["decisions"] == {"kept": 3}


class _Failing:
    async def summarize(self, *args: Any, **kwargs: Any) -> str:
        raise RuntimeError("summarizer down")


async def test_an_edited_history_item_the_ladder_drops_has_one_dropped_decision() -> None:
    """Nothing of the edited item is sent: its one decision is the ladder's ``dropped``."""
    engine = ContextEngine(
        "gpt-4o",
        Budget(total=900),
        plugins=[RedactionProvider()],
        allow_dangerous={"redaction"},
        summarizer=_Failing(),
        compaction=CompactionConfig(timeout=5, chunk_retries=0, backoff=0),
    )
    async with engine.session("dropped") as s:
        await s.user_message("write to alice@example.com " + "please " * 100)
        await s.assistant_message("ok " + "sure " * 100)
        for i in range(6):
            await s.user_message(f"q{i} " + "words " * 60)
            await s.assistant_message(f"a{i} " + "words " * 60)
        await s.user_message("last")
        out = await s.render()
    assert "please please" not in _sent(out)
    [(origin, decision, stage, reason)] = _explained(out, "hist.0")
    assert (origin, decision, stage) == ("transcript", "dropped", "compaction")
    assert reason.startswith("turn 0 dropped for this render") and "in place" not in reason
    assert [d.decision for d in out.report if d.decision == "shadowed"] == []
