"""Bad transcript input gets a TranscriptError naming the file and the value (issue 9, item 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxengine.errors import TranscriptError
from ctxengine.transcript import (
    FORMATS,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
    load,
)
from deep_values import nested_dict, recursion_limit

from .helpers import AIDER, CC_MAIN, DATA, OPENHANDS, PI, SWE_FC

OPENAI_LINES = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
]


@pytest.mark.parametrize("name", ["log.jsonl", "chat.aider.chat.history.md", "payload.json"])
def test_non_utf8_files_name_the_file_and_the_byte_offset(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    head = (
        b"# aider chat started at 2024-01-01\n#### hi\n"
        if name.endswith(".md")
        else b'{"role": "user", "content": "hi"}\n'
    )
    path.write_bytes(head + b'{"role": "user", "content": "caf\xe9"}\n')
    with pytest.raises(TranscriptError) as info:
        load(path)
    message = str(info.value)
    assert str(path) in message and f"byte offset {len(head) + 32}" in message
    line = head.count(b"\n") + 1
    assert f"line {line}" in message and "UTF-8" in message
    assert isinstance(info.value, ValueError)


def test_deeply_nested_json_is_a_transcript_error(tmp_path: Path) -> None:
    depth = 100_000
    path = tmp_path / "deep.jsonl"
    path.write_text('{"role": "user", "content": ' + "[" * depth + "]" * depth + "}\n")
    with pytest.raises(TranscriptError, match=r"deep\.jsonl line 1: JSON nested too deeply"):
        load(path)
    doc = tmp_path / "deep.json"
    doc.write_text("[" * depth + "]" * depth)
    with pytest.raises(TranscriptError, match="nested too deeply"):
        load(doc)


def test_deeply_nested_tool_arguments_are_a_transcript_error() -> None:
    depth = 100_000
    arguments = '{"a": ' + "[" * depth + "]" * depth + "}"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    with pytest.raises(TranscriptError, match="tool arguments: JSON nested too deeply"):
        load(messages)


def test_deeply_nested_python_data_is_a_transcript_error() -> None:
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(TranscriptError, match="nested too deeply"):
        load([{"role": "user", "content": nested}])


@pytest.mark.parametrize("fmt", ["pi", "claude-code"])
def test_a_log_format_matching_no_line_says_what_the_file_looks_like(
    tmp_path: Path, fmt: str
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in OPENAI_LINES), encoding="utf-8")
    with pytest.raises(TranscriptError) as info:
        load(path, format=fmt)
    message = str(info.value)
    assert f"0 messages matched format {fmt!r} in 2 JSONL entries" in message
    assert "it looks like 'openai'" in message
    assert len(load(path)) == 2  # auto-detection reads it


REAL_BY_FORMAT = {
    "pi": PI,
    "claude-code": CC_MAIN,
    "openhands": OPENHANDS,
    "aider": AIDER,
    "swe-agent": SWE_FC,
}


@pytest.mark.parametrize("given", FORMATS)
@pytest.mark.parametrize("real", sorted(REAL_BY_FORMAT))
def test_a_format_given_that_a_real_file_plainly_is_not_says_what_it_looks_like(
    real: str, given: str
) -> None:
    """``load(pi_log, format="aider")`` read the pi session as one aider reply of the whole
    file, and the other formats named a missing key with no word of the format the file is.
    Each refuses it the same way: the file, the format given, the one it looks like and the
    arguments that read it."""
    path = REAL_BY_FORMAT[real]
    if given == real:
        assert len(load(path, format=given)) > 0
        return
    with pytest.raises(TranscriptError) as info:
        load(path, format=given)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert f"format {given!r}" in message
    hint = f'; it looks like {real!r} (pass format="{real}", or format="auto")'
    assert message.endswith(hint), message
    assert message.count(str(path)) == 1


def test_a_format_given_for_a_file_of_no_known_format_keeps_its_reason(tmp_path: Path) -> None:
    """Forced on text that is no aider log (no session header, no input line), aider read it
    as one reply; a reader's own error on such a file is left as it was."""
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nnothing an agent wrote\n", encoding="utf-8")
    with pytest.raises(TranscriptError) as info:
        load(notes, format="aider")
    assert str(info.value) == (
        f"{notes}: format 'aider' does not read it (no '# aider chat started at' line and no "
        "'#### ' input line); its format was not recognized; expected a 'aider' file"
    )
    with pytest.raises(TranscriptError, match=r"notes\.md: invalid JSON|line 1: invalid JSON"):
        load(notes, format="openai")


def test_an_aider_log_without_its_session_header_still_loads_as_aider(tmp_path: Path) -> None:
    """A log cut out of a longer one (its header left behind) keeps aider's input lines."""
    part = tmp_path / "part.md"
    part.write_text("#### list the files  \n\nHere they are.\n", encoding="utf-8")
    assert [m.role for m in load(part, format="aider")] == ["user", "assistant"]


def test_the_real_pi_and_claude_code_logs_still_load_with_their_format() -> None:
    assert len(load(PI, format="pi")) > 0
    assert len(load(CC_MAIN, format="claude-code")) > 0


def test_a_markdown_file_without_aider_markers_is_not_an_aider_log(tmp_path: Path) -> None:
    readme = DATA / "README.md"
    with pytest.raises(TranscriptError, match="no '# aider chat started at' line"):
        load(readme)
    log = tmp_path / "x.md"
    log.write_text("# aider chat started at 2024-05-01 10:00:00\n\n#### hi\n\nhello\n")
    assert [m.role for m in load(log)] == ["user", "assistant"]


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: Message.user(None), r"user message block 0: Text.text is NoneType None"),
        (lambda: Message.user(5), r"Text.text is int 5; expected a str"),
        (lambda: Message.assistant("", [ToolCall(None, "f", {})]), r"ToolCall.id is NoneType"),
        (lambda: Message.assistant("", [ToolCall("c", 3, {})]), r"ToolCall.name is int 3"),
        (lambda: Message.assistant("", [ToolCall("c", "f", [1])]), r"arguments is list"),
        (lambda: Message.tool("c", None), r"tool output for 'c' is NoneType"),
        (lambda: Message.tool(7, "out"), r"ToolResult call_id is int 7"),
        (lambda: Message.tool("c", [Text(b"x")]), r"a Text item's text is bytes"),
        (lambda: Image(5, "AAAA"), r"Image.media_type is int 5"),  # type: ignore[arg-type]
        (lambda: Image("image/png", b"\x89PNG"), r"Image \('image/png'\) data is bytes"),  # type: ignore[arg-type]
        (lambda: Image("application/pdf", url=7), r"url is int 7"),  # type: ignore[arg-type]
        (lambda: ToolResult("c", None), r"ToolResult 'c': content is NoneType None"),  # type: ignore[arg-type]
        (lambda: ToolResult("c", "out"), r"ToolResult 'c': content is str 'out'"),  # type: ignore[arg-type]
        (
            lambda: Message("assistant", (Thinking("t", 5), Text("x"))),  # type: ignore[arg-type]
            r"assistant message block 0: Thinking.signature is int 5",
        ),
        (lambda: Message("user", (Text("x"),), meta=None), r"'user' message meta is NoneType"),  # type: ignore[arg-type]
    ],
)
def test_a_hand_built_message_with_a_field_of_the_wrong_type_is_refused(make, why) -> None:  # type: ignore[no-untyped-def]
    # they were taken, then failed deep inside a render (AttributeError, TypeError)
    with pytest.raises(TranscriptError, match=why):
        make()


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
def test_hand_built_media_thinking_and_meta_of_the_wrong_type_never_reach_a_render(
    provider: str,
) -> None:
    """Each was taken by ``Session.extend`` and then failed inside the render, outside the
    error tree: ``Image(5, ...)`` (AttributeError: ``media_type.startswith``), a signature that
    is no str (AttributeError: ``isascii``), ``meta=None`` (TypeError in the OpenAI exporters);
    ``ToolResult(content=None)`` failed when built, with a TypeError."""
    from ctxengine import ContextEngine
    from ctxengine.errors import CtxEngineError

    bad = [
        lambda: [Message("user", (Text("look"), Image(5, "AAAA")))],  # type: ignore[arg-type]
        lambda: [Message("assistant", (Thinking("t", 5), Text("x")))],  # type: ignore[arg-type]
        lambda: [Message("assistant", (Text("x"),), meta=None)],  # type: ignore[arg-type]
        lambda: [Message("tool", (ToolResult("c1", None),))],  # type: ignore[arg-type]
    ]
    for make in bad:
        s = ContextEngine("gpt-4o", 1000).session_sync("bad-field")
        s.extend([Message.user("first")])
        with pytest.raises(CtxEngineError):
            s.extend([Message.user("go"), *make()])
        assert [m.text for m in s.messages] == ["first"]
        assert s.render(provider).tokens > 0


def test_tool_arguments_that_are_not_json_are_refused_and_a_session_adds_nothing() -> None:
    from ctxengine import ContextEngine

    call = ToolCall("c1", "f", nested_dict())
    with (
        recursion_limit(),
        pytest.raises(TranscriptError, match=r"tool call 'c1' \('f'\).*recursion"),
    ):
        call.arguments_json  # noqa: B018
    for args in ({"a": {1}}, {"a": object()}):
        call = ToolCall("c1", "f", args)
        with pytest.raises(TranscriptError, match=r"tool call 'c1' \('f'\).*not JSON"):
            Transcript((Message.user("x"), Message.assistant("", [call]))).to("openai")
        s = ContextEngine("gpt-4o", 1000).session_sync("bad-args")
        s.extend([Message.user("first")])
        with pytest.raises(TranscriptError, match="arguments are not JSON"):
            s.extend([Message.user("x"), Message.assistant("", [call])])
        assert [m.text for m in s.messages] == ["first"]  # nothing half-added
        assert s.render().tokens > 0


def test_a_tool_result_name_that_is_no_str_is_refused() -> None:
    from ctxengine.transcript import ToolResult

    with pytest.raises(TranscriptError, match=r"ToolResult 'c1': name is int 5"):
        ToolResult("c1", (Text("out"),), name=5)  # type: ignore[arg-type]


def test_ingest_checks_every_call_before_adding_any() -> None:
    from ctxengine import ContextEngine

    s = ContextEngine("gpt-4o", 1000).session_sync("ingest-bad")
    bad = ToolCall("c1", "f", {"a": {1}})
    with pytest.raises(TranscriptError, match="arguments are not JSON"):
        s.ingest([Message.user("first"), Message.assistant("", [bad])])
    assert s.messages == []


def _jsonl(path: Path, *rows: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_values_of_the_wrong_json_kind_in_agent_logs_load_or_name_the_field(
    tmp_path: Path,
) -> None:
    """A list or object where a log has a string (a pi ``parentId``, a first line's ``type``,
    an OpenHands ``action``) or a list (V1 ``tools``) raised a TypeError from a set or dict
    lookup instead of loading or naming the field."""
    head = {"type": "session", "version": 3, "id": "s"}
    user = {"role": "user", "content": "hi"}
    parent = _jsonl(
        tmp_path / "p.jsonl",
        head,
        {"type": "message", "id": "a", "parentId": None, "message": user},
        {"type": "message", "id": "b", "parentId": ["a"], "message": user},
    )
    with pytest.raises(TranscriptError, match=r"line 3: parentId is \['a'\]; expected the id"):
        load(parent)
    entry = _jsonl(tmp_path / "i.jsonl", head, {"type": "message", "id": {}, "message": user})
    with pytest.raises(TranscriptError, match=r"line 2: id is \{\}; expected a string"):
        load(entry)
    with pytest.raises(TranscriptError, match="cannot detect the transcript format"):
        load(_jsonl(tmp_path / "t.jsonl", {"type": ["user"], "x": 1}))
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "Go"}},
        {"id": 1, "source": "agent", "action": ["run"], "args": {}},
    ]
    (tmp_path / "o.json").write_text(json.dumps(events), encoding="utf-8")
    assert [m.text for m in load(tmp_path / "o.json")] == ["Go"]
    v1 = {"kind": "SystemPromptEvent", "id": "s0", "source": "agent", "tools": 5,
          "system_prompt": {"type": "text", "text": "Be brief."}}  # fmt: skip
    assert load([v1], "openhands")[0].text == "Be brief."


@pytest.mark.parametrize("source", [CC_MAIN, PI], ids=["claude-code", "pi"])
def test_a_session_file_still_being_written_loads_without_its_torn_last_line(
    tmp_path: Path, source: Path
) -> None:
    """A harness writes a session line by line: read while it writes (or after it was killed
    mid-line), the file ends in a torn line. Its complete lines load, as the harness's own
    reader takes them, and the torn line's number is in the transcript's meta (the load
    failed whole before); torn anywhere else, or ended by a newline, it is still an error."""
    text = source.read_text(encoding="utf-8")
    whole = load(source)
    lines = text.rstrip("\n").split("\n")
    torn = tmp_path / f"torn{source.suffix}"
    torn.write_text("\n".join([*lines[:-1], lines[-1][: len(lines[-1]) // 2]]), encoding="utf-8")
    cut = tmp_path / f"cut{source.suffix}"
    cut.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    got, expected = load(torn), load(cut)
    assert got.messages == expected.messages and len(got.messages) <= len(whole.messages)
    assert got.meta["torn_line"] == len(lines) and "torn_line" not in whole.meta
    # not the last line, or a complete line that is not JSON: a damaged file
    torn.write_text(text[: len(text) // 2] + "\n" + text[len(text) // 2 :], encoding="utf-8")
    with pytest.raises(TranscriptError, match="invalid JSON"):
        load(torn)
    torn.write_text("\n".join([*lines[:-1], lines[-1][:-2]]) + "\n", encoding="utf-8")
    with pytest.raises(TranscriptError, match=f"line {len(lines)}: invalid JSON"):
        load(torn)


def test_a_torn_last_line_cut_inside_a_character_is_torn_too(tmp_path: Path) -> None:
    """A harness killed inside a multi-byte character of its last line (Japanese text, an
    emoji): the bytes after the last newline are no UTF-8, and the load failed whole as a file
    that is not UTF-8; that line is torn like any other, and auto-detection reads the format."""
    lines = PI.read_text(encoding="utf-8").rstrip("\n").split("\n")
    head = "\n".join(lines[:-1]).encode() + b"\n"
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(head + '{"type": "message", "text": "日本'.encode()[:-1])
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(head)
    got = load(torn)
    assert got.messages == load(cut).messages and got.meta["torn_line"] == len(lines)
    # not at the end: still a file that is not UTF-8
    torn.write_bytes(b'{"x": "\xe6\x97"}\n' + head)
    with pytest.raises(TranscriptError, match="not UTF-8 text at byte offset 7"):
        load(torn, format="pi")


def test_a_pi_session_with_no_message_yet_loads_as_an_empty_transcript(tmp_path: Path) -> None:
    """pi writes its session header when a session starts: a file holding it alone was refused
    ("0 messages matched format 'pi' ... expected at least one message entry"), though a
    source holding no message loads as an empty transcript (docs/transcripts.md)."""
    header = PI.read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "new-session.jsonl"
    path.write_text(header + "\n", encoding="utf-8")
    for fmt in ("auto", "pi"):
        t = load(path, format=fmt)
        assert t.messages == () and t.source_format == "pi"


def test_an_image_takes_a_str_subclass_as_its_media_type() -> None:
    """A ``StrEnum`` member is a str: refused by a type-identity check, where it rendered."""
    import enum

    class Media(str, enum.Enum):
        PNG = "image/png"

    image = Image(Media.PNG, data="iVBORw0KGgo=")
    payload = Transcript((Message("user", (Text("see"), image)),)).to("anthropic")
    assert payload["messages"][0]["content"][1]["source"]["media_type"] == "image/png"
