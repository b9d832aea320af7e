"""Twin sessions for the warm path's pre-hygiene steps: one renders as the engine does, its twin
with one step of ``ctxengine.inject.turn`` replaced (so hygiene does that work itself)."""

from __future__ import annotations

from typing import Any

import pytest

import ctxengine.inject.turn as turn_module
from ctxengine import Budget, ContextEngine
from ctxengine.transcript import Message


async def twin_renders(
    messages: list[Message],
    steps: list[list[Message]],
    provider: str,
    budget: int,
    options: dict[str, Any],
    replaced: tuple[str, Any],
) -> tuple[list[tuple[Any, Any]], int]:
    """Render ``messages`` then each step in both sessions; the twin renders with the
    function of ``ctxengine.inject.turn`` named ``replaced[0]`` set to ``replaced[1]``.
    Returns the (ours, twin's) render pairs and how many of our renders reused the previous
    one's work."""
    ours = ContextEngine("gpt-4o", Budget(total=budget)).session("ours")
    twin = ContextEngine("gpt-4o", Budget(total=budget)).session("twin")
    pairs: list[tuple[Any, Any]] = []
    async with ours as a, twin as b:
        a.extend(messages)
        b.extend(messages)
        for step in [[], *steps]:
            a.extend(step)
            b.extend(step)
            got = await a.render(provider, **options)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(turn_module, *replaced)
                want = await b.render(provider, **options)
            pairs.append((got, want))
        reused = a._state.token_cache.memo.warm.reused
    return pairs, reused
