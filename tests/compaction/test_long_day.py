"""A long day of compactions: every shared real transcript replayed at a tight budget (4,000,
8,000 and 16,000 tokens), so that it compacts again and again and the later summaries are
summaries of summaries. Every render is checked against the messages fed so far:

- the payload is valid for its provider (the official SDK types) and within the budget (an
  independent tiktoken count);
- a protected grain (a pinned rule) is there verbatim, and once a summary exists so are the
  sections of the rules file (``CompactionConfig.rules_file``);
- every file modified so far is named, every file read is named or counted (``Read: (and N
  more)``), every failed call is there by its id (or counted in the summary's ``...and N
  more``) and the newest request is findable. "So far" is what one
  reading of all the messages fed finds (:func:`~ctxengine.compaction.facts.extract_facts`):
  the chain of summaries must hold what a single summary of the whole day would;
- every failed call not fixed later (:func:`~.helpers.failed_calls`, read from all the
  messages fed) is there by its id or counted among the failures not fixed later (the
  ``...and N more`` before those fixed later), and none of the newest
  :data:`~ctxengine.compaction.sections.MAX_FAILURE_LINES` of them is only counted: those
  only counted are at most the rest, none where they all fit in those lines. At 8,000 tokens
  and more every summary has the room for all of those of a shared session (the pi session's
  19 at most, under ``MAX_UNFIXED_LINES``): at the last render none is only counted.

And a session stopped in the middle of the day and taken up by a new process (``FileStore``,
``engine.restore`` then ``engine.session``) goes on with the same summaries and the same
payloads as one never interrupted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from contract_count import independent_count
from ctxengine import Budget, ContextEngine, ContextGrain
from ctxengine.compaction import CompactionConfig
from ctxengine.compaction.facts import extract_facts
from ctxengine.compaction.requests import request_text
from ctxengine.compaction.sections import MAX_FAILURE_LINES, request_findable
from ctxengine.replay import _feed
from ctxengine.transcript import Message, Transcript, load_all
from transcript.helpers import assert_sdk_valid, named_transcripts

from .helpers import CC_MAIN, PI, all_files, failed_calls

BUDGETS = (4_000, 8_000, 16_000)
MODEL = "gpt-4.1"  # o200k_base: the independent count is exact
PIN = "RULE-7: never push to main without a green CI run; ask before deleting any file."
AGENTS = (
    "# Agents\n\n## Session Startup\nRead README.md first.\nRun `make check` before any commit."
    "\n\n## Style\nnot kept\n\n## Red Lines\n- Never force-push.\n"
)
RULE_LINES = ("Read README.md first.", "Run `make check` before any commit.", "- Never force-push.")
SWE_REPLACE = next(p for p in all_files() if "replace_from_source" in str(p))
SWE_PYDICOM = next(p for p in all_files() if p.name == "pydicom__pydicom-1458.traj")


class Pinned:
    """A plugin pinning one rule for the session (protected: never folded or summarized)."""

    name = "pins"
    version = "1"
    priority = 10
    enabled = True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("sys.pin.rules", content=PIN, protected=True, lifespan="session")]


TRANSCRIPTS = named_transcripts()


def _strings(value: Any) -> list[str]:
    """Every string of a payload (keys left out), in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


#: A ``## `` heading the cap left without a line of its own (the next heading, or the end).
EMPTY_SECTION = re.compile(r"^(## [^\n]+)\n(?=\n*## |\n*\Z)", re.M)


def _problems(
    payload: dict[str, Any], summary: str | None, fed: Sequence[Message], rules: bool
) -> list[str]:
    """What a render with ``payload`` (its session's summary ``summary``) misses of ``fed``."""
    text = "\n".join(_strings(payload))
    found = []
    if PIN not in text:
        found.append("the pinned rule")
    if summary is None:
        return found
    facts = extract_facts(fed)
    found += [f"empty section {h!r}" for h in EMPTY_SECTION.findall(summary)]
    found += [f"rules line {r!r}" for r in RULE_LINES if rules and r not in text]
    found += [f"modified file {p!r}" for p in facts.files_modified if p not in text]
    # a file read is named, or by its first 79 characters (the short form a file read put
    # back by the cap takes), or counted on the Read line
    read = re.search(r"(?m)^Read: (.*?)(?: ?\(and (\d+) more\))?$", summary)
    cut = [x[:-1] for x in read.group(1).split(", ") if x.endswith("…")] if read else []
    unread = [
        p for p in facts.files_read if p not in text and not any(p.startswith(c) for c in cut)
    ]
    if len(unread) > (int(read.group(2) or 0) if read else 0):
        found.append(f"{len(unread)} files read, {read and read.group(2)} counted: {unread[:3]}")
    failed = failed_calls(fed)
    unseen = [c for c, _ in failed if c not in text]
    more = sum(int(m.group(1)) for m in re.finditer(r"(?m)^\.\.\.and (\d+) more", summary))
    if len(unseen) > more:
        found.append(f"{len(unseen)} failed calls, {more} counted: {unseen[:3]}")
    unfixed = [c for c, fix in failed if fix is None]
    only_counted = [c for c in unfixed if c not in text]
    counted = sum(int(n) for n in re.findall(r"(?m)^\.\.\.and (\d+) more$", summary))
    if len(only_counted) > counted:
        found.append(f"{len(only_counted)} unfixed failed calls, {counted} counted")
    newest = [c for c in unfixed[-MAX_FAILURE_LINES:] if c not in text]
    if newest:  # then more than the rest are only counted
        found.append(f"{len(only_counted)} of {len(unfixed)} unfixed only counted: {newest[:3]}")
    latest = facts.latest_request
    # a command wrapper's request is "/name arguments"; kept verbatim, it is the wrapper
    raw = next((m.text for m in reversed(fed) if request_text(m.text, m.meta) == latest), "")
    if latest and not (request_findable(latest, text) or request_findable(raw, text)):
        found.append(f"newest request {latest[:60]!r}")
    return found


def _only_counted(payload: dict[str, Any], fed: Sequence[Message]) -> list[str]:
    """The failed calls of ``fed`` not fixed later that ``payload`` holds nowhere."""
    text = "\n".join(_strings(payload))
    return [c for c, fix in failed_calls(fed) if fix is None and c not in text]


async def _day(
    t: Transcript,
    budget: int,
    provider: str,
    folder: Path,
    rules: bool = True,
    all_listed: bool = False,
) -> tuple[int, list[tuple[int, list[str]]]]:
    """Replay ``t``; the compactions that succeeded and each render's problems (``all_listed``:
    also a failed call not fixed later that the last render only counts)."""
    (folder / "AGENTS.md").write_text(AGENTS, encoding="utf-8")
    config = CompactionConfig(rules_file=folder / "AGENTS.md" if rules else None)
    engine = ContextEngine(MODEL, Budget(total=budget), plugins=[Pinned()], compaction=config)
    fed: list[Message] = []
    found: list[tuple[int, list[str]]] = []
    compactions = 0
    async with engine.session("day") as session:
        previous = None
        for at, message in enumerate([*t.messages, None]):
            if message is None or (
                message.role == "assistant" and previous != "assistant" and session.messages
            ):
                out = await session.render(provider)
                compactions += sum(1 for c in out.report.compactions if c.get("ok"))
                assert out.tokens <= budget
                assert independent_count(out.payload, provider) <= budget
                assert_sdk_valid(out.payload, provider)
                summary = session.state.summary
                text = None if summary is None else str(summary.content)
                problems = _problems(out.payload, text, fed, rules)
                if message is None and all_listed and _only_counted(out.payload, fed):
                    problems.append(f"only counted at the end: {_only_counted(out.payload, fed)}")
                if problems:
                    found.append((at, problems))
            if message is None:
                break
            await _feed(session, message)
            fed.append(message)
            previous = message.role
    return compactions, found


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize(("name", "t"), TRANSCRIPTS, ids=[n for n, _ in TRANSCRIPTS])
def test_a_long_day_keeps_every_fact_in_every_render(
    name: str, t: Transcript, budget: int, tmp_path: Path
) -> None:
    compactions, found = anyio.run(_day, t, budget, "openai", tmp_path, True, budget >= 8_000)
    assert found == [], name
    if len(t) > 400 and budget == 4_000:  # the long sessions: summaries of summaries
        assert compactions >= 20


@pytest.mark.parametrize("provider", ["openai-responses", "anthropic", "gemini"])
@pytest.mark.parametrize("path", [PI, SWE_REPLACE], ids=["pi", "swe-agent"])
def test_a_long_day_for_every_provider(provider: str, path: Path, tmp_path: Path) -> None:
    compactions, found = anyio.run(_day, load_all(path)[0], 4_000, provider, tmp_path)
    assert found == []
    assert compactions >= 5


@pytest.mark.parametrize("path", [SWE_REPLACE, SWE_PYDICOM], ids=["marshmallow", "pydicom"])
def test_a_swe_agent_day_without_rules_keeps_its_files(path: Path, tmp_path: Path) -> None:
    """Without a rules file the summaries compact at other points. The marshmallow run then
    summarizes its ``create`` and its path-less ``insert`` apart (the ``insert`` edits the file
    the harness showed open); in the pydicom run the cap dropped the files modified to make
    room for the task, then cut the task, which left room for them."""
    for budget in BUDGETS:
        _, found = anyio.run(_day, load_all(path)[0], budget, "openai", tmp_path, False)
        assert found == [], budget


# -- a day interrupted: a new process takes the session up from its store --------------------------

CHILD = Path(__file__).with_name("day_child.py")


def _worker(env: dict[str, str], root: Path, path: Path, budget: int, span: range, out: Path,
            restore: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    args = [str(root), str(path), "0", str(budget), str(span.start), str(span.stop), str(out)]
    subprocess.run(
        [sys.executable, str(CHILD), *args, *(["restore"] if restore else [])],
        env=env,
        check=True,
        timeout=600,
    )
    records: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    return records


@pytest.mark.parametrize(
    ("path", "budget"),
    [(PI, 4_000), (SWE_REPLACE, 4_000), (CC_MAIN, 16_000)],
    ids=["pi-4000", "swe-agent-4000", "claude-code-16000"],
)
def test_a_day_taken_up_by_a_new_process_goes_on_as_one_never_interrupted(
    path: Path, budget: int, tmp_path: Path, child_env: dict[str, str]
) -> None:
    messages = list(load_all(path)[0].messages)
    n = len(messages)
    # stop right before a model call past the middle: the uninterrupted day renders there
    stop = next(
        i
        for i in range(n // 2, n)
        if messages[i].role == "assistant" and messages[i - 1].role != "assistant"
    )
    whole = _worker(child_env, tmp_path / "whole", path, budget, range(n), tmp_path / "w.json")
    split = tmp_path / "split"
    first = _worker(child_env, split, path, budget, range(stop), tmp_path / "a.json")
    later = _worker(child_env, split, path, budget, range(stop, n), tmp_path / "b.json", True)
    restored, later = later[0], later[1:]
    summaries = [r["summary"] for r in whole if r["summary"]]
    assert len(set(summaries)) >= 3  # compacted again and again, before and after the stop
    assert any(r["summary"] for r in first) and later[0]["summary"] != later[-1]["summary"]
    at_stop = next(r for r in whole if r["at"] == stop)
    assert restored["payload"] == at_stop["payload"]
    assert [*first, *later] == whole
