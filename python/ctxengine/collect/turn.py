"""The collect phase of a render: the scene, every plugin's ``collect``, and waiting grains."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Final

from ..grain import ContextGrain
from .faults import PluginFault
from .namespaces import emitter_of, shadowing_refusals
from .scene import ContextScene, copy_data

if TYPE_CHECKING:
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog
    from .dispatch import SessionDispatcher

__all__ = ("SESSION_ORIGIN", "collect", "redacted_user_text", "render_copy")

#: The origin of a grain the application added with ``Session.add`` without one.
SESSION_ORIGIN: Final = "session"


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
    redacted = plugins.registry.redact(raw, state.faults)
    state.redacted = (raw, redacted)
    return redacted


def _deep(value: Any) -> Any:
    try:
        return copy_data(value)
    except RecursionError:  # a cycle, or nested too deeply: admission reports it
        return copy.copy(value)


def _shallow(grain: ContextGrain) -> ContextGrain:
    """A shallow copy of ``grain``; field by field for a plain grain (``copy.copy`` goes through
    ``__reduce_ex__`` and costs ~9x more, paid for every carried grain on every render)."""
    if type(grain) is not ContextGrain:  # a subclass may hold more than the fields
        return copy.copy(grain)
    out: ContextGrain = object.__new__(ContextGrain)
    out.node_id = grain.node_id
    out.origin = grain.origin
    out.content = grain.content
    out.priority = grain.priority
    out.lifespan = grain.lifespan
    out.window = grain.window
    out.protected = grain.protected
    out.meta = grain.meta
    return out


def render_copy(grain: ContextGrain) -> ContextGrain:
    """``grain`` as one render uses it: its own ``meta`` and container ``content``, so what the
    render writes (fusion's ``shadowed`` entries, tree handlers' edits) never reaches the grain
    the session carries or the caller's objects, while the caller's later changes to the grain
    are seen by the next render. Fields are copied as they are (broken ones included: admission
    reports them); an empty ``origin`` becomes ``"session"``."""
    out = _shallow(grain)
    if isinstance(grain.meta, dict):
        out.meta = _deep(grain.meta)
    if isinstance(grain.content, (list, dict)):
        out.content = _deep(grain.content)
    if out.origin == "":
        out.origin = SESSION_ORIGIN
    return out


def _refuse_shadowing(
    state: SessionState,
    plugins: SessionDispatcher,
    grains: list[ContextGrain],
    sources: list[ContextGrain | None],
    log: TurnLog,
) -> list[ContextGrain]:
    """``grains`` without those that would shadow another owner's protected grain (a fault
    each; a carried one is no longer carried)."""
    registry = plugins.registry
    refused = shadowing_refusals(
        grains,
        is_plugin=registry.__contains__,
        privileged=plugins.privileged,
        rank=registry.rank,
    )
    if not refused:
        return grains
    for i, message in refused.items():
        grain = grains[i]
        who = emitter_of(grain, registry.__contains__) or str(grain.origin)
        log.faults.append(PluginFault(who, "render", "denied", message, node_id=grain.node_id))
        source = sources[i]
        if source is not None:
            state.discard(source)
    return [g for i, g in enumerate(grains) if i not in refused]


async def collect(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    provider: str,
    log: TurnLog,
) -> list[ContextGrain]:
    """The collect phase: this turn's queued grains, plugin grains, then the carried ones.

    Plugin grains with a ``session`` or ``task`` lifespan are carried from now on (fused with
    the carried grains of their node id). Queued and carried grains enter the render as
    :func:`render_copy` copies (the compaction summary, the engine's own, as itself).
    """
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
    fresh: list[ContextGrain] = []
    rank = plugins.registry.rank
    for grain in outcome.grains:
        if grain.lifespan == "turn":
            fresh.append(grain)
        else:
            state.carry(grain, rank(grain.origin))
    queued, state.queued = state.queued, []
    carried = state.carried()
    summary = state.summary
    grains = [
        *(render_copy(g) for g in queued),
        *fresh,
        *(g if g is summary else render_copy(g) for g in carried),
    ]
    sources: list[ContextGrain | None] = [None] * (len(queued) + len(fresh))
    sources += carried
    return _refuse_shadowing(state, plugins, grains, sources, log)
