"""The batch constructor of a compaction's report entries gives the same frozen decisions as
the class's own constructor."""

from __future__ import annotations

import dataclasses

import pytest

from ctxengine.assemble.report import GrainDecision, decisions


def test_decisions_equal_the_constructed_ones_and_stay_frozen() -> None:
    ids = ["transcript.msg.0", "act.tool_result.c1"]
    made = decisions(
        ids, "transcript", ["history", "tool"], "dropped", "compaction", ["r0", "r1"], [7, 9]
    )
    expected = [
        GrainDecision(n, "transcript", w, "dropped", "dropped", "compaction", r, t, 0)
        for n, w, r, t in zip(ids, ["history", "tool"], ["r0", "r1"], [7, 9], strict=True)
    ]
    assert made == expected
    assert [hash(d) for d in made] == [hash(d) for d in expected]
    assert [d.to_dict() for d in made] == [d.to_dict() for d in expected]
    assert all(d.grain is None and type(d) is GrainDecision for d in made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].reason = "edited"  # type: ignore[misc]


def test_a_kept_status_maps_to_its_decision() -> None:
    (d,) = decisions(["a"], "o", ["w"], "trimmed", "soft", ["why"], [3])
    assert (d.decision, d.status, d.stage, d.tokens_after) == ("folded", "trimmed", "soft", 0)
