"""A user-role message is not always a request: a harness's observation (SWE-agent's command
output, OpenHands' errors and workspace context), Claude Code's text (a skill's
instructions, a caveat, a command's output) and a slash command are neither listed under
``## Requests``, nor kept as the newest request, nor pending, nor the goal; an observation's
identifiers and files are still read. A message built with ``Message.user`` is a request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine, ExtractiveSummarizer
from ctxengine.compaction import compact
from ctxengine.compaction.facts import extract_facts, latest_of
from ctxengine.compaction.requests import request_text
from ctxengine.replay import replay
from ctxengine.transcript import Message, Text, Transcript, load_all
from ctxengine.transcript.importers.aider import COMMANDS, REQUEST_COMMANDS

from .helpers import CC_MAIN, DATA, PI
from .test_section_repeats import sections

SWE = DATA / "swe-agent"
PYDICOM = next(SWE.rglob("pydicom__pydicom-1458.traj"))
CTF = next(SWE.rglob("i_got_id_demo.traj"))
OPENHANDS = DATA / "openhands" / "output.jsonl"
SUBAGENT = DATA / "claude-code-spotter" / "subagent.jsonl"

TASK = "Fix the crash in src/parse.py when the input is empty"
OUTPUT = (
    "Traceback (most recent call last):\n"
    '  File "/repo/src/parse.py", line 3, in <module>\n'
    "ValueError: empty input\n"
    "(Open file: /repo/src/parse.py)"
)


def _summary(history: list[Message]) -> str:
    result = anyio.run(lambda: compact(history, max_tokens=2_000))
    assert result.ok, result.error
    return result.summary


def _loop(observation: Message) -> list[Message]:
    return [
        Message.user(TASK),
        Message.assistant("I'll reproduce it first.\n```\npython reproduce.py\n```"),
        observation,
    ]


# -- hand-built messages ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["observation", "error", "recall"])
def test_an_observation_is_no_request_but_its_facts_are_read(kind: str) -> None:
    """The newest user message is a harness's observation: the task stays the newest
    request, kept verbatim, and the goal; nothing is pending for the observation."""
    summary = _summary(_loop(Message("user", (Text(OUTPUT),), meta={"kind": kind})))
    parts = sections(summary)
    assert parts["Goal"] == [TASK]
    assert parts["Requests"] == [f"- (latest) {TASK}"]
    assert latest_of(summary) == TASK
    assert "Pending" not in parts  # the agent acted on the task; the output asks nothing
    assert "/repo/src/parse.py" in " ".join(parts["Identifiers"])  # still read
    # the same text, built by hand, is the user's: a request, the newest
    by_hand = _summary(_loop(Message.user(OUTPUT)))
    assert latest_of(by_hand) == OUTPUT
    assert sections(by_hand)["Pending"] == [
        "- answer the latest request: Traceback (most recent call last):"
    ]


def test_an_observation_neither_asks_nor_settles_an_earlier_ask() -> None:
    history = [
        Message.user(TASK),
        Message.assistant("Should I keep the old parser for the export module?"),
        Message("user", (Text("exit code 0"),), meta={"kind": "observation"}),
    ]
    assert extract_facts(history).pending == [
        "assistant asked: Should I keep the old parser for the export module?"
    ]


@pytest.mark.parametrize(
    ("text", "meta", "made"),
    [
        (TASK, {}, TASK),
        (TASK, {"kind": "observation"}, None),
        (TASK, {"kind": "error"}, None),
        (TASK, {"kind": "recall"}, None),
        (TASK, {"is_meta": True}, None),
        (TASK, {"is_demo": True}, None),
        # pi: a shell command's output, an extension's message, a stored summary; OpenHands'
        # condensation summary
        (TASK, {"kind": "bashExecution"}, None),
        (TASK, {"kind": "custom"}, None),
        (TASK, {"kind": "hookMessage"}, None),
        (TASK, {"kind": "compactionSummary"}, None),
        (TASK, {"kind": "branchSummary"}, None),
        (TASK, {"kind": "summary"}, None),
        ("Base directory for this skill: /home/u/.claude/skills/x\n\n# X", {}, None),
        ("<local-command-stdout>Compacted</local-command-stdout>", {}, None),
        ("[Request interrupted by user]", {}, None),
        ("/model gpt-4o", {}, None),
        ("/clear", {}, None),
        ("/", {}, None),
        ("<command-name>/mcp</command-name>\n<command-args></command-args>", {}, None),
        (
            "<command-message>beads</command-message>\n<command-name>/beads</command-name>\n"
            "<command-args>set up credo\nand dialyzer</command-args>",
            {},
            "/beads set up credo\nand dialyzer",
        ),
        ("ok, continue", {}, "ok, continue"),  # an acknowledgement is a request, not a goal
        ("/var/shots/a.png what is wrong here?", {}, "/var/shots/a.png what is wrong here?"),
        # a word of a path, not a command the harness knows: the user writing about it
        ("/tmp is full, clean it up please", {}, "/tmp is full, clean it up please"),
        ("/home has no space left", {}, "/home has no space left"),
        ("/compact keep the API notes", {}, None),  # the harness's own, with arguments
        ("/add src/a.py src/b.py", {}, None),
        # a plugin's command with arguments: a prompt it expands, as its wrapper is read
        ("/handgemacht:create-beads websearch", {}, "/handgemacht:create-beads websearch"),
        ("/tmp", {}, None),  # a word alone: a command (or a path with nothing asked)
    ],
)
def test_what_is_a_request(text: str, meta: dict[str, Any], made: str | None) -> None:
    assert request_text(text, meta) == made


def test_commands_are_not_listed_as_requests() -> None:
    """``/model x`` and ``/clear`` tell the harness what to do: left out of Requests as they
    are out of the goal; a command with arguments is the request ``/name arguments``."""
    wrapper = (
        "<command-message>beads</command-message>\n<command-name>/beads</command-name>\n"
        "<command-args>set up credo</command-args>"
    )
    history = [
        Message.user("/model gpt-4o"),
        Message.assistant("Set model to gpt-4o."),
        Message.user(wrapper),
        Message.assistant("I'll set up credo."),
        Message.user(TASK),
        Message.assistant("Fixed: the parser checks for empty input."),
        Message.user("/clear"),
    ]
    summary = _summary(history)
    parts = sections(summary)
    assert parts["Requests"] == ["- /beads set up credo", f"- (latest) {TASK}"]
    assert parts["Goal"] == ["/beads set up credo"]
    assert "Pending" not in parts  # "/clear" asks nothing of the agent


def test_every_aider_command_that_asks_nothing_is_a_command() -> None:
    """aider's commands are one list, its importer's (``COMMANDS``, aider's ``Commands.cmd_*``
    in Aider-AI/aider ``aider/commands.py``): those that are no request (all but ``/ask``,
    ``/code``, ``/architect``, ``/context``, ``/ok``) ask the agent nothing here either. The
    compaction kept its own copy, which lacked ``/edit`` (``cmd_edit``, an alias of
    ``/editor``: the text goes to an editor, nothing to the model)."""
    assert request_text("/edit notes for the release") is None
    for name in COMMANDS - REQUEST_COMMANDS:
        assert request_text(f"{name} src/app.py") is None, name
    assert request_text("/ask why is it slow") == "/ask why is it slow"


# -- importers --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [PYDICOM, CTF], ids=["pydicom", "ctf"])
def test_swe_agent_observations_are_marked_at_import(path: Path) -> None:
    messages = load_all(path)[0].messages
    users = [m for m in messages if m.role == "user"]
    task = next(m for m in users if not m.meta.get("is_demo"))
    assert task.text.startswith("We're currently solving the following")
    assert "kind" not in task.meta
    later = users[users.index(task) + 1 :]
    assert len(later) >= 11
    assert all(m.meta.get("kind") == "observation" for m in later)


def test_swe_agent_steps_rebuilt_from_the_trajectory_are_observations() -> None:
    t = load_all(
        {"trajectory": [{"response": "ls", "observation": "a.py"}], "info": {}},
        format="swe-agent",
    )[0]
    assert [(m.role, m.meta.get("kind")) for m in t.messages] == [
        ("assistant", None),
        ("user", "observation"),
    ]


# -- real sessions replayed -------------------------------------------------------------------


def _replayed_summaries(path: Path, index: int, budget: int) -> list[str]:
    """The distinct summaries of a replay of ``path`` (as ``ctxengine replay`` feeds it)."""

    async def main() -> list[str]:
        engine = ContextEngine("gpt-4.1", Budget(total=budget))
        seen: dict[str, None] = {}
        t: Transcript = load_all(path)[index]
        async for step in replay(t, engine):
            summary = next(
                (m.text for m in step.rendered.transcript.messages if "## Requests" in m.text),
                None,
            )
            if summary is not None:
                seen.setdefault(summary)
        return list(seen)

    return anyio.run(main)


@pytest.mark.parametrize(
    ("path", "index", "task"),
    [
        (PYDICOM, 0, "We're currently solving the following issue"),
        (CTF, 0, "We're currently solving the following CTF challenge"),
        (OPENHANDS, 0, "<uploaded_files>"),
        (OPENHANDS, 2, "<uploaded_files>"),
    ],
    ids=["swe-agent-pydicom", "swe-agent-ctf", "openhands-4595", "openhands-4588"],
)
def test_a_replayed_agent_runs_newest_request_is_its_task(
    path: Path, index: int, task: str
) -> None:
    """At 4k, every summary of the run keeps its task as the newest request (an observation
    was the newest request of 35 of these runs' 60 summaries, and the goal of 9)."""
    summaries = _replayed_summaries(path, index, 4_000)
    assert len(summaries) >= 5
    for summary in summaries:
        latest = latest_of(summary)
        assert latest is not None and latest.startswith(task), (latest or "")[:80]
        requests = sections(summary)["Requests"]
        assert [r for r in requests if not r.startswith("- (latest)")] == []
        for ask in sections(summary).get("Pending", []):  # before the agent's first reply
            answer = ask.startswith("- answer")
            assert not answer or ask.startswith(f"- answer the latest request: {task}")


@pytest.mark.parametrize(
    ("path", "budget"), [(CC_MAIN, 4_000), (SUBAGENT, 4_000)], ids=["main", "subagent"]
)
def test_a_replayed_claude_code_session_takes_no_harness_text_for_a_request(
    path: Path, budget: int
) -> None:
    """Replayed, the sessions' skill text, caveats and command output kept their ``is_meta``
    mark and were never requests (such text was the newest request of 95 of their 151
    summaries, and the goal of 12), and slash commands are no requests either."""
    summaries = _replayed_summaries(path, 0, budget)
    assert len(summaries) >= 5
    harness = ("Base directory for this skill", "Create beads (epic", "<local-command", "<command-")
    for summary in summaries:
        parts = sections(summary)
        listed = " ".join(parts.get("Goal", []) + parts["Requests"] + parts.get("Pending", []))
        assert not [h for h in harness if h in listed], listed[:300]
        assert "[Request interrupted by user]" not in listed
    if path == SUBAGENT:
        goals = {" ".join(sections(s).get("Goal", [])) for s in summaries} - {""}
        assert goals and all(g.startswith("/handgemacht:create-beads websearch") for g in goals)


def test_the_pi_sessions_slash_commands_are_not_requests() -> None:
    """The pi session's ``/mode``, ``/them`` and ``/`` (a command, cancelled) were listed
    among its requests, and ``/mode`` was its newest request and pending ask once."""
    messages = list(load_all(PI)[0].messages)
    summary = ExtractiveSummarizer().summarize_sync(messages[:330])
    requests = sections(summary)["Requests"]
    assert len(requests) > 10
    assert not [r for r in requests if r.removeprefix("- ").startswith(("/mode", "/them", "/ "))]
    assert "- /" not in requests
    head = ExtractiveSummarizer().summarize_sync(messages[:2])  # "/mode", no reply yet
    assert "## Requests" not in head and "## Pending" not in head
