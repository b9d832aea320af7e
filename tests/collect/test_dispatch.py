"""SessionDispatcher: isolation, timeouts, order, quarantine, provenance, tree rules, bus."""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

import anyio
import pytest
from plugin_helpers import Simple

from ctxengine.errors import PluginError
from ctxengine.events import (
    AfterRender,
    BeforeRender,
    OverBudget,
    SessionClose,
    SessionStart,
    ToolResult,
    UserMessage,
    current_bus,
    current_session,
)
from ctxengine.grain import ContextGrain
from ctxengine.plugins import PluginWarning, SessionDispatcher
from ctxengine.registry import Registry
from ctxengine.scene import ContextScene

pytestmark = pytest.mark.anyio

SCENE = ContextScene(
    session_id="s1", turn=0, user_message="hi [REDACTED]", raw_user_message="hi sk-x"
)


def dispatcher(*providers: Any, **kwargs: Any) -> SessionDispatcher:
    reg = Registry(allow_dangerous=kwargs.pop("consent", False))
    for p in providers:
        reg.register(p)
    kwargs.setdefault("timeout", 0.5)
    return SessionDispatcher(reg, "s1", **kwargs)


class Behaving(Simple):
    """Collect sleeps ``delay`` then returns grains; counts calls."""

    def __init__(self, name: str, priority: int = 50, delay: float = 0.0, grains: int = 1) -> None:
        super().__init__(name, priority, grains)
        self.delay = delay
        self.calls = 0

    async def collect(self, scene: Any) -> list[ContextGrain]:
        self.calls += 1
        await anyio.sleep(self.delay)
        return await super().collect(scene)


class Raising(Behaving):
    async def collect(self, scene: Any) -> list[ContextGrain]:
        self.calls += 1
        raise ValueError("kaboom")


class Hanging(Behaving):
    async def collect(self, scene: Any) -> list[ContextGrain]:
        self.calls += 1
        await anyio.sleep(60)
        return []


class Garbage(Behaving):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name)
        self.value = value

    async def collect(self, scene: Any) -> Any:
        self.calls += 1
        return self.value


async def test_collect_runs_concurrently_and_in_order() -> None:
    plugins = [
        Behaving("slow_first", 10, delay=0.3),
        Behaving("fast", 20),
        Behaving("mid", 20, 0.1),
    ]
    d = dispatcher(*plugins)
    start = time.perf_counter()
    out = await d.collect(SCENE)
    assert time.perf_counter() - start < 0.55
    assert [g.node_id for g in out.grains] == ["task.slow_first.0", "task.fast.0", "task.mid.0"]
    assert out.faults == [] and out.ok


async def test_order_is_deterministic_whatever_finishes_first() -> None:
    orders = set()
    for delays in [(0.0, 0.05, 0.1), (0.1, 0.05, 0.0), (0.05, 0.0, 0.1)]:
        plugins = [Behaving(n, 30, delay=t, grains=2) for n, t in zip("abc", delays, strict=True)]
        out = await dispatcher(*plugins).collect(SCENE)
        orders.add(tuple(g.node_id for g in out.grains))
    assert orders == {("task.a.0", "task.a.1", "task.b.0", "task.b.1", "task.c.0", "task.c.1")}


async def test_raising_plugin_is_reported_and_skipped() -> None:
    d = dispatcher(Behaving("ok"), Raising("bad"))
    out = await d.collect(SCENE)
    assert [g.origin for g in out.grains] == ["ok"]
    [fault] = out.faults
    assert (fault.plugin, fault.hook, fault.kind) == ("bad", "collect", "raised")
    assert "ValueError: kaboom" in fault.message and not out.ok
    assert json.loads(json.dumps(fault.to_dict()))["kind"] == "raised"


async def test_hanging_plugin_times_out() -> None:
    d = dispatcher(Behaving("ok"), Hanging("stuck"), timeout=0.1)
    start = time.perf_counter()
    out = await d.collect(SCENE)
    assert time.perf_counter() - start < 1.0
    assert [g.origin for g in out.grains] == ["ok"]
    assert [(f.plugin, f.kind) for f in out.faults] == [("stuck", "timeout")]


async def test_hanging_sync_handler_times_out() -> None:
    class SyncStuck(Simple):
        def on_user_msg(self, event: UserMessage) -> None:
            time.sleep(0.6)

    d = dispatcher(SyncStuck("sync_stuck"), timeout=0.1)
    start = time.perf_counter()
    out = await d.fire(UserMessage("s1", 0, "hello"))
    assert time.perf_counter() - start < 0.5
    assert [(f.plugin, f.hook, f.kind) for f in out.faults] == [
        ("sync_stuck", "on_user_msg", "timeout")
    ]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("text", "returned str"),
        ({"node_id": "x"}, "returned dict"),
        ([ContextGrain("a.b"), 3], "item 1 is int"),
        (ContextGrain("a.b"), "returned ContextGrain"),
    ],
)
async def test_garbage_is_invalid(value: Any, fragment: str) -> None:
    out = await dispatcher(Garbage("junk", value), Behaving("ok")).collect(SCENE)
    assert [g.origin for g in out.grains] == ["ok"]
    [fault] = out.faults
    assert fault.kind == "invalid" and fragment in fault.message


async def test_none_means_no_grains() -> None:
    out = await dispatcher(Garbage("nothing", None)).collect(SCENE)
    assert out.grains == [] and out.faults == []


async def test_quarantine_after_consecutive_failures() -> None:
    bad = Raising("flaky")
    d = dispatcher(bad, Behaving("ok"), max_failures=3)
    kinds = []
    for _ in range(5):
        out = await d.collect(SCENE)
        kinds.append([f.kind for f in out.faults])
        assert [g.origin for g in out.grains] == ["ok"]
    assert kinds == [["raised"], ["raised"], ["raised", "quarantined"], [], []]
    assert bad.calls == 3 and d.quarantined == {"flaky"}
    d.release("flaky")
    await d.collect(SCENE)
    assert bad.calls == 4


async def test_success_resets_failure_count() -> None:
    class Alternating(Behaving):
        async def collect(self, scene: Any) -> list[ContextGrain]:
            self.calls += 1
            if self.calls % 2:
                raise RuntimeError("odd call")
            return []

    d = dispatcher(Alternating("alt"), max_failures=2)
    for _ in range(6):
        await d.collect(SCENE)
    assert d.quarantined == frozenset()


async def test_quarantine_is_per_session() -> None:
    reg = Registry()
    reg.register(Raising("flaky"))
    one = SessionDispatcher(reg, "one", max_failures=1)
    two = SessionDispatcher(reg, "two", max_failures=1)
    await one.collect(SCENE)
    assert one.quarantined == {"flaky"} and two.quarantined == frozenset()


async def test_enable_disable_at_runtime() -> None:
    p = Behaving("toggle")
    d = dispatcher(p)
    d.registry.disable("toggle")
    assert (await d.collect(SCENE)).grains == []
    d.registry.enable("toggle")
    assert [g.origin for g in (await d.collect(SCENE)).grains] == ["toggle"]
    late = Behaving("late", priority=1)
    d.registry.register(late)
    assert [g.origin for g in (await d.collect(SCENE)).grains] == ["late", "toggle"]


async def test_origin_filled_and_lies_corrected() -> None:
    class Liar(Simple):
        async def collect(self, scene: Any) -> list[ContextGrain]:
            return [
                ContextGrain("task.a", origin="honest"),
                ContextGrain("task.b", origin="liar"),
                ContextGrain("task.c", origin="tool.executor"),
                ContextGrain("task.d"),
            ]

    out = await dispatcher(Liar("liar"), Simple("honest", grains=0)).collect(SCENE)
    assert [g.origin for g in out.grains] == ["liar", "liar", "tool.executor", "liar"]
    assert out.grains[0].meta["claimed_origin"] == "honest"
    assert out.grains[2].meta["emitted_by"] == "liar"
    [fault] = out.faults
    assert (fault.kind, fault.severity) == ("provenance", "warning") and out.ok


async def test_returned_grains_are_copies() -> None:
    cached = ContextGrain("task.cached", meta={"n": 1})

    class Cache(Simple):
        async def collect(self, scene: Any) -> list[ContextGrain]:
            return [cached]

    out = await dispatcher(Cache("cache")).collect(SCENE)
    out.grains[0].content = "changed by engine"
    out.grains[0].meta["x"] = 2
    assert cached.content == "" and cached.origin == "" and cached.meta == {"n": 1}


class RawReader(Simple):
    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        return [ContextGrain("task.raw", content=scene.raw_user_message)]


async def test_raw_user_message_refused_without_privilege() -> None:
    out = await dispatcher(RawReader("reader")).collect(SCENE)
    [fault] = out.faults
    assert fault.kind == "raised" and "may not read the raw user message" in fault.message
    assert SCENE.user_message == "hi [REDACTED]"


async def test_raw_user_message_needs_dangerous_and_consent() -> None:
    class DangerReader(RawReader):
        dangerous = True

    out = await dispatcher(DangerReader("reader"), consent=True).collect(SCENE)
    assert [g.content for g in out.grains] == ["hi sk-x"]
    reg = Registry(allow_dangerous=True)
    reg.register(DangerReader("reader"))
    no_consent = SessionDispatcher(reg, "s1", allow_dangerous=False)
    assert (await no_consent.collect(SCENE)).faults[0].kind == "raised"


class AllHooks(Simple):
    def __init__(self, name: str) -> None:
        super().__init__(name, grains=0)
        self.seen: list[tuple[str, Any]] = []

    async def on_session_start(self, event: SessionStart) -> None:
        self.seen.append(("start", current_session()))

    def on_user_msg(self, event: UserMessage) -> list[ContextGrain]:
        self.seen.append(("user", event.user_message))
        return [ContextGrain("task.echo", content=event.user_message)]

    async def on_tool_result(self, event: ToolResult) -> None:
        self.seen.append(("tool", event.call_id))

    async def on_after_render(self, event: AfterRender) -> None:
        self.seen.append(("after", event.tokens))

    async def on_session_close(self, event: SessionClose) -> None:
        self.seen.append(("close", event.session_id))


async def test_every_lifecycle_event_reaches_its_handler() -> None:
    p = AllHooks("hooks")
    d = dispatcher(p)
    await d.fire(SessionStart("s1"))
    out = await d.fire(UserMessage("s1", 1, "question"))
    assert [(g.node_id, g.origin) for g in out.grains] == [("task.echo", "hooks")]
    await d.fire(ToolResult("s1", "call_1", "bash", "ok"))
    await d.fire(AfterRender({}, 42, []))
    await d.fire(SessionClose("s1"))
    assert p.seen == [
        ("start", "s1"),
        ("user", "question"),
        ("tool", "call_1"),
        ("after", 42),
        ("close", "s1"),
    ]
    assert d.bus.closed


async def test_fire_rejects_unknown_event() -> None:
    with pytest.raises(PluginError, match="not a lifecycle event"):
        await dispatcher().fire(object())


def _tree() -> list[ContextGrain]:
    return [
        ContextGrain("sys.instructions", origin="core", content="be nice"),
        ContextGrain("mem.note", origin="memory", content="user likes tables"),
        ContextGrain("task.mine", origin="editor", content="draft"),
    ]


class Editor(Simple):
    def __init__(self, name: str, action: str, priority: int = 50) -> None:
        super().__init__(name, priority, grains=0)
        self.action = action

    def on_before_render(self, event: BeforeRender) -> list[ContextGrain] | None:
        tree = event.tree
        if self.action == "edit_own":
            tree[2].content = "final"
            tree.append(ContextGrain("task.note"))
            return [ContextGrain("task.extra")]
        if self.action == "drop_foreign":
            del tree[1]
        elif self.action == "edit_foreign":
            tree[0].content = "be mean"
            tree[2].content = "own change, undone too"
        elif self.action == "junk":
            tree.append("not a grain")
        elif self.action == "raise":
            tree.clear()
            raise RuntimeError("half way")
        return None

    on_over_budget = on_before_render


async def test_tree_handler_may_edit_own_and_add() -> None:
    tree = _tree()
    out = await dispatcher(Editor("editor", "edit_own")).fire(BeforeRender(tree))
    assert [g.node_id for g in tree] == [
        "sys.instructions",
        "mem.note",
        "task.mine",
        "task.note",
        "task.extra",
    ]
    assert tree[2].content == "final" and tree[3].origin == "editor"
    assert [g.node_id for g in out.grains] == ["task.extra"] and out.faults == []


@pytest.mark.parametrize(
    ("action", "kind", "fragment"),
    [
        ("drop_foreign", "denied", "removed grain 'mem.note' of plugin 'memory'"),
        ("edit_foreign", "denied", "changed grain 'sys.instructions' of plugin 'core'"),
        ("junk", "invalid", "put str into the tree"),
        ("raise", "raised", "half way"),
    ],
)
async def test_tree_violations_are_undone(action: str, kind: str, fragment: str) -> None:
    tree = _tree()
    snapshot = [(g.node_id, g.content) for g in tree]
    out = await dispatcher(Editor("editor", action)).fire(OverBudget(tree, 100, 20))
    assert [(g.node_id, g.content) for g in tree] == snapshot
    [fault] = out.faults
    assert fault.kind == kind and fragment in fault.message


async def test_privileged_tree_edit_allowed_and_marked() -> None:
    class Boss(Editor):
        dangerous = True

    tree = _tree()
    out = await dispatcher(Boss("boss", "edit_foreign"), consent={"boss"}).fire(BeforeRender(tree))
    assert out.faults == [] and tree[0].content == "be mean"
    assert tree[0].meta["modified_by"] == ["boss"]


async def test_tree_handlers_run_sequentially_in_order() -> None:
    log: list[str] = []

    class Step(Simple):
        async def on_before_render(self, event: BeforeRender) -> None:
            log.append(f"{self.name}:start")
            await anyio.sleep(0.01 if self.name == "first" else 0)
            log.append(f"{self.name}:end")

    d = dispatcher(Step("second", priority=20), Step("first", priority=10))
    await d.fire(BeforeRender([]))
    assert log == ["first:start", "first:end", "second:start", "second:end"]


class Keywords(Simple):
    async def on_user_msg(self, event: UserMessage) -> None:
        await current_bus().emit("keywords.extracted", event.user_message.split())


class Docs(Simple):
    subscriptions: ClassVar = {"keywords.extracted": "on_keywords"}

    async def on_keywords(self, event: Any) -> list[ContextGrain]:
        meta = {"sender": event.sender}
        return [
            ContextGrain(f"rag.kw.{i}", content=w, meta=meta) for i, w in enumerate(event.payload)
        ]


async def test_custom_events_between_plugins_join_the_turn() -> None:
    d = dispatcher(Keywords("keywords", priority=10), Docs("docs", priority=30))
    out = await d.fire(UserMessage("s1", 0, "bm25 ranking"))
    assert [(g.node_id, g.origin, g.content) for g in out.grains] == [
        ("rag.kw.0", "docs", "bm25"),
        ("rag.kw.1", "docs", "ranking"),
    ]
    assert out.grains[0].meta["sender"] == "keywords"


async def test_failing_subscriber_is_attributed_to_its_plugin() -> None:
    class BadDocs(Docs):
        async def on_keywords(self, event: Any) -> list[ContextGrain]:
            raise KeyError("nope")

    d = dispatcher(Keywords("keywords"), BadDocs("docs"))
    out = await d.fire(UserMessage("s1", 0, "x"))
    assert [(f.plugin, f.hook, f.kind) for f in out.faults] == [
        ("docs", "bus:keywords.extracted", "raised")
    ]


async def test_event_loop_between_plugins_is_cut() -> None:
    class Echo(Simple):
        subscriptions: ClassVar = {"ping": "on_ping"}

        async def on_user_msg(self, event: UserMessage) -> None:
            await current_bus().emit("ping")

        async def on_ping(self, event: Any) -> None:
            await current_bus().emit("ping")

    out = await dispatcher(Echo("echo"), max_failures=100, timeout=5).fire(
        UserMessage("s1", 0, "x")
    )
    assert any("nested 8 deep" in f.message for f in out.faults)


async def test_engine_can_emit_and_subscribe() -> None:
    d = dispatcher(Docs("docs"))
    await d.collect(SCENE)  # wires subscriptions
    got: list[Any] = []
    d.bus.subscribe("keywords.extracted", got.append)
    assert await d.bus.emit("keywords.extracted", ["w"]) == 2
    out = await d.collect(SCENE)
    assert [g.node_id for g in out.grains] == ["task.docs.0", "rag.kw.0"]  # own hook first
    assert out.grains[1].meta["sender"] is None and got[0].payload == ["w"]


async def test_setup_and_teardown() -> None:
    class Lifecycle(Simple):
        def __init__(self, name: str, fail: bool) -> None:
            super().__init__(name)
            self.fail = fail
            self.engine: Any = None

        async def setup(self, engine: Any) -> None:
            if self.fail:
                raise OSError("no index")
            self.engine = engine

        async def teardown(self) -> None:
            if not self.fail:
                raise RuntimeError("close failed")

    good, bad = Lifecycle("good", False), Lifecycle("bad", True)
    reg = Registry()
    reg.register(good)
    reg.register(bad)
    faults = await reg.setup("ENGINE")
    assert good.engine == "ENGINE"
    assert [(f.plugin, f.hook, f.kind) for f in faults] == [("bad", "setup", "raised")]
    assert not reg.is_enabled("bad") and reg.is_enabled("good")
    assert await reg.setup("ENGINE") == []  # idempotent
    with pytest.warns(PluginWarning, match="plugin 'good' hook 'teardown' failed"):
        faults = await reg.teardown()
    assert [(f.plugin, f.severity) for f in faults] == [("good", "warning")]


def test_invalid_dispatcher_arguments() -> None:
    with pytest.raises(PluginError, match="timeout"):
        SessionDispatcher(Registry(), "s", timeout=0)
    with pytest.raises(PluginError, match="max_failures"):
        SessionDispatcher(Registry(), "s", max_failures=0)


async def test_concurrent_emitters_do_not_count_as_nesting() -> None:
    class Emitter(Simple):
        async def collect(self, scene: Any) -> list[ContextGrain]:
            await current_bus().emit("keywords.extracted", [self.name])
            await anyio.sleep(0.01)
            return []

    emitters = [Emitter(f"e{i}", priority=i) for i in range(12)]
    out = await dispatcher(*emitters, Docs("docs", priority=99)).collect(SCENE)
    assert out.faults == []
    bus_grains = [g.content for g in out.grains if g.node_id.startswith("rag.kw")]
    assert bus_grains == [f"e{i}" for i in range(12)]  # sender order, not completion order


async def test_bus_grains_during_tree_event_join_the_tree() -> None:
    class Announcer(Simple):
        async def on_over_budget(self, event: OverBudget) -> None:
            await current_bus().emit("keywords.extracted", ["compressed"])

    tree = _tree()
    out = await dispatcher(Announcer("announcer"), Docs("docs")).fire(OverBudget(tree, 10, 5))
    assert tree[-1].node_id == "rag.kw.0" and tree[-1].origin == "docs"
    assert [g.node_id for g in out.grains] == ["rag.kw.0"]
