"""The ``## Files`` section through a long day of compactions: the files modified survive the
summary cap whenever there is room for them, and are counted when there is none; a summary
names the file open where it ends, which an edit without a path after it changes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ctxengine import ExtractiveSummarizer
from ctxengine.compaction import compact, summary_message
from ctxengine.compaction import facts as F
from ctxengine.compaction.facts import extract_facts, message_scope
from ctxengine.compaction.sections import (
    SummaryParts,
    build_parts,
    capped_parts,
    shorten_latest,
)
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, ToolCall

COUNT = get_tokenizer("o200k_base").count


def test_files_modified_come_back_when_cutting_the_newest_request_made_room() -> None:
    """The cap drops the files modified (its step before the newest request's), then cuts the
    newest request (an agent run's task of 7,000 characters, as SWE-agent's and OpenHands'
    are) so much shorter that the files fit again: they are put back, as requests and files
    read are. Before, the SWE-agent pydicom run at 4,000 tokens lost its ``reproduce_bug.py``
    from every later summary."""
    task = "\n".join(f"step {i}: " + "check the handler and its tests " * 6 for i in range(40))
    parts = SummaryParts(messages=12, modified=["src/handler.py", "tests/test_handler.py"])
    parts.latest = task
    with shorten_latest():
        _, text, limit = capped_parts(parts, 400, COUNT)
    assert COUNT(text) <= limit == 400
    assert "Modified: src/handler.py, tests/test_handler.py" in text
    assert task.split("\n")[0][:40] in text


def test_files_modified_the_cap_left_out_are_still_counted() -> None:
    """When not even one file modified fits, the summary says how many there were, and the
    next summary carries the count."""
    pinned = ["keep this fact " * 40]
    modified = [f"src/module_{i}/a_rather_long_file_name_{i}.py" for i in range(3)]
    bare = SummaryParts(messages=5, pinned=pinned, modified_more=3).render()
    assert "Modified: (and 3 more)" in bare
    parts = SummaryParts(messages=5, pinned=pinned, modified=modified)
    _, text, _ = capped_parts(parts, COUNT(bare), COUNT)
    assert text == bare
    carried = extract_facts([summary_message(text, 5), Message.user("go on")])
    nxt = build_parts(carried, "", 2)
    assert nxt.modified == [] and nxt.modified_more == 3


def test_files_read_the_cap_left_out_are_still_counted() -> None:
    """The cap drops the files read first of the file lists, in halves, counting them; when it
    dropped the last one the count went with the ``Read:`` line, and the next summary carried
    nothing of them. The pi session (``pi-openclaw-session/large-session.jsonl``) replayed at
    4,000 tokens lost ``Read: packages/tui/src, ... (and 8 more)`` so at its 39th compaction of 174
    and 136 summaries after it said nothing of the files it read before; at 8,000 tokens 17
    of 108, from the 92nd on."""
    pinned = ["keep this fact " * 40]
    read = [f"packages/tui/src/components/a_rather_long_component_name_{i}.ts" for i in range(4)]
    bare = SummaryParts(messages=5, pinned=pinned, modified=["src/a.py"], read_more=4).render()
    assert "Read: (and 4 more)" in bare
    parts = SummaryParts(messages=5, pinned=pinned, modified=["src/a.py"], read=read)
    _, text, _ = capped_parts(parts, COUNT(bare), COUNT)
    assert text == bare
    carried = extract_facts([summary_message(text, 5), Message.user("go on")])
    nxt = build_parts(carried, "", 2)
    assert nxt.read == [] and nxt.read_more == 4
    assert "Read: (and 4 more)" in nxt.render()


# -- the file open where a summary ends --------------------------------------------------------


def _swe(call_id: str, name: str, args: dict[str, Any], shown: str) -> list[Message]:
    """A SWE-agent function-calling step: the call, and its observation ending in the open
    file (SWE-agent's windowed tools end each observation in ``(Open file: …)``, as the
    shared trajectories show)."""
    return [
        Message.assistant(f"Running {name}.", [ToolCall(call_id, name, args)]),
        Message.tool(call_id, f"[File: {shown} (1 lines total)]\n(Open file: {shown})", name=name),
    ]


def _swe_day() -> list[Message]:
    return [
        Message.user("Fix the TimeDelta rounding in marshmallow."),
        *_swe("c1", "create", {"filename": "reproduce.py"}, "/testbed/reproduce.py"),
        *_swe("c2", "insert", {"text": "print(1)\n"}, "/testbed/reproduce.py"),
        *_swe("c3", "open", {"path": "src/fields.py"}, "/testbed/src/fields.py"),
        *_swe("c4", "edit", {"search": "int(", "replace": "round("}, "/testbed/src/fields.py"),
    ]


@pytest.mark.parametrize("cut", [3, 5, 7])
def test_an_edit_without_a_path_after_a_summary_is_still_a_file_modified(cut: int) -> None:
    """SWE-agent's ``insert`` and ``edit`` name no file: they change the file the harness
    shows open. A summary ending where a file is open says which (``Open: …``), so an edit
    right after it, summarized by the next compaction, is listed among the files modified,
    as one summary of the whole stretch lists it. (Cut after 5, the ``open`` after the
    summary names its file itself: no open file needs carrying.) Before, the SWE-agent
    marshmallow run replayed at 4,000 tokens lost ``/testbed/reproduce.py`` so."""
    day = _swe_day()
    first = anyio.run(lambda: compact(day[:cut], max_tokens=600))
    assert first.ok, first.error
    chained = [summary_message(first.summary, cut), *day[cut:], Message.user("Thanks.")]
    second = anyio.run(lambda: compact(chained, max_tokens=600))
    assert second.ok, second.error
    modified = extract_facts(day).files_modified
    assert "/testbed/reproduce.py" in modified and "/testbed/src/fields.py" in modified
    line = next(ln for ln in second.summary.splitlines() if ln.startswith("Modified: "))
    assert all(p in line for p in modified), (modified, line)


def test_the_open_file_is_read_alike_when_a_stretch_is_resumed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resumed reading of a long stretch (the trials of a landing) knows the open file an
    earlier summary in it carried, as a fresh reading does."""
    monkeypatch.setattr(F, "RESUMABLE", 4)
    monkeypatch.setattr(F, "MARK_EVERY", 2)
    day = _swe_day()
    earlier = ExtractiveSummarizer().summarize_sync(day[:3])
    stretch = [summary_message(earlier, 3), *day[3:]]
    fresh = extract_facts(stretch)
    assert fresh.open_file == "/testbed/src/fields.py"
    with message_scope():
        extract_facts(stretch[:-2])  # a shorter stretch first: the next one resumes it
        resumed = extract_facts(stretch)
    assert resumed == fresh
    assert "/testbed/reproduce.py" in fresh.files_modified


@pytest.mark.parametrize("shown", ["/testbed/src/foo (copy).py", "/testbed/docs/notes(v2).md"])
def test_an_open_file_whose_path_holds_a_parenthesis_is_read_whole(shown: str) -> None:
    """SWE-agent's status line ``(Open file: PATH)`` was read up to the first ")": a path
    holding one was cut ("/testbed/src/foo (copy"), and the cut path went into the files
    modified by a path-less edit and into every later summary's ``Open:`` line."""
    day = [
        Message.user("Fix the copy."),
        *_swe("c1", "open", {"path": shown}, shown),
        *_swe("c2", "edit", {"search": "a", "replace": "b"}, shown),
    ]
    facts = extract_facts(day)
    assert facts.open_file == shown
    assert facts.files_modified == [shown]
    summary = anyio.run(lambda: compact(day, max_tokens=600)).summary
    assert f"Open: {shown}" in summary.splitlines()
