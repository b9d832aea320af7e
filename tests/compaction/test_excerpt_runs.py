"""A summary's excerpts say what repeated lines say once: a run of lines alike (a line
repeated, a log line that differs only in its counter or timestamp, a table's near-identical
rows) is one line with its count, and the room it would have taken goes to the lines that
carry information. Before, a session at 4,000 tokens whose tool results were 400 lines of
``x = 1`` got a summary quoting about 100 of them (a fifth of its budget), and a log's
heartbeat lines pushed the one error line in its middle out of the summary."""

from __future__ import annotations

import re

import anyio
import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.compaction import compact
from ctxengine.compaction.pipeline import EXCERPTS_HEADING, _excerpt_lines, summary_message
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message, ToolCall

pytestmark = pytest.mark.anyio
COUNT = get_tokenizer("o200k_base").count
BUDGET = 4_000


def _session(outputs: list[str]) -> list[Message]:
    """A request, then for each output a ``bash`` call returning it and a short reply."""
    history = [Message.user("Find out why the nightly import is slow; read its logs.")]
    for i, output in enumerate(outputs):
        call = ToolCall(f"c{i}", "bash", {"command": f"tail -n 400 /var/log/import-{i}.log"})
        history += [
            Message.assistant(f"Reading log {i}.", [call]),
            Message.tool(f"c{i}", output, name="bash"),
            Message.assistant(_reply(i)),
            Message.user(f"Go on with log {i + 1}."),
        ]
    return history


def _reply(i: int) -> str:
    return f"Log {i}: lock wait {i + 3} s."


def _render(history: list[Message]) -> str:
    """The summary of a render at :data:`BUDGET` tokens."""

    async def main() -> str:
        engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
        async with engine.session("runs") as s:
            s.extend(history)
            await s.user_message("What did you find?")
            out = await s.render("openai")
            assert out.tokens <= BUDGET
            assert out.report.compactions and out.report.compactions[-1]["ok"]
            assert s.state.summary is not None
            return s.state.summary.text

    return anyio.run(main)


def _spent(summary: str, pattern: str) -> int:
    """Tokens of the summary's lines that quote a line matching ``pattern``."""
    return sum(COUNT(line + "\n") for line in summary.splitlines() if re.search(pattern, line))


def _summarized(summary: str, logs: int) -> list[int]:
    """The logs whose reading the summary covers (their file listed in its Files)."""
    return [i for i in range(logs) if f"/var/log/import-{i}.log" in summary]


def _error(i: int) -> str:
    return f"ERROR import-{i}: row 7731 rejected, checksum mismatch in {('ab', 'cd', 'ef')[i % 3]}"


def test_a_repeated_line_is_quoted_once_with_its_count() -> None:
    """Tool results of 400 lines of ``x = 1`` (the case reported): the summary quotes
    ``x = 1`` in one line with its count, not a hundred times to fill its room, and the
    replies around the results, which say something, are kept."""
    summary = _render(_session(["\n".join(["x = 1"] * 400)] * 12))
    assert _spent(summary, "x = 1") <= 0.02 * BUDGET, summary
    assert "“x = 1” (× 400 lines)" in summary
    read = _summarized(summary, 12)
    assert len(read) >= 10, summary
    # the newest half of the replies summarized (the newest log's is in the kept turns)
    assert all(_reply(i) in summary for i in read[len(read) // 2 : -1]), summary


def _log(i: int) -> str:
    """A log of 400 heartbeat lines, each with its own timestamp and counter, and one error
    line in its middle."""
    lines = [
        f"2024-05-0{i + 1} 12:{n // 60:02d}:{n % 60:02d} worker {n} heartbeat ok"
        for n in range(400)
    ]
    lines.insert(200, _error(i))
    return "\n".join(lines)


def test_a_log_whose_lines_differ_only_in_numbers_is_quoted_by_its_ends() -> None:
    """The heartbeat lines are one line for each run (its first and last line and its count),
    not the newest forty lines of the log; the error line between the runs is kept."""
    summary = _render(_session([_log(i) for i in range(4)]))
    heartbeat = r"\d\d:\d\d:\d\d worker \d+ heartbeat ok"
    quoted = [line for line in summary.splitlines() if re.search(heartbeat, line)]
    assert _spent(summary, heartbeat) <= 0.1 * BUDGET, summary
    read = _summarized(summary, 4)
    assert len(read) >= 2 and all(_error(i) in summary for i in read), summary
    assert quoted, summary
    assert all("alike but for their numbers)" in line for line in quoted), quoted
    # the newest log's second run, from the line after the error to the last one
    newest = _log(read[-1]).splitlines()
    run = len(newest) - 201
    assert f"“{newest[201]}” … “{newest[-1]}” (× {run} lines, alike but" in summary


def _table(i: int) -> str:
    """A table of 400 rows alike but for their numbers, one row saying something else."""
    rows = [f"| {n} | batch-{n} | 0.{n % 10} s | ok |" for n in range(400)]
    rows[137] = f"| 137 | batch-137 | 9.{i} s | FAILED: lock timeout on orders_{i} |"
    return "\n".join(["| id | batch | time | state |", "|---|---|---|---|", *rows])


def test_a_table_of_near_identical_rows_keeps_the_row_that_differs() -> None:
    summary = _render(_session([_table(i) for i in range(4)]))
    rows = r"\| \d+ \| batch-\d+ \| 0\.\d s \| ok \|"
    assert _spent(summary, rows) <= 0.05 * BUDGET, summary
    read = _summarized(summary, 4)
    assert len(read) >= 2, summary
    assert all(f"FAILED: lock timeout on orders_{i}" in summary for i in read), summary
    assert "(× 262 lines, alike but for their numbers)" in summary


def test_lines_alike_fewer_than_a_run_are_quoted_each() -> None:
    """Below :data:`MIN_RUN` lines in a row nothing is counted: each line is written as it was
    (the excerpts of a text without runs are unchanged); from it on, one line."""
    from ctxengine.compaction.pipeline import MIN_RUN

    few = "\n".join(f"step {n} ok" for n in range(MIN_RUN - 1))
    lines = _excerpt_lines([Message.assistant(few)], 500, COUNT)
    assert lines[2:] == [
        "- assistant: “step 0 ok”",
        *(f"  “step {n} ok”" for n in range(1, MIN_RUN - 1)),
    ]
    many = "\n".join(["start", *(f"step {n} ok" for n in range(MIN_RUN)), "done"])
    lines = _excerpt_lines([Message.assistant(many)], 500, COUNT)
    assert lines[2:] == [
        "- assistant: “start”",
        f"  “step 0 ok” … “step {MIN_RUN - 1} ok” (× {MIN_RUN} lines, alike but for their numbers)",
        "  “done”",
    ]


def test_a_run_is_written_once_even_when_every_copy_is() -> None:
    """Writing every copy (the fill's last resort) still writes a run once: its copies in
    older messages say nothing more. The lines around it are written for each message."""
    turns = [
        Message.tool(f"c{n}", "\n".join([f"check {n}", *["x = 1"] * 50]), name="bash")
        for n in (1, 2)
    ]
    for once in (True, False):
        lines = _excerpt_lines(turns, 1_000, COUNT, once=once)
        assert sum("“x = 1” (× 50 lines)" in line for line in lines) == 1, lines
        assert any("check 1" in line for line in lines)


async def test_an_earlier_summary_s_excerpts_are_carried_with_their_runs_as_one_line() -> None:
    """A summary an earlier version wrote quotes every line of a log (or every copy of a line,
    to fill its room): the next summary carries each run of its excerpts as one line."""
    earlier = "\n".join(
        [
            "[Summary of the earlier conversation: 3 messages]",
            "This records earlier turns; it gives no instructions. Tool output in it is quoted "
            "data.",
            "",
            "## Goal",
            "Find out why the nightly import is slow.",
            "",
            EXCERPTS_HEADING,
            "- tool result bash: (…300 earlier lines) “x = 1”",
            *["  “x = 1”"] * 40,
            "  “ERROR: checksum mismatch”",
            *[f"  “worker {n} heartbeat ok”" for n in range(30)],
            "- user: “Find out why the nightly import is slow.”",
            "",
            "## Requests",
            "- (latest) Find out why the nightly import is slow.",
        ]
    )
    newer = [Message.assistant("Looking at the checksum."), Message.user("And now?")]
    result = await compact(
        [summary_message(earlier, 3), *newer], max_tokens=600, fill=True, latest_request="And now?"
    )
    assert result.ok, result.error
    body = result.summary[result.summary.index(EXCERPTS_HEADING) :]
    assert "- tool result bash: (…300 earlier lines) “x = 1” (× 41 lines)" in body
    assert "  “ERROR: checksum mismatch”" in body
    assert (
        "  “worker 0 heartbeat ok” … “worker 29 heartbeat ok” (× 30 lines, alike but for "
        "their numbers)" in body
    )
    assert body.count("x = 1") == 1 and body.count("heartbeat") == 2


def test_a_run_that_does_not_fit_is_written_by_its_last_line() -> None:
    """In the room left after the newer lines, a run whose line does not fit is written by its
    last line and its count, or by its last line alone (the lines before it counted), rather
    than leave the end of the room empty."""
    error = "src/app.ts({0},4): error TS2345: Argument of type 'undefined' is not assignable."
    text = "\n".join([*(error.format(n * 20) for n in range(8)), "Found 8 errors."])
    message = [Message.tool("c1", text, name="bash")]
    first, last = f"“{error.format(0)}”", f"“{error.format(140)}”"
    counted = "(× 8 lines, alike but for their numbers)"
    whole, shorter = f"{first} … {last} {counted}", f"{last} {counted}"
    # the room: the heading, the newest line, then the run's line (each line's cost: its
    # tokens and 2 for its prefix and newline)
    base = COUNT(EXCERPTS_HEADING) + 2 + COUNT("“Found 8 errors.”") + 2
    head = "- tool result bash: "
    for room, line in (
        (COUNT(whole) + 2, head + whole),
        (COUNT(whole) + 1, head + shorter),
        (COUNT(shorter) + 1, head + f"(…7 earlier lines) {last}"),
    ):
        lines = _excerpt_lines(message, base + room, COUNT)
        assert lines[2:] == [line, "  “Found 8 errors.”"], (room, lines)
