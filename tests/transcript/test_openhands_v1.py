"""OpenHands V1 (software-agent SDK) event streams: every shape they are saved in loads.

The events are written here from the SDK's event schema (``kind`` tags, ``llm_message``,
``tool_call``, ``llm_response_id`` ...); before V1 support, detection said "cannot detect" and
``format="openhands"`` failed on the first ``MessageEvent``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxengine.errors import TranscriptError
from ctxengine.transcript import Image, Text, Thinking, ToolCall, load

from .test_variants import Write, engine_payloads_valid, jsonl


def ev(kind: str, eid: str, source: str, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "id": eid, "timestamp": "2025-11-01T10:00:00", "source": source, **kw}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def msg(eid: str, role: str, *parts: dict[str, Any], **kw: Any) -> dict[str, Any]:
    source = "user" if role == "user" else "agent"
    return ev("MessageEvent", eid, source, llm_message={"role": role, "content": list(parts)}, **kw)


def act(eid: str, call_id: str, name: str, args: dict[str, Any], rid: str, **kw: Any) -> dict:
    call = {"id": call_id, "name": name, "arguments": json.dumps(args), "origin": "completion"}
    kw.setdefault("thought", [])
    kind = "".join(w.title() for w in name.split("_")) + "Action"
    kw.setdefault("action", {"kind": kind, **args})
    return ev(
        "ActionEvent",
        eid,
        "agent",
        tool_name=name,
        tool_call_id=call_id,
        tool_call=call,
        llm_response_id=rid,
        **kw,
    )


def obs(eid: str, call_id: str, name: str, action_id: str, body: str, error: bool = False) -> dict:
    observation = {"kind": "TerminalObservation", "content": [text(body)], "is_error": error}
    return ev(
        "ObservationEvent",
        eid,
        "environment",
        tool_name=name,
        tool_call_id=call_id,
        action_id=action_id,
        observation=observation,
    )


def session() -> list[dict[str, Any]]:
    """A session with a parallel pair of calls, an error, a rejection and state noise."""
    return [
        ev(
            "SystemPromptEvent",
            "s0",
            "agent",
            system_prompt=text("You are a coding agent."),
            tools=[{"name": "terminal"}, {"name": "file_editor"}],
        ),
        msg("u1", "user", text("What is in /w?")),
        ev("ConversationStateUpdateEvent", "c1", "environment", key="status", value="running"),
        act("a1", "toolu_1", "terminal", {"command": "ls /w"}, "r1", thought=[text("Look.")]),
        act("a2", "toolu_2", "file_editor", {"command": "view", "path": "/w/a"}, "r1"),
        obs("o1", "toolu_1", "terminal", "a1", "a\nb"),
        ev(
            "AgentErrorEvent",
            "e1",
            "agent",
            tool_name="file_editor",
            tool_call_id="toolu_2",
            error="/w/a is a directory",
        ),
        act("a3", "toolu_3", "terminal", {"command": "rm -r /w"}, "r2", action=None),
        ev(
            "UserRejectObservation",
            "j1",
            "user",
            tool_name="terminal",
            tool_call_id="toolu_3",
            action_id="a3",
            rejection_reason="not that",
        ),
        msg("m2", "assistant", text("It holds a and b."), llm_response_id="r3"),
    ]


def check_session(t: Any) -> None:
    assert t.source_format == "openhands"
    assert [m.role for m in t] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert t[0].text == "You are a coding agent." and t[0].meta["tools"] == [
        "terminal",
        "file_editor",
    ]
    assert t[2].blocks == (
        Text("Look."),
        ToolCall("toolu_1", "terminal", {"command": "ls /w"}),
        ToolCall("toolu_2", "file_editor", {"command": "view", "path": "/w/a"}),
    )
    assert t[2].id == "r1"
    r1, r2, r3 = t[3].tool_results[0], t[4].tool_results[0], t[6].tool_results[0]
    assert (r1.call_id, r1.content, r1.is_error, r1.name) == (
        "toolu_1",
        (Text("a\nb"),),
        False,
        "terminal",
    )
    assert (r2.call_id, r2.is_error, r2.text) == ("toolu_2", True, "/w/a is a directory")
    assert t[5].tool_calls == (ToolCall("toolu_3", "terminal", {"command": "rm -r /w"}),)
    assert (r3.call_id, r3.is_error, r3.text) == ("toolu_3", True, "Action rejected: not that")
    assert t[7].text == "It holds a and b."
    assert t.meta["skipped_events"] == 1 and t.meta["compactions"] == []


def test_v1_json_list_is_detected_and_loads(write: Write) -> None:
    t = load(write("events.json", json.dumps(session())))
    check_session(t)
    engine_payloads_valid(t)


def test_v1_explicit_format_jsonl_and_in_memory_list(write: Write) -> None:
    check_session(load(write("events.jsonl", jsonl(*session())), format="openhands"))
    check_session(load(write("events2.jsonl", jsonl(*session()))))
    check_session(load(session()))
    check_session(load({"items": session(), "next_page_id": None}))


def test_v1_conversation_folder_reads_event_files_in_index_order(tmp_path: Path) -> None:
    conv = tmp_path / "0a1b2c3d"
    (conv / "events").mkdir(parents=True)
    (conv / "base_state.json").write_text("{}", encoding="utf-8")
    events = session()
    for i in reversed(range(len(events))):  # written out of order; names give the order
        eid = f"{i:08x}-0000-4000-8000-000000000000"
        (conv / "events" / f"event-{i:05d}-{eid}.json").write_text(json.dumps(events[i]))
    (conv / "events" / ".eventlog.lock").write_text("")
    check_session(load(conv))
    check_session(load(conv / "events", format="openhands"))
    with pytest.raises(TranscriptError, match="is a folder"):
        load(tmp_path)
    # the command line replays such a folder too
    from ctxengine.cli import main

    out = tmp_path / "replay.json"
    assert main(["replay", str(conv), "--budget", "4000", "--json", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["messages"]


def test_v1_history_of_a_benchmark_output_line(write: Write) -> None:
    row = {"instance_id": "x__y-1", "history": session(), "error": None}
    t = load(write("output.jsonl", jsonl(row)))
    check_session(t)
    assert t.meta["instance_id"] == "x__y-1"


def test_v1_thinking_images_and_observation_errors() -> None:
    png = "iVBORw0KGgo="
    events = [
        msg(
            "u1",
            "user",
            text("Look at this"),
            {"type": "image", "image_urls": [f"data:image/png;base64,{png}"]},
            extended_content=[text("<skill>be brief</skill>")],
        ),
        act(
            "a1",
            "c1",
            "terminal",
            {"command": "false"},
            "r1",
            thinking_blocks=[{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
            reasoning_content="hmm",
        ),
        obs("o1", "c1", "terminal", "a1", "exit 1", error=True),
        act("a2", "c2", "terminal", {"command": "true"}, "r2", reasoning_content="plain"),
        obs("o2", "c2", "terminal", "a2", "ok"),
    ]
    t = load(events)
    assert t[0].blocks == (
        Text("Look at this"),
        Image("image/png", data=png),
        Text("<skill>be brief</skill>"),
    )
    assert t[1].blocks[0] == Thinking("hmm", "sig")
    assert len([b for b in t[1].blocks if isinstance(b, Thinking)]) == 1
    assert t[2].tool_results[0].is_error and t[2].tool_results[0].text == "exit 1"
    assert t[3].blocks[0] == Thinking("plain")
    engine_payloads_valid(t)


def test_v1_parallel_calls_join_even_with_a_result_between() -> None:
    events = [
        msg("u1", "user", text("go")),
        act("a1", "c1", "terminal", {"command": "a"}, "r1"),
        obs("o1", "c1", "terminal", "a1", "A"),
        act("a2", "c2", "terminal", {"command": "b"}, "r1"),
        obs("o2", "c2", "terminal", "a2", "B"),
    ]
    t = load(events)
    assert [m.role for m in t] == ["user", "assistant", "tool", "tool"]
    assert [c.id for c in t[1].tool_calls] == ["c1", "c2"]
    assert [m.tool_results[0].call_id for m in t[2:]] == ["c1", "c2"]


def test_v1_agent_error_without_its_call_is_user_text() -> None:
    events = [
        msg("u1", "user", text("go")),
        ev("AgentErrorEvent", "e1", "agent", tool_name="x", tool_call_id="gone", error="boom"),
    ]
    t = load(events)
    assert [m.role for m in t] == ["user", "user"]
    assert t[1].text == "boom" and t[1].meta["kind"] == "error"


def condensed() -> list[dict[str, Any]]:
    return [
        ev("SystemPromptEvent", "s0", "agent", system_prompt=text("sys"), tools=[]),
        msg("u1", "user", text("task")),
        act("a1", "c1", "terminal", {"command": "one"}, "r1"),
        obs("o1", "c1", "terminal", "a1", "1"),
        act("a2", "c2", "terminal", {"command": "two"}, "r2"),
        obs("o2", "c2", "terminal", "a2", "2"),
        ev("CondensationRequest", "q1", "environment"),
        ev(
            "Condensation",
            "k1",
            "environment",
            forgotten_event_ids=["a1", "o1"],
            summary="Ran one; it printed 1.",
            summary_offset=2,
            llm_response_id="r9",
        ),
        act("a3", "c3", "terminal", {"command": "three"}, "r3"),
        obs("o3", "c3", "terminal", "a3", "3"),
    ]


def test_v1_condensation_full_keeps_everything_model_applies_it() -> None:
    full = load(condensed())
    assert [c.id for m in full for c in m.tool_calls] == ["c1", "c2", "c3"]
    assert full.meta["compactions"] == [
        {"summary": "Ran one; it printed 1.", "forgotten": 2, "event_id": "k1", "index": 7}
    ]
    assert full.meta["skipped_events"] == 2  # the request and the condensation

    model = load(condensed(), view="model")
    assert [m.role for m in model] == [
        "system",
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert model[2].text == "Ran one; it printed 1." and model[2].meta["kind"] == "summary"
    assert [c.id for m in model for c in m.tool_calls] == ["c2", "c3"]
    engine_payloads_valid(model)


def test_v1_unknown_content_part_is_skipped_and_counted() -> None:
    events = [msg("u1", "user", text("hi"), {"type": "audio", "data": "..."})]
    t = load(events)
    assert t[0].blocks == (Text("hi"),)
    assert t.meta["skipped_blocks"] == {"audio": 1}


def test_v1_malformed_known_events_name_the_event() -> None:
    bad = act("a1", "", "terminal", {}, "r1")
    bad["tool_call"]["id"] = ""
    with pytest.raises(TranscriptError, match=r"\[1\]: tool call id is ''"):
        load([msg("u1", "user", text("go")), bad])
    no_msg = ev("MessageEvent", "m1", "user")
    with pytest.raises(TranscriptError, match=r"\[0\]: key 'llm_message' is 'missing'"):
        load([no_msg], format="openhands")
