"""Replay a recorded agent session through the engine, rendering at every model call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .engine import ContextEngine, RenderedContext, Session
from .transcript import Message, Transcript, load

__all__ = ("ReplayStep", "demo_transcript_path", "replay")


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """One model call of the replay: how far the session was, and what was rendered.

    ``messages`` counts the messages the engine session holds; ``position`` how many of the
    transcript's were fed so far (the two differ after a clear, where a new session starts).
    ``after_clear`` marks the first call of a session started at a clear: the recording
    itself emptied the conversation before it.
    """

    call: int
    messages: int
    rendered: RenderedContext
    position: int = 0
    after_clear: bool = False


def demo_transcript_path() -> Path:
    """The bundled real Claude Code session of ``ctxengine demo`` (MIT, see ``data/NOTICE.md``)."""
    return Path(str(resources.files("ctxengine") / "data" / "demo_session.jsonl"))


async def _feed(session: Session, message: Message) -> None:
    """Append one message the way a live agent loop would (firing the matching events). A
    user message is appended as recorded, with its ``meta``: what marks it as the harness's
    (an observation, Claude Code's ``is_meta`` text) is what keeps it out of a summary's
    requests."""
    if message.role == "user" and len(message.blocks) == 1 and message.text:
        await session.ingest([message])  # fires on_user_msg, as user_message(text) does
    elif message.role == "tool":
        for result in message.tool_results:
            await session.tool_result(
                result.call_id, result.text, name=result.name, is_error=result.is_error
            )
    else:
        session.extend([message])


async def replay(
    transcript: Transcript | str | Path,
    engine: ContextEngine,
    *,
    provider: str = "openai",
    session_id: str = "replay",
    fmt: str = "auto",
) -> AsyncIterator[ReplayStep]:
    """Feed ``transcript`` message by message; render before every assistant turn.

    Yields a :class:`ReplayStep` per render (one per model call in the recording). Where the
    harness emptied its conversation (a message marked ``meta["after_clear"]``: aider's
    ``/clear``, ``/reset``), the replay goes on in a new session (``<session_id>.<n>``), as
    the recording's later requests held only what followed; the first call there is marked
    ``after_clear``.

    Raises:
        TranscriptError: the file cannot be loaded. BudgetError: protected content alone
            exceeds the budget.
    """
    if not isinstance(transcript, Transcript):
        transcript = load(transcript, format=fmt)
    parts: list[list[Message]] = [[]]
    for message in transcript:
        if message.meta.get("after_clear") and parts[-1]:
            parts.append([])
        parts[-1].append(message)
    call = position = 0
    for n, part in enumerate(parts):
        async with engine.session(f"{session_id}.{n}" if n else session_id) as session:
            previous = None
            cleared = n > 0  # until this session's first call
            for message in part:
                if (
                    message.role == "assistant"
                    and previous != "assistant"
                    and len(session.state.messages)
                ):
                    rendered = await session.render(provider)
                    held = len(session.state.messages)
                    yield ReplayStep(call, held, rendered, position, cleared)
                    call += 1
                    cleared = False
                await _feed(session, message)
                position += 1
                previous = message.role
            if n == len(parts) - 1:
                rendered = await session.render(provider)
                yield ReplayStep(call, len(session.state.messages), rendered, position, cleared)
