"""A usage file of the public API, type-checked under mypy --strict by tests/test_typing.py."""

from __future__ import annotations

import ctxengine
from ctxengine import (
    Budget,
    ContextEngine,
    ContextGrain,
    RenderedContext,
    RenderReport,
    Session,
    SessionState,
    count_tokens,
)
from ctxengine.guard import PruneSettings, prune_tool_results
from ctxengine.hygiene import clean
from ctxengine.transcript import Message, ToolCall, Transcript, load


async def run(engine: ContextEngine) -> tuple[int, str]:
    async with engine.session("typed") as s:
        s.add(ContextGrain("sys.rules", "app", "Be terse.", priority=0, lifespan="session"))
        await s.user_message("list files")
        await s.assistant_message("", [ToolCall("c1", "bash", {"cmd": "ls"})])
        await s.tool_result("c1", "a.py\nb.py")
        out: RenderedContext = await s.render(provider="anthropic", cache_breakpoints=2)
        report: RenderReport = out.report
        state: SessionState = s.state
        data: dict[str, object] = state.to_json()
        again: Session = Session.from_state(engine, engine.state_from_json(dict(data)))
        return out.tokens + len(report) + again.turn, report.to_json()


def offline(path: str) -> int:
    engine = ContextEngine("gpt-4o", Budget(total=8_000), prune=PruneSettings(deny=("read*",)))
    transcript: Transcript = load(path)
    cleaned, changes = clean(transcript, "anthropic")
    pruned, _ = prune_tool_results(cleaned, engine.tokens_total)
    messages: list[Message] = list(pruned.messages)
    return count_tokens("hello", model=engine.model) + len(messages) + len(changes.changes)


version: str = ctxengine.__version__
