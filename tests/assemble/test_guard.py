"""Window guard: truncation of one result, pruning of old results, history turn limit."""

from __future__ import annotations

import re

import pytest

from ctxengine.guard import (
    HARD_MAX_TOOL_RESULT_CHARS,
    MIN_KEEP_CHARS,
    PruneSettings,
    estimate_chars,
    limit_history_turns,
    max_tool_result_chars,
    prune_tool_results,
    truncate_tool_result,
    truncate_tool_results,
)
from ctxengine.hygiene import validate
from ctxengine.tokens import pdf_tokens
from ctxengine.transcript import Image, Message, Text, ToolCall, ToolResult, Transcript
from pdf_bytes import pdf_plain

LINES = "".join(f"line {i:05d} of the output\n" for i in range(20_000))  # ~500k chars


# -- truncate_tool_result ----------------------------------------------------------------------


def test_limit_is_30_percent_of_the_window_with_cap_and_floor() -> None:
    assert max_tool_result_chars(100_000) == 120_000  # 30 % of 100k tokens x 4 chars
    assert max_tool_result_chars(2_000_000) == HARD_MAX_TOOL_RESULT_CHARS
    assert max_tool_result_chars(100) == MIN_KEEP_CHARS
    with pytest.raises(ValueError, match="window_tokens is 0"):
        max_tool_result_chars(0)


def test_short_text_is_returned_unchanged() -> None:
    assert truncate_tool_result("abc", 10) == "abc"
    assert truncate_tool_result("x" * 1_999, 5) == "x" * 1_999  # never below 2,000 chars


@pytest.mark.parametrize("limit", [2_000, 10_000, 100_000])
def test_keeps_head_and_tail_on_line_boundaries_within_limit(limit: int) -> None:
    out = truncate_tool_result(LINES, limit)
    assert len(out) <= limit
    assert out.startswith("line 00000 of the output\n")
    assert out.endswith("line 19999 of the output\n")
    head, notice, tail = re.split(r"\n\n(\[\.\.\. .*? \.\.\.\])\n\n", out)
    assert head.endswith("output\n") and tail.startswith("line ")  # whole lines only
    omitted = int(re.search(r"\[\.\.\. ([\d,]+) of", notice).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert omitted == len(LINES) - len(head) - len(tail)
    assert "offset/limit" in notice and f"{len(LINES):,}" in notice


def test_trailing_error_line_survives() -> None:
    text = LINES + "Traceback (most recent call last):\n" + "x\n" * 2 + "ValueError: boom\n"
    out = truncate_tool_result(text, 5_000)
    assert out.endswith("ValueError: boom\n") and "Traceback" in out and len(out) <= 5_000


def test_error_line_a_bit_before_the_tail_is_pulled_in() -> None:
    text = LINES[:50_000] + "FAILED tests/test_x.py::test_y\n" + ("padding line " * 6 + "\n") * 15
    out = truncate_tool_result(text, 4_000)
    assert "FAILED tests/test_x.py::test_y" in out and len(out) <= 4_000


def test_text_without_newlines_is_cut_hard() -> None:
    out = truncate_tool_result("a" * 50_000, 3_000)
    assert len(out) <= 3_000 and out.startswith("aaa") and out.endswith("aaa")


def test_truncate_rejects_non_positive_limit() -> None:
    with pytest.raises(ValueError, match="max_chars is 0"):
        truncate_tool_result("x", 0)


def test_truncate_tool_results_in_a_transcript() -> None:
    img = ToolResult("i", (Image("image/png", data="AA"), Text(LINES)))
    t = Transcript(
        (
            Message.user("go"),
            Message.assistant("", [ToolCall("a", "read", {}), ToolCall("i", "shot", {})]),
            Message("tool", (ToolResult("a", (Text(LINES),)), img)),
        )
    )
    out, report = truncate_tool_results(t, 10_000)
    assert len(out[2].tool_results[0].text) <= 12_000 and out[2].tool_results[1] is img
    assert report.counts() == {"truncated": 1} and t[2].tool_results[0].text == LINES
    assert truncate_tool_results(out, 10_000)[0] is out


# -- prune_tool_results ------------------------------------------------------------------------


def _session(sizes: list[int], *, names: list[str] | None = None) -> Transcript:
    """system, pre-user tool call, then one user turn with an assistant call per size."""
    msgs: list[Message] = [
        Message.system("s"),
        Message.assistant("", [ToolCall("boot", "read", {})]),
        Message.tool("boot", "B" * 10_000),
        Message.user("task"),
    ]
    for i, size in enumerate(sizes):
        name = names[i] if names else "bash"
        msgs.append(Message.assistant("", [ToolCall(f"c{i}", name, {})]))
        msgs.append(Message.tool(f"c{i}", f"{i}:" + "x" * size, name=name))
    return Transcript(tuple(msgs))


def test_below_soft_ratio_nothing_changes() -> None:
    t = _session([5_000] * 5)
    assert prune_tool_results(t, 1_000_000)[0] is t


def test_soft_trim_keeps_head_and_tail_of_old_big_results() -> None:
    t = _session([5_000, 3_000, 5_000, 5_000, 5_000, 5_000])
    total = estimate_chars(t)
    window = int(total / 4 / 0.35)  # 35 % full: soft trim only
    out, report = prune_tool_results(t, window)
    trimmed = [c.call_id for c in report.of("soft_trim")]
    assert trimmed == ["c0", "c2"]  # c1 is small; c3..c5 belong to the last 3 assistant turns
    text = out[5].tool_results[0].text
    assert text.startswith("0:" + "x" * 1_498) and "[Tool result trimmed: kept first 1,500" in text
    assert out[2] == t[2]  # before the first user message: protected
    assert not report.of("hard_clear") and validate(out, "openai") == []


def test_hard_clear_past_half_with_enough_prunable_chars() -> None:
    t = _session([3_000] * 30)  # ~100k chars; 27 prunable results = 81k chars
    out, report = prune_tool_results(t, 40_000)  # 160k chars window: 62 % full
    cleared = report.of("hard_clear")
    assert [c.call_id for c in cleared] == [f"c{i}" for i in range(len(cleared))]  # oldest first
    assert 0 < len(cleared) < 27 and not report.of("soft_trim")
    assert out[5].tool_results[0].content == (Text("[Old tool result content cleared]"),)
    assert estimate_chars(out) / (40_000 * 4) < 0.5 <= estimate_chars(t) / (40_000 * 4)
    assert all(out[i] == t[i] for i in range(len(t) - 6, len(t)))  # last 3 assistant turns
    assert prune_tool_results(out, 40_000)[0] is out
    tight, _ = prune_tool_results(t, 5_000)  # can never get under half: clears all it may
    assert prune_tool_results(tight, 5_000)[0] is tight  # placeholders are not cleared again


def test_soft_trim_alone_can_bring_it_under_half() -> None:
    t = _session([30_000] * 8)
    out, report = prune_tool_results(t, 60_000)
    assert len(report.of("soft_trim")) == 5 and not report.of("hard_clear")
    assert estimate_chars(out) / (60_000 * 4) < 0.5


def test_no_hard_clear_below_min_prunable_chars() -> None:
    t = _session([4_500] * 6)
    s = PruneSettings(soft_trim_ratio=0.01, hard_clear_ratio=0.02)
    out, report = prune_tool_results(t, 10_000, s)
    assert report.of("soft_trim") and not report.of("hard_clear")
    assert estimate_chars(out) < estimate_chars(t)


def test_allow_and_deny_globs_case_insensitive_deny_wins() -> None:
    t = _session([6_000] * 7, names=["Read", "read_file", "Bash", "WebFetch", "x", "y", "z"])
    s = PruneSettings(soft_trim_ratio=0.01, allow=("read*", "bash", "web*"), deny=("READ_*",))
    _, report = prune_tool_results(t, 10_000, s)
    assert [c.call_id for c in report.of("soft_trim")] == ["c0", "c2", "c3"]
    assert s.tool_allowed("webfetch") and not s.tool_allowed("Read_File")


def test_image_results_are_never_pruned() -> None:
    t = _session([50_000] * 5)
    msgs = list(t.messages)
    msgs[5] = Message(
        "tool", (ToolResult("c0", (Text("x" * 50_000), Image("image/png", data="A"))),)
    )
    t = t.replace(msgs)
    out, report = prune_tool_results(t, 10_000)
    assert out[5] == t[5] and "c0" not in {c.call_id for c in report.changes}


def test_ttl_skips_pruning_while_the_cache_is_warm() -> None:
    t = _session([30_000] * 8)
    s = PruneSettings(ttl_seconds=300)
    assert prune_tool_results(t, 60_000, s, cache_age=120)[0] is t
    assert prune_tool_results(t, 60_000, s, cache_age=301)[1].changed
    assert prune_tool_results(t, 60_000, s)[1].changed  # unknown age: prune


def test_prune_leaves_the_input_untouched_and_is_stable() -> None:
    t = _session([30_000] * 8)
    before = [m.blocks for m in t]
    out, _ = prune_tool_results(t, 60_000)
    assert [m.blocks for m in t] == before
    assert prune_tool_results(out, 60_000)[0] is out


@pytest.mark.parametrize(
    "kwargs",
    [
        {"soft_trim_ratio": 0},
        {"hard_clear_ratio": 1.5},
        {"soft_trim_ratio": 0.6, "hard_clear_ratio": 0.5},
        {"keep_last_assistants": -1},
        {"chars_per_token": 0},
    ],
)
def test_settings_validate(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="expected"):
        PruneSettings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"soft_trim_ratio": "0.3"}, "soft_trim_ratio is str '0.3'"),
        ({"ttl_seconds": "300"}, "ttl_seconds is str '300'"),
        ({"ttl_seconds": float("nan")}, "ttl_seconds is float nan"),
        ({"keep_last_assistants": None}, "keep_last_assistants is NoneType None"),
        ({"soft_trim_max_chars": 4000.5}, "soft_trim_max_chars is float 4000.5"),
        ({"max_turns": 1.5}, "max_turns is float 1.5"),
        ({"max_turns": "3"}, "max_turns is str '3'"),
        ({"allow": "bash"}, "allow is str 'bash'"),
        ({"deny": None}, "deny is NoneType None"),
        ({"deny": ["read*", 5]}, "deny holds int 5"),
        ({"placeholder": None}, "placeholder is NoneType None"),
    ],
)
def test_settings_of_the_wrong_kind_are_refused_naming_them(
    kwargs: dict[str, object], named: str
) -> None:
    """Each was taken: a str or None where a number goes, and a float count (the Rust ladder
    takes an int), failed inside the render with a bare TypeError; globs given as one str
    (``allow="bash"``: one glob per character) pruned nothing without a word; a glob or a
    placeholder of another kind waited to fail until a result was pruned."""
    from ctxengine.errors import ConfigTypeError

    with pytest.raises(ConfigTypeError, match=re.escape(named)):
        PruneSettings(**kwargs)  # type: ignore[arg-type]


# -- limit_history_turns -----------------------------------------------------------------------


def test_limit_keeps_last_n_user_turns_and_system() -> None:
    t = Transcript(
        (
            Message.system("s"),
            Message.user("u1"),
            Message.assistant("", [ToolCall("a", "f", {})]),
            Message.tool("a", "r"),
            Message.user("u2"),
            Message.user("u2b"),  # same turn: consecutive user messages
            Message.assistant("", [ToolCall("b", "f", {})]),
            Message.tool("b", "r"),
            Message.user("u3"),
        )
    )
    out, report = limit_history_turns(t, 2)
    assert [m.text for m in out if m.role != "tool"][:3] == ["s", "u2", "u2b"]
    assert len(out) == 6 and out[1].role == "user"
    assert validate(out, "openai") == [] and report.counts() == {"dropped_turns": 1}
    assert limit_history_turns(t, 3)[0] is t
    with pytest.raises(ValueError, match="n is 0"):
        limit_history_turns(t, 0)


def test_a_pdf_counts_its_pages_in_the_size_estimate() -> None:
    """Every provider bills an inline PDF by its pages (``tokens.pdf_tokens``): the pruner's
    estimate counts a 20-page report as its tokens at ``chars_per_token``, where it counted
    one image's 8,000 characters and left a context the report filled unpruned."""
    data = pdf_plain(20)
    base = _session([5_000] * 6)
    report = Message("user", (Text("and this report"), Image("application/pdf", data=data)))
    t = Transcript((*base.messages[:4], report, *base.messages[4:]))
    added = estimate_chars(t) - estimate_chars(base)
    assert added == len("and this report") + pdf_tokens(data) * 4
    assert estimate_chars(t, chars_per_token=2) - estimate_chars(base) == 15 + pdf_tokens(data) * 2
    window = 200_000  # the report alone is 160,000 tokens: the context is over 80 % full
    assert prune_tool_results(base, window)[0] is base
    out, changes = prune_tool_results(t, window)
    assert out is not t and changes.of("soft_trim")


def test_settings_take_numpy_numbers_and_iterators_as_the_plain_values() -> None:
    """A count or a ratio from numpy (a value read from an array, a config loaded with it)
    and globs given as a generator were taken before the settings checked their kinds: they
    still are, stored as the plain int, float and tuple the Rust ladder and the matching
    read."""
    import numpy as np

    s = PruneSettings(
        max_turns=np.int64(2),
        soft_trim_max_chars=np.int64(200),
        soft_trim_ratio=np.float32(0.25),
        allow=(g for g in ["read*", "bash"]),
    )
    assert type(s.max_turns) is int and s.max_turns == 2
    assert type(s.soft_trim_max_chars) is int and s.soft_trim_max_chars == 200
    assert type(s.soft_trim_ratio) is float and s.soft_trim_ratio == 0.25
    assert s.allow == ("read*", "bash")
    from ctxengine.errors import ConfigTypeError

    with pytest.raises(
        ConfigTypeError, match=re.escape("max_turns is bool np.True_; expected an int")
    ):
        PruneSettings(max_turns=np.bool_(True))  # type: ignore[arg-type]
