"""``load`` / ``load_all``: any supported source to :class:`Transcript`, with auto-detection."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import Any, Final, Literal, get_args

from ..errors import TranscriptError
from .importers.agents import (
    is_event_pair,
    load_openhands_events,
    load_swe_agent_history,
    swe_agent_steps,
)
from .importers.aider import has_aider_markers, is_aider_log, load_aider
from .importers.anthropic import load_anthropic, system_messages
from .importers.claude_code import load_claude_code
from .importers.common import (
    Loc,
    counting_skips,
    fill_result_names,
    nested_too_deeply,
    read_jsonl,
    read_text,
    short,
)
from .importers.gemini import load_gemini, system_instruction
from .importers.langchain import is_langchain_message, load_langchain
from .importers.openai import load_openai
from .importers.openhands_v1 import (
    event_folder,
    is_v1_event,
    load_openhands_v1,
    read_event_folder,
)
from .importers.pi import load_pi
from .importers.responses import load_responses
from .model import Message, Text, Transcript, compaction_of

__all__ = ("FORMATS", "Format", "detect_format", "first_session", "load", "load_all")

Format = Literal[
    "openai",
    "openai-responses",
    "anthropic",
    "gemini",
    "pi",
    "claude-code",
    "swe-agent",
    "openhands",
    "aider",
]
FORMATS: Final[tuple[str, ...]] = get_args(Format)
_FILE_ONLY: Final = frozenset({"pi", "claude-code", "aider"})
_CLAUDE_TYPES: Final = frozenset(
    {
        "user",
        "assistant",
        "progress",
        "system",
        "summary",
        "file-history-snapshot",
        "queue-operation",
    }
)


def load(
    source: object, format: str = "auto", *, view: str = "full", session: int | None = None
) -> Transcript:
    """Load one transcript.

    Args:
        source: A path (``str`` or :class:`~pathlib.Path`), a list of message/item dicts, a
            request payload dict (``{"messages": ..., "system": ...}``, ``{"input": ...}``,
            ``{"contents": ...}``, a ``.traj`` object...), official SDK objects (pydantic
            models are dumped; TypedDicts are dicts), or a list of LangChain messages.
        format: One of :data:`FORMATS`, or ``"auto"`` to detect it from extension and content.
        view: ``"full"`` (the whole conversation across compactions) or ``"model"`` (from the
            latest compaction summary on, as the model saw it); pi, Claude Code, aider (after
            the last ``/clear``), OpenHands (its condensations applied), and OpenAI Responses
            and Anthropic histories holding a provider compaction (from the latest one on,
            the system messages kept: what the provider reads) only.
        session: Which session of a multi-session source (OpenHands ``output.jsonl`` holds one
            instance per line, an aider log one session per launch, a SWE-agent retry
            trajectory saved before its run chose one each attempt): an index into
            :func:`load_all`, negative from the end. Default: the first that holds messages
            (:func:`first_session`), as a launch of aider that was quit before any input
            logs an empty session. The full view decides, whatever ``view`` is: both views
            give the same session, even when its model view is empty (an aider launch that
            ends with ``/clear``); that empty transcript is returned, as a source holding no
            message gives one.

    Returns:
        The transcript, with tool results named after their calls.

    Raises:
        TranscriptError: unknown format, undetectable or broken input (the message names the
            file, the line or index, the value and what was expected), a ``format`` given for a
            file that detection reads as another format (the message names that one),
            ``session`` is not an int (nor None), or no such session.
    """
    if session is not None and (isinstance(session, bool) or not isinstance(session, int)):
        raise TranscriptError(
            f"session is {short(session)}; expected an int (an index into load_all, negative "
            "from the end) or None (the first session holding messages)"
        )
    items = load_all(source, format, view=view)
    if not items:
        raise TranscriptError(f"{_label(source)}: no transcript found; expected at least one")
    if session is None:
        return items[_default_session(source, format, view, items)]
    try:
        return items[session]
    except IndexError:
        raise TranscriptError(
            f"{_label(source)}: session is {session}; expected an index below {len(items)}"
        ) from None


def first_session(items: list[Transcript]) -> int:
    """The index of the first transcript of ``items`` that holds messages (0 when none does):
    the one :func:`load` gives when no session is named."""
    return next((i for i, t in enumerate(items) if t.messages), 0)


def _default_session(source: object, format: str, view: str, items: list[Transcript]) -> int:
    """The session :func:`load` gives when none is named: the first holding messages in the
    full view, so that ``view="model"`` names the same one (an aider launch that ends with
    ``/clear`` holds none in the model view; the next launch would be taken)."""
    if view == "full" or len(items) < 2:
        return first_session(items)
    full = load_all(source, format)
    # a log still being written may have grown since: only the sessions read the first time
    return first_session(full[: len(items)])


def load_all(source: object, format: str = "auto", *, view: str = "full") -> list[Transcript]:
    """Load every transcript of a source (one per OpenHands instance, aider session or
    finished attempt of a SWE-agent retry trajectory saved before its run chose one).

    Args and raises are as for :func:`load`.
    """
    if format != "auto" and format not in FORMATS:
        raise TranscriptError(
            f"unknown format {format!r}; expected 'auto' or one of {list(FORMATS)}"
        )
    if view not in ("full", "model"):
        raise TranscriptError(f"view is {view!r}; expected 'full' or 'model'")
    try:
        if isinstance(source, (str, Path)):
            return _load_path(Path(source), format, view)
        if format == "auto" and _is_langchain(source):
            loc = Loc(f"<{type(source).__name__}>")
            return [_finish(load_langchain(loc.items(_as_list(source)), loc), "langchain", {})]
        data = _plain(source)
    except RecursionError:
        raise nested_too_deeply(_label(source)) from None
    fmt = format if format != "auto" else detect_format(data)
    if fmt in _FILE_ONLY:
        raise TranscriptError(
            f"format {fmt!r} is read from a file path; got {type(source).__name__}"
        )
    return _load_data(data, fmt, Loc(f"<{type(source).__name__}>"), {}, view)


def _as_list(source: object) -> object:
    return list(source) if isinstance(source, tuple) else source


def _is_langchain(source: object) -> bool:
    """A list of LangChain messages (the first item decides; others are checked on load)."""
    return isinstance(source, (list, tuple)) and bool(source) and is_langchain_message(source[0])


def _label(source: object) -> str:
    return str(source) if isinstance(source, (str, Path)) else f"<{type(source).__name__}>"


def _plain(value: Any) -> Any:
    """SDK objects (pydantic models, nested anywhere) as plain JSON data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _finish(
    messages: list[Message], fmt: str, meta: dict[str, Any], skipped: dict[str, int] | None = None
) -> Transcript:
    if skipped:  # blocks of types the importer does not know, by type
        meta = {**meta, "skipped_blocks": dict(skipped)}
    return Transcript(tuple(fill_result_names(messages)), fmt, meta)


# -- detection ---------------------------------------------------------------------------------


def _item_format(item: Mapping[str, Any]) -> str | None:
    """The format one message/item dict belongs to, or None when it fits several."""
    if item.get("type") in ("function_call", "function_call_output", "reasoning", "compaction"):
        return "openai-responses"
    if item.get("type") == "message" and "stop_reason" in item:
        return "anthropic"  # an Anthropic response object
    if "parts" in item or item.get("role") == "model":
        return "gemini"
    if item.get("role") in ("tool", "function", "developer") or "tool_calls" in item:
        return "openai"
    if "function_call" in item:
        return "openai"
    content = item.get("content")
    if isinstance(content, list):
        # a type that is no string is the importer's to name (it cannot be a set member)
        kinds = {
            k for b in content if isinstance(b, Mapping) and isinstance(k := b.get("type"), str)
        }
        if kinds & {
            "tool_use",
            "tool_result",
            "thinking",
            "redacted_thinking",
            "image",
            "compaction",
        }:
            return "anthropic"
        if kinds & {"input_text", "output_text", "input_image"}:
            return "openai-responses"
        if "image_url" in kinds:
            return "openai"
    if item.get("type") == "message":
        return "openai-responses"
    return None


def _is_event(e: object) -> bool:
    """An OpenHands event: V0 (``action``/``observation``, or an ``[action, observation]``
    pair of an older evaluation output) or V1 (``kind``)."""
    if is_event_pair(e):
        return True
    return isinstance(e, Mapping) and ("action" in e or "observation" in e or is_v1_event(e))


def _event_list(data: Mapping[str, Any]) -> str | None:
    """The key of a dict's OpenHands event list (``history``, or a V1 ``events``/``items``
    page), or None."""
    for key in ("history", "events", "items"):
        value = data.get(key)
        if isinstance(value, list) and (key == "history" or any(map(is_v1_event, value))):
            return key
    return None


def _detect_dict(data: Mapping[str, Any]) -> str:
    if "trajectory" in data and "history" not in data:
        return "swe-agent"
    if _retry_attempts(data) is not None:
        return "swe-agent"
    if "history" in data:
        hist = data["history"]
        return "openhands" if isinstance(hist, list) and any(map(_is_event, hist)) else "swe-agent"
    if "contents" in data:
        return "gemini"
    if _event_list(data) is not None:
        return "openhands"
    if "input" in data:
        return "openai-responses"
    if "messages" in data:
        return "anthropic" if "system" in data else detect_format(data["messages"])
    raise TranscriptError(
        f"payload keys are {sorted(data)[:8]}; expected 'messages', 'input', 'contents' "
        "or 'history'"
    )


def _detect_list(data: list[Any]) -> str | None:
    if data and all(map(_is_event, data)):
        return "openhands"
    for i, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise TranscriptError(f"<list>[{i}] is {short(item)}; expected a message dict")
        fmt = _item_format(item)
        if fmt is not None:
            return fmt
    if all("role" in e for e in data):
        return "openai"  # plain text messages read the same in every chat format
    return None


def detect_format(data: object) -> str:
    """The format :func:`load` reads ``data`` as: already-decoded data (a list of items or a
    payload/log dict), or a file or folder named by a :class:`~pathlib.Path` or a ``str``
    (by its extension and content, as ``load(path)`` detects it).

    Plain text-only chat messages fit several formats and are reported as ``"openai"``
    (they load to the same transcript either way).

    Raises:
        TranscriptError: the data matches no supported format; a path that names no file.
    """
    if isinstance(data, (str, PurePath)):
        return _detect_named(Path(data))
    if isinstance(data, Mapping):
        return _detect_dict(data)
    fmt = _detect_list(data) if isinstance(data, list) else None
    if fmt is None:
        raise TranscriptError(
            f"cannot detect the transcript format of {short(data)}; expected a list of messages "
            f"or a payload dict, or pass format= one of {list(FORMATS)}"
        )
    return fmt


def _detect_named(path: Path) -> str:
    """The format of the file or folder at ``path``, as :func:`load` detects it."""
    if path.is_dir():
        _events_of(path)
        return "openhands"
    _check_file(path)
    return _detect_path(path)


def _events_of(path: Path, fmt: str = "auto") -> Path:
    """The OpenHands event folder of the folder ``path`` (which ``fmt`` allows)."""
    folder = event_folder(path) if fmt in ("auto", "openhands") else None
    if folder is None:
        raise TranscriptError(
            f"{path}: is a folder; expected a transcript file (or an OpenHands conversation "
            "folder with events/event-*.json files)"
        )
    return folder


def _check_file(path: Path) -> None:
    if not path.is_file():
        what = "not a regular file" if path.exists() else "no such file"
        raise TranscriptError(f"{path}: {what}; expected a transcript file")


def _detect_jsonl(path: Path) -> str:
    first: dict[str, Any] | None = None
    for _, obj in read_jsonl(path, []):  # a file still being written: its format all the same
        first = obj
        break
    if first is None:
        raise TranscriptError(f"{path}: file is empty; expected a JSONL transcript")
    kind = first.get("type")
    if kind == "session" or (kind == "message" and isinstance(first.get("message"), Mapping)):
        return "pi"
    if (
        "parentUuid" in first
        or "sessionId" in first
        or (isinstance(kind, str) and kind in _CLAUDE_TYPES and "role" not in first)
    ):
        return "claude-code"
    if ("history" in first and "instance_id" in first) or is_v1_event(first):
        return "openhands"
    return detect_format([first])


def _detect_path(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".traj":
        return "swe-agent"
    if suffix == ".md":
        if not is_aider_log(path):
            raise TranscriptError(
                f"{path}: no '# aider chat started at' line; expected an aider chat history "
                "(.aider.chat.history.md), or pass format="
            )
        return "aider"
    if suffix == ".jsonl":
        return _detect_jsonl(path)
    if suffix == ".json":
        return detect_format(_read_json(path))
    raise TranscriptError(
        f"{path}: extension is {suffix!r}; expected .jsonl, .json, .traj or .md (or pass format=)"
    )


# -- reading -----------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(read_text(path))
    except RecursionError:
        raise nested_too_deeply(str(path)) from None
    except TranscriptError:
        raise
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        line = getattr(exc, "lineno", "?")
        raise TranscriptError(
            f"{path} line {line}: invalid JSON ({msg}); expected a JSON document"
        ) from None


def _load_path(path: Path, fmt: str, view: str) -> list[Transcript]:
    if path.is_dir():
        folder = _events_of(path, fmt)
        events = read_event_folder(folder)
        return _load_data(events, "openhands", Loc(str(folder)), {"path": str(path)}, view)
    _check_file(path)
    given = fmt != "auto"
    if not given:
        fmt = _detect_path(path)
    elif fmt == "aider" and not has_aider_markers(path):  # any text reads as one reply
        lacks = "no '# aider chat started at' line and no '#### ' input line"
        raise _not_read_as(path, fmt, TranscriptError(lacks), force=True)
    try:
        out = _load_file(path, fmt, view)
    except TranscriptError as exc:
        refused = _not_read_as(path, fmt, exc) if given else exc
        if refused is exc:
            raise
        raise refused from None
    if fmt in ("pi", "claude-code") and not out[0].messages:
        _check_matched(path, fmt)
    return out


def _not_read_as(
    path: Path, fmt: str, why: TranscriptError, *, force: bool = False
) -> TranscriptError:
    """The error for a file that format ``fmt``, given by the caller, does not read: ``why``
    (the error of that format's reader, or what the file lacks) with the format the file
    looks like and the option that reads it. Without ``force``, ``why`` itself when the file
    looks like ``fmt`` (it is that format, broken) or like no format at all (there is no
    better one to name)."""
    looks = _looks_like(path)
    if not force and looks in (None, fmt):
        return why
    text, name = str(why), str(path)
    reason = text[len(name) :].lstrip(".: ") if text.startswith(name) else text
    hint = _hint(looks, fmt)
    return TranscriptError(f"{path}: format {fmt!r} does not read it ({reason}); {hint}")


def _looks_like(path: Path) -> str | None:
    """The format auto-detection gives ``path``, or None when it recognizes none."""
    try:
        return _detect_path(path)
    except TranscriptError:
        return None


def _hint(looks: str | None, fmt: str) -> str:
    """What a file that format ``fmt`` does not read looks like, and the option to pass."""
    if looks is None:
        return f"its format was not recognized; expected a {fmt!r} file"
    return f'it looks like {looks!r} (pass format="{looks}", or format="auto")'


def _load_file(path: Path, fmt: str, view: str) -> list[Transcript]:
    meta: dict[str, Any] = {"path": str(path)}
    if fmt in ("pi", "claude-code"):
        load_log = load_pi if fmt == "pi" else load_claude_code
        with counting_skips() as skipped:
            messages, extra = load_log(path, view=view)
        return [_finish(messages, fmt, {**meta, **extra}, skipped)]
    if fmt == "aider":
        return [_finish(m, fmt, {**meta, **extra}) for m, extra in load_aider(path, view=view)]
    if path.suffix.lower() != ".jsonl":
        return _load_data(_read_json(path), fmt, Loc(str(path)), meta, view)
    lines = list(read_jsonl(path))
    if fmt == "openhands" and not (lines and is_v1_event(lines[0][1])):  # an instance a line
        return [
            t for n, obj in lines for t in _load_data(obj, fmt, Loc(f"{path} line {n}"), meta, view)
        ]
    return _load_data([obj for _, obj in lines], fmt, Loc(str(path)), meta, view)


def _check_matched(path: Path, fmt: str) -> None:
    """A pi or Claude Code log that loaded no message as ``fmt``: fine when it holds no
    entry, or when it is a log of that format with no message yet (a pi session's header
    alone, written when the session starts: an empty transcript, as any source holding no
    message); an error naming the format it looks like otherwise.

    Raises:
        TranscriptError: entries are there, none matched ``fmt``, and the file looks like
            another format.
    """
    lines = sum(1 for _ in read_jsonl(path))
    if not lines:
        return
    looks = _looks_like(path)
    if looks == fmt:
        return
    raise TranscriptError(
        f"{path}: 0 messages matched format {fmt!r} in {lines:,} JSONL entries; "
        + _hint(looks, fmt)
    )


def _payload(data: Any, key: str, loc: Loc) -> list[Any]:
    if isinstance(data, Mapping):
        return loc.at(key).items(loc.need(data, key, (list, str)))
    return loc.items(data)


def _load_data(
    data: Any, fmt: str, loc: Loc, meta: dict[str, Any], view: str = "full"
) -> list[Transcript]:
    loader = _LOADERS.get(fmt)
    if loader is None and fmt != "openhands":
        raise TranscriptError(f"{loc.path}: format {fmt!r} is read from a file path")
    if fmt == "swe-agent" and (attempts := _retry_attempts(data)) is not None:
        return _swe_agent_attempts(attempts, loc, meta)
    with counting_skips() as skipped:
        if loader is None:
            messages, extra = _from_openhands(data, loc, view)
        else:
            messages, extra = loader(data, loc)
    if fmt in ("openai-responses", "anthropic"):
        messages, extra = _provider_compactions(messages, extra, view)
    return [_finish(messages, fmt, {**meta, **extra}, skipped)]


def _provider_compactions(
    messages: list[Message], meta: dict[str, Any], view: str
) -> tuple[list[Message], dict[str, Any]]:
    """Record the provider compactions of ``messages`` in ``meta["compactions"]`` (each:
    ``provider``, ``index``, ``id``, ``summary``), and for ``view="model"`` leave out what the
    provider drops before the latest one (its system messages stay: they are the request's
    ``system``/``instructions``).

    Anthropic "drops all message blocks prior to the compaction block"; OpenAI's guide says
    the items before the most recent compaction item may be dropped (it carries the context
    needed to go on)."""
    found = [(i, c) for i, m in enumerate(messages) if (c := compaction_of(m)) is not None]
    if not found:
        return messages, meta
    records = [
        {
            "provider": c.provider,
            "index": i,
            "id": c.item.get("id"),
            "summary": c.item.get("content") if c.provider == "anthropic" else None,
        }
        for i, c in found
    ]
    meta = {**meta, "compactions": records}
    if view == "model":
        last = found[-1][0]
        messages = [m for m in messages[:last] if m.role == "system"] + messages[last:]
    return messages, meta


def _from_openai(data: Any, loc: Loc) -> tuple[list[Message], dict[str, Any]]:
    return load_openai(_payload(data, "messages", loc), loc.at("messages")), {}


def _from_anthropic(data: Any, loc: Loc) -> tuple[list[Message], dict[str, Any]]:
    system = data.get("system") if isinstance(data, Mapping) else None
    head = system_messages(system, loc.at("system"))
    return head + load_anthropic(_payload(data, "messages", loc), loc.at("messages")), {}


def _from_responses(data: Any, loc: Loc) -> tuple[list[Message], dict[str, Any]]:
    head: list[Message] = []
    if isinstance(data, Mapping):
        if isinstance(data.get("instructions"), str):
            head.append(Message("system", (Text(data["instructions"]),)))
        if isinstance(data.get("input"), str):
            return [*head, Message("user", (Text(data["input"]),))], {}
    return head + load_responses(_payload(data, "input", loc), loc.at("input")), {}


def _from_gemini(data: Any, loc: Loc) -> tuple[list[Message], dict[str, Any]]:
    head: list[Message] = []
    if isinstance(data, Mapping):
        sys = data.get("system_instruction", data.get("systemInstruction"))
        head = system_instruction(sys, loc.at("system_instruction"))
    return head + load_gemini(_payload(data, "contents", loc), loc.at("contents")), {}


def _retry_attempts(data: object) -> list[Any] | None:
    """The ``attempts`` of a SWE-agent ``RetryAgent`` trajectory that holds nothing else
    (None for any other data).

    ``RetryAgent.get_trajectory_data`` (SWE-agent/SWE-agent ``sweagent/agent/agents.py``)
    saves ``{"attempts": [...]}`` after every step, each finished attempt a whole trajectory
    of its own (``history``, ``trajectory``, ``info``); only when the run ends does it merge
    the best attempt in (``choose=True``), which then loads as any trajectory. A file read
    while the run goes on, or left by a run that was stopped, has the attempts only.
    """
    if not isinstance(data, Mapping) or "history" in data or "trajectory" in data:
        return None
    attempts = data.get("attempts")
    return attempts if isinstance(attempts, list) else None


def _swe_agent_attempts(attempts: list[Any], loc: Loc, meta: dict[str, Any]) -> list[Transcript]:
    """One transcript per finished attempt of a ``RetryAgent`` run (``meta["attempt"]``:
    its index): each attempt is a conversation of its own, the environment reset between.

    Raises:
        TranscriptError: no attempt has finished yet, or an attempt is malformed.
    """
    at = loc.at("attempts")
    if not attempts:
        at.fail(
            "attempts",
            attempts,
            "at least one finished attempt (SWE-agent's RetryAgent saves an attempt when it "
            "ends; the running one writes its own trajectory, attempt_<n>/<instance>.traj)",
        )
    out = []
    for i, raw in enumerate(attempts):
        with counting_skips() as skipped:
            messages, extra = _from_swe_agent(at.at(i).obj(raw), at.at(i))
        out.append(_finish(messages, "swe-agent", {**meta, **extra, "attempt": i}, skipped))
    return out


def _from_swe_agent(data: Any, loc: Loc) -> tuple[list[Message], dict[str, Any]]:
    info = data.get("info") if isinstance(data, Mapping) else None
    meta: dict[str, Any] = {"info": info} if isinstance(info, Mapping) else {}
    if isinstance(data, Mapping) and "history" not in data and "trajectory" in data:
        steps = loc.at("trajectory").items(data["trajectory"])
        meta["rebuilt_from"] = "trajectory"
        return swe_agent_steps(steps, loc.at("trajectory")), meta
    history = _payload(data, "history", loc)
    return load_swe_agent_history(history, loc.at("history")), meta


def _from_openhands(data: Any, loc: Loc, view: str) -> tuple[list[Message], dict[str, Any]]:
    key = (_event_list(data) or "history") if isinstance(data, Mapping) else "history"
    events = _payload(data, key, loc)
    at = loc.at(key) if isinstance(data, Mapping) else loc
    meta: dict[str, Any]
    if any(map(is_v1_event, events)):  # the software-agent SDK's events
        messages, meta = load_openhands_v1(events, at, view)
    else:
        messages, meta = load_openhands_events(events, loc.at(key), view)
    if isinstance(data, Mapping):
        meta.update({k: data[k] for k in ("instance_id", "error") if k in data})
    return messages, meta


_LOADERS: Final[dict[str, Callable[[Any, Loc], tuple[list[Message], dict[str, Any]]]]] = {
    "openai": _from_openai,
    "anthropic": _from_anthropic,
    "openai-responses": _from_responses,
    "gemini": _from_gemini,
    "swe-agent": _from_swe_agent,
}
