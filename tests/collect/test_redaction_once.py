"""Redaction runs once per user message, shared by its event and the render after it."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine import ContextEngine, ContextGrain

pytestmark = pytest.mark.anyio


class CountingRedactor:
    name = "counting-redactor"
    version = "1"
    priority = 50
    enabled = True

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.seen: list[str] = []

    def redact_text(self, text: str) -> str:
        self.calls.append(text)
        return text.replace("hunter2", "[secret]")

    async def collect(self, scene: Any) -> list[ContextGrain]:
        self.seen.append(scene.user_message)
        return []

    async def on_user_msg(self, event: Any) -> None:
        self.seen.append(event.user_message)


async def test_redaction_runs_once_per_turn() -> None:
    plugin = CountingRedactor()
    engine = ContextEngine("gpt-4o", 4_000, plugins=[plugin])
    async with engine.session("r") as s:
        for turn in range(3):
            await s.user_message(f"turn {turn}: my password is hunter2")
            await s.render()
    assert plugin.calls == [f"turn {t}: my password is hunter2" for t in range(3)]
    assert plugin.seen == [f"turn {t}: my password is [secret]" for t in range(3) for _ in (0, 1)]
