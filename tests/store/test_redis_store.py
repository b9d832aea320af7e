"""RedisStore against a real server: 8 processes appending to one session, key layout."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
import redis

from ctxengine.errors import ConfigTypeError, CtxEngineError, StoreError
from ctxengine.store import NewEntry, RedisStore
from ctxengine.store import redis_store as R

WORKER = """
import sys
from ctxengine.store import NewEntry, RedisStore
url, prefix, worker, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = RedisStore(url, prefix=prefix)
for i in range(n):
    store.append("shared", [NewEntry("message", {"w": worker, "i": i})])
    print(worker, i, flush=True)
"""


def test_eight_processes_append_every_entry_exactly_once_in_one_order(
    redis_url: str, child_env: dict[str, str]
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    n = 60
    env = child_env
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, redis_url, prefix, str(w), str(n)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(8)
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8
    assert all(len(out.splitlines()) == n for out in outs)  # every append acknowledged
    readers = [RedisStore(redis_url, prefix=prefix) for _ in range(3)]
    seen = [r.entries("shared") for r in readers]
    ids = [[e.id for e in s] for s in seen]
    assert ids[0] == ids[1] == ids[2]  # the same order for every reader
    entries = seen[0]
    pairs = [(e.data["w"], e.data["i"]) for e in entries]
    assert len(pairs) == 8 * n and len(set(pairs)) == 8 * n  # each exactly once
    assert len(set(ids[0])) == 8 * n
    assert entries[0].parent_id is None
    assert [e.parent_id for e in entries[1:]] == [e.id for e in entries[:-1]]  # one chain
    for w in range(8):
        assert [i for ww, i in pairs if ww == str(w)] == list(range(n))  # each in its order
    assert readers[0].branch("shared") == entries


@pytest.mark.parametrize("bad", [5, None, b"redis://127.0.0.1:6390/0"])
def test_a_url_that_is_not_a_str_is_a_config_error_naming_it(bad: object) -> None:
    with pytest.raises(ConfigTypeError) as info:
        RedisStore(bad)  # type: ignore[arg-type]
    assert isinstance(info.value, CtxEngineError) and isinstance(info.value, TypeError)
    message = str(info.value)
    assert repr(bad) in message and type(bad).__name__ in message
    assert "expected a Redis URL" in message


@pytest.mark.parametrize(
    "url",
    ["redis://:secret@127.0.0.1:6390/0", "redis://:secret@127.0.0.1:6390/0?timeout=5"],
    ids=["no node", "unknown option"],
)
def test_a_cluster_that_cannot_be_opened_is_a_store_error(url: str) -> None:
    """``cluster=True`` with no reachable node (or an option the nodes do not take): redis-py's
    ``RedisClusterException`` is no ``RedisError`` and escaped as itself."""
    with pytest.raises(StoreError, match="cannot open the Redis Cluster at") as info:
        RedisStore(url, cluster=True)
    assert "secret" not in str(info.value)


def test_a_ready_client_needs_no_url(redis_url: str) -> None:
    store = RedisStore(None, client=redis.Redis.from_url(redis_url))  # type: ignore[arg-type]
    assert store.entries(f"s{uuid.uuid4().hex[:8]}") == []


def test_every_key_of_a_session_shares_its_hash_tag(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix)
    store.append("user-42.chat", [NewEntry("message", {"text": "hi"})])
    store.write_snapshot("user-42.chat", {"state": 1})
    keys = sorted(k.decode() for k in redis.Redis.from_url(redis_url).keys(f"{prefix}:*"))
    session_keys = [k for k in keys if k != f"{prefix}:sessions"]
    assert len(session_keys) == 8  # log ids epoch snaps snapid objs obj:<h> retention
    assert all(k.startswith(f"{prefix}:{{user-42.chat}}:") for k in session_keys)
    assert store.delete("user-42.chat")
    assert redis.Redis.from_url(redis_url).keys(f"{prefix}:{{*") == []


def test_a_retried_append_whose_reply_was_lost_is_not_duplicated(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix)
    item = NewEntry("message", {"text": "once"}, id="fixed-id-1")
    first = store.append("s", [item])
    again = store.append("s", [item])  # the same call retried: its id is already there
    assert [e.id for e in again] == [e.id for e in first]
    assert [e.id for e in store.entries("s")] == ["fixed-id-1"]


def test_a_damaged_element_is_stepped_over_and_the_rest_is_read(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix)
    a, b, c = store.append("s", [NewEntry("message", {"text": t}) for t in "abc"])
    redis.Redis.from_url(redis_url).lset(f"{prefix}:{{s}}:log", 1, b'{"id": "\xff')
    reopened = RedisStore(redis_url, prefix=prefix)
    assert [e.id for e in reopened.branch("s")] == [a.id, c.id]
    said = [p.message for p in reopened.problems]
    assert said[0].startswith("element 1 is not an entry"), said
    assert f"entry {c.id!r} follows {b.id!r}, which was on the skipped element 1" in said[1]


@pytest.mark.parametrize("damage", ["unknown", "a later entry"])
def test_an_element_whose_parent_id_is_damaged_goes_on_from_the_one_before(
    redis_url: str, damage: str
) -> None:
    """Valid JSON naming no earlier entry as its parent (a flipped digit; a later entry's id,
    a cycle) made the whole branch unreadable: every session open started empty."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix)
    entries = store.append("s", [NewEntry("message", {"text": t}) for t in "abcde"])
    client = redis.Redis.from_url(redis_url)
    key = f"{prefix}:{{s}}:log"
    k = 0 if damage == "a later entry" else 2
    bad = json.loads(client.lindex(key, k))
    bad["parent_id"] = entries[-1].id if damage == "a later entry" else bad["parent_id"][:-1] + "x"
    client.lset(key, k, json.dumps(bad))
    reopened = RedisStore(redis_url, prefix=prefix)
    assert [e.id for e in reopened.branch("s")] == [e.id for e in entries]
    said = [p.message for p in reopened.problems]
    assert len(said) == 1 and said[0].startswith(
        f"entry {bad['id']!r} names {bad['parent_id']!r} as its parent, which is no entry"
    ), said
    (f,) = reopened.append("s", [NewEntry("message", {"text": "f"})])
    assert f.parent_id == entries[-1].id
    again = RedisStore(redis_url, prefix=prefix).branch("s")
    assert [e.data["text"] for e in again] == ["a", "b", "c", "d", "e", "f"]


def test_a_dead_server_is_a_clear_store_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0")
    from ctxengine.errors import StoreError

    try:
        store.append("s", [NewEntry("message", {})])
    except StoreError as exc:
        assert f"127.0.0.1:{port}" in str(exc) and "{s}" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("no StoreError")


def test_a_password_in_the_url_is_masked_in_errors_and_repr() -> None:
    import socket

    from ctxengine.errors import StoreError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore(f"redis://alice:s3cretpw@127.0.0.1:{port}/0")
    assert "s3cretpw" not in repr(store) and "alice:***@" in repr(store)
    for call in (lambda: store.append("s", [NewEntry("message", {})]), store.sessions):
        with pytest.raises(StoreError) as got:
            call()
        assert "s3cretpw" not in str(got.value) and f"alice:***@127.0.0.1:{port}" in str(got.value)


def test_a_damaged_last_element_is_skipped_and_appends_go_on_after_the_last_intact_entry(
    redis_url: str,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix)
    _, b = store.append("s", [NewEntry("message", {"text": t}) for t in "ab"])
    redis.Redis.from_url(redis_url).rpush(f"{prefix}:{{s}}:log", b'{"id": "torn", "parent')
    reopened = RedisStore(redis_url, prefix=prefix)
    assert reopened.leaf("s") == b.id  # the damaged element is no leaf, as entries() says
    (c,) = reopened.append("s", [NewEntry("message", {"text": "c"})])
    assert c.parent_id == b.id
    info = reopened.write_snapshot("s", {"turn": 1})
    assert info.leaf_id == c.id
    assert [e.data["text"] for e in RedisStore(redis_url, prefix=prefix).branch("s")] == [
        "a",
        "b",
        "c",
    ]
    assert reopened.problems[0].message.startswith("element 2 is not an entry")


class _Recorder:
    """A client that forwards every call and records the index reads: list ranges (also
    inside pipelines, with how many elements each asked for) and hash lookups."""

    def __init__(self, client: redis.Redis) -> None:
        self.client, self.reads = client, []

    def _wrap(self, name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.reads.append((name, args[1:]))
            return fn(*args, **kwargs)

        return call if name in ("lrange", "hget") else fn

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if name != "pipeline":
            return self._wrap(name, attr)
        recorder = self

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = attr(*args, **kwargs)

            class Pipe:
                def __getattr__(self, n: str) -> Any:
                    return recorder._wrap(n, getattr(pipe, n))

            return Pipe()

        return pipeline


def test_a_snapshot_is_found_without_reading_the_whole_index(redis_url: str) -> None:
    """By id: one hash lookup. The latest: the newest page of the index. A session of
    hundreds of snapshots read them all for either (16 ms at 1,000)."""
    store = RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}", keep_snapshots=None)
    infos = [store.write_snapshot("s", {"n": i}) for i in range(3 * R.PAGE + 5)]
    recorder = _Recorder(store._r)
    store._r = recorder  # type: ignore[assignment]
    oldest = store.load_snapshot("s", infos[0].id)
    assert oldest is not None and oldest.content == {"n": 0} and oldest.info == infos[0]
    assert [n for n, _ in recorder.reads] == ["hget"]
    recorder.reads.clear()
    latest = store.load_snapshot("s")
    assert latest is not None and latest.info == infos[-1] and latest.content["n"] == len(infos) - 1
    assert recorder.reads == [("lrange", (len(infos) - R.PAGE, len(infos) - 1))]
    recorder.reads.clear()
    with pytest.raises(StoreError, match="has no snapshot 'missing'"):
        store.load_snapshot("s", "missing")
    # not in the hash: the whole index, as every lookup read it before
    assert recorder.reads == [("hget", ("missing",)), ("lrange", (0, -1))]


def test_the_latest_intact_snapshot_is_found_pages_back(redis_url: str) -> None:
    """Contents gone for the newest snapshots (more than a page of them): each is reported and
    skipped, and the newest one still whole is found on an older page."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix, keep_snapshots=None)
    infos = [store.write_snapshot("s", {"n": i}) for i in range(2 * R.PAGE)]
    raw = redis.Redis.from_url(redis_url)
    lost = infos[5:]
    raw.delete(*[f"{prefix}:{{s}}:obj:{info.hash}" for info in lost])
    latest = store.load_snapshot("s")
    assert latest is not None and latest.info == infos[4] and latest.content == {"n": 4}
    assert len(store.problems) == len(lost)
    assert all("is missing: skipped" in p.message for p in store.problems)


def test_a_session_written_before_the_id_hash_is_still_read_by_id(redis_url: str) -> None:
    """Snapshots whose ids the hash lacks (written by an earlier version) are found in the
    index itself; a damaged hash line is reported and the index read instead."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, prefix=prefix)
    infos = [store.write_snapshot("s", {"n": i}) for i in range(3)]
    raw = redis.Redis.from_url(redis_url)
    raw.delete(f"{prefix}:{{s}}:snapid")
    snap = store.load_snapshot("s", infos[1].id)
    assert snap is not None and snap.info == infos[1] and snap.content == {"n": 1}
    raw.hset(f"{prefix}:{{s}}:snapid", infos[2].id, "{not json")
    snap = store.load_snapshot("s", infos[2].id)
    assert snap is not None and snap.info == infos[2] and snap.content == {"n": 2}
    [problem] = store.problems
    assert problem.where.endswith(":snapid") and repr(infos[2].id) in problem.message


def test_a_password_given_as_a_query_parameter_is_masked_too() -> None:
    from ctxengine.store.base import masked_url

    assert masked_url("redis://h:1/0?password=s3cret&db=1") == "redis://h:1/0?password=***&db=1"
    assert masked_url("redis://u:s3cret@h:1/0?password=x") == "redis://u:***@h:1/0?password=***"
    assert masked_url("redis://h:1/0") == "redis://h:1/0"
