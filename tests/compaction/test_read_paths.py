"""A message's reading for the key facts (``_read``) takes a path of its own per role, and
skips the file steps' general reader (``_file_ops``) when the text holds no action; the path
arguments' reader asks the keys first; ``_file_steps`` tells whether the harness showed an
open file. Each gives exactly what the general definitions below give (the code as it was
written before), on every message of the shared sessions and on hand-made edge cases."""

from __future__ import annotations

from functools import cache
from typing import Any
from unittest import mock

import pytest

from ctxengine.compaction import facts as F
from ctxengine.compaction.requests import request_text
from ctxengine.transcript import Message, Text, ToolCall, ToolResult, load_all

from .helpers import all_files


def _ref_read(m: Message, text: str) -> F._MessageFacts:
    """``_read`` before its per-role paths."""
    role = m.role
    if m.meta.get(F.SUMMARY_META) or (role == "user" and text.startswith(F._SUMMARY_HEAD)):
        return F._MessageFacts(text, carried=F.parse_sections(text))
    facts = F._MessageFacts(text, files=F._file_ops(m, text))
    if role == "tool":
        results = m.tool_results
        facts.errors = tuple([(r.call_id, r.name, r.text) for r in results if r.is_error])
        facts.succeeded = tuple([r.call_id for r in results if not r.is_error])
        return facts
    if role == "system" or (role == "user" and not text.strip()):
        return facts
    idents = F._identifiers(text)
    if role == "assistant":
        calls = m.tool_calls
        if calls:
            facts.calls = tuple([(c.id, c.name) for c in calls])
            for c in calls:
                idents += F._identifiers(c.arguments_json)
    else:
        facts.request = request_text(text, m.meta)
    facts.idents = idents
    return facts


def _ref_argument_paths(args: dict[str, Any]) -> list[str]:
    """``_argument_paths`` without its look at the keys first."""
    paths = []
    for key in F._PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            path = F._clean_path(value)
            if path:
                paths.append(path)
        elif isinstance(value, list):
            paths.extend(p for p in (F._clean_path(str(v)) for v in value) if p)
    return paths


def _ref_replay(steps: list[list[F._FileOp]]) -> tuple[list[str], list[str], str | None]:
    """``_replay`` with the open file's ``O`` step looked for apart."""
    read: list[str] = []
    modified: list[str] = []
    current: str | None = None
    shown = False
    for ops in steps:
        for kind, value in ops:
            if kind in {"C", "O"}:
                current = value
            else:
                target = read if kind == "R" else modified
                for v in value if kind in {"R", "W"} else [current]:
                    if v and v not in target:
                        target.append(v)
        shown = shown or any(kind == "O" for kind, _ in ops)
    return read, modified, current if shown else None


def _fields(mf: F._MessageFacts) -> tuple[Any, ...]:
    return (
        mf.text,
        mf.carried,
        mf.request,
        mf.idents,
        mf.calls,
        mf.errors,
        mf.succeeded,
        mf.files,
    )


@cache
def _sessions() -> list[tuple[str, list[Message]]]:
    return [
        (f"{path.parent.name}/{path.name[:30]}#{n}", list(t))
        for path in all_files()
        for n, t in enumerate(load_all(path))
    ]


_EDGE: list[Message] = [
    # an action in the text beside a call; several calls; an opened file shown in the text
    Message(
        "assistant",
        (
            Text("```\nopen src/a.py\n```\n(Open file: src/a.py)"),
            ToolCall("c1", "bash", {"command": "cat b.txt > c.txt"}),
            ToolCall("c2", "edit", {"path": "src/d.py", "old": "x", "new": "y"}),
        ),
    ),
    Message(
        "assistant",
        (
            ToolCall("c3", "Write", {"file_path": "e.md", "path": "f.md"}),
            ToolCall("c4", "read_many_files", {"paths": ["g.py"], "file": ["h.py", "-x"]}),
            ToolCall("c5", "apply_patch", "*** Begin Patch\n*** Update File: i.py\n"),
            ToolCall("c6", "write", {"content": "no path: the current file"}),
        ),
    ),
    Message("assistant", (ToolCall("c7", "shell", {"cmd": ["sed", "-i", "s/a/b/", "j.py"]}),)),
    Message("assistant", (Text(""),)),
    # an aider edit block (aider's SEARCH/REPLACE format), and fenced text without one
    Message(
        "assistant",
        (Text("src/x.py\n```python\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```"),),
    ),
    Message("assistant", (Text("y.py\n```\nplain code\n```"),)),
    Message("assistant", (Text("see https://x.org/k and 0123abcd → ünï/l.py"),)),
    # one result that shows the open file, one that failed, several
    Message("tool", (ToolResult("c1", (Text("done\n(Open file: /r/m.py)\n"),)),)),
    Message("tool", (ToolResult("c2", (Text("error: no such file"),), is_error=True),)),
    Message(
        "tool",
        (
            ToolResult("c3", (Text("ok"),)),
            ToolResult("c4", (Text("failed"),), is_error=True, name="read_many_files"),
            ToolResult("c5", (Text("(Open file: n.py) (Current directory: /r)"),)),
        ),
    ),
    Message("user", (Text("   "),)),
    Message("user", (Text("(Open file: o.py)\nfix PROJ-12 in p/q.py"),)),
    Message("system", (Text("rules: see s/t.md"),)),
    Message("user", (Text("[Summary of the earlier conversation: 3 messages]\n## Files\n- u"),)),
]


@pytest.mark.parametrize("name", [n for n, _ in _sessions()] + ["edge cases"])
def test_read_paths_equal_the_general_reading(name: str) -> None:
    messages = _EDGE if name == "edge cases" else dict(_sessions())[name]
    steps = []
    for i, m in enumerate(messages):
        text = m.text
        got = F._read(m, text)
        assert _fields(got) == _fields(_ref_read(m, text)), (name, i, m.role)
        steps.append(got.files)
        for call in m.tool_calls:
            if isinstance(call.arguments, dict):
                assert F._argument_paths(call.arguments) == _ref_argument_paths(call.arguments)
    assert F._replay(steps) == _ref_replay(steps), name


def test_edge_cases_take_every_path() -> None:
    """The edge cases read files, show an open file, fail and succeed (else the test above
    would compare empty readings there)."""
    read = [F._read(m, m.text) for m in _EDGE]
    assert any(op[0] == "O" for mf in read for op in mf.files)
    assert any(op[0] == "WC" for mf in read for op in mf.files)
    assert any(mf.errors for mf in read) and any(mf.succeeded for mf in read)
    assert any(len(mf.calls) > 1 for mf in read) and any(mf.carried for mf in read)
    assert F._replay([mf.files for mf in read])[2] is not None


def test_text_that_is_not_ascii_is_read_as_python_reads_it_by_either_path() -> None:
    """``_mixed_identifiers`` reads the ASCII pieces in one native call when the words around
    the other characters hold no identifier, else piece by piece: on every text of the shared
    sessions that is not ASCII (message texts and call arguments) and on hand-made ones, each
    path is taken and gives the Python reading."""
    texts = {
        t
        for _, messages in _sessions()
        for m in messages
        for t in (m.text, *(c.arguments_json for c in m.tool_calls))
        if not t.isascii()
    }
    texts |= {"→ see src/a.py", "fixed é/a.py and b/c.py", "ok ✓\nPROJ-12 → deadbeef1 done"}
    paths = set()
    for text in sorted(texts):
        with mock.patch.object(F, "read_identifiers", wraps=F.read_identifiers) as joined:
            got = F._mixed_identifiers(text)
        assert got == F._scanned_identifiers(text), text[:80]
        paths.add(joined.called)
    assert paths == {True, False}


def test_aider_edit_blocks_are_read_where_the_pattern_finds_them() -> None:
    """The aider pattern runs only on text holding its marker: every fenced assistant text of
    the shared sessions and the edge cases gives the pattern's files as its last ``W`` step."""
    texts = [m.text for _, ms in _sessions() for m in ms if m.role == "assistant"]
    fenced = [t for t in [*texts, *(m.text for m in _EDGE)] if "```" in t]
    for text in fenced:
        ops = F._file_ops(Message("assistant", (Text(text),)), text)
        assert [v for k, v in ops if k == "W"][-1] == F._AIDER_EDIT.findall(text)
    assert any(F._AIDER_EDIT.findall(t) for t in fenced)
