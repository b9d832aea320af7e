"""Sessions written to a real store through the public API, for the store commands' tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from ctxengine import ContextEngine, Store
from ctxengine.inject.turn import RenderedContext
from ctxengine.transcript import ToolCall

MODEL = "gpt-4.1"
BUDGET = 2_400
#: Turns after which the session compacts (so the summary appears, then changes: drift).
COMPACT_AT = (5, 9)


@dataclass
class Made:
    """What the writer saw: one entry per render, in order."""

    session_id: str
    renders: list[RenderedContext] = field(default_factory=list)

    @property
    def last(self) -> RenderedContext:
        return self.renders[-1]


async def _write(store: Store, session_id: str, turns: int, render: bool) -> Made:
    engine = ContextEngine(MODEL, BUDGET, store=store)
    made = Made(session_id)
    async with engine.session(session_id) as s:
        for i in range(turns):
            call = f"toolu_01{i:02d}ReadTheModuleSourceFile"  # long ids, alike but for the middle
            await s.user_message(f"step {i}: please read src/mod{i}.py and fix bug {1000 + i}")
            await s.assistant_message("reading", [ToolCall(call, "read", {"path": f"mod{i}.py"})])
            await s.tool_result(call, f"def f{i}(x):\n    return x + {i}\n" * 40, name="read")
            await s.assistant_message(f"fixed bug {1000 + i} in src/mod{i}.py " * 3)
            if i in COMPACT_AT:
                assert (await s.compact()).ok
            if render:
                made.renders.append(await s.render())
                # the writer keeps only the newest of snapshots that wait: wait for each one
                assert await anyio.to_thread.run_sync(engine.flush)
        await s.save()
    engine.close()
    return made


def write_session(store: Store, session_id: str, *, turns: int = 12, render: bool = True) -> Made:
    """Play ``turns`` agent turns (user, tool call, tool result, answer) into ``store`` at a
    tight budget, rendering after each (unless ``render`` is False) and compacting twice;
    returns every render. Each render's snapshot is written before the next render."""
    return anyio.run(_write, store, session_id, turns, render)
