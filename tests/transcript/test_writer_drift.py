"""Logs written by newer versions of the agents than the shared samples, built in each
writer's exact format: entries the importers did not handle and that lost content,
mis-paired a call with its result, or failed with an unclear error."""

from __future__ import annotations

import json
from typing import Any

from ctxengine.hygiene import validate
from ctxengine.transcript import ToolCall, load

from .test_variants import Write, engine_payloads_valid

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
