"""`ctxengine demo`, `ctxengine replay` and `ctxengine plugins list` through the real CLI."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console
from rich.progress import Progress

from ctxengine import count_messages
from ctxengine.cli import main
from ctxengine.cli_replay import (
    DEMO_BUDGET,
    CallRow,
    _break_causes,
    _print,
    _run,
    extends,
    middle_ellipsis,
)
from ctxengine.replay import demo_transcript_path
from ctxengine.transcript import load, load_all
from descriptors import open_descriptors
from offline_tiktoken import TRANSCRIPTS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "plugins"


@pytest.fixture(scope="module")
def demo_json() -> dict[str, Any]:
    """One ``ctxengine demo --json`` run, shared by the tests that read it."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdout", out)
        assert main(["demo", "--json"]) == 0
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def test_demo_compacts_and_stays_within_budget_on_every_call(demo_json: dict[str, Any]) -> None:
    calls = demo_json["calls"]
    assert demo_json["budget"] == DEMO_BUDGET
    assert len(calls) == demo_json["summary"]["calls"] > 100
    assert all(c["tokens"] <= DEMO_BUDGET and c["within_budget"] for c in calls)
    compactions = [c for call in calls for c in call["compactions"]]
    assert len(compactions) == demo_json["summary"]["compactions"] >= 1
    assert all(c["ok"] and c["messages"] > 0 for c in compactions)
    assert demo_json["summary"]["peak_tokens"] == max(c["tokens"] for c in calls)
    assert demo_json["transcript"]["messages"] == 465


def test_docs_cli_tells_what_the_demo_prints(demo_json: dict[str, Any]) -> None:
    # the page said "compacts three times ... peak 12,782" long after the demo changed
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text().split())
    summary = demo_json["summary"]
    at = [c["call"] for c in demo_json["calls"] if c["compactions"]]
    said = (
        f"the demo compacts {summary['compactions']} times (at {len(at)} of its "
        f"{summary['calls']} calls, the first at call {at[0]}), each compaction is one of its "
        f"{summary['prefix_breaks']} prefix breaks (there are none elsewhere), and every call "
        f"stays within budget (peak {summary['peak_tokens']:,} tokens)"
    )
    assert said in text
    assert summary["prefix_breaks"] == summary["prefix_breaks_at_compaction"]
    assert summary["within_budget"]


def test_readme_tells_what_the_demo_prints(demo_json: dict[str, Any]) -> None:
    # README said "about 45" prefix breaks and a peak of "about 14,100" while the demo
    # printed 43 and 14,065 (docs/cli.md, checked above, had the demo's own figures)
    text = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    summary = demo_json["summary"]
    said = (
        f"a summary: the {summary['calls']} calls, the peak ({summary['peak_tokens']:,} "
        f"tokens), the {summary['compactions']} compactions and the "
        f"{summary['prefix_breaks']} prefix breaks (at this budget, each at a compaction"
    )
    assert said in text
    assert summary["prefix_breaks"] == summary["prefix_breaks_at_compaction"]


def test_demo_json_holds_every_call_and_the_last_report(demo_json: dict[str, Any]) -> None:
    assert [c["call"] for c in demo_json["calls"]] == list(range(len(demo_json["calls"])))
    messages = [c["messages"] for c in demo_json["calls"]]
    assert messages == sorted(messages) and messages[-1] == 465
    last = demo_json["last_report"]
    assert last["tokens"] == demo_json["calls"][-1]["tokens"] and last["fits"] is True
    assert any(g["node_id"] == "mem.summary" for g in last["grains"])
    cuts = demo_json["largest_cuts"]
    saved = [c["tokens_before"] - c["tokens_after"] for c in cuts]
    assert saved == sorted(saved, reverse=True) and saved[0] > 0
    assert len({c["node_id"] for c in cuts}) == len(cuts)


def test_text_tables_fit_80_columns_and_keep_brackets() -> None:
    source = TRANSCRIPTS / "claude-code-spotter" / "subagent.jsonl"
    args = argparse.Namespace(
        model="gpt-4o", budget=4000, provider="openai", plugins=None, json=True
    )
    run = anyio.run(_run, args, source.name, load(source))
    buf = io.StringIO()
    _print(run, Console(file=buf, width=80, color_system=None))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "[transcript]" in text  # the origin is text, not rich markup
    assert "compactions (older history summarized into mem.summary)" in text
    assert f"{len(run.rows)} calls · peak " in text
    assert "\nevery call within budget\n" in text


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_demo_table_title_breaks_only_between_its_parts(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """At 80 columns the title of the demo's table (as wide as the table, 74) broke between
    "budget" and "16,000". It is one line where it fits, else a line for what is replayed
    and one for how, broken between parts only."""
    monkeypatch.setenv("COLUMNS", str(width))
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    assert main(["demo"]) == 0
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    header = next(i for i, line in enumerate(lines) if line.split()[:1] in (["call"], ["ca…"]))
    title = [line.strip() for line in lines[:header] if line.strip()]
    parts = ["demo session (Claude Code, MIT): 465 messages", "gpt-4o", "openai", "budget 16,000"]
    for part in parts:  # each part whole on one line of the title
        assert any(part in line for line in title), (part, title)
    assert " · ".join(title).split(" · ") == parts  # in order, nothing else


def test_the_demo_counts_prefix_breaks_and_each_is_at_a_compaction(
    demo_json: dict[str, Any],
) -> None:
    calls, summary = demo_json["calls"], demo_json["summary"]
    breaks = [c for c in calls if not c["prefix_kept"]]
    assert summary["prefix_breaks"] == len(breaks) >= 1  # the demo compacts, so it breaks
    assert summary["prefix_breaks_at_compaction"] == len(breaks)  # and only there
    assert all(c["compactions"] for c in breaks) and calls[0]["prefix_kept"]


def test_extends_is_the_prompt_cache_prefix_rule() -> None:
    before = {"system": "rules", "messages": [{"role": "user", "content": "a"}]}
    grown = {"system": "rules", "messages": [*before["messages"], {"role": "user", "c": "b"}]}
    assert extends(grown, before) and extends(before, before)
    assert not extends({**grown, "system": "other rules"}, before)  # the system part changed
    assert not extends({"system": "rules", "messages": []}, before)  # turns removed
    edited = {"system": "rules", "messages": [{"role": "user", "content": "A"}]}
    assert not extends(edited, before)  # an already-sent turn changed
    assert extends({"contents": [1, 2]}, {"contents": [1]})  # gemini's turns
    assert not extends({"input": [1], "tools": []}, {"input": [1]})  # a field appeared


def test_a_last_turn_grown_by_blocks_keeps_the_prefix() -> None:
    """Anthropic and Gemini merge a user message sent after a user turn (a second question,
    a tool result then a remark) into that turn: its blocks grow at the end, and the prompt
    up to its old last block is the one cached."""
    q = {"type": "text", "text": "/mode"}
    r = {"type": "text", "text": "read theme.md"}
    before = {
        "messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": [q]}]
    }
    merged = {"messages": [before["messages"][0], {"role": "user", "content": [q, r]}]}
    assert extends(merged, before)
    assert extends(
        {"contents": [{"role": "user", "parts": [1, 2]}]},
        {"contents": [{"role": "user", "parts": [1]}]},
    )
    # a block replaced, inserted before the old ones, a role or another key changed: broken
    assert not extends(
        {"messages": [merged["messages"][0], {"role": "user", "content": [r]}]}, before
    )
    assert not extends(
        {"messages": [merged["messages"][0], {"role": "user", "content": [r, q]}]}, before
    )
    assert not extends(
        {"messages": [merged["messages"][0], {"role": "assistant", "content": [q, r]}]}, before
    )
    flagged = {"role": "user", "content": [q, r], "name": "x"}
    assert not extends({"messages": [merged["messages"][0], flagged]}, before)
    # only the last turn may grow: an earlier one growing changes what follows it
    grown_first = {"messages": [{"role": "assistant", "content": "hi!"}, before["messages"][1]]}
    assert not extends(grown_first, before)
    two = {"messages": [{"role": "user", "content": [q]}, {"role": "assistant", "content": [q]}]}
    assert not extends({"messages": [{"role": "user", "content": [q, r]}, two["messages"][1]]}, two)
    # a string content grown is not a block added: the text of the turn changed
    assert not extends(
        {"messages": [{"role": "user", "content": "ab"}]},
        {"messages": [{"role": "user", "content": "a"}]},
    )


def _row(**kw: Any) -> CallRow:
    fields = dict(
        call=1,
        messages=2,
        tokens=10,
        kept=2,
        folded=0,
        dropped=0,
        windows={},
        compactions=[],
        ms=1.0,
    )
    return CallRow(**{**fields, **kw})


def test_each_break_is_given_its_cause() -> None:
    kept, before = _row(), _row(media_placeholders=10)
    assert kept.break_cause(None) is None
    assert _row(prefix_kept=False, after_clear=True, compactions=[{}]).break_cause(None) == "clear"
    assert (
        _row(prefix_kept=False, compactions=[{}], past_mark=True).break_cause(None) == "compaction"
    )
    assert _row(prefix_kept=False, past_mark=True).break_cause(before) == "mark"
    assert _row(prefix_kept=False, media_placeholders=20).break_cause(before) == "media_limit"
    # the same placeholders as the call before, under the mark, no compaction: no reason
    assert _row(prefix_kept=False, media_placeholders=10).break_cause(before) == "elsewhere"
    assert _row(prefix_kept=False).break_cause(None) == "elsewhere"


def test_the_summary_line_names_each_cause_it_saw() -> None:
    counts = dict.fromkeys(
        (
            "prefix_breaks_at_compaction",
            "prefix_breaks_at_mark",
            "prefix_breaks_at_media_limit",
            "prefix_breaks_elsewhere",
        ),
        0,
    )
    assert _break_causes(counts) == "0 at a compaction"
    counts.update(prefix_breaks_at_compaction=4, prefix_breaks_at_mark=2, prefix_breaks_elsewhere=1)
    assert _break_causes(counts) == "4 at a compaction, 2 at the high-water mark, 1 elsewhere"


@pytest.mark.parametrize("budget", [16_000, 64_000])
def test_a_real_session_sent_to_anthropic_breaks_its_prefix_only_where_there_is_a_cause(
    budget: int,
) -> None:
    """The pi session has user messages sent after a user turn (a tool result, then the user
    typing on): Anthropic merges them into the turn before, whose blocks grow at the end. That
    keeps the prefix; it was counted as 15 breaks at each budget."""
    session = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdout", out)
        args = ["replay", str(session), "--budget", str(budget), "--provider", "anthropic"]
        assert main([*args, "--json"]) == 0
    data = json.loads(out.getvalue())
    summary, causes = data["summary"], [c["prefix_break"] for c in data["calls"]]
    assert summary["prefix_breaks_elsewhere"] == 0 and "elsewhere" not in causes
    assert summary["prefix_breaks"] == sum(c is not None for c in causes)
    assert (
        summary["prefix_breaks"]
        == summary["prefix_breaks_at_compaction"]
        + summary["prefix_breaks_at_mark"]
        + summary["prefix_breaks_at_media_limit"]
    )
    assert summary["prefix_breaks_at_compaction"] >= 1


def test_middle_ellipsis_keeps_both_ends() -> None:
    node = "act.tool_result.toolu_015JvAsY5Z94GfNgmRYM8qct"
    cut = middle_ellipsis(node, 26)
    assert len(cut) == 26 and cut.startswith("act.tool_res") and cut.endswith("GfNgmRYM8qct")
    other = middle_ellipsis("act.tool_result.toolu_01Ub9KFAAhuZu7bZznKrVXnn", 26)
    assert cut != other
    assert middle_ellipsis("hist.3", 26) == "hist.3"


def test_replay_writes_payload_and_report(tmp_path: Path) -> None:
    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    out, rep = tmp_path / "payload.json", tmp_path / "report.json"
    args = ["replay", str(source), "--budget", "4000", "--out", str(out), "--report", str(rep)]
    assert main([*args, "--model", "gpt-4o", "--json"]) == 0
    payload = json.loads(out.read_text())
    assert count_messages(payload["messages"], model="gpt-4o") <= 4000
    assert json.loads(rep.read_text())["budget"] == 4000


def test_an_unwritable_output_path_is_refused_before_the_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    out = tmp_path / "payload.json"
    bad = tmp_path / "no" / "dir" / "r.json"
    assert main(["replay", str(source), "--out", str(out), "--report", str(bad)]) == 2
    captured = capsys.readouterr()
    assert f"--report {bad}: the folder {bad.parent} does not exist" in captured.err
    assert captured.out == "" and list(tmp_path.iterdir()) == []  # --out was not written either
    assert main(["replay", str(source), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path}: is a folder; expected a file path" in capsys.readouterr().err


def test_out_and_report_naming_one_file_is_refused_before_the_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both written to one file left only the report there, and the payload asked for was
    lost without a word; also through another spelling of the path or a link to it."""
    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.json").symlink_to(tmp_path / "both.json")
    for report in ("both.json", str(tmp_path / "both.json"), "./link.json"):
        assert main(["replay", str(source), "--out", "both.json", "--report", report]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert f"--out both.json and --report {report} are the same file" in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json"]
    both = ["--out", os.devnull, "--report", os.devnull, "--json"]  # a device takes both
    assert main(["replay", str(source), "--budget", "4000", *both]) == 0


def test_an_empty_output_path_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--out ''`` (an unset shell variable) was taken as no --out: nothing was written and
    nothing said."""
    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    for flag in ("--out", "--report"):
        assert main(["replay", str(source), flag, ""]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"{flag} '': the path is empty; expected a file path" in captured.err


def test_an_output_folder_that_takes_no_file_is_refused_before_the_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder where no file can be created passed the check, the whole replay ran, and the
    error then named the temporary file ('.r.json.4242.ab12cd34.tmp: Operation not
    permitted'), not the option."""
    import ctxengine.cli_replay as cli_replay

    ran: list[object] = []
    monkeypatch.setattr(cli_replay, "_run", lambda *a: ran.append(a))
    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    locked = tmp_path / "locked"
    locked.mkdir()
    subprocess.run(["chattr", "+i", str(locked)], check=True)  # no file can be created in it
    try:
        assert main(["replay", str(source), "--report", str(locked / "r.json")]) == 2
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    err = capsys.readouterr().err
    assert ran == [] and err.count("\n") == 1 and ".tmp" not in err
    assert f"--report {locked / 'r.json'}: no file can be created in {locked}" in err
    assert "expected a path in a writable folder" in err
    assert list(locked.iterdir()) == []


def test_a_failed_write_leaves_neither_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that takes no file after the check (the check is skipped here)."""
    import ctxengine.cli_replay as cli_replay

    monkeypatch.setattr(cli_replay, "_probe", lambda *a: None)
    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    out, locked = tmp_path / "payload.json", tmp_path / "locked"
    out.write_text("before")
    locked.mkdir()
    subprocess.run(["chattr", "+i", str(locked)], check=True)  # no file can be created in it
    try:
        args = ["replay", str(source), "--out", str(out), "--report", str(locked / "r.json")]
        assert main([*args, "--json"]) == 2
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    err = capsys.readouterr().err
    assert f"--report {locked / 'r.json'}: cannot write it" in err and ".tmp" not in err
    assert out.read_text() == "before"  # the pair is written whole or not at all
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked", "payload.json"]
    assert list(locked.iterdir()) == []


def test_an_output_link_or_pipe_is_written_through_not_replaced(tmp_path: Path) -> None:
    """A link keeps pointing where it did (its file gets the payload); a pipe (as a device
    such as /dev/null or /dev/stdout) is written into, never replaced by a regular file."""
    import contextlib
    import os
    import stat
    import threading

    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    real, link, pipe = tmp_path / "payload.json", tmp_path / "link.json", tmp_path / "pipe"
    real.write_text("before")
    link.symlink_to(real)
    os.mkfifo(pipe)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_text()), daemon=True)
    reader.start()
    try:
        args = ["replay", str(source), "--budget", "4000", "--out", str(link)]
        assert main([*args, "--report", str(pipe), "--json"]) == 0
    finally:
        if reader.is_alive():  # the replay failed before opening the pipe: let the reader go
            # without blocking (a blocking open waits for a reader that may not be there yet,
            # and hid the replay's own error behind the test's timeout)
            with contextlib.suppress(OSError):
                os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=30)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert "messages" in json.loads(real.read_text())
    assert stat.S_ISFIFO(pipe.lstat().st_mode) and json.loads(got[0])["budget"] == 4000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "payload.json", "pipe"]


AIDER = TRANSCRIPTS / "aider" / "mozgoslav.aider.chat.history.md"


def test_replay_of_a_multi_session_file_says_so_and_picks_one_with_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sizes = [len(t) for t in load_all(AIDER)]
    assert len(sizes) == 3  # one aider session per launch
    assert main(["replay", str(AIDER), "--budget", "4000"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("replaying session 1 of 3 in the file; --session N picks another")
    assert main(["replay", str(AIDER), "--session", "2", "--budget", "4000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["transcript"]
    assert (data["session"], data["sessions"], data["messages"]) == (2, 3, sizes[1])
    assert main(["replay", str(AIDER), "--session", "4"]) == 2
    assert f"--session 4: {AIDER} holds 3 session(s); expected 1 to 3" in capsys.readouterr().err


def test_replay_skips_an_empty_first_session_and_names_the_one_it_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A launch of aider quit before any input logs an empty session (its header and banner,
    written by ``InputOutput.__init__`` in Aider-AI/aider ``aider/io.py``). Replay took that
    session and stopped ("no messages; nothing to replay"); it replays the first session with
    messages and says its true number, 2 of 4, not 1."""
    empty = (
        "\n# aider chat started at 2026-04-22 22:39:58\n\n"
        "> Aider v0.86.2  \n> Model: gpt-4o with diff edit format  \n> ^C KeyboardInterrupt  \n"
    )
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(empty + AIDER.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["replay", str(path), "--budget", "4000"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("replaying session 2 of 4 in the file; --session N picks another")
    assert main(["replay", str(path), "--budget", "4000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["transcript"]
    assert (data["session"], data["sessions"]) == (2, 4)
    assert data["messages"] == len(load_all(AIDER)[0])
    assert main(["replay", str(path), "--session", "1"]) == 2  # named, the empty one is refused
    assert "no messages" in capsys.readouterr().err


def test_a_clear_of_the_recording_is_no_engine_prefix_break(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After aider's ``/clear`` the replay goes on in a new engine session, and the call there
    extends nothing: the command line counted it as a prefix break the engine caused
    (``prefix_breaks: 1, prefix_breaks_at_compaction: 0``), although the recording reset the
    conversation. It is counted apart, and marked in the table. The progress bar went back
    there (messages of the new session against the whole transcript's): it follows the
    position in the transcript."""
    banner = "> Aider v0.86.2  \n> Model: gpt-4o with diff edit format  \n"
    log = (
        "\n# aider chat started at 2026-04-22 22:40:12\n\n"
        + banner
        + "#### explain module a  \n\nModule a parses the config.\n\n"
        + "> Tokens: 1k sent, 5 received.  \n\n"
        + "#### /clear  \n\n> All chat history cleared.  \n\n"
        + "#### write a haiku  \n\nAn old silent pond.\n\n"
        + "> Tokens: 0.5k sent, 9 received.  \n\n"
    )
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log, encoding="utf-8")
    shown: list[int] = []
    update = Progress.update

    def record(self: Progress, task: Any, **fields: Any) -> None:
        shown.append(fields["completed"])
        update(self, task, **fields)

    monkeypatch.setattr(Progress, "update", record)
    assert main(["replay", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    summary, calls = data["summary"], data["calls"]
    assert (summary["prefix_breaks"], summary["prefix_breaks_at_clear"]) == (0, 1)
    assert summary["prefix_breaks_at_compaction"] == 0
    assert [(c["messages"], c["prefix_kept"], c["after_clear"]) for c in calls] == [
        (1, True, False),
        (1, False, True),  # the new session holds only what follows the clear
        (2, True, False),
    ]
    assert shown == sorted(shown) and shown[-1] == data["transcript"]["messages"] == 4
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    marked = [line.split()[0] for line in out.splitlines() if " clear " in f"{line} "]
    assert marked == ["1"]  # the call after the clear, and no other row
    text = " ".join(out.split())
    assert "0 prefix breaks (0 at a compaction); 1 more where the recording cleared" in text


def test_session_beyond_the_one_of_a_conversation_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OpenHands conversation folder holds one session: '--session 2' replayed it as if
    it were the second, without a word."""
    events = tmp_path / "conv" / "events"
    events.mkdir(parents=True)
    for i, (role, said) in enumerate([("user", "list the files"), ("assistant", "a.py b.py")]):
        event = {
            "kind": "MessageEvent",
            "id": f"{i:08x}-0000-4000-8000-000000000000",
            "timestamp": "2025-11-01T10:00:00",
            "source": "user" if role == "user" else "agent",
            "llm_message": {"role": role, "content": [{"type": "text", "text": said}]},
        }
        (events / f"event-{i:05d}-{event['id']}.json").write_text(json.dumps(event))
    folder = str(tmp_path / "conv")
    assert main(["replay", folder, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["transcript"]["messages"] == 2
    assert main(["replay", folder, "--session", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"--session 2: {folder} holds 1 session(s); expected 1 to 1" in captured.err


def test_replay_of_a_single_session_file_says_nothing_of_sessions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = TRANSCRIPTS / "claude-code-spotter" / "tool_heavy.jsonl"
    assert main(["replay", str(source), "--budget", "3000"]) == 0
    assert "replaying session" not in capsys.readouterr().out
    assert main(["replay", str(source), "--budget", "3000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["transcript"]
    assert (data["session"], data["sessions"]) == (1, 1)


def test_replay_for_anthropic_payload(tmp_path: Path) -> None:
    source = TRANSCRIPTS / "claude-code-spotter" / "tool_heavy.jsonl"
    out = tmp_path / "payload.json"
    args = ["replay", str(source), "--provider", "anthropic", "--model", "claude-sonnet-4-5"]
    assert main([*args, "--budget", "3000", "--out", str(out), "--json"]) == 0
    payload = json.loads(out.read_text())
    assert payload["messages"][0]["role"] == "user"


def test_replay_with_plugins_and_format(capsys: pytest.CaptureFixture[str]) -> None:
    source = TRANSCRIPTS / "claude-code-spotter" / "tool_heavy.jsonl"
    args = ["replay", str(source), "--format", "claude-code", "--plugins", str(EXAMPLES)]
    assert main([*args, "--budget", "3000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["transcript"]["format"] == "claude-code"
    origins = {g["origin"] for g in data["last_report"]["grains"]}
    assert "workspace_rules" in origins


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["replay", "no/such/file.jsonl"], "no/such/file.jsonl: no such file"),
        (["replay", os.devnull], f"{os.devnull}: not a regular file"),
        (["replay", "."], ".: is a folder; expected a transcript file"),
        (["demo", "--budget", "0"], "'0' is not a token count; expected an int ≥ 1"),
        (["demo", "--plugins", "no/such/dir"], "'no/such/dir' does not exist"),
        (["demo", "--model", "llama-3"], 'unknown model or encoding "llama-3"'),
        (["replay", str(demo_transcript_path()), "--format", "xml"], "invalid choice: 'xml'"),
    ],
)
def test_user_errors_are_one_line_on_stderr_with_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ")
    assert expected in captured.err


def test_budget_error_names_the_budget_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--budget", "100"]) == 2
    err = capsys.readouterr().err
    assert "the budget of 100 leaves" in err and "request framing" in err


def test_a_format_hint_speaks_flags_not_keywords(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    odd = tmp_path / "session.txt"
    odd.write_text("{}\n")
    assert main(["replay", str(odd)]) == 2
    err = capsys.readouterr().err
    assert "(or pass --format)" in err and "format=" not in err


def test_plugins_list_loads_the_example_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "list", "--plugins", str(EXAMPLES), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    example = next(r for r in rows if r["name"] == "workspace_rules")
    assert example["state"] == "enabled" and example["source"] == "dir"


def _chatty_plugins(root: Path) -> Path:
    """A plugin folder whose plugin prints on import and at every call, as debugging does."""
    folder = root / "plugins" / "chatty"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        '{"name": "chatty", "version": "1.0.0", "entry": "plugin.py:Chatty"}'
    )
    (folder / "plugin.py").write_text(
        "print('chatty: imported')\n"
        "class Chatty:\n"
        "    name, version, priority, enabled = 'chatty', '1.0.0', 10, True\n"
        "    async def collect(self, scene):\n"
        "        print('chatty: collect')\n"
        "        return []\n"
    )
    return folder.parent


@pytest.mark.parametrize("command", ["plugins list", "replay"])
def test_json_stdout_holds_only_the_data_when_a_plugin_prints(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a plugin printed went to stdout ahead of the JSON, which a script could then not
    parse; with --json it goes to stderr."""
    plugins = str(_chatty_plugins(tmp_path))
    argv = command.split()
    if command == "replay":
        argv += [str(TRANSCRIPTS / "openhands" / "output.jsonl"), "--budget", "4000"]
    assert main([*argv, "--plugins", plugins, "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data  # the whole of stdout is the data
    assert "chatty: imported" in captured.err
    if command == "replay":
        assert "chatty: collect" in captured.err
    assert main([*argv, "--plugins", plugins]) == 0  # a table: printed where it was printed
    assert "chatty: imported" in capsys.readouterr().out


def _raw_plugins(root: Path) -> Path:
    """A plugin folder whose plugin writes to file descriptor 1 itself, past ``sys.stdout``:
    ``os.write(1, ...)`` and a child process that inherits it, on import and at every call."""
    folder = root / "plugins" / "raw"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        '{"name": "raw", "version": "1.0.0", "entry": "plugin.py:Raw"}'
    )
    (folder / "plugin.py").write_text(
        "import asyncio, os, subprocess, sys\n"
        "def _child(when):\n"
        "    return [sys.executable, '-c', f'print(\"raw: child {when}\")']\n"
        "print('raw: print imported')\n"
        "os.write(1, b'raw: fd 1 imported\\n')\n"
        "subprocess.run(_child('imported'), check=True)\n"
        "class Raw:\n"
        "    name, version, priority, enabled = 'raw', '1.0.0', 10, True\n"
        "    async def collect(self, scene):\n"
        "        print('raw: print collect')\n"
        "        os.write(1, b'raw: fd 1 collect\\n')\n"
        "        child = await asyncio.create_subprocess_exec(*_child('collect'))\n"
        "        await child.wait()\n"
        "        return []\n"
    )
    return folder.parent


@pytest.mark.parametrize("command", ["plugins list", "replay"])
def test_json_stdout_holds_only_the_data_when_a_plugin_writes_to_descriptor_1(
    command: str, tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Only ``sys.stdout`` was sent to stderr: a plugin's ``os.write(1, ...)`` and the output
    of a child process it ran still reached stdout, around the JSON, which a script could then
    not parse. The whole descriptor 1 now goes to stderr while the command runs."""
    argv = command.split()
    if command == "replay":
        argv += [str(TRANSCRIPTS / "openhands" / "output.jsonl"), "--budget", "4000"]
    argv += ["--plugins", str(_raw_plugins(tmp_path)), "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "ctxengine", *argv],
        capture_output=True,
        text=True,
        env=child_env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)  # the whole of stdout is the data
    whens = ["imported", "collect"] if command == "replay" else ["imported"]
    for when in whens:
        for way in ("print", "fd 1", "child"):
            assert f"raw: {way} {when}" in done.stderr
    assert "raw:" not in done.stdout


def test_json_output_restores_descriptor_1_after_the_command(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """In a process that goes on after the command (main() called in-process), descriptor 1
    is stdout again once the command has ended."""
    plugins = str(_raw_plugins(tmp_path))
    assert main(["plugins", "list", "--plugins", plugins, "--json"]) == 0
    os.write(1, b"after the command\n")
    captured = capfd.readouterr()
    assert "raw: fd 1 imported" in captured.err and "raw: child imported" in captured.err
    assert captured.out.endswith("]\nafter the command\n")
    assert json.loads(captured.out.removesuffix("after the command\n"))


class _Minimal:
    """A caller's ``sys.stdout`` of its own: a wrapper of the real one that logs what it is
    given (``write``, ``flush``, ``fileno`` only: no ``encoding``, no ``errors``)."""

    def __init__(self, real: Any) -> None:
        self.real, self.log = real, []

    def write(self, text: str) -> int:
        self.log.append(text)
        return int(self.real.write(text))

    def flush(self) -> None:
        self.real.flush()

    def fileno(self) -> int:
        return int(self.real.fileno())


class _Tee(_Minimal):
    """The same, passing every other attribute on to the real stream (``encoding``...)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("wrapper", [_Minimal, _Tee], ids=["minimal", "tee"])
def test_json_data_goes_through_the_callers_stdout(
    wrapper: type[_Minimal], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The data of a ``--json`` command run in-process goes through ``sys.stdout`` as the
    caller set it, and reaches descriptor 1 while a plugin's writes to it go to stderr. A
    minimal wrapper was an internal error (its ``encoding`` was read) and leaked a descriptor;
    one with ``encoding`` never saw the data (written past it to a copy of descriptor 1)."""
    real = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (closed below)
    stdout = wrapper(real)
    monkeypatch.setattr(sys, "stdout", stdout)
    before = open_descriptors()
    status = main(["count", __file__, "--json"])
    after = open_descriptors()
    monkeypatch.undo()
    real.close()
    captured = capfd.readouterr()
    assert status == 0, captured.err
    assert json.loads("".join(stdout.log))["tokens"] > 0
    assert captured.out == "".join(stdout.log)
    assert after == before


def test_json_with_stdout_closed_writes_nowhere_as_tables_do(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """``>&-``: a table is written nowhere, status 0; ``--json`` was an internal error
    (``count``) or wrote its data to stderr (``plugins list``)."""
    for argv in (["count", __file__], ["count", __file__, "--json"], ["plugins", "list", "--json"]):
        done = subprocess.run(
            ["sh", "-c", 'exec "$0" -m ctxengine "$@" >&-', sys.executable, *argv],
            capture_output=True,
            text=True,
            env=child_env,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), argv


@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["table", "json"])
def test_a_closed_pipe_in_process_leaks_no_descriptor(
    flags: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader of stdout went away: status 141, and descriptor 1 is pointed at the null
    device (what is left in the buffer is dropped) with no descriptor left open for it."""
    read, write = os.pipe()
    os.close(read)
    saved = os.dup(1)
    os.dup2(write, 1)
    os.close(write)
    stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (closed below)
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        before = open_descriptors()
        status = main(["plugins", "list", *flags])
        after = open_descriptors()
        now = os.readlink("/proc/self/fd/1")
        stdout.close()  # the rest of its buffer, to the null device
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert status == 141
    assert now == os.devnull
    assert after == before


def test_plugins_list_missing_folder_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "list", "--plugins", "missing"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "'missing' does not exist" in captured.err


def test_a_replay_tells_one_time_so_a_clock_that_moves_breaks_no_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo's environment grain said the current minute on every call: a run that crossed
    a minute boundary broke the prompt prefix at a call with no compaction (about one run in
    five on a loaded machine). A replay tells the time it started."""
    import datetime as real

    from ctxengine.builtins import env_info

    class Moving(real.datetime):
        ticks = 0

        @classmethod
        def now(cls, tz: Any = None) -> Any:  # a minute later on every call
            cls.ticks += 1
            return real.datetime(2026, 1, 1, 12, 0, tzinfo=real.timezone.utc) + real.timedelta(
                minutes=cls.ticks
            )

    monkeypatch.setattr(env_info, "datetime", Moving)
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    assert main(["demo", "--json"]) == 0
    calls = json.loads(out.getvalue())["calls"]
    assert all(c["compactions"] for c in calls if not c["prefix_kept"])


@pytest.mark.parametrize("option", ["--out", "--report"])
def test_json_with_an_output_naming_stdout_is_refused(
    tmp_path: Path, child_env: dict[str, str], option: str
) -> None:
    """Descriptor 1 points at stderr while a ``--json`` command runs, so ``--out /dev/stdout``
    wrote the payload to stderr, and stdout held the --json data alone. Such an option (also
    as /proc/self/fd/1, or a file stdout is redirected to) is one line, status 2, nothing run.
    Without --json, /dev/stdout is written through as given; the null device takes both."""
    source = str(TRANSCRIPTS / "openhands" / "output.jsonl")
    replay = [sys.executable, "-m", "ctxengine", "replay", source, "--budget", "4000"]
    for path in ("/dev/stdout", "/proc/self/fd/1"):
        done = subprocess.run(
            [*replay, option, path, "--json"], capture_output=True, text=True, env=child_env
        )
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr.count("\n") == 1
        assert done.stderr.startswith(f"error: {option} {path}: is the same file as stdout")
        assert "carries the --json data" in done.stderr
    same = tmp_path / "same.json"
    shell = 'exec "$0" "$@" > "$FILE"'
    done = subprocess.run(
        ["sh", "-c", shell, *replay, option, str(same), "--json"],
        capture_output=True,
        text=True,
        env={**child_env, "FILE": str(same)},
    )
    assert done.returncode == 2, done.stderr
    assert f"error: {option} {same}: is the same file as stdout" in done.stderr
    assert same.read_text() == ""  # (emptied by the shell) nothing written
    # the null device as stdout and as the option takes both
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" > /dev/null', *replay, option, os.devnull, "--json"],
        capture_output=True,
        text=True,
        env=child_env,
    )
    assert (done.returncode, done.stderr) == (0, "")
    # without --json: /dev/stdout is written through, as given
    done = subprocess.run(
        [*replay, option, "/dev/stdout"], capture_output=True, text=True, env=child_env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().startswith("{")
    key = "messages" if option == "--out" else "budget"
    assert f'"{key}"' in done.stdout


@pytest.mark.parametrize("path", ["/dev/stdout", "/proc/self/fd/1"])
def test_json_with_stdout_on_the_null_device_writes_an_output_naming_stdout_there(
    child_env: dict[str, str], path: str
) -> None:
    """With stdout on the null device an option naming stdout is not refused (the device
    takes both), but it was opened while descriptor 1 pointed at stderr: the payload went
    to stderr (``ctxengine replay F --json --out /dev/stdout > /dev/null``)."""
    source = str(TRANSCRIPTS / "openhands" / "output.jsonl")
    replay = [sys.executable, "-m", "ctxengine", "replay", source, "--budget", "4000"]
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" > /dev/null', *replay, "--out", path, "--json"],
        capture_output=True,
        text=True,
        env=child_env,
    )
    assert (done.returncode, done.stderr) == (0, "")


def _link(tmp_path: Path, target: str) -> str:
    link = tmp_path / "out.json"
    link.symlink_to(target)
    return str(link)


@pytest.mark.parametrize(
    "spell",
    [
        lambda tmp: "/dev/stdout",
        lambda tmp: "/proc/self/fd/1",
        lambda tmp: "/dev/fd/1",
        lambda tmp: _link(tmp, "/dev/stdout"),
        lambda tmp: _link(tmp, "/proc/self/fd/1"),
    ],
    ids=["dev-stdout", "proc-self-fd", "dev-fd", "link-to-dev-stdout", "link-to-proc-fd"],
)
def test_an_output_naming_stdout_redirected_to_a_file_keeps_the_table(
    tmp_path: Path, child_env: dict[str, str], spell: Any
) -> None:
    """``ctxengine replay F --out /dev/stdout > log.txt``: /dev/stdout leads to the regular
    file log.txt, which the atomic write replaced by a new file holding the payload; the
    table, printed after it to the old file, was lost. A path naming a descriptor is written
    through that descriptor (at its offset, as a shell's ``>&1``): the file holds the payload,
    then the table."""
    log = tmp_path / "log.txt"
    log.write_text("")
    inode = log.stat().st_ino
    source = str(TRANSCRIPTS / "openhands" / "output.jsonl")
    replay = [sys.executable, "-m", "ctxengine", "replay", source, "--budget", "4000"]
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" > "$FILE"', *replay, "--out", spell(tmp_path)],
        capture_output=True,
        text=True,
        env={**child_env, "FILE": str(log)},
    )
    assert done.returncode == 0, done.stderr
    assert log.stat().st_ino == inode  # written into, not replaced
    text = log.read_text()
    payload, end = json.JSONDecoder().raw_decode(text)
    assert payload["messages"]
    assert "prefix breaks" in text[end:] and "every call within budget" in text[end:]
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_output_naming_stdout_appended_to_a_file_keeps_what_it_held(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """``--report /dev/stdout >> log.txt`` adds the report to the log, after what it held:
    opened anew (or replaced), the file lost its earlier lines."""
    log = tmp_path / "log.txt"
    log.write_text("earlier run\n")
    source = str(TRANSCRIPTS / "openhands" / "output.jsonl")
    replay = [sys.executable, "-m", "ctxengine", "replay", source, "--budget", "4000"]
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" >> "$FILE"', *replay, "--report", "/dev/stdout"],
        capture_output=True,
        text=True,
        env={**child_env, "FILE": str(log)},
    )
    assert done.returncode == 0, done.stderr
    text = log.read_text()
    assert text.startswith("earlier run\n{")
    report, end = json.JSONDecoder().raw_decode(text, len("earlier run\n"))
    assert report["budget"] == 4000 and "every call within budget" in text[end:]


@pytest.mark.parametrize("path", ["/dev/fd/9", "/dev/stdout"])
def test_an_output_naming_a_closed_descriptor_is_refused_before_the_replay(
    child_env: dict[str, str], path: str
) -> None:
    """No replay for an output that cannot be written: the descriptor is named."""
    source = str(TRANSCRIPTS / "openhands" / "output.jsonl")
    replay = [sys.executable, "-m", "ctxengine", "replay", source, "--budget", "4000"]
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" >&- 9>&-', *replay, "--out", path],
        capture_output=True,
        text=True,
        env=child_env,
    )
    assert done.returncode == 2
    number = path.rsplit("/", 1)[-1].replace("stdout", "1")
    assert done.stderr == (
        f"error: --out {path}: file descriptor {number} is not open; expected a path to a "
        "file, or to an open descriptor\n"
    )


def test_a_payload_extends_one_with_no_turns() -> None:
    before = {"system": "s", "messages": []}
    two = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert extends({"system": "s", "messages": two}, before)
    assert not extends({"system": "t", "messages": two}, before)
