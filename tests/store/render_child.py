"""The turns of the render-level crash test (tests/store/test_crash_render.py), and its child.

Run as a script, it opens session ``s`` of ``FileStore(ROOT)`` through the public API, checks
that it resumed at turn ``FIRST``, and plays turns ``FIRST..LAST-1``. A turn: a user message, an
assistant message with a tool call, the tool's result (sizes vary; every ninth is far larger
than the window guard lets through, so the ladder trims), a render at a fixed budget, then
``checkpoint()`` (messages saved, snapshot written). Only after that does it print
``ACK <turn> <sha256 of the payload> <snapshot id>`` in one ``write``, so every line the parent
reads stands for a turn that is durable.

    python render_child.py ROOT FIRST LAST
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from typing import Any

from ctxengine import Budget, ContextEngine, FileStore
from ctxengine.inject.turn import RenderedContext
from ctxengine.store.codec import message_to_json
from ctxengine.transcript import Message, ToolCall

#: cl100k loads in a fraction of o200k's time: each child pays it once.
MODEL = "gpt-4"
BUDGET = 8000
SESSION = "s"


def engine(
    root: str | os.PathLike[str], *, fsync: bool = True, keep_snapshots: int | None = 50
) -> ContextEngine:
    """The engine every side of the test uses: same model, same budget (the children prune
    snapshots as a store does by default; the reference run keeps every one)."""
    store = FileStore(root, fsync=fsync, keep_snapshots=keep_snapshots)
    return ContextEngine(MODEL, Budget(total=BUDGET), store=store)


def digest(payload: dict[str, Any]) -> str:
    """sha256 of the payload's JSON with sorted keys."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _seed(turn: int) -> bytes:
    return hashlib.sha256(f"turn-{turn}".encode()).digest()


def tool_output(turn: int) -> str:
    """Deterministic tool output: 80 B to ~2.5 kB, every ninth turn ~25 kB (which the window
    guard cuts to head + tail)."""
    h = _seed(turn)
    lines = 600 if turn % 9 == 4 else 2 + h[0] % 60
    path = f"src/mod_{turn % 37}.py"
    return "".join(f"{path}:{i + 1}: value_{h[i % 32]} = {turn * 31 + i}\n" for i in range(lines))


def turn_messages(turn: int) -> list[Message]:
    """The three messages of ``turn``, as the child adds them."""
    call = ToolCall(f"call_{turn}", "read_file", {"path": f"src/mod_{turn % 37}.py", "n": turn})
    return [
        Message.user(f"turn {turn}: read src/mod_{turn % 37}.py and check case {turn}"),
        Message.assistant(f"reading the file for turn {turn}", [call]),
        Message.tool(call.id, tool_output(turn), name="read_file"),
    ]


def stored_messages(turns: int) -> list[dict[str, Any]]:
    """The messages of turns ``0..turns-1`` as the store holds them (``message_to_json``)."""
    return [message_to_json(m) for t in range(turns) for m in turn_messages(t)]


async def play(session: Any, turn: int) -> RenderedContext:
    """One turn through the public API: three messages (each saved on return), a render."""
    user, assistant, result = turn_messages(turn)
    await session.user_message(user.text)
    await session.assistant_message(assistant.text, assistant.tool_calls)
    (r,) = result.tool_results
    await session.tool_result(r.call_id, r.text, name=r.name)
    out: RenderedContext = await session.render()
    return out


async def _main(root: str, first: int, last: int) -> None:
    eng = engine(root)
    async with eng.session(SESSION) as session:
        if session.turn != first:
            raise SystemExit(f"resumed at turn {session.turn}; expected {first}")
        for turn in range(first, last):
            out = await play(session, turn)
            info = await session.checkpoint()
            assert info is not None
            os.write(1, f"ACK {turn} {digest(out.payload)} {info.id}\n".encode())
    eng.close()
    os.write(1, b"DONE\n")


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
