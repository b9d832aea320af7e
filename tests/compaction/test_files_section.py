"""The ``## Files`` section through a long day of compactions: the files modified survive the
summary cap whenever there is room for them, and are counted when there is none."""

from __future__ import annotations

from ctxengine.compaction import summary_message
from ctxengine.compaction.facts import extract_facts
from ctxengine.compaction.sections import (
    SummaryParts,
    build_parts,
    capped_parts,
    shorten_latest,
)
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message

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
