"""Bad transcript input gets a TranscriptError naming the file and the value (issue 9, item 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxengine.errors import TranscriptError
from ctxengine.transcript import load

from .helpers import CC_MAIN, DATA, PI

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
