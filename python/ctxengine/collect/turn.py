"""The collect phase of a render: the scene, every plugin's ``collect``, and waiting grains."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..grain import ContextGrain
from .scene import ContextScene

if TYPE_CHECKING:
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog
    from .dispatch import SessionDispatcher

__all__ = ("collect", "redacted_user_text")


def _latest_user_text(state: SessionState) -> str:
    for message in reversed(state.messages):
        if message.role == "user":
            return message.text
    return ""


def redacted_user_text(state: SessionState, plugins: SessionDispatcher, raw: str) -> str:
    """``raw`` through the redactors, once per text: the result is kept in the state, so the
    event of a user message and the render after it share one redaction."""
    cached = state.redacted
    if cached is not None and cached[0] == raw:
        return cached[1]
    redacted = plugins.registry.redact(raw)
    state.redacted = (raw, redacted)
    return redacted


async def collect(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    provider: str,
    log: TurnLog,
) -> list[ContextGrain]:
    """The collect phase: this turn's queued grains, plugin grains, then the stored ones."""
    raw = _latest_user_text(state)
    redacted = redacted_user_text(state, plugins, raw)
    scene = ContextScene(
        session_id=state.session_id,
        turn=state.turn,
        user_message=redacted,
        raw_user_message=raw if redacted != raw else None,
        transcript=state.messages,
        model=config.model,
        provider=provider,
        budget=config.budget,
        task_id=state.task_id,
    )
    outcome = await plugins.collect(scene)
    log.faults.extend(outcome.faults)
    queued, state.queued = state.queued, []
    stored = [s.grain for s in state.stored.values()]
    return queued + list(outcome.grains) + stored
