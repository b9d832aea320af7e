"""What a reader of a summary is told: the asks still open (not those a newer turn settled),
decision lines without a second list marker, and a goal that is the first request the user
made (not a slash command, an acknowledgement or a message the harness wrote), and prose
the cap cut without a heading left empty."""

from __future__ import annotations

import re

import anyio
import pytest

from ctxengine import ExtractiveSummarizer
from ctxengine.compaction import compact, summary_message
from ctxengine.compaction.extractive import goal_text
from ctxengine.compaction.facts import extract_facts
from ctxengine.compaction.sections import SummaryParts, build_parts, cap_summary
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, ToolCall, load_all

from .helpers import DATA, PI
from .test_section_repeats import sections

COUNT = get_tokenizer("o200k_base").count
CAP = 800


def _summary(history: list[Message], latest: str | None = None) -> str:
    result = anyio.run(lambda: compact(history, max_tokens=CAP, latest_request=latest))
    assert result.ok, result.error
    assert COUNT(result.summary) <= CAP
    return result.summary


# -- pending asks -----------------------------------------------------------------------------

ASK = "Fix the parser in src/parse.py"


def _earlier(*extra: Message) -> Message:
    """A summary of a stretch that ends with an unanswered request (and ``extra``)."""
    text = _summary([Message.user("Set up the repo."), Message.assistant("Done."), *extra])
    assert sections(text)["Pending"], text
    return summary_message(text, 3)


def test_an_earlier_ask_a_newer_request_settled_is_not_carried() -> None:
    earlier = _earlier(Message.user(ASK))
    assert sections(earlier.text)["Pending"] == [f"- answer the latest request: {ASK}"]
    newer = [
        earlier,
        Message.assistant("I'll fix the parser: the root cause is a missing token."),
        Message.user("Now add a test for it."),
        Message.assistant("Added tests/test_parse.py; it passes."),
    ]
    summary = _summary(newer)
    assert "Pending" not in sections(summary), summary
    assert extract_facts(newer).pending == []


def test_an_earlier_ask_stays_open_while_nothing_newer_settles_it() -> None:
    question = "Should I keep the old API for the export module?"
    earlier = _earlier(Message.user(ASK), Message.assistant(f"Looking.\n{question}"))
    work = [
        Message.assistant("", [ToolCall("c1", "bash", {"command": "pytest"})]),
        Message.tool("c1", "1 passed", name="bash"),
    ]
    # only tool calls since: the question is still open
    summary = _summary([earlier, *work], latest=ASK)
    assert sections(summary)["Pending"] == [f"- assistant asked: {question}"]
    # an assistant reply without a question answered the request; the question stays
    replied = [earlier, *work, Message.assistant("The parser is fixed.")]
    assert extract_facts(replied).pending == [f"assistant asked: {question}"]
    # a user message since settles both (the asks are then those of the newer turns)
    answered = [*replied, Message.user("Keep it."), Message.assistant("Kept.")]
    assert extract_facts(answered).pending == []


def test_an_answered_ask_of_a_real_session_is_not_carried() -> None:
    """The pi session: the summary of its first 248 messages ends with the request to check
    the queued messages component; the next stretch answers it and goes on with newer
    requests, all answered: the next summary has nothing pending (it carried the earlier
    ask, answered long before)."""
    messages = list(load_all(PI)[0].messages)
    assert messages[247].role == "user" and messages[247].text.startswith("ok, i think the q")
    head = ExtractiveSummarizer().summarize_sync(messages[:248], max_tokens=4000)
    assert "answer the latest request: ok, i think the queued" in head
    stretch = [summary_message(head, 248), *messages[248:281]]
    assert messages[280].role == "assistant" and messages[280].text  # the last one answered
    assert extract_facts(stretch).pending == []
    summary = ExtractiveSummarizer().summarize_sync(stretch, max_tokens=4000)
    assert COUNT(summary) <= 4000
    assert "## Pending" not in summary


# -- list markers -----------------------------------------------------------------------------


def test_a_decision_from_a_list_item_has_one_marker() -> None:
    reply = (
        "Summary of the fix:\n"
        "- Switched to a streaming parser instead of the regex one\n"
        "* Decided to keep the old API for one release\n"
        "2. The root cause is a missing newline check\n"
        "  + Let me also add a test for empty input"
    )
    summary = _summary([Message.user("fix the parser"), Message.assistant(reply)])
    decisions = sections(summary)["Decisions"]
    assert decisions == [
        "- Switched to a streaming parser instead of the regex one",
        "- Decided to keep the old API for one release",
        "- The root cause is a missing newline check",
        "- Let me also add a test for empty input",
    ]
    progress = _summary([Message.user("go"), Message.assistant("- patched src/a.py\n- done")])
    assert sections(progress)["Progress"] == ["- patched src/a.py"]


def test_the_real_sessions_decisions_have_one_marker() -> None:
    messages = list(load_all(PI)[0].messages)[:290]  # message 280 lists its fixes as list items
    summary = ExtractiveSummarizer().summarize_sync(messages)
    decisions = sections(summary)["Decisions"]
    assert '- Empty padding lines are now `" ".repeat(width)` instead of `""`' in decisions
    assert not [d for d in decisions if d.startswith(("- - ", "- * ", "- 1. "))]


def test_a_carried_decision_an_earlier_version_wrote_with_two_markers_has_one() -> None:
    old = (
        "[Summary of the earlier conversation: 4 messages]\n\n## Goal\nfix it\n\n"
        "## Decisions\n- - Switched to the new API instead of the old one\n"
    )
    summary = ExtractiveSummarizer().summarize_sync([summary_message(old, 4)])
    assert sections(summary)["Decisions"] == ["- Switched to the new API instead of the old one"]


# -- the goal ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "meta", "goal"),
    [
        ("/mode", {}, None),
        ("/model gpt-4o", {}, None),
        ("ok, continue", {}, None),
        ("Thanks!", {}, None),
        ("hi", {}, None),
        ("<local-command-caveat>Caveat: The messages below were generated</local-…", {}, None),
        ("<local-command-stdout>Reconnected.</local-command-stdout>", {}, None),
        ("[Request interrupted by user]", {}, None),
        ("Base directory for this skill: /x", {"is_meta": True}, None),
        ("Base directory for this skill: /x\n\n# Hex Documentation Search", {}, None),  # mark lost
        ("We're solving this issue: the parser crashes", {"kind": "observation"}, None),
        ("/", {}, None),
        ("<command-name>/mcp</command-name><command-args></command-args>", {}, None),
        (
            "<command-name>/beads</command-name>\n<command-args>set up credo</command-args>",
            {},
            "/beads set up credo",
        ),
        ("/var/shots/a.png what is wrong here?", {}, "/var/shots/a.png what is wrong here?"),
        ("fix the flaky test", {}, "fix the flaky test"),
        ("изучи", {}, "изучи"),
    ],
)
def test_what_can_be_a_goal(text: str, meta: dict[str, object], goal: str | None) -> None:
    assert goal_text(text, meta) == goal


def _goal(summary: str) -> list[str]:
    return sections(summary)["Goal"]


def test_the_goal_is_the_first_substantive_request() -> None:
    history = [
        Message.user("/mode"),
        Message.assistant("Mode: code."),
        Message.user("<local-command-caveat>Caveat: generated by local commands.</local-"),
        Message.user("ok"),
        Message.user("Port the selector to the theme system"),
        Message.assistant("I'll port it."),
        Message.user("continue"),
    ]
    assert _goal(_summary(history)) == ["Port the selector to the theme system"]
    # none is substantive: the first request, as before
    assert _goal(_summary([Message.user("/mode"), Message.assistant("Mode.")])) == ["/mode"]


def test_an_earlier_summarys_slash_command_goal_gives_way() -> None:
    """A summary written before this rule has ``/mode`` for a goal: the next one takes its
    first substantive request instead."""
    old = (
        "[Summary of the earlier conversation: 4 messages]\n\n## Goal\n/mode\n\n"
        "## Requests\n- /mode\n- (latest) port the selector\n"
    )
    summary = _summary([summary_message(old, 4), Message.assistant("Ported."), Message.user("go")])
    assert _goal(summary) == ["port the selector"]


@pytest.mark.parametrize(
    ("path", "goal"),
    [
        (PI, "read packages/coding-agent/docs/theme.md in full, then theme.ts"),
        (
            DATA / "claude-code-spotter" / "subagent.jsonl",
            "/handgemacht:create-beads websearch to learn how to fastest setup credo",
        ),
        (
            next((DATA / "swe-agent").rglob("pydicom__pydicom-1458.traj")),
            "We're currently solving the following issue within our repository. Here's the "
            "issue text: ISSUE: Pixel Representation attribute should be optional",
        ),
    ],
    ids=["pi", "claude-code-command", "swe-agent-demonstration"],
)
def test_the_goal_of_a_real_session(path: object, goal: str) -> None:
    messages = list(load_all(path)[0].messages)[:40]  # type: ignore[arg-type]
    summary = ExtractiveSummarizer().summarize_sync(messages, max_tokens=3000)
    assert COUNT(summary) <= 3000
    (line,) = _goal(summary)
    assert line.startswith(goal), line


# -- the prose the cap cut --------------------------------------------------------------------


def test_the_cut_prose_ends_in_no_empty_heading() -> None:
    parts = SummaryParts(3, body=["## Goal", "fix it", "", "## Decisions"], latest="fix it")
    assert parts.render().split("\n")[2:5] == ["", "## Goal", "fix it"]
    assert "## Decisions" not in parts.render()
    assert "## Goal" not in SummaryParts(3, body=["## Goal", ""], latest="x").render()
    lines = SummaryParts(3, body=["", "## Notes", "a note"], latest="x").render().split("\n")
    assert lines[2:5] == ["", "## Notes", "a note"]  # one blank line before the prose


def test_the_real_sessions_capped_summaries_have_no_empty_heading() -> None:
    """The pi session's prose halved by the cap once kept ``## Goal`` without its goal."""
    stretch = list(load_all(PI)[0].messages)[:400]
    parts = build_parts(extract_facts(stretch), ExtractiveSummarizer()._body(stretch), 400)
    empty = re.compile(r"^## [^\n]+\n(?:\n*## |\n*\Z)", re.M)
    cut = 0
    # from 520: the least this stretch's summary takes (its newest failure lines, each with
    # its cut call's digest, its newest request, its rules), about 510 tokens
    for cap in range(520, 1700, 20):
        text = cap_summary(parts, cap, COUNT)
        assert COUNT(text) <= cap
        cut += "## Decisions" not in text
        assert not empty.search(text), (cap, text[:400])
    assert cut  # the prose was cut


def test_a_filled_summary_has_no_empty_heading_before_its_excerpts() -> None:
    """A summary given room to fill ends its prose with excerpts of the newest messages: the
    excerpts went after the prose as the cap left it, so a heading the cap emptied stayed,
    followed by the excerpts' heading (``## Goal`` then ``## Latest messages``: a real aider
    session at 300 tokens showed it, as did one long request)."""
    empty = re.compile(r"^## [^\n]+\n(?:\n*## |\n*\Z)", re.M)
    stretch = [
        Message.user("please fix the flaky login test " + "hi " * 3000),
        Message.assistant("ok"),
    ]
    pi = list(load_all(PI)[0].messages)[:200]
    checked = filled = 0
    for messages in (stretch, pi):
        for cap in range(800, 2000, 100):
            result = anyio.run(
                lambda m=messages, c=cap: compact(m, max_tokens=c, tokenizer=COUNT, fill=True)
            )
            assert result.ok, result.error
            text = result.summary
            assert COUNT(text) <= cap
            assert not empty.search(text), (cap, text[:600])
            checked += 1
            filled += "## Latest messages" in text
    assert checked == 24
    assert filled >= 12  # most had room for excerpts
