"""``fit_model_input``: what the SDK gets back from the model-input filter.

The SDK asks a ``call_model_input_filter`` to return the items it was given, or unchanged copies
of them: it matches them to the items it holds (ids, statuses, annotations; a run resumed against
a server-side conversation raises when it cannot). So an item the fit leaves as it was goes back
as the caller's own object, an item it changed or made (a summary, a trimmed output) is a new
dict, and items the neutral model does not hold pass through unchanged, in their place.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from agents.run_config import CallModelData, ModelInputData
from openai.types.responses import (
    EasyInputMessageParam,
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_compaction_item_param_param import (
    ResponseCompactionItemParamParam,
)
from openai.types.responses.response_function_web_search import ActionSearch
from openai.types.responses.response_input_item_param import FunctionCallOutput
from openai.types.responses.response_input_item_param import ItemReference as ItemReferenceParam
from openai.types.responses.response_reasoning_item import Summary

from ctxengine import BudgetError, count_tokens
from ctxengine.errors import ConfigTypeError
from ctxengine.integrations.openai_agents import fit_model_input


def _call(
    items: list[Any], instructions: str | None, budget: int, server_state: bool | None = None
) -> tuple[Any, ModelInputData]:
    fit_filter = fit_model_input(model="gpt-4o", budget=budget, server_state=server_state)
    data = CallModelData(
        model_data=ModelInputData(input=items, instructions=instructions), agent=None, context=None
    )
    return fit_filter, fit_filter(data)


def _short_run() -> list[Any]:
    return [
        {"role": "user", "content": "list the files"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "use ls"}],
            "encrypted_content": "opaque",
        },
        ResponseFunctionToolCall(
            type="function_call",
            id="fc_1",
            call_id="call_1",
            name="ls",
            arguments="{}",
            status="completed",
        ),
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py b.py"},
        ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="Two files.", annotations=[])],
        ),
        {"role": "developer", "content": "answer in one line"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "and this?"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
                {"type": "input_file", "file_id": "file-123"},
            ],
        },
        {"type": "item_reference", "id": "msg_0"},
    ]


def test_a_call_that_fits_gets_the_callers_own_items_back() -> None:
    items = _short_run()
    fit_filter, out = _call(items, "You are terse.", 4_000)
    assert len(out.input) == len(items)
    assert all(got is given for got, given in zip(out.input, items, strict=True))
    assert out.instructions == "You are terse."
    assert fit_filter.last is not None and fit_filter.last.tokens <= 4_000


def _long_run(turns: int) -> list[Any]:
    items: list[Any] = []
    for i in range(turns):
        items.append({"role": "user", "content": f"question {i}: " + "why " * 40})
        if i % 2 == 0:
            items.append(
                {
                    "type": "web_search_call",
                    "id": f"ws_{i}",
                    "status": "completed",
                    "action": {"type": "search", "query": f"q{i}"},
                }
            )
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": "ls",
                "arguments": "{}",
                "status": "completed",
            }
        )
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": "f " * 60})
        items.append(
            {
                "type": "message",
                "id": f"msg_{i}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"answer {i}", "annotations": []}],
            }
        )
    return items


def _index(items: list[Any], got: Any) -> int | None:
    return next((k for k, item in enumerate(items) if item is got), None)


def test_a_cut_call_keeps_the_callers_objects_in_order_and_pairs_its_calls() -> None:
    items = _long_run(30)
    fit_filter, out = _call(items, "You are an agent.", 2_500)
    indices = [_index(items, got) for got in out.input]
    kept = [k for k in indices if k is not None]
    assert len(kept) < len(items)  # something was cut...
    assert kept == sorted(kept) and kept[-1] == len(items) - 1  # ...the newest item stays
    made = [got for got, k in zip(out.input, indices, strict=True) if k is None]
    assert made and "Summary of the earlier conversation" in json.dumps(made[0])
    assert all(isinstance(got, dict) for got in made)
    # every output answers a call sent before it
    called: set[str] = set()
    for got in out.input:
        if got.get("type") == "function_call":
            called.add(got["call_id"])
        if got.get("type") == "function_call_output":
            assert got["call_id"] in called
    # a pass-through item older than every kept item went with the cut; a newer one stays, in
    # its place (before the first kept item that came after it)
    searches = [k for k in indices if k is not None and items[k].get("type") == "web_search_call"]
    assert searches and min(searches) > kept[0]
    old_search = next(k for k, item in enumerate(items) if item.get("id") == "ws_0")
    assert old_search not in indices
    # the pass-through items' tokens are taken out of what the fit may use
    passed = [items[k] for k in searches]
    reserve = sum(
        count_tokens(json.dumps(item, sort_keys=True), model="gpt-4o") + 4 for item in passed
    )
    assert fit_filter.last is not None and fit_filter.last.tokens + reserve <= 2_500


def test_a_hosted_call_and_its_output_stay_together() -> None:
    items = _long_run(12)
    cut_point = len(items) // 2
    items.insert(
        cut_point - 3,
        {
            "type": "computer_call",
            "id": "cu_1",
            "call_id": "cc_1",
            "status": "completed",
            "action": {"type": "screenshot"},
            "pending_safety_checks": [],
        },
    )
    items.append(
        {
            "type": "computer_call_output",
            "call_id": "cc_1",
            "output": {"type": "computer_screenshot", "image_url": "https://example.com/s.png"},
        }
    )
    items.append({"role": "user", "content": "go on"})
    _, out = _call(items, None, 1_200)
    kinds = [got.get("type") for got in out.input]
    assert "computer_call_output" in kinds
    assert kinds.index("computer_call") < kinds.index("computer_call_output")


def test_pass_through_items_over_the_budget_are_refused_naming_them() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "item_reference", "id": "x" * 400},
    ]
    with pytest.raises(
        BudgetError, match=r"1 input items the filter passes through .* budget is 60"
    ):
        _call(items, None, 60)


@pytest.mark.parametrize("budget", [True, 2.5, "4000"])
def test_a_budget_of_the_wrong_type_is_refused_by_name(budget: object) -> None:
    from ctxengine.errors import ConfigTypeError

    with pytest.raises(ConfigTypeError, match=rf"budget is {re.escape(repr(budget))}"):
        fit_model_input(model="gpt-4o", budget=budget)  # type: ignore[arg-type]


def _web_search(n: int) -> ResponseFunctionWebSearch:
    return ResponseFunctionWebSearch(
        id=f"ws_{n}",
        type="web_search_call",
        status="completed",
        action=ActionSearch(type="search", query=f"query {n}"),
    )


def _leading(kind: str) -> Any:
    if kind in ("developer", "system"):
        return EasyInputMessageParam(role=kind, content="Answer in French.")  # type: ignore[typeddict-item]
    if kind == "web_search_call":
        return _web_search(0)
    return ItemReferenceParam(type="item_reference", id="msg_earlier")


@pytest.mark.parametrize("kind", ["developer", "system", "web_search_call", "item_reference"])
def test_a_leading_pass_through_item_stays_when_everything_fits(kind: str) -> None:
    items = [_leading(kind), EasyInputMessageParam(role="user", content="hi")]
    _, out = _call(items, "Be brief.", 10_000)
    assert out.input is items


def _turns(count: int) -> list[Any]:
    """``count`` turns of a reasoning model: question, reasoning, a call and its output,
    reasoning, then an answer in two text parts."""
    items: list[Any] = []
    for i in range(count):
        items += [
            EasyInputMessageParam(role="user", content=f"question {i}: " + "why " * 40),
            ResponseReasoningItem(
                id=f"rs_{i}a",
                type="reasoning",
                summary=[Summary(type="summary_text", text=f"look at the files ({i})")],
                encrypted_content="gAAAA" + "a" * 40,
            ),
            ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{i}",
                call_id=f"call_{i}",
                name="ls",
                arguments="{}",
                status="completed",
            ),
            FunctionCallOutput(type="function_call_output", call_id=f"call_{i}", output="f " * 60),
            ResponseReasoningItem(
                id=f"rs_{i}b", type="reasoning", summary=[], encrypted_content="gAAAA" + "b" * 40
            ),
            ResponseOutputMessage(
                id=f"msg_{i}",
                type="message",
                role="assistant",
                status="completed",
                content=[
                    ResponseOutputText(type="output_text", text=f"Answer {i}", annotations=[]),
                    ResponseOutputText(type="output_text", text=" in two parts.", annotations=[]),
                ],
            ),
        ]
    return items


def test_a_run_that_fits_comes_back_item_for_item_with_two_part_answers() -> None:
    # an answer of two text parts is two items of the export: the other items must still match
    items = [*_turns(3), EasyInputMessageParam(role="user", content="and now?")]
    _, out = _call(items, "Be brief.", 50_000)
    assert out.input is items


def test_a_cut_run_gives_back_each_kept_reasoning_item_and_the_item_after_it() -> None:
    items = [*_turns(12), EasyInputMessageParam(role="user", content="and now?")]
    fit_filter, out = _call(items, "Be brief.", 1_500)
    indices = [_index(items, got) for got in out.input]
    assert "Summary of the earlier conversation" in json.dumps(out.input[0])
    kept = [k for k in indices if k is not None]
    assert len(kept) == len(out.input) - 1  # all but the summary are the caller's objects
    assert kept == list(range(kept[0], len(items)))  # the newest items, in order
    reasonings = [k for k in kept if isinstance(items[k], ResponseReasoningItem)]
    assert reasonings
    for k in reasonings:  # the API pairs a reasoning item with the next item by its id
        assert k + 1 in kept and getattr(items[k + 1], "id", None) is not None
    answers = [k for k in kept if isinstance(items[k], ResponseOutputMessage)]
    assert answers
    assert fit_filter.last is not None and fit_filter.last.tokens <= 1_500


def _builds() -> list[Any]:
    items: list[Any] = [EasyInputMessageParam(role="user", content="Why does the build fail?")]
    for i in range(1, 6):
        items.append(
            ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call_{i}",
                name="run",
                arguments='{"cmd": "make"}',
            )
        )
        if i == 3:
            items.append(_web_search(3))
        items.append(
            FunctionCallOutput(
                type="function_call_output",
                call_id=f"call_{i}",
                output=f"attempt {i}: error: missing foo.h\n" * 12,
            )
        )
    items.append(EasyInputMessageParam(role="user", content="And now?"))
    return items


def test_a_cut_keeps_leading_instructions_and_drops_a_leading_hosted_item() -> None:
    items = [
        EasyInputMessageParam(role="developer", content="Answer in French."),
        _web_search(0),
        EasyInputMessageParam(role="system", content="Never run rm."),
        *_turns(12),
        EasyInputMessageParam(role="user", content="and now?"),
    ]
    _, out = _call(items, "Be brief.", 1_500)
    # the instructions stay first, in their order; the history after them was summarized
    assert out.input[0] is items[0] and out.input[1] is items[2]
    assert "Summary of the earlier conversation" in json.dumps(out.input[2])
    # the search was part of what the summary replaced: it went with the cut (as documented)
    assert all(got is not items[1] for got in out.input)
    assert out.input[-1] is items[-1]


def test_a_hosted_item_just_before_the_first_kept_item_stays() -> None:
    items = [*_turns(12), _web_search(99), EasyInputMessageParam(role="user", content="and now?")]
    _, out = _call(items, "Be brief.", 200)
    indices = [_index(items, got) for got in out.input]
    assert indices[0] is None and "Summary" in json.dumps(out.input[0])
    # the fit kept only the last question: the search before it is not part of the cut
    assert indices[1:] == [len(items) - 2, len(items) - 1]


def test_a_pass_through_item_keeps_its_place_before_a_changed_item() -> None:
    items = _builds()
    search = next(k for k, item in enumerate(items) if isinstance(item, ResponseFunctionWebSearch))
    _, out = _call(items, "You fix builds.", 440)
    indices = [_index(items, got) for got in out.input]
    at = indices.index(search)
    assert out.input[at - 1] is items[search - 1]  # the call it followed...
    # ...and the output it came before, cleared by the fit (a new dict)
    after = dict(out.input[at + 1])
    assert indices[at + 1] is None and after["call_id"] == "call_3"
    assert str(after["output"]).startswith("[tool result cleared")


def _dangling_reasoning() -> list[Any]:
    # the API rejects a reasoning item with nothing after it: the export leaves it out
    return [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
    ]


def _empty_answer() -> list[Any]:
    # an assistant message without text is exported as nothing
    return [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": []},
        {"role": "user", "content": "hello?"},
    ]


@pytest.mark.parametrize("make", [_dangling_reasoning, _empty_answer])
def test_a_call_that_fits_leaves_out_the_items_the_export_leaves_out(make: Any) -> None:
    items = make()
    fit_filter, out = _call(items, "x", 10_000)
    assert fit_filter.last is not None
    sent = fit_filter.last.payload["input"]
    kept = [item for item in items if item.get("type") not in ("reasoning", "message")]
    assert len(sent) == len(kept) == len(out.input)
    assert all(got is given for got, given in zip(out.input, kept, strict=True))


def _count_loads(monkeypatch: Any) -> list[int]:
    """The lengths of the item lists the filter loads (exports) from now on, as they come."""
    from ctxengine.integrations import openai_agents

    loaded: list[int] = []
    real_load = openai_agents.load

    def counting_load(items: Any, *args: Any, **kwargs: Any) -> Any:
        loaded.append(len(items))
        return real_load(items, *args, **kwargs)

    monkeypatch.setattr(openai_agents, "load", counting_load)
    return loaded


def test_a_later_call_exports_only_the_items_that_changed(monkeypatch: Any) -> None:
    loaded = _count_loads(monkeypatch)
    fit_filter = fit_model_input(model="gpt-4o", budget=1_500)

    def call(items: list[Any]) -> list[Any]:
        loaded.clear()
        data = ModelInputData(input=list(items), instructions="Be brief.")
        return list(fit_filter(CallModelData(model_data=data, agent=None, context=None)).input)

    items = [*_turns(20), EasyInputMessageParam(role="user", content="and now?")]
    call(items)
    assert sum(loaded) >= len(items)  # the first call exports every item
    # an agent loop appends items: only those are exported again, whatever the history holds
    new = [*_turns(1), EasyInputMessageParam(role="user", content="and then?")]
    items += new
    out = call(items)
    assert 0 < sum(loaded) <= 3 * len(new)
    answer = max(k for k, item in enumerate(items) if isinstance(item, ResponseOutputMessage))
    assert any(got is items[answer] for got in out)
    # an item edited in place is exported again: what the fit sends of it is still the caller's
    # own (edited) object, not taken for a change the fit made
    items[answer].content[0].text = "Answer edited"
    out = call(items)
    assert 0 < sum(loaded) <= 3 * len(new)
    assert any(got is items[answer] for got in out)
    sent = fit_filter.last.payload["input"] if fit_filter.last is not None else []
    assert "Answer edited" in json.dumps(sent)


def test_a_leading_compaction_item_stays_when_the_fit_cuts() -> None:
    """``OpenAIResponsesCompactionSession`` (``agents/memory/
    openai_responses_compaction_session.py``) keeps the items ``responses.compact`` returns in
    place of the history: a ``compaction`` item (``ResponseCompactionItemParamParam``: its
    ``encrypted_content`` stands for everything before it) then the turns after it. Once the
    fit cut anything, the compaction item went with the oldest items, and all of the earlier
    conversation with it."""
    compaction = ResponseCompactionItemParamParam(
        type="compaction", id="cmp_1", encrypted_content="gAAAA" + "q" * 400
    )
    items = [compaction, *_turns(12), EasyInputMessageParam(role="user", content="and now?")]
    for budget in (1_500, 800):
        _, out = _call(items, "Be brief.", budget)
        assert out.input[0] is compaction, budget
        assert "Summary of the earlier conversation" in json.dumps(out.input[1])
        assert out.input[-1] is items[-1]
        assert len(out.input) < len(items)


def test_tool_outputs_of_calls_the_server_holds_are_sent_as_they_are() -> None:
    """With the conversation on the server (``previous_response_id``, ``conversation_id``,
    ``auto_previous_response_id=True``) the SDK sends only the new items: after a tool turn,
    the outputs alone (``agents/run_internal/oai_conversation.py``, ``prepare_input``), which
    the filter gets as they are (``agents/run_internal/turn_preparation.py``,
    ``maybe_filter_model_input``). The fit took them for orphans, dropped them and sent a
    "(session bootstrap)" user message: the results were lost, the API rejects the request."""
    outputs = [
        FunctionCallOutput(type="function_call_output", call_id="call_7", output="part 7"),
        FunctionCallOutput(type="function_call_output", call_id="call_8", output="part 8"),
    ]
    for server_state in (None, True):  # outputs alone: a delta by default too
        _, out = _call(list(outputs), "Be brief.", 4_000, server_state)
        assert len(out.input) == 2
        assert all(got is given for got, given in zip(out.input, outputs, strict=True))
        assert out.instructions == "Be brief."
        # the server holds the conversation: an output over the budget is sent whole all the same
        big = FunctionCallOutput(type="function_call_output", call_id="call_9", output="x " * 2_000)
        _, out = _call([big], "Be brief.", 300, server_state)
        assert len(out.input) == 1 and out.input[0] is big
    # a delta that goes on with a new question (a caller sending the outputs of calls the last
    # response ended on with the next question): the question is fitted after the outputs
    ask = EasyInputMessageParam(role="user", content="and part 9?")
    _, out = _call([*outputs, ask], "Be brief.", 4_000, server_state=True)
    assert [_index([*outputs, ask], got) for got in out.input] == [0, 1, 2]
    # a history (the model's turns in it) that opens with an output of a call cut away (a
    # session limit) is no delta: that orphan is still left out
    history = [outputs[0], *_turns(1), EasyInputMessageParam(role="user", content="next")]
    _, out = _call(history, "Be brief.", 10_000)
    assert all(got is not outputs[0] for got in out.input)
    assert out.input[-1] is history[-1]
    # told the conversation is in the input, outputs alone are orphans
    _, out = _call(list(outputs), "Be brief.", 4_000, server_state=False)
    assert all(got is not given for got in out.input for given in outputs)


def test_a_history_cut_to_an_output_and_a_question_is_no_delta() -> None:
    """A client-side history a session ``limit`` cut to ``[function_call_output, user]`` holds
    nothing the model produced and starts with an output: it was taken for a server-state
    delta, and the orphan output was sent (the Responses API rejects an output whose call it
    has not seen). By default only an input of nothing but outputs is a delta."""
    orphan = FunctionCallOutput(type="function_call_output", call_id="call_1", output="a.py")
    ask = EasyInputMessageParam(role="user", content="thanks; now write the tests")
    _, out = _call([orphan, ask], "Be brief.", 4_000)
    assert all(got is not orphan for got in out.input)
    assert "call_1" not in json.dumps(out.input, default=str)
    assert out.input[-1] is ask


def test_server_state_must_be_a_bool_or_none() -> None:
    with pytest.raises(ConfigTypeError, match=re.escape("server_state is 'yes' (str)")):
        fit_model_input(model="gpt-4o", budget=4_000, server_state="yes")  # type: ignore[arg-type]


def test_a_filter_serving_many_conversations_exports_only_their_new_items(
    monkeypatch: Any,
) -> None:
    """One ``RunConfig(call_model_input_filter=...)`` serves every conversation of a server, in
    turn: a conversation's next call reuses its earlier export, however many conversations
    were served in between (a filter that kept the exports of its four latest calls exported
    every item again as soon as a fifth conversation was served between two calls of one)."""
    loaded = _count_loads(monkeypatch)
    fit_filter = fit_model_input(model="gpt-4o", budget=100_000)

    def call(items: list[Any]) -> None:
        data = ModelInputData(input=list(items), instructions="Be brief.")
        fit_filter(CallModelData(model_data=data, agent=None, context=None))

    conversations = [
        [
            EasyInputMessageParam(role="user", content=f"conversation {c}: the task"),
            *_turns(6),
            EasyInputMessageParam(role="user", content="and now?"),
        ]
        for c in range(12)
    ]
    for items in conversations:
        call(items)
    new = [*_turns(1), EasyInputMessageParam(role="user", content="and then?")]
    for items in conversations:
        items += new
        loaded.clear()
        call(items)
        assert 0 < sum(loaded) <= 3 * len(new), len(items)
