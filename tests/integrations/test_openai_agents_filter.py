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
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from ctxengine import BudgetError, count_tokens
from ctxengine.integrations.openai_agents import fit_model_input


def _call(items: list[Any], instructions: str | None, budget: int) -> tuple[Any, ModelInputData]:
    fit_filter = fit_model_input(model="gpt-4o", budget=budget)
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
