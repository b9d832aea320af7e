"""ctxengine.runs: run-length encodings of columns round-trip, are canonical, refuse bad runs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxengine.runs import decode_ids, decode_values, encode_ids, encode_values

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0]),
    st.text("ab", max_size=2),
)
IDS = st.one_of(
    st.builds(lambda n: f"hist.{n}", st.integers(0, 6)),
    st.sampled_from(["hist.01", "mem.summary", "x", "7", ""]),
)


def _typed(column: list[Any]) -> list[tuple[type, Any]]:
    return [(type(v), v) for v in column]


@given(st.lists(SCALARS, max_size=30))
def test_values_round_trip_with_their_types(column: list[Any]) -> None:
    runs = encode_values(column)
    assert _typed(decode_values(runs)) == _typed(column)  # 1, 1.0 and true stay apart
    assert encode_values(decode_values(runs)) == runs  # one encoding per column


@given(st.lists(IDS, max_size=30))
def test_ids_round_trip(ids: list[str]) -> None:
    runs = encode_ids(ids)
    assert decode_ids(runs) == ids
    assert encode_ids(decode_ids(runs)) == runs


def test_runs_collapse_what_repeats() -> None:
    assert encode_values(["kept"] * 4 + ["dropped", 0, 0]) == [["kept", 4], "dropped", [0, 2]]
    ids = [f"hist.{n}" for n in range(3, 1003)] + ["mem.summary", "hist.9", "hist.10"]
    assert encode_ids(ids) == [["hist.", 3, 1000], "mem.summary", ["hist.", 9, 2]]


@pytest.mark.parametrize(
    ("runs", "said"),
    [
        ("x", "'x' is not a list of runs"),
        ([["a", 1]], "run ['a', 1] is not a value or [value, count >= 2]"),
        ([["a", True]], "run ['a', True]"),
        ([[["a"], 2]], "run [['a'], 2]"),
        ([{"a": 1}], "run {'a': 1}"),
        ([["a", 6]], "runs of more than 5 rows"),
    ],
)
def test_bad_value_runs_are_named(runs: Any, said: str) -> None:
    with pytest.raises(ValueError) as info:
        decode_values(runs, limit=5)
    assert said in str(info.value)


@pytest.mark.parametrize(
    ("runs", "said"),
    [
        ({"a": 1}, "is not a list of node id runs"),
        ([5], "run 5 is not a node id or [prefix, start, count >= 2]"),
        ([["hist.", -1, 2]], "run ['hist.', -1, 2]"),
        ([["hist.", 0, 1]], "run ['hist.', 0, 1]"),
        ([["hist.", 0]], "run ['hist.', 0]"),
        ([["hist.", 0, 6]], "runs of more than 5 rows"),
    ],
)
def test_bad_id_runs_are_named(runs: Any, said: str) -> None:
    with pytest.raises(ValueError) as info:
        decode_ids(runs, limit=5)
    assert said in str(info.value)
