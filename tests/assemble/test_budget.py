"""Budget: defaults of DESIGN.md §4, validation, model windows, prefix → window."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine import Budget, BudgetError, ContextGrain, GrainError
from ctxengine.budget import DEFAULT_WINDOWS, context_window


def test_defaults_match_the_design() -> None:
    b = Budget(total=10_000)
    assert dict(b.windows) == {
        "instruction": 0.15,
        "core_memory": 0.15,
        "history": 0.40,
        "tool": 0.20,
        "reserve": 0.10,
    }
    assert b.pretrim_ratio == 0.8
    assert [b.window_of(n) for n in ("sys.a", "mem.b", "hist.3", "act.x", "rag.d.1", "task.t")] == [
        "instruction",
        "core_memory",
        "history",
        "tool",
        "tool",
        "tool",
    ]
    assert b.window_of("user.profile") == "tool"
    assert b.window_of("rag.x", "core_memory") == "core_memory"


def test_total_from_model_window_minus_output_reserve() -> None:
    assert Budget(model="gpt-4o", output_reserve=1000).resolve() == 127_000
    assert Budget().resolve("claude-sonnet-4-5") == 200_000 - 4096
    assert context_window("gpt-4") == 8192 and context_window("gpt-4.1-mini") == 1_047_576


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("ft:gpt-4o-mini-2024-07-18:my-org:custom:9abcDEF", 128_000),
        ("ft:gpt-3.5-turbo-0125:my-org::9xyz", 16_385),
        ("gpt-3.5-turbo-instruct", 4_096),
        ("davinci-002", 16_384),
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", 200_000),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", 200_000),
        ("openrouter/anthropic/claude-sonnet-4", 200_000),
    ],
)
def test_fine_tunes_and_cloud_ids_have_their_base_models_window(model: str, window: int) -> None:
    """A fine-tune (``ft:<base>:...``) or a Bedrock id (``[region.]anthropic.claude-...``) is
    looked up as the model it names, as its tokenizer is (before: "no known context window")."""
    assert context_window(model) == window
    assert Budget(model=model, output_reserve=0).resolve() == window


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"total": 0}, "total"),
        ({"total": -5}, "total"),
        ({"pretrim_ratio": 1.5}, "pretrim_ratio"),
        ({"windows": {"history": 0.5, "tool": 0.4}}, "sum to 1"),
        ({"windows": {**DEFAULT_WINDOWS, "history": -0.4}}, "history"),
        ({"prefixes": {"sys": "nowhere"}}, "nowhere"),
        ({"output_reserve": -1}, "output_reserve"),
    ],
)
def test_invalid_budgets_name_the_value(kwargs: dict, needle: str) -> None:
    with pytest.raises(BudgetError, match=needle):
        Budget(**kwargs)


def test_unknown_model_window_and_reserve_errors() -> None:
    with pytest.raises(BudgetError, match="llama-3"):
        Budget().resolve("llama-3")
    with pytest.raises(BudgetError, match="output_reserve"):
        Budget(model="gpt-4", output_reserve=9000).resolve()
    with pytest.raises(BudgetError, match="reserve"):
        Budget(total=10).window_of("rag.x", "reserve")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"node_id": ""}, "node_id"),
        ({"node_id": "a..b"}, "node_id"),
        ({"node_id": "sys.x", "lifespan": "forever"}, "lifespan"),
        ({"node_id": "sys.x", "priority": "high"}, "priority"),
        ({"node_id": "sys.x", "priority": True}, "priority"),
        ({"node_id": "sys.x", "content": {"a": object()}}, "JSON"),
        ({"node_id": "sys.x", "content": 3}, "content"),
        ({"node_id": "sys.x", "protected": "yes"}, "protected"),
    ],
)
def test_invalid_grains_name_the_field(kwargs: dict, needle: str) -> None:
    with pytest.raises(GrainError, match=needle):
        ContextGrain(**kwargs)
    assert issubclass(GrainError, ValueError)


def test_grain_content_serializes_deterministically() -> None:
    a = ContextGrain("rag.x", content={"b": 1, "a": [1, "é"]})
    b = ContextGrain("rag.x", content={"a": [1, "é"], "b": 1})
    assert a.text == b.text == '{"a":[1,"é"],"b":1}'


def test_budget_above_the_model_window_is_refused_at_construction() -> None:
    from ctxengine import ContextEngine

    with pytest.raises(BudgetError, match=r"50,000.*8,192.*'gpt-4'") as info:
        ContextEngine("gpt-4", Budget(total=50_000))
    assert isinstance(info.value, ValueError)
    with pytest.raises(BudgetError, match="gpt-4"):
        ContextEngine("gpt-4o", Budget(total=50_000, model="gpt-4"))
    # At the window, and for a model whose window is unknown, the total is the caller's call.
    assert ContextEngine("gpt-4", Budget(total=8192)).tokens_total == 8192
    assert Budget(total=50_000).resolve("my-local-model") == 50_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"total": 10**30},
        {"total": 2**63},
        {"total": 1.5},
        {"total": True},
        {"output_reserve": 10**30},
        {"output_reserve": False},
        {"pretrim_ratio": float("nan")},
        {"pretrim_ratio": "0.8"},
    ],
)
def test_out_of_range_budget_values_fail_early_as_value_errors(kwargs: dict) -> None:
    field = next(iter(kwargs))
    with pytest.raises(BudgetError, match=field) as info:
        Budget(**kwargs)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefixes": {"hist": "reserve"}}, r"prefix 'hist' maps to the 'reserve' window"),
        ({"windows": None}, r"windows must be a mapping of str; got NoneType"),
        ({"prefixes": None}, r"prefixes must be a mapping of str; got NoneType"),
        ({"windows": [("tool", 1.0)]}, r"windows must be a mapping of str; got list"),
        ({"model": 5}, r"model must be a str or None; got 5"),
        ({"prefixes": {"rag": 3}}, r"prefix 'rag' maps to unknown window 3"),
    ],
)
def test_a_budget_setting_of_the_wrong_kind_is_refused_when_built(
    kwargs: dict[str, Any], message: str
) -> None:
    """Each was accepted (or raised AttributeError) and every render then failed with a raw
    error from the core."""
    from ctxengine.errors import BudgetError

    if "prefixes" in kwargs and isinstance(kwargs["prefixes"], dict):
        kwargs = {"prefixes": {**Budget().prefixes, **kwargs["prefixes"]}}
    with pytest.raises(BudgetError, match=message):
        Budget(total=1000, **kwargs)
