"""What a reader of a summary is told: the asks still open (not those a newer turn settled),
and decision lines without a second list marker."""

from __future__ import annotations

import anyio

from ctxengine import ExtractiveSummarizer
from ctxengine.compaction import compact, summary_message
from ctxengine.compaction.facts import extract_facts
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, ToolCall, load_all

from .helpers import PI
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
