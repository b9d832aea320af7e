"""A summary writes a line once per section: the excerpts of the newest messages, the pending
asks and the requests cut to a width never repeat a line (the newest place of it is kept, in
the order the section promises), and the cap and its room still hold."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.compaction import compact
from ctxengine.compaction.facts import SECTION_HEADING, fold_latest
from ctxengine.compaction.pipeline import EXCERPTS_HEADING
from ctxengine.compaction.sections import request_findable
from ctxengine.replay import _feed
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, ToolCall, load_all

from .helpers import DATA

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


def _build_turn(i: int, output: str) -> list[Message]:
    call = ToolCall(f"c{i}", "bash", {"command": "make build"})
    return [
        Message.assistant(f"Build attempt {i}.", [call]),
        Message.tool(f"c{i}", output, name="bash"),
    ]


BUILD_LOG = "compiling src/app.c\n}\n}\nerror: undefined symbol foo\n}\nexit code 2"


async def test_the_excerpts_write_each_line_once_at_its_newest_place() -> None:
    history = [Message.user("Fix the build."), *_build_turn(1, BUILD_LOG)]
    history += _build_turn(2, BUILD_LOG)
    result = await compact(history, max_tokens=500, fill=True)
    assert result.ok, result.error
    text = result.summary
    assert repeats(text) == {}
    excerpts = sections(text)[EXCERPTS_HEADING[3:]]
    # the newest log, each line once, the brace at its newest place, in the log's order
    assert excerpts[:4] == [
        "- tool result bash: “compiling src/app.c”",
        "  “error: undefined symbol foo”",
        "  “}”",
        "  “exit code 2”",
    ]
    # the older log says nothing new: left out; the assistant turns around it stay, and the
    # command they ran (the same both times: written once, at its newest place)
    assert sum(line.startswith("- tool result bash") for line in excerpts) == 1
    assert excerpts[4:] == [
        "- call bash: “command: make build”",
        "- assistant (called bash): “Build attempt 2.”",
        "- assistant (called bash): “Build attempt 1.”",
        "- user: “Fix the build.”",
    ]
    assert COUNT(text) <= 500


async def test_a_merge_writes_the_earlier_excerpts_it_repeats_once() -> None:
    """The newer messages repeat lines of the earlier summary's excerpts: the newest copy is
    kept; an earlier message whose first lines are repeated starts at its next one."""
    first = await compact(
        [Message.user("Fix the build."), *_build_turn(1, "compiling src/app.c\nlinking app\n}")],
        max_tokens=500,
        fill=True,
    )
    assert first.ok and first.message is not None and repeats(first.summary) == {}
    assert "- tool result bash: “compiling src/app.c”" in first.summary
    merged = await compact([first.message, *_build_turn(2, BUILD_LOG)], max_tokens=700, fill=True)
    assert merged.ok, merged.error
    assert repeats(merged.summary) == {}
    excerpts = sections(merged.summary)[EXCERPTS_HEADING[3:]]
    assert excerpts[0] == "- tool result bash: “compiling src/app.c”"  # the newest log
    # the earlier log by the line the newer one lacks, saying a line of it is left out
    at = excerpts.index("- tool result bash: (…1 earlier lines) “linking app”")
    assert excerpts[at + 1].startswith("- ")  # its brace is written, for the newer log
    # the earlier request once: its "- user:" excerpt says the same
    assert excerpts[at - 1] == "- earlier request: “Fix the build.”"
    assert "- user: “Fix the build.”" not in excerpts
    assert COUNT(merged.summary) <= 700


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


def _summaries(path_parts: tuple[str, ...], n: int, budget: int) -> list[str]:
    """Every summary a replay of a shared session at ``budget`` writes."""

    async def run() -> list[str]:
        t = load_all(DATA.joinpath(*path_parts))[n]
        out: list[str] = []
        engine = ContextEngine("gpt-4o", Budget(total=budget))
        async with engine.session("r") as s:
            previous = None
            for m in t:
                if m.role == "assistant" and previous != "assistant" and len(s.messages):
                    await s.render("openai")
                    summary = s.state.summary
                    if summary is not None and (not out or out[-1] != summary.text):
                        out.append(summary.text)
                await _feed(s, m)
                previous = m.role
        return out

    return anyio.run(run)


def test_the_aider_session_summaries_repeat_no_line() -> None:
    """A log whose edits repeat code lines (fences, braces) and whose questions repeat: every
    summary of its replay at 16k writes each line of a section once."""
    summaries = _summaries(("aider", "mozgoslav.aider.chat.history.md"), 1, 16_000)
    assert summaries
    assert any(EXCERPTS_HEADING in s for s in summaries)
    assert [repeats(s) for s in summaries] == [{} for _ in summaries]
