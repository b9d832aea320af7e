"""The `Store` contract, run against InMemoryStore, FileStore and a real Redis server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ctxengine.errors import SessionIdError, StoreConflictError, StoreError
from ctxengine.store import (
    ConditionalStore,
    InMemoryStore,
    NewEntry,
    Store,
    compare_and_append,
)
from deep_values import nested_dict, recursion_limit

Make = Callable[[], Store]


def msgs(*texts: str) -> list[NewEntry]:
    return [NewEntry("message", {"text": t}) for t in texts]


def texts(entries) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.data["text"] for e in entries]


def test_append_chains_entries_and_moves_the_leaf(make_store: Make) -> None:
    store = make_store()
    first = store.append("s1", msgs("a", "b"))
    second = store.append("s1", msgs("c"))
    assert first[0].parent_id is None
    assert first[1].parent_id == first[0].id
    assert second[0].parent_id == first[1].id
    assert store.leaf("s1") == second[0].id
    assert texts(store.branch("s1")) == ["a", "b", "c"]
    assert store.append("s1", []) == []
    assert store.leaf("s1") == second[0].id


def test_a_rewrite_is_a_branch_and_nothing_is_edited(make_store: Make) -> None:
    store = make_store()
    a, _b, c = store.append("s1", msgs("a", "b-long-tool-output", "c"))
    rewritten = store.append("s1", msgs("b-truncated", "c"), parent_id=a.id)
    assert rewritten[0].parent_id == a.id
    assert texts(store.branch("s1")) == ["a", "b-truncated", "c"]
    assert texts(store.entries("s1")) == ["a", "b-long-tool-output", "c", "b-truncated", "c"]
    assert texts(store.branch("s1", c.id)) == ["a", "b-long-tool-output", "c"]  # old branch
    root = store.append("s1", msgs("fresh start"), parent_id=None)
    assert root[0].parent_id is None
    assert texts(store.branch("s1")) == ["fresh start"]


def test_a_second_store_on_the_same_place_sees_everything(make_store: Make) -> None:
    writer = make_store()
    a = writer.append("s1", msgs("a", "b"))
    (b2,) = writer.append("s1", msgs("b2"), parent_id=a[0].id)
    info = writer.write_snapshot("s1", {"state": {"turn": 3}}, meta={"turn": 3})
    reader = make_store()
    assert texts(reader.branch("s1")) == ["a", "b2"]
    assert [e.id for e in reader.entries("s1")] == [e.id for e in writer.entries("s1")]
    snap = reader.load_snapshot("s1")
    assert snap is not None and snap.info == info and snap.content == {"state": {"turn": 3}}
    more = reader.append("s1", msgs("c"))  # the reader continues where the writer stopped
    assert more[0].parent_id == b2.id
    assert writer.leaf("s1") == more[0].id
    assert texts(writer.branch("s1")) == ["a", "b2", "c"]


def test_bad_appends_are_refused_whole(make_store: Make) -> None:
    store = make_store()
    (a,) = store.append("s1", [NewEntry("message", {"text": "a"}, id="m-1")])
    with pytest.raises(StoreError, match="'nope'"):
        store.append("s1", msgs("x"), parent_id="nope")
    with pytest.raises(StoreError, match=r"m-1.*already exists"):
        store.append("s1", [NewEntry("message", {"text": "y"}), NewEntry("m", {}, id="m-1")])
    with pytest.raises(StoreError, match="JSON"):
        store.append("s1", [NewEntry("message", {"text": object()})])
    with pytest.raises(StoreError, match="entry id"):
        store.append("s1", [NewEntry("message", {}, id="has space")])
    assert [e.id for e in store.entries("s1")] == [a.id]


def test_appends_and_snapshots_of_the_wrong_shape_are_refused_by_name(make_store: Make) -> None:
    store = make_store()
    (a,) = store.append("s1", msgs("a"))
    bad_appends: list[tuple[Any, str]] = [
        ([NewEntry("message", None)], r"entry 0 \(kind 'message'\): data is NoneType"),  # type: ignore[arg-type]
        ([NewEntry("message", [1, 2])], "data is list; expected a mapping"),  # type: ignore[arg-type]
        (NewEntry("message", {}), "got NewEntry \\(wrap one entry in a list\\)"),
        (["message"], "item 0 is str"),
        (7, "got int"),
        ([NewEntry("message", {"text": "bad \ud800 text"})], r"lone surrogate '\\ud800'"),
    ]
    for entries, why in bad_appends:
        with pytest.raises(StoreError, match=why):
            store.append("s1", entries)
    assert [e.id for e in store.entries("s1")] == [a.id]  # nothing half-written
    for content, why in [([1, 2], "content is list"), ({"t": "\udfff"}, "lone surrogate")]:
        with pytest.raises(StoreError, match=why):
            store.write_snapshot("s1", content)  # type: ignore[arg-type]
    assert store.snapshots("s1") == []


def test_an_id_already_taken_is_refused_and_a_wrong_leaf_comes_first(make_store: Make) -> None:
    # RedisStore took a taken id for its own earlier attempt landing (a lost reply): it
    # returned the old entry, wrote nothing, and append_if skipped its leaf check
    store = make_store()
    (first,) = store.append("s1", [NewEntry("message", {"text": "first"}, id="fixed1")])
    with pytest.raises(StoreError, match="entry id 'fixed1' already exists"):
        store.append("s1", [NewEntry("message", {"text": "second"}, id="fixed1")])
    (later,) = store.append("s1", msgs("later"))
    if isinstance(store, ConditionalStore):
        with pytest.raises(StoreConflictError):
            store.append_if(
                "s1", [NewEntry("message", {"text": "x"}, id="fixed1")], expected_leaf="stale"
            )
    assert [e.id for e in store.entries("s1")] == [first.id, later.id]
    assert texts(store.entries("s1")) == ["first", "later"]
    with recursion_limit(), pytest.raises(StoreError, match="not JSON-serializable"):
        store.append("s1", [NewEntry("message", nested_dict())])


def test_stored_data_is_a_private_copy(make_store: Make) -> None:
    store = make_store()
    data = {"text": "a", "nested": {"k": [1, 2]}}
    store.append("s1", [NewEntry("message", data)])
    content = {"state": {"x": [1]}}
    store.write_snapshot("s1", content)
    data["nested"]["k"].append(3)  # type: ignore[index]
    content["state"]["x"].append(2)
    assert store.entries("s1")[0].data == {"text": "a", "nested": {"k": [1, 2]}}
    snap = store.load_snapshot("s1")
    assert snap is not None and snap.content == {"state": {"x": [1]}}


def test_snapshots_list_load_latest_and_by_id(make_store: Make) -> None:
    store = make_store()
    assert store.load_snapshot("s1") is None
    assert store.snapshots("s1") == []
    (e,) = store.append("s1", msgs("a"))
    one = store.write_snapshot("s1", {"turn": 1}, meta={"turn": 1, "tokens": 10})
    two = store.write_snapshot("s1", {"turn": 2}, meta={"turn": 2}, leaf_id=None)
    three = store.write_snapshot("s1", {"turn": 1}, meta={"turn": 3})  # same content as one
    assert [i.id for i in store.snapshots("s1")] == [one.id, two.id, three.id]
    assert one.leaf_id == e.id and two.leaf_id is None
    assert one.hash == three.hash != two.hash
    assert store.snapshots("s1")[0].meta == {"turn": 1, "tokens": 10}
    latest = store.load_snapshot("s1")
    assert latest is not None and latest.info.id == three.id
    by_id = store.load_snapshot("s1", two.id)
    assert by_id is not None and by_id.content == {"turn": 2}
    with pytest.raises(StoreError, match="no snapshot 'missing'"):
        store.load_snapshot("s1", "missing")
    with pytest.raises(StoreError, match="JSON"):
        store.write_snapshot("s1", {"bad": float("nan")})


def test_sessions_exists_delete(make_store: Make) -> None:
    store = make_store()
    assert not store.exists("a")
    store.append("a", msgs("x"))
    store.write_snapshot("b", {"only": "a snapshot"})
    assert store.sessions() == ["a", "b"]
    assert store.exists("a") and store.exists("b")
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert not store.exists("a") and store.entries("a") == [] and store.leaf("a") is None
    assert store.sessions() == ["b"]
    store.append("a", msgs("again"))  # a deleted session can start over
    assert texts(store.branch("a")) == ["again"]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "../escape",
        "a/b",
        "a\\b",
        "..",
        ".hidden",
        "x" * 129,
        "a b",
        "{tag}",
        "a:b",
        "nul\x00",
        "ünï",
    ],
)
def test_session_ids_are_validated(make_store: Make, bad: str) -> None:
    store = make_store()
    with pytest.raises(SessionIdError) as info:
        store.append(bad, msgs("x"))
    assert isinstance(info.value, ValueError) and isinstance(info.value, StoreError)
    for call in (store.entries, store.exists, store.delete, store.snapshots):
        with pytest.raises(SessionIdError):
            call(bad)


def test_threads_appending_to_one_session_lose_nothing(make_store: Make) -> None:
    store = make_store()
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(40):
                store.append("s1", msgs(f"{t}:{i}"))
        except BaseException as exc:  # pragma: no cover - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    entries = store.entries("s1")
    assert sorted(texts(entries)) == sorted(f"{t}:{i}" for t in range(6) for i in range(40))
    assert [e.parent_id for e in entries[1:]] == [e.id for e in entries[:-1]]  # one chain
    for t in range(6):
        mine = [x for x in texts(entries) if x.startswith(f"{t}:")]
        assert mine == [f"{t}:{i}" for i in range(40)]


# -- compare-and-append ---------------------------------------------------------------------


def test_append_if_appends_only_on_the_expected_leaf(make_store: Make) -> None:
    store = make_store()
    assert isinstance(store, ConditionalStore)
    (a,) = store.append_if("s1", msgs("a"), expected_leaf=None)  # type: ignore[attr-defined]
    (b,) = store.append_if("s1", msgs("b"), expected_leaf=a.id)  # type: ignore[attr-defined]
    assert (a.parent_id, b.parent_id) == (None, a.id)
    for stale in (a.id, None, "no-such-entry"):
        with pytest.raises(StoreConflictError) as info:
            store.append_if("s1", msgs("stale"), expected_leaf=stale)  # type: ignore[attr-defined]
        err = info.value
        assert (err.session_id, err.expected, err.actual) == ("s1", stale, b.id)
        assert isinstance(err, StoreError) and repr(b.id) in str(err)
    # with the check, an earlier entry still starts a branch
    (c,) = store.append_if(  # type: ignore[attr-defined]
        "s1", msgs("c"), expected_leaf=b.id, parent_id=a.id
    )
    assert texts(store.branch("s1")) == ["a", "c"]
    assert texts(store.entries("s1")) == ["a", "b", "c"]  # nothing of the refused appends
    assert make_store().leaf("s1") == c.id
    assert store.append_if("s1", [], expected_leaf="anything") == []  # type: ignore[attr-defined]


def test_writers_racing_from_one_leaf_one_wins_the_others_write_nothing(make_store: Make) -> None:
    (root,) = make_store().append("s1", msgs("root"))
    stores = [make_store() for _ in range(8)]  # a FileStore / RedisStore each: flock, WATCH
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def work(t: int) -> None:
        barrier.wait()
        try:
            stores[t].append_if(  # type: ignore[attr-defined]
                "s1", msgs(f"{t}:a", f"{t}:b"), expected_leaf=root.id
            )
            outcomes.append(f"ok {t}")
        except StoreConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(stores))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    won = [o for o in outcomes if o.startswith("ok")]
    assert len(won) == 1 and outcomes.count("conflict") == len(stores) - 1
    t = won[0].split()[1]
    assert texts(make_store().entries("s1")) == ["root", f"{t}:a", f"{t}:b"]


class _OwnStore:
    """A store of one's own written before append_if existed: the Store methods only."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()
        self.problems = self.inner.problems

    def __getattr__(self, name: str) -> Any:
        if name == "append_if":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_compare_and_append_on_a_store_without_append_if_checks_and_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ctxengine.store.base._NOT_ATOMIC", set())
    store: Any = _OwnStore()
    assert isinstance(store, Store) and not isinstance(store, ConditionalStore)
    with caplog.at_level(logging.WARNING, logger="ctxengine.store"):
        (a,) = compare_and_append(store, "s1", msgs("a"), expected_leaf=None)
        (b,) = compare_and_append(store, "s1", msgs("b"), expected_leaf=a.id)
        with pytest.raises(StoreConflictError) as info:
            compare_and_append(store, "s1", msgs("stale"), expected_leaf=a.id)
    assert (info.value.expected, info.value.actual) == (a.id, b.id)
    assert texts(store.branch("s1")) == ["a", "b"]
    said = [r.getMessage() for r in caplog.records if "append_if" in r.getMessage()]
    assert len(said) == 1 and "_OwnStore has no append_if()" in said[0]  # once per store type
    assert "not atomically" in said[0]
