"""aider ``.aider.chat.history.md`` markdown logs.

``# aider chat started at ...`` opens a session (one :class:`Transcript` each). Runs of
``#### `` lines are the user's input, except answers to aider's own yes/no prompts (``Add file
to the chat? ... [Yes]: all``) and an empty input (``<blank>``), which never reach the model.
An input starting with ``/`` or ``!`` is an in-chat command, which aider runs instead of
sending it (``Commands.run`` in ``aider/commands.py``): it is kept in ``meta["commands"]``, not
as a user message, except that ``/ask``, ``/code``, ``/architect`` and ``/context`` with a
prompt (and ``/ok``) send that prompt to the model as the user's message (marked
``meta["command"]``), as ``_generic_chat_command`` does.
``> `` lines are aider's tool/UI output, kept in metadata (a ``>>>>>>> REPLACE`` line of an edit
is reply text); aider quotes only the first line of a multi-line output, so the lines right
after a ``> `` line (no blank line between) belong to it. aider ends every input and tool line
it writes with two spaces (a markdown line break): where the file kept them, a ``#### `` line
without them (a heading the model wrote) and a ``> `` line without them inside a reply (a
blockquote, a line of a markdown file in an edit) are reply text. Everything else is the
assistant's reply; ``<thinking-content-...>`` sections become :class:`Thinking`. A reply not
closed by a ``> Tokens:`` line was interrupted and is marked ``stop_reason="aborted"``. There
are no tool calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..model import Block, Message, Text, Thinking
from .common import read_text

__all__ = ("is_aider_log", "load_aider")

_SESSION = re.compile(r"# aider chat started at (?P<when>.+)")
_PROMPT_ANSWER = re.compile(r".*\(Y\)es/\(N\)o.*\[(Yes|No)\]: ?\S*\s*")
_THINK = re.compile(r"<(thinking-content-[0-9a-f]+)>(?P<body>.*?)</\1>", re.S)
#: aider's in-chat commands (its ``Commands.cmd_*`` methods), to resolve an abbreviation as
#: ``Commands.matching_commands`` does (``/dr x`` is ``/drop x``; ``/a`` matches several).
_COMMANDS: Final = frozenset(
    {"/add", "/architect", "/ask", "/chat-mode", "/clear", "/code", "/commit", "/context",
    "/copy", "/copy-context", "/diff", "/drop", "/edit", "/editor", "/editor-model", "/exit",
    "/git", "/help", "/lint", "/load", "/ls", "/map", "/map-refresh", "/model", "/models",
    "/multiline-mode", "/ok", "/paste", "/quit", "/read-only", "/reasoning-effort", "/report",
    "/reset", "/run", "/save", "/settings", "/test", "/think-tokens", "/tokens", "/undo",
    "/voice", "/weak-model", "/web"}
)  # fmt: skip
#: Commands whose argument aider sends to the model as the user's message, in that chat mode
#: (``_generic_chat_command``); without one they only switch the mode.
_PROMPT_COMMANDS: Final = frozenset({"/ask", "/code", "/architect", "/context"})
#: What ``/ok`` sends (through ``/code``), its arguments appended.
_OK: Final = "Ok, please go ahead and make those changes."


def _command(text: str) -> tuple[str, str | None] | None:
    """``(command, prompt)`` for an input aider reads as an in-chat command (``Commands
    .is_command``: its first character is ``/`` or ``!``; ``!x`` is ``/run x``), the prompt
    being what it sends the model as the user's message, if anything; None for any other
    input. An unknown or ambiguous command is named as typed (aider sends nothing)."""
    if not text or text[0] not in "/!":
        return None
    if text[0] == "!":
        return "/run", None
    word = text.split(maxsplit=1)[0] if text.strip() else text
    rest = text[len(word) :].strip()
    matches = [c for c in _COMMANDS if c.startswith(word)]
    name = matches[0] if len(matches) == 1 else word
    if name in _PROMPT_COMMANDS and rest:
        return name, rest
    if name == "/ok":
        return name, f"{_OK} {rest}" if rest else _OK
    return name, None


@dataclass
class _Session:
    started: str
    line: int
    messages: list[Message] = field(default_factory=list)
    tool_lines: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    user_lines: int = 0
    prompt_answers: int = 0


def _strip_md_break(line: str) -> str:
    """aider ends log lines with two spaces (a markdown line break)."""
    return line[:-2] if line.endswith("  ") else line


def _reply(lines: list[str], closed: bool, tokens: str | None) -> Message | None:
    text = "\n".join(lines).strip("\n")
    if not text.strip():
        return None
    blocks: list[Block] = []
    pos = 0
    for m in _THINK.finditer(text):
        before = text[pos : m.start()].strip()
        if before:
            blocks.append(Text(before))
        blocks.append(Thinking(m.group("body").strip()))
        pos = m.end()
    rest = text[pos:].strip()
    if rest:
        blocks.append(Text(rest))
    meta: dict[str, Any] = {"provider_family": "aider"}
    if tokens:
        meta["tokens"] = tokens
    return Message("assistant", tuple(blocks), stop_reason=None if closed else "aborted", meta=meta)


class _Parser:
    def __init__(self, marked: bool) -> None:
        self.sessions: list[_Session] = []
        self.user: list[str] = []
        self.reply: list[str] = []
        self.in_quote = False  # the previous line was aider tool output (``> ``)
        # aider ends each line it writes for the user's input and its tool output with two
        # spaces: where the file kept them, a ``#### `` or ``> `` line without them is the
        # model's (a heading, a blockquote, a markdown file's line in an edit)
        self.marked = marked

    @property
    def cur(self) -> _Session:
        if not self.sessions:
            self.sessions.append(_Session("", 1))
        return self.sessions[-1]

    def flush_user(self) -> None:
        # aider logs an empty input as ``<blank>`` and sends nothing to the model
        text = "\n".join(self.user)
        self.user = []
        if not text or text == "<blank>":
            return
        command = _command(text)
        if command is None:
            self.cur.messages.append(Message("user", (Text(text),)))
            return
        name, prompt = command
        if prompt is not None:  # what aider sends the model for it
            self.cur.messages.append(Message("user", (Text(prompt),), meta={"command": name}))
        else:  # run by aider, never sent
            self.cur.commands.append(text)

    def flush_reply(self, *, closed: bool, tokens: str | None = None) -> None:
        msg = _reply(self.reply, closed, tokens)
        if msg is not None:
            self.cur.messages.append(msg)
        self.reply = []

    def feed(self, n: int, raw: str) -> None:
        line = _strip_md_break(raw)
        quoted, self.in_quote = self.in_quote, False
        models = self.marked and not raw.endswith("  ")  # not a line aider marked as its own
        if m := _SESSION.fullmatch(line):
            self.flush_user()
            self.flush_reply(closed=False)
            self.sessions.append(_Session(m.group("when"), n))
        elif line.startswith("####") and not models:
            self.flush_reply(closed=False)
            self.cur.user_lines += 1
            body = line[5:] if line.startswith("#### ") else line[4:]
            if _PROMPT_ANSWER.fullmatch(body):
                self.cur.prompt_answers += 1
            else:
                self.user.append(body)
        elif (line.startswith("> ") or line == ">") and not (models and self.reply):
            # not ``>>>>>>> REPLACE`` of an edit, nor a blockquote in the model's reply
            self.flush_user()
            self.cur.tool_lines.append(line[2:])
            if line.startswith("> Tokens:"):
                self.flush_reply(closed=True, tokens=line[2:].strip())
            self.in_quote = True
        elif quoted and line.strip():
            # aider quotes only the first line of multi-line tool output (command output,
            # error tracebacks); replies always start after a blank line
            self.cur.tool_lines[-1] += "\n" + line
            self.in_quote = True
        else:
            self.flush_user()
            if self.reply or line.strip():
                self.reply.append(line)

    def finish(self) -> list[_Session]:
        self.flush_user()
        self.flush_reply(closed=False)
        return self.sessions


def is_aider_log(path: Path) -> bool:
    """Whether the file holds an aider session header (``# aider chat started at ...``).

    Raises:
        TranscriptError: the file is not UTF-8.
    """
    return any(_SESSION.fullmatch(_strip_md_break(line)) for line in _lines(path))


def _lines(path: Path) -> list[str]:
    """The file's lines as text-mode reading gives them (``\\r\\n`` and ``\\r`` end lines too)."""
    lines = read_text(path).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines and not lines[-1] else lines


def load_aider(path: Path) -> list[tuple[list[Message], dict[str, Any]]]:
    """One ``(messages, meta)`` per aider session in the file, in order.

    Raises:
        TranscriptError: the file is not UTF-8 (byte offset named).
        OSError: the file cannot be read.
    """
    lines = _lines(path)
    parser = _Parser(any(x.startswith("#### ") and x.endswith("  ") for x in lines))
    for n, raw in enumerate(lines, 1):
        parser.feed(n, raw)
    out = []
    for s in parser.finish():
        meta = {
            "started_at": s.started,
            "line": s.line,
            "tool_lines": s.tool_lines,
            "user_input_lines": s.user_lines,
            "prompt_answers": s.prompt_answers,
            "commands": s.commands,
            "applied_edits": sum(1 for t in s.tool_lines if t.startswith("Applied edit to")),
        }
        out.append((s.messages, meta))
    return out
