"""Key facts of a stretch of conversation, extracted deterministically before anything is
summarized: files read and modified, tool failures, exact identifiers, every user request, open
asks, workspace rules and pinned facts. They become the structured sections of every summary,
whichever summarizer wrote its prose, so a summarizer cannot lose them.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import re
import sys
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from itertools import chain, compress, count
from operator import is_not
from pathlib import Path
from typing import Any, Final, Generic, Protocol, TypeVar

from .._core import read_first_line, read_identifier_kinds, read_identifiers, read_shell_files
from ..errors import ConfigError
from ..tokens import on_clear_cache
from ..transcript import Message, ToolCall
from .requests import request_text

__all__ = (
    "Failure",
    "KeyFacts",
    "extract_facts",
    "files_touched",
    "first_line",
    "fold_latest",
    "latest_lines",
    "latest_of",
    "message_scope",
    "message_text",
    "newest_request",
    "read_rules",
    "settle_failures",
    "verbatim_request",
)

_V = TypeVar("_V")
_MISS: Final = object()


class TextMemo(Generic[_V]):
    """``read(text)`` kept by text, for texts read again render after render (a session
    compacts the same stretch each time it grows), while the texts kept hold at most
    ``chars`` characters in all; the oldest go first. An ``lru_cache`` bounds how many texts
    it keeps, not their size: 8,192 tool outputs of a megabyte each held 8 GB for the life of
    the process. A text longer than ``chars`` is read, never kept. Emptied by
    :func:`ctxengine.clear_cache`."""

    __slots__ = ("chars", "held", "lock", "memo", "read")

    def __init__(self, read: Callable[[str], _V], chars: int) -> None:
        self.read = read
        self.chars = chars
        self.held = 0
        self.memo: dict[str, _V] = {}
        self.lock = threading.Lock()
        on_clear_cache(self.cache_clear)

    def __call__(self, text: str) -> _V:
        got = self.memo.get(text, _MISS)
        if got is not _MISS:
            return got  # type: ignore[return-value]
        value = self.read(text)
        n = len(text)
        if n <= self.chars:
            with self.lock:  # sessions rendered in threads share it
                memo = self.memo
                if text not in memo:
                    self.held += n
                    while self.held > self.chars and memo:
                        oldest = next(iter(memo))
                        del memo[oldest]
                        self.held -= len(oldest)
                    memo[text] = value
        return value

    def cache_clear(self) -> None:
        """Forget every text."""
        with self.lock:
            self.memo.clear()
            self.held = 0


MAX_LINE: Final = 240
_PATH_KEYS: Final = ("file_path", "path", "filename", "file", "notebook_path", "target_file")
_READ_TOOLS: Final = frozenset(
    {"read", "read_file", "readfile", "view", "view_file", "open", "open_file", "cat"}
    | {"notebookread", "read_many_files", "get_file_contents"}
)
_WRITE_TOOLS: Final = frozenset(
    {"edit", "multiedit", "write", "write_file", "create", "create_file", "insert"}
    | {"notebookedit", "replace", "edit_file", "search_replace", "delete_file", "str_replace"}
    | {"apply_patch", "patch", "write_to_file", "replace_in_file"}
)
_EDITOR_TOOLS: Final = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "editor"})
_EDITOR_READ: Final = frozenset({"view"})
#: Tools that run a shell command (a failure line names their command; the summary of
#: summaries knows such a call again by it).
SHELL_TOOLS: Final = frozenset(
    {"bash", "execute_bash", "shell", "run_terminal_cmd", "terminal", "exec", "run_command"}
    | {"run_shell_command", "local_shell", "cmd", "sh"}
)
_SHELL_READ: Final = frozenset(
    {"cat", "head", "tail", "less", "more", "nl", "bat", "wc", "grep", "rg", "ag", "sed", "awk"}
    | {"diff", "open", "view", "file", "stat"}
)
_SHELL_WRITE: Final = frozenset({"tee", "touch", "rm", "mv", "cp", "truncate", "chmod"})
#: The commands whose file operands :func:`_read_shell_files` reads (perl: with ``-i``).
_SHELL_FILE_COMMANDS: Final = _SHELL_READ | _SHELL_WRITE | {"perl"}
_TEXT_ACTION: Final = re.compile(r"```[^\n]*\n(open|create|edit|insert)\b([^\n]*)\n", re.M)
#: SWE-agent's status line ``(Open file: PATH)``, then the end of the line or ``(Current
#: directory: ...)``: a path may hold ")" ("foo (copy).py").
_OPEN_FILE: Final = re.compile(
    r"\(Open file: ([^\n]+?)\)(?=[ \t]*(?:\n|$|\(Current directory: ))", re.MULTILINE
)
#: Label of the line of a summary's ``## Files`` naming the file open where it ends
#: (:attr:`KeyFacts.open_file`).
OPEN_LABEL: Final = "Open: "
_PATCH_FILE: Final = re.compile(
    r"^(?:\*\*\* (?:Add|Update|Delete) File: |\+\+\+ b/|--- a/)(\S+)", re.M
)
_AIDER_EDIT: Final = re.compile(r"^(\S+\.\w{1,8})\n```[^\n]*\n<<<<<<< SEARCH", re.M)
_EXIT: Final = re.compile(
    r"(?:exit(?:ed)?(?: with)?(?: status| code)|exit_code|returncode|return code)[\s:=]*(-?\d+)",
    re.I,
)
_ERRORISH: Final = re.compile(
    r"error|fail|exception|traceback|denied|not found|no such|cannot|can't|fatal|invalid|refused",
    re.I,
)
#: :data:`_EXIT` and :data:`_ERRORISH` without ``re.I`` (their letters are all lowercase),
#: for ASCII text lowered (:func:`_read_failure_line`).
_EXIT_LOWER: Final = re.compile(_EXIT.pattern)
_ERRORISH_LOWER: Final = re.compile(_ERRORISH.pattern)
_URL: Final = re.compile(r"https?://[^\s<>\"'`)\]]+")
_HASH: Final = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b")
_UUID: Final = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_PATHLIKE: Final = re.compile(r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+\.\w{1,8}\b")
_TICKET: Final = re.compile(r"(?<![\w#])(?:[A-Z][A-Z0-9]+-\d+|#\d{2,})\b")
#: Necessary for a match of :data:`_HASH` or :data:`_UUID` (7 hex characters in a row; the
#: UUID pattern is case-insensitive) and of :data:`_TICKET` (``X-1`` or ``#12``).
_HEX_RUN: Final = re.compile(r"[0-9a-fA-F]{7}")
_TICKET_HINT: Final = re.compile(r"[A-Z0-9]-\d|#\d\d")
_QUESTION: Final = re.compile(r"[^\n]{8,}\?\s*$", re.M)
_SUMMARY_HEAD: Final = "[Summary of the earlier conversation"
_SUMMARY_COUNT: Final = re.compile(re.escape(_SUMMARY_HEAD) + r": (\d+) messages\]")


@dataclass(slots=True, init=False)
class Seen:
    """What one compaction learned of one message; computed once, however many of its steps
    read the message (the chunk summaries, the facts of the whole stretch, the token counts,
    the cache key). ``message`` keeps the object alive, so its ``id()`` stays its key."""

    message: Message
    text: str
    facts: _MessageFacts | None
    joined: str | None
    count: Any
    tokens: int
    prose: tuple[tuple[str, ...], str] | None  # the extractive summary's reading
    digest: bytes | None  # of the joined text, for the chunk cache's keys

    def __init__(self, message: Message, text: str) -> None:
        # written out (one is made per message of a stretch): the generated __init__ of
        # eight fields took twice as long
        self.message = message
        self.text = text
        self.facts = self.joined = self.count = self.prose = self.digest = None
        self.tokens = 0


_T = TypeVar("_T")
F = TypeVar("F", bound=Callable[..., Any])
_SCOPE: ContextVar[dict[int, Seen] | None] = ContextVar("ctxengine_compaction", default=None)
#: What a :func:`message_scope` derived from a whole stretch of messages (keys name the step
#: and hold the messages' identities; see :func:`stretch_memo`).
_STRETCH: ContextVar[dict[Any, Any] | None] = ContextVar("ctxengine_stretches", default=None)


@contextmanager
def message_scope() -> Iterator[None]:
    """Within it, what compaction derives from a message (its text, key facts, token count) is
    computed once per message object and reused. A compaction opens one; nested scopes share
    the outer one. Messages are immutable, so reuse cannot change a result; the memo lives as
    long as the scope."""
    if _SCOPE.get() is not None:
        yield
        return
    token = _SCOPE.set({})
    stretches = _STRETCH.set({})
    try:
        yield
    finally:
        _STRETCH.reset(stretches)
        _SCOPE.reset(token)


class _Paused:
    """:func:`paused_collector`'s context manager: a class, not a generator (a render enters
    several, and a generator's context manager cost more than the rest of the pause)."""

    __slots__ = ("_paused",)

    def __enter__(self) -> None:
        self._paused = gc.isenabled()
        if self._paused:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._paused:
            resume_collector()

    def __call__(self, fn: F) -> F:
        """``fn`` run with the collector paused (as a decorator: a pause per call)."""

        @functools.wraps(fn)
        def paused(*args: Any, **kwargs: Any) -> Any:
            with _Paused():
                return fn(*args, **kwargs)

        return paused  # type: ignore[return-value]


def paused_collector() -> _Paused:
    """Pause the cyclic garbage collector (when it runs) for a synchronous step that makes
    many long-lived objects and frees none: a step of compaction reading a long stretch,
    loading a long transcript (``ctxengine.state.bulk`` is this function), or a render's
    export (``ctxengine.inject.turn.inject``: a few dicts and lists per kept message, kept
    for the next render or handed out; in a cold render of 1,000 messages the young and
    full collections it ran took a quarter of the time, freeing nothing; a redactor's
    ``redact_text`` runs inside it). Reading 100,000
    messages makes several objects per message, and the collector, run every few hundred of
    them, scanned the whole heap three times (1 s of a cold 100k-message render) finding
    nothing to free. The collector runs again at the end of the step as before, even on an
    error. Never held across an ``await``: no other task runs without the collector."""
    return _Paused()


def resume_collector() -> None:
    """Run the paused collector again, the objects made while it was paused counted as old.

    They are what the step keeps (the columns of a history, a stretch's facts), and the first
    young collection after the pause scanned all of them, then the next older one again:
    150 ms of a cold 100k-message render, freeing nothing. ``gc.freeze`` then ``gc.unfreeze``
    moves every tracked object to the oldest generation without looking at them (two list
    splices), where the next full collection finds any cycle among them as it would have.
    A process that froze objects of its own (a server before it forks; CPython 3.12 starts
    with a few frozen) keeps them frozen: then the objects stay young, as before. So do those
    of a short step (under :data:`PROMOTE_AT` made, the allocations of a few young
    collections): scanning them costs little, and a long-lived process doing many small steps
    (a warm render's few new messages) keeps collecting its cycles the usual way."""
    if gc.get_count()[0] >= PROMOTE_AT and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
    gc.enable()


#: The objects a paused step must have made for :func:`resume_collector` to count them old:
#: the collector's first threshold (CPython's default, 700), past which a running collector
#: would have scanned them in a young collection during the step. A cold render of a
#: 1,000-message session makes about 1,300 while it loads the history, the real
#: 914-message session as many again in its compaction; left young, their scans in the young
#: and middle generations (and the full collections their promotion through them triggered)
#: took about 1 ms of a 10 ms cold render of the first, 5 ms of a 40 ms one of the second,
#: 18 ms of a 10,000-message one, all finding nothing to free (at 2,048, the 1,300 of the
#: first still cost a young collection, 0.2 ms, on every cold render). A warm render's steps
#: make a few dozen: they stay young.
PROMOTE_AT: Final = 700


def scope_memo() -> dict[int, Seen] | None:
    """The memo of the current :func:`message_scope` (None outside one)."""
    return _SCOPE.get()


def stretch_memo() -> dict[Any, Any] | None:
    """The current :func:`message_scope`'s memo of what was derived from whole stretches of
    messages (a chunk's extractive summary, a merge's note messages), None outside a scope:
    the trials of a landing summarize overlapping stretches, most of their chunks the same.
    An entry's key holds its messages' ``id()`` and its value the messages themselves, so an
    entry is valid while the scope lives (callers check the messages are the same objects)."""
    return _STRETCH.get()


def scoped(m: Message) -> Seen | None:
    """What the current :func:`message_scope` holds of ``m`` (made on first use); None outside
    a scope."""
    memo = _SCOPE.get()
    if memo is None:
        return None
    key = id(m)
    seen = memo.get(key)
    if seen is None or seen.message is not m:
        seen = memo[key] = Seen(m, m.text)
    return seen


def memoized(m: Message, field: str, make: Callable[[Message, str], _T]) -> _T:
    """``make(m, text)``, kept in ``m``'s entry of the current :func:`message_scope` under
    ``field`` (``"facts"``, ``"joined"``); computed on every call outside a scope."""
    seen = scoped(m)
    if seen is None:
        return make(m, m.text)
    value: _T | None = getattr(seen, field)
    if value is None:
        value = make(m, seen.text)
        setattr(seen, field, value)
    return value


def message_text(m: Message) -> str:
    """``m.text``, computed once per message inside a :func:`message_scope`."""
    seen = scoped(m)
    return m.text if seen is None else seen.text


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed tool call: tool ``name``, ``call_id``, ``status``, ``exit_code`` (when the
    output states one) and the first error ``line`` of its output (tool text: quote it).

    ``fixed_by``: the id of a later call that fixed it (:func:`settle_failures`), None while
    nothing did. ``call``: what the call did (:func:`call_summary`: its command, or the file
    it named), empty when its message is not among those read. ``digest``: when ``call`` is
    cut (ending in "…"), the :func:`call_digest` of what it names whole, else empty."""

    name: str
    call_id: str
    status: str
    exit_code: int | None
    line: str
    fixed_by: str | None = None
    call: str = ""
    digest: str = ""


@dataclass(slots=True)
class KeyFacts:
    """What a summary must keep. Lists are oldest first and free of duplicates."""

    requests: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    files_modified: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    """One per call (:func:`settle_failures`): the newest failure of each, in the order of
    those, ``fixed_by`` set on the ones a later call fixed."""
    identifiers: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    """The open asks: of the messages, else those of the earlier summaries among them that
    are still open (see :func:`_pending_at`)."""
    rules: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)
    carried: dict[str, list[str]] = field(default_factory=dict)
    """Section lines carried over from earlier summaries found among the messages."""
    summaries: int = 0
    """Earlier summaries found among the messages."""
    summarized: int = 0
    """Messages those earlier summaries stood for (the count in each one's first line)."""
    succeeded_calls: list[ToolCall] = field(default_factory=list)
    """The calls whose results succeeded, in the order the results came: only when an
    earlier summary among the messages carries ``Tool Failures`` (one of its failures may be
    fixed by them, :func:`carried_fixes`), else empty."""
    open_file: str | None = None
    """The file open at the end, when the harness showed one (SWE-agent's ``(Open file: …)``
    observation, or an earlier summary's ``Open:`` line): the file an edit without a path
    (SWE-agent's ``edit``/``insert``) in the next messages changes. A summary carries it, so
    such an edit after a compaction is still listed among the files modified."""

    @property
    def latest_request(self) -> str | None:
        """The newest user request, in full."""
        return self.requests[-1] if self.requests else None


def first_line(text: str, limit: int = MAX_LINE) -> str:
    """The first non-blank line of ``text``, whitespace collapsed, cut to ``limit`` chars
    (an ASCII text's read natively: :func:`_first_line` is the reference)."""
    if text.isascii() and type(limit) is int and 0 < limit <= sys.maxsize:
        native = read_first_line(text, limit)
        if native is not None:
            return native
    return _first_line(text, limit)


def _first_line(text: str, limit: int) -> str:
    """:func:`first_line` in Python (any text; the reference of the native reading).

    Read from the text's first non-whitespace character (what comes before it on its line is
    whitespace, which the collapse drops) to the end of that line, found in a short piece of
    the text: a long message is not split into all its lines for the first one."""
    found = _NON_SPACE.search(text)
    if found is None:
        return ""
    start = found.start()
    lines = text[start : start + _FIRST_LINE_PIECE].splitlines()
    if len(lines) == 1 and start + _FIRST_LINE_PIECE < len(text):
        lines = text[start:].splitlines()  # the line may run on past the piece
    line = " ".join(lines[0].split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


#: What ``str.strip`` does not strip (``\S`` is the complement of ``str.isspace``).
_NON_SPACE: Final = re.compile(r"\S")
#: The piece :func:`first_line` splits first (a longer first line is split from the rest).
_FIRST_LINE_PIECE: Final = 1024


#: ``Message.meta`` key marking a summary written by compaction.
SUMMARY_META: Final = "ctxengine_summary"


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary written by compaction (so it is folded into the next
    summary by its sections instead of being taken for a user request)."""
    if message.meta.get(SUMMARY_META):
        return True
    return message.role == "user" and message_text(message).startswith(_SUMMARY_HEAD)


def newest_request(messages: Sequence[Message]) -> int:
    """Index of the newest message of ``messages`` that makes a request
    (:func:`~ctxengine.compaction.requests.request_text`) or is an earlier summary (it holds
    the requests it stands for); -1 when none does. Observations, the harness's user
    messages and slash commands are passed over."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and (is_summary(m) or request_text(message_text(m), m.meta)):
            return i
    return -1


def _add(target: list[str], items: Iterable[str], seen: set[str] | None = None) -> None:
    """Append the new, non-empty ``items`` to ``target``; ``seen`` (the set of ``target``,
    kept by a caller adding many times) saves building it on every call."""
    if seen is None:
        seen = set(target)
    for item in items:
        if item and item not in seen:
            seen.add(item)
            target.append(item)


_NOT_A_PATH: Final = re.compile(r"[*?$`<>|=&]")
_EXTENSION: Final = re.compile(r"\.\w{1,8}$")


def _clean_path(token: str) -> str | None:
    token = token.strip().strip("'\"`,;:()[]{}")
    if not token or token.startswith("-") or "://" in token or len(token) > 300:
        return None
    if _NOT_A_PATH.search(token) or token in {"/dev/null", ".", ".."}:
        return None
    if "/" in token or _EXTENSION.search(token):
        return token
    return None


#: One piece of a shell word: whitespace, plain characters, an escape, a quoted string, a
#: comment, or (an error for ``shlex``) a lone backslash or an unclosed quote.
_PIECE: Final = re.compile(
    r"""([ \t\r\n]+)|([^ \t\r\n'"\\#]+)|\\(.)|'([^']*)'|"((?:[^"\\]|\\.)*)"|(#)|(.)""", re.S
)
_DQ_ESCAPE: Final = re.compile(r'\\(["\\])')


def _shell_words(part: str) -> list[str]:
    """``shlex.split(part, comments=True)`` in one regex pass (POSIX rules: a backslash escapes
    the next character, single quotes are literal, in double quotes a backslash escapes only
    ``"`` and itself, ``#`` outside quotes starts a comment to the end of the line; words are
    separated by ``shlex``'s whitespace, space, tab, CR and LF), about 50 times faster.

    Raises:
        ValueError: an unclosed quote or a trailing backslash, as ``shlex`` does.
    """
    words: list[str] = []
    word: str | None = None
    for m in _PIECE.finditer(part):
        space, plain, escaped, single, double, comment, bad = m.groups()
        if space is not None or comment is not None:
            if word is not None:
                words.append(word)
                word = None
            if comment is not None:
                return words
            continue
        if bad is not None:
            raise ValueError(f"unbalanced shell quoting at {m.start()}")  # internal: caught
        if plain is not None:
            piece = plain
        elif escaped is not None:
            piece = escaped
        elif single is not None:
            piece = single
        else:
            piece = _DQ_ESCAPE.sub(r"\1", double)
        word = piece if word is None else word + piece
    if word is not None:
        words.append(word)
    return words


#: What separates the simple commands of a command line: ``&&``, ``||``, ``;``, ``|``, a newline.
_SEGMENT_BREAK: Final = re.compile(r"&&|\|\||[;|\n]")
#: The target of an output redirection (``>``, ``>>``; not ``2>`` nor ``&>``).
_REDIRECT: Final = re.compile(r"(?<![0-9&])>>?\s*([^\s;&|<>]+)")


def command_name(word: str) -> str:
    """``PurePosixPath(word).name`` (the program a command's first word runs), without building
    a path: its last part that is neither empty nor ``.`` (a tenth of the time)."""
    if "/" not in word:
        return "" if word == "." else word
    for part in reversed(word.split("/")):
        if part and part != ".":
            return part
    return ""


def _shell_segments(command: str) -> list[list[str]]:
    segments = []
    for part in _SEGMENT_BREAK.split(command):
        try:
            words = _shell_words(part)
        except ValueError:
            words = part.split()
        if words:
            segments.append(words)
    return segments


#: Options of grep, rg, ag, sed and perl whose value is the next word (a script, a pattern, a
#: count, a glob), never a file the command reads or changes; awk's ``-F`` and ``-v`` too.
_VALUE_OPTIONS: Final = frozenset(
    {"-e", "-f", "-A", "-B", "-C", "-m", "-g", "-t", "-M", "--regexp", "--expression", "--file"}
)
_AWK_VALUE_OPTIONS: Final = frozenset({"-f", "-F", "-v"})
#: Options after which the script or pattern is not the first operand.
_SCRIPT_OPTIONS: Final = frozenset({"-e", "-f", "--regexp", "--expression", "--file"})


def _file_operands(cmd: str, args: Sequence[str]) -> list[str]:
    """The file operands of a grep/rg/ag/sed/awk/perl command: not the script or pattern (the
    first operand, unless an ``-e``/``-f`` option gave it: a cluster ending in ``e`` such as
    perl's ``-pe`` or ``-pi -e`` too), not an option's value, not the empty backup suffix of
    BSD ``sed -i ''``."""
    values = _AWK_VALUE_OPTIONS if cmd == "awk" else _VALUE_OPTIONS
    operands: list[str] = []
    scripted = skip = False
    for a in args:
        if skip:
            skip = False
        elif a.split("=", 1)[0] in _SCRIPT_OPTIONS or (cmd == "awk" and a == "-f"):
            scripted, skip = True, "=" not in a
        elif a in values:
            skip = True
        elif a.startswith("-"):
            if a[1:2] != "-" and len(a) > 2 and a.endswith("e") and cmd != "awk":
                scripted = skip = True  # -pe, -ne, -pie: the script is the next word
        elif a:
            operands.append(a)
    return operands if scripted else operands[1:]


def _read_shell_files(command: str) -> tuple[list[str], list[str]]:
    """Files a shell command reads and modifies (a best-effort static reading). Cached: a
    compaction reads each command more than once (per chunk, then for the whole stretch); callers
    copy the lists before changing them. An ASCII command is read natively
    (``_core.read_shell_files``, about 20 times faster: a cold render of a session of a few
    hundred shell calls spent 2 ms splitting their words here), any other by
    :func:`_scanned_shell_files`, the reference the native reading is tested against."""
    native = read_shell_files(command) if command.isascii() else None
    return native if native is not None else _scanned_shell_files(command)


def _scanned_shell_files(command: str) -> tuple[list[str], list[str]]:
    """:func:`_read_shell_files` in Python (any text)."""
    read: list[str] = []
    modified: list[str] = []
    for target in _REDIRECT.findall(command):
        path = _clean_path(target)
        if path:
            modified.append(path)
    for words in _shell_segments(command):
        while words and ("=" in words[0] or words[0] in {"sudo", "env", "time", "command"}):
            words = words[1:]
        if not words:
            continue
        cmd = command_name(words[0])
        if cmd not in _SHELL_FILE_COMMANDS:
            continue  # neither reads nor changes a file (the lines of a here-document, too)
        args = [w for w in words[1:] if not w.startswith(">")]
        if cmd in {"grep", "rg", "ag", "sed", "awk", "perl"}:
            paths = [p for p in (_clean_path(a) for a in _file_operands(cmd, args)) if p]
        else:
            paths = [p for p in (_clean_path(a) for a in args) if p]
        in_place = (cmd == "sed" and any(a.startswith(("-i", "--in-place")) for a in args)) or (
            cmd == "perl" and any(a[:1] == "-" and a[1:2] != "-" and "i" in a for a in args)
        )
        if cmd in _SHELL_WRITE or in_place:
            modified.extend(paths[-1:] if cmd == "cp" else paths)
        elif cmd in _SHELL_READ:
            read.extend(paths)
    return read, modified


#: :func:`_read_shell_files`, kept: a compaction reads each command more than once (per
#: chunk, then for the whole stretch); callers copy the lists before changing them.
_shell_files: Final = TextMemo(_read_shell_files, 4_000_000)


def _argument_paths(args: dict[str, Any]) -> list[str]:
    if args.keys().isdisjoint(_PATH_KEYS):
        return []  # no path argument (a shell command's): asked of the keys at C speed
    paths = []
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            path = _clean_path(value)
            if path:
                paths.append(path)
        elif isinstance(value, list):
            paths.extend(p for p in (_clean_path(str(v)) for v in value) if p)
    return paths


#: One step of :func:`files_touched`'s reading of a message: ``R``/``W`` add files read /
#: modified, ``WC`` adds the current file (if any) to those modified, ``C`` sets it, and so
#: does ``O``: the harness showing it open (SWE-agent's ``(Open file: …)``).
_FileOp = tuple[str, Any]


def _shell_command(call: ToolCall) -> str:
    """The command line of a shell tool's ``call``: its ``command`` (or ``cmd``) argument, a
    list of words joined by spaces; the arguments themselves when they are text (no JSON
    object); empty when it names none."""
    args = call.arguments
    if not isinstance(args, dict):
        return args
    command = args.get("command", args.get("cmd", ""))
    return " ".join(map(str, command)) if isinstance(command, list) else str(command)


def _call_ops(call: ToolCall) -> list[_FileOp]:
    """The file steps of one tool call (see :data:`_FileOp`): what it reads and modifies, then
    the current file it leaves (its first path argument)."""
    name = call.name.lower()
    args = call.arguments
    if isinstance(args, dict):
        raw = ""
        paths = _argument_paths(args)
    else:
        raw = args if isinstance(args, str) else ""
        args, paths = {}, []
    ops: list[_FileOp]
    if name in SHELL_TOOLS:
        read, modified = _shell_files(_shell_command(call))
        ops = [("R", read), ("W", modified)]
    elif name in _EDITOR_TOOLS:
        sub = str(args.get("command", ""))
        ops = [("R", paths) if sub in _EDITOR_READ else ("W", paths)]
    elif name in {"apply_patch", "patch"} or "*** Begin Patch" in raw:
        text = raw or str(args.get("input", args.get("patch", "")))
        ops = [("W", [p for p in _PATCH_FILE.findall(text) if p != "/dev/null"])]
    elif name in _WRITE_TOOLS:
        ops = [("W", paths) if paths else ("WC", None)]
    elif name in _READ_TOOLS:
        ops = [("R", paths)]
    else:
        ops = []
    if paths:
        ops.append(("C", paths[0]))
    return ops


def _call_files(call: ToolCall, current: str | None) -> tuple[list[str], list[str]]:
    """Files one tool call reads and modifies (``current``: the file a write without a path
    argument edits)."""
    read: list[str] = []
    modified: list[str] = []
    for kind, value in _call_ops(call):
        if kind == "R":
            read += value
        elif kind == "W":
            modified += value
        elif kind == "WC" and current:
            modified.append(current)
    return read, modified


def _file_ops(m: Message, text: str) -> list[_FileOp]:
    """The file steps of message ``m`` (``text``: its text), in the order they happen."""
    ops: list[_FileOp] = []
    if m.role == "assistant":
        for call in m.tool_calls:
            ops += _call_ops(call)
        if "```" in text:
            for action, rest in _TEXT_ACTION.findall(text):
                words = rest.split()
                target = _clean_path(words[0]) if words else None
                if action == "open" and target:
                    ops += [("R", [target]), ("C", target)]
                elif action == "create" and target:
                    ops += [("W", [target]), ("C", target)]
                elif action in {"edit", "insert"}:
                    ops.append(("WC", None))
            # an aider edit block holds its marker (a search for it is cheaper than the pattern's)
            ops.append(("W", _AIDER_EDIT.findall(text) if "<<<<<<< SEARCH" in text else []))
    opened = _OPEN_FILE.findall(text) if m.role != "tool" and "(Open file: " in text else []
    for result in m.tool_results:
        tail = result.text[-400:]
        if "(Open file: " in tail:
            opened += _OPEN_FILE.findall(tail)
    if opened and opened[-1].strip() != "n/a":
        ops.append(("O", opened[-1].strip()))
    return ops


def _replay(steps: Iterable[list[_FileOp]]) -> tuple[list[str], list[str], str | None]:
    """Files read, files modified, and the file open at the end when the harness showed one
    (see :attr:`KeyFacts.open_file`)."""
    read: list[str] = []
    modified: list[str] = []
    read_seen: set[str] = set()
    modified_seen: set[str] = set()
    current: str | None = None
    shown = False
    for ops in steps:
        if ops:  # most messages have none: no step changes anything
            current, shown = _file_steps(
                ops, current, shown, read, read_seen, modified, modified_seen
            )
    return read, modified, current if shown else None


def _carried_open(carried: dict[str, list[str]]) -> list[_FileOp]:
    """The step an earlier summary's ``Open:`` line (its ``## Files``) stands for: the file
    open where that summary ends, which an edit without a path after it changes."""
    opened = [x[len(OPEN_LABEL) :] for x in carried.get("Files", ()) if x.startswith(OPEN_LABEL)]
    return [("O", opened[-1])] if opened and opened[-1] else []


def _file_steps(
    ops: Iterable[_FileOp],
    current: str | None,
    shown: bool,
    read: list[str],
    read_seen: set[str],
    modified: list[str],
    modified_seen: set[str],
) -> tuple[str | None, bool]:
    """Apply one message's file operations to the read and modified lists (each once, oldest
    first); returns the file open after them (SWE-agent's current file), and whether the
    harness showed an open file so far (``shown``, or an ``O`` step among ``ops``)."""
    for kind, value in ops:
        if kind == "C":
            current = value
        elif kind == "O":
            current, shown = value, True
        elif kind == "R":
            _add(read, value, read_seen)
        elif kind == "W":
            _add(modified, value, modified_seen)
        elif current:
            _add(modified, [current], modified_seen)
    return current, shown


def files_touched(messages: Sequence[Message]) -> tuple[list[str], list[str]]:
    """``(files read, files modified)`` by the tool calls of ``messages`` (and, for logs whose
    actions are text — SWE-agent commands, aider edit blocks — by those), oldest first."""
    read, modified, _ = _replay(_file_ops(m, message_text(m)) for m in messages)
    return read, modified


def _failure(name: str, call_id: str, text: str) -> Failure:
    code, line = _failure_line(text)
    return Failure(name, call_id, "error", code, line)


def _read_failure_line(text: str) -> tuple[int | None, str]:
    """The exit code a failed tool's output states, and its first error line (else its first
    line). Only lines up to the first error-looking one are collapsed, not the whole output.

    An ASCII output is searched lowered, with the patterns' case-sensitive forms
    (:data:`_EXIT_LOWER`, :data:`_ERRORISH_LOWER`): on ASCII text ``re.I`` matches exactly
    what they match in it lowered, at the same offsets, several times faster (a search with
    ``re.I`` tried every position)."""
    plain = text.isascii()
    match = _EXIT_LOWER.search(text.lower()) if plain else _EXIT.search(text)
    code = int(match.group(1)) if match else None  # digits: the same lowered
    errorish = _ERRORISH_LOWER.search if plain else _ERRORISH.search
    first = ""
    for raw in text.splitlines():
        if not raw.strip():
            continue
        ln = " ".join(raw.split())
        first = first or ln
        if errorish(ln.lower() if plain else ln) and not _EXIT.fullmatch(ln):
            first = ln
            break
    else:
        first = first or "(no output)"
    return code, first if len(first) <= MAX_LINE else first[: MAX_LINE - 1] + "…"


_failure_line: Final = TextMemo(_read_failure_line, 4_000_000)


def _identity(call: ToolCall) -> tuple[str | None, tuple[str, ...]]:
    """:func:`_call_identity`, each call's once per message scope (the trials of a landing
    settle the failures of overlapping stretches, most of their calls the same objects)."""
    memo = _STRETCH.get()
    if memo is None:
        return _call_identity(call)
    known: dict[int, tuple[ToolCall, tuple[str | None, tuple[str, ...]]]] | None = memo.get(
        "call identities"
    )
    if known is None:
        known = memo["call identities"] = {}
    hit = known.get(id(call))
    if hit is not None and hit[0] is call:
        return hit[1]
    value = _call_identity(call)
    known[id(call)] = (call, value)
    return value


def _call_identity(call: ToolCall) -> tuple[str | None, tuple[str, ...]]:
    """What makes a later call the same as ``call`` (:func:`settle_failures`): its key — the
    tool's name (case folded) and its arguments as the call sent them (their JSON text), a
    shell tool's command alone with its whitespace collapsed (``bash`` with ``pytest  -x`` is
    ``bash`` with ``pytest -x``, whatever its other arguments, such as Claude Code's
    ``description`` or a ``timeout``; one naming no command, by its arguments: whatever it
    ran, it is not every other such call); None for a write without a path argument, which edits
    the current file, unnamed in its arguments — and the files it writes when it is a file
    tool that writes (an edit, a write, an editor's command other than ``view``, a patch: the
    paths :func:`_call_ops` finds), not a shell command."""
    name = call.name.lower()
    if name in SHELL_TOOLS:
        command = " ".join(_shell_command(call).split())
        if command:  # else (no command argument) its arguments, as another tool's
            return f"{name}\0{command}", ()
    writes: list[str] = []
    if _writes(call):
        for kind, value in _call_ops(call):
            if kind == "WC":
                return None, ()
            if kind == "W":
                writes += value
    return f"{name}\0{call.arguments_json}", tuple(writes)


def settle_failures(
    failures: Sequence[Failure], calls: Mapping[str, tuple[int, ToolCall]], succeeded: Iterable[str]
) -> list[Failure]:
    """``failures`` (each call's first failed result, in the order they came), one per call,
    marked where a later call fixed them.

    A failure is **fixed later** by a call made after it (at a later position of ``calls``:
    call id → the position of the message that made it, and the call) whose result succeeded
    (its id in ``succeeded``, in the order the results came) and that is either the same call
    — the same tool with the same arguments (their JSON text), for a shell tool the same
    command with its whitespace collapsed (:func:`_call_identity`) — or, when the failed call
    is a file tool that writes (an edit or a write of a path, not a shell command), a file
    tool's write of each path it wrote (another edit of the same file). Nothing else fixes a
    failure: a different command, a later read, a shell command touching the file, a call
    whose result is missing. ``fixed_by`` names the newest call that fixed it (the newest
    position, then the newest result).

    A later failure of the same call replaces the earlier one: one failure per call, the
    newest, at its place. A call not among ``calls`` (its message not in the stretch) or a
    write without a path argument is its own: never the same as another call."""
    if not failures:
        return []
    read: list[tuple[Failure, int, str | None, tuple[str, ...]]] = []
    names: set[str] = set()
    writes = False
    for f in failures:
        made = calls.get(f.call_id)
        if made is None:
            read.append((f, -1, None, ()))
            continue
        key, paths = _identity(made[1])
        read.append((f, made[0], key, paths))
        names.add(made[1].name.lower())
        writes = writes or bool(paths)
    # the newest success of each key, and the newest file tool's write of each path, as
    # (position of the call, order of the result, call id)
    done: dict[str, tuple[int, int, str]] = {}
    written: dict[str, tuple[int, int, str]] = {}
    for n, call_id in enumerate(succeeded):
        made = calls.get(call_id)
        if made is None or not (made[1].name.lower() in names or (writes and _writes(made[1]))):
            continue
        key, paths = _identity(made[1])
        step = (made[0], n, call_id)
        if key is not None and step > done.get(key, _NEVER):
            done[key] = step
        for path in paths:
            if step > written.get(path, _NEVER):
                written[path] = step
    newest = {key: i for i, (_, _, key, _) in enumerate(read) if key is not None}
    out: list[Failure] = []
    for i, (f, at, key, paths) in enumerate(read):
        if key is not None and newest[key] != i:
            continue  # a later failure of the same call stands for it
        fixes = [done.get(key, _NEVER)] if key is not None else []
        later = [written.get(p, _NEVER) for p in paths]
        if later and min(later)[0] > at:
            fixes += later
        fix = max(fixes, default=_NEVER)
        made = calls.get(f.call_id)
        what, digest = named_call(made[1]) if made is not None else (f.call, f.digest)
        fixed_by = fix[2] if fix[0] > at else f.fixed_by
        out.append(replace(f, fixed_by=fixed_by, call=what, digest=digest))
    return out


#: The most characters :func:`call_summary` gives.
CALL_CHARS: Final = 60


def call_summary(call: ToolCall) -> str:
    """What ``call`` did, for its failure line: a shell tool's command, else the first file
    it named, else its arguments' JSON; whitespace collapsed, backticks and curly quotes
    made plain (the line quotes it in backticks, the tool's output in curly quotes), cut to
    :data:`CALL_CHARS` characters. A failure line without it read "bash [c7] status=error
    exit=1: “Command exited with code 1”": which command, the summary no longer said."""
    return named_call(call)[0]


def named_call(call: ToolCall) -> tuple[str, str]:
    """:func:`call_summary` of ``call``, and, when it is cut, the :func:`call_digest` of
    what it names whole (else "")."""
    return cut_call(_call_text(call))


def _call_text(call: ToolCall) -> str:
    """:func:`call_summary` of ``call`` before it is cut."""
    text = _shell_command(call) if call.name.lower() in SHELL_TOOLS else ""
    if not text.strip():
        paths = _argument_paths(call.arguments) if isinstance(call.arguments, dict) else []
        text = paths[0] if paths else call.arguments_json
    return " ".join(text.split()).translate(_PLAIN_QUOTES)


def cut_call(text: str, width: int = CALL_CHARS) -> tuple[str, str]:
    """``text`` (what a failure line names, whole) as the line gives it: whole when it has
    at most ``width`` characters, with no digest; else its first ``width - 1`` and "…",
    with its :func:`call_digest`."""
    if len(text) <= width:
        return text, ""
    return text[: width - 1] + "…", call_digest(text)


#: How many hex digits of :func:`call_digest` a failure line gives after a cut call: fewer
#: than the 7 from which a hex run is read as a hash identifier.
DIGEST_CHARS: Final = 6


def call_digest(text: str) -> str:
    """The first :data:`DIGEST_CHARS` hex digits of the SHA-256 of ``text`` (UTF-8): what a
    failure line whose call is cut writes after it (`` `git commit -m "fe…` #3fa9c2``), so
    that a summary of summaries still tells that call from another with the same first
    characters, and knows it again when it succeeds or fails after the summary
    (:func:`carried_fixes`). With the cut text it is matched with, two calls are confused
    only when they share their first characters and these 24 bits."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


#: Backticks and curly double quotes as plain quotes (:func:`call_summary`).
_PLAIN_QUOTES: Final = str.maketrans({"`": "'", "“": '"', "”": '"'})


def _writes(call: ToolCall) -> bool:
    """Whether ``call`` may be a file tool's write (:func:`_call_ops` finds its written files
    only for these: a write tool, an editor, a patch)."""
    name = call.name.lower()
    args = call.arguments
    return (
        name in _WRITE_TOOLS
        or name in _EDITOR_TOOLS
        or (isinstance(args, str) and "*** Begin Patch" in args)
    )


def _calls_at(plain: Sequence[Message], at: Iterable[int]) -> dict[str, tuple[int, ToolCall]]:
    """Call id → the position of the message of ``plain`` that made it (one of ``at``), and
    the call: what :func:`settle_failures` reads, made only when there are failures."""
    return {c.id: (i, c) for i in at for c in plain[i].tool_calls}


def _succeeded_calls(
    carried: Mapping[str, Sequence[str]],
    plain: Sequence[Message],
    with_calls: Sequence[int],
    succeeded: Sequence[str],
) -> list[ToolCall]:
    """:attr:`KeyFacts.succeeded_calls`: the calls of ``succeeded`` (their results' order)
    when ``carried`` holds failures, else none (nothing to fix, nothing read)."""
    if not carried.get("Tool Failures"):
        return []
    calls = _calls_at(plain, with_calls)
    return [calls[i][1] for i in succeeded if i in calls]


def carried_fixes(
    failed: Iterable[tuple[str, str, str]], succeeded: Sequence[ToolCall]
) -> dict[tuple[str, str, str], str]:
    """Which failures carried by an earlier summary a later call fixed: ``(tool, call,
    digest)`` → the id of the newest call of ``succeeded`` (the calls whose results
    succeeded, in their order, all made after the summary) that fixed it, for each of
    ``failed`` it fixed (``call``: the :func:`call_summary` its line gives; ``digest``: the
    :func:`call_digest` the line gives after a cut call, else "").

    A summary keeps a failed call by its line only (tool, id, and what it did, cut to
    :data:`CALL_CHARS`), so "fixed later" reads that line, as :func:`settle_failures` reads a
    call: a later call of the same tool whose summary is the same (for a shell tool its
    command, whitespace collapsed; for a file tool the file; for another tool its
    arguments) or, when the failed tool is a file tool that writes, a file tool's write of
    that file. A cut summary (ending in "…") names its call by its digest: a later call
    whose whole summary starts with the cut text and has that digest. A cut summary without
    one (a line written before digests were) is no call's: it stays unfixed."""
    whole: set[tuple[str, str]] = set()  # (tool, call) of the lines naming their call whole
    cut: dict[tuple[str, str], list[str]] = {}  # (tool, digest) → the cut calls
    for name, call, digest in failed:
        if not call.endswith("…"):
            if call:
                whole.add((name.lower(), call))
        elif digest:
            cut.setdefault((name.lower(), digest), []).append(call)
    if not (whole or cut) or not succeeded:
        return {}
    names = {name for name, _ in whole} | {name for name, _ in cut}
    writers: dict[str, list[str]] = {}  # a file → the file tools whose write of it failed
    for name, call in whole:
        if name in _WRITE_TOOLS or name in _EDITOR_TOOLS:
            writers.setdefault(call, []).append(name)
    cut_writers: dict[str, list[tuple[str, str]]] = {}  # digest → (tool, cut file)
    for (name, digest), calls in cut.items():
        if name in _WRITE_TOOLS or name in _EDITOR_TOOLS:
            cut_writers.setdefault(digest, []).extend((name, c) for c in calls)
    found: dict[tuple[str, str, str], str] = {}
    for made in succeeded:  # oldest first: the newest fix stays
        name = made.name.lower()
        if name in names:
            text = _call_text(made)
            if len(text) <= CALL_CHARS and (name, text) in whole:
                found[(name, text, "")] = made.id
            if cut:
                digest = call_digest(text)
                for c in cut.get((name, digest), ()):
                    if text.startswith(c[:-1]):
                        found[(name, c, digest)] = made.id
        if (writers or cut_writers) and _writes(made):
            for path in _identity(made)[1]:
                for tool in writers.get(path, ()):
                    found[(tool, path, "")] = made.id
                if cut_writers:
                    plain = " ".join(path.split()).translate(_PLAIN_QUOTES)
                    digest = call_digest(plain)
                    for tool, c in cut_writers.get(digest, ()):
                        if plain.startswith(c[:-1]):
                            found[(tool, c, digest)] = made.id
    out: dict[tuple[str, str, str], str] = {}
    for name, call, digest in failed:
        fix = found.get((name.lower(), call, digest if call.endswith("…") else ""))
        if fix is not None:
            out[(name, call, digest)] = fix
    return out


#: No success at all (before every position).
_NEVER: Final = (-1, -1, "")


def _identifiers(text: str) -> tuple[str, ...]:
    """:func:`_read_identifiers` of ``text``; a long text's kept in a cache (a short one is
    read again faster than a cache, missed by nearly every message of a long stretch, takes
    it: 60 of 500 ms of a 100,000-message stretch's facts)."""
    return _read_identifiers(text) if len(text) < _CACHED_FROM else _cached_identifiers(text)


#: The length from which :func:`_identifiers` keeps a text's reading.
_CACHED_FROM: Final = 512


def _read_identifiers(text: str) -> tuple[str, ...]:
    """URLs, UUIDs, hashes, paths and ticket ids in ``text``, in that order (each in text order):
    an ASCII text's read natively (``_core.read_identifiers``, a few times faster), any other
    by :func:`_scanned_identifiers`, the reference the native reading is tested against."""
    # only an ASCII text goes to the native reading (``isascii`` is a flag: asking for the UTF-8
    # of any other str would keep a copy of it inside the str for as long as it lives)
    if not text.isascii():
        return _mixed_identifiers(text)
    native = read_identifiers(text)
    return native if native is not None else _scanned_identifiers(text)


def _mixed_identifiers(text: str) -> tuple[str, ...]:
    """:func:`_read_identifiers` of a text that is not ASCII: the words around its characters
    that are not ASCII (:data:`_OTHER_RUN`) in Python, the ASCII text between them natively,
    each kind in text order.

    No identifier spans whitespace (no pattern matches it, nor does a lookbehind look past
    it), and what :func:`_hints` finds in a text is only what a match needs: so each word
    holds the identifiers it holds in the text, whichever words are read with it, and the
    text can be read in pieces cut at whitespace. Such texts (code with an arrow or a check
    mark in a comment: a few words of hundreds) took as long in Python as all the ASCII ones
    natively; a text in another script is still read in Python, in one piece."""
    plain: list[str] = []  # the ASCII pieces, read natively
    other: list[tuple[list[str], ...]] = []  # the readings of the pieces between them
    done = 0  # the text before it is read
    for m in _OTHER_RUN.finditer(text):
        if m.end() <= done:
            continue  # in the piece just read
        at = max(m.start(), done)
        # from after the space or newline before it (else from ``done``: a few ASCII words
        # more are read in Python, alike) to the whitespace after its last word
        start = max(text.rfind(" ", done, at), text.rfind("\n", done, at), done - 1) + 1
        end = _WORD_TAIL.match(text, m.end()).end()  # type: ignore[union-attr]
        plain.append(text[done:start])
        other.append(_scanned_kinds(text[start:end]))
        done = end
    plain.append(text[done:])
    if not any(chain.from_iterable(other)):
        # the words around the characters that are not ASCII hold no identifier (nearly
        # always: an arrow, a check mark, a box-drawing line): the identifiers are those of
        # the ASCII pieces, each kind in text order, so those of the pieces joined by spaces
        # (no identifier spans whitespace), read in one native call instead of one a piece
        native = read_identifiers(" ".join(plain))
        if native is not None:
            return native
    kinds: tuple[list[str], ...] = ([], [], [], [], [])
    for piece, found in zip(plain, other, strict=False):
        _add_kinds(kinds, piece)
        for kind, items in zip(kinds, found, strict=True):
            kind += items
    _add_kinds(kinds, plain[-1])
    return tuple(chain.from_iterable(kinds))


#: The characters of a text that are not ASCII, with the ASCII stretches shorter than 128
#: characters between them (those are read in Python with them: a text in another script
#: is read in one piece, not word by word). No possessive quantifier (Python 3.11 has them,
#: 3.10 refuses the pattern): the two classes are disjoint, so giving back ASCII characters
#: never lets a match go on, and a stretch that ends a run is read at most twice.
_OTHER_RUN: Final = re.compile(r"[^\x00-\x7f](?:[\x00-\x7f]{0,127}[^\x00-\x7f])*")
#: The rest of a word (to the whitespace after it; ``\S`` as the identifiers' patterns read it).
_WORD_TAIL: Final = re.compile(r"\S*")


def _add_kinds(kinds: tuple[list[str], ...], text: str) -> None:
    """Extend each of ``kinds`` with the identifiers of that kind in ``text``."""
    native = read_identifier_kinds(text) if text.isascii() else None
    read = native if native is not None else _scanned_kinds(text)
    for kind, found in zip(kinds, read, strict=True):
        kind += found


def _scanned_identifiers(text: str) -> tuple[str, ...]:
    """:func:`_read_identifiers` in Python (any text)."""
    return tuple(chain.from_iterable(_scanned_kinds(text)))


def _scanned_kinds(text: str) -> tuple[list[str], ...]:
    """The identifiers of ``text`` by kind, each in text order: URLs, UUIDs, hashes, paths,
    ticket ids.

    No identifier spans whitespace, so each pattern runs only on the words that can hold one
    (a cheap test per word) instead of at every position of the text: the same matches, found
    about 30 times faster on tool-heavy sessions.
    """
    found = [u.rstrip(".,;:!?") for u in _URL.findall(text)] if "://" in text else []
    stripped = _URL.sub(" ", text) if found else text
    uuids: list[str] = []
    hashes: list[str] = []
    paths: list[str] = []
    tickets: list[str] = []
    # What a hash, a UUID or a ticket id needs somewhere in the text: without it no word
    # holds one, and the per-word patterns are not run.
    hexes, ticketed = _hints(stripped)
    if not hexes and not ticketed and "/" not in stripped:
        return found, uuids, hashes, paths, tickets  # no word can hold any other kind
    for word in stripped.split():
        if hexes and len(word) >= 7 and not word.isalpha():
            if len(word) >= 36 and "-" in word:
                uuids += _UUID.findall(word)
            hashes += [h for h in _HASH.findall(word) if not h.isdigit()]
        if "/" in word and "." in word:
            paths += _PATHLIKE.findall(word)
        if ticketed and ("-" in word or "#" in word):
            tickets += _TICKET.findall(word)
    return found, uuids, hashes, paths, tickets


_cached_identifiers: Final = TextMemo(_read_identifiers, 16_000_000)


def _hints(text: str) -> tuple[bool, bool]:
    """Whether :data:`_HEX_RUN` and :data:`_TICKET_HINT` are found in ``text``. The hex run is
    looked for in the text mapped to its character classes (:data:`_HEX_CLASS`, each byte of its
    UTF-8 at C speed, a byte of a non-ASCII character never a hex digit), several times faster
    than a pattern that tests every position; the ticket's hint is searched for only when the
    text holds a ``-`` or a ``#`` (found at C speed). An ASCII text is read natively
    (:func:`_read_identifiers`): this is the reading of any other, and the reference."""
    hexes = b"xxxxxxx" in text.encode("utf-8", "surrogatepass").translate(_HEX_CLASS)
    return hexes, ("-" in text or "#" in text) and _TICKET_HINT.search(text) is not None


#: Each byte → ``x`` for a hex digit (:data:`_HEX_RUN`'s class), else ``.``.
_HEX_CLASS: Final = bytes(
    ord("x") if chr(b) in "0123456789abcdefABCDEF" else ord(".") for b in range(256)
)


def _pending_of(
    messages: Sequence[Message], read: Sequence[_MessageFacts], carried: Sequence[str] = ()
) -> list[str]:
    """The open asks of ``messages`` (``read``: their readings, one each).

    ``carried``: the ``## Pending`` lines of the earlier summaries among the messages (not in
    ``messages``). They stay open only while nothing in the newer messages settled them, and
    only when these ask nothing themselves (their asks are the newest): a request among the
    newer messages closes them all (the user spoke after them: the request to answer is the
    newer one, the questions were answered or passed over), and an assistant message with
    text closes the ask to answer the earlier newest request (it was answered, as
    :data:`ANSWER_LATEST` of the messages themselves is read). The newest 3 that stay are
    kept. A user message that makes no request (an observation, the harness's text) neither
    asks nor settles anything."""
    last = next((i for i in range(len(read) - 1, -1, -1) if read[i].request is not None), None)
    asks = _open_asks(messages, read, last)
    if asks or not carried or last is not None:
        return asks
    replied = any(m.role == "assistant" and read[i].text for i, m in enumerate(messages))
    still = [a for a in carried if not (replied and a.startswith(ANSWER_LATEST))]
    return newest_unique(still)[-3:]


#: How a pending ask to answer the newest request begins.
ANSWER_LATEST: Final = "answer the latest request: "


def _open_asks(
    messages: Sequence[Message], read: Sequence[_MessageFacts], last: int | None
) -> list[str]:
    """The asks of ``messages``: to answer the newest request (``last``: its index, None:
    none) when no assistant text follows it, the newest assistant text's questions, the
    questions to the user of the tool calls since that request."""
    asks: list[str] = []
    if last is not None:
        request = read[last].request
        if request and not any(
            messages[i].role == "assistant" and read[i].text for i in range(last + 1, len(read))
        ):
            asks.append(ANSWER_LATEST + first_line(request))
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant" and read[i].text.strip():
            # the newest 3 questions, each once (a message may ask the same one again, or
            # questions alike in their first MAX_LINE characters)
            questions = newest_unique(first_line(q) for q in _QUESTION.findall(read[i].text))
            asks += ["assistant asked: " + q for q in questions[-3:]]
            break
    for m in messages[last or 0 :]:
        for call in m.tool_calls:
            if call.name in {"AskUserQuestion", "ask_user", "ask_followup_question"}:
                asks.append("question to the user: " + first_line(call.arguments_json, 200))
    return newest_unique(asks)


def newest_unique(items: Iterable[str]) -> list[str]:
    """``items`` each once, at its newest (last) place, in their order."""
    out = list(dict.fromkeys(reversed(list(items))))
    out.reverse()
    return out


#: A ``## Name`` heading of a structured summary section.
SECTION_HEADING: Final = re.compile(r"(?m)^## (.+?)\s*$")
#: The line of a newest request that is one line: it follows on the same line.
LATEST_LINE: Final = "- (latest) "
#: The line of a newest request of several lines: it follows verbatim between two fences.
LATEST_BLOCK: Final = "- (latest), verbatim:"
_BACKTICKS: Final = re.compile(r"`+")
_FENCE: Final = re.compile(r"`{3,}")


def verbatim_request(text: str) -> str:
    """``text`` as a summary keeps a request verbatim: byte for byte, without the whitespace
    around it (as the key facts hold every request)."""
    return text.strip()


def latest_lines(request: str) -> list[str]:
    """The summary lines of the newest request: one line when it is one (the layout every
    one-line request has always had), else :data:`LATEST_BLOCK` and the request verbatim in a
    fence of more backticks than any run in it, so no line of it closes the fence (nor is it
    read as a section heading: :func:`fold_latest`)."""
    text = verbatim_request(request)
    if "\n" not in text:
        return [LATEST_LINE + text]
    longest = max(map(len, _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [LATEST_BLOCK, fence, *text.split("\n"), fence]


def fold_latest(text: str) -> tuple[str, str | None]:
    """A summary with its newest request's block (:func:`latest_lines`) folded to one
    ``- (latest) <first line>`` line, and the request it held (None: no block). What a section
    parser reads: a line of the request could look like a heading or a list item.

    The block is the first :data:`LATEST_BLOCK` line after the ``## Requests`` heading
    followed by a fence; a block the engine cut short (a summary shortened to its room) runs
    to the end of the text."""
    if LATEST_BLOCK not in text:
        return text, None
    lines = text.split("\n")
    try:
        start = lines.index("## Requests") + 1
    except ValueError:
        return text, None
    for n in range(start, len(lines) - 1):
        if lines[n] != LATEST_BLOCK or not _FENCE.fullmatch(lines[n + 1]):
            continue
        fence = lines[n + 1]
        try:
            end = lines.index(fence, n + 2)
        except ValueError:
            end = len(lines)
        body = lines[n + 2 : end]
        first = next((line.strip() for line in body if line.strip()), "")
        folded = [*lines[:n], LATEST_LINE + first, *lines[end + 1 :]]
        return "\n".join(folded), "\n".join(body)
    return text, None


def latest_of(summary: str) -> str | None:
    """The newest request a summary holds, as it holds it: its block's content, else its
    ``- (latest) `` line (with the two-space continuation lines a summary of an earlier
    version wrote after it)."""
    folded, request = fold_latest(summary)
    if request is not None:
        return request
    lines = folded.split("\n")
    try:
        start = lines.index("## Requests") + 1
    except ValueError:
        return None
    for n in range(start, len(lines)):
        line = lines[n]
        if line.startswith("## "):
            break
        if line.startswith(LATEST_LINE):
            out = [line.removeprefix(LATEST_LINE)]
            for more in lines[n + 1 :]:
                if not more.startswith("  "):
                    break
                out.append(more[2:])
            return "\n".join(out)
    return None


def parse_sections(text: str) -> dict[str, list[str]]:
    """The items of each ``## `` section of a summary (list items without their ``- ``); the
    newest request by its first line (:func:`fold_latest`)."""
    parts = SECTION_HEADING.split(fold_latest(text)[0])
    found: dict[str, list[str]] = {}
    for name, content in zip(parts[1::2], parts[2::2], strict=False):
        items: list[str] = []
        for line in content.splitlines():
            if not line.strip() or line.startswith("```"):
                continue
            if line.startswith("  ") and items:
                continue  # an earlier version's continuation of a latest request: not an item
            items.append(line[2:] if line.startswith("- ") else line)
        found[name.strip()] = items
    return found


@dataclass(slots=True, init=False)
class _MessageFacts:
    """What one message gives :func:`extract_facts`, whatever its neighbours: an earlier
    summary gives its sections (``carried``) and nothing else; otherwise its request, its
    identifiers, its tool calls (id → name), its failed results (call id, name, text), the
    ids of its results that succeeded and its file steps (see :data:`_FileOp`)."""

    text: str
    carried: dict[str, list[str]] | None
    request: str | None
    idents: tuple[str, ...]
    calls: tuple[tuple[str, str], ...]
    errors: tuple[tuple[str, str | None, str], ...]
    succeeded: tuple[str, ...]
    files: list[_FileOp]

    def __init__(
        self,
        text: str,
        carried: dict[str, list[str]] | None = None,
        files: list[_FileOp] | None = None,
    ) -> None:
        # written out, as Seen's (one is made per message of a stretch): the generated
        # __init__, with a default factory, took half the time of the rest of _read
        self.text = text
        self.carried = carried
        self.request = None
        self.idents = self.calls = self.errors = self.succeeded = ()
        self.files = [] if files is None else files


def _read(m: Message, text: str) -> _MessageFacts:
    role = m.role
    if m.meta.get(SUMMARY_META) or (role == "user" and text.startswith(_SUMMARY_HEAD)):
        # an earlier summary (:func:`is_summary`)
        return _MessageFacts(text, carried=parse_sections(text))
    # each role's own path, and _file_ops only when it can find anything: tool calls, a
    # fenced action, an opened file (a message of each kind is read once per landing, so
    # this is the cold render's cost per message)
    if role == "tool":
        results = m.tool_results
        if len(results) == 1:  # nearly every result: no tuples built by comprehensions
            result = results[0]
            output = result.text
            facts = _MessageFacts(
                text, files=None if "(Open file: " not in output[-400:] else _file_ops(m, text)
            )
            if result.is_error:
                facts.errors = ((result.call_id, result.name, output),)
            else:
                facts.succeeded = (result.call_id,)
            return facts
        facts = _MessageFacts(text, files=_file_ops(m, text))
        facts.errors = tuple([(r.call_id, r.name, r.text) for r in results if r.is_error])
        facts.succeeded = tuple([r.call_id for r in results if not r.is_error])
        return facts
    if role == "assistant":
        calls = m.tool_calls
        if "```" in text or "(Open file: " in text:
            files = _file_ops(m, text)
        elif not calls:
            files = []
        elif len(calls) == 1:  # _file_ops of a message whose text holds no action
            files = _call_ops(calls[0])
        else:
            files = [op for call in calls for op in _call_ops(call)]
        facts = _MessageFacts(text, files=files)
        idents = _identifiers(text) if text else ()  # a call's message often has no text
        if calls:
            facts.calls = tuple([(c.id, c.name) for c in calls])
            for c in calls:
                found = _identifiers(c.arguments_json)
                if found:
                    idents += found
        facts.idents = idents
        return facts
    facts = _MessageFacts(text, files=None if "(Open file: " not in text else _file_ops(m, text))
    if role == "system" or not text.strip():
        return facts
    facts.idents = _identifiers(text)
    # an observation or the harness's text is read for its identifiers and files, never
    # listed as a request (see ctxengine.compaction.requests)
    facts.request = request_text(text, m.meta)
    return facts


def facts_of(m: Message) -> _MessageFacts:
    """What ``m`` gives :func:`extract_facts` (its text; for an earlier summary its sections):
    read once per message inside a :func:`message_scope`."""
    return memoized(m, "facts", _read)


def extract_facts(
    messages: Sequence[Message],
    *,
    rules: Sequence[str] = (),
    pinned: Sequence[str] = (),
    max_identifiers: int = 40,
) -> KeyFacts:
    """The key facts of ``messages``. Earlier summaries among them contribute their sections.

    Each message is read alone (once per message inside a :func:`message_scope`, however many
    stretches it is part of); what depends on its neighbours — a failure's tool name, the
    current file of an edit without a path, duplicates — is settled here, in order.

    Args:
        messages: The stretch to summarize, oldest first.
        rules: Workspace rules to keep verbatim (see :func:`read_rules`).
        pinned: Protected facts (e.g. protected grains' text) the summary must hold verbatim.
        max_identifiers: Most identifiers kept (the newest).
    """
    with paused_collector():
        memo = _STRETCH.get()
        if memo is None or len(messages) < RESUMABLE:
            return _extract_facts(messages, rules, pinned, max_identifiers)
        return _resumed(memo, messages, rules, pinned).facts(max_identifiers)


def _extract_facts(
    messages: Sequence[Message], rules: Sequence[str], pinned: Sequence[str], max_identifiers: int
) -> KeyFacts:
    facts = KeyFacts(rules=list(rules), pinned=[p for p in pinned if p.strip()])
    names: dict[str, str] = {}
    with_calls: list[int] = []
    succeeded: list[str] = []
    seen_calls: set[str] = set()
    carried_seen: dict[str, set[str]] = {}
    idents: list[str] = []
    plain: list[Message] = []
    read: list[_MessageFacts] = []
    steps: list[list[_FileOp]] = []
    memo = _SCOPE.get()
    for m in messages:
        if memo is None:
            mf = _read(m, m.text)
        else:  # facts_of(m), inline: every message of a long stretch passes here
            seen = memo.get(id(m))
            if seen is None or seen.message is not m:
                seen = memo[id(m)] = Seen(m, m.text)
            known = seen.facts
            mf = known if known is not None else _read(m, seen.text)
            seen.facts = mf
        if mf.carried is not None:
            facts.summaries += 1
            head = _SUMMARY_COUNT.match(mf.text)
            facts.summarized += int(head.group(1)) if head else 1
            for name, lines in mf.carried.items():
                if name not in facts.carried:
                    facts.carried[name], carried_seen[name] = [], set()
                _add(facts.carried[name], lines, carried_seen[name])
            steps.append(_carried_open(mf.carried))
            continue
        if mf.calls:
            names.update(mf.calls)
            with_calls.append(len(plain))
        plain.append(m)
        read.append(mf)
        steps.append(mf.files)
        if mf.request is not None:
            facts.requests.append(mf.request)
        idents += mf.idents
        for call_id, tool, output in mf.errors:
            if call_id not in seen_calls:
                seen_calls.add(call_id)
                facts.failures.append(_failure(tool or names.get(call_id, "tool"), call_id, output))
        succeeded += mf.succeeded
    if facts.failures:
        facts.failures = settle_failures(facts.failures, _calls_at(plain, with_calls), succeeded)
    facts.succeeded_calls = _succeeded_calls(facts.carried, plain, with_calls, succeeded)
    facts.files_read, facts.files_modified, facts.open_file = _replay(steps)
    _add(facts.identifiers, idents)
    facts.identifiers = facts.identifiers[-max_identifiers:]
    facts.pending = _pending_of(plain, read, facts.carried.get("Pending", ()))
    return facts


#: From this many messages on, :func:`extract_facts` inside a message scope keeps its reading
#: of the stretch (:class:`_Scan`), and a later stretch with a common prefix resumes it (as
#: do the counts and the extractive summary's reading). The trials of a landing in a session
#: of a few hundred messages share all but their last hundred or so: the real 914-message
#: session's four read 737 messages, then about 120 each, instead of 750 each.
RESUMABLE: Final = 256
#: A :class:`_Scan` marks where it can be resumed every this many messages (a mark is a few
#: lengths; a resumed scan reads again from the last mark in the shared prefix).
MARK_EVERY: Final = 128


@dataclass(slots=True)
class _Mark:
    """Where a :class:`_Scan` stood before its ``n``-th message: the lengths of its lists
    (each only grows), its counts, the current file and whether the harness showed one."""

    n: int
    requests: int
    failures: int
    succeeded: int
    idents: int
    plain: int
    summaries: int
    summarized: int
    carried: dict[str, int]
    files_read: int
    files_modified: int
    current: str | None
    shown: bool


class _Scan:
    """:func:`_extract_facts`'s reading of a stretch, kept so that a stretch with a common
    prefix resumes it at a :class:`_Mark` (the trials of a landing summarize stretches that
    differ only near their ends): the same steps, message by message, in the same order, so
    the same facts. Its lists only grow; a resumed scan is a new one, made of copies of the
    lists' prefixes, so this one stays what it read."""

    __slots__ = (
        "carried",
        "carried_seen",
        "current",
        "failed",
        "failures",
        "files_modified",
        "files_read",
        "ident_seen",
        "idents",
        "marks",
        "messages",
        "modified_seen",
        "names",
        "pinned",
        "plain",
        "read",
        "read_seen",
        "requests",
        "rules",
        "shown",
        "succeeded",
        "summaries",
        "summarized",
        "with_calls",
    )  # fmt: skip

    def __init__(self, rules: Sequence[str], pinned: Sequence[str]) -> None:
        self.messages: list[Message] = []
        self.rules = list(rules)
        self.pinned = [p for p in pinned if p.strip()]
        self.requests: list[str] = []
        self.failures: list[Failure] = []
        self.failed: set[str] = set()
        self.names: dict[str, str] = {}
        self.with_calls: list[int] = []  # the positions in plain of the messages with calls
        self.succeeded: list[str] = []  # the ids of the results that succeeded, in order
        self.carried: dict[str, list[str]] = {}
        self.carried_seen: dict[str, set[str]] = {}
        self.summaries = 0
        self.summarized = 0
        self.idents: list[str] = []  # each once, in the order first found
        self.ident_seen: set[str] = set()
        self.plain: list[Message] = []
        self.read: list[_MessageFacts] = []
        self.files_read: list[str] = []
        self.files_modified: list[str] = []
        self.read_seen: set[str] = set()
        self.modified_seen: set[str] = set()
        self.current: str | None = None
        self.shown = False
        self.marks: list[_Mark] = []

    def _mark(self) -> None:
        self.marks.append(
            _Mark(
                len(self.messages),
                len(self.requests),
                len(self.failures),
                len(self.succeeded),
                len(self.idents),
                len(self.plain),
                self.summaries,
                self.summarized,
                {name: len(lines) for name, lines in self.carried.items()},
                len(self.files_read),
                len(self.files_modified),
                self.current,
                self.shown,
            )
        )

    def resumed(self, at: int) -> _Scan:
        """A new scan of this one's first messages, up to the last mark at most ``at``."""
        mark = next(m for m in reversed(self.marks) if m.n <= at)
        out = _Scan(self.rules, ())
        out.pinned = self.pinned
        out.messages = self.messages[: mark.n]
        out.requests = self.requests[: mark.requests]
        out.failures = self.failures[: mark.failures]
        out.failed = {f.call_id for f in out.failures}
        out.succeeded = self.succeeded[: mark.succeeded]
        out.plain = self.plain[: mark.plain]
        out.read = self.read[: mark.plain]
        out.with_calls = self.with_calls[: bisect_left(self.with_calls, mark.plain)]
        names, read = out.names, out.read
        for i in out.with_calls:  # the messages with calls, not every one read
            names.update(read[i].calls)
        out.carried = {name: self.carried[name][:n] for name, n in mark.carried.items()}
        out.carried_seen = {name: set(lines) for name, lines in out.carried.items()}
        out.summaries, out.summarized = mark.summaries, mark.summarized
        out.idents = self.idents[: mark.idents]
        out.ident_seen = set(out.idents)
        out.files_read = self.files_read[: mark.files_read]
        out.files_modified = self.files_modified[: mark.files_modified]
        out.read_seen, out.modified_seen = set(out.files_read), set(out.files_modified)
        out.current, out.shown = mark.current, mark.shown
        out.marks = [m for m in self.marks if m.n < mark.n]  # extend marks mark.n again
        return out

    def extend(self, messages: Sequence[Message], memo: dict[int, Seen]) -> None:
        """Read ``messages`` after those read so far (:func:`_extract_facts`'s loop, and
        :func:`_replay`'s and the identifiers' steps of each message as it comes)."""
        done = self.messages
        requests, failures, failed, names = self.requests, self.failures, self.failed, self.names
        with_calls, succeeded = self.with_calls, self.succeeded
        idents, ident_seen, plain, read = self.idents, self.ident_seen, self.plain, self.read
        files_read, files_modified = self.files_read, self.files_modified
        read_seen, modified_seen = self.read_seen, self.modified_seen
        current, shown = self.current, self.shown
        n = len(done)
        for m in messages:
            if n % MARK_EVERY == 0:
                self.current, self.shown = current, shown
                self._mark()
            n += 1
            done.append(m)
            seen = memo.get(id(m))
            if seen is None or seen.message is not m:
                seen = memo[id(m)] = Seen(m, m.text)
            mf = seen.facts
            if mf is None:
                mf = seen.facts = _read(m, seen.text)
            if mf.carried is not None:
                self.summaries += 1
                head = _SUMMARY_COUNT.match(mf.text)
                self.summarized += int(head.group(1)) if head else 1
                for name, lines in mf.carried.items():
                    if name not in self.carried:
                        self.carried[name], self.carried_seen[name] = [], set()
                    _add(self.carried[name], lines, self.carried_seen[name])
                opened = _carried_open(mf.carried)
                if opened:
                    current, shown = opened[0][1], True
                continue
            if mf.calls:
                names.update(mf.calls)
                with_calls.append(len(plain))
            plain.append(m)
            read.append(mf)
            if mf.request is not None:
                requests.append(mf.request)
            for item in mf.idents:
                if item and item not in ident_seen:
                    ident_seen.add(item)
                    idents.append(item)
            for call_id, tool, output in mf.errors:
                if call_id not in failed:
                    failed.add(call_id)
                    failures.append(_failure(tool or names.get(call_id, "tool"), call_id, output))
            if mf.succeeded:
                succeeded += mf.succeeded
            if mf.files:
                current, shown = _file_steps(
                    mf.files, current, shown, files_read, read_seen, files_modified, modified_seen
                )
        self.current, self.shown = current, shown

    def facts(self, max_identifiers: int) -> KeyFacts:
        """The key facts of what was read (lists of their own)."""
        return KeyFacts(
            requests=list(self.requests),
            files_read=list(self.files_read),
            files_modified=list(self.files_modified),
            failures=settle_failures(
                self.failures, _calls_at(self.plain, self.with_calls), self.succeeded
            )
            if self.failures
            else [],
            identifiers=self.idents[-max_identifiers:],
            pending=_pending_of(self.plain, self.read, self.carried.get("Pending", ())),
            rules=list(self.rules),
            pinned=list(self.pinned),
            carried={name: list(lines) for name, lines in self.carried.items()},
            succeeded_calls=_succeeded_calls(
                self.carried, self.plain, self.with_calls, self.succeeded
            ),
            summaries=self.summaries,
            summarized=self.summarized,
            open_file=self.current if self.shown else None,
        )


def common_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    """How many first messages ``a`` and ``b`` share (the same objects)."""
    return next(compress(count(), map(is_not, a, b)), min(len(a), len(b)))


class _Reading(Protocol):
    @property
    def messages(self) -> Sequence[Message]: ...


_R = TypeVar("_R", bound=_Reading)


def longest_shared(readings: Iterable[_R], messages: Sequence[Message]) -> tuple[_R | None, int]:
    """The reading (a scan kept in a message scope) sharing the longest prefix with
    ``messages``, and how many messages that prefix holds (None and 0 when none shares any)."""
    best: _R | None = None
    shared = 0
    for reading in readings:
        n = common_prefix(reading.messages, messages)
        if n > shared:
            best, shared = reading, n
    return best, shared


def _resumed(
    memo: dict[Any, Any], messages: Sequence[Message], rules: Sequence[str], pinned: Sequence[str]
) -> _Scan:
    """The :class:`_Scan` of ``messages``: one kept in ``memo`` (the stretch memo) when it read
    them all, else one resumed from the kept scan sharing the longest prefix with them, else
    a new one; kept for the next stretch."""
    key = ("facts scans", tuple(rules), tuple(pinned), id(messages[0]))
    scans: list[_Scan] = memo.setdefault(key, [])
    best, shared = longest_shared(scans, messages)
    if best is not None and shared == len(best.messages) == len(messages):
        return best
    scan = (
        best.resumed(shared) if best is not None and shared >= MARK_EVERY else _Scan(rules, pinned)
    )
    scope = _SCOPE.get()
    assert scope is not None  # a stretch memo lives in a message scope
    scan.extend(messages[len(scan.messages) :], scope)
    scans.append(scan)
    return scan


def read_rules(path: str | Path, sections: Sequence[str]) -> list[str]:
    """The named ``## `` sections of an AGENTS.md-style file, each as one block of text
    (heading included); all ``##`` sections when ``sections`` is empty. A missing file gives
    no rules.

    Raises:
        ValueError: the file exists but is not UTF-8 text.
    """
    file = Path(path)
    if not file.is_file():
        return []
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"rules file {str(file)!r} is not UTF-8 text") from exc
    wanted = {s.strip().lower() for s in sections}
    blocks = re.split(r"(?m)^(?=#{1,3} )", text)
    kept = []
    for block in blocks:
        heading = block.splitlines()[0].lstrip("#").strip().lower() if block.strip() else ""
        if block.startswith("#") and (not wanted or heading in wanted):
            kept.append(block.strip())
    return kept
