"""Crash test at the store level: a writer killed with SIGKILL at random points loses nothing
it acknowledged, and nothing half-written is ever read as valid.

The child appends one entry and writes one snapshot (in the background writer) per turn for
1,000 turns, printing each id only after the store acknowledged it. ``CTXENGINE_CRASH_RUNS``
sets the number of kills (5 by default, 20 in ``.ci/run``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ctxengine.store import FileStore, NewEntry

RUNS = int(os.environ.get("CTXENGINE_CRASH_RUNS", "5"))
TURNS = 1000

CHILD = r"""
import os, sys
from ctxengine.store import FileStore, NewEntry
from ctxengine.store.writer import SnapshotWriter

def body(turn):
    return {"turn": turn, "state": {"messages": turn + 1, "note": "x" * (turn % 97)},
            "core_memory": {"mem.summary": f"summary up to turn {turn}"}}

store = FileStore(sys.argv[1])
writer = SnapshotWriter(store)
for turn in range(int(sys.argv[2])):
    item = NewEntry("message", {"turn": turn, "text": "t" * (turn % 50)})
    (entry,) = store.append("crash", [item])
    os.write(1, f"E {entry.id} {turn}\n".encode())  # one write: lines never interleave
    future = writer.submit("crash", body(turn), meta={"turn": turn}, leaf_id=entry.id)
    future.add_done_callback(
        lambda f: os.write(1, f"S {f.result().id} {f.result().meta['turn']}\n".encode()))
writer.close()
os.write(1, b"DONE\n")
"""


def _expected_entry(turn: int) -> dict[str, object]:
    return {"turn": turn, "text": "t" * (turn % 50)}


def _expected_snapshot(turn: int) -> dict[str, object]:
    return {
        "turn": turn,
        "state": {"messages": turn + 1, "note": "x" * (turn % 97)},
        "core_memory": {"mem.summary": f"summary up to turn {turn}"},
    }


@pytest.mark.parametrize("run", range(RUNS))
def test_sigkill_at_a_random_point_loses_nothing_acknowledged(
    tmp_path: Path, run: int, child_env: dict[str, str]
) -> None:
    rng = random.Random(run * 7919 + 17)
    kill_after = rng.randint(1, TURNS)  # acknowledged lines to read before the kill
    env = child_env
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(TURNS)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked_entries: list[tuple[str, int]] = []
    acked_snaps: list[tuple[str, int]] = []
    for lines, line in enumerate(proc.stdout, 1):
        kind, *rest = line.split()
        if kind == "E":
            acked_entries.append((rest[0], int(rest[1])))
        elif kind == "S":
            acked_snaps.append((rest[0], int(rest[1])))
        if lines >= kill_after:
            proc.send_signal(signal.SIGKILL)
            break
    for line in proc.stdout:  # what it printed before the signal landed was acknowledged too
        kind, *rest = line.split()
        if kind == "E":
            acked_entries.append((rest[0], int(rest[1])))
        elif kind == "S":
            acked_snaps.append((rest[0], int(rest[1])))
    proc.wait(30)
    proc.stdout.close()
    assert proc.returncode in (-signal.SIGKILL, 0), "the child failed by itself"
    assert acked_entries, "the child acknowledged nothing before the kill"

    store = FileStore(tmp_path)  # reopening succeeds
    entries = store.entries("crash")
    ids = [e.id for e in entries]
    assert len(ids) == len(set(ids))
    for eid, _turn in acked_entries:
        assert ids.count(eid) == 1, f"acknowledged entry {eid} lost"
    # nothing partial: every entry read is exactly what was written, in order, one chain
    assert [e.data for e in entries] == [_expected_entry(t) for t in range(len(entries))]
    assert [e.parent_id for e in entries[1:]] == ids[:-1]
    assert len(entries) <= len(acked_entries) + 1  # at most the one in flight
    assert all(p.message.startswith("last line is torn") for p in store.problems)

    latest = store.load_snapshot("crash")
    if acked_snaps:
        assert latest is not None
        last_turn = acked_snaps[-1][1]
        assert latest.info.meta["turn"] >= last_turn  # the last acknowledged, or a later one
        if latest.info.meta["turn"] == last_turn:
            assert latest.info.id == acked_snaps[-1][0]
    if latest is not None:
        turn = latest.info.meta["turn"]
        assert latest.content == _expected_snapshot(turn)
        assert latest.info.leaf_id == ids[turn]  # it points at an entry that is there
    # the store goes on after the crash, starting on a fresh line
    (more,) = FileStore(tmp_path).append("crash", [NewEntry("message", {"after": True})])
    again = FileStore(tmp_path).entries("crash")
    assert [e.id for e in again] == [*ids, more.id] and more.parent_id == (ids[-1] if ids else None)
