"""CrossLoopLock: one async lock for tasks of several event loops on several threads."""

from __future__ import annotations

import asyncio
import threading
import time

import anyio

from ctxengine.collect.wake import CrossLoopLock

#: Seconds a thread may take to finish before the test calls it hung.
BOUND = 10.0


def test_a_release_on_one_thread_wakes_the_waiter_of_another_loop() -> None:
    """The holder's thread hands the lock to a task whose loop sleeps in ``select()`` with
    nothing else to do: the wake-up must reach that loop (an ``anyio.Lock`` leaves it queued
    on the sleeping loop, and the waiter hangs)."""
    lock = CrossLoopLock()
    held, release = threading.Event(), threading.Event()
    order: list[str] = []

    async def hold() -> None:
        async with lock:
            order.append("first")
            held.set()
            while not release.is_set():
                await asyncio.sleep(0.005)

    async def wait(name: str) -> None:
        async with lock:
            order.append(name)

    first = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    first.start()
    assert held.wait(BOUND)
    waiters = [
        threading.Thread(target=asyncio.run, args=(wait(f"waiter {i}"),), daemon=True)
        for i in range(3)
    ]
    for t in waiters:
        t.start()
    time.sleep(0.2)  # the waiters' loops are now idle, waiting for the lock
    release.set()
    for t in [first, *waiters]:
        t.join(BOUND)
    assert not any(t.is_alive() for t in [first, *waiters]), "a waiter was never woken"
    assert order[0] == "first" and sorted(order[1:]) == ["waiter 0", "waiter 1", "waiter 2"]
    assert not lock.locked()


def test_threads_taking_the_lock_in_turn_never_overlap_nor_hang() -> None:
    lock = CrossLoopLock()
    inside: list[int] = []
    overlaps: list[int] = []

    async def take(who: int) -> None:
        for _ in range(200):
            async with lock:
                if inside:
                    overlaps.append(who)
                inside.append(who)
                await asyncio.sleep(0)
                inside.pop()

    threads = [threading.Thread(target=asyncio.run, args=(take(i),), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    assert not any(t.is_alive() for t in threads)
    assert overlaps == []
    assert not lock.locked()


async def _cancelled_as_the_lock_is_handed_over() -> tuple[bool, bool]:
    lock = CrossLoopLock()
    await lock.acquire()
    got = False
    scope = anyio.CancelScope()

    async def waiter() -> None:
        nonlocal got
        with scope:
            await lock.acquire()
            got = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.01)  # queued on the lock
        lock.release()  # handed to the waiter, whose wake-up is queued...
        scope.cancel()  # ...and cancelled before it runs
    return got, lock.locked()


def test_a_waiter_cancelled_as_it_gets_the_lock_passes_it_on() -> None:
    assert asyncio.run(_cancelled_as_the_lock_is_handed_over()) == (False, False)


async def _waiter_gives_up() -> bool:
    lock = CrossLoopLock()
    await lock.acquire()
    with anyio.move_on_after(0.02):
        await lock.acquire()
    lock.release()
    return lock.locked()


def test_a_waiter_that_gives_up_leaves_the_queue() -> None:
    assert asyncio.run(_waiter_gives_up()) is False


def test_a_waiter_whose_loop_closed_is_skipped() -> None:
    """A sync session whose open was interrupted closes its loop with the task still waiting:
    the lock goes to the next waiter instead of to nobody."""
    lock = CrossLoopLock()
    asyncio.run(lock.acquire())  # held by the main thread
    dead = asyncio.new_event_loop()
    task = dead.create_task(lock.acquire())
    dead.run_until_complete(asyncio.sleep(0.01))  # the task waits on the lock
    dead.set_exception_handler(lambda loop, context: None)  # no "destroyed but pending" log
    dead.close()
    lock.release()
    assert not lock.locked()
    asyncio.run(asyncio.wait_for(lock.acquire(), BOUND))
    task.get_coro().close()  # what collecting the dead task does: it must not release the lock
    assert lock.locked()
    lock.release()
    assert not lock.locked()
