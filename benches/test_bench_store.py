"""Persistence cost per turn, against render alone, in the same run.

One turn on the shared real session (pi/OpenClaw, 914 messages, 32k budget): two messages
appended, then a render. The peers:

- render alone (the baseline);
- render + FileStore: the two messages appended (fsynced) and the snapshot written inline
  (content file fsynced and renamed, index line fsynced): the worst case, nothing overlapped;
- render + FileStore through the SnapshotWriter, as the engine will wire it: the render waits
  only for the appends, the snapshot is written in the background (flushed outside the timing
  every round, so work never piles up).

A second group measures what the writer thread spends CPU on per snapshot: the body built from
the render, encoded and hashed, as schema 1 did it (a dict per grain, the "before") and as
schema 2 does (columns straight from the report's columns, encoded once), in the same run.

Run ``pytest benches/test_bench_store.py --benchmark-enable --benchmark-only``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.store import FileStore
from ctxengine.store.base import canonical_json, content_hash
from ctxengine.store.session_io import record_messages, snapshot_render
from ctxengine.store.snapshot import build_snapshot, grain_rows, payload_hash, snapshot_meta
from ctxengine.store.writer import SnapshotWriter
from ctxengine.transcript import Message, load
from test_bench_engine import BUDGET, SESSION, Runner, _open

GROUP = "turn-render-vs-render-and-persist-1k-messages-32k"


@pytest.fixture(scope="module")
def transcript():  # type: ignore[no-untyped-def]
    return load(SESSION)


@pytest.fixture
def runner():  # type: ignore[no-untyped-def]
    r = Runner()
    yield r
    r.close()


_OPEN: list[Any] = []


def _session(runner: Runner, transcript):  # type: ignore[no-untyped-def]
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
    cm, session = runner.call(_open, engine, transcript)
    _OPEN.append(cm)  # held: a dropped context manager closes its session when collected
    runner.call(session.render)
    return session


def _turn_messages(i: int) -> list[Message]:
    return [Message.assistant(f"ok {i}"), Message.user(f"one more question {i}")]


@pytest.mark.benchmark(group=GROUP)
def test_render_alone(benchmark, runner, transcript) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="render", baseline=True)
    session = _session(runner, transcript)
    counter = itertools.count()

    async def turn():  # type: ignore[no-untyped-def]
        session.extend(_turn_messages(next(counter)))
        return await session.render()

    out = benchmark(runner.call, turn)
    assert out.tokens <= BUDGET


@pytest.mark.benchmark(group=GROUP)
def test_render_and_file_store_inline(benchmark, runner, transcript, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="render + FileStore (snapshot inline)")
    session = _session(runner, transcript)
    store = FileStore(tmp_path)
    record_messages(store, "bench", session.messages)
    counter = itertools.count()

    async def turn():  # type: ignore[no-untyped-def]
        i = next(counter)
        new = _turn_messages(i)
        session.extend(new)
        entries = record_messages(store, "bench", new)
        out = await session.render()
        content = build_snapshot(out, session_id="bench", turn=i, leaf_id=entries[-1].id)
        store.write_snapshot("bench", content, meta=snapshot_meta(content), leaf_id=entries[-1].id)
        return out

    out = benchmark(runner.call, turn)
    assert out.tokens <= BUDGET
    assert len(store.snapshots("bench")) >= 1


@pytest.mark.benchmark(group=GROUP)
def test_render_and_file_store_background(benchmark, runner, transcript, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="render + FileStore (snapshot in background)")
    session = _session(runner, transcript)
    store = FileStore(tmp_path)
    record_messages(store, "bench", session.messages)
    writer = SnapshotWriter(store)
    counter = itertools.count()

    async def turn():  # type: ignore[no-untyped-def]
        i = next(counter)
        new = _turn_messages(i)
        session.extend(new)
        entries = record_messages(store, "bench", new)
        out = await session.render()
        snapshot_render(writer, "bench", None, out, turn=i, leaf_id=entries[-1].id)
        return out

    def settle() -> None:  # the previous turn's snapshot is written before the next round
        writer.flush()

    out = benchmark.pedantic(runner.call, args=(turn,), setup=settle, rounds=30)
    writer.close()
    assert out.tokens <= BUDGET and not writer.errors
    assert len(store.snapshots("bench")) >= 1


# -- the snapshot body: built, encoded and hashed (what the writer thread spends CPU on) -------

SNAP_GROUP = "snapshot-build-encode-hash-1k-messages-32k"


def _snapshot_rows_schema1(rendered, state):  # type: ignore[no-untyped-def]
    """The snapshot as schema 1 built it (one dict per grain from ``report.grains``): the
    "before" of the columns, kept here to measure both in the same run."""
    report = rendered.report
    tree = {g.node_id: g for g in rendered.tree}
    grains = []
    for d in report.grains:
        g = tree.get(d.node_id)
        grains.append(
            {
                "node_id": d.node_id,
                "origin": d.origin,
                "window": d.window,
                "priority": g.priority if g is not None else None,
                "lifespan": g.lifespan if g is not None else None,
                "protected": g.protected if g is not None else None,
                "decision": d.decision,
                "status": d.status,
                "stage": d.stage,
                "reason": d.reason,
                "tokens_before": d.tokens_before,
                "tokens_after": d.tokens_after,
            }
        )
    windows = {d.node_id: d.window for d in report.grains}
    memory = {
        n: g.text
        for n, g in tree.items()
        if windows.get(n) == "core_memory" or n.startswith("mem.")
    }
    content = {
        "schema": "ctxengine.snapshot/1",
        "payload_hash": payload_hash(rendered.payload),
        "state": state,
        "core_memory": memory,
        "grains": grains,
        "windows": list(report.windows),
        "compactions": list(report.compactions),
        "faults": list(report.faults),
    }
    text = canonical_json(content)
    return content_hash(text), text


def _snapshot_columns(rendered, state):  # type: ignore[no-untyped-def]
    content = build_snapshot(rendered, session_id="bench", turn=1, state=state, leaf_id=None)
    data = canonical_json(content).encode("utf-8")
    return hashlib.sha256(data).hexdigest(), data


@pytest.fixture(scope="module")
def rendered(transcript):  # type: ignore[no-untyped-def]
    runner = Runner()
    session = _session(runner, transcript)
    session.extend(_turn_messages(0))
    out = runner.call(session.render)
    state = session.state.to_json(messages=False)
    runner.close()
    return out, state


def _bench_snapshot(benchmark, rendered, build):  # type: ignore[no-untyped-def]
    out, state = rendered

    def fresh():  # type: ignore[no-untyped-def]
        out.report._grains = None  # each round reads the render's decisions anew
        return (out, state), {}

    return benchmark.pedantic(build, setup=fresh, rounds=200)


@pytest.mark.benchmark(group=SNAP_GROUP)
def test_snapshot_rows_schema1(benchmark, rendered) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="schema 1: a dict per grain (before)", baseline=True)
    digest, text = _bench_snapshot(benchmark, rendered, _snapshot_rows_schema1)
    assert len(digest) == 64 and '"grains":[{' in text


@pytest.mark.benchmark(group=SNAP_GROUP)
def test_snapshot_columns_schema2(benchmark, rendered) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="schema 2: columns from the report's columns")
    digest, data = _bench_snapshot(benchmark, rendered, _snapshot_columns)
    out, _ = rendered
    content = json.loads(data)
    assert len(digest) == 64 and grain_rows(content)[0]["node_id"] == out.report.grains[0].node_id
    assert len(grain_rows(content)) == len(out.report.grains)
