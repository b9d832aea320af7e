"""`usage_audit`: one JSONL line per render with tokens per window and per origin."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio

from ..collect.events import AfterRender, current_session
from ..collect.scene import ContextScene
from ..grain import ContextGrain

__all__ = ("UsageAuditProvider", "summarize_report")

_DROPPED = frozenset({"dropped", "removed", "expired", "shadowed"})


def _field(entry: Any, *names: str) -> Any:
    for name in names:
        if isinstance(entry, Mapping):
            if name in entry:
                return entry[name]
        elif hasattr(entry, name):
            return getattr(entry, name)
    return None


def _entries(report: Any) -> Iterable[Any]:
    if report is None:
        return ()
    for name in ("entries", "grains", "decisions", "nodes"):
        inner = _field(report, name)
        if inner is not None and not callable(inner):
            return inner  # type: ignore[no-any-return]
    if isinstance(report, Mapping):
        return report.values()
    return report  # type: ignore[no-any-return]


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def summarize_report(report: Any) -> dict[str, Any]:
    """Tokens per window and per origin from a render report, plus decision counts.

    ``report`` is an iterable of entries (mappings, dataclasses or objects), or an object whose
    ``entries``/``grains``/``decisions``/``nodes`` holds them. Each entry may carry ``origin``,
    ``window``, ``decision`` and ``tokens_after`` (or ``tokens``). Dropped entries count zero.
    """
    windows: dict[str, int] = {}
    origins: dict[str, int] = {}
    decisions: dict[str, int] = {}
    for entry in _entries(report):
        if dataclasses.is_dataclass(entry) and not isinstance(entry, type):
            entry = dataclasses.asdict(entry)
        decision = _field(entry, "decision", "action", "status")
        decision = str(decision) if decision is not None else "kept"
        decisions[decision] = decisions.get(decision, 0) + 1
        tokens = _as_int(_field(entry, "tokens_after", "tokens"))
        if tokens is None or decision in _DROPPED:
            continue
        window = str(_field(entry, "window") or "unknown")
        origin = str(_field(entry, "origin") or "unknown")
        windows[window] = windows.get(window, 0) + tokens
        origins[origin] = origins.get(origin, 0) + tokens
    return {
        "windows": dict(sorted(windows.items())),
        "origins": dict(sorted(origins.items())),
        "decisions": dict(sorted(decisions.items())),
    }


class UsageAuditProvider:
    """Append a JSONL line per render: time, session, total tokens, tokens per window/origin.

    Each line is written with one ``write`` on a file opened in append mode, then flushed and
    fsync'd, in a worker thread; a lock keeps lines from several sessions whole.

    Args:
        path: JSONL file (created with its parent folders).
        clock: Returns the current time (for tests); default UTC now.
        priority: Plugin priority.
    """

    name = "usage_audit"
    version = "1.0.0"

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] | None = None,
        priority: int = 950,
    ) -> None:
        self.path = Path(path)
        self.priority = priority
        self.enabled = True
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._lock = threading.Lock()

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Nothing per turn: work happens in :meth:`on_after_render`."""
        return []

    def record(self, event: AfterRender, session_id: str | None) -> dict[str, Any]:
        """Build the audit record for ``event``."""
        summary = summarize_report(event.report)
        tokens = _as_int(event.tokens)
        if tokens is None and isinstance(event.tokens, Mapping):
            tokens = _as_int(event.tokens.get("total"))
        if tokens is None:
            tokens = sum(summary["windows"].values())
        return {
            "ts": self._clock().isoformat(),
            "session_id": session_id,
            "tokens": tokens,
            **summary,
        }

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one JSON line durably (blocking)."""
        line = json.dumps(record, ensure_ascii=False, sort_keys=True, default=str) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())

    async def on_after_render(self, event: AfterRender) -> None:
        """Write the record for this render."""
        record = self.record(event, current_session())
        await anyio.to_thread.run_sync(self.append, record)
