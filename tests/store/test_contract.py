"""The `Store` contract, run against MemoryStore, FileStore and a real Redis server."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ctxengine.errors import SessionIdError, StoreError
from ctxengine.store import NewEntry, Store

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
