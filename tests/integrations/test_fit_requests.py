"""A fit's kept history never opens with an answer whose question went into the summary.

Compaction summarizes the oldest history, turn by turn: a user message and the assistant
message answering it are two turns (an agent loop under one request can lose its oldest steps).
The cut must still not fall between a question and its answer: the model would see the answer
verbatim after a summary that calls its question still pending. On real transcripts whose
requests each get one answer (aider chats, SWE-agent text-action runs) the first message after
the summary is therefore a user message; in an agent loop (OpenHands, pi) a kept history that
starts mid-loop has the loop's request verbatim in the summary.
"""

from __future__ import annotations

from typing import Any

import pytest
from agents.run_config import CallModelData, ModelInputData

import ctxengine.fitting
from ctxengine.fitting import fit
from ctxengine.integrations.openai_agents import fit_model_input
from ctxengine.transcript import Message, load, load_all
from offline_tiktoken import TRANSCRIPTS

AIDER = TRANSCRIPTS / "aider" / "mozgoslav.aider.chat.history.md"
SWE = TRANSCRIPTS / "swe-agent" / "trajectories" / "demonstrations" / "ctf" / "web"
CTF = SWE / "i_got_id_demo.traj"
OPENHANDS = TRANSCRIPTS / "openhands" / "output.jsonl"
SUMMARY = "[Summary of the earlier conversation"


def _aider(session: int) -> list[Message]:
    return list(load_all(AIDER)[session])


def _kept(out: Any) -> set[int]:
    """The indices of the history messages the fit sent (whole or trimmed)."""
    return {
        int(d.node_id.split(".")[1])
        for d in out.report
        if d.node_id.startswith("hist.") and d.decision in ("kept", "folded")
    }


def _opening(messages: list[Message], out: Any) -> tuple[int, int] | None:
    """(first kept history message, the user message it answers or is), when there is a
    summary; -1 for a request that is not there."""
    summary = next((g for g in out.tree if g.node_id == "mem.summary"), None)
    if summary is None:
        return None
    kept = sorted(i for i in _kept(out) if messages[i].role != "system")
    first = kept[0]
    asked = next((j for j in range(first, -1, -1) if messages[j].role == "user"), -1)
    return first, asked


@pytest.mark.parametrize(
    ("source", "budget"),
    [("aider-1", 8_000), ("aider-2", 4_000), ("ctf", 4_000), ("ctf", 8_000), ("ctf", 14_000)],
)
def test_a_fit_of_a_chat_keeps_each_kept_answer_with_its_question(source: str, budget: int) -> None:
    # each of these fits kept the answer and summarized its question (the summary calling
    # the question pending, or keeping only its first line)
    messages = _aider(int(source[-1])) if source.startswith("aider") else list(load(CTF))
    ctxengine.fitting._local.warm = None
    out = fit(messages, model="gpt-4o", budget=budget)
    assert out.tokens <= budget
    opening = _opening(messages, out)
    assert opening is not None, "the fit summarized"
    first, asked = opening
    assert first == asked, (first, messages[first].role, "answers", asked, "summarized")
    sent = [m for m in out.payload["messages"] if m["role"] != "system"]
    assert sent[0]["content"].startswith(SUMMARY)
    assert sent[1]["role"] == "user"


def test_an_agent_loop_fitting_each_call_never_keeps_an_answer_without_its_question() -> None:
    # the SWE-agent run fitted at each model call, as an agent loop does (warm fits): 7 of its
    # 11 compacted calls kept an answer whose question was summarized
    messages = list(load(CTF))
    ctxengine.fitting._local.warm = None
    calls = [n for n in range(1, len(messages) + 1) if messages[n - 1].role == "user"]
    split = []
    for n in calls:
        out = fit(messages[:n], model="gpt-4o", budget=8_000)
        assert out.tokens <= 8_000
        opening = _opening(messages[:n], out)
        if opening is not None and opening[0] != opening[1]:
            split.append(n)
    assert split == []


def test_a_kept_loop_step_has_its_request_verbatim_in_the_summary() -> None:
    # An OpenHands run: one task, a long tool loop, then a second user message. Fitted at each
    # call, the kept history starts inside the first task's loop once that task is summarized;
    # the summary must then carry the task whole, not the first line of an earlier request.
    # A short task of two lines stands in for the run's (its 3,000 characters the summary
    # keeps by their first line only: longer than any request is carried whole).
    run = list(load_all(OPENHANDS)[2])
    task = "Fix the aliasing check for iso fields consumed in a match.\nKeep the tests green."
    user = next(i for i, m in enumerate(run) if m.role == "user")
    messages = [*run[:user], Message.user(task), *run[user + 1 :]]
    ctxengine.fitting._local.warm = None
    checked = 0
    for n in range(user + 2, len(messages) + 1):
        if messages[n - 1].role not in ("user", "tool"):
            continue
        out = fit(messages[:n], model="gpt-4o", budget=4_000)
        assert out.tokens <= 4_000
        opening = _opening(messages[:n], out)
        if opening is None or opening[1] != user or opening[0] == user:
            continue
        summary = next(g.text for g in out.tree if g.node_id == "mem.summary")
        assert task in summary, (n, summary)
        checked += 1
    assert checked >= 5


def _call(items: list[Any], budget: int) -> list[Any]:
    fit_filter = fit_model_input(model="gpt-4o", budget=budget)
    data = CallModelData(
        model_data=ModelInputData(input=items, instructions="You solve CTF challenges."),
        agent=None,
        context=None,
    )
    return list(fit_filter(data).input)


@pytest.mark.parametrize("budget", [4_000, 8_000])
def test_the_agents_filter_sends_a_question_before_each_kept_answer(budget: int) -> None:
    items = load(CTF).to("openai-responses")["input"]
    items = [i for i in items if i.get("role") != "system"]
    ctxengine.fitting._local.warm = None
    sent = _call(items, budget)
    summary = next(k for k, item in enumerate(sent) if str(item.get("content")).find(SUMMARY) >= 0)
    after = [i for i in sent[summary + 1 :] if i.get("role") in ("user", "assistant")]
    assert after and after[0]["role"] == "user"
