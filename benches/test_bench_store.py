"""Persistence cost per turn, against render alone, in the same run.

One turn on the shared real session (pi/OpenClaw, 914 messages, 32k budget): two messages
appended, then a render. The peers:

- render alone (the baseline);
- render + FileStore: the two messages appended (fsynced) and the snapshot written inline
  (content file fsynced and renamed, index line fsynced): the worst case, nothing overlapped;
- render + FileStore through the SnapshotWriter, as the engine will wire it: the render waits
  only for the appends, the snapshot is written in the background (flushed outside the timing
  every round, so work never piles up).

Run ``pytest benches/test_bench_store.py --benchmark-enable --benchmark-only``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.store import FileStore
from ctxengine.store.session_io import record_messages, snapshot_render
from ctxengine.store.snapshot import build_snapshot, snapshot_meta
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


def _session(runner: Runner, transcript):  # type: ignore[no-untyped-def]
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
    _, session = runner.call(_open, engine, transcript)
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
