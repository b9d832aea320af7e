"""The engine honors the prune options of its ladder: allow, deny, TTL and the turn limit.

The same code computes what ``prune_tool_results`` / ``limit_history_turns`` return for a
transcript, so a render and the library function agree on the same session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, FileStore, Session
from ctxengine.assemble import prune as prune_module
from ctxengine.assemble.guard import (
    PruneSettings,
    limit_history_turns,
    prune_tool_results,
    turn_starts,
)
from ctxengine.assemble.history import tool_result_node_id
from ctxengine.errors import ConfigError
from ctxengine.transcript import ToolResult, load
from offline_tiktoken import TRANSCRIPTS

pytestmark = pytest.mark.anyio

TOOLS = ("read_file", "grep", "bash", "read_file", "grep", "bash")
PLACEHOLDER = PruneSettings().placeholder


def _result_text(turn: int, tool: str) -> str:
    return "\n".join(f"{tool} turn {turn} line {n}: value {n * 7 + turn}" for n in range(160))


def _messages(tools: tuple[str, ...] = TOOLS) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    for turn, tool in enumerate(tools):
        call = f"call_{turn}"
        out += [
            {"role": "user", "content": f"Question number {turn}: please look it up."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": tool, "arguments": '{"q": "x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": _result_text(turn, tool)},
            {"role": "assistant", "content": f"Answer {turn}."},
        ]
    return out


async def _render(settings: PruneSettings, messages: list[dict[str, Any]] | None = None) -> Any:
    engine = ContextEngine("gpt-4o", Budget(total=100_000), prune=settings)
    async with engine.session("s") as s:
        s.extend(messages or _messages())
        return await s.render()


def _tool_contents(payload: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in payload["messages"] if m["role"] == "tool"}


#: Clear whatever may be pruned, except the last assistant turn's results.
CLEAR = {
    "soft_trim_ratio": 0.001,
    "hard_clear_ratio": 0.001,
    "min_prunable_chars": 0,
    "keep_last_assistants": 1,
}


async def test_deny_keeps_those_tools_and_clears_the_others() -> None:
    out = await _render(PruneSettings(deny=("READ_*",), **CLEAR))
    results = _tool_contents(out.payload)
    for turn, tool in enumerate(TOOLS):
        if tool == "read_file":
            assert results[f"call_{turn}"] == _result_text(turn, tool)
        else:
            assert results[f"call_{turn}"] == PLACEHOLDER, (turn, tool)
    cleared = {d.node_id for d in out.report if d.stage == "prune"}
    assert cleared == {
        f"act.tool_result.call_{t}" for t, tool in enumerate(TOOLS) if tool != "read_file"
    }
    assert all(d.status == "cleared" for d in out.report if d.stage == "prune")


async def test_allow_prunes_only_the_listed_tools() -> None:
    out = await _render(PruneSettings(allow=("grep",), **CLEAR))
    results = _tool_contents(out.payload)
    for turn, tool in enumerate(TOOLS):
        expected = PLACEHOLDER if tool == "grep" else _result_text(turn, tool)
        assert results[f"call_{turn}"] == expected, (turn, tool)


async def test_engine_and_prune_tool_results_clear_the_same_results() -> None:
    settings = PruneSettings(deny=("bash",), **CLEAR)
    out = await _render(settings)
    pruned, report = prune_tool_results(load(_messages()), 100_000, settings)
    expected = {
        r.call_id: r.content[0].text  # type: ignore[union-attr]
        for m in pruned.messages
        for r in m.tool_results
    }
    assert _tool_contents(out.payload) == expected
    pruned_calls = {f"act.tool_result.{c.call_id}" for c in report.changes}
    assert pruned_calls == {d.node_id for d in out.report if d.stage == "prune"}
    assert len(pruned_calls) == 4  # every result but the two bash ones


async def test_ttl_seconds_prunes_only_once_the_cache_expired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(prune_module, "clock", lambda: now[0])
    # The last two assistant messages (the last call and its answer) are protected.
    settings = PruneSettings(ttl_seconds=300, **{**CLEAR, "keep_last_assistants": 2})
    engine = ContextEngine("gpt-4o", Budget(total=100_000), prune=settings)
    async with engine.session("s") as s:
        s.extend(_messages()[:1])
        await s.user_message("Start.")
        await s.render()  # the first render writes the cache: nothing to prune yet
        s.extend(_messages()[1:])
        now[0] += 60  # the cache is warm: pruning now would throw the cached prefix away
        warm = _tool_contents((await s.render()).payload)
        now[0] += 400  # expired
        cold = await s.render()
        now[0] += 1  # warm again: what was pruned stays pruned
        again = _tool_contents((await s.render()).payload)
    assert warm["call_0"] == _result_text(0, "read_file")
    assert PLACEHOLDER not in warm.values()
    expired = _tool_contents(cold.payload)
    assert expired["call_0"] == PLACEHOLDER
    assert expired[f"call_{len(TOOLS) - 1}"] == _result_text(len(TOOLS) - 1, TOOLS[-1])
    assert again == expired


async def test_ttl_turns_expires_results_older_than_the_last_turns() -> None:
    settings = PruneSettings(ttl_turns=2, soft_trim_ratio=1.0, hard_clear_ratio=1.0)
    out = await _render(settings)
    results = _tool_contents(out.payload)
    n = len(TOOLS)
    for turn, tool in enumerate(TOOLS):
        expected = PLACEHOLDER if turn < n - 2 else _result_text(turn, tool)
        assert results[f"call_{turn}"] == expected, turn
    expired = [d for d in out.report if d.stage == "prune"]
    assert len(expired) == n - 2
    assert all(d.reason.startswith("expired") and d.tokens_after < d.tokens_before for d in expired)


async def test_ttl_turns_in_the_library_function() -> None:
    t = load(_messages())
    pruned, report = prune_tool_results(
        t, 100_000, PruneSettings(ttl_turns=1, soft_trim_ratio=1.0, hard_clear_ratio=1.0)
    )
    assert [c.action for c in report.changes] == ["expired"] * (len(TOOLS) - 1)
    last = pruned.messages[-2].tool_results[0]
    assert last.content == t.messages[-2].tool_results[0].content


async def test_max_turns_drops_history_before_the_last_user_turns() -> None:
    out = await _render(PruneSettings(max_turns=2))
    messages = out.payload["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == [
        "Question number 4: please look it up.",
        "Question number 5: please look it up.",
    ]
    assert messages[0]["role"] == "system" and "careful agent" in messages[0]["content"]
    assert set(_tool_contents(out.payload)) == {"call_4", "call_5"}
    dropped = [d for d in out.report if d.stage == "max_turns"]
    assert len(dropped) == 4 * 4  # four turns of four messages
    assert all(d.decision == "dropped" and d.tokens_before > 0 for d in dropped)
    assert "hist.1" in {d.node_id for d in dropped}


async def test_max_turns_matches_limit_history_turns() -> None:
    out = await _render(PruneSettings(max_turns=3))
    limited, report = limit_history_turns(load(_messages()), 3)
    expected = [m.text for m in limited.messages if m.role == "user"]
    assert [m["content"] for m in out.payload["messages"] if m["role"] == "user"] == expected
    assert report.changes[0].detail == "3 user turns (12 messages) dropped"


async def test_max_turns_holds_across_renders_and_new_turns() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=100_000), prune=PruneSettings(max_turns=1))
    async with engine.session("s") as s:
        s.extend(_messages())
        first = await s.render()
        await s.user_message("One more question.")
        second = await s.render()
    assert [m["content"] for m in first.payload["messages"] if m["role"] == "user"] == [
        "Question number 5: please look it up."
    ]
    assert [m["content"] for m in second.payload["messages"] if m["role"] == "user"] == [
        "One more question."
    ]
    assert not _tool_contents(second.payload)


def test_new_options_validate() -> None:
    with pytest.raises(ValueError, match="max_turns is 0"):
        PruneSettings(max_turns=0)
    with pytest.raises(ValueError, match="ttl_turns is -1"):
        PruneSettings(ttl_turns=-1)
    with pytest.raises(ValueError, match="ttl_seconds is -5"):
        PruneSettings(ttl_seconds=-5)
    assert not PruneSettings().in_render and PruneSettings(deny=("x",)).in_render


#: Every prune option the engine runs in its renders. The thresholds measure the history the
#: model is sent (a result compaction summarized counts as the placeholder): in these 300
#: messages at 32k the live results reach the default 50,000 prunable characters only now and
#: then, so the options that act by threshold ask for less, and the state holds prunes.
OFTEN = {"min_prunable_chars": 5_000}
EVERY_OPTION = {
    "allow": PruneSettings(allow=("*",), **OFTEN),
    "deny": PruneSettings(deny=("bash",), **OFTEN),
    "max_turns": PruneSettings(max_turns=3),
    "ttl_turns": PruneSettings(ttl_turns=2),
    "ttl_seconds": PruneSettings(ttl_seconds=300, **OFTEN),
}
#: What the prune options did, in the state's JSON (absent from states written before).
PRUNE_FIELDS = ("limited", "pruned", "pruned_results", "rendered_at")


@pytest.mark.parametrize("option", sorted(EVERY_OPTION))
async def test_a_restored_session_renders_the_live_payload_with_every_prune_option(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real session rendered before every assistant message (the prune options act render
    by render, and what they pruned stays pruned): the state's JSON round trip and a FileStore
    reopen both render what the live session renders next, byte for byte."""
    now = [1_000.0]
    monkeypatch.setattr(prune_module, "clock", lambda: now[0])
    messages = load(TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl").messages[:300]

    def engine(store: FileStore | None = None) -> ContextEngine:
        return ContextEngine(
            "gpt-4o", Budget(total=32_000), prune=EVERY_OPTION[option], store=store
        )

    live = engine(FileStore(tmp_path))
    async with live.session("p") as s:
        for i, m in enumerate(messages):
            if m.role == "assistant" and i:
                now[0] += 400 if i % 50 == 0 else 10  # the prompt cache expires now and then
                await s.render()
            await s.ingest([m])
        await s.render()
        data = json.loads(json.dumps(s.state.to_json()))
        expected = await s.render()
        await s.checkpoint()
        assert s.state.pruned and s.state.rendered_at == now[0]
        assert bool(s.state.limited) == (option == "max_turns")
    live.close()

    plain = engine()  # the JSON round trip, no store involved
    restored = Session.from_state(plain, plain.state_from_json(data))
    assert restored.state.to_json() == data
    out = await restored.render()
    assert (out.payload, out.tokens) == (expected.payload, expected.tokens)
    decisions = {(d.node_id, d.decision, d.status, d.tokens) for d in expected.report}
    assert {(d.node_id, d.decision, d.status, d.tokens) for d in out.report} == decisions

    reopened = engine(FileStore(tmp_path))
    back = await reopened.restore("p")
    assert (back.payload, back.tokens) == (expected.payload, expected.tokens)
    async with reopened.session("p") as s2:
        assert s2.state.pruned == s.state.pruned
        again = await s2.render()
    assert (again.payload, again.tokens) == (expected.payload, expected.tokens)
    reopened.close()


async def test_a_state_written_before_the_prune_fields_loads_with_nothing_pruned() -> None:
    """Snapshots written before the prune state was stored lack its fields: they still load,
    as they used to (nothing pruned yet, no previous render: the next render prunes afresh)."""
    settings = PruneSettings(deny=("bash",), **CLEAR)
    engine = ContextEngine("gpt-4o", Budget(total=100_000), prune=settings)
    async with engine.session("old") as s:
        s.extend(_messages())
        live = await s.render()
        data = s.state.to_json()
    assert data["pruned"] and data["rendered_at"] is not None
    old = {k: v for k, v in data.items() if k not in PRUNE_FIELDS}
    state = engine.state_from_json(old)
    assert (state.pruned, state.pruned_results, state.limited, state.rendered_at) == (
        {},
        {},
        {},
        None,
    )
    out = await Session.from_state(engine, state).render()
    assert out.payload == live.payload  # this session prunes the same afresh


# -- pruning across compactions ---------------------------------------------------------------

#: ``ttl_turns`` alone: the thresholds never trim, no assistant turn is protected.
TTL_ONLY = PruneSettings(
    ttl_turns=2, soft_trim_ratio=1.0, hard_clear_ratio=1.0, keep_last_assistants=0
)


async def _long_ttl_session(
    store: FileStore | None = None,
) -> tuple[ContextEngine, Session, list[tuple[int, int, Any]]]:
    """300 messages of the real pi session at 16k with ``ttl_turns=2``, rendered before every
    assistant message (compaction summarizes the older history many times over): the engine,
    the session and each render as (messages then, items compacted then, the render)."""
    messages = load(TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl").messages[:300]
    engine = ContextEngine("gpt-4o", Budget(total=16_000), prune=TTL_ONLY, store=store)
    s = Session.from_state(engine, engine.new_state("p"))
    renders = []
    for i, m in enumerate(messages):
        if m.role == "assistant" and i:
            renders.append((len(s.state.messages), len(s.state.compacted), await s.render()))
        await s.ingest([m])
    renders.append((len(s.state.messages), len(s.state.compacted), await s.render()))
    return engine, s, renders


async def test_ttl_turns_keeps_pruning_after_compactions() -> None:
    """Every render, before and after the compactions, sends each result older than the last
    two user turns as the placeholder, and results go on expiring after the first compaction
    (the prune plan indexes the full transcript, which compaction does not rewrite)."""
    _, s, renders = await _long_ttl_session()
    first = next(k for k, (_, compacted, _) in enumerate(renders) if compacted)
    after = [d for _, _, out in renders[first:] for d in out.report if d.stage == "prune"]
    assert first > 0 and sum(d.reason.startswith("expired") for d in after) >= 20
    messages = s.state.messages
    where = {r.call_id: i for i, m in enumerate(messages) for r in m.tool_results}
    old = 0
    for n, _, out in renders[first:]:
        starts = turn_starts(messages[:n])
        for m in out.payload["messages"]:
            index = where.get(m.get("tool_call_id", ""), -1)
            if len(starts) > 2 and starts[0] < index < starts[-2]:
                assert m["content"] == PLACEHOLDER, (n, m["tool_call_id"])
                old += 1
    assert old >= 50  # the payloads after the compactions held old results: all cleared


async def test_prune_records_of_summarized_history_leave_the_state(tmp_path: Path) -> None:
    """Results pruned and then summarized by compaction are never sent again: the state keeps
    no prune record of them (a snapshot of a long session held one for each result ever
    pruned, both its text and the whole tool result), and a restore, from the JSON or from
    the store, still renders the live payload."""
    engine, s, renders = await _long_ttl_session(FileStore(tmp_path))
    state = s.state
    pruned_ever = {d.node_id for _, _, out in renders for d in out.report if d.stage == "prune"}
    summarized = pruned_ever & state.compacted
    assert len(summarized) >= 20 and state.pruned  # pruned, then summarized; some still live
    assert set(state.pruned) == pruned_ever - state.compacted
    live = {(i.index, i.result) for i in state.items.values() if i.result >= 0}
    for index, k in state.pruned_results:
        blocks = state.messages[index].blocks
        assert (index, sum(isinstance(b, ToolResult) for b in blocks[:k])) in live
    assert len(state.pruned_results) == len(state.pruned)
    data = json.loads(json.dumps(state.to_json()))
    expected = await s.render()
    await s.checkpoint()
    await s.close()
    engine.close()

    plain = ContextEngine("gpt-4o", Budget(total=16_000), prune=TTL_ONLY)
    restored = Session.from_state(plain, plain.state_from_json(data))
    out = await restored.render()
    assert (out.payload, out.tokens) == (expected.payload, expected.tokens)
    reopened = ContextEngine(
        "gpt-4o", Budget(total=16_000), prune=TTL_ONLY, store=FileStore(tmp_path)
    )
    back = await reopened.restore("p")
    assert (back.payload, back.tokens) == (expected.payload, expected.tokens)
    reopened.close()

    # A state an earlier version wrote, with the records of the summarized results, loads
    # without them and renders the same.
    gone = sorted(summarized)[0]
    at = next(i for i, m in enumerate(state.messages) for r in m.tool_results
              if tool_result_node_id(r.call_id) == gone)  # fmt: skip
    k = next(k for k, b in enumerate(state.messages[at].blocks) if isinstance(b, ToolResult))
    cleared = {"type": "tool_result", "call_id": "x", "content": [], "is_error": False}
    old = dict(data, pruned={**data["pruned"], gone: PLACEHOLDER})
    old["pruned_results"] = sorted([*data["pruned_results"], [at, k, {**cleared, "name": None}]])
    again = plain.state_from_json(old)
    assert (again.pruned, again.pruned_results) == (state.pruned, state.pruned_results)
    out = await Session.from_state(plain, again).render()
    assert out.payload == expected.payload


async def test_a_prune_record_naming_no_tool_result_is_a_config_error() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=100_000), prune=TTL_ONLY)
    async with engine.session("s") as s:
        s.extend(_messages())
        await s.render()
        data = s.state.to_json()
    assert data["pruned_results"]
    result = data["pruned_results"][0][2]
    for index, k in ((len(_messages()) + 5, 0), (1, 0)):  # past the end; a system message
        bad = dict(data, pruned_results=[[index, k, result]])
        with pytest.raises(ConfigError, match=rf"pruned_results\[{index}, {k}\] names no tool"):
            engine.state_from_json(bad)
