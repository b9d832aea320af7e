"""A summary writes a line once per section: the excerpts of the newest messages, the pending
asks and the requests cut to a width never repeat a line (the newest place of it is kept, in
the order the section promises), and the cap and its room still hold."""

from __future__ import annotations

from collections import Counter

import pytest

from ctxengine.compaction import compact
from ctxengine.compaction.facts import SECTION_HEADING, fold_latest
from ctxengine.compaction.sections import request_findable
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message

pytestmark = pytest.mark.anyio
COUNT = get_tokenizer("o200k_base").count


def sections(summary: str) -> dict[str, list[str]]:
    """The lines of each ``## `` section (the newest request's block folded to one line)."""
    out: dict[str, list[str]] = {"": []}
    name = ""
    for line in fold_latest(summary)[0].split("\n"):
        heading = SECTION_HEADING.fullmatch(line)
        if heading:
            name = heading.group(1).strip()
            out[name] = []
        elif line.strip() and not line.startswith("```"):
            out[name].append(line)
    return out


def repeats(summary: str) -> dict[str, list[str]]:
    """The lines written more than once in a section, by section."""
    found = {}
    for name, lines in sections(summary).items():
        twice = [line for line, n in Counter(lines).items() if n > 1]
        if twice:
            found[name] = twice
    return found


async def test_the_pending_asks_are_each_written_once() -> None:
    ask = "Should I keep the old API for the export module?"
    history = [
        Message.user("Rework the export."),
        Message.assistant(f"{ask}\nI looked at it.\n{ask}\nOr drop it, do you think?\n{ask}"),
    ]
    result = await compact(history, max_tokens=800)
    assert result.ok, result.error
    pending = sections(result.summary)["Pending"]
    assert pending == [
        "- assistant asked: Or drop it, do you think?",
        f"- assistant asked: {ask}",
    ]


async def test_requests_cut_to_a_width_are_each_written_once() -> None:
    """Requests alike in their first 80 characters (screenshots under one folder) give one line
    when the cap cuts them to 80: the newest one's, still findable for all of them."""
    folder = "/var/folders/49/l4171l3n219_xwq30fmyzr8w0000gn/T/TemporaryItems/NSIRD_screencap"
    asks = [f"{folder}_{n}/Screenshot {n}.png what is wrong in this dialog {n}?" for n in range(6)]
    history: list[Message] = []
    for n, ask in enumerate(asks):
        history += [Message.user(ask), Message.assistant(f"Looking at screenshot {n}. " * 30)]
    history += [Message.user("now fix the dialog"), Message.assistant("ok")]
    result = await compact(history, max_tokens=300, latest_request="now fix the dialog")
    assert result.ok, result.error
    requests = sections(result.summary)["Requests"]
    assert requests == [f"- {asks[0][:80]}…", "- (latest) now fix the dialog"]
    assert repeats(result.summary) == {}
    assert all(request_findable(a, result.summary) for a in asks)
    assert COUNT(result.summary) <= 300
