"""The turns of the long-session soak (tests/store/test_soak.py), and its child.

The turns come from the real agent transcripts of ``shared/data/transcripts`` beside the
repository (``CTXENGINE_SHARED``, or ``CTXENGINE_TRANSCRIPTS`` for the folder itself; the pi
session, the OpenHands run and the SWE-agent trajectories, cut at each user message; a
system prompt only from the first of them) interleaved with synthetic turns (a file read, a
failing command, a request naming a file and a case number), so a few hundred turns at a tight
budget compact many times.

Run as a script, it opens session ``SESSION`` of the store ``STORE`` (a folder, or a
``redis://...?prefix=P`` URL) through the public API, feeds the turns after those the store
already holds (one ``ingest`` per turn, so a turn is stored whole or not at all), renders each
for the next provider of :data:`PROVIDERS`, calls ``checkpoint()`` and only then prints
``ACK <turn> <payload tokens>`` in one ``write``: every line the parent reads is a durable turn.
``DIE=<stage>:<turn>`` makes it SIGKILL itself inside that stage of that turn (``extend``: the
turn's messages are appended, not acknowledged; ``render``: inside assembly; ``compaction``:
inside the summarizer call; ``snapshot``: the content written, before it is indexed).

    python soak_child.py STORE SESSION LAST
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxengine import Budget, ContextEngine, FileStore, RedisStore, Store
from ctxengine.store.codec import message_to_json
from ctxengine.transcript import Message, ToolCall, load

SHARED = Path(os.environ.get("CTXENGINE_SHARED", Path(__file__).resolve().parents[3] / "shared"))
DATA = Path(os.environ.get("CTXENGINE_TRANSCRIPTS", SHARED / "data" / "transcripts"))
REAL = (
    "pi-openclaw-session/large-session.jsonl",
    "openhands/output.jsonl",
    "swe-agent/trajectories/demonstrations/replay__marshmallow-code__marshmallow-1867__"
    "function_calling__install-1/marshmallow-code__marshmallow-1867.traj",
)
MODEL = "gpt-4"  # cl100k loads fast: each child pays it once
BUDGET = 6000
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")


def open_store(spec: str) -> Store:
    """A folder is a FileStore, ``redis://host/db?prefix=P`` a RedisStore."""
    if spec.startswith("redis://"):
        url, _, prefix = spec.partition("?prefix=")
        return RedisStore(url, prefix=prefix)
    return FileStore(spec)


def engine(spec: str) -> ContextEngine:
    return ContextEngine(MODEL, Budget(total=BUDGET), store=open_store(spec))


def _synthetic(k: int) -> list[Message]:
    call = ToolCall(f"soak_{k}", "bash", {"cmd": f"pytest tests/test_case_{k}.py"})
    read = ToolCall(f"soak_r{k}", "read_file", {"path": f"src/soak/module_{k}.py"})
    body = "".join(f"def f_{k}_{i}(x):\n    return x * {i}\n" for i in range(40 + k % 60))
    return [
        Message.user(f"fix case {k} in src/soak/module_{k}.py"),
        Message.assistant(f"reading module {k}", [read]),
        Message.tool(read.id, body, name="read_file"),
        Message.assistant("running the tests", [call]),
        Message.tool(
            call.id,
            f"FAILED tests/test_case_{k}.py::test_{k} - AssertionError",
            name="bash",
            is_error=True,
        ),
    ]


@functools.cache
def turns() -> tuple[tuple[Message, ...], ...]:
    """Every turn of the soak, in order (deterministic)."""
    real: list[list[Message]] = []
    for i, name in enumerate(REAL):
        messages = [m for m in load(DATA / name).messages if i == 0 or m.role != "system"]
        for m in messages:
            if m.role == "user" and real and real[-1]:
                real.append([])
            if not real:
                real.append([])
            real[-1].append(m)
    out: list[tuple[Message, ...]] = []
    for k, turn in enumerate(real):
        out.append(tuple(turn))
        if k % 3 == 2:
            out.append(tuple(_synthetic(k)))
    return tuple(out)


def stored(turn_count: int) -> list[Any]:
    """The messages of turns ``0..turn_count-1`` as a store holds them."""
    return [message_to_json(m) for t in turns()[:turn_count] for m in t]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(stage: str, at: int, now: Callable[[], int]) -> None:
    """Patch the stage ``stage`` to SIGKILL the process during turn ``at``."""
    if stage == "extend":
        from ctxengine.store import session_io

        original = session_io.record_messages

        def record(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            if now() == at:
                _die()
            return out

        import ctxengine.engine as eng_mod

        eng_mod.record_messages = record  # type: ignore[assignment]
    elif stage == "render":
        import ctxengine.engine as eng_mod

        assemble = eng_mod.assemble

        async def dying(*args: Any, **kwargs: Any) -> Any:
            if now() == at:
                _die()
            return await assemble(*args, **kwargs)

        eng_mod.assemble = dying  # type: ignore[assignment]
    elif stage == "compaction":
        from ctxengine.assemble import compact

        summarize = compact.compact_messages

        async def dying_c(*args: Any, **kwargs: Any) -> Any:
            if now() >= at:
                _die()
            return await summarize(*args, **kwargs)

        compact.compact_messages = dying_c  # type: ignore[assignment]
    elif stage == "snapshot":
        from ctxengine.store import file as file_mod
        from ctxengine.store import redis_store

        replace = file_mod.os.replace

        def dying_replace(src: Any, dst: Any) -> None:
            if now() == at:
                _die()
            replace(src, dst)

        file_mod.os.replace = dying_replace  # type: ignore[assignment]
        store_cls: Any = redis_store.RedisStore
        write = store_cls.write_snapshot

        def dying_write(self: Any, *args: Any, **kwargs: Any) -> Any:
            if now() == at:
                _die()
            return write(self, *args, **kwargs)

        store_cls.write_snapshot = dying_write
    else:
        raise SystemExit(f"DIE stage is {stage!r}; expected extend, render, compaction, snapshot")


async def _main(spec: str, session_id: str, last: int) -> None:
    all_turns = turns()
    done = [0]
    die = os.environ.get("DIE")
    if die:
        stage, _, at = die.partition(":")
        _arm(stage, int(at), lambda: done[0])
    eng = engine(spec)
    async with eng.session(session_id) as session:
        held = len(session.messages)
        while done[0] < len(all_turns) and held >= sum(len(t) for t in all_turns[: done[0] + 1]):
            done[0] += 1
        if [message_to_json(m) for m in session.messages] != stored(done[0]):
            raise SystemExit(f"resumed {held} messages; expected the turns 0..{done[0] - 1}")
        while done[0] < min(last, len(all_turns)):
            turn = done[0]
            await session.ingest(all_turns[turn])
            out = await session.render(PROVIDERS[turn % len(PROVIDERS)])
            await session.checkpoint()
            os.write(1, f"ACK {turn} {out.tokens}\n".encode())
            done[0] += 1
    eng.close()
    os.write(1, b"DONE\n")


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
