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


class Broken:
    """A redactor that raises, or returns no string."""

    version = "1"
    priority = 40
    enabled = True

    def __init__(self, name: str, result: Any) -> None:
        self.name = name
        self.result = result
        self.seen: list[str] = []

    def redact_text(self, text: str) -> Any:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return []

    async def on_user_msg(self, event: Any) -> None:
        self.seen.append(event.user_message)


@pytest.mark.parametrize(
    ("result", "kind"), [(ValueError("redactor bug"), "raised"), (None, "invalid")]
)
async def test_a_redactor_that_fails_withholds_the_text_and_breaks_no_turn(
    result: Any, kind: str
) -> None:
    """A redactor that raised broke user_message and every later render of the session."""
    from ctxengine.collect.faults import WITHHELD

    broken = Broken("broken-redactor", result)
    engine = ContextEngine("gpt-4o", 4_000, plugins=[broken, CountingRedactor()])
    async with engine.session("b") as s:
        await s.user_message("my password is hunter2")
        assert broken.seen == [WITHHELD]  # what it would have redacted is unknown: withheld
        out = await s.render()
        faults = [f for f in out.report.faults if f["hook"] == "redact_text"]
        assert [(f["plugin"], f["kind"]) for f in faults] == [("broken-redactor", kind)]
        assert s.redact("hunter2") == WITHHELD
        await s.user_message("again")
        again = await s.render()  # goes on; each failure reported by the render after it
        assert [f["kind"] for f in again.report.faults if f["hook"] == "redact_text"] == [
            kind,
            kind,
        ]
