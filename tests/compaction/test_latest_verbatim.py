"""The newest request is kept verbatim in the summary whatever its lines: one line on its
``- (latest)`` line, several in a fence no line of it can close; the section parser, the
next summary and the quality gate read that layout."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.compaction import compact, compact_history, parse_sections, summary_message
from ctxengine.compaction.facts import fold_latest, latest_of
from ctxengine.compaction.requests import request_text
from ctxengine.compaction.sections import carries_latest, strip_sections
from ctxengine.replay import _feed
from ctxengine.transcript import Message, ToolCall, load_all

from .helpers import CC_MAIN, DATA

pytestmark = pytest.mark.anyio

PATCH = (
    "Apply exactly this patch to config.yaml:\n"
    "server:\n"
    "  port: 8080\n"
    "```python\n"
    "def f():\n"
    "    return 1\n"
    "```"
)
#: A request holding what the layout uses: fences of 3 and 4 backticks, a section heading, a
#: list item that reads like a newest request.
TRICKY = (
    "Replace the README section with this, as is:\n"
    "````markdown\n"
    "## Pending\n"
    "- (latest) not a request\n"
    "```\n"
    "````\n"
    "\n"
    "    and keep this indented line"
)


def _loop(request: str, steps: int) -> list[Message]:
    """One request, then an agent loop of many tool steps (nothing else asked)."""
    out = [Message.user(request)]
    for i in range(steps):
        out += [
            Message.assistant(f"step {i}", [ToolCall(f"c{i}", "read", {"path": f"src/f{i}.py"})]),
            Message.tool(f"c{i}", f"x = {i}\n" * 60, name="read"),
        ]
    return out


def _text(payload: dict[str, object]) -> str:
    messages = payload["messages"]
    assert isinstance(messages, list)
    return "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))


async def test_an_agent_loop_keeps_its_compacted_request_verbatim() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=2000))
    async with engine.session("v") as s:
        s.extend(_loop(PATCH, 12))
        out = await s.render(provider="openai")
        assert [c["ok"] for c in out.report.compactions] == [True]
        assert all(g.node_id != "hist.0" for g in out.tree)  # the request itself is summarized
        assert s.state.summary is not None
        summary = s.state.summary.text
        assert latest_of(summary) == PATCH
        assert PATCH in _text(out.payload)  # byte for byte: no line shifted


@pytest.mark.parametrize("request_text", [PATCH, TRICKY])
async def test_the_layout_holds_any_request_and_its_sections_parse(request_text: str) -> None:
    history = [*_loop("first look at src/", 2), *_loop(request_text, 2)]
    result = await compact(history, max_tokens=2000, latest_request=request_text)
    assert result.ok, result.error
    summary = result.summary
    assert request_text in summary
    assert latest_of(summary) == request_text and carries_latest(summary, request_text)
    sections = parse_sections(summary)
    first = request_text.splitlines()[0]
    assert sections["Requests"] == ["first look at src/", f"(latest) {first}"]
    # the request's own "## Pending" and list item are not the summary's (its steps were
    # answered: nothing is pending)
    assert "Pending" not in sections
    assert "not a request" not in strip_sections(summary + "\n\n## Notes\nprose")
    assert fold_latest(summary)[1] == request_text


async def test_the_next_summary_carries_it_and_its_excerpt() -> None:
    first = await compact(_loop(TRICKY, 3), max_tokens=2000, latest_request=TRICKY)
    assert first.ok
    later = [summary_message(first.summary, 7), *_loop("now run the tests", 1)]
    merged = await compact(later, max_tokens=2000, latest_request="now run the tests")
    assert merged.ok, merged.error
    requests = parse_sections(merged.summary)["Requests"]
    assert requests == [TRICKY.splitlines()[0], "(latest) now run the tests"]
    lines = merged.summary.splitlines()
    assert "- (latest) not a request" not in lines  # not taken for a newest request
    assert "## Pending" not in lines


def test_the_gate_asks_for_the_request_verbatim() -> None:
    shifted = "## Requests\n- (latest) " + PATCH.replace("\n", "\n  ")  # the earlier layout
    assert latest_of(shifted) == PATCH  # read back, so a carried one keeps its lines
    block = "## Requests\n- (latest), verbatim:\n````\n" + PATCH + "\n````"
    assert carries_latest(block, PATCH)
    assert carries_latest(block, "\n\n" + PATCH + "\n")  # the whitespace around it aside
    assert not carries_latest(block.replace("  port", "port"), PATCH)
    one = "## Requests\n- (latest) fix the parser"
    assert carries_latest(one, "  fix the parser\n") and not carries_latest(one, "fix the")


def test_a_block_cut_short_runs_to_the_end() -> None:
    cut = "## Requests\n- (latest), verbatim:\n````\nline one\nline two"
    assert fold_latest(cut) == ("## Requests\n- (latest) line one", "line one\nline two")
    # a "- (latest), verbatim:" line without its fence is a line like any other
    plain = "## Requests\n- (latest), verbatim:\nno fence"
    assert fold_latest(plain) == (plain, None)


def test_the_docs_example_still_runs() -> None:
    history = _loop(PATCH, 1)
    result = anyio.run(lambda: compact(history, max_tokens=800, latest_request=PATCH))
    assert result.ok and "- (latest), verbatim:\n````\n" + PATCH + "\n````" in result.summary


async def test_a_loop_compacted_again_keeps_its_request_whole() -> None:
    """No request after the multi-line one, compacted on every render: every summary holds
    it in full as its newest (the earlier summary used to carry it by its first line only),
    and once."""
    engine = ContextEngine("gpt-4o", Budget(total=2000))
    summaries: list[str] = []
    async with engine.session("v") as s:
        s.extend(_loop(PATCH, 12))
        for i in range(12, 24):
            out = await s.render(provider="openai")
            assert [c["ok"] for c in out.report.compactions] == [True]
            assert all(g.node_id != "hist.0" for g in out.tree)  # the request is summarized
            assert s.state.summary is not None
            summaries.append(s.state.summary.text)
            assert PATCH in _text(out.payload)
            s.extend(_loop(PATCH, i + 1)[-2:])
    assert len(set(summaries)) == len(summaries)  # each render merged the one before
    assert [latest_of(x) for x in summaries] == [PATCH] * len(summaries)
    assert [x.count("\n  port: 8080\n") for x in summaries] == [1] * len(summaries)


async def test_a_newer_request_leaves_the_carried_one_by_its_first_line() -> None:
    """Told nothing (a newer request is in the verbatim tail), the merge carries the earlier
    multi-line request by its first line, as every earlier request: only the session's newest
    is kept whole."""
    first = await compact(_loop(PATCH, 3), max_tokens=2000, latest_request=PATCH)
    assert first.ok and first.message is not None
    merged = await compact([first.message, *_loop("tidy up", 1)[1:]], max_tokens=2000)
    assert merged.ok, merged.error
    assert latest_of(merged.summary) == PATCH.splitlines()[0]
    told = await compact(
        [first.message, *_loop("tidy up", 1)[1:]], max_tokens=2000, latest_request=PATCH
    )
    assert told.ok, told.error
    assert latest_of(told.summary) == PATCH and told.summary.count("\n  port: 8080") == 1
    assert parse_sections(told.summary)["Requests"] == ["(latest) " + PATCH.splitlines()[0]]


async def test_compact_history_keeps_the_request_of_an_earlier_summary_whole() -> None:
    first = await compact_history(_loop(PATCH, 12), budget=1500)
    assert first.ok and latest_of(first.summary) == PATCH
    again = await compact_history([*first.history, *_loop(PATCH, 24)[25:]], budget=1500)
    assert again.ok and again.summary != first.summary
    assert latest_of(again.summary) == PATCH


@pytest.mark.parametrize(
    ("path", "budget", "multiline"),
    [(CC_MAIN, 64_000, False), (DATA / "claude-code-spotter" / "subagent.jsonl", 8_000, True)],
    ids=["main-64k", "command-8k"],
)
def test_the_real_session_keeps_its_compacted_newest_request_whole(
    path: Path, budget: int, multiline: bool
) -> None:
    """The Claude Code sessions replayed: the newest request stays in the summary while the
    agent works through several compactions; each summary made while it is compacted holds
    it whole (two of them once held its first line only). The newest request is the user's,
    never a skill's text, a caveat or a command's output (the main session's skill prompt
    was once taken for it): in the sub-agent session it is the command the session starts
    with, ``/handgemacht:create-beads`` and its arguments of several lines."""

    async def run() -> list[tuple[str, str]]:
        t = load_all(path)[0]
        seen: list[tuple[str, str]] = []
        engine = ContextEngine("gpt-4o", Budget(total=budget))
        async with engine.session("r") as s:
            previous, newest = None, None
            for m in t:
                if m.role == "assistant" and previous != "assistant" and len(s.messages):
                    out = await s.render("openai")
                    summary = s.state.summary
                    compacted = out.report.compactions and summary is not None and newest
                    # the newest request is not in the payload but in its summary
                    if compacted and newest.strip() not in _text(out.payload).replace(
                        summary.text, ""
                    ):
                        seen.append((summary.text, newest))
                await _feed(s, m)
                request = request_text(m.text, m.meta) if m.role == "user" else None
                if request:  # not a skill's text, a caveat, a command's output or a command
                    newest = request
                previous = m.role
        return seen

    compacted = anyio.run(run)
    assert len(compacted) >= 3
    assert all(carries_latest(summary, request) for summary, request in compacted)
    assert not any("Base directory for this skill" in request for _, request in compacted)
    if multiline:
        assert all(r.startswith("/handgemacht:create-beads websearch") for _, r in compacted)
        assert all("\n" in request.strip() for _, request in compacted)


async def test_a_task_too_big_for_the_summarys_room_is_kept_by_its_start() -> None:
    """An agent run's task (a SWE-agent CTF demonstration's 3,000-character instructions) is
    the newest request; at a 4,000-token budget the summary's room is smaller than even its
    first 1,900 characters. The compaction does not fail (it would write no summary, and the
    render would drop the task unsummarized): the engine summarizes again with the task cut
    to what fits (its first line and more kept), and the render goes on from there."""
    ctf = DATA / "swe-agent/trajectories/demonstrations/ctf/web/i_got_id_demo.traj"
    messages = list(load_all(ctf)[0])
    task = next(m for m in messages if m.role == "user" and request_text(m.text, m.meta))
    engine = ContextEngine("gpt-4o", Budget(total=4_000))
    async with engine.session("ctf") as s:
        s.extend(messages)
        out = await s.render()
    assert out.tokens <= 4_000
    assert out.report.compactions, "the render compacted"
    assert all(c["ok"] for c in out.report.compactions), out.report.compactions
    summary = next(g.text for g in out.tree if g.node_id == "mem.summary")
    flat = " ".join(summary.split())
    assert len(task.text) > 1_900
    assert " ".join(task.text.split())[:400] in flat


async def test_a_task_too_big_even_for_its_first_400_characters_is_kept_by_its_first_line() -> None:
    """An OpenHands run's 3,100-character task at a 1,200-token budget: the summary's room
    (144 tokens) is smaller than the task cut to its 400 characters. The second try then
    lists the task by its first line, as an earlier request, rather than failing too (no
    summary: the render sent the loop's next observation first, its task gone)."""
    run = list(load_all(DATA / "openhands" / "output.jsonl")[2])
    task = next(m for m in run if m.role == "user" and request_text(m.text, m.meta))
    assert len(task.text) > 3_000
    engine = ContextEngine("gpt-4o", Budget(total=1_200))
    async with engine.session("oh") as s:
        s.extend(run)
        out = await s.render()
        summary = s.state.summary
    assert out.tokens <= 1_200
    assert out.report.compactions, "the render compacted"
    assert all(c["ok"] for c in out.report.compactions), out.report.compactions
    assert summary is not None
    assert " ".join(task.text.split())[:120] in " ".join(summary.text.split())
