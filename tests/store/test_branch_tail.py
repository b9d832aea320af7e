"""``branch_tail``: the newest entries of a branch, read at the cost of those entries.

Every answer is compared with the whole read (``branch()`` and ``leaf()`` of a store opened
afresh), on every kind of history: pops and clears as ``CtxEngineSession`` writes them,
branches, appends by other store objects between calls, and on ``FileStore`` the leftovers of
a writer killed inside an append (a torn last line, an append of several entries cut short),
written as tests/store/test_file_store.py writes them. The chunk and page a store reads from
the end first are made small, so that short sessions already take the path of long ones.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxengine.errors import StoreError
from ctxengine.store import (
    BranchTail,
    Entry,
    FileStore,
    NewEntry,
    Store,
    TailStore,
    branch_tail,
    compare_and_append,
)
from ctxengine.store import file as file_module

ITEM = "agents_item"
KINDS = frozenset({ITEM})
COUNTS = (0, 1, 2, 3, 7, 40, 10_000)


@pytest.fixture(autouse=True)
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read 256 bytes (FileStore) or 3 elements (RedisStore) from the end first."""
    monkeypatch.setattr(file_module, "TAIL_CHUNK", 256)
    try:
        from ctxengine.store import redis_store
    except ImportError:  # pragma: no cover - redis is a test dependency
        return
    monkeypatch.setattr(redis_store, "TAIL_PAGE", 3)


def items(*names: object) -> list[NewEntry]:
    return [NewEntry(ITEM, {"item": {"n": n, "pad": "x" * 40}}) for n in names]


def expected(store: Store, session_id: str, count: int, kinds: Any = KINDS) -> BranchTail:
    """What the whole read says: the branch's end and the leaf."""
    branch = store.branch(session_id)
    chosen = [e for e in branch if kinds is None or e.kind in kinds]
    return BranchTail(
        chosen[max(0, len(chosen) - count) :] if count else [], store.leaf(session_id)
    )


def assert_tails(make: Callable[[], Store], warm: Store, session_id: str = "s1") -> None:
    """The tail of a store opened afresh (cold) and of ``warm`` equal the whole read's."""
    for kinds in (KINDS, None):
        for count in COUNTS:
            want = expected(make(), session_id, count, kinds)
            cold = make().branch_tail(session_id, count, kinds=kinds)  # type: ignore[attr-defined]
            assert cold == want, (count, kinds, "cold")
            assert warm.branch_tail(session_id, count, kinds=kinds) == want  # type: ignore[attr-defined]


def pop(store: Store, session_id: str = "s1") -> Entry | None:
    """A pop as CtxEngineSession writes it: a marker at the newest item's parent, if the
    leaf is still the one read."""
    tail = branch_tail(store, session_id, 1, kinds=KINDS)
    if not tail.entries:
        return None
    last = tail.entries[-1]
    marker = NewEntry("agents_pop", {"popped": last.id})
    compare_and_append(
        store, session_id, [marker], expected_leaf=tail.leaf, parent_id=last.parent_id
    )
    return last


def test_every_store_of_the_package_reads_tails(make_store: Callable[[], Store]) -> None:
    assert isinstance(make_store(), TailStore)


def test_the_tail_is_the_end_of_the_branch_on_every_history(
    make_store: Callable[[], Store],
) -> None:
    """Appends of one and several entries, pops, clears, a branch from an earlier entry,
    each written by the store that reads (warm) or by another one (a new worker)."""
    rng = random.Random(5)
    warm = make_store()
    assert warm.branch_tail("s1", 3, kinds=KINDS) == BranchTail([], None)  # type: ignore[attr-defined]
    n = 0
    for step in range(70):
        writer = warm if step % 3 else make_store()
        roll = rng.random()
        if roll < 0.5:
            writer.append("s1", items(*range(n, n + rng.randint(1, 3))))
            n += 3
        elif roll < 0.75:
            pop(writer)
        elif roll < 0.8:
            writer.append("s1", [NewEntry("agents_clear", {})], parent_id=None)
        else:
            branch = make_store().branch("s1")
            if branch:
                at = branch[rng.randrange(len(branch))]
                writer.append("s1", items(f"b{step}"), parent_id=at.id)
        if step % 7 == 0:
            assert_tails(make_store, warm)
    assert_tails(make_store, warm)


def test_a_warm_store_sees_what_another_appended_and_popped_between_calls(
    make_store: Callable[[], Store],
) -> None:
    warm = make_store()
    warm.append("s1", items(*range(30)))
    for k in range(30, 40):
        warm.append("s1", items(k))
    assert [e.data["item"]["n"] for e in warm.branch_tail("s1", 2, kinds=KINDS).entries] == [38, 39]  # type: ignore[attr-defined]
    other = make_store()
    other.append("s1", items(40, 41))
    pop(make_store())
    assert_tails(make_store, warm)
    assert [e.data["item"]["n"] for e in warm.branch_tail("s1", 2, kinds=KINDS).entries] == [39, 40]  # type: ignore[attr-defined]


def test_a_store_without_branch_tail_gets_the_default(make_store: Callable[[], Store]) -> None:
    """A store of one's own (the Store methods only) is read whole, with the same answer."""

    class Own:
        def __init__(self, inner: Store) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            if name == "branch_tail":
                raise AttributeError(name)
            return getattr(self.inner, name)

    store = make_store()
    store.append("s1", items(*range(5)))
    pop(store)
    own: Any = Own(store)
    assert not isinstance(own, TailStore)
    for count in COUNTS:
        assert branch_tail(own, "s1", count, kinds=KINDS) == expected(store, "s1", count)
    assert pop(own) is not None and branch_tail(own, "s1", 9, kinds=KINDS) == expected(
        store, "s1", 9
    )


@pytest.mark.parametrize("count", [-1, 1.5, True, None])
def test_a_count_that_is_no_count_is_refused_naming_it(
    make_store: Callable[[], Store], count: Any
) -> None:
    store: Any = make_store()
    said = re.escape(f"count is {count!r}; expected an int >= 0")
    with pytest.raises(StoreError, match=said):
        branch_tail(store, "s1", count, kinds=KINDS)
    with pytest.raises(StoreError, match=said):
        store.branch_tail("s1", count, kinds=KINDS)


def test_kinds_that_are_a_str_are_refused_naming_them(make_store: Callable[[], Store]) -> None:
    """A str is a container of its substrings: ``"agents_item"`` would take kind ``"item"``."""
    store: Any = make_store()
    store.append("s1", [NewEntry("item", {"n": 1})])
    said = "kinds is 'agents_item'; expected a collection"
    with pytest.raises(StoreError, match=said):
        branch_tail(store, "s1", 1, kinds=ITEM)
    with pytest.raises(StoreError, match=said):
        store.branch_tail("s1", 1, kinds=ITEM)


# -- what is read -----------------------------------------------------------------------------


class _Counted:
    """The ``json`` module as a store module sees it, counting the records it parses."""

    def __init__(self) -> None:
        self.parsed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)

    def loads(self, raw: Any, **kwargs: Any) -> Any:
        self.parsed += 1
        return json.loads(raw, **kwargs)


@pytest.fixture(params=["file", "redis"])
def long_session(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Callable[[], Store], Any]]:
    """2,000 items appended one by one, then one pop (the whole read parses every one), and
    the module of the store, whose ``json`` is counted."""
    if request.param == "file":
        from ctxengine.store import file as module

        def make() -> Store:
            return FileStore(tmp_path, fsync=False)
    else:
        from ctxengine.store import RedisStore
        from ctxengine.store import redis_store as module

        url, prefix = request.getfixturevalue("redis_url"), f"t{random.getrandbits(40):x}"

        def make() -> Store:
            return RedisStore(url, prefix=prefix)

    store = make()
    for k in range(2000):
        store.append("s1", items(k))
    pop(store)
    yield make, module
    make().delete("s1")


def test_a_new_store_parses_the_tail_not_the_session(
    long_session: tuple[Callable[[], Store], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    make, module = long_session
    want = expected(make(), "s1", 20)
    counted = _Counted()
    monkeypatch.setattr(module, "json", counted)
    assert make().branch_tail("s1", 20, kinds=KINDS) == want  # type: ignore[attr-defined]
    assert counted.parsed < 200, counted.parsed  # the whole read parses 2,001 records
    counted.parsed = 0
    popped = pop(make())  # a pop of a new store: the read and the conditional append
    assert popped is not None and popped.id == want.entries[-1].id
    assert counted.parsed < 200, counted.parsed
    monkeypatch.setattr(module, "json", json)
    assert expected(make(), "s1", 19).entries == want.entries[:-1]


def test_a_store_that_read_the_end_before_goes_on_from_it(
    long_session: tuple[Callable[[], Store], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same store object for every call (a long-lived worker), with another appending
    between calls: it reads the lines (elements) appended since."""
    make, module = long_session
    mine: Any = make()
    mine.branch_tail("s1", 20, kinds=KINDS)
    for k in range(3):
        make().append("s1", items(f"other {k}"))
        counted = _Counted()
        monkeypatch.setattr(module, "json", counted)
        got = mine.branch_tail("s1", 20, kinds=KINDS)
        monkeypatch.setattr(module, "json", json)
        assert got == expected(make(), "s1", 20)
        assert counted.parsed <= 2, counted.parsed  # the other's item (and a RedisStore: its pop)
        popped = pop(mine)
        assert popped is not None and popped.data["item"]["n"] == f"other {k}"


# -- FileStore: what a killed writer leaves -------------------------------------------------


def transcript(root: Path, session_id: str = "s1") -> Path:
    return root / "sessions" / session_id / "transcript.jsonl"


def grown(root: Path) -> FileStore:
    """A session longer than the first chunk read from its end, with pops and a branch."""
    store = FileStore(root)
    for k in range(12):
        store.append("s1", items(k))
    pop(store)
    store.append("s1", items(20, 21, 22))
    pop(store)
    return store


def assert_file_tails(root: Path) -> None:
    assert_tails(lambda: FileStore(root), FileStore(root))


@pytest.mark.parametrize("cut", ["inside a line", "at a line's end"])
def test_an_append_cut_short_at_the_end_is_not_in_the_tail(tmp_path: Path, cut: str) -> None:
    """The writer killed inside its one write of four entries, after two of its lines:
    the tail, like the whole read, is the branch the session had before that append; the
    next append (of a new store, reading only the end) goes on from its leaf."""
    store = grown(tmp_path)
    leaf = store.leaf("s1")
    store.append("s1", items(30, 31, 32, 33))
    path = transcript(tmp_path)
    lines = path.read_bytes().split(b"\n")[:-1]
    assert json.loads(lines[-4])["batch"] == 4
    torn = [*lines[:-2], lines[-2][:25] if cut == "inside a line" else b""]
    path.write_bytes(b"\n".join(torn))
    assert FileStore(tmp_path).leaf("s1") == leaf
    assert_file_tails(tmp_path)
    (e,) = FileStore(tmp_path).append("s1", items(40))
    assert e.parent_id == leaf
    assert_file_tails(tmp_path)
    for k in range(41, 50):  # and once the leftovers are far from the end
        FileStore(tmp_path).append("s1", items(k))
        assert_file_tails(tmp_path)


def test_a_torn_last_line_is_skipped_and_reported_once(tmp_path: Path) -> None:
    store = grown(tmp_path)
    leaf = store.leaf("s1")
    with transcript(tmp_path).open("ab") as f:  # a process died inside writing an entry
        f.write(b'{"id":"torn","parent_id":"' + str(leaf).encode() + b'","kind":"agen')
    assert_file_tails(tmp_path)
    fresh = FileStore(tmp_path)
    assert fresh.branch_tail("s1", 3, kinds=KINDS).leaf == leaf
    said = [p.message for p in fresh.problems]
    assert len(said) == 1 and said[0].startswith("last line is torn"), said
    fresh.branch("s1")  # the whole read of the same store does not report it again
    assert len(fresh.problems) == 1
    (e,) = FileStore(tmp_path).append("s1", items(50))  # the torn bytes become a line of their own
    assert e.parent_id == leaf
    assert_file_tails(tmp_path)


def test_a_complete_last_line_without_its_newline_counts(tmp_path: Path) -> None:
    store = grown(tmp_path)
    leaf = store.leaf("s1")
    line = {"id": "x1", "parent_id": leaf, "kind": ITEM, "ts": 1.0, "data": {"item": {"n": 60}}}
    with transcript(tmp_path).open("ab") as f:
        f.write(json.dumps(line).encode())
    assert FileStore(tmp_path).branch_tail("s1", 1, kinds=KINDS).entries[0].id == "x1"
    assert_file_tails(tmp_path)
    (e,) = FileStore(tmp_path).append("s1", items(61))
    assert e.parent_id == "x1"
    assert_file_tails(tmp_path)


@pytest.mark.parametrize(
    "damage", ["not json", "parent unknown", "parent later", "duplicate", "old line copied"]
)
def test_damage_near_the_end_reads_as_the_whole_read_does(tmp_path: Path, damage: str) -> None:
    """Each is read as the whole read reads it: a damaged line, an entry whose parent_id
    names no entry before it, a line copied to the end (the whole read skips the copy: its id
    is an entry's before it, maybe one before what a store reads from the end)."""
    store = grown(tmp_path)
    path = transcript(tmp_path)
    lines = path.read_text().splitlines()
    k = len(lines) - 3
    bad = json.loads(lines[k])
    if damage == "not json":
        lines[k] = lines[k][:20] + "#" + lines[k][21:]
    elif damage == "duplicate":
        lines.append(lines[k])
    elif damage == "old line copied":
        lines.append(lines[1])
    else:
        bad["parent_id"] = "nosuch" if damage == "parent unknown" else json.loads(lines[-1])["id"]
        lines[k] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    assert_file_tails(tmp_path)
    FileStore(tmp_path).append("s1", items(70))
    pop(FileStore(tmp_path))
    assert_file_tails(tmp_path)
    assert store.leaf("s1") is not None


@pytest.mark.parametrize("read", ["whole", "from the end"])
@pytest.mark.parametrize("size", ["longer", "the same size"])
def test_a_transcript_made_anew_in_its_place_is_read_anew(
    tmp_path: Path, read: str, size: str
) -> None:
    """A session deleted and made again by another store object: ext4 gives the new file the
    deleted one's inode number at once, and a store object that had read the old file (a
    long-lived worker) took the new one for the old one grown (it read on from its old
    offset, linking new entries to the deleted session's) or unchanged (its kept end: the
    deleted session's items). Here the new file is written in the old one's place, so it has
    its inode whatever the file system. A file is told by its first bytes too now."""
    path = transcript(tmp_path)
    worker = FileStore(tmp_path)
    other = FileStore(tmp_path)
    other.append("s1", items(*(f"old {k}" for k in range(12))))
    if read == "whole":
        worker.branch("s1")
    else:
        worker.branch_tail("s1", 2, kinds=KINDS)
    old_size = path.stat().st_size
    made = FileStore(tmp_path / "elsewhere")
    names = [f"new {k}" for k in range(12 if size == "the same size" else 20)]
    made.append("s1", items(*names))
    new = transcript(tmp_path / "elsewhere").read_bytes()
    if size == "the same size":
        new = new[: old_size - 1].rsplit(b"\n", 1)[0] + b"\n"
        new += b" " * (old_size - len(new) - 1) + b"\n"  # a blank line: the whole read skips it
        assert len(new) == old_size
    inode = path.stat().st_ino
    with path.open("r+b") as f:  # the same inode, as a deleted file's number given again
        f.truncate(0)
        f.write(new)
    assert path.stat().st_ino == inode
    fresh = FileStore(tmp_path)
    assert worker.branch_tail("s1", 20, kinds=KINDS) == expected(fresh, "s1", 20)
    assert worker.branch("s1") == fresh.branch("s1")
    assert all(e.data["item"]["n"].startswith("new") for e in worker.branch("s1"))
