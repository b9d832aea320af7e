"""Writes ``v2/``: a FileStore whose snapshots are schema ``ctxengine.snapshot/2`` with states of
version 2, as the version before schema 3 wrote them (run with that version on the path:
``PYTHONPATH=<old checkout>/python python tests/store/data/make_v2.py tests/store/data/v2``).

Two sessions: ``chat`` (compacted: a summary, a carried ``mem.notes`` grain, tool results) and
``limited`` (``max_turns=3``: items dropped by the turn limit). The store keeps the newest two
snapshots of each.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

from ctxengine import Budget, ContextEngine, ContextGrain, FileStore
from ctxengine.assemble.guard import PruneSettings
from ctxengine.transcript import ToolCall


async def _chat(store: FileStore) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=1500), store=store)
    async with engine.session("chat") as s:
        s.add(ContextGrain("mem.notes", "app", "Project notes: keep short.", lifespan="session"))
        for i in range(24):
            await s.user_message(f"question {i} about module_{i}.py")
            if i % 3 == 0:
                await s.assistant_message("", [ToolCall(f"c{i}", "read", {"path": f"m{i}.py"})])
                await s.tool_result(f"c{i}", f"line {i}\n" * 30, name="read")
            await s.render()
            await s.assistant_message(f"answer {i}: " + "lorem ipsum " * 8)
        await s.checkpoint()
        assert s.state.compacted and s.state.summary is not None
    engine.close()


async def _limited(store: FileStore) -> None:
    prune = PruneSettings(max_turns=3)
    engine = ContextEngine("gpt-4o", Budget(total=2000), store=store, prune=prune)
    async with engine.session("limited") as s:
        for i in range(12):
            await s.user_message(f"question {i} about module_{i}.py")
            await s.render()
            await s.assistant_message(f"answer {i}: " + "lorem ipsum " * 8)
        await s.user_message("last question")
        await s.render()
        await s.checkpoint()
        assert s.state.limited
    engine.close()


async def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    store = FileStore(out, keep_snapshots=2, keep_compactions=0)
    await _chat(store)
    await _limited(store)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
