"""Crash test at the engine level: a process that renders and persists turns through the public
API (``ContextEngine(store=FileStore(dir))``, ``engine.session``, ``checkpoint()``), killed with
SIGKILL at random points, loses nothing it acknowledged, and its restore gives the payload it
acknowledged last.

The child (``render_child.py``) plays a 1,000-turn session; each turn is three messages, a
render at a fixed 8,000-token budget and a ``checkpoint()``, and only then the acknowledgement
``ACK turn sha256(payload) snapshot_id``. ``CTXENGINE_CRASH_RUNS`` runs (5 by default, 20 in
``.ci/run``); run ``r`` starts from the store as it was after turn ``K_r - 1``, the ``K_r`` spread
evenly over 0..960, so the kills fall all over the 1,000 turns without every run replaying
them: the module builds the session once (same API, ``fsync=False`` only to build faster) and
gives each run the byte prefix of its files that the store held after that turn (a store's
files only grow, so that prefix is exactly what was on disk then). The child then resumes it
(opening the session again), plays on, and is killed after a random number of acknowledged
turns (0 to 20) plus a random fraction of a turn, so kills land inside appends, renders and
snapshot writes.

What is compared after each kill. Let A be the last acknowledged turn (the child's, or the
prefix's when the child acknowledged nothing):

- the store's current branch holds exactly the messages of turns 0..A, once each, in order,
  plus at most the first 1-3 messages of turn A+1 (durably appended before the kill, never
  acknowledged); nothing else, nothing partial (a torn last line is reported and skipped);
- every acknowledged snapshot is in the index; the latest intact one is of turn A or A+1;
- ``engine.restore("s", snapshot=<A's snapshot>)`` gives exactly the acknowledged payload;
- ``engine.restore("s")`` (the latest state) gives it too when nothing of turn A+1 is stored;
  otherwise it equals the render of A's snapshot with the stored messages of A+1 added (the
  payload the acknowledged state gives for what the store holds);
- opening the session again succeeds, renders that same payload, and goes on persisting.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from ctxengine.store import FileStore
from ctxengine.store.codec import message_from_json

RUNS = int(os.environ.get("CTXENGINE_CRASH_RUNS", "5"))
TURNS = 1000
LAST_START = 960  # the latest turn a run starts from (it then plays up to 20 more)
MAX_ACKS = 20
CHILD = Path(__file__).with_name("render_child.py")


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()


def _start(run: int) -> int:
    return round(run * LAST_START / max(1, RUNS - 1))


@dataclass(frozen=True)
class Ack:
    turn: int
    digest: str
    snapshot_id: str


@dataclass(frozen=True)
class Built:
    """The session played once: per turn its ack and the sizes of the store's files after it."""

    folder: Path
    acks: list[Ack]
    sizes: list[tuple[int, int]]  # (transcript.jsonl, snapshots.jsonl) bytes after each turn

    def prefix(self, turns: int, dest: Path) -> Path:
        """A store holding exactly what this one held after turn ``turns - 1``."""
        dest.mkdir()
        if turns == 0:
            return dest
        src, out = self.folder / "sessions" / child.SESSION, dest / "sessions" / child.SESSION
        (out / "objects").mkdir(parents=True)
        transcript, index = self.sizes[turns - 1]
        for name, size in (("transcript.jsonl", transcript), ("snapshots.jsonl", index)):
            with (src / name).open("rb") as f:
                (out / name).write_bytes(f.read(size))
        store = FileStore(dest)
        for info in store.snapshots(child.SESSION):  # objects are immutable: links suffice
            os.link(src / "objects" / f"{info.hash}.json", out / "objects" / f"{info.hash}.json")
        return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("render-crash-built")
    turns = max(_start(r) for r in range(RUNS))
    acks: list[Ack] = []
    sizes: list[tuple[int, int]] = []
    session_dir = folder / "sessions" / child.SESSION

    async def play() -> None:
        eng = child.engine(folder, fsync=False, keep_snapshots=None)  # prefixes need them all
        async with eng.session(child.SESSION) as s:
            for turn in range(turns):
                out = await child.play(s, turn)
                info = await s.checkpoint()
                acks.append(Ack(turn, child.digest(out.payload), info.id))
                sizes.append(
                    (
                        (session_dir / "transcript.jsonl").stat().st_size,
                        (session_dir / "snapshots.jsonl").stat().st_size,
                    )
                )
        eng.close()

    asyncio.run(play())
    return Built(folder, acks, sizes)


def _read_acks(lines: list[str]) -> tuple[list[Ack], bool]:
    acks, done = [], False
    for line in lines:
        kind, *rest = line.split()
        if kind == "ACK":
            acks.append(Ack(int(rest[0]), rest[1], rest[2]))
        elif kind == "DONE":
            done = True
    return acks, done


@pytest.mark.parametrize("run", range(RUNS))
def test_sigkill_during_renders_loses_nothing_and_restores_the_acknowledged_payload(
    built: Built, tmp_path: Path, run: int, child_env: dict[str, str]
) -> None:
    rng = random.Random(run * 104729 + 3)
    start = _start(run)
    wanted = rng.randint(1 if start == 0 else 0, MAX_ACKS)  # acks to read before the kill
    root = built.prefix(start, tmp_path / "store")
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(root), str(start), str(TURNS)],
        env=child_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    if wanted == 0:  # killed while it resumes or plays its first turn
        time.sleep(rng.uniform(0.2, 1.5))
    else:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ACK") and len(lines) >= wanted:
                break
        time.sleep(rng.uniform(0.0, 0.05))  # a turn takes some 30 ms: land anywhere in it
    proc.send_signal(signal.SIGKILL)
    lines.extend(proc.stdout)  # what it printed before the signal landed was acknowledged too
    proc.wait(30)
    proc.stdout.close()
    mine, done = _read_acks(lines)
    assert proc.returncode == (0 if done else -signal.SIGKILL), "the child failed by itself"
    assert [a.turn for a in mine] == list(range(start, start + len(mine)))
    acked = built.acks[:start] + mine
    assert acked, "nothing was acknowledged before the kill"
    asyncio.run(_verify(root, acked))


async def _verify(root: Path, acked: list[Ack]) -> None:
    last = acked[-1]
    eng = child.engine(root)  # a new process's engine on the folder (one store: read once)
    store = eng.store
    assert isinstance(store, FileStore)
    branch = store.branch(child.SESSION)
    ids = [e.id for e in branch]
    assert len(set(ids)) == len(ids)
    assert [e.parent_id for e in branch] == [None, *ids[:-1]]
    assert [e.id for e in store.entries(child.SESSION)] == ids  # no other branch, no strays
    got = [e.data["message"] for e in branch]
    n_acked = 3 * (last.turn + 1)
    assert n_acked <= len(got) <= n_acked + 3, (len(got), n_acked)  # at most the turn in flight
    assert got == child.stored_messages(last.turn + 2)[: len(got)]  # each once, in order, whole
    assert all(p.message.startswith("last line is torn") for p in store.problems), store.problems
    index = [i.id for i in store.snapshots(child.SESSION)]
    assert len(set(index)) == len(index)
    assert {a.snapshot_id for a in acked} <= set(index), "an acknowledged snapshot is missing"
    latest = store.load_snapshot(child.SESSION)
    assert latest is not None and latest.info.meta["turn"] in (last.turn, last.turn + 1)
    if latest.info.meta["turn"] == last.turn:
        assert latest.info.id == last.snapshot_id
    else:  # written, not acknowledged: only after all of turn A+1's messages
        assert len(got) == n_acked + 3

    restored = await eng.restore(child.SESSION)
    if len(got) == n_acked:
        assert child.digest(restored.payload) == last.digest
    else:  # the acknowledged state, and it plus what was durably appended after it
        at = await eng.load(child.SESSION, snapshot=last.snapshot_id)
        assert at is not None and len(at.messages) == n_acked
        at.persist = False
        assert child.digest((await at.render()).payload) == last.digest
        at.extend(message_from_json(m) for m in got[n_acked:])
        assert (await at.render()).payload == restored.payload

    async with eng.session(child.SESSION) as again:  # a restarted worker opens it again
        assert len(again.messages) == len(got)
        assert (await again.render()).payload == restored.payload
        await again.user_message("after the crash")
        assert await again.checkpoint() is not None
    eng.close()
    after = FileStore(root).branch(child.SESSION)
    assert [e.id for e in after[:-1]] == ids and after[-1].parent_id == ids[-1]
    assert after[-1].data["message"]["blocks"][0]["text"] == "after the crash"


@pytest.mark.parametrize("turns", [41, 140, 527])
def test_a_restored_snapshot_renders_its_payload_again_after_a_compacting_turn(
    tmp_path: Path, turns: int
) -> None:
    # Turns 40 and 139 of the child compact, and the plan after the compaction was still over
    # its target (the ladder trimmed the protected tail's large result): the next render, with
    # nothing added, compacted again, so re-rendering the acknowledged snapshot of turn 40 gave
    # another payload. A render now leaves a state whose next render is the same. Turn 526
    # still did after that fix (the compaction landed over the target, the ladder trimmed, and
    # the next render was past the mark again): the state now records what a compacting render
    # left (``SessionState.settled``, in the snapshot too) and is not compacted again.
    # (Turn 526 no longer compacts since a render past the mark whose only cuts are the
    # protected tail's is not compacted again: the first compacting turn from there on is
    # checked, as the first from each of the other two.)
    async def main() -> None:
        eng = child.engine(tmp_path / "store", fsync=False)
        async with eng.session(child.SESSION) as s:
            for t in range(turns + 200):
                out = await child.play(s, t)
                snapshot = await s.checkpoint()
                if t == turns - 1:  # the named turn, compacting or not, renders the same again
                    same = await s.render()
                    assert not same.report.compactions
                    assert child.digest(same.payload) == child.digest(out.payload)
                if t >= turns - 1 and any(c["ok"] for c in out.report.compactions):
                    break
            assert any(c["ok"] for c in out.report.compactions)  # the turn compacted
            again = await s.render()
            assert not again.report.compactions
            assert child.digest(again.payload) == child.digest(out.payload)
        assert snapshot is not None
        at = await child.engine(tmp_path / "store", fsync=False).load(
            child.SESSION, snapshot=snapshot.id
        )
        assert at is not None
        at.persist = False
        assert child.digest((await at.render()).payload) == child.digest(out.payload)

    asyncio.run(main())
