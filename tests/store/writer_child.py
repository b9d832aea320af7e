"""The writers of tests/store/test_writers.py: processes racing on one session id.

Each function runs in its own process (``multiprocessing``, spawn) and meets the other one at
``barrier`` before every step, so both really act at once; what they did goes to ``results``
only once the store acknowledged it (or refused it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ctxengine import Budget, ContextEngine, Session
from ctxengine.errors import StoreConflictError
from ctxengine.store import FileStore, RedisStore, Store
from ctxengine.transcript import Message

SESSION = "shared"
MODEL = "gpt-4"  # cl100k loads fast: each child pays it once


def open_store(kind: str, where: tuple[str, str]) -> Store:
    """``("file", (root, _))`` or ``("redis", (url, prefix))``."""
    if kind == "file":
        return FileStore(where[0])
    return RedisStore(where[0], prefix=where[1])


def save_rounds(
    kind: str, where: tuple[str, str], name: str, rounds: int, barrier: Any, results: Any
) -> None:
    """Each round: open the session as the store holds it, wait for the other writer to have
    opened it too (both hold the same leaf), add two messages and save. Reports
    ``(round, name, "ack", leaf_id, texts of the live session)`` or
    ``(round, name, "conflict", expected, actual)``."""
    asyncio.run(_save_rounds(kind, where, name, rounds, barrier, results))


async def _save_rounds(
    kind: str, where: tuple[str, str], name: str, rounds: int, barrier: Any, results: Any
) -> None:
    engine = ContextEngine(MODEL, Budget(total=8000), store=open_store(kind, where))
    for r in range(rounds):
        barrier.wait()
        session = await engine.load(SESSION) or Session(engine, SESSION)
        barrier.wait()  # both writers hold the same leaf now
        session.extend([Message.user(f"{name} {r} ask"), Message.assistant(f"{name} {r} answer")])
        try:
            await session.save()
        except StoreConflictError as exc:
            results.put((r, name, "conflict", exc.expected, exc.actual))
        else:
            results.put((r, name, "ack", session.leaf_id, [m.text for m in session.messages]))
    engine.close()


def pop_rounds(
    kind: str, where: tuple[str, str], name: str, rounds: int, barrier: Any, results: Any
) -> None:
    """Each round: wait for the other process, then ``pop_item()`` on an Agents session of the
    shared id. Reports ``(name, popped item)`` for every pop that returned one."""
    from ctxengine.integrations.openai_agents import CtxEngineSession

    session = CtxEngineSession(SESSION, open_store(kind, where))

    async def run() -> None:
        for _ in range(rounds):
            barrier.wait()
            item = await session.pop_item()
            if item is not None:
                results.put((name, item))

    asyncio.run(run())


def rebase_rounds(
    kind: str, where: tuple[str, str], name: str, rounds: int, barrier: Any, results: Any
) -> None:
    """Each writer keeps one session open for every round. Each round: wait for the other,
    then :func:`rebase_round`; report what it returned."""
    asyncio.run(_rebase_rounds(kind, where, name, rounds, barrier, results))


async def _rebase_rounds(
    kind: str, where: tuple[str, str], name: str, rounds: int, barrier: Any, results: Any
) -> None:
    engine = ContextEngine(MODEL, Budget(total=8000), store=open_store(kind, where))
    session = Session(engine, SESSION)
    for r in range(rounds):
        barrier.wait()
        results.put(await rebase_round(session, name, r))
        barrier.wait()  # the round is over for both before the next one starts
    engine.close()


async def rebase_round(session: Session, name: str, r: int) -> tuple[Any, ...]:
    """Add two messages to ``session`` and save; a refused save is rebased (again while
    another writer slips in). Returns ``(round, name, "ack" | "rebased", texts the refusal
    carried, the leaf the session held when it saved, its leaf_id now, texts of the live
    session, unsaved count)``."""
    session.extend([Message.user(f"{name} {r} ask"), Message.assistant(f"{name} {r} answer")])
    saw = session.leaf_id
    outcome, refused = "ack", []
    try:
        await session.save()
    except StoreConflictError as exc:
        outcome, refused = "rebased", [m.text for m in exc.unsaved]
        for _ in range(100):  # each retry means the other writer got in: it has two saves
            try:
                await session.rebase()
                break
            except StoreConflictError:
                continue
        else:
            raise AssertionError(f"{name} {r}: rebase refused 100 times")
    texts = [m.text for m in session.messages]
    return (r, name, outcome, refused, saw, session.leaf_id, texts, session.unsaved)
