"""aider ``.aider.chat.history.md`` markdown logs.

``# aider chat started at ...`` opens a session (one :class:`Transcript` each). Runs of
``#### `` lines are the user's input, except answers to aider's own yes/no prompts (``Add file
to the chat? ... [Yes]: all``) and an empty input (``<blank>``), which never reach the model.
``> `` lines are aider's tool/UI output, kept in metadata (a ``>>>>>>> REPLACE`` line of an edit
is reply text); aider quotes only the first line of a multi-line output, so the lines right
after a ``> `` line (no blank line between) belong to it. aider ends every input and tool line
it writes with two spaces (a markdown line break): where the file kept them, a ``#### `` line
without them (a heading the model wrote) and a ``> `` line without them inside a reply (a
blockquote, a line of a markdown file in an edit) are reply text. Everything else is the
assistant's reply; ``<thinking-content-...>`` sections become :class:`Thinking`. A reply not
closed by a ``> Tokens:`` line was interrupted and is marked ``stop_reason="aborted"``. There
are no tool calls.

An input starting with ``/`` or ``!`` is an in-chat command, which aider runs (``Commands.run``
in ``aider/commands.py``); the command is never a user message: it is kept in
``meta["commands"]``, a prompt command (below) as its prompt's turn. What a command sends the
model is the user turn before the reply it caused, marked ``meta["command"]`` (the rule: a
logged reply always follows the user turn that caused it):

- ``/ask``, ``/code``, ``/architect``, ``/context`` with a prompt, ``/ok``: the prompt, as
  ``_generic_chat_command`` sends it. The coder it runs logs the prompt again as an input
  (``Coder.run`` calls ``io.user_input``): that copy is the same turn, not a second one.
- ``/help <question>``, ``/lint``, and ``/voice`` of older versions: the coder they run logs
  what it sends as an input (``/help``: the question with aider's documentation; ``/lint``: each
  file's errors): that input is the turn, marked with the command.
- A command whose handler returns text, which ``Coder.run_one`` sends unlogged: ``/undo``
  (``prompts.undo_command_reply``, exact), ``/paste`` (the clipboard text, which aider also
  logs as tool output), a failing ``/test`` and, in older versions, ``/run`` (``prompts
  .run_output``), ``/web`` (the page) and ``/add`` (``prompts.added_files``). The text is
  rebuilt from aider's template and what the log shows (the command, its logged output, the
  files added); what the log lacks (a test's output, a page) is named in brackets, and the
  turn is marked ``meta["reconstructed"]``. Any other command a reply follows gets its input
  as typed, also marked reconstructed.

A turn whose text aider wrote (command output, the undo note, the help prompt, lint errors) is
marked ``meta["kind"] = "observation"``; a prompt, pasted or spoken text is the user's.

``/clear`` and ``/reset`` empty aider's chat history: no later request holds the turns before
them. Each is recorded in ``meta["clears"]`` (``command``, ``line``, ``index``: how many
messages of the transcript it sits on come before it) and the first message after it is marked
``meta["after_clear"]`` (the command); ``view="model"`` keeps only the messages after the last
one, what the last request held, so there every clear's ``index`` is 0 (nothing of that
transcript comes before any of them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..model import Block, Message, Text, Thinking
from .common import read_text

__all__ = ("COMMANDS", "REQUEST_COMMANDS", "has_aider_markers", "is_aider_log", "load_aider")

_SESSION = re.compile(r"# aider chat started at (?P<when>.+)")
_PROMPT_ANSWER = re.compile(r".*\(Y\)es/\(N\)o.*\[(Yes|No)\]: ?\S*\s*")
_THINK = re.compile(r"<(thinking-content-[0-9a-f]+)>(?P<body>.*?)</\1>", re.S)
#: aider's in-chat commands (its ``Commands.cmd_*`` methods), to resolve an abbreviation as
#: ``Commands.matching_commands`` does (``/dr x`` is ``/drop x``; ``/a`` matches several). The
#: compaction's list of commands that ask the model nothing takes aider's from here
#: (:data:`REQUEST_COMMANDS` left out).
COMMANDS: Final = frozenset(
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
#: Commands whose text is a request to the model (a prompt command's argument; ``/ok`` sends
#: its own request). Every other command asks the model nothing.
REQUEST_COMMANDS: Final = _PROMPT_COMMANDS | {"/ok"}
#: Commands that empty aider's chat history (``_clear_chat_history``).
_CLEARS: Final = frozenset({"/clear", "/reset"})
#: What ``/ok`` sends (through ``/code``), its arguments appended.
_OK: Final = "Ok, please go ahead and make those changes."
#: aider's ``prompts.undo_command_reply``, ``prompts.run_output`` and ``prompts.added_files``
#: (``aider/prompts.py``).
_UNDO_REPLY: Final = (
    "I did `git reset --hard HEAD~1` to discard the last edits. Please wait for further"
    " instructions before attempting that change again. Feel free to ask relevant questions about"
    " why the changes were reverted."
)
_RUN_OUTPUT: Final = "I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n"
_ADDED_FILES: Final = (
    "I added these files to the chat: {fnames}\nLet me know if there are others we should add."
)
#: aider's status lines around a command's output, not the output itself.
_STATUS = re.compile(r"Added \d+ lines? of output to the chat\.|Add .* to the chat\? .*|Running .*")
_ADDED = re.compile(r"Added (?P<name>.+) to the chat\.?")
_ADDED_OUTPUT = re.compile(r"Added (?P<n>\d+) lines? of output to the chat\.")


def _command(text: str) -> tuple[str, str, str | None] | None:
    """``(command, arguments, prompt)`` for an input aider reads as an in-chat command
    (``Commands.is_command``: its first character is ``/`` or ``!``; ``!x`` is ``/run x``), the
    prompt being what it sends the model as the user's message, if anything; None for any
    other input. An unknown or ambiguous command is named as typed (aider sends nothing)."""
    if not text or text[0] not in "/!":
        return None
    if text[0] == "!":
        return "/run", text[1:].strip(), None
    word = text.split(maxsplit=1)[0] if text.strip() else text
    rest = text[len(word) :].strip()
    matches = [c for c in COMMANDS if c.startswith(word)]
    name = matches[0] if len(matches) == 1 else word
    if name in _PROMPT_COMMANDS and rest:
        return name, rest, rest
    if name == "/ok":
        return name, rest, f"{_OK} {rest}" if rest else _OK
    return name, rest, None


@dataclass
class _Pending:
    """A command run since the last user turn: the reply that follows it, with no input
    between, is the model's answer to what the command sent."""

    name: str
    args: str
    text: str  # as typed
    tool_from: int  # its tool output starts at this index of the session's tool lines


@dataclass
class _Session:
    started: str
    line: int
    messages: list[Message] = field(default_factory=list)
    tool_lines: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    clears: list[dict[str, Any]] = field(default_factory=list)
    user_lines: int = 0
    prompt_answers: int = 0


def _stand_in(p: _Pending, tool_lines: list[str]) -> tuple[str, dict[str, Any]]:
    """The user turn a command sent for a reply that follows it with no logged input: aider's
    text where it is fixed, else rebuilt from aider's template and what the log shows."""
    out = [line for line in tool_lines[p.tool_from :] if not line.startswith("Tokens:")]
    meta: dict[str, Any] = {"command": p.name, "kind": "observation", "reconstructed": True}
    if p.name == "/undo":  # cmd_undo: prompts.undo_command_reply when send_undo_reply
        return _UNDO_REPLY, {"command": p.name, "kind": "observation"}
    if p.name == "/paste" and out:  # cmd_paste: tool_output(text); return text
        return "\n".join(out), {"command": p.name}
    if p.name in ("/test", "/run"):  # cmd_run: prompts.run_output (a failing /test returns it)
        shown = [line for line in out if not _STATUS.fullmatch(line)]
        added = next((m for line in out if (m := _ADDED_OUTPUT.fullmatch(line))), None)
        missing = f"{added['n']} lines of output" if added else "output"
        output = "\n".join(shown) if shown else f"[{missing}, not in the log]"
        command = p.args or "[the test command, not in the log]"
        return _RUN_OUTPUT.format(command=command, output=output), meta
    if p.name == "/web":  # cmd_web: the page, under its URL
        return f"Here is the content of {p.args}:\n\n[the page, not in the log]", meta
    if p.name == "/add":  # cmd_add of early versions: prompts.added_files
        names = [m["name"] for line in out if (m := _ADDED.fullmatch(line))]
        return _ADDED_FILES.format(fnames=", ".join(names)), meta
    if p.name == "/lint" and out:  # cmd_lint: the errors it shows, sent to a lint coder
        errors = [line for line in out if not line.startswith("Fix lint errors in ")]
        return "\n".join(errors), meta
    if p.name == "/help" and p.args:  # cmd_help: the question, with aider's docs around it
        return p.args, meta
    return p.text, {"command": p.name, "reconstructed": True}


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
        self.user_line = 0  # the line of the input being read
        self.reply: list[str] = []
        self.in_quote = False  # the previous line was aider tool output (``> ``)
        # aider ends each line it writes for the user's input and its tool output with two
        # spaces: where the file kept them, a ``#### `` or ``> `` line without them is the
        # model's (a heading, a blockquote, a markdown file's line in an edit)
        self.marked = marked
        self.pending: _Pending | None = None  # a command run since the last user turn
        self.echo: str | None = None  # a prompt command's prompt, which its coder logs again
        self.logged_by: str | None = None  # a command whose coder logs what it sends
        self.linting = False  # in a /lint: each file it fixes runs a coder
        self.cleared: str | None = None  # a clear since the last message

    @property
    def cur(self) -> _Session:
        if not self.sessions:
            self.sessions.append(_Session("", 1))
        return self.sessions[-1]

    def add(self, message: Message) -> None:
        if self.cleared is not None:
            message = Message(
                message.role,
                message.blocks,
                message.id,
                message.stop_reason,
                {**message.meta, "after_clear": self.cleared},
            )
            self.cleared = None
        self.cur.messages.append(message)

    def flush_user(self) -> None:
        # aider logs an empty input as ``<blank>`` and sends nothing to the model
        text = "\n".join(self.user)
        self.user = []
        if not text or text == "<blank>":
            return
        command = _command(text)
        if command is None:
            echo, self.echo = self.echo, None
            if echo is not None and text == echo:  # the prompt command's coder logged it
                return
            if self.logged_by == "/help" and not text.startswith("# Question: "):
                self.logged_by = None  # not Help.ask's prompt: the help did not run
            meta: dict[str, Any] = {}
            if self.logged_by is None:  # typed by the user
                self.linting = False
            else:  # what that command's coder sent
                meta["command"] = self.logged_by
                if self.logged_by != "/voice":  # aider's text, not the user's
                    meta["kind"] = "observation"
                self.logged_by = None
            self.pending = None
            self.add(Message("user", (Text(text),), meta=meta))
            return
        name, args, prompt = command
        if prompt is None:  # a prompt command is its user turn
            self.cur.commands.append(text)
        self.echo = self.logged_by = self.pending = None
        self.linting = name == "/lint"
        if prompt is not None:  # what aider sends the model for it
            self.add(Message("user", (Text(prompt),), meta={"command": name}))
            self.echo = prompt
        elif name in _CLEARS:  # aider empties its chat history: later requests start here
            s = self.cur
            s.clears.append({"command": name, "line": self.user_line, "index": len(s.messages)})
            self.cleared = name
        else:
            if name == "/voice" or (name == "/help" and args):
                self.logged_by = name
            self.pending = _Pending(name, args, text, len(self.cur.tool_lines))

    def flush_reply(self, *, closed: bool, tokens: str | None = None) -> None:
        msg = _reply(self.reply, closed, tokens)
        self.reply = []
        if msg is None:
            return
        if self.pending is not None:  # what the command sent is the turn before the reply
            text, meta = _stand_in(self.pending, self.cur.tool_lines)
            self.add(Message("user", (Text(text),), meta=meta))
        self.pending = self.echo = self.logged_by = None
        self.add(msg)

    def tool_line(self, line: str) -> None:
        self.cur.tool_lines.append(line)
        if self.linting and line.startswith("Fix lint errors in "):
            # confirmed (the default is yes), the file's errors go to a lint coder, logged
            answer = line.rsplit(":", 1)[-1].strip().lower()
            self.logged_by = "/lint" if answer in ("", "y", "yes") else None

    def feed(self, n: int, raw: str) -> None:
        line = _strip_md_break(raw)
        quoted, self.in_quote = self.in_quote, False
        models = self.marked and not raw.endswith("  ")  # not a line aider marked as its own
        if m := _SESSION.fullmatch(line):
            self.flush_user()
            self.flush_reply(closed=False)
            self.sessions.append(_Session(m.group("when"), n))
            self.pending = self.echo = self.logged_by = self.cleared = None
            self.linting = False
        elif line.startswith("####") and not models:
            self.flush_reply(closed=False)
            self.cur.user_lines += 1
            body = line[5:] if line.startswith("#### ") else line[4:]
            if _PROMPT_ANSWER.fullmatch(body):
                self.cur.prompt_answers += 1
            else:
                if not self.user:
                    self.user_line = n
                self.user.append(body)
        elif (line.startswith("> ") or line == ">") and not (models and self.reply):
            # not ``>>>>>>> REPLACE`` of an edit, nor a blockquote in the model's reply
            self.flush_user()
            self.tool_line(line[2:])
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


def has_aider_markers(path: Path) -> bool:
    """Whether the file holds a line only aider writes: a session header or a user input
    (``#### ...``). Any other text would read as a single reply of the model.

    Raises:
        TranscriptError: the file is not UTF-8.
    """
    return any(
        _SESSION.fullmatch(line := _strip_md_break(raw)) or line.startswith("####")
        for raw in _lines(path)
    )


def _lines(path: Path) -> list[str]:
    """The file's lines as text-mode reading gives them (``\\r\\n`` and ``\\r`` end lines too)."""
    lines = read_text(path).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines and not lines[-1] else lines


def load_aider(path: Path, *, view: str = "full") -> list[tuple[list[Message], dict[str, Any]]]:
    """One ``(messages, meta)`` per aider session in the file, in order; ``view="model"``
    keeps of each only the messages after its last ``/clear`` or ``/reset``.

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
            "clears": s.clears,
            "applied_edits": sum(1 for t in s.tool_lines if t.startswith("Applied edit to")),
        }
        messages = s.messages
        if view == "model" and s.clears:  # what the last request held
            messages = messages[s.clears[-1]["index"] :]
            # indexes count the messages of this transcript: none is before any clear
            meta["clears"] = [{**c, "index": 0} for c in s.clears]
        out.append((messages, meta))
    return out
