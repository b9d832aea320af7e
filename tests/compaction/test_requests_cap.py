"""The summary cap keeps every request findable: earlier requests are shortened in steps
(80-character lines, then compact lists of 60- and 40-character excerpts) before any is
dropped, and a caller's larger room is taken rather than drop one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ctxengine.compaction import (
    REQUEST_EXCERPT_CHARS,
    KeyFacts,
    build_parts,
    cap_summary,
    capped_summary,
    extract_facts,
    parse_sections,
    request_excerpt,
    request_findable,
    summary_message,
)
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message

COUNT = get_tokenizer("o200k_base").count


def _requests(n: int) -> list[str]:
    return [
        f"task {i}: please refactor module_{i} so that the parser handles nested brackets "
        f"and keeps line numbers for error messages (ticket T-{1000 + i})"
        for i in range(n)
    ]


def _facts(requests: list[str]) -> KeyFacts:
    return extract_facts([Message.user(r) for r in requests])


def test_the_excerpt_is_the_first_forty_characters_of_the_first_line() -> None:
    text = "  fix   the parser\tso nested brackets work in every file of src/\nsecond line"
    assert request_excerpt(text) == "fix the parser so nested brackets work i"
    assert len(request_excerpt(text)) == REQUEST_EXCERPT_CHARS == 40
    assert request_excerpt("short one\nmore") == "short one"
    assert request_findable(text, "... fix the parser so nested\nbrackets work i… ...")
    assert not request_findable(text, "fix the parser so nested brackets")


def test_requests_are_compressed_in_steps_before_any_is_dropped() -> None:
    requests = _requests(60)
    parts = build_parts(_facts(requests), "", 60)
    full = COUNT(parts.render())
    sizes = [COUNT(replace(parts, requests_width=w).render()) for w in (80, 60, 40)]
    assert full > sizes[0] > sizes[1] > sizes[2]  # each step is smaller
    for cap in sizes:  # a cap each step meets: every request stays findable, none dropped
        text = cap_summary(parts, cap, COUNT)
        assert COUNT(text) <= cap
        assert all(request_findable(r, text) for r in requests), cap
        assert "earlier requests omitted" not in text
        assert requests[-1] in text  # the newest request in full
    assert "Excerpts: " in cap_summary(parts, sizes[1], COUNT)  # the compact list
    assert "Excerpts: " not in cap_summary(parts, sizes[0], COUNT)  # lines while they fit
    # below what 40-character excerpts need, the oldest go, counted
    tight = cap_summary(parts, int(sizes[2] * 0.7), COUNT)
    assert "earlier requests omitted)" in tight
    assert requests[-1] in tight


def test_a_larger_room_is_taken_rather_than_drop_a_request() -> None:
    requests = _requests(60)
    parts = build_parts(_facts(requests), "Prose of the summarizer.\n" * 40, 60)
    cap = int(COUNT(parts.render()) * 0.15)
    dropped = cap_summary(parts, cap, COUNT)
    assert "earlier requests omitted)" in dropped
    text, limit = capped_summary(parts, cap, COUNT, room=cap * 4)
    assert cap < limit == cap * 4 and COUNT(text) <= limit
    assert all(request_findable(r, text) for r in requests)
    # the room is not taken when the cap suffices: the prose is cut first
    easy, same = capped_summary(parts, cap * 5, COUNT, room=cap * 8)
    assert same == cap * 5 and COUNT(easy) <= cap * 5


def test_a_compact_request_list_is_carried_into_the_next_summary() -> None:
    requests = _requests(60)
    parts = build_parts(_facts(requests), "", 60)
    first = cap_summary(parts, COUNT(replace(parts, requests_width=40).render()), COUNT)
    assert "Excerpts: " in first and "omitted" not in first
    assert parse_sections(first)["Requests"][0].startswith("Excerpts: ")
    later = [*requests[-1:], "now also add a changelog entry for the parser fix"]
    facts = extract_facts([summary_message(first, 60), *(Message.user(r) for r in later)])
    merged = build_parts(facts, "", 62).render()
    assert all(request_findable(r, merged) for r in requests + later)


def test_an_earlier_newest_request_is_carried_with_its_whitespace_collapsed() -> None:
    # The newest request is written in full, its runs of spaces kept; once a newer request
    # comes, the next summary carries it as an earlier one, which the cap may cut to a
    # 40-character excerpt: cut with its double space, the excerpt would be one character
    # short of request_excerpt() (which collapses whitespace) and no longer found.
    special = "hmmmm could we havea  file watcher (i think node has a built in one now)"
    requests = [*_requests(40), special]
    first = build_parts(_facts(requests), "", 41).render()
    assert f"- (latest) {special}" in first  # verbatim while it is the newest
    later = "ok, copy the dark theme to a light one and swap the colours"
    facts = extract_facts([summary_message(first, 41), Message.user(later)])
    parts = build_parts(facts, "", 42)
    assert " ".join(special.split()) in parts.requests  # carried as every request is written
    text = cap_summary(parts, COUNT(replace(parts, requests_width=40).render()), COUNT)
    assert "Excerpts: " in text and "omitted" not in text
    assert request_findable(special, text)
    assert all(request_findable(r, text) for r in [*requests, later])


@pytest.mark.parametrize("budget", [600, 1000])
def test_a_pasted_file_before_its_follow_up_is_summarized_not_dropped_unseen(budget: int) -> None:
    """The newest summarized request was not the session's newest (a follow-up question came
    after the paste): its compaction failed over its cap without the halving retry the newest
    one gets, and the render dropped the paste with no summary and no placeholder."""
    from ctxengine import fit

    code = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(150))  # ~1,800 tokens
    messages = [
        Message.system("You review code."),
        Message.user("hi"),
        Message.assistant("hello"),
        Message.user("Please review this file:\n" + code),
        Message.user("What does f149 return?"),
    ]
    out = fit(messages, model="gpt-4o", budget=budget, provider="openai")
    assert out.tokens <= budget
    compactions = out.report.to_dict()["compactions"]
    assert compactions and all(c["ok"] for c in compactions), compactions
    sent = [m["content"] for m in out.payload["messages"]]
    summary = next(s for s in sent if s.startswith("[Summary of the earlier conversation"))
    assert "Please review this file: def f0(x)" in summary
    assert sent[-1] == "What does f149 return?"
