"""Syncing the session state into the core: nothing is lost when a render fails (issue 9)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain
from ctxengine.assemble import sync
from ctxengine.transcript import ToolCall

pytestmark = pytest.mark.anyio


async def test_a_lone_surrogate_in_a_tool_result_is_repaired_and_rendered() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=10_000))
    async with engine.session("sur") as s:
        await s.user_message("hi")
        await s.assistant_message("", [ToolCall("c1", "read", {})])
        await s.tool_result("c1", b"caf\xe9".decode("utf-8", "surrogateescape"))
        out = await s.render()
    assert out.payload["messages"][-1]["content"] == "caf\ufffd"
    assert out.tokens <= 10_000


async def test_a_failed_sync_leaves_the_history_for_the_next_render(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = sync.upsert
    calls = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the history upsert of the first render
            raise RuntimeError("injected failure")
        real(*args, **kwargs)

    monkeypatch.setattr(sync, "upsert", failing)
    engine = ContextEngine("gpt-4o", Budget(total=10_000))
    async with engine.session("tx") as s:
        s.add(ContextGrain("sys.rules", content="be brief"))
        await s.user_message("first question")
        await s.assistant_message("first answer")
        with pytest.raises(RuntimeError, match="injected"):
            await s.render()
        await s.user_message("second question")
        out = await s.render()
    texts = [m["content"] for m in out.payload["messages"]]
    assert texts == ["be brief", "first question", "first answer", "second question"]
