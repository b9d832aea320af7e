"""Logs written by newer versions of the agents than the shared samples, built in each
writer's exact format: entries the importers did not handle and that lost content,
mis-paired a call with its result, or failed with an unclear error."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxengine.errors import TranscriptError
from ctxengine.hygiene import validate
from ctxengine.transcript import Image, Text, ToolCall, load, load_all

from .test_variants import Write, engine_payloads_valid, jsonl

# -- Claude Code -------------------------------------------------------------------------------

_CC = {"sessionId": "s1", "version": "2.1.250", "cwd": "/w", "userType": "external",
       "isSidechain": False, "gitBranch": "main"}  # fmt: skip


def _cc_user(uuid: str, parent: str | None, content: object) -> dict[str, Any]:
    message = {"role": "user", "content": content}
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "message": message, **_CC}


def _cc_assistant(uuid: str, parent: str, mid: str, block: dict[str, Any]) -> dict[str, Any]:
    message = {"id": mid, "type": "message", "role": "assistant", "model": "claude-opus-4-5",
               "content": [block], "stop_reason": None}  # fmt: skip
    return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "message": message,
            "requestId": f"req_{mid}", **_CC}  # fmt: skip


def test_claude_code_records_copied_under_their_uuid_are_read_once(write: Write) -> None:
    """Claude Code 2.1.237 to 2.1.260, at a second ``/compact`` in one process, append again
    every message held since the history began, the copies keeping their ``uuid``,
    ``parentUuid`` and ``timestamp``, and parent the next row (a ``stop_hook_summary``) to the
    last copy (anthropics/claude-code issue #92089). Claude Code reads records into a map by
    uuid: a copy is the same record. Each copy was read as a record of its own: the turns came
    twice and an assistant message merged with its copy held its call twice (a duplicate call
    id, a result answering nothing)."""
    bash = {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "pytest"}}
    result = [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "1 failed"}]
    said = {"type": "text", "text": "The assertion in test_a is wrong."}
    held = [
        _cc_user("u1", None, "Fix the failing test."),
        _cc_assistant("a1", "u1", "msg_01", bash),
        _cc_user("u2", "a1", result),
        _cc_assistant("a2", "u2", "msg_02", said),
    ]
    hook = {"type": "system", "subtype": "stop_hook_summary", "uuid": "h1", "parentUuid": "a2",
            "hookCount": 1, "level": "suggestion", **_CC}  # fmt: skip
    after = [
        _cc_user("u3", "h1", "Fix it then."),
        _cc_assistant("a3", "u3", "msg_03", {"type": "text", "text": "Done."}),
    ]
    t = load(write("s.jsonl", jsonl(*held, *held, hook, *after)))
    once = load(write("once.jsonl", jsonl(*held, hook, *after)))
    assert [m.role for m in t] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert t.messages == once.messages
    assert [c.id for m in t for c in m.tool_calls] == ["toolu_01"]
    assert validate(t, "anthropic") == []
    engine_payloads_valid(t)


# -- OpenHands V0 ------------------------------------------------------------------------------


def _oh_event(i: int, source: str, **kw: Any) -> dict[str, Any]:
    """An event as OpenHands serializes it (``event_to_dict`` in OpenHands/OpenHands
    ``openhands/events/serialization/event.py``): id, timestamp, source, message, then the
    action's ``args`` or the observation's ``cause``, ``content`` and ``extras``."""
    return {"id": i, "timestamp": "2025-06-01T10:00:00", "source": source, "message": "", **kw}


def _oh_call(i: int, call_id: str, command: str) -> dict[str, Any]:
    """An agent's ``run`` action of a function-calling run, with its ``tool_call_metadata``."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "execute_bash", "arguments": json.dumps({"command": command})},
    }
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    tcm = {
        "function_name": "execute_bash",
        "tool_call_id": call_id,
        "model_response": {"id": f"resp{i}", "choices": [{"message": message}]},
        "total_calls_in_response": 1,
    }
    args = {"command": command, "is_input": False, "thought": "", "blocking": False}
    return _oh_event(i, "agent", action="run", args=args, tool_call_metadata=tcm)


def _oh_output(i: int, cause: int, content: str, tcm: dict[str, Any] | None) -> dict[str, Any]:
    extras = {"command": "", "metadata": {"exit_code": 0}, "hidden": False}
    kw: dict[str, Any] = {"tool_call_metadata": tcm} if tcm else {}
    kw.update(observation="run", cause=cause, content=content, extras=extras)
    return _oh_event(i, "agent", **kw)


def test_openhands_command_the_user_ran_is_user_text_not_an_agent_call(write: Write) -> None:
    """A command the user runs from the OpenHands UI is a ``run`` action with ``source``
    ``"user"`` and no ``tool_call_metadata``; its observation has none either. OpenHands'
    conversation memory sends them as user text (``_process_action``: ``User executed the
    command:\\n{command}``; ``_process_observation``: ``\\nObserved result of command executed
    by user:\\n...``, in OpenHands/OpenHands ``openhands/memory/conversation_memory.py``). They
    were read as a call of the agent (``event_<id>``) and its result: the model was shown
    calling a command it never called."""
    events = [
        _oh_event(0, "agent", action="system", args={"content": "You are OpenHands."}),
        _oh_event(1, "user", action="message", args={"content": "Fix the build."}),
        _oh_call(2, "toolu_01", "make"),
        _oh_output(3, 2, "error: x undefined", {"function_name": "execute_bash",
                                                 "tool_call_id": "toolu_01"}),
        _oh_event(4, "user", action="run", args={"command": "git stash", "is_input": False,
                                                 "thought": "", "blocking": False}),
        _oh_output(5, 4, "Saved working directory", None),
        _oh_event(6, "user", action="run", args={"command": "rm -rf /nope", "thought": ""}),
        _oh_event(7, "agent", observation="error", cause=6, content="Permission denied",
                  extras={}),
        _oh_event(8, "user", action="message", args={"content": "Try again now."}),
    ]  # fmt: skip
    t = load(write("o.json", json.dumps(events)))
    assert [m.role for m in t] == ["system", "user", "assistant", "tool", *["user"] * 5]
    assert [c for m in t for c in m.tool_calls] == [
        ToolCall("toolu_01", "execute_bash", {"command": "make"})
    ]
    assert t[4].text == "User executed the command:\ngit stash"
    assert t[5].text == "\nObserved result of command executed by user:\nSaved working directory"
    assert t[4].meta["kind"] == t[5].meta["kind"] == "observation"  # the harness's text
    # a command that could not run: its error observation is sent as errors are
    assert t[6].text == "User executed the command:\nrm -rf /nope"
    assert t[7].text == "Permission denied" and t[7].meta["kind"] == "error"
    assert t[-1].text == "Try again now." and "kind" not in t[-1].meta
    assert validate(t, "openai") == []
    engine_payloads_valid(t)


def _oh_condensation(i: int, summary: str, offset: int, **forgets: Any) -> dict[str, Any]:
    """A ``CondensationAction`` as OpenHands serializes it (``action: "condensation"``; its
    args ``forgotten_event_ids`` or the range ``forgotten_events_start_id`` to
    ``forgotten_events_end_id``, ``summary``, ``summary_offset``: OpenHands/OpenHands
    ``openhands/events/action/agent.py``)."""
    args = {
        "forgotten_event_ids": None,
        "forgotten_events_start_id": None,
        "forgotten_events_end_id": None,
        "summary": summary,
        "summary_offset": offset,
        **forgets,
    }
    return _oh_event(i, "agent", action="condensation", args=args)


def test_openhands_condensation_is_recorded_and_the_model_view_applies_it(write: Write) -> None:
    """A V0 run with a condenser (LLM summarizing, the default of newer OpenHands) stores
    ``condensation`` actions; ``View.from_events`` (OpenHands/OpenHands
    ``openhands/memory/view.py``) drops every event they forgot and puts the latest summary
    at its ``summary_offset``, which the model reads as user text. Each condensation was
    dropped as an event that is no context: its summary was lost, and ``view="model"`` gave
    the whole history."""
    tcm = {"function_name": "execute_bash"}
    events = [
        _oh_event(0, "agent", action="system", args={"content": "You are OpenHands."}),
        _oh_event(1, "user", action="message", args={"content": "Fix the build."}),
        _oh_call(2, "c1", "make"),
        _oh_output(3, 2, "error: x undefined", {**tcm, "tool_call_id": "c1"}),
        _oh_condensation(4, "Ran make; x is undefined.", 2, forgotten_events_start_id=2,
                         forgotten_events_end_id=3),
        _oh_call(5, "c2", "grep -rn x ."),
        _oh_output(6, 5, "a.c:3: x", {**tcm, "tool_call_id": "c2"}),
        _oh_condensation(7, "x is used in a.c:3, never defined.", 2,
                         forgotten_event_ids=[5, 6]),
        _oh_call(8, "c3", "make"),
        _oh_output(9, 8, "ok", {**tcm, "tool_call_id": "c3"}),
    ]  # fmt: skip
    path = write("o.json", json.dumps(events))
    full = load(path)
    assert [m.role for m in full] == ["system", "user", *["assistant", "tool"] * 3]
    assert full.meta["compactions"] == [
        {"summary": "Ran make; x is undefined.", "forgotten": 2, "event_id": 4, "index": 4},
        {"summary": "x is used in a.c:3, never defined.", "forgotten": 2, "event_id": 7,
         "index": 7},
    ]  # fmt: skip
    model = load(path, view="model")
    assert [m.role for m in model] == ["system", "user", "user", "assistant", "tool"]
    assert model[2].text == "x is used in a.c:3, never defined."  # the latest summary only
    assert model[2].meta["kind"] == "summary"
    assert model[3].tool_calls == (ToolCall("c3", "execute_bash", {"command": "make"}),)
    assert validate(model, "openai") == []
    engine_payloads_valid(model)


def test_openhands_ipython_output_keeps_its_images(write: Write) -> None:
    """An IPython cell's observation (``run_ipython``) carries the images the cell drew in
    ``image_urls`` (``IPythonRunCellObservation``, OpenHands/OpenHands
    ``openhands/events/observation/commands.py``; serialized under ``extras``), which the
    conversation memory sends with the result, empty ones left out (``_process_observation``
    in ``openhands/memory/conversation_memory.py``). The images were dropped."""
    png = "data:image/png;base64,iVBORw0KGgo="
    call = {
        "id": "toolu_01",
        "type": "function",
        "function": {"name": "execute_ipython_cell", "arguments": '{"code": "plot()"}'},
    }
    message = {"role": "assistant", "content": "Plotting.", "tool_calls": [call]}
    tcm = {
        "function_name": "execute_ipython_cell",
        "tool_call_id": "toolu_01",
        "model_response": {"id": "resp1", "choices": [{"message": message}]},
        "total_calls_in_response": 1,
    }
    events = [
        _oh_event(0, "user", action="message", args={"content": "Plot the data."}),
        _oh_event(1, "agent", action="run_ipython", args={"code": "plot()", "thought": ""},
                  tool_call_metadata=tcm),
        _oh_event(2, "agent", observation="run_ipython", cause=1, content="[figure]",
                  extras={"code": "plot()", "image_urls": [png, ""]},
                  tool_call_metadata={"function_name": "execute_ipython_cell",
                                      "tool_call_id": "toolu_01"}),
    ]  # fmt: skip
    t = load(write("o.json", json.dumps(events)))
    assert t[2].tool_results[0].content == (
        Text("[figure]"),
        Image("image/png", data="iVBORw0KGgo="),
    )
    engine_payloads_valid(t)
    events[2]["extras"]["image_urls"] = [7]
    with pytest.raises(TranscriptError, match=r"\[2\]\.extras\.image_urls\[0\]: image url is 7"):
        load(write("bad.json", json.dumps(events)))


# -- SWE-agent ---------------------------------------------------------------------------------


def _swe_attempt(task: str, command: str, output: str) -> dict[str, Any]:
    """One finished attempt as ``DefaultAgent.get_trajectory_data`` saves it (SWE-agent/SWE-agent
    ``sweagent/agent/agents.py``): ``trajectory``, ``history``, ``info``, ``replay_config``,
    ``environment``; a function-calling history (``tool_calls``, ``tool_call_ids``)."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
    }
    history = [
        {"role": "system", "content": "You are a helpful assistant.", "agent": "main",
         "message_type": "system_prompt"},
        {"role": "user", "content": task, "agent": "main", "message_type": "observation"},
        {"role": "assistant", "content": "Let me look.", "thought": "Let me look.",
         "action": command, "agent": "main", "tool_calls": [call], "message_type": "action"},
        {"role": "tool", "content": output, "agent": "main", "message_type": "observation",
         "tool_call_ids": ["call_1"]},
    ]  # fmt: skip
    step = {"action": command, "observation": output, "response": "Let me look.",
            "thought": "Let me look.", "execution_time": 0.1, "state": {}, "query": [],
            "extra_info": {}}  # fmt: skip
    info = {"exit_status": "submitted", "submission": "diff"}
    return {"trajectory": [step], "history": history, "info": info, "replay_config": None,
            "environment": "main"}  # fmt: skip


def test_swe_agent_retry_trajectory_of_attempts_loads_each_attempt(write: Write) -> None:
    """SWE-agent's ``RetryAgent`` saves ``{"attempts": [...]}`` after every step
    (``save_trajectory(choose=False)`` in ``RetryAgent.run``, SWE-agent/SWE-agent
    ``sweagent/agent/agents.py``) and merges the best attempt in only when the run ends. A
    trajectory read mid-run, or left by a stopped run, holds the finished attempts only: it was
    a TranscriptError about a missing ``history``, every attempt's conversation lost."""
    first = _swe_attempt("Fix the bug in a.py", "cat a.py", "x = 1")
    second = _swe_attempt("Fix the bug in a.py", "pytest", "1 failed")
    path = write("inst.traj", json.dumps({"attempts": [first, second]}, indent=2))
    items = load_all(path)
    assert [t.meta["attempt"] for t in items] == [0, 1]
    for t, command, output in zip(
        items, ("cat a.py", "pytest"), ("x = 1", "1 failed"), strict=True
    ):
        assert t.source_format == "swe-agent"
        assert [m.role for m in t] == ["system", "user", "assistant", "tool"]
        assert t[2].tool_calls == (ToolCall("call_1", "bash", {"command": command}),)
        assert t[3].tool_results[0].call_id == "call_1"
        assert t[3].tool_results[0].content == (Text(output),)
        assert t.meta["info"] == first["info"]
    assert load(path).messages == items[0].messages
    assert load(path, session=-1).messages == items[1].messages
    assert load({"attempts": [first, second]}).messages == items[0].messages  # dict: detected
    engine_payloads_valid(items[1])


def test_swe_agent_retry_trajectory_without_a_finished_attempt_says_so(write: Write) -> None:
    """While the first attempt runs, the retry agent's file holds ``{"attempts": []}``: the
    error names the value and where the running attempt writes its own trajectory."""
    path = write("inst.traj", json.dumps({"attempts": []}))
    with pytest.raises(TranscriptError, match=r"inst\.traj\.attempts: attempts is \[\]; "
                       r"expected at least one finished attempt .*attempt_<n>/"):  # fmt: skip
        load(path)


def test_swe_agent_retry_trajectory_with_its_choice_loads_the_chosen_attempt(
    write: Write,
) -> None:
    """When the run ends the best attempt is merged in (``data |= attempts[best]``): the file
    loads as that attempt's trajectory, as before."""
    first = _swe_attempt("Fix a.py", "ls", "a.py")
    best = _swe_attempt("Fix a.py", "pytest", "ok")
    data = {"attempts": [first, best], **best}
    data["info"] = {**best["info"], "best_attempt_idx": 1}
    (t,) = load_all(write("inst.traj", json.dumps(data)))
    assert t[3].tool_results[0].content == (Text("ok"),) and t.meta["info"]["best_attempt_idx"] == 1
