"""One worker's part of a long day (tests/compaction/test_long_day.py), run in a process of its
own: it opens session ``day`` of ``FileStore(ROOT)`` (resuming whatever an earlier worker
stored), optionally restores it first (``engine.restore``), and feeds messages ``START`` to
``STOP - 1`` of a shared transcript as ``ctxengine replay`` does, rendering before every model
call. It writes one JSON record per render to ``OUT``: the position, the payload's sha256, its
tokens and the session's summary text.

    python day_child.py ROOT TRANSCRIPT INDEX BUDGET START STOP OUT [restore]
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from ctxengine import Budget, ContextEngine, FileStore
from ctxengine.replay import _feed
from ctxengine.transcript import load_all

MODEL = "gpt-4.1"
PROVIDER = "openai"
SESSION = "day"


def digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


async def play(
    root: str, transcript: str, index: int, budget: int, start: int, stop: int, restore: bool
) -> list[dict[str, Any]]:
    messages = list(load_all(transcript)[index].messages)
    engine = ContextEngine(MODEL, Budget(total=budget), store=FileStore(root))
    out: list[dict[str, Any]] = []
    if restore:
        restored = await engine.restore(SESSION, provider=PROVIDER)
        out.append({"at": -1, "payload": digest(restored.payload), "tokens": restored.tokens})
    async with engine.session(SESSION) as session:
        previous = messages[start - 1].role if start else None
        for at in range(start, stop):
            message = messages[at]
            if message.role == "assistant" and previous != "assistant" and session.messages:
                rendered = await session.render(PROVIDER)
                summary = session.state.summary
                out.append(
                    {
                        "at": at,
                        "payload": digest(rendered.payload),
                        "tokens": rendered.tokens,
                        "summary": None if summary is None else summary.content,
                    }
                )
            await _feed(session, message)
            previous = message.role
    engine.flush()
    return out


def main(argv: list[str]) -> None:
    root, transcript, index, budget, start, stop, dest, *rest = argv
    records = anyio.run(
        play, root, transcript, int(index), int(budget), int(start), int(stop), rest == ["restore"]
    )
    Path(dest).write_text(json.dumps(records), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
