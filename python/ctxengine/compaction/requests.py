"""Which user-role messages are the user's requests, and the request each one makes.

A user-role message is not always the user speaking. Agent harnesses send a command's output
back as a user message (SWE-agent's and OpenHands' observations, marked by their importers
with ``meta["kind"]``), and Claude Code writes user records of its own: caveats, a command's
output, a skill's instructions (``meta["is_meta"]`` when the importer saw the record's
``isMeta``, and recognizable by their text when that mark is gone). A summary lists none of
them as a request, never keeps one as the newest request, and never takes one for the goal;
their files and identifiers are still read (:mod:`~ctxengine.compaction.facts`). A slash
command (``/mode``, ``/model x``, ``/clear``) tells the harness what to do, not the agent: it
is no request either, unless it is a command wrapper whose arguments are one
(``/beads set up credo``). A message built with :meth:`Message.user` carries no such mark:
its text is a request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ..transcript.importers.aider import COMMANDS as AIDER_COMMANDS
from ..transcript.importers.aider import REQUEST_COMMANDS as AIDER_REQUEST_COMMANDS

__all__ = (
    "OBSERVATION_KINDS",
    "goal_text",
    "is_observation",
    "request_text",
    "written_by_harness",
)

#: The ``meta["kind"]`` of a user-role message a harness wrote from a command's output or for
#: context of its own (importers set it): SWE-agent's observations in a text-action run
#: (``observation``), OpenHands' error observations (``error``), its workspace context and
#: microagent knowledge (``recall``) and its condensation summaries (``summary``); pi's
#: output of a shell command run from its prompt (``bashExecution``: a command's output, the
#: command in its first line), an extension's messages (``custom``, ``hookMessage``) and
#: its stored summaries (``branchSummary``, ``compactionSummary``).
OBSERVATION_KINDS: Final = frozenset(
    {
        "observation",
        "error",
        "recall",
        "summary",
        "bashExecution",
        "custom",
        "hookMessage",
        "branchSummary",
        "compactionSummary",
    }
)

#: User messages a harness writes, not the user: Claude Code's command output and caveat
#: wrappers, a skill's instructions, its interruption note, SWE-agent's demonstration of
#: another task.
_HARNESS: Final = re.compile(
    r"<(?:local-command-[\w-]+|system-reminder|command-message|command-name)>"
    r"|\[Request interrupted by user"
    r"|Base directory for this skill: "
    r"|Here is a demonstration of how to correctly accomplish this task\.",
)
#: A word that may be a slash command (``/mode``, ``/model gpt-4o``, ``/plugin:cmd``), its
#: first word not a path (``/etc/hosts``); or a lone ``/`` (a command menu opened and sent).
_SLASH: Final = re.compile(r"/([A-Za-z][\w:-]*)(?:\s|$)|/\Z")
#: The commands of agent CLIs that set up or drive the harness: with arguments or without, they
#: ask the agent nothing. Not those whose arguments are a request to the model (``/review``,
#: ``/init``; aider's ``/ask``, ``/code``, ``/architect``, ``/context``, ``/ok``). aider's come
#: from its importer's list (:data:`ctxengine.transcript.importers.aider.COMMANDS`, less its
#: ``REQUEST_COMMANDS``), the others (Claude Code, pi, Codex) are kept here. A name may mean
#: another command in another harness: Claude Code's ``/context`` shows the context's use and
#: asks nothing, so it is here though aider's ``/context <prompt>`` is a request (an aider log
#: never reaches this check with it: its importer makes the prompt the user turn).
_OTHER_HARNESS_COMMANDS: Final = frozenset(
    {"add-dir", "agents", "approvals", "bashes", "bug", "changelog", "clear", "compact", "config",
    "context", "copy", "cost", "diff", "doctor", "exit", "export", "fork", "help", "hooks",
    "hotkeys", "ide", "install-github-app", "login", "logout", "mcp", "memory", "mention", "mode",
    "model", "name", "new", "output-style", "permissions", "plugin", "pr-comments",
    "privacy-settings", "quit", "release-notes", "reload", "resume", "rewind", "sandbox",
    "session", "settings", "share", "status", "statusline", "terminal-setup", "theme", "todos",
    "tree", "undo", "upgrade", "usage", "vim"}
)  # fmt: skip
_HARNESS_COMMANDS: Final = _OTHER_HARNESS_COMMANDS | {
    name[1:] for name in AIDER_COMMANDS - AIDER_REQUEST_COMMANDS
}
_COMMAND_ARGS: Final = re.compile(r"<command-args>(.*?)</command-args>", re.S)
_COMMAND_NAME: Final = re.compile(r"<command-name>\s*(/?[^<\s]+)\s*</command-name>")
#: Words of a bare acknowledgement or greeting ("ok", "yes, continue", "thanks!").
_ACK_WORDS: Final = frozenset(
    {"ok", "okay", "k", "kk", "yes", "y", "yep", "yeah", "yup", "no", "nope", "sure", "thanks",
    "thank", "you", "thx", "ty", "continue", "go", "on", "ahead", "proceed", "next", "done",
    "cool", "great", "nice", "good", "perfect", "fine", "alright", "right", "hi", "hello", "hey",
    "lgtm", "please", "do", "it", "very", "much"}
)  # fmt: skip


def is_observation(meta: Mapping[str, Any] | None) -> bool:
    """Whether a user-role message with this ``meta`` is a harness's observation or context
    (its ``kind`` is one of :data:`OBSERVATION_KINDS`), not the user speaking."""
    return meta is not None and meta.get("kind") in OBSERVATION_KINDS


def _marked(meta: Mapping[str, Any] | None) -> bool:
    """Whether an importer marked the message as the harness's: ``is_meta``, ``is_demo``, an
    observation."""
    if not meta:
        return False
    return bool(meta.get("is_meta") or meta.get("is_demo")) or is_observation(meta)


def written_by_harness(text: str, meta: Mapping[str, Any] | None = None) -> bool:
    """Whether a user-role message was written by the harness: an observation
    (:func:`is_observation`), a record marked ``is_meta`` or ``is_demo``, or a text that
    starts as Claude Code's wrappers, a skill's instructions, an interruption note or
    SWE-agent's demonstration do (a command wrapper with arguments is the user's)."""
    if _marked(meta):
        return True
    stripped = text.strip()
    return _HARNESS.match(stripped) is not None and "<command-args>" not in stripped


def request_text(text: str, meta: Mapping[str, Any] | None = None) -> str | None:
    """The request a user message makes, as a summary lists it (whitespace around it left
    out); None when it makes none: a message the harness wrote (:func:`written_by_harness`)
    or a slash command. A command wrapper with arguments
    (``<command-name>/x</command-name><command-args>do y</command-args>``) makes the request
    ``/x do y`` when its arguments are one."""
    return _request(text, meta, goal=False)


def goal_text(text: str, meta: Mapping[str, Any] | None = None) -> str | None:
    """The request a user message makes, when it can be a summary's goal: a request
    (:func:`request_text`) that is not a bare acknowledgement or greeting of at most four
    words (``ok, continue``, ``thanks``, ``hi``; a command's arguments neither)."""
    return _request(text, meta, goal=True)


def _request(text: str, meta: Mapping[str, Any] | None, *, goal: bool) -> str | None:
    if _marked(meta):
        return None
    stripped = text.strip()
    args = _COMMAND_ARGS.search(stripped) if "<command-args>" in stripped else None
    if args is not None:
        wanted = _request(args.group(1), None, goal=goal)
        if wanted is None:
            return None
        name = _COMMAND_NAME.search(stripped)
        return f"{name.group(1)} {wanted}" if name else wanted
    if not stripped or _HARNESS.match(stripped) or _command(stripped):
        return None
    if goal and len(stripped) <= 60:  # four words of acknowledgement at most
        words = re.findall(r"[^\W_]+", stripped.lower())
        if len(words) <= 4 and all(w in _ACK_WORDS for w in words):
            return None
    return stripped


def _command(text: str) -> bool:
    """Whether ``text`` (stripped) is a slash command: a lone ``/``, a ``/word`` alone, or one
    of :data:`_HARNESS_COMMANDS` with its arguments. Any other ``/word`` followed by more is a
    request: the user writing about a path (``/tmp is full, clean it up``), or a custom or a
    plugin's command (``/plugin:command args``: a prompt the harness expands, as its wrapper
    with arguments is read)."""
    m = _SLASH.match(text)
    if m is None:
        return False
    name = m.group(1)
    if name is None or not text[m.end() :].strip():
        return True
    return name.lower() in _HARNESS_COMMANDS
