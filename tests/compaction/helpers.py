"""Shared data paths and fakes for the compaction tests."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import anyio

from ctxengine.transcript import Message

SHARED = Path(os.environ.get("CTXENGINE_SHARED", Path(__file__).resolve().parents[3] / "shared"))
DATA = SHARED / "data" / "transcripts"
PI = DATA / "pi-openclaw-session" / "large-session.jsonl"
CC_MAIN = DATA / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")
FILE_TOOLS = {"read", "edit", "write", "str_replace_editor", "open", "create", "multiedit"}


def all_files() -> list[Path]:
    """Every transcript file of the shared data set (READMEs left out)."""
    return sorted(p for p in DATA.rglob("*") if p.is_file() and p.name != "README.md")


def oracle_files(messages: Sequence[Message]) -> set[str]:
    """Files read or modified, by a reading independent of the extractor: the path argument
    of the common file tools, and ``cat FILE`` commands."""
    files: set[str] = set()
    for m in messages:
        for c in m.tool_calls:
            args = c.arguments if isinstance(c.arguments, dict) else {}
            if c.name.lower() in FILE_TOOLS:
                files.update(
                    args[k]
                    for k in ("file_path", "path", "filename")
                    if isinstance(args.get(k), str)
                )
            command = args.get("command")
            if c.name.lower() in {"bash", "execute_bash"} and isinstance(command, str):
                words = command.split()
                if len(words) == 2 and words[0] == "cat":
                    files.add(words[1])
    return files


def payload_text(messages: Sequence[Message]) -> str:
    """Everything a model would read in ``messages``: text, tool calls, tool results."""
    parts = []
    for m in messages:
        parts.append(m.text)
        parts += [c.arguments_json for c in m.tool_calls]
        parts += [r.text for r in m.tool_results]
    return "\n".join(parts)


def request_key(text: str) -> str:
    """How a request is looked up: the first 60 characters of its first line."""
    line = next((" ".join(ln.split()) for ln in text.splitlines() if ln.strip()), "")
    return line[:60]


class Failing:
    """Raises on every call."""

    calls = 0

    async def summarize(self, messages, *, instructions, max_tokens):  # type: ignore[no-untyped-def]
        self.calls += 1
        raise RuntimeError("model unavailable")


class Empty:
    async def summarize(self, messages, *, instructions, max_tokens):  # type: ignore[no-untyped-def]
        return "   \n"


class Junk:
    async def summarize(self, messages, *, instructions, max_tokens):  # type: ignore[no-untyped-def]
        return "\ufffd\ufffd\x00\x01 ## ##"


class Hanging:
    async def summarize(self, messages, *, instructions, max_tokens):  # type: ignore[no-untyped-def]
        await anyio.sleep(3600)
        return "never"


class Flaky:
    """Fails the first ``failures`` calls whose messages contain ``marker``, then answers."""

    def __init__(self, marker: str, failures: int = 1) -> None:
        self.marker, self.failures, self.calls = marker, failures, []  # type: ignore[var-annotated]

    async def summarize(self, messages, *, instructions, max_tokens):  # type: ignore[no-untyped-def]
        text = " ".join(m.text for m in messages)
        self.calls.append(text[:40])
        if self.marker in text and self.failures > 0:
            self.failures -= 1
            raise RuntimeError("transient 503")
        return f"Prose summary of {len(messages)} messages about the work done so far."
