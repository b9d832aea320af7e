"""A request and the assistant message answering it are one unit of a compaction's landing:
a request never comes back verbatim while its answer stays summarized (the kept history
would show a question whose answer the model sees only in the summary, before it)."""

from __future__ import annotations

import pytest

from ctxengine.assemble.compact import _Landing

pytestmark = pytest.mark.anyio


def _land(questions: dict[int, int]) -> _Landing:
    turns = sorted({*questions, *questions.values(), 9})
    land = _Landing(
        {t: [] for t in turns}, [], turns, 0, [0] * (len(turns) + 1), dict.fromkeys(turns, 1)
    )
    land.questions = dict(questions)
    return land


def test_a_request_comes_back_only_with_its_summarized_answer() -> None:
    land = _land({5: 4})  # turn 5 answers the request of turn 4
    assert sorted(land.unit(4, {4, 5, 9})) == [4, 5]
    assert sorted(land.unit(5, {4, 5, 9})) == [4, 5]
    assert land.unit(4, {4, 9}) == [4]  # its answer is not summarized: the request alone
    assert land.unit(9, {4, 5, 9}) == [9]


async def test_an_answer_the_ladder_sent_to_compaction_takes_its_request_along() -> None:
    """The ladder sent an answer to compaction but not its request: the landing summarizes
    the request too, else a cut before it would keep the question verbatim after the summary
    that holds its answer."""
    from ctxengine import Budget, ContextEngine
    from ctxengine.assemble.compact import _landing
    from ctxengine.assemble.pipeline import plan_within
    from ctxengine.transcript import Message

    engine = ContextEngine("gpt-4.1", Budget(total=200_000))
    async with engine.session("qa") as s:
        for n in range(8):
            s.extend([Message.user(f"Question {n}: what does module {n} do?")])
            await s.render("openai")  # each exchange its own turn, as in a session
            s.extend([Message.assistant(f"Module {n} parses the input and writes rows. " * 5)])
        await s.render("openai")
        state = s.state
        turn = {i.index: i.turn for i in state.items.values()}
        question, answer = turn[2], turn[3]  # the second request and its answer
        assert question != answer
        land = _landing(state, engine.config, [answer], plan_within(state, engine.config))
    assert question in land.forced and answer in land.forced
    assert question not in land.order


async def test_the_newest_request_goes_to_the_cut_not_where_the_ladder_sent_it() -> None:
    """The ladder sent the newest request's turn to compaction and the cut kept older turns
    verbatim: the summary at the head held the newest request, an older one came after it."""
    from ctxengine import Budget, ContextEngine
    from ctxengine.assemble.compact import _landing
    from ctxengine.assemble.pipeline import plan_within
    from ctxengine.transcript import Message

    engine = ContextEngine("gpt-4.1", Budget(total=200_000))
    async with engine.session("order") as s:
        for n in range(6):
            s.extend([Message.user(f"Question {n}: what does module {n} do?")])
            await s.render("openai")
            s.extend([Message.assistant(f"Module {n} parses the input and writes rows. " * 5)])
        s.extend([Message.user("Now port module 5 to the new API.")])  # the newest request
        await s.render("openai")
        for k in range(5):  # its agent loop: the protected tail starts inside it
            s.extend([Message.assistant(f"step {k}: editing module_5.py. " * 5)])
        await s.render("openai")
        state = s.state
        turn = {i.index: i.turn for i in state.items.values()}
        older, request, answer = turn[9], turn[12], turn[13]
        land = _landing(state, engine.config, [older, answer], plan_within(state, engine.config))
    assert request in land.order and answer in land.order  # summarized only with the older
    assert request not in land.forced and answer not in land.forced
    assert turn[9] in land.forced  # an older turn the ladder sent is still summarized


async def _stale_request_session(budget: int) -> list[tuple[list[int], list[int]]]:
    """A session whose ladder sends a newer request's turn to compaction while older small
    turns fit (found by a random search, written out): per render, the indices of the
    user messages kept verbatim and of those summarized."""
    import dataclasses
    import random

    from ctxengine import Budget, ContextEngine
    from ctxengine.transcript import Message, ToolCall

    def filler(n: int, tag: str) -> str:
        return "\n".join(f"{tag} line {k}: const v{k} = compute(w, h) + {k * 7};" for k in range(n))

    rnd = random.Random(17)
    engine = ContextEngine("gpt-4o", Budget(total=budget))
    seen: list[tuple[list[int], list[int]]] = []
    async with engine.session("stale") as s:
        for i in range(4):
            await s.user_message(f"request {i}: please fix module_{i}.py")
            call = ToolCall(f"a{i}", "read", {"path": f"module_{i}.py"})
            await s.assistant_message(f"Looking at module_{i}.py", [call])
            await s.tool_result(f"a{i}", filler(rnd.randint(5, 60), f"m{i}"), name="read")
            await s.assistant_message(f"Fixed module_{i}.py.")
            await s.render("openai")
        await s.user_message(rnd.choice(["/them", "/mode", "look"]))
        if rnd.random() < 0.7:
            s.extend([dataclasses.replace(Message.assistant(""), stop_reason="aborted")])
        await s.user_message("the queued component is broken, investigate truncated.ts")
        if rnd.random() < 0.7:
            s.extend([dataclasses.replace(Message.assistant(""), stop_reason="aborted")])
        await s.user_message("continue")
        for j in range(10):
            out = await s.render("openai")
            users = [k for k, m in enumerate(s.messages) if m.role == "user"]
            decided = {d.node_id: d for d in out.report}
            kept = [
                k
                for k in users
                if f"hist.{k}" in decided and decided[f"hist.{k}"].decision == "kept"
            ]
            # in this render's summary, or in an earlier one (no item of its own any more)
            summarized = [
                k
                for k in users
                if f"hist.{k}" not in decided or decided[f"hist.{k}"].stage == "compaction"
            ]
            seen.append((kept, summarized))
            text = rnd.choice(
                ["", "Reading next part.", "The problem is clear. " * rnd.randint(1, 30)]
            )
            call = ToolCall(f"b{j}", "bash", {"command": f"cat part_{j}.ts"})
            await s.assistant_message(text, [call])
            await s.tool_result(f"b{j}", filler(rnd.choice([3, 10, 40, 80]), f"p{j}"), name="bash")
    return seen


@pytest.mark.parametrize("budget", [3000, 4000, 6000])
async def test_no_request_is_kept_verbatim_after_a_newer_summarized_one(budget: int) -> None:
    seen = await _stale_request_session(budget)
    assert any(summarized for _, summarized in seen)  # it compacts
    for kept, summarized in seen:
        if kept and summarized:
            assert max(summarized) < min(kept), (kept, summarized)
