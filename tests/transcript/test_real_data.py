"""Every shared real transcript loads with the counts its README gives, renders to all four
providers, validates with zero problems and against the SDK types, before and after the
window guard at several window sizes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ctxengine.guard import limit_history_turns, prune_tool_results, truncate_tool_results
from ctxengine.hygiene import clean, validate
from ctxengine.transcript import Transcript, load, load_all, render

from .helpers import (
    AIDER,
    CC,
    CC_MAIN,
    OPENHANDS,
    PI,
    PROVIDERS,
    SWE_CTF,
    SWE_FC,
    SWE_FC_REPLACE,
    SWE_PYDICOM,
    all_files,
    assert_sdk_valid,
)


def _roles(t: Transcript) -> Counter[str]:
    return Counter(m.role for m in t)


def _calls(t: Transcript) -> int:
    return sum(len(m.tool_calls) for m in t)


def _results(t: Transcript) -> int:
    return sum(len(m.tool_results) for m in t)


def test_every_file_is_covered(real: dict[Path, list[Transcript]]) -> None:
    assert len(real) == 13  # 6 Claude Code, 1 pi, 4 SWE-agent, 1 OpenHands, 1 aider
    formats = Counter(t.source_format for ts in real.values() for t in ts)
    assert formats == {
        "claude-code": 6,
        "pi": 1,
        "swe-agent": 4,
        "openhands": 3,
        "aider": 3,
    }


@pytest.mark.parametrize(
    ("name", "api_messages", "calls", "errors", "parallel"),
    [
        ("ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl", 217, 242, 12, 18),
        ("ae4a77f8-aedd-4bc1-888f-c94edc91af04/subagents/agent-aac57f5.jsonl", 3, 12, 0, None),
        ("ae4a77f8-aedd-4bc1-888f-c94edc91af04/subagents/agent-acompact-946d2b.jsonl", 1, 0, 0, 0),
        ("fa812bfe-b295-4cca-9c2f-fdf01028cb46/subagents/agent-aa84377.jsonl", 9, 21, 0, None),
        ("subagent.jsonl", 12, 16, 0, None),
        ("tool_heavy.jsonl", 4, 6, 0, None),
    ],
)
def test_claude_code_counts(
    name: str, api_messages: int, calls: int, errors: int, parallel: int | None
) -> None:
    t = load(CC / name)
    assert t.source_format == "claude-code"
    assert _roles(t)["assistant"] == api_messages  # records merged back by message.id
    assert _calls(t) == calls
    assert _results(t) == calls  # every tool_use has exactly one tool_result
    assert sum(r.is_error for m in t for r in m.tool_results) == errors
    if parallel is not None:
        assert sum(len(m.tool_calls) >= 2 for m in t) == parallel
    _, report = clean(t, "anthropic")
    assert not report.of("synthetic_result") and not report.of("dropped_orphan")


def test_claude_code_main_session_tools_and_compaction() -> None:
    t = load(CC_MAIN)
    names = Counter(c.name for m in t for c in m.tool_calls)
    assert (names["Bash"], names["Edit"], names["Read"], names["Write"]) == (120, 67, 37, 6)
    assert (names["Glob"], names["WebFetch"]) == (5, 4)
    assert len(t.meta["compactions"]) == 1
    assert not any(m.meta.get("compact_summary") for m in t)  # full view: summary kept aside
    model = load(CC_MAIN, view="model")
    assert model[0].role == "user" and model[0].text.startswith("This session is being continued")
    assert 0 < _calls(model) < 242
    assert model.messages[-1] == t.messages[-1]


def test_pi_counts_and_repair() -> None:
    t = load(PI)
    assert t.source_format == "pi"
    assert len(t) == 914
    assert _roles(t) == {"user": 88, "assistant": 453, "tool": 373}
    assert _calls(t) == 391 and _results(t) == 373
    assert sum(r.is_error for m in t for r in m.tool_results) == 19
    assert sum(len(m.tool_calls) >= 2 for m in t) == 4
    names = Counter(c.name for m in t for c in m.tool_calls)
    assert names == {"bash": 192, "edit": 146, "read": 50, "write": 3}
    first = next(m for m in t if m.role == "assistant")
    assert first.stop_reason == "aborted" and first.blocks == ()
    assert first.meta["api"] == "openai-responses"
    answered = {r.call_id for m in t for r in m.tool_results}
    unanswered = Counter(m.stop_reason for m in t for c in m.tool_calls if c.id not in answered)
    assert unanswered == {"error": 16, "aborted": 2}
    for provider in PROVIDERS:
        fixed, report = clean(t, provider)
        assert len(report.of("dropped_call")) == 18  # failed turns get no synthetic result
        assert not report.of("synthetic_result") and not report.of("dropped_orphan")
        assert _calls(fixed) == _results(fixed) == 373


@pytest.mark.parametrize(
    ("path", "roles", "calls"),
    [
        (SWE_FC_REPLACE, {"system": 1, "user": 1, "assistant": 13, "tool": 13}, 13),
        (SWE_FC, {"system": 1, "user": 1, "assistant": 11, "tool": 11}, 11),
        (SWE_PYDICOM, {"system": 1, "user": 13, "assistant": 12}, 0),
        (SWE_CTF, {"system": 1, "user": 21, "assistant": 21}, 0),
    ],
)
def test_swe_agent_counts(path: Path, roles: dict[str, int], calls: int) -> None:
    t = load(path)
    assert t.source_format == "swe-agent"
    assert _roles(t) == roles
    assert _calls(t) == _results(t) == calls
    if calls == 0:  # text-action runs: the action is prose, kept in metadata
        assert all("action" in m.meta for m in t if m.role == "assistant")


def test_swe_agent_demo_message_and_tool_names() -> None:
    t = load(SWE_PYDICOM)
    assert t[1].meta["is_demo"] is True and len(t[1].text) > 19_000
    names = Counter(c.name for m in load(SWE_FC_REPLACE) for c in m.tool_calls)
    assert (names["bash"], names["open"], names["submit"]) == (6, 2, 1)


def test_swe_agent_replayed_ids_repeat_and_are_made_distinct() -> None:
    t = load(SWE_FC)
    ids = [c.id for m in t for c in m.tool_calls]
    assert len(set(ids)) < len(ids)  # the replay reuses call ids: a real collision case
    fixed, report = clean(t, "anthropic")
    new_ids = [c.id for m in fixed for c in m.tool_calls]
    assert len(set(new_ids)) == len(new_ids)
    assert report.of("renamed_id") and len(report.of("renamed_id")) < len(ids)
    assert not validate(fixed, "anthropic")


def test_openhands_instances() -> None:
    ts = load_all(OPENHANDS)
    assert [t.meta["instance_id"] for t in ts] == [
        "ponylang__ponyc-4595",
        "ponylang__ponyc-4593",
        "ponylang__ponyc-4588",
    ]
    assert load(OPENHANDS) == ts[0] and load(OPENHANDS, session=-1) == ts[2]
    assert [_calls(t) for t in ts] == [23, 33, 49]
    assert [_results(t) for t in ts] == [22, 32, 49]
    assert [sum(m.meta.get("kind") == "error" for m in t) for t in ts] == [0, 1, 1]
    synthetic = [len(clean(t, "openai")[1].of("synthetic_result")) for t in ts]
    assert synthetic == [1, 1, 0]  # the final `finish` call had no observation
    assert all(t[0].role == "system" and t[1].role == "user" for t in ts)


def test_aider_sessions() -> None:
    ts = load_all(AIDER)
    assert len(ts) == 3
    assert sum(t.meta["user_input_lines"] for t in ts) == 305
    assert sum(len(t.meta["tool_lines"]) for t in ts) == 114
    assert sum(t.meta["applied_edits"] for t in ts) == 3
    replies = [m for t in ts for m in t if m.role == "assistant"]
    assert sum("tokens" in m.meta for m in replies) == 14
    assert all(m.stop_reason is None for m in replies if "tokens" in m.meta)
    assert all(m.stop_reason == "aborted" for m in replies if "tokens" not in m.meta)
    assert [_roles(t)["user"] for t in ts] == [1, 6, 4]  # prompt answers are not user turns
    assert any(type(b).__name__ == "Thinking" for m in replies for b in m.blocks)
    assert _calls(ts[1]) == 0


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name[:40])
def test_renders_valid_everywhere(path: Path, real: dict[Path, list[Transcript]]) -> None:
    for t in real[path]:
        for provider in PROVIDERS:
            r = render(t, provider, cache_breakpoints=4)
            assert validate(r.transcript, provider) == []
            assert_sdk_valid(r.payload, provider)
            assert clean(r.transcript, provider)[0] is r.transcript  # idempotent


@pytest.mark.parametrize("window", [8_000, 32_000, 200_000])
def test_guard_keeps_everything_valid(window: int, real: dict[Path, list[Transcript]]) -> None:
    for ts in real.values():
        for t in ts:
            variants = [
                prune_tool_results(t, window)[0],
                truncate_tool_results(t, window)[0],
                limit_history_turns(t, 2)[0],
                limit_history_turns(prune_tool_results(t, window)[0], 5)[0],
            ]
            for v in variants:
                for provider in PROVIDERS:
                    r = render(v, provider)
                    assert validate(r.transcript, provider) == []
                    assert_sdk_valid(r.payload, provider)


def test_pruning_shrinks_the_big_sessions(real: dict[Path, list[Transcript]]) -> None:
    from ctxengine.guard import estimate_chars

    for path in (PI, CC_MAIN):
        t = real[path][0]
        pruned, report = prune_tool_results(t, 32_000)
        assert report.of("hard_clear") and estimate_chars(pruned) < estimate_chars(t) * 0.7
        assert len(pruned) == len(t)  # pruning edits results, never drops messages
