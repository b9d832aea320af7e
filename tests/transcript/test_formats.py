"""Import details of each format, on small hand-written inputs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxengine.errors import TranscriptError
from ctxengine.hygiene import validate
from ctxengine.transcript import (
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
    detect_format,
    load,
    load_all,
    render,
)

from .helpers import AIDER, CC_MAIN, OPENHANDS, PI, assert_sdk_valid

Write = Callable[[str, str], Path]


def jsonl(*rows: dict[str, Any]) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


# -- OpenAI Chat -------------------------------------------------------------------------------


def test_openai_legacy_function_call_pairs_with_function_message() -> None:
    t = load(
        [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "wx", "arguments": '{"c": "Oslo"}'},
            },
            {"role": "function", "name": "wx", "content": "rain"},
        ]
    )
    assert t.source_format == "openai"
    assert t[2].tool_calls == (ToolCall("call_2", "wx", {"c": "Oslo"}),)
    assert t[3].tool_results == (ToolResult("call_2", (Text("rain"),), name="wx"),)
    out = t.to("openai")["messages"]
    assert out[0]["role"] == "developer"
    assert out[2]["tool_calls"][0]["id"] == "call_2" and out[3]["role"] == "tool"


def test_openai_parts_images_and_unparsable_arguments() -> None:
    t = load(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "https://x.test/a.gif"}},
                ],
            },
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{oops"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
        ]
    )
    assert t[0].blocks == (
        Text("look"),
        Image("image/png", data="AAAA"),
        Image("image/gif", url="https://x.test/a.gif"),
    )
    assert t[1].tool_calls[0].arguments == "{oops"  # not a JSON object: kept as the string
    assert t.to("openai")["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{oops"
    assert t.to("anthropic")["messages"][1]["content"][0]["input"] == {"arguments": "{oops"}


def test_openai_refusal_field_is_text_like_a_refusal_part() -> None:
    """The SDK puts a refusal in the message's ``refusal`` field with ``content`` None; it is
    the assistant's reply, so it must survive import -> export -> import."""
    refused = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    src = [{"role": "user", "content": "pick a lock?"}, refused, {"role": "user", "content": "ok"}]
    t = load(src, format="openai")
    as_part = [{"type": "refusal", "refusal": "I can't help with that."}]
    assert t[1].blocks == (Text("I can't help with that."),)
    assert t[1] == load([src[0], {"role": "assistant", "content": as_part}], format="openai")[1]
    again = load(t.to("openai"), format="openai")
    assert [m.blocks for m in again] == [m.blocks for m in t]
    assert load([{**refused, "refusal": None}], format="openai")[0].blocks == ()


def test_openai_refusal_of_the_wrong_kind_is_an_error() -> None:
    bad = [{"role": "assistant", "content": None, "refusal": ["no"]}]
    with pytest.raises(
        TranscriptError, match=r"\[0\]\.refusal: refusal is \['no'\]; expected a str"
    ):
        load(bad, format="openai")


# -- OpenAI Responses --------------------------------------------------------------------------


def test_responses_items_group_into_turns_and_reasoning_survives() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "plan"}],
        "encrypted_content": "ENC",
    }
    payload = {
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            reasoning,
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "calling"}],
            },
            {"type": "function_call", "call_id": "call_a", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "x.py"},
        ],
    }
    t = load(payload)
    assert t.source_format == "openai-responses"
    assert [m.role for m in t] == ["system", "user", "assistant", "tool"]
    thinking = t[2].blocks[0]
    assert isinstance(thinking, Thinking) and thinking.text == "plan"
    out = t.to("openai-responses")
    assert out["instructions"] == "be brief"
    assert out["input"][1] == reasoning  # sent back whole
    assert "reasoning" not in json.dumps(t.to("anthropic"))  # never sent to another provider
    assert load({"input": "just text"})[0] == Message.user("just text")


def test_responses_reasoning_is_not_sent_without_the_item_it_led_to() -> None:
    """The Responses API rejects a reasoning item that no item of its turn follows (400 "...of
    type 'reasoning' was provided without its required following item"): a turn interrupted
    after its reasoning, or whose calls hygiene removed, sends no reasoning."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"}
    later = {**reasoning, "id": "rs_2"}
    user = {"type": "message", "role": "user", "content": "hi"}
    call = {"type": "function_call", "call_id": "call_a", "name": "ls", "arguments": "{}"}
    cut_short = load({"input": [user, reasoning, user]})
    aborted = Transcript(
        (
            Message.user("hi"),
            dataclasses.replace(load({"input": [user, reasoning, call]})[1], stop_reason="aborted"),
            Message.user("again"),
        ),
        source_format="openai-responses",
    )
    for t in (cut_short, aborted, load({"input": [user, reasoning]})):
        out = render(t, "openai-responses")
        assert "reasoning" not in json.dumps(out.payload), out.payload
        assert all(m.role != "assistant" for m in out.transcript)  # left empty: dropped
        assert validate(out.transcript, "openai-responses") == []
        assert_sdk_valid(out.payload, "openai-responses")
    # reasoning before its message or call is sent; only what trails the turn is left out
    t = load({"input": [user, reasoning, call, later]})
    items = t.to("openai-responses")["input"]
    assert [i["type"] for i in items] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert items[1] == reasoning


# -- Anthropic ---------------------------------------------------------------------------------


def test_anthropic_user_turn_with_results_and_text_splits_and_merges_back() -> None:
    payload = {
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "SIG"},
                    {"type": "redacted_thinking", "data": "RED"},
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": 1}},
                    {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"p": 2}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "QQ==",
                                },
                            }
                        ],
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
    }
    t = load(payload)
    assert [m.role for m in t] == ["system", "user", "assistant", "tool", "user"]
    assert t[2].blocks[:2] == (Thinking("hmm", "SIG"), Thinking("", "RED", redacted=True))
    assert t[3].tool_results[1] == ToolResult(
        "toolu_2", (Image("image/png", data="QQ=="),), True, "read"
    )
    out = t.to("anthropic")
    assert out["messages"][2] == payload["messages"][2]  # results and text share one user turn
    assert out["messages"][1] == payload["messages"][1] and out["system"] == payload["system"]
    assert load(out) == t


def test_anthropic_sdk_response_object_loads() -> None:
    from anthropic.types import Message as AnthropicMessage

    msg = AnthropicMessage.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    t = load([{"role": "user", "content": "hi"}, msg])
    assert t.source_format == "anthropic" and t[1] == Message.assistant("hello")


# -- Gemini ------------------------------------------------------------------------------------


def test_gemini_ids_signatures_and_responses() -> None:
    payload = {
        "system_instruction": {"parts": [{"text": "sys"}]},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "hi"},
                    {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/"}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"text": "thinking...", "thought": True},
                    {
                        "functionCall": {"name": "ls", "args": {"d": "."}},
                        "thoughtSignature": "U0lH",
                    },
                    {"functionCall": {"name": "ls", "args": {"d": "/"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "ls", "response": {"output": "a"}}},
                    {"functionResponse": {"name": "ls", "response": {"error": "denied"}}},
                ],
            },
        ],
    }
    t = load(payload)
    assert t.source_format == "gemini"
    calls = t[2].tool_calls
    assert [c.id for c in calls] == ["call_1_1", "call_1_2"]  # generated, matched by name in order
    assert t[2].blocks[:2] == (Thinking("thinking..."), Thinking("", "U0lH"))
    assert t[3].tool_results == (
        ToolResult("call_1_1", (Text("a"),), False, "ls"),
        ToolResult("call_1_2", (Text("denied"),), True, "ls"),
    )
    parts = t.to("gemini")["contents"][1]["parts"]
    assert parts[1]["thoughtSignature"] == "U0lH" and parts[1]["functionCall"]["id"] == "call_1_1"
    assert load(t.to("gemini")) == t


def test_gemini_sdk_content_objects_load() -> None:
    from google.genai import types

    contents = [
        types.Content(role="user", parts=[types.Part(text="hi")]),
        types.Content(
            role="model",
            parts=[
                types.Part(
                    function_call=types.FunctionCall(id="f1", name="ls", args={}),
                    thought_signature=b"sig",
                )
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="f1", name="ls", response={"files": [1]}
                    )
                )
            ],
        ),
    ]
    t = load(contents)
    assert t.source_format == "gemini"
    assert t[1].blocks == (Thinking("", "c2ln"), ToolCall("f1", "ls", {}))  # base64 of b"sig"
    assert t[2].tool_results[0].content == (Text('{"files": [1]}'),)


# -- pi ----------------------------------------------------------------------------------------


def _pi_msg(eid: str, parent: str | None, role: str, **kw: Any) -> dict[str, Any]:
    return {"type": "message", "id": eid, "parentId": parent, "message": {"role": role, **kw}}


def test_pi_v3_follows_the_active_branch(write: Write) -> None:
    text = lambda s: [{"type": "text", "text": s}]  # noqa: E731
    path = write(
        "s.jsonl",
        jsonl(
            {"type": "session", "version": 3, "id": "S"},
            _pi_msg("a", None, "user", content=text("q1")),
            _pi_msg(
                "b",
                "a",
                "assistant",
                content=[{"type": "toolCall", "id": "t1", "name": "ls", "arguments": {}}],
                stopReason="toolUse",
                api="anthropic-messages",
            ),
            _pi_msg(
                "c",
                "b",
                "toolResult",
                toolCallId="t1",
                toolName="ls",
                content=text("x"),
                isError=False,
            ),
            _pi_msg("d", "c", "user", content=text("abandoned")),
            _pi_msg("e", "c", "user", content=text("q2")),
            {"type": "model_change", "id": "f", "parentId": "e", "provider": "x"},
            _pi_msg("g", "f", "bashExecution", command="pwd", output="/w", exitCode=0),
            _pi_msg("h", "g", "bashExecution", command="ls", output="x", excludeFromContext=True),
        ),
    )
    t = load(path)
    assert t.source_format == "pi"
    assert [m.id for m in t] == ["a", "b", "c", "e", "g"]
    assert "abandoned" not in [m.text for m in t]
    assert (
        t[4].text.startswith("Ran `pwd`") and t[1].meta["provider_family"] == "anthropic-messages"
    )
    assert t.meta["skipped_entries"] == 2  # the model_change and the excluded bash run


def test_pi_compaction_views(write: Write) -> None:
    text = lambda s: [{"type": "text", "text": s}]  # noqa: E731
    path = write(
        "c.jsonl",
        jsonl(
            {"type": "session", "version": 3, "id": "S"},
            _pi_msg("a", None, "user", content=text("old")),
            _pi_msg("b", "a", "assistant", content=text("old reply"), stopReason="stop"),
            _pi_msg("c", "b", "user", content=text("kept")),
            {
                "type": "compaction",
                "id": "k",
                "parentId": "c",
                "summary": "S1",
                "firstKeptEntryId": "c",
            },
            _pi_msg("d", "k", "assistant", content=text("new"), stopReason="stop"),
        ),
    )
    full = load(path)
    assert [m.text for m in full] == ["old", "old reply", "kept", "new"]
    assert full.meta["compactions"][0]["summary"] == "S1"
    model = load(path, view="model")
    assert model[0].text.endswith("S1") and [m.text for m in model[1:]] == ["kept", "new"]


# -- Claude Code -------------------------------------------------------------------------------


def _cc(
    uuid: str, parent: str | None, kind: str, message: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "S",
        "message": message,
        **kw,
    }


def test_claude_code_merges_records_and_keeps_parallel_results(write: Write) -> None:
    def use(i: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": i, "name": "Read", "input": {}}

    def result(i: str) -> dict[str, Any]:
        return {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": i, "content": i}],
        }

    def asst(block: dict[str, Any]) -> dict[str, Any]:
        return {"id": "msg_1", "role": "assistant", "content": [block]}

    path = write(
        "cc.jsonl",
        jsonl(
            {"type": "file-history-snapshot", "messageId": "x"},
            _cc("u1", None, "user", {"role": "user", "content": "go"}),
            _cc("a1", "u1", "assistant", asst({"type": "text", "text": "two reads"})),
            _cc("a2", "a1", "assistant", asst(use("A"))),
            _cc("a3", "a2", "assistant", asst(use("B"))),
            {"type": "progress", "uuid": "p1", "parentUuid": "a3", "data": {}},
            _cc("r2", "a3", "user", result("B")),
            _cc("r1", "a2", "user", result("A")),  # sibling branch: off the leaf's path
            _cc("x1", "r1", "user", {"role": "user", "content": "rewound prompt"}),
            _cc(
                "a4",
                "r1",
                "assistant",
                {
                    "id": "msg_2",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "API Error"}],
                },
                isApiErrorMessage=True,
            ),
        ),
    )
    t = load(path)
    assert t.source_format == "claude-code"
    assert [m.role for m in t] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c.id for c in t[1].tool_calls] == ["A", "B"] and t[1].id == "msg_1"
    assert {r.call_id for m in t for r in m.tool_results} == {"A", "B"}
    assert "rewound prompt" not in [m.text for m in t]  # a branch the leaf does not descend from
    assert t[4].stop_reason == "error"


# -- SWE-agent and OpenHands -------------------------------------------------------------------


def test_swe_agent_tool_call_ids_list(write: Write) -> None:
    """A ``tool`` item holds one observation, of one action: SWE-agent writes it with one id
    (``_add_templated_messages_to_history`` in SWE-agent/SWE-agent ``sweagent/agent/agents.py``
    asserts ``len(tool_call_ids) == 1``) and its model layer sends it as the answer to
    ``tool_call_ids[0]`` only (``_history_to_messages`` in ``sweagent/agent/models.py``). A
    list of several ids gave every id the same text, answering calls the text says nothing
    of; it answers the first, the others stay unanswered as the model saw them, and the list
    is kept in the message's meta."""
    traj = {
        "history": [
            {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
            {
                "role": "assistant",
                "content": "two at once",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "content": "both done", "tool_call_ids": ["c1", "c2"]},
        ]
    }
    t = load(write("run.traj", json.dumps(traj)))
    assert [(r.call_id, r.text) for r in t[2].tool_results] == [("c1", "both done")]
    assert t[2].meta["tool_call_ids"] == ["c1", "c2"]
    assert t[0].text == "fix it"
    one = {"role": "tool", "content": "done", "tool_call_ids": ["c1"]}
    single = load(write("one.traj", json.dumps({"history": [*traj["history"][:2], one]})))
    assert "tool_call_ids" not in single[2].meta


def test_openhands_event_list_merges_calls_of_one_response(write: Write) -> None:
    def tcm(cid: str) -> dict[str, Any]:
        calls = [
            {
                "id": c,
                "type": "function",
                "function": {"name": "run", "arguments": json.dumps({"c": c})},
            }
            for c in ("t1", "t2")
        ]
        resp = {
            "id": "r1",
            "choices": [{"message": {"role": "assistant", "content": "both", "tool_calls": calls}}],
        }
        return {
            "function_name": "run",
            "tool_call_id": cid,
            "model_response": resp,
            "total_calls_in_response": 2,
        }

    events = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "sys"}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "do"}},
        {"id": 2, "source": "agent", "action": "run", "tool_call_metadata": tcm("t1")},
        {"id": 3, "source": "agent", "action": "run", "tool_call_metadata": tcm("t2")},
        {
            "id": 4,
            "source": "agent",
            "observation": "run",
            "content": "1",
            "cause": 2,
            "tool_call_metadata": tcm("t1"),
        },
        {
            "id": 5,
            "source": "agent",
            "observation": "run",
            "content": "2",
            "cause": 3,
            "tool_call_metadata": tcm("t2"),
        },
        {"id": 6, "source": "agent", "observation": "null", "content": ""},
    ]
    t = load(write("events.json", json.dumps(events)))
    assert t.source_format == "openhands"
    assert [m.role for m in t] == ["system", "user", "assistant", "tool", "tool"]
    assert [c.id for c in t[2].tool_calls] == ["t1", "t2"] and t.meta["skipped_events"] == 2


# -- aider -------------------------------------------------------------------------------------


def test_aider_log_parsing(write: Write) -> None:
    log = "\n".join(
        [
            "# aider chat started at 2026-01-01 10:00:00",
            "> Aider v0.86.2  ",
            "#### first line  ",
            "#### second line  ",
            "",
            "<thinking-content-abc123>",
            "reasoning",
            "</thinking-content-abc123>",
            "Answer.",
            "> Tokens: 1k sent, 2 received.  ",
            "#### Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: all  ",
            "partial reply",
            "# aider chat started at 2026-01-02 10:00:00",
            "#### again  ",
        ]
    )
    ts = load_all(write("h.aider.chat.history.md", log))
    assert len(ts) == 2 and ts[1].meta["started_at"] == "2026-01-02 10:00:00"
    first = ts[0]
    assert first[0] == Message.user("first line\nsecond line")
    assert first[1].blocks == (Thinking("reasoning"), Text("Answer."))
    assert first[1].meta["tokens"].startswith("Tokens: 1k") and first[1].stop_reason is None
    assert first[2].text == "partial reply" and first[2].stop_reason == "aborted"
    assert first.meta["prompt_answers"] == 1 and first.meta["user_input_lines"] == 3


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        ([{"role": "user", "content": "hi"}], "openai"),
        ([{"role": "tool", "tool_call_id": "a", "content": ""}], "openai"),
        ([{"type": "function_call_output", "call_id": "a", "output": ""}], "openai-responses"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]}], "anthropic"),
        ({"system": "s", "messages": []}, "anthropic"),
        ([{"role": "model", "parts": [{"text": "x"}]}], "gemini"),
        ({"contents": []}, "gemini"),
        ({"history": [], "info": {}}, "swe-agent"),
        ([{"action": "message", "args": {}}], "openhands"),
    ],
)
def test_detect_format(data: Any, fmt: str) -> None:
    assert detect_format(data) == fmt


def test_jsonl_of_chat_messages_and_explicit_format(write: Write) -> None:
    path = write(
        "chat.jsonl",
        jsonl({"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}),
    )
    assert load(path) == load(path, format="openai")
    assert [m.text for m in load(path)] == ["hi", "yo"]


def test_detect_format_of_a_path_is_what_load_reads_it_as(tmp_path: Path) -> None:
    """``detect_format`` takes a path as ``load`` does (a ``str`` or a ``Path``): the shared
    sessions' files and an OpenHands event folder give the format ``load`` reads them as; a
    missing file is named, not read as data."""
    for path, fmt in (
        (PI, "pi"),
        (AIDER, "aider"),
        (OPENHANDS, "openhands"),
        (CC_MAIN, "claude-code"),
    ):
        assert detect_format(path) == detect_format(str(path)) == fmt
        assert load(path, format=fmt) == load(path)
    events = tmp_path / "conv" / "events"
    events.mkdir(parents=True)
    (events / "event-00000-a.json").write_text("{}")  # detection reads the file names
    assert detect_format(tmp_path / "conv") == "openhands"
    with pytest.raises(TranscriptError, match="no such file"):
        detect_format(str(tmp_path / "missing.jsonl"))
    with pytest.raises(TranscriptError, match="is a folder"):
        detect_format(tmp_path)
