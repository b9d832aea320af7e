"""Broken or unknown input raises TranscriptError naming where, what and what was expected."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxengine.errors import AdapterError, CtxEngineError, TranscriptError
from ctxengine.transcript import Message, Transcript, load, load_all

Write = Callable[[str, str], Path]


def test_transcript_error_is_a_value_error() -> None:
    assert issubclass(TranscriptError, ValueError) and issubclass(TranscriptError, CtxEngineError)


def test_unknown_format_name_lists_the_valid_ones() -> None:
    with pytest.raises(TranscriptError, match=r"unknown format 'langchain'.*'claude-code'"):
        load([], format="langchain")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="no such file"):
        load(tmp_path / "nope.jsonl")


def test_a_device_or_pipe_is_not_called_missing(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for path in (fifo, Path(os.devnull)):
        with pytest.raises(TranscriptError, match=r"not a regular file; expected a transcript"):
            load(path)


def test_unknown_extension(write: Write) -> None:
    with pytest.raises(TranscriptError, match=r"extension is '\.txt'; expected \.jsonl"):
        load(write("log.txt", "hello"))


def test_invalid_json_line_names_file_and_line(write: Write) -> None:
    path = write("s.jsonl", '{"type": "session"}\n\n{"type": "message", oops}\n')
    with pytest.raises(TranscriptError, match=r"s\.jsonl line 3: invalid JSON .*expected one JSON"):
        load(path)


def test_jsonl_line_that_is_not_an_object(write: Write) -> None:
    with pytest.raises(TranscriptError, match=r"line 2: value is \[1, 2\]; expected a JSON object"):
        load(write("s.jsonl", '{"type": "session"}\n[1, 2]\n'))


def test_invalid_json_document_names_the_line(write: Write) -> None:
    with pytest.raises(TranscriptError, match=r"run\.traj line 2: invalid JSON"):
        load(write("run.traj", '{"history":\n [}'))


def test_pi_unknown_role_names_the_line(write: Write) -> None:
    rows = [{"type": "session"}, {"type": "message", "message": {"role": "wizard", "content": []}}]
    path = write("p.jsonl", "\n".join(json.dumps(r) for r in rows))
    with pytest.raises(
        TranscriptError, match=r"p\.jsonl line 2\.message\.role: role is 'wizard'; expected"
    ):
        load(path)


def test_pi_parent_chain_loop(write: Write) -> None:
    """A ``parentId`` chain that loops: pi's walk to the root would never end (a missing
    parent is no error: see test_writer_readings)."""
    user = {"role": "user", "content": "x"}
    rows = [
        {"type": "session", "version": 3},
        {"type": "message", "id": "a", "parentId": "b", "message": user},
        {"type": "message", "id": "b", "parentId": "a", "message": user},
    ]
    with pytest.raises(TranscriptError, match=r"line 3: parentId chain is 'b'; expected no cy"):
        load(write("p.jsonl", "\n".join(json.dumps(r) for r in rows)))


def test_claude_code_record_without_message(write: Write) -> None:
    rows = [{"type": "user", "uuid": "u", "parentUuid": None, "sessionId": "s"}]
    with pytest.raises(TranscriptError, match=r"cc\.jsonl line 1: key 'message' is 'missing'"):
        load(write("cc.jsonl", json.dumps(rows[0])))


_CC_USER = {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user"}}
_CC_CALL = {"id": "m1", "role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]}


@pytest.mark.parametrize(
    ("record", "pattern"),
    [
        ({"type": "assistant", "uuid": "a1", "message": 5}, r"line 2\.message: value is 5"),
        ({**_CC_USER, "uuid": {"x": 1}}, r"line 2\.uuid: uuid is \{'x': 1\}; expected a string"),
        ({**_CC_USER, "parentUuid": 7}, r"line 2\.parentUuid: parentUuid is 7; expected a str"),
        (
            {"type": "assistant", "uuid": "a1", "message": {**_CC_CALL, "id": ["x"]}},
            r"line 2\.message\.id: message id is \['x'\]; expected a string or null",
        ),
        (
            {
                **_CC_USER,
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": {}}],
                },
            },
            r"line 2\.message\.content\[0\]\.tool_use_id: value is \{\}; expected a string",
        ),
    ],
)
def test_claude_code_wrong_typed_field_names_line_and_field(
    write: Write, record: dict[str, Any], pattern: str
) -> None:
    """The branch walk hashes ids and reads ``message`` as an object: a wrong-typed field is
    a TranscriptError naming where it is, not a TypeError from inside the walk."""
    first = {**_CC_USER, "message": {"role": "user", "content": "hi"}}
    path = write("cc.jsonl", "\n".join(json.dumps(r) for r in (first, record)))
    with pytest.raises(TranscriptError, match=r"cc\.jsonl " + pattern):
        load(path, format="claude-code")


@pytest.mark.parametrize(
    ("data", "fmt", "pattern"),
    [
        ([{"content": "x"}], "openai", r"\[0\]: key 'role' is 'missing'"),
        (
            [{"role": "user", "content": [{"type": "text"}]}],
            "openai",
            r"\[0\]\.content\[0\]: key 'text' is 'missing'; expected a string",
        ),
        (
            [{"role": "assistant", "content": [{"type": "image_url", "image_url": "x"}]}],
            "openai",
            r"\[0\]\.content\[0\]: content part type is 'image_url'; expected a text part",
        ),
        (
            [{"role": "user", "content": [{"text": "no type"}]}],
            "openai",
            r"\[0\]\.content\[0\]: content part type is None; expected a text or image",
        ),
        ([{"role": "narrator", "content": "x"}], "openai", r"\[0\]\.role: role is 'narrator'"),
        (
            [{"role": "assistant", "tool_calls": [{"id": "a"}]}],
            "openai",
            r"tool_calls\[0\]: key 'function' is 'missing'",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "f"}}]}],
            "openai",
            r"tool call id is ''; expected a non-empty string",
        ),
        (
            [{"role": "user", "content": [{"text": "no type"}]}],
            "anthropic",
            r"\[0\]\.content\[0\]\.type: user block type is None",
        ),
        (
            [{"role": "user", "content": [{"type": "document"}]}],
            "anthropic",
            r"\[0\]\.content\[0\]: key 'source' is 'missing'; expected an object",
        ),
        (
            [{"role": "assistant", "content": [{"type": 7}]}],
            "anthropic",
            r"\[0\]\.content\[0\]\.type: assistant block type is 7",
        ),
        (
            [{"role": "assistant", "content": [{"type": "thinking"}]}],
            "anthropic",
            r"\[0\]\.content\[0\]: key 'thinking' is 'missing'",
        ),
        (
            [{"role": "system", "content": "x"}],
            "anthropic",
            r"role is 'system'; expected 'user' or 'assistant'",
        ),
        (
            [{"role": "tool", "parts": []}],
            "gemini",
            r"\[0\]\.role: role is 'tool'; expected 'user' or 'model'",
        ),
        (
            {"contents": [{"role": "user", "text": "hello"}]},
            "gemini",
            r"contents\[0\]: key 'parts' is 'missing'; expected an array under 'parts'",
        ),
        (
            [{"role": "model", "parts": [{"text": 5}]}],
            "gemini",
            r"parts\[0\]: part is .*expected text, thought, functionCall",
        ),
        (
            [{"type": "reasoning", "summary": 1}],
            "openai-responses",
            r"\[0\]\.summary: value is 1; expected a JSON array",
        ),
        (
            [{"type": "web_search_call"}],
            "openai-responses",
            r"\[0\]\.type: item type is 'web_search_call'",
        ),
        ({"history": "nope"}, "swe-agent", r"history: value is 'nope'; expected a JSON array"),
        (
            [{"id": 1, "source": "agent"}],
            "openhands",
            r"\[0\]: event is .*expected an action or an observation",
        ),
    ],
)
def test_broken_entries_name_index_value_and_expectation(data: Any, fmt: str, pattern: str) -> None:
    with pytest.raises(TranscriptError, match=pattern):
        load(data, format=fmt)


def test_a_claude_code_record_off_the_branch_without_a_tool_use_id_does_not_fail_the_file(
    tmp_path: Path,
) -> None:
    """Only what the branch walk compares is checked: a result of an abandoned branch with
    no ``tool_use_id`` (never converted) leaves the active branch loading as before."""

    def record(kind: str, uuid: str, parent: str | None, content: object) -> dict[str, Any]:
        message = {"role": kind, "content": content}
        if kind == "assistant":
            message["id"] = "m1"
        return {"type": kind, "uuid": uuid, "parentUuid": parent, "message": message}

    stale = [{"type": "tool_result", "content": "stale"}]  # no tool_use_id
    lines = [
        record("user", "u1", None, "hello"),
        record("assistant", "a1", "u1", [{"type": "text", "text": "hi"}]),
        record("user", "x1", "u1", stale),  # an abandoned branch
        record("user", "u2", "a1", "again"),
    ]
    path = tmp_path / "cc.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert [m.text for m in load(path, format="claude-code").messages] == ["hello", "hi", "again"]


@pytest.mark.parametrize("empty", [{"role": "model"}, {"role": "model", "parts": None}])
def test_a_gemini_content_with_no_parts_is_an_empty_turn(empty: dict[str, object]) -> None:
    """What the API returns for an empty, SAFETY or MAX_TOKENS candidate (and the SDK's
    ``Content(parts=None)`` dumped without its nulls) holds nothing to lose: the history
    around it loads."""
    contents = [{"role": "user", "parts": [{"text": "2+2?"}]}, empty]
    contents.append({"role": "user", "parts": [{"text": "again?"}]})
    got = load({"contents": contents}, format="gemini")
    assert [m.text for m in got.messages if m.role == "user"] == ["2+2?", "again?"]


def test_chat_message_in_a_gemini_list_is_not_read_as_an_empty_content() -> None:
    """One ``parts`` item makes the list Gemini; a chat-style item in it has no ``parts`` and
    would load as an empty message, its text lost, so it is an error naming the item."""
    mixed = [{"role": "user", "content": "2+2?"}, {"role": "model", "parts": [{"text": "4"}]}]
    with pytest.raises(TranscriptError, match=r"contents\[0\]: key 'parts' is 'missing'"):
        load(mixed)


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({"prompt": "x"}, r"payload keys are \['prompt'\]; expected 'messages', 'input'"),
        ([1, 2], r"<list>\[0\] is 1; expected a message dict"),
        ("not a path", r"no such file"),
        (42, r"cannot detect the transcript format of 42"),
    ],
)
def test_undetectable_input(data: Any, pattern: str) -> None:
    with pytest.raises(TranscriptError, match=pattern):
        load(data)


def test_file_only_format_from_data() -> None:
    with pytest.raises(TranscriptError, match="format 'pi' is read from a file path"):
        load([{"type": "session"}], format="pi")


def test_session_out_of_range_and_bad_view() -> None:
    with pytest.raises(TranscriptError, match=r"session is 5; expected an index below 1"):
        load([{"role": "user", "content": "x"}], session=5)
    with pytest.raises(TranscriptError, match=r"view is 'all'; expected 'full' or 'model'"):
        load_all([], view="all")


@pytest.mark.parametrize("session", ["1", 1.0, True])
def test_session_of_the_wrong_kind_names_the_value(session: Any) -> None:
    """Not an index: a TranscriptError naming it (a string indexed the list with TypeError,
    True silently picked the second session)."""
    one = [{"role": "user", "content": "x"}]
    with pytest.raises(
        TranscriptError, match=rf"session is {re.escape(repr(session))}; expected an int"
    ):
        load(one, session=session)


def test_empty_jsonl(write: Write) -> None:
    with pytest.raises(TranscriptError, match="file is empty"):
        load(write("e.jsonl", "\n"))


def test_model_invariants_raise_transcript_error() -> None:
    from ctxengine.transcript import Text, ToolCall, ToolResult

    with pytest.raises(TranscriptError, match="system message block 0 is ToolCall"):
        Message("system", (ToolCall("a", "f", {}),))
    with pytest.raises(TranscriptError, match="user message block 0 is ToolResult"):
        Message("user", (ToolResult("a", ()),))
    with pytest.raises(TranscriptError, match="tool message block 0 is Text"):
        Message("tool", (Text("x"),))
    with pytest.raises(TranscriptError, match="role is 'bot'"):
        Message("bot", ())  # type: ignore[arg-type]
    with pytest.raises(TranscriptError, match=r"messages\[0\] is dict; expected Message"):
        Transcript(({"role": "user"},))  # type: ignore[arg-type]


def test_render_errors_are_adapter_errors() -> None:
    t = Transcript((Message.user("x"),))
    with pytest.raises(AdapterError, match=r"unknown provider 'mistral'; expected one of"):
        t.to("mistral")
    with pytest.raises(AdapterError, match=r"unknown option\(s\) \['temperature'\]"):
        t.to("openai", temperature=0)
    with pytest.raises(AdapterError, match="cache_breakpoints is 5"):
        t.to("anthropic", cache_breakpoints=5)
    with pytest.raises(AdapterError, match="cache_ttl is '2h'"):
        t.to("anthropic", cache_ttl="2h")
    with pytest.raises(AdapterError, match="id_mode is 'x'"):
        t.to("openai", id_mode="x")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("cache_breakpoints", True, "cache_breakpoints is True"),
        ("hygiene", "no", r"hygiene is 'no' \(str\); expected True or False"),
        ("hygiene", 0, r"hygiene is 0 \(int\); expected True or False"),
    ],
)
async def test_render_options_of_the_wrong_kind_are_refused_naming_them(
    option: str, value: Any, message: str
) -> None:
    """``hygiene="no"`` is truthy and ran hygiene; ``cache_breakpoints=True`` placed one
    marker: both were taken as given, by a transcript's render and by a session's."""
    from ctxengine import Budget, ContextEngine

    t = Transcript((Message.user("x"),))
    with pytest.raises(AdapterError, match=message):
        t.to("anthropic", **{option: value})
    engine = ContextEngine("gpt-4o", Budget(total=1_000))
    async with engine.session("s") as s:
        s.extend([Message.user("x")])
        with pytest.raises(AdapterError, match=message):
            await s.render("anthropic", **{option: value})
        assert (await s.render("anthropic")).payload["messages"]  # the session renders on


@pytest.mark.parametrize("kind", [{"text": "hi"}, ["text"]])
def test_a_part_type_that_is_no_string_is_named_not_a_type_error(kind: Any) -> None:
    import ctxengine

    data = [{"role": "user", "content": [{"type": kind, "text": "hi"}]}]
    with pytest.raises(TranscriptError, match=r"content\[0\]: content part type is"):
        load(data)
    with pytest.raises(TranscriptError, match=r"content\[0\]: content part type is"):
        ctxengine.fit(data, model="gpt-4o", budget=1000)
    # a part passed through as it came (a reasoning summary) is counted, not refused
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": kind, "text": "x"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    for provider in ("openai-responses", "gemini", "anthropic"):
        out = ctxengine.fit(items, model="gpt-4o", budget=2000, provider=provider)
        assert out.tokens <= 2000
