"""`session_archive`: on session close, key facts go to ``<memory_dir>/YYYY-MM-DD.md``.

Key facts: files touched (from tool-call arguments; read vs modified), tool failures, and open
asks (a last user request with no answer, or one whose answer ended in error/abort, plus
unchecked TODO items of the last assistant message). Text that comes from tools or users is
quoted, never written as instructions. State is kept per session and dropped at close.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from ..collect.events import SessionClose, SessionStart, ToolResult, UserMessage
from ..collect.scene import ContextScene
from ..grain import ContextGrain
from .redaction import Redactor

__all__ = ("SessionArchiveProvider", "SessionFacts", "extract_facts")

_DEFAULT: Any = object()

_PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file", "notebook_path")
_LIST_KEYS = ("paths", "files")
_WRITES = re.compile(r"write|edit|patch|create|replace|delete|remove|move|rename|apply|save", re.I)
_ERRORISH = re.compile(
    r"error|exception|traceback|failed|failure|fatal|denied|not found|exit", re.I
)
_TODO = re.compile(r"^\s*(?:[-*]\s*\[ \]|TODO\b|FIXME\b)\s*(.+)$", re.I | re.M)


@dataclass(slots=True)
class SessionFacts:
    """Facts gathered for one session."""

    files: dict[str, str] = field(default_factory=dict)  # path -> "read" | "modified"
    failures: list[str] = field(default_factory=list)
    open_asks: list[str] = field(default_factory=list)
    user_messages: list[str] = field(default_factory=list)
    last_request: str | None = None  # set when no transcript tells whether it was answered
    turns: int = 0

    @property
    def empty(self) -> bool:
        """Nothing worth archiving."""
        return not (self.files or self.failures or self.open_asks or self.turns)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _quote(text: str, limit: int = 200) -> str:
    """One line, backticks removed, truncated, as inline code: never read as instructions."""
    line = " ".join(str(text).split()).replace("`", "'")
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return f"`{line}`"


def _failure_line(output: str) -> str:
    """The most telling line of a failed tool's output: the last error-looking line, else the
    last non-empty one (errors are usually at the end)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if _ERRORISH.search(ln)]
    return (errors or lines or ["(no output)"])[-1]


def _arguments(call: Any) -> dict[str, Any]:
    args = _get(call, "arguments", None)
    if args is None:
        args = _get(call, "input", None)
    fn = _get(call, "function", None)
    if args is None and fn is not None:
        args = _get(fn, "arguments", None)
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {}
    return dict(args) if isinstance(args, Mapping) else {}


def _tool_calls(message: Any) -> Iterable[tuple[str, dict[str, Any]]]:
    blocks = _get(message, "blocks", None)
    if blocks is None:
        content = _get(message, "content", None)
        blocks = content if isinstance(content, (list, tuple)) else ()
    for block in list(blocks) + list(_get(message, "tool_calls", None) or ()):
        kind = _get(block, "type", type(block).__name__)
        if kind in ("ToolCall", "tool_use", "tool_call", "function_call", "function"):
            name = _get(block, "name", None) or _get(_get(block, "function", {}), "name", "")
            yield str(name or ""), _arguments(block)


def _text(message: Any) -> str:
    content = _get(message, "content", None)
    if isinstance(content, str):
        return content
    blocks = _get(message, "blocks", None) or (
        content if isinstance(content, (list, tuple)) else ()
    )
    parts = []
    for block in blocks:
        kind = _get(block, "type", type(block).__name__)
        if kind in ("Text", "text", "input_text", "output_text"):
            parts.append(str(_get(block, "text", "")))
    return "\n".join(p for p in parts if p)


def extract_facts(transcript: Iterable[Any], facts: SessionFacts | None = None) -> SessionFacts:
    """Collect files touched and open asks from a transcript (neutral messages or dicts)."""
    facts = facts or SessionFacts()
    last_user: str | None = None
    answered = False
    last_assistant = ""
    for message in transcript:
        role = _get(message, "role", "")
        if role == "user" and _text(message).strip():
            last_user, answered = _text(message), False
        elif role == "assistant":
            for name, args in _tool_calls(message):
                mode = "modified" if _WRITES.search(name) else "read"
                paths = [args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)]
                paths += [p for k in _LIST_KEYS for p in (args.get(k) or ()) if isinstance(p, str)]
                for p in paths:
                    if facts.files.get(p) != "modified":
                        facts.files[p] = mode
            text = _text(message)
            if text.strip():
                last_assistant = text
                answered = _get(message, "stop_reason", None) not in ("error", "aborted")
    if last_user is not None and not answered:
        facts.open_asks.append(last_user)
    facts.open_asks.extend(m.group(1) for m in _TODO.finditer(last_assistant))
    return facts


class SessionArchiveProvider:
    """Append a session's key facts to the daily memory log when it closes.

    Everything written passes through ``redactor`` first: the memory folder outlives the
    session and must not collect API keys or e-mail addresses quoted in requests or tool output.

    Args:
        memory_dir: Folder of daily logs (``YYYY-MM-DD.md``), created if missing.
        clock: Returns the current local time (for tests); default ``datetime.now().astimezone()``.
        redactor: Applied to the text before writing; default :class:`Redactor` (built-in
            patterns); ``None`` writes verbatim.
        priority: Plugin priority.
    """

    name = "session_archive"
    version = "1.0.0"

    def __init__(
        self,
        memory_dir: str | Path,
        *,
        clock: Callable[[], datetime] | None = None,
        redactor: Redactor | None = _DEFAULT,
        priority: int = 960,
    ) -> None:
        self.memory_dir = Path(memory_dir)
        self.redactor = Redactor() if redactor is _DEFAULT else redactor
        self.priority = priority
        self.enabled = True
        self._clock = clock or (lambda: datetime.now().astimezone())
        self._sessions: dict[str, SessionFacts] = {}
        self._transcripts: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _facts(self, session_id: str) -> SessionFacts:
        return self._sessions.setdefault(session_id, SessionFacts())

    def on_session_start(self, event: SessionStart) -> None:
        """Start a fresh record for the session."""
        self._sessions[event.session_id] = SessionFacts()

    def on_user_msg(self, event: UserMessage) -> None:
        """Count the turn; keep the message as a fallback when no transcript is available."""
        facts = self._facts(event.session_id)
        facts.turns += 1
        facts.user_messages.append(event.user_message)

    def on_tool_result(self, event: ToolResult) -> None:
        """Record a failed tool call."""
        if event.is_error:
            output = (
                event.output
                if isinstance(event.output, str)
                else json.dumps(event.output, default=str)
            )
            line = _failure_line(output)
            self._facts(event.session_id).failures.append(f"{event.name} ({event.call_id}): {line}")

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Keep a reference to the session's (read-only) transcript; contributes no grains."""
        self._transcripts[scene.session_id] = scene.transcript
        return []

    def render(self, session_id: str, facts: SessionFacts) -> str:
        """The markdown section for one closed session."""
        now = self._clock()
        lines = [f"## Session {_quote(session_id, 80)} closed {now.strftime('%H:%M:%S %z')}", ""]
        lines.append(f"- Turns: {facts.turns}")
        sections = (
            ("Files touched", [f"{_quote(p)} ({mode})" for p, mode in sorted(facts.files.items())]),
            ("Tool failures", [_quote(f) for f in facts.failures]),
            ("Open asks", [_quote(a) for a in facts.open_asks]),
            ("Last request", [_quote(facts.last_request)] if facts.last_request else []),
        )
        for title, items in sections:
            if items:
                lines += ["", f"### {title}", *(f"- {item}" for item in items)]
        return "\n".join(lines) + "\n\n"

    def append(self, text: str) -> Path:
        """Append ``text`` to today's log durably (blocking); return the file."""
        path = self.memory_dir / f"{self._clock().strftime('%Y-%m-%d')}.md"
        with self._lock:
            self.memory_dir.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        return path

    async def on_session_close(self, event: SessionClose) -> None:
        """Write the session's key facts, then forget the session."""
        facts = self._sessions.pop(event.session_id, SessionFacts())
        transcript = self._transcripts.pop(event.session_id, None)
        if transcript:
            extract_facts(transcript, facts)
        elif facts.user_messages:
            facts.last_request = facts.user_messages[-1]
        if not facts.empty:
            text = self.render(event.session_id, facts)
            if self.redactor is not None:
                text = self.redactor.redact_text(text)[0]
            await anyio.to_thread.run_sync(self.append, text)
