"""ContextEngine / Session: lifespans, fusion, budgets, the manifest, on real transcripts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxengine import (
    Budget,
    BudgetError,
    ConfigError,
    ContextEngine,
    ContextGrain,
    CtxEngineError,
    EncodingError,
    InMemoryStore,
    count_messages,
    count_tokens,
    fit,
)
from ctxengine.assemble.guard import PruneSettings
from ctxengine.compaction import CompactionConfig
from ctxengine.errors import ConfigTypeError
from ctxengine.hygiene import validate
from ctxengine.transcript import Message, ToolCall, load
from offline_tiktoken import TRANSCRIPTS

pytestmark = pytest.mark.anyio

REAL = sorted(
    p
    for p in TRANSCRIPTS.rglob("*")
    if p.is_file() and p.suffix in {".jsonl", ".traj", ".md"} and p.name != "README.md"
)


def system_text(payload: dict) -> str:
    first = payload["messages"][0]
    assert first["role"] == "system"
    content = first["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


async def test_plain_grains_render_without_plugins() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("s1") as s:
        s.add(ContextGrain("sys.instructions", content="You are terse.", lifespan="session"))
        s.add(ContextGrain("rag.docs.1", content="Paris is in France."))
        await s.user_message("Where is Paris?")
        out = await s.render()
    assert "You are terse." in system_text(out.payload)
    assert "Paris is in France." in system_text(out.payload)
    assert out.payload["messages"][-1] == {"role": "user", "content": "Where is Paris?"}
    assert out.tokens == count_messages(out.payload["messages"], model="gpt-4o")
    decisions = {g.node_id: g.decision for g in out.report}
    assert decisions["sys.instructions"] == decisions["rag.docs.1"] == "kept"
    json.dumps(out.report.to_dict())


async def test_lifespans() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("a") as s:
        s.add(ContextGrain("sys.rules", content="RULE-SESSION", lifespan="session"))
        s.add(ContextGrain("task.goal", content="GOAL-TASK", lifespan="task"))
        s.add(ContextGrain("rag.once", content="ONLY-THIS-TURN"))
        await s.user_message("hi")
        first = system_text((await s.render()).payload)
        second = system_text((await s.render()).payload)
        s.end_task()
        third = system_text((await s.render()).payload)
    assert "ONLY-THIS-TURN" in first and "ONLY-THIS-TURN" not in second
    assert "GOAL-TASK" in second and "GOAL-TASK" not in third
    assert "RULE-SESSION" in third
    async with engine.session("b") as other:
        await other.user_message("hello")
        out = await other.render()
    assert out.payload["messages"][0]["role"] == "user"  # nothing leaked from session a


async def test_fusion_lower_priority_wins_and_loser_is_recorded() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("f") as s:
        s.add(ContextGrain("mem.profile", origin="a", content="LOSER", priority=50))
        s.add(ContextGrain("mem.profile", origin="b", content="WINNER", priority=10))
        await s.user_message("hi")
        out = await s.render()
    text = system_text(out.payload)
    assert "WINNER" in text and "LOSER" not in text
    winner = next(g for g in out.tree if g.node_id == "mem.profile")
    assert winner.meta["shadowed"] == [{"node_id": "mem.profile", "origin": "a", "priority": 50}]
    assert [g.decision for g in out.report if g.node_id == "mem.profile"] == ["kept", "shadowed"]


async def test_order_is_priority_then_emission() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("o") as s:
        for i, prio in enumerate([30, 10, 30, 20]):
            s.add(ContextGrain(f"mem.n{i}", content=f"N{i}", priority=prio))
        await s.user_message("hi")
        out = await s.render()
    text = system_text(out.payload)
    assert [text.index(f"N{i}") for i in (1, 3, 0, 2)] == sorted(
        text.index(f"N{i}") for i in range(4)
    )


async def test_protected_grains_over_budget_raise_naming_them() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=300))
    async with engine.session("p") as s:
        s.add(ContextGrain("sys.huge", content="word " * 2000, protected=True))
        await s.user_message("hi")
        with pytest.raises(BudgetError, match=r"sys\.huge"):
            await s.render()


def _tool_session(n: int) -> list[Message]:
    messages = [Message.system("You are a coding agent.")]
    for i in range(n):
        messages.append(Message.user(f"step {i}: please look at file_{i}.py"))
        call = ToolCall(f"call_{i}", "read_file", {"path": f"src/file_{i}.py"})
        messages.append(Message.assistant(f"Reading file_{i}.py", [call]))
        messages.append(Message.tool(f"call_{i}", f"line of file {i}\n" * (20 + i % 50)))
        messages.append(Message.assistant(f"Done with step {i}."))
    return messages


async def test_large_session_fits_keeps_pairs_and_latest_request() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3000))
    async with engine.session("big") as s:
        s.extend(_tool_session(60))
        await s.user_message("FINAL REQUEST: summarize everything")
        out = await s.render()
    assert out.tokens <= 3000
    assert out.payload["messages"][-1]["content"] == "FINAL REQUEST: summarize everything"
    assert validate(out.transcript, "openai") == []
    calls = {c["id"] for m in out.payload["messages"] for c in m.get("tool_calls", [])}
    results = {m["tool_call_id"] for m in out.payload["messages"] if m["role"] == "tool"}
    assert calls == results
    assert out.report.counts().get("dropped", 0) > 0


async def test_render_twice_is_identical() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=2500))
    async with engine.session("d") as s:
        s.extend(_tool_session(40))
        await s.user_message("again")
        a = await s.render()
        b = await s.render()
    assert a.payload == b.payload


async def test_on_over_budget_sees_the_tree() -> None:
    seen: list[int] = []

    class Watcher:
        name, version, priority, enabled = "watcher", "1.0.0", 10, True

        async def collect(self, scene: object) -> list[ContextGrain]:
            return []

        def on_over_budget(self, event: object) -> None:
            seen.append(len(event.tree))  # type: ignore[attr-defined]

    engine = ContextEngine("gpt-4o", Budget(total=2000), plugins=[Watcher()])
    async with engine.session("w") as s:
        s.extend(_tool_session(30))
        await s.user_message("go")
        await s.render()
    assert seen and seen[0] > 100


@pytest.mark.parametrize("budget", [2_000, 8_000, 32_000, 128_000])
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
async def test_real_transcripts_fit_every_budget(path: Path, budget: int) -> None:
    transcript = load(path)
    engine = ContextEngine("gpt-4o", Budget(total=budget))
    async with engine.session(path.stem) as s:
        s.extend(transcript)
        await s.user_message("LATEST: what is the status?")
        out = await s.render()
    assert out.tokens <= budget
    assert count_messages(out.payload["messages"], model="gpt-4o") == out.tokens
    assert out.payload["messages"][-1]["content"] == "LATEST: what is the status?"
    assert validate(out.transcript, "openai") == []
    reported = {g.node_id for g in out.report}
    assert set(s.state.items) <= reported


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    budget=st.integers(min_value=400, max_value=6000),
    steps=st.integers(min_value=0, max_value=40),
    extra=st.lists(st.tuples(st.integers(0, 200), st.booleans()), max_size=8),
)
def test_property_rendered_tokens_never_exceed_budget(
    budget: int, steps: int, extra: list[tuple[int, bool]]
) -> None:
    import anyio

    async def scenario() -> None:
        engine = ContextEngine("gpt-4o", Budget(total=budget))
        async with engine.session("h") as s:
            s.extend(_tool_session(steps))
            for i, (prio, protected) in enumerate(extra):
                s.add(ContextGrain(f"rag.x{i}", content=f"fact {i} " * 20, priority=prio))
                if protected:
                    s.add(ContextGrain(f"sys.p{i}", content=f"rule {i}", protected=True))
            await s.user_message("now")
            out = await s.render()
            assert out.tokens <= budget
            assert validate(out.transcript, "openai") == []
            text = (
                system_text(out.payload) if out.payload["messages"][0]["role"] == "system" else ""
            )
            for i, (_, protected) in enumerate(extra):
                if protected:
                    assert f"rule {i}" in text

    anyio.run(scenario)


async def test_guard_cuts_a_huge_tool_result_and_says_so() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=20_000))
    huge = "".join(f"line {i}: some output\n" for i in range(40_000)) + "ERROR: build failed\n"
    async with engine.session("g") as s:
        s.extend([Message.user("build it"), Message.assistant("", [ToolCall("c1", "bash", {})])])
        s.extend([Message.tool("c1", huge)])
        await s.user_message("what failed?")
        out = await s.render()
    tool = next(m for m in out.payload["messages"] if m["role"] == "tool")
    content = tool["content"] if isinstance(tool["content"], str) else tool["content"][0]["text"]
    assert len(content) < len(huge) and "ERROR: build failed" in content
    assert "offset" in content  # the notice tells the model how to read on
    decision = out.report.get("act.tool_result.c1")
    assert decision is not None and decision.stage == "guard"
    # the tokens it held before the cut (the whole output) and after (what was sent)
    whole, sent = count_tokens(huge, model="gpt-4o"), count_tokens(content, model="gpt-4o")
    assert decision.tokens_before - decision.tokens_after == whole - sent > 0
    assert s.messages[2].tool_results[0].text == huge  # the stored transcript is untouched


async def test_guard_splits_a_huge_grain_into_chunks() -> None:
    engine = ContextEngine("gpt-4.1", Budget(total=200_000))
    text = "\n\n".join(f"paragraph {i} " + "word " * 300 for i in range(200))
    async with engine.session("split") as s:
        s.add(ContextGrain("rag.manual", content=text))
        await s.user_message("read the manual")
        out = await s.render()
    chunks = [g for g in out.tree if g.node_id.startswith("rag.manual.")]
    assert len(chunks) >= 2 and all(len(g.text) <= 80_000 for g in chunks)
    assert "".join(g.text for g in chunks) == text
    parent = out.report.get("rag.manual")
    assert parent is not None and parent.stage == "guard" and parent.status == "split"


async def test_compressor_grain_replaces_the_raw_tool_result() -> None:
    from ctxengine.builtins import ToolResultCompressor

    engine = ContextEngine("gpt-4o", Budget(total=50_000), plugins=[ToolResultCompressor()])
    raw = "".join(f"row {i}\n" for i in range(3000))
    async with engine.session("c") as s:
        await s.user_message("list rows")
        await s.assistant_message("", [ToolCall("call_9", "query", {"sql": "select"})])
        await s.tool_result("call_9", raw, name="query")
        out = await s.render()
    tool = next(m for m in out.payload["messages"] if m["role"] == "tool")
    assert tool["tool_call_id"] == "call_9" and len(tool["content"]) < len(raw) / 3
    entries = [g for g in out.report if g.node_id == "act.tool_result.call_9"]
    assert {(g.origin, g.decision) for g in entries} == {
        ("tool_result_compressor", "kept"),
        ("transcript", "shadowed"),
    }


async def test_a_plugin_grain_with_a_bad_window_is_reported_not_fatal() -> None:
    class Sloppy:
        name, version, priority, enabled = "sloppy", "1.0.0", 10, True

        async def collect(self, scene: object) -> list[ContextGrain]:
            return [
                ContextGrain("rag.bad", content="x", window="nowhere"),
                ContextGrain("rag.good", content="GOOD"),
            ]

        def on_user_msg(self, event: object) -> list[ContextGrain]:
            return [ContextGrain("mem.bad", content="y", window="reserve")]

    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[Sloppy()])
    async with engine.session("s") as s:
        await s.user_message("hi")
        out = await s.render()
    assert "GOOD" in system_text(out.payload)
    faults = [(f["plugin"], f["kind"]) for f in out.report.faults]
    assert faults.count(("sloppy", "invalid")) == 2
    bad = out.report.get("rag.bad")
    assert bad is not None and (bad.decision, bad.stage) == ("dropped", "admission")
    with pytest.raises(BudgetError, match="nowhere"):
        s.add(ContextGrain("rag.x", content="x", window="nowhere"))


PROVIDER_MODELS = {
    "openai": "gpt-4o",
    "openai-responses": "gpt-4.1",
    "anthropic": "claude-sonnet-4-5",
    "gemini": "gemini-2.5-pro",
}


@pytest.mark.parametrize("provider", sorted(PROVIDER_MODELS))
@pytest.mark.parametrize(
    "path",
    [p for p in REAL if p.name in {"large-session.jsonl", "tool_heavy.jsonl", "output.jsonl"}],
    ids=lambda p: p.name,
)
async def test_every_provider_payload_is_valid_and_within_budget(path: Path, provider: str) -> None:
    from transcript.helpers import assert_sdk_valid

    engine = ContextEngine(PROVIDER_MODELS[provider], Budget(total=6_000))
    async with engine.session("p") as s:
        s.add(ContextGrain("sys.rules", content="Be brief.", lifespan="session"))
        s.extend(load(path))
        await s.user_message("LATEST request")
        out = await s.render(provider)
    assert out.tokens <= 6_000
    assert_sdk_valid(out.payload, provider)
    assert validate(out.transcript, provider) == []
    assert out.transcript[-1].text.endswith("LATEST request")


async def test_anthropic_cache_breakpoints_are_reported() -> None:
    engine = ContextEngine("claude-sonnet-4-5", Budget(total=20_000))
    async with engine.session("cache") as s:
        s.add(ContextGrain("sys.rules", content="Rules. " * 300, lifespan="session"))
        s.extend(_tool_session(5))
        await s.user_message("go on")
        out = await s.render("anthropic", cache_breakpoints=2)
    marked = [b for b in out.payload.get("system", []) if "cache_control" in b]
    marked += [b for m in out.payload["messages"] for b in m["content"] if "cache_control" in b]
    assert 1 <= len(marked) <= 2
    assert len(out.report.cache_breakpoints) == len(marked)
    assert all(bp["reason"] for bp in out.report.cache_breakpoints)


async def test_warm_renders_count_exactly_what_they_send() -> None:
    # Per-message counts are reused across renders; each total must still be the exact count.
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("warm") as s:
        s.extend(_tool_session(10))
        for i in range(12):
            s.add(ContextGrain("rag.note", content=f"note {i} " * (i * 7)))
            s.extend(_tool_session(1)[1:])
            await s.user_message(f"question {i}")
            out = await s.render()
            assert out.tokens == count_messages(out.payload["messages"], model="gpt-4o")
            assert out.tokens <= 3_000


async def test_turn_grains_survive_a_render_that_fails() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=400))
    async with engine.session("fail") as s:
        s.add(ContextGrain("rag.once", content="STILL-HERE"))
        big = ContextGrain("sys.huge", content="word " * 2000, protected=True, lifespan="session")
        s.add(big)
        await s.user_message("hi")
        with pytest.raises(BudgetError):
            await s.render()
        assert s.remove("sys.huge") and not s.remove("sys.huge")  # the caller fixes it
        out = await s.render()
    assert "STILL-HERE" in system_text(out.payload)


class _Emits:
    """A plugin whose ``collect`` returns copies of ``grains`` (fusion inside one render)."""

    version, enabled = "1.0.0", True

    def __init__(self, name: str, priority: int, grains: list[ContextGrain]) -> None:
        self.name, self.priority, self.grains = name, priority, grains

    async def collect(self, scene: object) -> list[ContextGrain]:
        return [ContextGrain(g.node_id, "", g.content, g.priority, g.lifespan) for g in self.grains]


@pytest.mark.parametrize("order", [(30, 50), (50, 30)])
async def test_session_add_fuses_by_priority_whatever_the_order(order: tuple[int, int]) -> None:
    """Issue 9, item 10: the more important grain wins, the loser stays reachable, the
    caller's grain and meta are never written to."""
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    metas = {p: {"source": f"s{p}", "shadowed": ["mine"]} for p in order}
    added = {
        p: ContextGrain(
            "mem.profile", content=f"PRIO-{p}", priority=p, lifespan="session", meta=metas[p]
        )
        for p in order
    }
    async with engine.session("f10") as s:
        for p in order:
            s.add(added[p])
        await s.user_message("hi")
        first = await s.render()
        out = await s.render()
    for rendered in (first, out):
        text = system_text(rendered.payload)
        assert "PRIO-30" in text and "PRIO-50" not in text
        decisions = [(d.decision, d.origin) for d in rendered.report if d.node_id == "mem.profile"]
        assert decisions == [("kept", "session"), ("shadowed", "session")]
    shadowed = next(d for d in out.report if d.decision == "shadowed")
    assert shadowed.grain.content == "PRIO-50" and "priority 30 < 50" in shadowed.reason
    winner = next(g for g in out.tree if g.node_id == "mem.profile")
    assert winner.meta["shadowed"][-1] == {
        "node_id": "mem.profile",
        "origin": "session",
        "priority": 50,
    }
    assert metas == {p: {"source": f"s{p}", "shadowed": ["mine"]} for p in order}
    assert all(g.origin == "" for g in added.values())  # not filled in on the caller's grain


async def test_session_add_and_plugin_grains_fuse_the_same_way() -> None:
    """Lower priority first, then the order they came in (one plugin's emission order; the
    order of ``add`` calls)."""
    grains = [
        ContextGrain("mem.x", content=c, priority=p)
        for c, p in (("P50", 50), ("P30-first", 30), ("P30-second", 30))
    ]
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[_Emits("emitter", 10, grains)])
    async with engine.session("plugin") as s:
        await s.user_message("hi")
        by_plugin = await s.render()
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("app") as s:
        for i, g in enumerate(grains):
            s.add(ContextGrain(g.node_id, f"app{i}", g.content, g.priority, "session"))
        await s.user_message("hi")
        by_app = await s.render()
    for out in (by_plugin, by_app):
        text = system_text(out.payload)
        assert "P30-first" in text and "P30-second" not in text and "P50" not in text
        losers = sorted(str(d.grain.content) for d in out.report if d.decision == "shadowed")
        assert losers == ["P30-second", "P50"]


async def test_session_add_of_the_same_origin_and_priority_is_a_new_version() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("v") as s:
        s.add(ContextGrain("task.plan", content="PLAN-1", lifespan="task"))
        s.add(ContextGrain("task.plan", content="PLAN-2", lifespan="task"))
        await s.user_message("hi")
        out = await s.render()
        s.remove("task.plan")
        gone = await s.render()
    assert "PLAN-2" in system_text(out.payload) and "PLAN-1" not in system_text(out.payload)
    assert [d.decision for d in out.report if d.node_id == "task.plan"] == ["kept"]
    assert "PLAN" not in str(gone.payload)


async def test_a_closed_session_refuses_to_render_instead_of_losing_its_summary() -> None:
    """Closing drops the session grains, the compaction summary among them, while the
    compacted messages stay out of the history: a render then would silently lack them."""
    engine = ContextEngine("gpt-4o", Budget(total=2_000))
    async with engine.session("closing") as session:
        for k in range(30):
            session.extend([Message.user(f"question {k}"), Message.assistant("x " * 200)])
            out = await session.render()
            if any(m.meta.get("ctxengine_summary") for m in out.transcript.messages):
                break
        else:
            raise AssertionError("the session never compacted")
    assert session.closed
    with pytest.raises(CtxEngineError, match=r"session 'closing' is closed; open it again"):
        await session.render()


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"plugin_timeout": "2"}, ConfigTypeError, "plugin_timeout is '2' (str); expected a pos"),
        ({"plugin_timeout": -1}, ConfigError, "plugin_timeout is -1; expected a positive"),
        ({"plugin_timeout": True}, ConfigTypeError, "plugin_timeout is True (bool)"),
        ({"max_failures": -1}, ConfigError, "max_failures is -1; expected an int >= 1"),
        ({"max_failures": 2.5}, ConfigTypeError, "max_failures is 2.5 (float)"),
        ({"weights": "abcd"}, ConfigTypeError, "weights is 'abcd' (str); expected four numbers"),
        ({"weights": (1, 2)}, ConfigError, "weights is (1, 2); expected four numbers"),
        ({"weights": (1, 2, 3, float("nan"))}, ConfigError, "weights is (1, 2, 3, nan)"),
        ({"summarizer": 5}, ConfigTypeError, "summarizer is 5 (int); expected an object"),
        ({"store": "dir"}, ConfigTypeError, "store is 'dir' (str); expected a Store"),
        ({"prune": {"max_turns": 1}}, ConfigTypeError, "prune is {'max_turns': 1} (dict)"),
        ({"compaction": 5}, ConfigTypeError, "compaction is 5 (int); expected a Compaction"),
        ({"plugins": 5}, ConfigTypeError, "plugins is 5 (int); expected an iterable"),
        ({"allow_dangerous": 5}, ConfigTypeError, "allow_dangerous is 5 (int); expected a bool"),
        ({"model": 123}, ConfigTypeError, "model is 123 (int); expected a model name"),
    ],
)
def test_a_bad_setting_fails_at_construction_naming_it(
    kwargs: dict, error: type[Exception], named: str
) -> None:
    # before, these were taken and failed at the first render (or never) with a raw error
    with pytest.raises(error) as info:
        ContextEngine(**{"budget": Budget(total=300), **kwargs})
    assert str(info.value).startswith(named), str(info.value)


def test_every_documented_kind_of_setting_is_still_accepted() -> None:
    engine = ContextEngine(
        "gpt-4o",
        300,
        plugins=[],
        summarizer=None,
        allow_dangerous={"a"},
        plugin_timeout=None,
        max_failures=1,
        weights=[1, 0.5, 0, 2],  # any four numbers; the core gets a tuple of floats
        prune=PruneSettings(),
        store=InMemoryStore(),
        compaction=CompactionConfig(),
    )
    assert engine.weights == (1.0, 0.5, 0.0, 2.0) and engine.plugin_timeout is None
    assert ContextEngine(plugin_timeout=0.5, allow_dangerous=True).plugin_timeout == 0.5


def test_fit_refuses_a_model_that_is_not_a_name() -> None:
    for model in (123, ["gpt-4o"]):  # a list was an unhashable cache key before the check
        with pytest.raises(ConfigTypeError, match=r"model is .*expected a model name"):
            fit([{"role": "user", "content": "hi"}], model=model, budget=100)  # type: ignore


@pytest.mark.parametrize("budget", [None, 4_000])
def test_an_unknown_model_is_refused_with_advice_the_engine_takes(budget: int | None) -> None:
    """The tokenizer's hint (``encoding="o200k_base"``) names an argument neither
    ``ContextEngine`` nor ``fit`` has, and without a budget the engine said only "pass
    Budget(total=N)", which then hit that hint. The advice given must build an engine."""
    hi = [{"role": "user", "content": "hi"}]
    for make in (
        lambda: ContextEngine("llama-3-70b", budget),
        lambda: fit(hi, model="llama-3-70b", budget=budget),
    ):
        with pytest.raises(EncodingError) as info:
            make()
        message = str(info.value)
        assert 'unknown model or encoding "llama-3-70b"' in message
        assert "encoding=" not in message and "budget" in message
        advised = re.findall(r'model="(\w+)"', message)
        assert advised
        for model in advised:  # followed (with a budget: the model's window is not known)
            assert ContextEngine(model, 4_000).tokens_total == 4_000
            assert fit(hi, model=model, budget=4_000).tokens <= 4_000


@pytest.mark.anyio
async def test_a_result_for_no_call_is_kept_with_a_warning_naming_the_nearest_id() -> None:
    """A typo in a call id ("call_l" for "call_1") was taken in silence: every render left the
    result out, and the call got a synthetic error result, which only the report said."""
    engine = ContextEngine("gpt-4o", Budget(total=4_000))
    async with engine.session("s") as s:
        await s.user_message("What is in config.toml?")
        s.extend([Message.assistant("Reading it.", [ToolCall("call_1", "read", {"path": "a"})])])
        with pytest.warns(
            RuntimeWarning,
            match=r"tool_result\('call_l'\) answers no tool call .*did you mean 'call_1'\?",
        ):
            await s.tool_result("call_l", "x = 1")
        assert s.messages[-1].tool_results[0].call_id == "call_l"  # kept, as given
        await s.tool_result("call_1", "x = 1")  # the call's own: no warning
        out = await s.render()
    sent = [m for m in out.payload["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in sent] == ["call_1"]
