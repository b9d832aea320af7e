"""The typed boundary of ``_core.Assembly.upsert``: keyword-only columns, lengths and codes
checked with a ``ValueError`` naming the column, the index and the value; the codes exported as
named constants."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine import _core

WINDOWS = [("instruction", 0.2), ("history", 0.5), ("tool", 0.2), ("reserve", 0.1)]
HISTORY = 1


def assembly() -> _core.Assembly:
    return _core.Assembly("gpt-4o", WINDOWS)


def columns(n: int = 2, **overrides: list[Any]) -> dict[str, list[Any]]:
    """Valid columns of ``n`` history messages (user, assistant, ...), with ``overrides``."""
    cols: dict[str, list[Any]] = {
        "node_ids": [f"hist.{i}" for i in range(n)],
        "texts": [f"message {i}" for i in range(n)],
        "windows": [HISTORY] * n,
        "priorities": [100] * n,
        "ranks": [0] * n,
        "seqs": list(range(n)),
        "kinds": [_core.KIND_MESSAGE] * n,
        "roles": [_core.ROLE_USER if i % 2 == 0 else _core.ROLE_ASSISTANT for i in range(n)],
        "turns": [i // 2 for i in range(n)],
        "flags": [0] * n,
        "overheads": [4] * n,
        "labels": [f"message {i}" for i in range(n)],
        "summaries": [None] * n,
    }
    cols.update(overrides)
    return cols


def test_codes_are_named_constants_with_stable_values() -> None:
    assert (_core.KIND_CONTEXT, _core.KIND_MESSAGE, _core.KIND_TOOL_RESULT) == (0, 1, 2)
    roles = (_core.ROLE_SYSTEM, _core.ROLE_USER, _core.ROLE_ASSISTANT, _core.ROLE_TOOL)
    assert roles == (0, 1, 2, 3)
    flags = (
        _core.FLAG_HAS_TOOL_CALL,
        _core.FLAG_FEEDBACK,
        _core.FLAG_STRUCTURAL,
        _core.FLAG_IMAGE,
        _core.FLAG_PROTECTED,
    )
    assert flags == (1, 2, 4, 8, 16)
    statuses = (
        _core.STATUS_KEPT,
        _core.STATUS_TRIMMED,
        _core.STATUS_CLEARED,
        _core.STATUS_FOLDED,
        _core.STATUS_DROPPED,
    )
    assert statuses == (0, 1, 2, 3, 4)
    stages = (
        _core.STAGE_NONE,
        _core.STAGE_GUARD,
        _core.STAGE_SOFT,
        _core.STAGE_HARD,
        _core.STAGE_FOLD,
        _core.STAGE_COMPACTION,
    )
    assert stages == (0, 1, 2, 3, 4, 5)
    assert _core.PLACEHOLDER_ID == "hist.removed"
    exported = {n for n in _core.__all__ if n.isupper()}
    assert exported == {n for n in dir(_core) if n.isupper()}
    assert len(exported) == 24


def test_the_python_tables_follow_the_core() -> None:
    from ctxengine.assemble.history import FLAG, KIND, ROLE
    from ctxengine.assemble.report import STAGE, STATUS

    assert KIND["tool_result"] == _core.KIND_TOOL_RESULT
    assert ROLE == {"system": 0, "user": 1, "assistant": 2, "tool": 3}
    assert FLAG["protected"] == _core.FLAG_PROTECTED
    assert STATUS[_core.STATUS_DROPPED] == "dropped"
    assert STAGE[_core.STAGE_NONE] is None
    assert STAGE[_core.STAGE_COMPACTION] == "compaction"


def test_valid_columns_are_accepted() -> None:
    asm = assembly()
    counts = asm.upsert(**columns(4))
    assert len(counts) == 4 and all(c > 4 for c in counts)
    assert len(asm) == 4


def test_columns_are_keyword_only() -> None:
    asm = assembly()
    cols = columns(1)
    with pytest.raises(TypeError):
        asm.upsert(*cols.values())  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="summaries"):
        asm.upsert(**{k: v for k, v in cols.items() if k != "summaries"})
    assert len(asm) == 0


@pytest.mark.parametrize(
    "column",
    [c for c in columns(1) if c != "node_ids"],
)
def test_a_column_of_another_length_is_named(column: str) -> None:
    asm = assembly()
    cols = columns(3)
    cols[column] = cols[column][:2]
    with pytest.raises(ValueError, match=rf"column {column} has 2 values but node_ids has 3"):
        asm.upsert(**cols)
    assert len(asm) == 0


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("kinds", 3, r'kinds\[1\] = 3 \(node_id "hist.1"\): not a kind; expected KIND_CONTEXT'),
        ("kinds", -1, r"kinds\[1\] = -1 is out of range 0..=255"),
        (
            "roles",
            4,
            r'roles\[1\] = 4 \(node_id "hist.1"\): not a role; expected .*ROLE_TOOL \(3\)',
        ),
        ("flags", 32, r'flags\[1\] = 32 \(node_id "hist.1"\): unknown bits 0x20'),
        ("windows", 7, r'windows\[1\] = 7 \(node_id "hist.1"\): expected a window index: 0 '),
        ("windows", 3, r'windows\[1\] = 3 .*"reserve" is the reserve window'),
        ("turns", -2, r"turns\[1\] = -2 is out of range"),
        ("seqs", -1, r"seqs\[1\] = -1 is out of range"),
    ],
)
def test_an_out_of_range_code_names_column_index_and_value(
    column: str, value: int, message: str
) -> None:
    asm = assembly()
    cols = columns(3)
    cols[column][1] = value
    with pytest.raises(ValueError, match=message):
        asm.upsert(**cols)
    assert len(asm) == 0, "a rejected batch changes nothing"


def test_swapped_code_columns_are_caught() -> None:
    """The mistake positional columns allowed: roles passed as kinds and kinds as roles."""
    asm = assembly()
    cols = columns(3, kinds=[_core.KIND_MESSAGE, _core.KIND_MESSAGE, _core.KIND_TOOL_RESULT])
    cols["roles"] = [_core.ROLE_USER, _core.ROLE_ASSISTANT, _core.ROLE_TOOL]
    asm.upsert(**cols)
    swapped = {**cols, "kinds": cols["roles"], "roles": cols["kinds"]}
    with pytest.raises(ValueError, match=r'kinds\[1\] = 2 \(node_id "hist.1"\).*ROLE_TOOL'):
        asm.upsert(**swapped)
    flags_as_kinds = {**cols, "kinds": [_core.FLAG_HAS_TOOL_CALL | _core.FLAG_STRUCTURAL] * 3}
    with pytest.raises(ValueError, match=r"kinds\[0\] = 5"):
        asm.upsert(**flags_as_kinds)


def test_a_tool_result_needs_the_tool_role_and_back() -> None:
    asm = assembly()
    cols = columns(2, kinds=[_core.KIND_MESSAGE, _core.KIND_TOOL_RESULT])
    with pytest.raises(
        ValueError, match=r"kinds\[1\] = 2 .*goes with ROLE_TOOL \(3\).*roles\[1\] = 2"
    ):
        asm.upsert(**cols)
    cols = columns(2, roles=[_core.ROLE_USER, _core.ROLE_TOOL])
    with pytest.raises(ValueError, match=r"kinds\[1\] = 1 .*roles\[1\] = 3"):
        asm.upsert(**cols)


def test_the_placeholder_id_is_refused() -> None:
    asm = assembly()
    cols = columns(1, node_ids=[_core.PLACEHOLDER_ID])
    with pytest.raises(ValueError, match=r'node_ids\[0\] = "hist.removed"'):
        asm.upsert(**cols)
