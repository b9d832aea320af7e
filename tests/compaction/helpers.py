"""Shared data paths and fakes for the compaction tests."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import anyio

from ctxengine.compaction import facts as F
from ctxengine.transcript import Message, ToolCall

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


def failed_calls(messages: Sequence[Message]) -> list[tuple[str, str | None]]:
    """The failed calls of ``messages`` by the definition of "fixed later" (docs/compaction.md),
    read call by call: each call's newest failure, oldest first, as its call id and the id of
    the newest later call that fixed it (None: not fixed later). A failure is dropped when a
    later failure of the same call follows it (the same tool, case folded, and the same
    arguments as sent, their JSON text; a shell tool's command with its whitespace collapsed;
    a write without a path argument is never the same as another call); it is fixed by a
    later call whose result succeeded and that is the same call or, for a file tool's failed
    write, a file tool's write of each file it wrote (a shell command is no file tool)."""
    made = {c.id: (i, c) for i, m in enumerate(messages) for c in m.tool_calls}
    results = [r for m in messages for r in m.tool_results]
    failed = list(dict.fromkeys(r.call_id for r in results if r.is_error))
    ok = [
        (*made[r.call_id], n) for n, r in enumerate(results) if not r.is_error and r.call_id in made
    ]

    def command(c: ToolCall) -> str:
        args = c.arguments
        value = args.get("command", args.get("cmd", "")) if isinstance(args, dict) else args
        text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
        return " ".join(text.split())

    def writes(c: ToolCall) -> list[str] | None:  # None: a write without a path
        if c.name.lower() in F.SHELL_TOOLS:
            return []
        ops = F._call_ops(c)
        if any(kind == "WC" for kind, _ in ops):
            return None
        return [p for kind, paths in ops if kind == "W" for p in paths]

    def same(a: ToolCall, b: ToolCall) -> bool:
        if a.name.lower() != b.name.lower() or writes(a) is None or writes(b) is None:
            return False
        if a.name.lower() in F.SHELL_TOOLS:
            return command(a) == command(b)
        return a.arguments_json == b.arguments_json

    out: list[tuple[str, str | None]] = []
    for i, call_id in enumerate(failed):
        if call_id not in made:
            out.append((call_id, None))
            continue
        at, call = made[call_id]
        if any(g in made and same(made[g][1], call) for g in failed[i + 1 :]):
            continue
        later = [(q, c, n) for q, c, n in ok if q > at]
        fixes = [x for x in later if same(x[1], call)]
        paths = writes(call) or []
        if paths and all(any(p in (writes(c) or []) for _, c, _ in later) for p in paths):
            fixes += [x for x in later if set(writes(x[1]) or []) & set(paths)]
        fix = max(fixes, key=lambda x: (x[0], x[2]), default=None)
        out.append((call_id, None if fix is None else fix[1].id))
    return out


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
