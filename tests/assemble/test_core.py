"""The native assembly core (``ctxengine._core.Assembly``, ``Plan``, ``fuse``) used directly."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxengine import _core
from ctxengine.errors import BudgetError

WINDOWS = [
    ("instruction", 0.15),
    ("core_memory", 0.15),
    ("history", 0.40),
    ("tool", 0.20),
    ("reserve", 0.10),
]
INSTRUCTION, CORE_MEMORY, HISTORY, TOOL = 0, 1, 2, 3
CONTEXT, MESSAGE, TOOL_RESULT = _core.KIND_CONTEXT, _core.KIND_MESSAGE, _core.KIND_TOOL_RESULT
SYSTEM, USER, ASSISTANT, TOOL_ROLE = (
    _core.ROLE_SYSTEM,
    _core.ROLE_USER,
    _core.ROLE_ASSISTANT,
    _core.ROLE_TOOL,
)
HAS_TOOL_CALL, FEEDBACK, STRUCTURAL = (
    _core.FLAG_HAS_TOOL_CALL,
    _core.FLAG_FEEDBACK,
    _core.FLAG_STRUCTURAL,
)
IMAGE, PROTECTED = _core.FLAG_IMAGE, _core.FLAG_PROTECTED
KEPT, TRIMMED, CLEARED, FOLDED, DROPPED = (
    _core.STATUS_KEPT,
    _core.STATUS_TRIMMED,
    _core.STATUS_CLEARED,
    _core.STATUS_FOLDED,
    _core.STATUS_DROPPED,
)
NONE, SOFT, HARD, FOLD, COMPACTION = (
    _core.STAGE_NONE,
    _core.STAGE_SOFT,
    _core.STAGE_HARD,
    _core.STAGE_FOLD,
    _core.STAGE_COMPACTION,
)


@dataclass
class Item:
    node_id: str
    text: str
    window: int = INSTRUCTION
    priority: int = 100
    rank: int = 0
    seq: int = 0
    kind: int = CONTEXT
    role: int = SYSTEM
    turn: int = 0
    flags: int = 0
    overhead: int = 0
    label: str = ""
    summary: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


def columns(items: list[Item]) -> dict[str, Any]:
    """The keyword columns of ``Assembly.upsert`` for ``items``."""
    return {
        "node_ids": [i.node_id for i in items],
        "texts": [i.text for i in items],
        "windows": [i.window for i in items],
        "priorities": [i.priority for i in items],
        "ranks": [i.rank for i in items],
        "seqs": [i.seq for i in items],
        "kinds": [i.kind for i in items],
        "roles": [i.role for i in items],
        "turns": [i.turn for i in items],
        "flags": [i.flags for i in items],
        "overheads": [i.overhead for i in items],
        "labels": [i.label for i in items],
        "summaries": [i.summary for i in items],
    }


def upsert(asm: _core.Assembly, items: list[Item]) -> list[int]:
    return asm.upsert(**columns(items))


def assembly(**options: object) -> _core.Assembly:
    return _core.Assembly("gpt-4o", WINDOWS, **options)  # type: ignore[arg-type]


def session(turns: int, result_lines: int, start_seq: int = 1) -> list[Item]:
    """``turns`` user turns: a question, an assistant tool call, a tool result."""
    items = []
    seq = start_seq
    for t in range(turns):
        lines = "".join(f"match {t}.{i}: def handler(): pass\n" for i in range(result_lines))
        items += [
            Item(
                f"hist.{seq}",
                f"question {t} about the code",
                HISTORY,
                seq=seq,
                kind=MESSAGE,
                role=USER,
                turn=t,
                overhead=4,
            ),
            Item(
                f"hist.{seq + 1}",
                "let me search",
                HISTORY,
                seq=seq + 1,
                kind=MESSAGE,
                role=ASSISTANT,
                turn=t,
                flags=HAS_TOOL_CALL,
                overhead=12,
            ),
            Item(
                f"hist.{seq + 2}",
                lines,
                HISTORY,
                seq=seq + 2,
                kind=TOOL_RESULT,
                role=TOOL_ROLE,
                turn=t,
                overhead=6,
                label="tool result: search",
            ),
        ]
        seq += 3
    return items


def decisions(plan: _core.Plan) -> dict[str, tuple[int, int, str, int, int, int]]:
    ids, status, stage, reason, before, after, window = plan.decisions()
    return {
        i: (s, g, r, b, a, w)
        for i, s, g, r, b, a, w in zip(
            ids, status, stage, reason, before, after, window, strict=True
        )
    }


def test_everything_fits_is_kept_in_order() -> None:
    asm = assembly()
    counts = upsert(
        asm,
        [
            Item("sys.rules", "be brief", priority=0, overhead=3),
            Item("rag.docs.1", "doc one", TOOL, priority=50, rank=1, seq=2),
            Item("mem.user", "likes tables", CORE_MEMORY, priority=20, seq=1),
            *session(2, 2, start_seq=10),
        ],
    )
    assert len(asm) == 9
    assert counts[0] == asm.tokens("sys.rules") == 2 + 3
    plan = asm.plan(100_000)
    assert plan.fits
    assert plan.total_after == plan.total_before == sum(counts)
    assert plan.context_order == ["sys.rules", "mem.user", "rag.docs.1"]
    assert plan.history_order == [f"hist.{s}" for s in range(10, 16)]
    assert plan.changed() == []
    assert plan.replacements == {}
    assert plan.compaction_turns == [] and plan.compaction_tokens == 0
    assert set(plan.timings) == {"allocate", "soft", "hard", "fold", "compaction", "order"}
    assert all(d[0] == KEPT and d[2] == "kept" for d in decisions(plan).values())
    assert [w[0] for w in plan.windows] == [name for name, _ in WINDOWS]


def test_upsert_replaces_and_remove_forgets() -> None:
    asm = assembly()
    upsert(asm, [Item("sys.a", "hello world")])
    upsert(asm, [Item("sys.a", "hello")])
    assert len(asm) == 1 and asm.tokens("sys.a") == 1
    assert asm.remove(["sys.a", "nope"]) == 1
    assert len(asm) == 0 and asm.tokens("sys.a") is None


def test_bad_columns_are_named() -> None:
    asm = assembly()
    with pytest.raises(ValueError, match="texts"):
        asm.upsert(**{**columns([Item("a", "x")]), "texts": []})
    with pytest.raises(ValueError, match=r"windows\[0\]"):
        upsert(asm, [Item("a", "x", window=-1)])
    with pytest.raises(ValueError, match="reserve"):
        upsert(asm, [Item("a", "x", window=4)])
    with pytest.raises(ValueError, match="shares must sum"):
        _core.Assembly("gpt-4o", [("a", 0.5), ("b", 0.4)], reserve=None)
    with pytest.raises(ValueError, match="reserve window"):
        _core.Assembly("gpt-4o", [("a", 1.0)])
    with pytest.raises(ValueError, match="budget"):
        asm.plan(-1)


def test_soft_trim_cuts_old_tool_results_and_spares_the_tail() -> None:
    asm = assembly(soft_trim_chars=400, soft_keep_chars=100, protect_last_assistant=1)
    items = session(4, 60)
    items[5].flags |= IMAGE  # turn 1's tool result
    upsert(asm, items)
    full = asm.plan(10**6).total_before
    plan = asm.plan(full * 9 // 10)
    assert plan.fits
    d = decisions(plan)
    assert d["hist.3"][:2] == (TRIMMED, SOFT)
    assert "chars trimmed ...]" in plan.replacements["hist.3"]
    assert d["hist.3"][4] < d["hist.3"][3]
    assert d["hist.6"][0] == KEPT  # image
    assert d["hist.12"][0] == KEPT  # protected tail
    assert plan.history_order == [f"hist.{s}" for s in range(1, 13)]


def test_soft_trim_uses_the_summary_then_clears() -> None:
    asm = assembly(soft_trim_chars=400, soft_keep_chars=100, protect_last_assistant=1)
    items = session(5, 60)
    items[2].summary = "60 matches in handlers"
    upsert(asm, items)
    full = asm.plan(10**6).total_before
    plan = asm.plan(full * 6 // 10)
    assert plan.replacements["hist.3"] == "60 matches in handlers"
    assert "replaced by summary" in decisions(plan)["hist.3"][2]
    plan = asm.plan(full * 3 // 10)
    d = decisions(plan)
    assert d["hist.9"][:2] == (CLEARED, SOFT)
    label = f"[tool result cleared: tool result: search, {asm.tokens('hist.9')} tokens]"
    assert plan.replacements["hist.9"] == label
    assert plan.fits


def test_hard_trim_removes_whole_turns_behind_one_placeholder() -> None:
    asm = assembly()
    items = session(12, 1)
    upsert(asm, items)
    full = asm.plan(10**6).total_before
    plan = asm.plan(full // 2)
    assert plan.fits
    d = decisions(plan)
    turn_of = {i.node_id: i.turn for i in items}
    dropped_turns = {turn_of[i] for i, v in d.items() if v[0] == DROPPED}
    assert dropped_turns
    for i, v in d.items():  # atomic: a turn is dropped whole or not at all
        assert (v[0] == DROPPED) == (turn_of[i] in dropped_turns)
        if v[1] == HARD:
            assert v[2].startswith(f"turn {turn_of[i]} removed (score ")
            assert v[4] == 0
    assert plan.history_order.count("hist.removed") == 1
    text = plan.replacements["hist.removed"]
    assert "earlier turns removed to fit the budget: turns " in text or "turn " in text
    assert "hist.34" in plan.history_order  # the latest user turn stays
    assert plan.total_after <= plan.target


def test_fold_then_branch_stand_in() -> None:
    asm = assembly()
    doc = "lorem ipsum dolor sit amet " * 40
    upsert(
        asm,
        [
            Item("sys.rules", "rules", priority=0),
            *[
                Item(f"mem.n{i}", doc, CORE_MEMORY, priority=10 + i, seq=10 + i, label="note")
                for i in range(4)
            ],
        ],
    )
    full = asm.plan(10**6).total_before
    plan = asm.plan(full * 8 // 10)
    d = decisions(plan)
    assert d["mem.n3"][:2] == (FOLDED, FOLD)
    assert plan.replacements["mem.n3"].startswith("[folded mem.n3 (note): ")
    assert d["mem.n0"][0] == KEPT
    plan = asm.plan(40)  # room for one stand-in for the branch, not for one per grain
    assert plan.context_order == ["sys.rules", "mem.n0"]
    assert plan.replacements["mem.n0"].startswith("[folded branch mem: 4 nodes, ")
    assert "mem.n1" not in plan.replacements
    assert decisions(plan)["mem.n2"][4] == 0
    assert plan.fits
    plan = asm.plan(150)  # backfill: room for one stand-in per grain, each names its node
    assert plan.context_order == ["sys.rules", *(f"mem.n{i}" for i in range(4))]
    assert all(plan.replacements[f"mem.n{i}"].startswith(f"[folded mem.n{i} ") for i in range(4))


def test_protected_items_over_budget_raise_budget_error() -> None:
    asm = assembly()
    upsert(asm, [Item("sys.big", "word " * 500, flags=PROTECTED), *session(1, 1)])
    with pytest.raises(BudgetError, match=r"sys\.big \(\d+ tokens\)"):
        asm.plan(100)


def test_tokens_of_many_items_are_each_ones_tokens() -> None:
    # in one call: a live item's tokens, 0 for a node id that is none (removed, or never one)
    asm = assembly()
    upsert(asm, [Item("sys.rules", "be brief", overhead=3), *session(2, 2)])
    asm.remove(["hist.1"])
    ids = ["hist.3", "sys.rules", "hist.1", "nope", "hist.3", "hist.2"]
    assert asm.tokens_of(ids) == [asm.tokens(n) or 0 for n in ids]
    assert asm.tokens_of(ids)[1] == 2 + 3 and asm.tokens_of(ids)[2:4] == [0, 0]
    assert asm.tokens_of([]) == [] and asm.tokens_of(("sys.rules",)) == [2 + 3]  # a tuple too


@pytest.mark.parametrize("budget", [90, 150, 10_000])
def test_a_plans_tokens_after_by_node_id_are_its_decisions(budget: int) -> None:
    # what the plan left each item (trimmed, dropped or kept), asked for by node id: many at
    # once, or a few, as decisions() gives it; 0 for a node id that is no live item
    asm = assembly()
    upsert(asm, [Item("sys.rules", "be brief " * 8), *session(6, 3)])
    asm.remove(["hist.2"])
    plan = asm.plan(budget)
    ids, _, _, _, before, after, _ = plan.decisions()
    assert budget > 1_000 or after != before  # the ladder cut something
    assert plan.tokens_after_of([*ids, "nope", "hist.2"]) == [*after, 0, 0]
    assert plan.tokens_after_of(ids[::-1]) == after[::-1]
    assert plan.tokens_after_of(ids[:2]) == after[:2]
    assert plan.tokens_after_of(("nope",)) == [0] and plan.tokens_after_of([]) == []


def test_protected_tokens_is_the_least_budget_a_plan_accepts() -> None:
    """The protected grains and the latest user turn (here turn 2: its question, call and
    result), never the other turns: a plan can take exactly that budget and no less."""
    asm = assembly()
    upsert(asm, [Item("sys.rules", "word " * 30, flags=PROTECTED), *session(3, 2)])
    latest = ("hist.7", "hist.8", "hist.9")
    need = asm.protected_tokens()
    assert need == (asm.tokens("sys.rules") or 0) + sum(asm.tokens(n) or 0 for n in latest)
    assert asm.plan(need).total_after <= need
    with pytest.raises(BudgetError):
        asm.plan(need - 1)


def test_compaction_request_lists_old_turns() -> None:
    asm = assembly()
    items = session(8, 1)
    for i in items:
        i.flags |= FEEDBACK | STRUCTURAL  # every turn scores above hard_trim_max_score
    upsert(asm, items)
    full = asm.plan(10**6).total_before
    plan = asm.plan(full // 2)
    assert plan.compaction_turns[:1] == [0]
    assert plan.compaction_tokens > 0
    assert decisions(plan)["hist.1"][:2] == (DROPPED, COMPACTION)
    assert plan.fits


def test_fuse_winners_and_order() -> None:
    winners, order = _core.fuse(
        ["a", "b", "a", "a", "c", "b"],
        [50, 10, 20, 20, 5, 10],
        [0, 3, 2, 1, 0, 1],
        [0, 1, 2, 3, 4, 5],
    )
    assert winners == [3, 5, 3, 3, 4, 5]
    assert order == [4, 5, 3]
    with pytest.raises(ValueError, match="priorities"):
        _core.fuse(["a"], [1, 2], [0], [0])


def test_plans_are_deterministic() -> None:
    def run() -> tuple[object, ...]:
        asm = assembly(soft_trim_chars=400, soft_keep_chars=100)
        upsert(asm, [*session(10, 40), Item("rag.a", "x " * 300, TOOL, priority=60)])
        plan = asm.plan(asm.plan(10**6).total_before // 3)
        return (
            plan.decisions(),
            plan.context_order,
            plan.history_order,
            sorted(plan.replacements.items()),
            plan.windows,
            plan.compaction_turns,
        )

    assert run() == run()


WORDS = ["alpha ", "beta\n", "gamma delta ", "ε ", "0123 ", "def f(x): return x\n"]


@st.composite
def item_sets(draw: st.DrawFn) -> list[Item]:
    items: list[Item] = []
    turn = 0
    for seq in range(draw(st.integers(0, 30))):
        role = draw(st.sampled_from([USER, ASSISTANT, TOOL_ROLE, USER, ASSISTANT]))
        turn += role == USER
        text = "".join(draw(st.lists(st.sampled_from(WORDS), max_size=200)))
        items.append(
            Item(
                f"hist.{seq}",
                text,
                draw(st.sampled_from([HISTORY, TOOL])) if role == TOOL_ROLE else HISTORY,
                seq=seq,
                kind=TOOL_RESULT if role == TOOL_ROLE else MESSAGE,
                role=role,
                turn=turn,
                flags=draw(st.integers(0, 15)),
                overhead=draw(st.integers(0, 8)),
                summary=draw(st.none() | st.just("short summary")),
                label="tool result: x",
            )
        )
    for i in range(draw(st.integers(0, 10))):
        branch = draw(st.sampled_from(["sys", "mem", "rag", "task"]))
        text = "".join(draw(st.lists(st.sampled_from(WORDS), max_size=150)))
        items.append(
            Item(
                f"{branch}.n{i}",
                text,
                draw(st.sampled_from([INSTRUCTION, CORE_MEMORY, TOOL])),
                priority=draw(st.integers(0, 5)),
                rank=draw(st.integers(0, 3)),
                seq=100 + i,
                flags=PROTECTED if draw(st.integers(0, 7)) == 0 else 0,
                overhead=draw(st.integers(0, 4)),
                label=branch,
            )
        )
    return items


@given(items=item_sets(), budget=st.integers(0, 5000))
def test_budget_property(items: list[Item], budget: int) -> None:
    asm = assembly(soft_trim_chars=300, soft_keep_chars=60, protect_last_assistant=1)
    upsert(asm, items)
    try:
        plan = asm.plan(budget)
    except BudgetError:
        return
    ids, status, _, _, before, after, _ = plan.decisions()
    placeholder = plan.total_after - sum(after)
    assert placeholder >= 0
    assert (placeholder > 0) == ("hist.removed" in plan.history_order)
    if plan.fits:
        assert sum(after) + placeholder <= plan.target <= budget
    by_id = {i.node_id: i for i in items}
    rendered = set(plan.context_order) | set(plan.history_order)
    for node, s, b, a in zip(ids, status, before, after, strict=True):
        item = by_id[node]
        assert a <= b
        if item.flags & PROTECTED:
            assert s == KEPT and node in rendered
        if s == DROPPED:
            assert node not in rendered
        if s == DROPPED and item.kind != CONTEXT:  # a history turn group goes whole
            assert all(
                st_ == DROPPED
                for n, st_ in zip(ids, status, strict=True)
                if by_id[n].kind != CONTEXT and by_id[n].turn == item.turn
            )
    assert [n for n in plan.history_order if n != "hist.removed"] == sorted(
        (n for n in plan.history_order if n != "hist.removed"), key=lambda n: by_id[n].seq
    )
    keys = [(by_id[n].priority, by_id[n].rank, by_id[n].seq) for n in plan.context_order]
    assert keys == sorted(keys)
    again = asm.plan(budget)
    assert again.decisions() == plan.decisions()
    assert Counter(plan.changed()) == Counter(
        n for n, s in zip(ids, status, strict=True) if s != KEPT
    )


def test_a_held_plan_keeps_its_node_ids_while_the_assembly_changes() -> None:
    """A plan names its items as they were when it was made: a render's report reads the plan
    after later renders upserted new items (the node ids are shared with the assembly in
    chunks, a write copying only the chunk a held plan shares), reused the slots of removed
    ones, or compacted the slots."""
    asm = assembly()
    upsert(asm, session(150, 1))  # 450 items: several chunks of ids
    held = asm.plan(1_000_000)
    ids = held.decisions()[0]
    order = held.history_order
    assert ids == order == [f"hist.{s}" for s in range(1, 451)]
    upsert(asm, session(3, 1, start_seq=451))  # appended in the last chunk, and a new one
    removed = [f"hist.{s}" for s in range(1, 401)]
    assert asm.remove(removed[:2]) == 2
    upsert(asm, session(1, 1, start_seq=500))  # two into the freed slots, one appended
    assert asm.remove(removed[2:]) == len(removed) - 2  # most slots free: compacted
    upsert(asm, session(2, 1, start_seq=600))
    assert held.decisions()[0] == ids
    assert held.history_order == order
    now = asm.plan(1_000_000).history_order
    kept = [f"hist.{s}" for s in [*range(401, 460), *range(500, 503), *range(600, 606)]]
    assert now == kept
