"""Snapshot retention: a session's stored snapshots stay bounded on every store, restore points
and restores keep working, pruning is crash-safe, and a FileStore write costs no folder scan."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from ctxengine import ContextEngine
from ctxengine.errors import ConfigError, ConfigTypeError, StoreError
from ctxengine.store import FileStore, InMemoryStore, RedisStore, SnapshotInfo, Store
from ctxengine.store import file as file_store
from ctxengine.store.snapshot import payload_hash, snapshot_meta
from stored_sessions import BUDGET, MODEL, write_session

Make = Callable[..., Store]
SID = "long"


@pytest.fixture(params=["memory", "file", "redis"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """Stores of one kind on one backing place, each opened with the retention given."""
    yield from _stores(request, tmp_path)


@pytest.fixture(params=["file", "redis"])
def make_shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """:func:`make` of the stores whose sessions outlive the store object (a later store
    opened on the same place reads what an earlier one wrote)."""
    yield from _stores(request, tmp_path)


def _stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    kind: str = request.param
    prefix = f"t{uuid.uuid4().hex[:10]}"
    opened: list[Store] = []

    def factory(**keep: Any) -> Store:
        if kind == "memory":  # nothing to share: a new one
            return InMemoryStore(**keep)
        if kind == "file":
            store: Store = FileStore(tmp_path / "store", fsync=False, **keep)
        else:
            store = RedisStore(request.getfixturevalue("redis_url"), prefix=prefix, **keep)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def stored(store: Store, session_id: str = SID) -> dict[str, int]:
    """Content hash -> bytes of every snapshot content the store holds for the session."""
    if isinstance(store, InMemoryStore):
        blobs = store._sessions[session_id].blobs
        return {h: len(t.encode()) for h, t in blobs.items()}
    if isinstance(store, FileStore):
        objects = store.root / "sessions" / session_id / "objects"
        return {p.stem: p.stat().st_size for p in objects.iterdir()}
    assert isinstance(store, RedisStore)
    r = redis.Redis.from_url(store.url)
    keys = r.keys(f"{store.prefix}:{{{session_id}}}:obj:*")
    return {k.decode().rsplit(":", 1)[1]: int(r.strlen(k)) for k in keys}


def content(turn: int) -> dict[str, Any]:
    """A snapshot that grows with the session; its summary changes every 10 turns (turn 10 is
    the first compaction)."""
    summary = {"mem.summary": f"summary of turns before {turn // 10 * 10}"} if turn >= 10 else {}
    return {"turn": turn, "core_memory": summary, "state": {"history": "x" * (200 * turn)}}


def write(store: Store, turn: int, session_id: str = SID) -> SnapshotInfo:
    body = content(turn)
    return store.write_snapshot(session_id, body, meta=snapshot_meta(body), leaf_id=None)


def turns_kept(store: Store, session_id: str = SID) -> list[int]:
    return [i.meta["turn"] for i in store.snapshots(session_id) if not i.pruned]


# -- bounded storage ---------------------------------------------------------------------------


def test_a_long_session_keeps_the_newest_snapshots_and_the_latest_restore_points(
    make: Make,
) -> None:
    store = make(keep_snapshots=5, keep_compactions=2)
    infos = [write(store, t) for t in range(60)]
    listed = store.snapshots(SID)
    assert [i.id for i in listed] == [i.id for i in infos]  # every index line stays
    # the newest 5, and the first snapshots after the last 2 compactions (turns 40 and 50)
    assert turns_kept(store) == [40, 50, 55, 56, 57, 58, 59]
    held = stored(store)
    assert sorted(held) == sorted(i.hash for i in listed if not i.pruned)
    assert sum(held.values()) == sum(i.size for i in listed if not i.pruned)
    assert sum(held.values()) < sum(i.size for i in infos) / 4


def test_defaults_bound_the_store_and_none_keeps_every_snapshot(make: Make) -> None:
    store = make()
    for t in range(80):
        write(store, t)
    # 50 newest (turns 30..79), and the restore points before them: turns 10 and 20
    assert turns_kept(store) == [10, 20, *range(30, 80)]
    assert len(stored(store)) == 52
    every = make(keep_snapshots=None)
    for t in range(80):
        write(every, t, "all")
    assert len(stored(every, "all")) == 80
    assert not any(i.pruned for i in every.snapshots("all"))


def test_a_content_a_kept_snapshot_shares_is_not_removed(make: Make) -> None:
    store = make(keep_snapshots=2, keep_compactions=0)
    first = write(store, 3)
    for t in (4, 5, 6):
        write(store, t)
    again = write(store, 3)  # the same content as the first, now pruned: stored once, kept
    assert [i.pruned for i in store.snapshots(SID)] == [True, True, True, False, False]
    assert again.hash == first.hash and first.hash in stored(store)
    snap = store.load_snapshot(SID, again.id)
    assert snap is not None and snap.content == content(3)


# -- loading -----------------------------------------------------------------------------------


def test_a_pruned_snapshot_is_listed_and_loading_it_says_it_was_pruned(make: Make) -> None:
    store = make(keep_snapshots=3, keep_compactions=0)
    infos = [write(store, t) for t in range(8)]
    listed = store.snapshots(SID)
    assert [i.pruned for i in listed] == [True] * 5 + [False] * 3
    assert [i.meta["turn"] for i in listed] == list(range(8))  # metadata of each stays
    with pytest.raises(StoreError, match=rf"snapshot {infos[0].id!r} was pruned by retention"):
        store.load_snapshot(SID, infos[0].id)
    latest = store.load_snapshot(SID)
    assert latest is not None and latest.info.id == infos[-1].id
    kept = store.load_snapshot(SID, infos[5].id)
    assert kept is not None and kept.content == content(5)
    assert store.problems == []  # pruning is not damage


@pytest.mark.parametrize(
    ("keep", "error", "named"),
    [
        ({"keep_snapshots": "50"}, ConfigTypeError, "keep_snapshots is '50' (str)"),
        ({"keep_snapshots": 2.5}, ConfigTypeError, "keep_snapshots is 2.5 (float)"),
        ({"keep_snapshots": True}, ConfigTypeError, "keep_snapshots is True (bool)"),
        ({"keep_snapshots": 0}, ConfigError, "keep_snapshots is 0; expected an int >= 1"),
        ({"keep_snapshots": -3}, ConfigError, "keep_snapshots is -3; expected an int >= 1"),
        ({"keep_compactions": -1}, ConfigError, "keep_compactions is -1; expected an int >= 0"),
        ({"keep_compactions": "all"}, ConfigTypeError, "keep_compactions is 'all' (str)"),
    ],
)
@pytest.mark.parametrize("kind", ["memory", "file", "redis"])
def test_bad_retention_arguments_are_config_errors_naming_the_value(
    kind: str, keep: dict[str, Any], error: type[Exception], named: str, tmp_path: Path
) -> None:
    opened: Callable[[], object] = {
        "memory": lambda: InMemoryStore(**keep),
        "file": lambda: FileStore(tmp_path, **keep),
        "redis": lambda: RedisStore("redis://127.0.0.1:1/0", **keep),
    }[kind]
    with pytest.raises(error, match=f"^{re.escape(named)}") as caught:
        opened()
    assert type(caught.value) is error


# -- the engine on a pruned store --------------------------------------------------------------


def test_restore_after_pruning_gives_the_payloads_of_the_kept_renders(make: Make) -> None:
    store = make(keep_snapshots=3, keep_compactions=1)
    made = write_session(store, SID, turns=12)
    infos = store.snapshots(SID)
    assert len(infos) == len(made.renders) == 12
    summaries = [i.meta["summary_hash"] for i in infos]
    points = [k for k in range(1, 12) if summaries[k] and summaries[k] != summaries[k - 1]]
    kept = [k for k, i in enumerate(infos) if not i.pruned]
    assert kept == [max(p for p in points if p < 9), 9, 10, 11]  # a compaction, the newest

    async def restore(snapshot: str | None) -> str:
        engine = ContextEngine(MODEL, BUDGET, store=store)
        try:
            return payload_hash((await engine.restore(SID, snapshot=snapshot)).payload)
        finally:
            engine.close()

    assert anyio.run(restore, None) == payload_hash(made.last.payload)
    for k in kept:
        assert anyio.run(restore, infos[k].id) == payload_hash(made.renders[k].payload), k
    pruned = infos[0].id
    with pytest.raises(StoreError, match=rf"{pruned!r} was pruned by retention"):
        anyio.run(restore, pruned)


def test_an_old_session_gets_its_restore_points_from_the_contents(make_shared: Make) -> None:
    """Index lines written before retention carry no summary hash: the first store keeping
    fewer snapshots reads it from their contents, so their compactions are kept."""
    make = make_shared
    old = make(keep_snapshots=None)
    for t in range(30):
        old.write_snapshot(SID, content(t), meta={"turn": t}, leaf_id=None)
    store = make(keep_snapshots=4, keep_compactions=5)
    write(store, 30)
    assert turns_kept(store) == [10, 20, 27, 28, 29, 30]
    assert len(stored(store)) == 6


# -- FileStore: crash safety, several processes, cost per write --------------------------------


class Killed(BaseException):
    """The process dies here (nothing after it runs, no handler catches it)."""


def _loads_every_kept_snapshot(root: Path) -> list[SnapshotInfo]:
    store = FileStore(root)  # a restarted process
    infos = store.snapshots(SID)
    for info in infos:
        if info.pruned:
            with pytest.raises(StoreError, match="pruned by retention"):
                store.load_snapshot(SID, info.id)
        else:
            snap = store.load_snapshot(SID, info.id)
            assert snap is not None and snap.content == content(info.meta["turn"])
    latest = store.load_snapshot(SID)
    assert latest is not None and latest.info.id == infos[-1].id
    assert store.problems == []
    return infos


def _objects(root: Path) -> set[str]:
    return {p.stem for p in (root / "sessions" / SID / "objects").iterdir()}


@pytest.mark.parametrize("step", ["index line", "first removal", "second removal"])
def test_a_prune_killed_midway_leaves_a_loadable_store(
    step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prunes are recorded in the new index line before any content file goes: killed
    while writing that line nothing is pruned; killed between removals, the files left are
    named by no live line and the next snapshot removes them."""
    for t in range(6):
        write(FileStore(tmp_path, keep_snapshots=None), t)
    store = FileStore(tmp_path, keep_snapshots=2, keep_compactions=0)
    if step == "index line":
        real = FileStore._write_lines

        def die(self: FileStore, lg: Any, fd: int, lines: list[str]) -> bool:
            if '"prunes"' in lines[0]:
                raise Killed
            return real(self, lg, fd, lines)

        monkeypatch.setattr(FileStore, "_write_lines", die)
    else:
        removed: list[Path] = []
        real_unlink = Path.unlink

        def unlink(path: Path, missing_ok: bool = False) -> None:
            if len(removed) == ("first removal", "second removal").index(step):
                raise Killed
            removed.append(path)
            real_unlink(path, missing_ok)

        monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(Killed):
        write(store, 6)
    monkeypatch.undo()
    infos = _loads_every_kept_snapshot(tmp_path)
    if step == "index line":
        assert len(infos) == 6 and not any(i.pruned for i in infos)
        assert len(_objects(tmp_path)) == 7  # the killed snapshot's content, never indexed
    else:
        assert [i.pruned for i in infos] == [True] * 5 + [False] * 2
        assert len(_objects(tmp_path)) > 2  # contents of pruned snapshots left behind
    after = FileStore(tmp_path, keep_snapshots=2, keep_compactions=0)
    write(after, 7)
    infos = _loads_every_kept_snapshot(tmp_path)
    assert _objects(tmp_path) == {i.hash for i in infos if not i.pruned}
    assert len(_objects(tmp_path)) == 2


def test_a_store_that_saw_a_content_stored_writes_it_again_once_another_pruned_it(
    tmp_path: Path,
) -> None:
    """Two processes on one session: one prunes a content the other had stored; the other's
    next snapshot of that same content must store it again, never name a removed file."""
    keeps_all = FileStore(tmp_path, keep_snapshots=None)
    prunes = FileStore(tmp_path, keep_snapshots=2, keep_compactions=0)
    first = write(keeps_all, 1)
    for t in (2, 3, 4):
        write(prunes, t)
    assert first.hash not in _objects(tmp_path)
    again = write(keeps_all, 1)
    snap = FileStore(tmp_path).load_snapshot(SID, again.id)
    assert snap is not None and snap.content == content(1)
    _loads_every_kept_snapshot(tmp_path)


def test_a_snapshot_looks_for_leftovers_only_when_it_may_find_some(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scanning the objects folder (and the set of every indexed hash) on each snapshot made a
    long session's writes slower and slower: a store scans on its first snapshot of a
    session, after another process wrote to the folder, and every SWEEP_EVERY snapshots."""
    scans: list[Path] = []
    real = file_store._remove_orphans

    def counted(objects: Path, named: Any, before: float) -> None:
        scans.append(objects)
        real(objects, named, before)

    monkeypatch.setattr(file_store, "_remove_orphans", counted)
    store = FileStore(tmp_path, fsync=False)
    writes = 2 * file_store.SWEEP_EVERY + 2
    for t in range(writes):
        write(store, t)
    assert len(scans) == 3  # the first, then one every SWEEP_EVERY
    write(FileStore(tmp_path, fsync=False), writes)  # another process: it scans first
    assert len(scans) == 4
    write(store, writes + 1)  # the folder changed under this one: it scans too
    assert len(scans) == 5
    write(store, writes + 2)
    assert len(scans) == 5
