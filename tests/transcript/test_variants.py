"""Variants of the agent log formats seen in other versions of the tools than the shared
samples: each fixture is written by hand from the published schema of that version, loads
without losing what the model read, and renders valid payloads through the engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxengine.errors import TranscriptError
from ctxengine.transcript import Image, Text, Thinking, ToolCall, Transcript, load

from .helpers import PROVIDERS, assert_sdk_valid

Write = Callable[[str, str], Path]


def jsonl(*rows: dict[str, Any]) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def engine_payloads_valid(t: Transcript) -> None:
    """The engine renders ``t`` to every provider, each payload valid for the SDK types."""
    from ctxengine import Budget, ContextEngine

    async def run() -> None:
        engine = ContextEngine("gpt-4o", Budget(total=8000))
        async with engine.session("variant") as session:
            session.extend(t.messages)
            for provider in PROVIDERS:
                assert_sdk_valid((await session.render(provider)).payload, provider)

    asyncio.run(run())


def texts(t: Transcript) -> str:
    """Every text the transcript holds (message text and tool-result text), joined."""
    out: list[str] = []
    for m in t.messages:
        out.extend(b.text for b in m.blocks if isinstance(b, Text))
        for r in m.tool_results:
            out.extend(b.text for b in r.content if isinstance(b, Text))
    return "\n".join(out)


# -- Claude Code -------------------------------------------------------------------------------

_CC = {"sessionId": "s1", "version": "2.0.50", "cwd": "/w", "userType": "external"}


def cc_user(uuid: str, parent: str | None, content: object, **kw: Any) -> dict[str, Any]:
    message = {"role": "user", "content": content}
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "message": message, **_CC, **kw}


def cc_assistant(uuid: str, parent: str, mid: str, content: list[Any], **kw: Any) -> dict[str, Any]:
    message = {"id": mid, "type": "message", "role": "assistant", "content": content}
    return {
        "type": "assistant",
        "uuid": uuid,
        "parentUuid": parent,
        "message": message,
        **_CC,
        **kw,
    }


def test_claude_code_server_tool_blocks_are_kept_as_assistant_text(write: Write) -> None:
    """A web search runs inside the assistant turn (``server_tool_use`` then
    ``web_search_tool_result``, split over records of one message id): it was a
    TranscriptError; now the query and the results are text of that turn."""
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    hit = {"type": "web_search_result", "url": "https://x.test/r", "title": "Rust 2024"}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [hit]}
    path = write(
        "s.jsonl",
        jsonl(
            cc_user("u1", None, "search the web"),
            cc_assistant("a1", "u1", "m1", [{**search, "input": {"query": "rust 2024"}}]),
            cc_assistant("a2", "a1", "m1", [result]),
            cc_assistant("a3", "a2", "m1", [{"type": "text", "text": "It shipped."}]),
            cc_user("u2", "a3", "thanks"),
        ),
    )
    t = load(path)
    assert [m.role for m in t] == ["user", "assistant", "user"]
    said = texts(t)
    assert "web_search" in said and "rust 2024" in said
    assert "https://x.test/r" in said and "It shipped." in said
    assert not t[1].tool_calls  # the server ran it: nothing for the client to answer
    engine_payloads_valid(t)


def test_claude_code_documents_and_tool_references_load(write: Write) -> None:
    """A PDF the user attached (``document``, base64), a text document, a PDF read by a tool
    and a tool search's ``tool_reference`` were TranscriptErrors."""
    pdf = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}
    path = write(
        "d.jsonl",
        jsonl(
            cc_user(
                "u1", None, [{"type": "document", "source": pdf}, {"type": "text", "text": "sum"}]
            ),
            cc_assistant(
                "a1", "u1", "m1", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]
            ),
            cc_user(
                "u2",
                "a1",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "document", "source": pdf}],
                    }
                ],
            ),
            cc_assistant(
                "a2",
                "u2",
                "m2",
                [{"type": "tool_use", "id": "t2", "name": "ToolSearch", "input": {}}],
            ),
            cc_user(
                "u3",
                "a2",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "tool_reference", "tool_name": "mcp__db__query"}],
                    }
                ],
            ),
            cc_user(
                "u4",
                "u3",
                [
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
                        "title": "n.txt",
                    }
                ],
            ),
        ),
    )
    t = load(path)
    assert t[0].blocks == (Image("application/pdf", data="JVBERi0x"), Text("sum"))
    assert t[2].tool_results[0].content == (Image("application/pdf", data="JVBERi0x"),)
    assert "mcp__db__query" in texts(t)
    assert t[-1].blocks[0] == Text("[document: n.txt]\nnotes")
    engine_payloads_valid(t)


def test_claude_code_inline_sidechain_does_not_replace_the_main_conversation(write: Write) -> None:
    """Older versions log a Task sub-agent's records in the main file (``isSidechain``, their
    own root). When the file ended with one, the branch walk started there and the main
    conversation was lost; now sub-agent records are left out of a main session."""
    side = {"isSidechain": True}
    path = write(
        "m.jsonl",
        jsonl(
            {"type": "summary", "summary": "Fixing a bug", "leafUuid": "a2"},
            cc_user("u1", None, "find the bug"),
            cc_assistant(
                "a1", "u1", "m1", [{"type": "tool_use", "id": "t1", "name": "Task", "input": {}}]
            ),
            cc_user("s1", None, "look at x.py", **side),
            cc_assistant("s2", "s1", "ms1", [{"type": "text", "text": "line 3"}], **side),
            cc_user(
                "u2", "a1", [{"type": "tool_result", "tool_use_id": "t1", "content": "line 3"}]
            ),
            cc_assistant("a2", "u2", "m2", [{"type": "text", "text": "Fixed line 3."}]),
            cc_user("s3", None, "verify", **side),
            cc_assistant("s4", "s3", "ms2", [{"type": "text", "text": "verified"}], **side),
        ),
    )
    t = load(path)
    assert [m.role for m in t] == ["user", "assistant", "tool", "assistant"]
    assert t[0].blocks == (Text("find the bug"),) and t[-1].blocks == (Text("Fixed line 3."),)
    assert "verified" not in texts(t)
    # a sub-agent's own file (every record a sidechain) still loads whole
    sub = write(
        "agent-1.jsonl",
        jsonl(
            cc_user("s1", None, "look", **side),
            cc_assistant("s2", "s1", "m", [{"type": "text", "text": "ok"}], **side),
        ),
    )
    assert [m.role for m in load(sub)] == ["user", "assistant"]
    engine_payloads_valid(t)


def test_claude_code_unknown_block_types_are_skipped_and_counted(write: Write) -> None:
    """A newer Claude Code writes block types this reader does not know: the file loads
    without them (they failed the whole file) and ``meta["skipped_blocks"]`` counts them."""
    new = {"type": "hologram", "data": "..."}
    path = write(
        "u.jsonl",
        jsonl(
            cc_user("u1", None, [{"type": "text", "text": "hi"}, new]),
            cc_assistant("a1", "u1", "m1", [{"type": "text", "text": "hello"}, new]),
            cc_assistant(
                "a2",
                "a1",
                "m1",
                [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}],
            ),
            cc_user(
                "u2",
                "a2",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "a.py"}, new],
                    }
                ],
            ),
        ),
    )
    t = load(path)
    assert [m.role for m in t] == ["user", "assistant", "tool"]
    assert t[0].blocks == (Text("hi"),)
    assert t[1].blocks == (Text("hello"), ToolCall("t1", "Bash", {"command": "ls"}))
    assert t[2].tool_results[0].content == (Text("a.py"),)
    assert t.meta["skipped_blocks"] == {"hologram": 3}
    engine_payloads_valid(t)


def test_claude_code_malformed_known_block_names_line_and_block(write: Write) -> None:
    path = write(
        "u.jsonl",
        jsonl(cc_user("u1", None, "hi"), cc_assistant("a1", "u1", "m1", [{"type": "thinking"}])),
    )
    with pytest.raises(
        TranscriptError, match=r"line 2\.message\.content\[0\]: key 'thinking' is 'missing'"
    ):
        load(path)


# -- pi / OpenClaw -----------------------------------------------------------------------------

_T = "2025-12-01T00:00:00.000Z"


def pi_msg(message: dict[str, Any], **ids: Any) -> dict[str, Any]:
    return {"type": "message", "timestamp": _T, **ids, "message": message}


def pi_user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


def pi_assistant(content: list[Any], stop: str = "stop") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "api": "anthropic-messages",
        "stopReason": stop,
    }


def test_pi_v1_compaction_keeps_from_its_entry_index(write: Write) -> None:
    """A version 1 compaction names the first kept entry by index (the header is entry 0).
    view="model" ignored it (no ids to match) and started from the very first message, so
    the summarized messages were sent again after their summary."""
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}
    result = {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "isError": False}
    path = write(
        "v1.jsonl",
        jsonl(
            {"type": "session", "id": "s", "timestamp": _T, "cwd": "/w"},
            pi_msg(pi_user("first task")),
            pi_msg(pi_assistant([{"type": "text", "text": "did first"}])),
            pi_msg(pi_user("second task")),
            pi_msg(pi_assistant([call], "toolUse")),
            pi_msg({**result, "content": [{"type": "text", "text": "a.txt"}]}),
            {
                "type": "compaction",
                "timestamp": _T,
                "summary": "First task done.",
                "firstKeptEntryIndex": 3,
                "tokensBefore": 9,
            },
            pi_msg(pi_user("third task")),
        ),
    )
    model = load(path, view="model")
    assert model[0].text.endswith("First task done.")
    assert [m.text for m in model if m.role == "user"][1:] == ["second task", "third task"]
    assert "did first" not in texts(model) and model[2].tool_calls == (
        ToolCall("c1", "bash", {"command": "ls"}),
    )
    full = load(path)
    assert "first task" in texts(full) and full.meta["compactions"][0]["first_kept"] == 3
    engine_payloads_valid(model)


def test_pi_summary_message_roles_and_skipped_entries(write: Write) -> None:
    """``branchSummary`` and ``compactionSummary`` are AgentMessage roles (pi sends them to
    the model as user text); they were a TranscriptError. Entries that are not model context
    are skipped and counted."""
    path = write(
        "v3.jsonl",
        jsonl(
            {"type": "session", "version": 3, "id": "s", "timestamp": _T, "cwd": "/w"},
            {
                "type": "model_change",
                "id": "m0",
                "parentId": None,
                "timestamp": _T,
                "provider": "openai",
                "modelId": "gpt-5",
            },
            pi_msg(pi_user("task"), id="e1", parentId="m0"),
            pi_msg(
                {"role": "branchSummary", "summary": "tried path A", "fromId": "x", "timestamp": 2},
                id="e2",
                parentId="e1",
            ),
            pi_msg(
                {
                    "role": "compactionSummary",
                    "summary": "did B",
                    "tokensBefore": 5,
                    "timestamp": 3,
                },
                id="e3",
                parentId="e2",
            ),
            pi_msg(pi_assistant([{"type": "text", "text": "ok"}]), id="e4", parentId="e3"),
            {
                "type": "label",
                "id": "e5",
                "parentId": "e4",
                "timestamp": _T,
                "targetId": "e1",
                "label": "start",
            },
            {"type": "session_info", "id": "e6", "parentId": "e5", "timestamp": _T, "name": "n"},
        ),
    )
    t = load(path)
    assert [m.role for m in t] == ["user", "user", "user", "assistant"]
    assert t[1].text.endswith("tried path A") and t[2].text.endswith("did B")
    assert t.meta["skipped_entries"] == 3
    engine_payloads_valid(t)
    bad = write(
        "bad.jsonl",
        jsonl(
            {"type": "session", "version": 3, "id": "s"},
            pi_msg({"role": "branchSummary"}, id="e1", parentId=None),
        ),
    )
    with pytest.raises(
        TranscriptError, match=r"line 2\.message: key 'summary' is 'missing'; expected a string"
    ):
        load(bad)


def test_pi_compaction_retained_tail_is_what_the_model_kept(write: Write) -> None:
    """Newer pi compactions copy the kept messages into ``retainedTail`` (``firstKeptEntryId``
    is optional there). view="model" ignored it and kept only the messages after the
    compaction, so the model lost the turns pi had kept."""
    kept = [pi_user("keep this task"), pi_assistant([{"type": "text", "text": "kept reply"}])]
    path = write(
        "tail.jsonl",
        jsonl(
            {"type": "session", "version": 3, "id": "s", "timestamp": _T, "cwd": "/w"},
            pi_msg(pi_user("old task"), id="e1", parentId=None),
            pi_msg(kept[0], id="e2", parentId="e1"),
            pi_msg(kept[1], id="e3", parentId="e2"),
            {
                "type": "compaction",
                "id": "e4",
                "parentId": "e3",
                "timestamp": _T,
                "summary": "Old task done.",
                "tokensBefore": 9,
                "retainedTail": kept,
            },
            pi_msg(pi_user("next task"), id="e5", parentId="e4"),
        ),
    )
    model = load(path, view="model")
    assert [m.text for m in model][1:] == ["keep this task", "kept reply", "next task"]
    assert model[0].text.endswith("Old task done.")
    assert model[0].meta["kind"] == "compactionSummary"
    full = load(path)
    assert [m.text for m in full] == ["old task", "keep this task", "kept reply", "next task"]
    assert full.meta["compactions"][0]["retained"] == 2
    engine_payloads_valid(model)
    bad = write(
        "bad.jsonl",
        jsonl(
            {"type": "session", "version": 3, "id": "s"},
            {"type": "compaction", "id": "c", "parentId": None, "summary": "s", "retainedTail": 3},
        ),
    )
    with pytest.raises(TranscriptError, match=r"line 2\.retainedTail: value is 3; expected a JSON"):
        load(bad, view="model")


def test_pi_entries_the_harness_wrote_are_marked(write: Write) -> None:
    """``branch_summary`` and ``custom_message`` entries (how pi stores a branch's summary and
    an extension's message) became user messages without a ``kind``, so a summary took
    them for the user's requests; an empty branch summary (pi sends none) was a message.
    A shell command run from the prompt lost its exit code and its cancellation."""
    path = write(
        "marks.jsonl",
        jsonl(
            {"type": "session", "version": 3, "id": "s", "timestamp": _T, "cwd": "/w"},
            pi_msg(pi_user("task"), id="e1", parentId=None),
            {"type": "branch_summary", "id": "e2", "parentId": "e1", "fromId": "x", "summary": "A"},
            {"type": "branch_summary", "id": "e3", "parentId": "e2", "fromId": "y", "summary": ""},
            {
                "type": "custom_message",
                "id": "e4",
                "parentId": "e3",
                "customType": "ext",
                "content": "injected",
                "display": False,
            },
            pi_msg(
                {"role": "bashExecution", "command": "make", "output": "boom", "exitCode": 2},
                id="e5",
                parentId="e4",
            ),
            pi_msg(
                {"role": "bashExecution", "command": "sleep 9", "output": "", "cancelled": True},
                id="e6",
                parentId="e5",
            ),
        ),
    )
    t = load(path)
    assert [m.meta.get("kind") for m in t] == [
        None,
        "branchSummary",
        "custom",
        "bashExecution",
        "bashExecution",
    ]
    assert t[1].text.endswith("A") and t[2].text == "injected"
    assert t[3].text == "Ran `make`\n```\nboom\n```\n\nCommand exited with code 2"
    assert t[4].text == "Ran `sleep 9`\n(no output)\n\n(command cancelled)"
    engine_payloads_valid(t)


def _pi_one_call(write: Write, name: str, turn: dict[str, Any], call_id: str) -> Path:
    """A pi session file ``name``: a request, ``turn`` (one bash call, ``call_id``), its result."""
    result = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [{"type": "text", "text": "a.txt"}],
        "isError": False,
    }
    return write(
        name,
        jsonl(
            {"type": "session", "version": 3, "id": "s", "timestamp": _T, "cwd": "/w"},
            pi_msg(pi_user("list"), id="e1", parentId=None),
            pi_msg(turn, id="e2", parentId="e1"),
            pi_msg(result, id="e3", parentId="e2"),
        ),
    )


def test_pi_responses_turns_keep_their_item_ids(write: Write) -> None:
    """For the OpenAI Responses API pi stores a call's id as ``<call_id>|<item id>`` and a
    text's item id in ``textSignature``. The stored id was sent as the call id and the item
    ids were lost, so a reasoning item went out without the item it led to (the API pairs
    them by id and rejects the request)."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "RU5D"}
    sig = json.dumps({"v": 1, "id": "msg_1", "phase": "commentary"})
    content = [
        {"type": "thinking", "thinking": "", "thinkingSignature": json.dumps(reasoning)},
        {"type": "text", "text": "Listing.", "textSignature": sig},
        {"type": "toolCall", "id": "call_1|fc_1", "name": "bash", "arguments": {"command": "ls"}},
    ]
    turn = {**pi_assistant(content, "toolUse"), "api": "openai-codex-responses"}
    t = load(_pi_one_call(write, "r.jsonl", turn, "call_1|fc_1"))
    assert t[1].tool_calls == (ToolCall("call_1", "bash", {"command": "ls"}),)
    assert t[2].tool_results[0].call_id == "call_1"
    items = t.to("openai-responses")["input"][1:4]
    assert [(i["type"], i.get("id")) for i in items] == [
        ("reasoning", "rs_1"),
        ("message", "msg_1"),
        ("function_call", "fc_1"),
    ]
    assert items[2]["call_id"] == "call_1"
    engine_payloads_valid(t)


def test_pi_gemini_call_keeps_its_thought_signature(write: Write) -> None:
    """pi keeps a Gemini function call's ``thoughtSignature`` on its ``toolCall`` block; it
    was dropped, and Gemini 3 rejects the calls of the current turn sent without it."""
    call = {
        "type": "toolCall",
        "id": "c1",
        "name": "bash",
        "arguments": {"command": "ls"},
        "thoughtSignature": "R1NJRw==",
    }
    turn = {**pi_assistant([call], "toolUse"), "api": "google-generative-ai"}
    t = load(_pi_one_call(write, "g.jsonl", turn, "c1"))
    assert t[1].blocks == (Thinking("", "R1NJRw=="), ToolCall("c1", "bash", {"command": "ls"}))
    parts = t.to("gemini")["contents"][1]["parts"]
    assert parts == [
        {
            "functionCall": {"id": "c1", "name": "bash", "args": {"command": "ls"}},
            "thoughtSignature": "R1NJRw==",
        }
    ]
    assert [b["type"] for b in t.to("anthropic")["messages"][1]["content"]] == ["tool_use"]
    engine_payloads_valid(t)


def test_a_gemini_call_signature_from_the_openai_compatible_endpoint_goes_back_to_gemini(
    write: Write,
) -> None:
    """Gemini's OpenAI-compatible endpoint gives each function call its thought signature in
    ``tool_calls[].extra_content.google.thought_signature`` (and Gemini 3 refuses a call of
    the current turn sent back without it): kept for Gemini, as the Gemini importer keeps a
    signed ``functionCall`` part, and sent to no other provider."""
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "f1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    "extra_content": {"google": {"thought_signature": "Q2lSc2ln"}},
                },
                {
                    "id": "f2",
                    "type": "function",
                    "function": {"name": "time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "f1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "f2", "content": "noon"},
    ]
    t = load(write("compat.json", json.dumps({"messages": messages})))
    assert t[1].blocks == (
        Thinking("", "Q2lSc2ln"),
        ToolCall("f1", "weather", {"city": "Paris"}),
        ToolCall("f2", "time", {}),
    )
    parts = t.to("gemini")["contents"][1]["parts"]
    assert parts[0]["thoughtSignature"] == "Q2lSc2ln" and "thoughtSignature" not in parts[1]
    assert "Q2lSc2ln" not in json.dumps(t.to("anthropic")) + json.dumps(t.to("openai"))
    engine_payloads_valid(t)


# -- SWE-agent ---------------------------------------------------------------------------------


def test_swe_agent_multimodal_history_keeps_images(write: Write) -> None:
    """SWE-agent 1.x multimodal runs put ``image_url`` parts in the history (and
    ``cache_control`` on text parts): the image part was a TranscriptError."""
    png = "data:image/png;base64,iVBORw0KGgo="
    cached = {"type": "text", "text": "a.py", "cache_control": {"type": "ephemeral"}}
    call = {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    history = [
        {"role": "system", "content": [{"type": "text", "text": "You are SWE-agent."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Fix the bug shown:"},
                {"type": "image_url", "image_url": {"url": png}},
            ],
        },
        {"role": "assistant", "content": "Look.", "tool_calls": [call]},
        {"role": "tool", "content": [cached], "tool_call_ids": ["toolu_1"]},
    ]
    t = load(write("m.traj", json.dumps({"history": history, "info": {}})))
    assert t[1].blocks == (Text("Fix the bug shown:"), Image("image/png", data="iVBORw0KGgo="))
    assert t[3].tool_results[0].content == (Text("a.py"),)
    engine_payloads_valid(t)


def test_swe_agent_thinking_blocks_are_kept(write: Write) -> None:
    """SWE-agent 1.x stores an Anthropic model's ``thinking_blocks`` (LiteLLM's) on the
    assistant history item and sends them back with its calls: they were dropped, so the
    reasoning was lost and Anthropic got the calls without the thinking that led to them."""
    call = {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    thinking = {"type": "thinking", "thinking": "Check the tests first.", "signature": "c2ln"}
    history = [
        {"role": "system", "content": "You are SWE-agent.", "message_type": "system_prompt"},
        {"role": "user", "content": "Fix the bug.", "message_type": "observation"},
        {
            "role": "assistant",
            "content": "",
            "thought": "",
            "action": "pytest",
            "tool_calls": [call],
            "thinking_blocks": [thinking, {"type": "redacted_thinking", "data": "ZGF0YQ=="}],
            "message_type": "action",
        },
        {"role": "tool", "content": "1 failed", "tool_call_ids": ["toolu_1"]},
    ]
    t = load(write("t.traj", json.dumps({"history": history, "info": {}})))
    assert t[2].blocks == (
        Thinking("Check the tests first.", "c2ln"),
        Thinking("", "ZGF0YQ==", redacted=True),
        ToolCall("toolu_1", "bash", {}),
    )
    assert t[2].meta["provider_family"] == "anthropic"
    sent = t.to("anthropic")["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["thinking", "redacted_thinking", "tool_use"]
    engine_payloads_valid(t)
    history[2]["thinking_blocks"] = [{"type": "thinking", "signature": "c2ln"}]
    with pytest.raises(
        TranscriptError, match=r"history\[2\]\.thinking_blocks\[0\]: key 'thinking'"
    ):
        load(write("bad.traj", json.dumps({"history": history})))


def test_swe_agent_trajectory_without_history_is_rebuilt(write: Write) -> None:
    """A ``.traj`` with only ``trajectory`` steps failed ('history' missing); the steps are
    now the conversation: the first query, then response and observation of each step."""
    steps = [
        {
            "response": "List.\n```\nls\n```",
            "observation": "a.py",
            "action": "ls",
            "thought": "List.",
            "query": [{"role": "system", "content": "sys"}, {"role": "user", "content": "issue"}],
        },
        {"response": "", "thought": "Done.", "action": "submit", "observation": "diff --git"},
    ]
    t = load(write("t.traj", json.dumps({"trajectory": steps, "info": {}})))
    assert t.source_format == "swe-agent" and t.meta["rebuilt_from"] == "trajectory"
    assert [(m.role, m.text) for m in t] == [
        ("system", "sys"),
        ("user", "issue"),
        ("assistant", "List.\n```\nls\n```"),
        ("user", "a.py"),
        ("assistant", "Done.\nsubmit"),
        ("user", "diff --git"),
    ]
    engine_payloads_valid(t)
    with pytest.raises(
        TranscriptError, match=r"trajectory\[0\]: entry is 'x'; expected a JSON object"
    ):
        load(write("b.traj", json.dumps({"trajectory": ["x"]})))


# -- aider -------------------------------------------------------------------------------------

AIDER_LOG = """
# aider chat started at 2025-01-02 10:00:00

> Aider v0.70.0
> Main model: gpt-4o with diff edit format

#### /run pytest -q
> Running pytest -q
> F.
FAILED test_a.py::test_x - assert 1 == 2
1 failed, 1 passed in 0.01s

#### fix it

Change `x` to 2.

a.py
```
<<<<<<< SEARCH
x = 1
=======
x = 2
>>>>>>> REPLACE
```

> Tokens: 2.1k sent, 40 received.
> Applied edit to a.py

#### again
> litellm.APIConnectionError: Connection refused
Traceback (most recent call last):
  File "x.py", line 1
> Retrying in 0.2 seconds...

Done again.

> Tokens: 1k sent, 4 received.
"""


def test_aider_multiline_tool_output_and_edit_markers(write: Write) -> None:
    """aider quotes only the first line of a multi-line tool output (command output, an
    error traceback): the other lines became made-up assistant replies. And the
    ``>>>>>>> REPLACE`` line of an edit was read as tool output, cutting it from the reply."""
    t = load(write("x.aider.chat.history.md", AIDER_LOG))
    assert [m.role for m in t] == ["user", "assistant", "user", "assistant"]  # /run: a command
    assert t[1].text.endswith("x = 2\n>>>>>>> REPLACE\n```") and t[1].stop_reason is None
    assert t[3].text == "Done again." and t[3].stop_reason is None
    assert t.meta["commands"] == ["/run pytest -q"]
    tools = t.meta["tool_lines"]
    assert "F.\nFAILED test_a.py::test_x - assert 1 == 2\n1 failed, 1 passed in 0.01s" in tools
    assert any(line.startswith("litellm.APIConnectionError") and "x.py" in line for line in tools)
    assert t.meta["applied_edits"] == 1
    engine_payloads_valid(t)


def test_aider_headings_and_blockquotes_in_a_reply_are_reply_text(write: Write) -> None:
    """aider ends the input and tool lines it writes with two spaces; a model's ``####``
    heading or ``>`` blockquote in its reply has none. They were read as user input and tool
    output: one reply became three interrupted ones with made-up user turns between them, and
    the lines of a markdown edit were lost."""
    reply = (
        "Here is a plan.\n\n#### Step 1: Overview\n\n> **Note:** keep it short.\n"
        "> Really short.\n\nREADME.md\n```markdown\n<<<<<<< SEARCH\n=======\n"
        "#### Install\n> pip install x\n>>>>>>> REPLACE\n```"
    )
    log = (
        "\n# aider chat started at 2025-10-23 17:04:56\n\n> Aider v0.86.1  \n\n"
        f"#### How should I structure the docs?  \n\n{reply}\n\n"
        "> Tokens: 2.1k sent, 300 received.  \n> Applied edit to README.md  \n"
        "> ls  \n> a.txt\nb.txt  \n"
    )
    t = load(write("h.aider.chat.history.md", log))
    assert [m.role for m in t] == ["user", "assistant"]
    assert t[1].text == reply and t[1].stop_reason is None
    assert t.meta["tool_lines"][-2:] == ["ls", "a.txt\nb.txt"]
    engine_payloads_valid(t)
    # a file whose trailing spaces were stripped (an editor, a commit hook) reads as before
    stripped = "\n".join(line.rstrip() for line in log.split("\n"))
    old = load(write("s.aider.chat.history.md", stripped))
    assert [m.role for m in old][:3] == ["user", "assistant", "user"]


def test_aider_blank_input_is_no_user_turn(write: Write) -> None:
    """aider logs an empty input (Enter alone) as ``#### <blank>`` and sends the model
    nothing; it became a user message reading ``<blank>``."""
    log = (
        "\n# aider chat started at 2025-10-23 17:04:56\n\n#### <blank>  \n\n"
        "#### fix it  \n\nFixed.\n\n> Tokens: 1k sent, 2 received.  \n"
    )
    t = load(write("b.aider.chat.history.md", log))
    assert [m.text for m in t] == ["fix it", "Fixed."]
    assert t.meta["user_input_lines"] == 2
    engine_payloads_valid(t)


# -- OpenHands ---------------------------------------------------------------------------------


def test_openhands_model_response_reasoning_is_kept(write: Write) -> None:
    """A V0 action's ``model_response`` is LiteLLM's: a reasoning model's message carries
    ``reasoning_content`` and, from Anthropic, signed ``thinking_blocks``. Both were dropped."""

    def action(i: int, message: dict[str, Any]) -> dict[str, Any]:
        call = message["tool_calls"][0]
        tcm = {
            "function_name": "execute_bash",
            "tool_call_id": call["id"],
            "model_response": {"id": f"resp{i}", "choices": [{"message": message}]},
            "total_calls_in_response": 1,
        }
        return {"id": i, "source": "agent", "action": "run", "args": {}, "tool_call_metadata": tcm}

    def observation(i: int, call_id: str) -> dict[str, Any]:
        tcm = {"function_name": "execute_bash", "tool_call_id": call_id}
        return {
            "id": i,
            "source": "agent",
            "observation": "run",
            "content": "ok",
            "cause": i - 1,
            "tool_call_metadata": tcm,
        }

    def call(call_id: str) -> dict[str, Any]:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'},
        }

    signed = {"type": "thinking", "thinking": "List it.", "signature": "c2ln"}
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "Go"}},
        action(
            1,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("c1")],
                "reasoning_content": "Look around first.",
            },
        ),
        observation(2, "c1"),
        action(
            3,
            {
                "role": "assistant",
                "content": "Again.",
                "tool_calls": [call("c2")],
                "reasoning_content": "List it.",
                "thinking_blocks": [signed],
            },
        ),
        observation(4, "c2"),
    ]
    t = load(write("o.json", json.dumps(events)))
    assert t[1].blocks[0] == Thinking("Look around first.")
    assert t[1].meta["provider_family"] == "openhands"  # unsigned: sent back to no provider
    assert t[3].blocks[:2] == (Thinking("List it.", "c2ln"), Text("Again."))
    assert t[3].meta["provider_family"] == "anthropic"
    engine_payloads_valid(t)


def test_openhands_user_message_keeps_its_images(write: Write) -> None:
    """A V0 user message action carries the images the user attached in ``image_urls``
    (``data:`` URLs from the UI, or links); they were dropped."""
    png = "data:image/png;base64,iVBORw0KGgo="
    args = {"content": "What is wrong here?", "image_urls": [png, "https://x.test/s.jpg"]}
    events = [
        {"id": 0, "source": "user", "action": "message", "args": args},
        {"id": 1, "source": "agent", "action": "message", "args": {"content": "A typo."}},
    ]
    t = load(write("o.json", json.dumps(events)))
    assert t[0].blocks == (
        Text("What is wrong here?"),
        Image("image/png", data="iVBORw0KGgo="),
        Image("image/jpeg", url="https://x.test/s.jpg"),
    )
    engine_payloads_valid(t)
    events[0]["args"] = {"content": "x", "image_urls": [3]}
    with pytest.raises(TranscriptError, match=r"\[0\]\.args\.image_urls\[0\]: image url is 3"):
        load(write("bad.json", json.dumps(events)))


def test_openhands_history_of_action_observation_pairs(write: Write) -> None:
    """OpenHands evaluation outputs of 2024 (``compatibility_for_eval_history_pairs``) store
    ``history`` as ``[action, observation]`` pairs, with ``null`` placeholders where one side
    is missing. Such a file was a TranscriptError (a ``.json`` one was even taken for a
    SWE-agent trajectory)."""
    null_obs = {"observation": "null", "content": "", "extras": {}, "message": "No observation"}
    history = [
        [{"id": 0, "source": "user", "action": "message", "args": {"content": "Fix it"}}, null_obs],
        [
            {"id": 1, "source": "agent", "action": "run", "args": {"command": "ls"}},
            {"id": 2, "source": "agent", "observation": "run", "cause": 1, "content": "a.py",
             "extras": {"exit_code": 0}},
        ],
        [{"action": "null", "args": {}}, {"id": 3, "observation": "error", "content": "Oops"}],
    ]  # fmt: skip
    row = {"instance_id": "x__y-1", "history": history, "error": None}
    for name, text in (("o.jsonl", json.dumps(row) + "\n"), ("o.json", json.dumps(row))):
        t = load(write(name, text))
        assert t.source_format == "openhands"
        assert [m.role for m in t] == ["user", "assistant", "tool", "user"]
        assert t[2].tool_results[0].content == (Text("a.py"),)
        assert t[3].text == "Oops" and t.meta["skipped_events"] == 0
    engine_payloads_valid(t)
    row["history"] = [history[1], [{"action": "run"}, "oops"]]
    with pytest.raises(TranscriptError, match=r"history\[1\]: entry is \[\{'action': 'run'\}"):
        load(write("bad.jsonl", json.dumps(row) + "\n"))


def test_openhands_run_without_function_calling_keeps_calls_and_results(write: Write) -> None:
    """Older CodeAct runs have no ``tool_call_metadata``: every run/edit action and its
    observation was dropped (only the task and an error text were left)."""

    def ev(i: int, source: str, **kw: Any) -> dict[str, Any]:
        return {"id": i, "timestamp": "t", "source": source, "message": "", **kw}

    events = [
        ev(0, "user", action="message", args={"content": "Fix the test"}),
        ev(1, "agent", action="run", args={"command": "ls", "thought": "List files."}),
        ev(2, "agent", observation="run", cause=1, content="a.py", extras={"exit_code": 0}),
        ev(3, "agent", action="edit", args={"path": "a.py", "content": "x=2", "thought": ""}),
        ev(4, "agent", observation="error", cause=3, content="File not writable", extras={}),
        ev(5, "agent", action="change_agent_state", args={"agent_state": "running"}),
        ev(6, "agent", action="finish", args={"outputs": {}, "thought": "Done."}),
    ]
    t = load(write("o.json", json.dumps(events)))
    assert t.source_format == "openhands"
    assert [m.role for m in t] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert t[1].blocks == (Text("List files."), ToolCall("event_1", "run", {"command": "ls"}))
    assert t[2].tool_results[0].call_id == "event_1"
    assert t[2].tool_results[0].content == (Text("a.py"),)
    assert t[3].tool_calls == (ToolCall("event_3", "edit", {"path": "a.py", "content": "x=2"}),)
    assert t[4].tool_results[0].is_error
    assert t[4].tool_results[0].content == (Text("File not writable"),)
    assert t[5].text == "Done." and t.meta["skipped_events"] == 1
    engine_payloads_valid(t)
