"""The cold-render fast paths give exactly what the straightforward definitions give.

- key facts read once per message and merged in order == the whole-stretch reading (the
  definition below, as it was written before the per-message reading; a user message's
  request is ``request_text``'s, as it is since observations and the harness's text are
  not requests);
- the summary cap sized by pieces == re-rendering and re-counting the summary per step (the
  same function given a counter it cannot see into);
- exact o200k/cl100k counts add up at the split points that sizing relies on;
- transcript grains made without ``check()`` == grains made by the constructor;
- whole renders of every shared session with the fast paths on == with them off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxengine import Budget, BudgetError, ContextEngine, cache_info, clear_cache
from ctxengine.assemble.history import transcript_grain
from ctxengine.compaction import (
    ExtractiveSummarizer,
    KeyFacts,
    build_parts,
    capped_summary,
    extract_facts,
    extractive,
    files_touched,
    pipeline,
    sections,
    summary_message,
)
from ctxengine.compaction import facts as F
from ctxengine.compaction.requests import request_text
from ctxengine.grain import ContextGrain
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, Text, ToolCall, ToolResult, load_all

from .helpers import all_files, failed_calls

ENCODINGS = ("o200k_base", "cl100k_base")


def _sessions() -> list[tuple[str, list[Message]]]:
    out = []
    for path in all_files():
        for n, t in enumerate(load_all(path)):
            if len(t) >= 2:
                out.append((f"{path.parent.name}/{path.name[:30]}#{n}", list(t)))
    return out


SESSIONS = _sessions()


# -- the straightforward definitions ---------------------------------------------------------


def _add(target: list[str], items: Sequence[str]) -> None:
    for item in items:
        if item and item not in target:
            target.append(item)


def _reference_files(messages: Sequence[Message]) -> tuple[list[str], list[str]]:
    read, modified, _ = _reference_reading(messages)
    return read, modified


def _reference_reading(messages: Sequence[Message]) -> tuple[list[str], list[str], str | None]:
    """Files read, files modified, and the file open at the end when the harness showed one:
    an earlier summary's ``Open:`` line, or SWE-agent's ``(Open file: …)``."""
    read: list[str] = []
    modified: list[str] = []
    current: str | None = None
    shown = False
    for m in messages:
        if F.is_summary(m):
            files = F.parse_sections(m.text).get("Files", [])
            opened = [x.removeprefix("Open: ") for x in files if x.startswith("Open: ")]
            if opened:
                current, shown = opened[-1], True
            continue
        if m.role == "assistant":
            for call in m.tool_calls:
                r, w = F._call_files(call, current)
                _add(read, r)
                _add(modified, w)
                args = call.arguments if isinstance(call.arguments, dict) else {}
                current = next(iter(F._argument_paths(args)), current)
            for action, rest in F._TEXT_ACTION.findall(m.text):
                target = F._clean_path(rest.split()[0]) if rest.split() else None
                if action == "open" and target:
                    _add(read, [target])
                    current = target
                elif action == "create" and target:
                    _add(modified, [target])
                    current = target
                elif action in {"edit", "insert"} and current:
                    _add(modified, [current])
            _add(modified, F._AIDER_EDIT.findall(m.text))
        opened = F._OPEN_FILE.findall(m.text if m.role != "tool" else "")
        for result in m.tool_results:
            opened += F._OPEN_FILE.findall(result.text[-400:])
        if opened and opened[-1].strip() != "n/a":
            current, shown = opened[-1].strip(), True
    return read, modified, current if shown else None


def _request(m: Message) -> str | None:
    """The request a message makes (an observation, the harness's text, a command: none)."""
    return request_text(m.text, m.meta) if m.role == "user" else None


def _reference_pending(messages: Sequence[Message], carried: Sequence[str] = ()) -> list[str]:
    asks = _reference_asks(messages)
    if asks or any(_request(m) for m in messages):
        return asks  # the messages' own asks, or a user spoke after the earlier ones
    replied = any(m.role == "assistant" and m.text for m in messages)
    still = [a for a in carried if not (replied and a.startswith("answer the latest request: "))]
    return [a for i, a in enumerate(still) if a not in still[i + 1 :]][-3:]


def _reference_asks(messages: Sequence[Message]) -> list[str]:
    asks: list[str] = []
    last_user = max((i for i, m in enumerate(messages) if _request(m)), default=None)
    after = messages[last_user + 1 :] if last_user is not None else messages
    if last_user is not None and not any(m.role == "assistant" and m.text for m in after):
        request = _request(messages[last_user]) or ""
        asks.append("answer the latest request: " + F.first_line(request))
    for m in reversed(messages):
        if m.role == "assistant" and m.text.strip():
            found = [F.first_line(q) for q in F._QUESTION.findall(m.text)]
            distinct = [q for i, q in enumerate(found) if q not in found[i + 1 :]]
            asks += ["assistant asked: " + q for q in distinct[-3:]]
            break
    for m in messages[last_user or 0 :]:
        for call in m.tool_calls:
            if call.name in {"AskUserQuestion", "ask_user", "ask_followup_question"}:
                asks.append("question to the user: " + F.first_line(call.arguments_json, 200))
    return [a for i, a in enumerate(asks) if a not in asks[i + 1 :]]  # each once, its newest


def _reference_facts(messages: Sequence[Message]) -> KeyFacts:
    facts = KeyFacts()
    names: dict[str, str] = {}
    seen_calls: set[str] = set()
    idents: list[str] = []
    plain = []
    for m in messages:
        if F.is_summary(m):
            facts.summaries += 1
            head = re.match(r"\[Summary of the earlier conversation: (\d+) messages\]", m.text)
            facts.summarized += int(head.group(1)) if head else 1
            for name, lines in F.parse_sections(m.text).items():
                _add(facts.carried.setdefault(name, []), lines)
            continue
        plain.append(m)
        if m.role == "user" and m.text.strip():
            request = _request(m)
            if request:
                facts.requests.append(request)
            idents += F._identifiers(m.text)
        elif m.role == "assistant":
            idents += F._identifiers(m.text)
            for call in m.tool_calls:
                names[call.id] = call.name
                idents += F._identifiers(call.arguments_json)
        for r in m.tool_results:
            if r.is_error and r.call_id not in seen_calls:
                seen_calls.add(r.call_id)
                name = r.name or names.get(r.call_id, "tool")
                facts.failures.append(F._failure(name, r.call_id, r.text))
    facts.failures = _reference_settled(plain, facts.failures)
    if facts.carried.get("Tool Failures"):  # what may fix an earlier summary's failures
        made = {c.id: c for m in plain for c in m.tool_calls}
        ok = [r.call_id for m in plain for r in m.tool_results if not r.is_error]
        facts.succeeded_calls = [made[c] for c in ok if c in made]
    facts.files_read, facts.files_modified, facts.open_file = _reference_reading(messages)
    _add(facts.identifiers, idents)
    facts.identifiers = facts.identifiers[-40:]
    facts.pending = _reference_pending(plain, facts.carried.get("Pending", []))
    return facts


def _reference_settled(plain: Sequence[Message], failures: list[F.Failure]) -> list[F.Failure]:
    """``settle_failures`` by its definition, call by call (:func:`failed_calls`)."""
    by_id = {f.call_id: f for f in failures}
    made = {c.id: c for m in plain for c in m.tool_calls}
    return [
        dataclasses.replace(
            by_id[c],
            fixed_by=fix or None,
            call=F.call_summary(made[c]) if c in made else "",
            digest=_whole_digest(made[c]) if c in made else "",
        )
        for c, fix in failed_calls(plain)
    ]


def _whole_digest(call: ToolCall) -> str:
    """The digest a failure line gives after ``call`` when its summary is cut: SHA-256 of
    the whole summary (the file a file tool named, a shell command, else the arguments;
    whitespace collapsed, backticks and curly quotes made plain), 6 hex digits."""
    if call.name.lower() in F.SHELL_TOOLS and F._shell_command(call).strip():
        text = F._shell_command(call)
    else:
        args = call.arguments
        paths = F._argument_paths(args) if isinstance(args, dict) else []
        text = paths[0] if paths else call.arguments_json
    text = " ".join(text.split()).translate(str.maketrans({"`": "'", "“": '"', "”": '"'}))
    if len(text) <= F.CALL_CHARS:
        return ""
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def _stretches(messages: list[Message]) -> Iterator[list[Message]]:
    """The whole session, its quarters, and its second half after a summary of its first."""
    yield messages
    q = max(1, len(messages) // 4)
    for i in range(0, len(messages), q):
        yield messages[i : i + q]
    half = len(messages) // 2
    summary = ExtractiveSummarizer().summarize_sync(messages[:half])
    yield [summary_message(summary, half), *messages[half:]]


# -- key facts --------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "messages"), SESSIONS, ids=[s[0] for s in SESSIONS])
def test_facts_read_per_message_equal_the_whole_stretch_reading(
    name: str, messages: list[Message]
) -> None:
    stretches = list(_stretches(messages))
    expected = [_reference_facts(s) for s in stretches]
    assert [extract_facts(s) for s in stretches] == expected, name  # no scope: read afresh
    with F.message_scope():  # in one scope each message is read once, for every stretch
        assert [extract_facts(s) for s in stretches] == expected, name
        assert [extract_facts(s) for s in stretches] == expected, name  # memo hits
    assert files_touched(messages) == _reference_files(messages)
    assert F._SCOPE.get() is None  # the scope ended with its block


def test_a_write_without_a_path_edits_the_current_file_across_stretch_boundaries() -> None:
    read = Message.assistant("", [ToolCall("c1", "read", {"path": "src/a.py"})])
    write = Message.assistant("", [ToolCall("c2", "write", {"content": "x = 1"})])
    shell = Message.assistant("", [ToolCall("c3", "bash", {"command": "cat b.txt > c.txt"})])
    msgs = [read, Message.tool("c1", "ok"), write, Message.tool("c2", "ok"), shell, write]
    with F.message_scope():
        assert files_touched(msgs) == (["src/a.py", "b.txt", "c.txt"], ["src/a.py", "c.txt"])
        assert files_touched(msgs[2:]) == (["b.txt", "c.txt"], ["c.txt"])  # no current file
        assert extract_facts(msgs).files_modified == ["src/a.py", "c.txt"]
    assert files_touched(msgs) == _reference_files(msgs)


# -- the summary cap --------------------------------------------------------------------------


def _synthetic_parts(n: int) -> Any:
    messages: list[Message] = []
    for i in range(n):
        messages.append(Message.user(f"request {i}: check module_{i}.py for the bug in f_{i}"))
        call = ToolCall(f"c{i}", "read", {"path": f"pkg/sub_{i % 7}/module_{i}.py"})
        messages.append(Message.assistant(f"looking at module_{i}", [call]))
        messages.append(Message.tool(f"c{i}", "x"))
    facts = extract_facts(messages)
    return build_parts(facts, ExtractiveSummarizer()._body(messages), len(messages))


def _parts() -> list[Any]:
    out = [_synthetic_parts(n) for n in (3, 40, 400)]
    for _, messages in SESSIONS:
        for stretch in list(_stretches(messages))[:3]:
            body = ExtractiveSummarizer()._body(stretch)
            out.append(build_parts(extract_facts(stretch), body, len(stretch)))
    return out


PARTS = _parts()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_message_counts_by_pieces_equal_whole_counts(encoding: str) -> None:
    count = get_tokenizer(encoding).count
    opaque = lambda text: count(text)  # noqa: E731
    for _, messages in SESSIONS:
        assert pipeline.message_tokens(messages, count) == pipeline.message_tokens(messages, opaque)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("cached", [False, True])
def test_message_counts_in_a_scope_equal_whole_counts(encoding: str, cached: bool) -> None:
    # in a message scope a message of one part is counted as its role line plus the part,
    # a cache hit when the session counted the part before (cached) and a count when not
    tokenizer = get_tokenizer(encoding)
    opaque = lambda text: tokenizer.count(text, cache=False)  # noqa: E731
    clear_cache()
    one = 0
    for _, messages in SESSIONS:
        if cached:
            tokenizer.count_many([m.text for m in messages])
        with F.message_scope():
            scoped = pipeline.message_tokens(messages, tokenizer.count)
            again = pipeline.message_tokens(messages, tokenizer.count)
        assert scoped == again == pipeline.message_tokens(messages, opaque)
        one += sum(pipeline._one_part(m, m.text) is not None for m in messages)
    assert one > 500  # the shared sessions hold many messages of one part


def test_the_count_loop_takes_as_one_part_what_one_part_finds() -> None:
    # message_tokens decides inline which messages are one part (the role line, then it);
    # those it never joins, so their scope entries hold no joined text
    tokenizer = get_tokenizer("o200k_base")
    edge = [Message.user(t) for t in ("fix it", " fix", "\nfix", "/fix", "")]
    edge += [
        Message.assistant("ok", [ToolCall("c1", "read", {"path": "a.py"})]),
        Message.tool("c1", "def f(): ..."),
        Message.tool("c1", " indented"),
        Message("tool", (ToolResult("c1", (Text("a"),)), ToolResult("c2", (Text("b"),)))),
    ]
    for _, messages in [*SESSIONS, ("edge", edge)]:
        with F.message_scope():
            pipeline.message_tokens(messages, tokenizer.count)
            joined = [F.scoped(m).joined is None for m in messages]  # type: ignore[union-attr]
        assert joined == [pipeline._one_part(m, m.text) is not None for m in messages]


def test_a_calls_arguments_counted_by_the_session_are_not_counted_again() -> None:
    # the session counted the call's name and arguments when the message entered the plan
    # (sync_history); compaction counts the message as its head plus those arguments, taken
    # from the cache, and gets the whole message's count
    tokenizer = get_tokenizer("o200k_base")
    opaque = lambda text: tokenizer.count(text, cache=False)  # noqa: E731
    calls = [
        ToolCall("c1", "edit", {"path": "src/app.py", "new": "x = 1\n" * 400}),
        ToolCall("c2", "bash", {"command": "pytest -x tests/compaction tests/assemble && echo ok"}),
    ]
    messages = [
        Message.user("fix the parser"),
        Message.assistant("on it", calls[:1]),
        Message.assistant("", calls[1:]),
        Message.assistant("both", calls),
    ]
    clear_cache()
    tokenizer.count_many([c.arguments_json for c in calls])
    hits = cache_info()["hits"]
    with F.message_scope():
        counts = pipeline.message_tokens(messages, tokenizer.count)
    assert counts == pipeline.message_tokens(messages, opaque)
    # the last call's arguments of each message (each 64 bytes or more: cached)
    assert cache_info()["hits"] - hits == 3


_ARGUMENT = st.sampled_from(
    [*"{}[]\"'a1 :,/_-#\n\t\r", '{"', '"path', "é", "→", "\x01", "\x1c", "'s", "ab", " {"]
)


@settings(max_examples=400)
@given(
    st.lists(_ARGUMENT, min_size=1, max_size=12).map("".join),
    st.sampled_from(["read", "Bash", "str_replace_editor", "x_", "tool.v2", "9", "é"]),
    st.sampled_from(["", "ok", "done.", "see /tmp"]),
    st.sampled_from(ENCODINGS),
)
@example('{"path": "a.py"}', "read", "ok", "o200k_base")
@example('"path', "read", "", "cl100k_base")
@example("'s", "x_", "", "cl100k_base")
def test_a_call_is_counted_as_its_head_and_its_arguments(
    args: str, name: str, text: str, encoding: str
) -> None:
    tokenizer = get_tokenizer(encoding)
    message = Message.assistant(text, [ToolCall("c1", name, args)])
    joined = pipeline._joined(message, message.text)
    lead = pipeline._lead(args)
    if lead is not None:
        head = joined[: len(joined) - len(args) - 1]
        assert head + " " + args == joined
        (n,) = pipeline._called([head], [args], [lead], tokenizer)
        assert n == tokenizer.count(joined, cache=False), (head, args, lead)


def test_a_message_of_one_part_is_its_text_or_its_one_result() -> None:
    assert pipeline._one_part(Message.user("fix it"), "fix it") == "fix it"
    for text in (" fix", "\nfix", "/fix", ""):  # the newline before it could join: whole
        assert pipeline._one_part(Message.user(text), text) is None
    call = ToolCall("c1", "read", {"path": "a.py"})
    assert pipeline._one_part(Message.assistant("ok", [call]), "ok") is None
    assert pipeline._one_part(Message.tool("c1", "def f(): ..."), "") == "def f(): ..."


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_cap_sized_by_pieces_equals_the_cap_counted_whole(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = get_tokenizer(encoding).count
    opaque = lambda text: count(text)  # noqa: E731 (a counter the cap cannot see into)
    assert sections.additive(count) is not None and sections.additive(opaque) is None
    outcomes: list[bool] = []
    put_back = sections._put_back

    def spy(*args: Any) -> str | None:
        text = put_back(*args)
        outcomes.append(text is not None)
        return text

    monkeypatch.setattr(sections, "_put_back", spy)
    for parts in PARTS:
        full = count(parts.render())
        for cap in sorted({64, 300, full // 8, full // 3, full - 1}):
            for room in (None, cap * 2):
                fast = capped_summary(parts, max(cap, 1), count, room)
                assert fast == capped_summary(parts, max(cap, 1), opaque, room), (cap, room)
    assert len(outcomes) > 50 and all(outcomes)  # the pieces were used, and always added up


def test_the_cap_renders_and_counts_by_section_what_render_and_count_give() -> None:
    """The cap's renderer (a section laid out again only when its fields changed, compared by
    value) gives ``render()`` after every shrink step, also after a list changed in place;
    its counter (by sections) gives the whole text's count."""
    count = get_tokenizer("o200k_base").count
    for parts in PARTS:
        work = dataclasses.replace(parts)
        render, counted = sections._Renderer(), sections._remembered(count)
        assert render(work) == work.render()
        for step in sections._steps(work):
            while step(work):
                text = render(work)
                assert text == work.render()
                assert counted(text) == count(text, cache=False)
        work.body = [*work.body, "## Decisions"]
        assert render(work) == work.render()
        work.body.append("- a line added in place")  # the same list object, one more line
        work.pending = list(work.pending)
        work.pending.append("answer the question added in place")
        text = render(work)
        assert text == work.render() and "added in place" in text
        assert counted(text) == count(text, cache=False)


_PIECE = st.sampled_from(
    [*"ab Z9 /.,;:-_#()\n\t\r'", "’", "é", "日本", "  ", "\n\n", "'s", "1234", "…", "- ", "http://"]
)


def _split_point(text: str, q: int) -> bool:
    """A space after a non-space; a newline after a letter or digit; after a newline, anything
    but whitespace and ``/``."""
    before, at = text[q - 1], text[q]
    if at in " \n" and (before.isalnum() if at == "\n" else not before.isspace()):
        return True
    return before == "\n" and not at.isspace() and at != "/"


@settings(max_examples=400)
@given(st.lists(_PIECE, min_size=2, max_size=30).map("".join), st.sampled_from(ENCODINGS))
def test_exact_counts_add_up_at_the_split_points(text: str, encoding: str) -> None:
    count = get_tokenizer(encoding).count
    points = [q for q in range(1, len(text)) if _split_point(text, q)]
    for q in points:
        assert count(text) == count(text[:q]) + count(text[q:]), (text[:q], text[q:])


def _reference_failure_line(text: str) -> tuple[int | None, str]:
    """A failed tool's exit code and first error line, read as first written (``re.I``)."""
    match = F._EXIT.search(text)
    code = int(match.group(1)) if match else None
    first = ""
    for raw in text.splitlines():
        if not raw.strip():
            continue
        ln = " ".join(raw.split())
        first = first or ln
        if F._ERRORISH.search(ln) and not F._EXIT.fullmatch(ln):
            first = ln
            break
    else:
        first = first or "(no output)"
    return code, first if len(first) <= F.MAX_LINE else first[: F.MAX_LINE - 1] + "…"


def test_every_tool_output_has_the_failure_line_of_the_definition() -> None:
    outputs = {r.text for _, messages in SESSIONS for m in messages for r in m.tool_results}
    assert sum(F._EXIT.search(t) is not None for t in outputs) >= 5  # exit codes among them
    for text in outputs:
        assert F._read_failure_line(text) == _reference_failure_line(text), text[:80]


_FAILED = st.sampled_from(
    [
        *(" ", "\n", "\t", ":", "=", "-", "ok", "x" * 50, "İ", "ſ", "é", "\u2028", "ınvalid"),
        *("EXIT CODE 1", "Exited with status 2", "ReturnCode=3", "exit_code: -4", "FAİL"),
        *("ERROR", "Not  Found", "no\tsuch file", "CAN'T", "Traceback", "fatal", "Exit Code 5 é"),
    ]
)


@settings(max_examples=400)
@given(st.lists(_FAILED, max_size=20).map("".join))
@example("Command exited with code 1\nError: ENOENT")
@example("EXİT CODE 7\nFAİLED")
def test_a_failure_line_is_read_as_the_definition_reads_it(text: str) -> None:
    assert F._read_failure_line(text) == _reference_failure_line(text)


def _reference_prose(text: str) -> tuple[tuple[str, ...], str]:
    """The extractive summary's reading of an assistant text, as first written (two passes)."""
    lines = []
    for raw in extractive._FENCE.sub(" ", text).splitlines():
        line = " ".join(raw.split())
        if 12 <= len(line) <= 240 and not raw.startswith(("    ", "\t", "|", ">")):
            lines.append(line)
    return tuple(ln for ln in lines if extractive._DECISION.search(ln)), F.first_line(text)


_PROSE = st.sampled_from(
    [
        *"ab Z\n\t|>",
        *("    ", "```", "\r\n", "\u2028", "\x0c", "I'll fix it", "decided", "a decision"),
        " x" * 130,
    ]
)
#: The phrases across whitespace runs and lines, folded case beyond ASCII, a long text.
_SPACED = st.sampled_from(
    ["going\tto", "We  will", "let\nme", "the fix\u00a0is", "\u017fwitch to", "é", "y" * 300]
)


@settings(max_examples=300)
@given(st.lists(_PROSE | _SPACED, max_size=40).map("".join))
@example("x " * 150 + "\nThat decision holds for the parser module.\n")  # long, one "decision"
def test_the_prose_read_in_one_pass_equals_the_two_pass_reading(text: str) -> None:
    assert extractive._prose(Message.assistant(text), text) == _reference_prose(text)


_WORDED = st.sampled_from(
    [
        *"aI \n\t'",
        *("ll", "will", "We", "let", "me", "s", "DECIDED", "decision", "Going", "to"),
        *("instead", "of", "chose", "Switched", "the", "fix", "is", "root", "cause", "plan"),
        *("approach", "é", "ſ"),
    ]
)


@settings(max_examples=300)
@given(st.lists(_WORDED | st.just(" x" * 130), max_size=40).map("".join))
def test_a_text_may_decide_as_its_pattern_says(text: str) -> None:
    # never "no" where the pattern finds a phrase, at any length; exactly the pattern if short
    if not extractive._may_decide(text):
        assert extractive._MAY_DECIDE.search(text) is None
    if len(text) < extractive._WORDS_FROM:
        assert extractive._may_decide(text) == (extractive._MAY_DECIDE.search(text) is not None)


_LISTED = st.sampled_from(["- ", "* ", "2. ", "+ ", "\n", "x" * 60, " y" * 70, "decision"])


@settings(max_examples=300)
@given(st.lists(_PROSE | _SPACED | _LISTED | _WORDED, max_size=40).map("".join))
def test_the_prose_read_without_its_line_search_equals_the_full_reading(text: str) -> None:
    # where no line may state a decision, the first line alone is read: the same as reading
    # every line (list markers taken off, then the line cut to its length, as there)
    fast = extractive._scanned_prose(text)
    with mock.patch.object(extractive, "_may_decide", lambda _: True):
        full = extractive._scanned_prose(text)
    assert fast == full


_HINTED = st.sampled_from([*"09afAFgxZ-#\n ", "٣", "３", "é", "\ud800", "1234567", "ab" * 150])


@settings(max_examples=300)
@given(st.lists(_HINTED, max_size=60).map("".join))
def test_the_identifier_hints_equal_their_patterns(text: str) -> None:
    found = (F._HEX_RUN.search(text) is not None, F._TICKET_HINT.search(text) is not None)
    assert F._hints(text) == found


# -- history items ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["plain ascii", "", "naïve café", "tab\tand\nnewline"])
def test_transcript_grains_equal_the_checked_ones(text: str) -> None:
    meta = {"message_index": 3, "role": "tool", "tool": "read"}
    made = transcript_grain("act.tool_result.c_1", text, 100, False, meta)
    built = ContextGrain(
        "act.tool_result.c_1", "transcript", text, 100, "session", None, False, dict(meta)
    )
    assert made == built and made.text == text and made.window is None
    made.check()  # valid, as the constructor would have found


# -- whole renders ----------------------------------------------------------------------------


async def _renders(messages: list[Message]) -> list[Any]:
    out: list[Any] = []
    for budget in (1_500, 32_000):
        for provider in ("openai", "anthropic"):
            engine = ContextEngine("gpt-4.1", Budget(total=budget))
            async with engine.session("s") as s:
                # a first compaction, then one of its summary and the rest
                for part in (messages[: len(messages) // 2], messages[len(messages) // 2 :]):
                    s.extend(part)
                    try:
                        r = await s.render(provider)
                    except BudgetError as exc:  # a first message alone over the budget
                        out.append(str(exc))
                        continue
                    report = r.report.to_dict()
                    report.pop("timings")
                    state = s._state
                    summary = state.summary.text if state.summary is not None else None
                    out.append(json.dumps([r.payload, report, summary], sort_keys=True))
    return out


class _NoScope:
    """A context variable that never holds a value: no message scope opens."""

    def get(self) -> None:
        return None

    def set(self, value: object) -> None:
        return None

    def reset(self, token: object) -> None:
        return None


def test_renders_with_the_fast_paths_equal_renders_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions = [m for _, m in SESSIONS]
    fast = [asyncio.run(_renders(m)) for m in sessions]
    # no message scope: each message read, each stretch summarized, every time
    monkeypatch.setattr(F, "_SCOPE", _NoScope())
    monkeypatch.setattr(F, "_STRETCH", _NoScope())
    for module in (sections, pipeline):  # the cap and the message counts count whole texts
        monkeypatch.setattr(module, "additive", lambda count: None)
    slow = [asyncio.run(_renders(m)) for m in sessions]
    assert fast == slow
    assert sum("Summary of the earlier conversation" in r for s in fast for r in s) > 10


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_cap_counts_its_last_rendering_by_its_sections_texts_as_by_the_whole_text(
    encoding: str,
) -> None:
    """The cap's counter given its renderer counts the renderer's last rendering from the
    sections' texts (groups of them starting at a ``## `` heading), others as before: the
    whole text's count after every shrink step, with ``## `` lines inside the prose and a
    pinned fact, sections emptied and filled again, and a rendering counted again after
    later ones."""
    count = get_tokenizer(encoding).count
    used: list[int] = []
    for parts in PARTS:
        parts = dataclasses.replace(
            parts,
            body=[*parts.body, "## Notes", "a line", "", "## More", "x" * 300],
            pinned=[*parts.pinned, "pinned\n## not a section\nend"],
        )
        work = dataclasses.replace(parts)
        render = sections._Renderer()
        counted = sections._remembered(count, render)
        texts = []
        for step in sections._steps(work):
            while step(work):
                text = render(work)
                texts.append(text)
                assert counted(text) == count(text, cache=False)
                used.append(len(text) >= sections._BY_SECTIONS)
        work.identifiers = ["a/b.py", "c"]  # a section back after it was emptied
        work.pending = []
        text = render(work)
        assert counted(text) == count(text, cache=False)
        for old in texts[:5]:  # not the last rendering: counted as before
            assert counted(old) == count(old, cache=False)
    assert any(used) and not all(used)


def test_the_cap_sized_by_pieces_puts_back_a_request_written_once_as_counted_whole() -> None:
    """Requests cut to the same excerpt are written once, at the newest place: putting back an
    older one adds no line (nor is the first line written always the first request's), so
    its pieces are not the step's tokens; the pieces once took them for it and put back
    fewer requests than the room held."""
    count = get_tokenizer("o200k_base").count
    opaque = lambda text: count(text)  # noqa: E731
    folder = "/var/folders/49/l4171l3n219_xwq30fmyzr8w0000gn/T/TemporaryItems/shot"
    requests = [
        f"{folder}_{i}/Screenshot {i}.png what is wrong in this dialog"
        if i % 2
        else f"make the button number {i} a little brighter than the others"
        for i in range(12)
    ]
    parts = sections.SummaryParts(50, requests=requests, latest="now fix it", modified=["a.py"])
    for cap in range(40, count(parts.render())):
        assert capped_summary(parts, cap, count) == capped_summary(parts, cap, opaque), cap
