"""ExtractiveSummarizer and key facts: what it keeps, across the real formats."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine.compaction import (
    ExtractiveSummarizer,
    Summarizer,
    call_summarizer,
    extract_facts,
    files_touched,
    parse_sections,
    summary_message,
)
from ctxengine.transcript import Message, ToolCall, load_all

from .helpers import CC_MAIN, PI

pytestmark = pytest.mark.anyio


def _calls(*calls: ToolCall) -> list[Message]:
    return [Message.user("go"), Message.assistant("", list(calls))]


def test_files_from_every_tool_style() -> None:
    msgs = _calls(
        ToolCall("1", "Read", {"file_path": "/r/a.py"}),
        ToolCall("2", "Edit", {"file_path": "/r/b.py", "old_string": "x", "new_string": "y"}),
        ToolCall("3", "write", {"path": "c.md", "content": "z"}),
        ToolCall("4", "str_replace_editor", {"command": "view", "path": "/w/d.c"}),
        ToolCall("5", "str_replace_editor", {"command": "str_replace", "path": "/w/e.c"}),
        ToolCall("6", "bash", {"command": "cat f.txt | grep x && sed -i 's/a/b/' g.py > out.log"}),
        ToolCall("7", "apply_patch", {"input": "*** Begin Patch\n*** Update File: h.rs\n@@"}),
        ToolCall("8", "open", {"path": "i.py", "line_number": 3}),
        ToolCall("9", "edit", {"start_line": 1, "end_line": 2, "replacement_text": "x"}),
    )
    msgs.append(Message.assistant("```\ncreate j.py\n```"))
    read, modified = files_touched(msgs)
    assert read == ["/r/a.py", "/w/d.c", "f.txt", "i.py"]
    assert modified == ["/r/b.py", "c.md", "/w/e.c", "out.log", "g.py", "h.rs", "i.py", "j.py"]


@pytest.mark.parametrize(
    ("command", "read", "modified"),
    [
        # BSD sed: an empty backup suffix, then the script (a real pi session listed the
        # script "s/new Editor()/new Editor(defaultEditorTheme)/g" as a modified file)
        ("sed -i '' 's/new Editor()/new Editor(theme)/g' src/a.ts", [], ["src/a.ts"]),
        ("sed -i.bak -e 's/a\\/b/c/' -e 's/x/y/' a/b.txt", [], ["a/b.txt"]),
        ("sed --in-place 's/a/b/' c.txt d.txt", [], ["c.txt", "d.txt"]),
        ("sed -n '1,20p' src/e.py", ["src/e.py"], []),
        ("perl -pi -e 's/foo/bar/' lib/x.pm", [], ["lib/x.pm"]),  # -pi is in place
        ("perl -pe 's/x/y/' in.txt > out.txt", [], ["out.txt"]),
        ("grep -A 3 -e 'def x/y' src/f.py", ["src/f.py"], []),  # -A's value, -e's pattern
        ("rg -g '*.py' 'a/b' src/g.py", ["src/g.py"], []),
        ("awk -F: -v x=1 '{print $1}' /etc/passwd", ["/etc/passwd"], []),
    ],
)
def test_shell_scripts_patterns_and_option_values_are_not_files(
    command: str, read: list[str], modified: list[str]
) -> None:
    assert files_touched(_calls(ToolCall("1", "bash", {"command": command}))) == (read, modified)


def test_failures_carry_name_status_exit_code_and_first_error_line() -> None:
    msgs = [
        *_calls(ToolCall("c1", "bash", {"command": "make"})),
        Message.tool(
            "c1",
            "building\nerror: missing ';' at x.c:3\nCommand exited with code 2",
            name="bash",
            is_error=True,
        ),
        Message.tool("c1", "duplicate result", name="bash", is_error=True),
    ]
    [failure] = extract_facts(msgs).failures
    assert (failure.name, failure.call_id, failure.status, failure.exit_code) == (
        "bash",
        "c1",
        "error",
        2,
    )
    assert failure.line == "error: missing ';' at x.c:3"


def test_identifiers_requests_and_pending() -> None:
    msgs = [
        Message.user("deploy https://ci.example.com/run/77 at commit 3f9a1c2e\nmore detail"),
        Message.assistant("Which region should I use?"),
    ]
    facts = extract_facts(msgs)
    assert "https://ci.example.com/run/77" in facts.identifiers and "3f9a1c2e" in facts.identifiers
    assert facts.latest_request == msgs[0].text
    assert facts.pending == ["assistant asked: Which region should I use?"]


async def test_the_old_two_argument_form_still_works() -> None:
    class OldStyle:
        async def summarize(self, messages, instructions):  # type: ignore[no-untyped-def]
            return f"old style, {len(messages)} messages, told {instructions!r}"

    msgs = [Message.user("hi")]
    assert await call_summarizer(OldStyle(), msgs, instructions="x", max_tokens=9) == (
        "old style, 1 messages, told 'x'"
    )
    summarizer = ExtractiveSummarizer()
    assert isinstance(summarizer, Summarizer)
    positional = await summarizer.summarize(msgs, "ignored")
    assert positional == await summarizer.summarize(msgs, instructions="x", max_tokens=None)


async def test_every_request_is_listed_and_the_newest_in_full() -> None:
    t = load_all(PI)[0]
    text = await ExtractiveSummarizer().summarize(t.messages, instructions="", max_tokens=None)
    requests = parse_sections(text)["Requests"]
    users = [m.text for m in t.messages if m.role == "user" and m.text.strip()]
    assert len(requests) == len(dict.fromkeys(" ".join(u.split()[:40]) for u in users)) or (
        len(requests) >= 0.9 * len(users)
    )
    assert "- (latest) " + users[-1].strip().splitlines()[0] in text
    assert "## Goal" in text and "## Decisions" in text and "## Files" in text


async def test_the_goal_stays_the_first_request_when_a_cap_took_the_earlier_prose() -> None:
    summarizer = ExtractiveSummarizer()
    first = [Message.user("Port the parser to Rust"), Message.assistant("Started: lexer done.")]
    earlier = await summarizer.summarize(first, instructions="", max_tokens=None)
    assert parse_sections(earlier)["Goal"] == ["Port the parser to Rust"]
    # a tight cap cut the prose (its goal) first; the sections stay
    capped = "\n".join(ln for ln in earlier.splitlines() if ln != "Port the parser to Rust")
    assert "Goal" not in parse_sections(capped) or not parse_sections(capped)["Goal"]
    later = [
        summary_message(capped, 2),
        Message.user("minor: rename a flag"),
        Message.assistant("ok"),
    ]
    merged = await summarizer.summarize(later, instructions="", max_tokens=None)
    assert parse_sections(merged)["Goal"] == ["Port the parser to Rust"]


async def test_the_goal_is_the_first_excerpt_when_a_cap_made_the_requests_a_compact_list() -> None:
    """A cap that also wrote the earlier requests as one ``Excerpts: a; b; c`` line: the goal
    is that line's first excerpt, the oldest request listed (the line was skipped whole, and
    the goal became the newest request, read after it: in a long session the task the model
    read as its goal moved with every compaction)."""
    earlier = "\n".join(
        [
            "[Summary of the earlier conversation: 40 messages]",
            "This records earlier turns; it gives no instructions.",
            "",
            "## Requests",
            "Excerpts: migrate the billing service to postgres; add an index; fix a test",
            "- (latest) now rename the table users_old to users_archive and update every query",
        ]
    )
    later = [
        summary_message(earlier, 40),
        Message.assistant("Renaming the table now."),
        Message.user("continue"),
        Message.assistant("Done, all queries updated."),
    ]
    merged = await ExtractiveSummarizer().summarize(later, instructions="", max_tokens=None)
    assert parse_sections(merged)["Goal"] == ["migrate the billing service to postgres"]


async def test_a_summary_of_summaries_keeps_every_line_of_its_parts() -> None:
    t = load_all(CC_MAIN)[0]
    half = len(t.messages) // 2
    summarizer = ExtractiveSummarizer()
    parts = [
        await summarizer.summarize(t.messages[:half], instructions="", max_tokens=None),
        await summarizer.summarize(t.messages[half:], instructions="", max_tokens=None),
    ]
    merged = await summarizer.summarize(
        [summary_message(p, 0) for p in parts], instructions="", max_tokens=None
    )
    for part in parts:
        for name in ("Requests", "Identifiers"):
            for item in parse_sections(part).get(name, []):
                for piece in item.removeprefix("(latest) ").split(", "):
                    assert piece[:60] in merged, (name, piece)
        files = parse_sections(part).get("Files", [])
        for line in files:
            for path in line.split(": ", 1)[1].split(", "):
                assert path in merged
    assert merged.count("[Summary of the earlier conversation") == 1  # no orphaned headers
    # it says how much of the conversation it covers: both parts' messages
    assert merged.startswith(f"[Summary of the earlier conversation: {len(t.messages)} messages]")
    later = [summary_message(merged, 0), *t.messages[:3]]
    again = await summarizer.summarize(later, instructions="", max_tokens=None)
    assert again.startswith(f"[Summary of the earlier conversation: {len(t.messages) + 3} ")


async def test_a_first_line_that_states_a_decision_is_listed_once() -> None:
    """An assistant message whose first line states a decision gave that line as a decision
    and as its progress note: the same line under ``## Decisions`` and ``## Progress``. It is
    listed once, under Decisions, and Progress keeps the newest other notes."""
    messages = [Message.user("fix the date parser")]
    for i in range(6):
        messages.append(Message.assistant(f"Looked at parser part {i}: nothing odd there yet."))
    messages.append(Message.assistant("I'll switch to dateutil for the parsing.\nDone."))
    summarizer = ExtractiveSummarizer()
    text = await summarizer.summarize(messages, instructions="", max_tokens=None)
    sections = parse_sections(text)
    decisions, progress = sections["Decisions"], sections["Progress"]
    assert decisions == ["I'll switch to dateutil for the parsing."]
    assert not set(decisions) & set(progress)
    assert progress == [f"Looked at parser part {i}: nothing odd there yet." for i in range(1, 6)]
    # a decision older than the kept ones is still a progress note
    few = ExtractiveSummarizer(max_items=1)
    later = [*messages, Message.assistant("Done; we will ship it with the fix.")]
    sections = parse_sections(await few.summarize(later, instructions="", max_tokens=None))
    assert sections["Decisions"] == ["Done; we will ship it with the fix."]
    assert "I'll switch to dateutil for the parsing." in sections["Progress"]


@pytest.mark.parametrize("path", [PI, CC_MAIN], ids=["pi", "claude-code"])
async def test_no_line_of_the_real_sessions_is_both_a_decision_and_progress(path: Any) -> None:
    messages = load_all(path)[0].messages
    text = await ExtractiveSummarizer().summarize(messages, instructions="", max_tokens=None)
    sections = parse_sections(text)
    assert sections["Decisions"] and sections["Progress"]
    assert not set(sections["Decisions"]) & set(sections["Progress"])
