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
