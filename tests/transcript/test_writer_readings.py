"""Agent logs read as their writers read them, on the real shapes of their files: an entry
whose parent is missing (pi, Claude Code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxengine.transcript import load

from .helpers import CC, PI


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _pi_v3(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A version 1 pi session as pi migrates it to the tree format (``migrateV1ToV2`` in
    badlogic/pi-mono ``packages/coding-agent/src/core/session-manager.ts``): every entry gets
    an id and the previous entry as its parent, the header ``version`` 3."""
    out = [{**rows[0], "version": 3}]
    prev: str | None = None
    for i, row in enumerate(rows[1:]):
        eid = f"e{i:04d}"
        out.append({**row, "id": eid, "parentId": prev})
        prev = eid
    return out


def test_pi_entry_whose_parent_is_missing_is_the_root_of_the_branch(tmp_path: Path) -> None:
    """pi walks from the leaf through ``parentId`` and stops where ``byId`` has no such entry
    (``buildSessionContext`` in badlogic/pi-mono ``session-manager.ts``; its ``getTree``
    returns such "orphaned entries (broken parent chain)" as roots): a session with a lost
    line resumes from the entry after it. It was a TranscriptError; it loads as pi reads it,
    the orphan's line in ``meta["orphan_line"]``, as a torn line is in ``torn_line``."""
    rows = [json.loads(line) for line in PI.read_text(encoding="utf-8").splitlines()]
    tree = _pi_v3(rows)
    whole = load(_write_jsonl(tmp_path / "whole.jsonl", tree))
    assert "orphan_line" not in whole.meta
    cut = next(i for i in range(len(tree) // 2, len(tree)) if tree[i]["type"] == "message")
    lost = [*tree[:cut], *tree[cut + 1 :]]  # the line of entry `cut` lost
    t = load(_write_jsonl(tmp_path / "lost.jsonl", lost))
    assert t.meta["orphan_line"] == cut + 1  # 1-based: the entry after the lost one
    root = {**tree[cut + 1], "parentId": None}
    after = load(_write_jsonl(tmp_path / "after.jsonl", [tree[0], root, *tree[cut + 2 :]]))
    assert t.messages == after.messages  # what pi sends: the branch from the orphan on
    assert 0 < len(t.messages) < len(whole.messages)


def test_claude_code_record_whose_parent_is_missing_is_recorded(tmp_path: Path) -> None:
    """Claude Code rebuilds a session by walking ``parentUuid`` back from the last message
    and stops at a parent the file does not hold (anthropics/claude-code #46603: a compaction
    wrote messages whose ``parentUuid`` was never written, and ``--resume`` shows only what
    is reachable): the record after the break is the root. It read so already, but silently:
    the loss is recorded in ``meta["orphan_line"]``, as a torn line is in ``torn_line``."""
    path = CC / "tool_heavy.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    whole = load(_write_jsonl(tmp_path / "whole.jsonl", rows))
    assert "orphan_line" not in whole.meta
    parents = {r.get("parentUuid") for r in rows}
    cut = next(
        i
        for i in range(len(rows) // 2, len(rows))
        if rows[i].get("type") == "user" and rows[i].get("uuid") in parents
    )
    child = next(i for i, r in enumerate(rows) if r.get("parentUuid") == rows[cut]["uuid"])
    lost = [*rows[:cut], *rows[cut + 1 :]]
    t = load(_write_jsonl(tmp_path / "lost.jsonl", lost))
    assert t.meta["orphan_line"] == child  # 1-based line of the child, one line up
    assert len(t.messages) < len(whole.messages)
    assert whole.messages[-1] == t.messages[-1]
