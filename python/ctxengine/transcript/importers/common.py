"""Helpers shared by the importers: located errors, JSON decoding, small converters."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final, NoReturn

from ...errors import TranscriptError
from ..model import Block, Image, Message, Thinking, ToolCall, ToolResult
from ..providers import PDF_FILENAME

__all__ = (
    "Loc",
    "arguments_object",
    "counting_skips",
    "dump_arguments",
    "file_from_data",
    "fill_result_names",
    "image_from_url",
    "image_url",
    "image_urls",
    "litellm_thinking",
    "parse_arguments",
    "read_jsonl",
    "read_text",
    "redacted_thinking",
    "short",
    "skip_block",
    "text_of",
    "thinking_family",
    "tool_call",
)

_DATA_URL = re.compile(r"data:(?P<mt>[\w.+-]+/[\w.+-]+)?(?:;[^,;]*)*;base64,(?P<data>.*)", re.S)


def short(value: object, limit: int = 60) -> str:
    """A short repr of ``value`` for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Loc:
    """Where we are in a source, for error messages: ``file line 3`` or ``<list> [2].content``."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def at(self, suffix: str | int) -> Loc:
        """A location one step deeper (``[3]`` for ints, ``.key`` or free text for strings)."""
        if isinstance(suffix, int):
            return Loc(f"{self.path}[{suffix}]")
        sep = "" if suffix.startswith(("[", " ")) else "."
        return Loc(f"{self.path}{sep}{suffix}")

    def fail(self, what: str, got: object, expected: str) -> NoReturn:
        """Raise :class:`TranscriptError` naming this location, the value and the expectation."""
        raise TranscriptError(f"{self.path}: {what} is {short(got)}; expected {expected}")

    def need(self, obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
        """``obj[key]`` checked to be of ``kind``; raises a located error otherwise."""
        if not isinstance(obj, Mapping):
            self.fail("entry", obj, "a JSON object")
        if key not in obj:
            self.fail(f"key {key!r}", "missing", f"{_kind_name(kind)} under {key!r}")
        value = obj[key]
        if not isinstance(value, kind):
            self.at(key).fail("value", value, _kind_name(kind))
        return value

    def obj(self, value: object) -> Mapping[str, Any]:
        """``value`` checked to be a JSON object."""
        if not isinstance(value, Mapping):
            self.fail("entry", value, "a JSON object")
        return value

    def items(self, value: object) -> list[Any]:
        """``value`` checked to be a JSON array."""
        if not isinstance(value, list):
            self.fail("value", value, "a JSON array")
        return value


_SKIPPED: ContextVar[dict[str, int] | None] = ContextVar("ctxengine_skipped_blocks", default=None)


@contextmanager
def counting_skips() -> Iterator[dict[str, int]]:
    """Count the blocks :func:`skip_block` leaves out while loading one transcript (type ->
    count); the loader puts them in ``Transcript.meta["skipped_blocks"]``."""
    counts: dict[str, int] = {}
    token = _SKIPPED.set(counts)
    try:
        yield counts
    finally:
        _SKIPPED.reset(token)


def skip_block(kind: object, loc: Loc, what: str, expected: str) -> None:
    """Leave out a content block (or part) of a type this reader does not know, as a newer
    version of the tool or API writes them, and count it by type.

    Raises:
        TranscriptError: ``kind`` is not a non-empty string: the block is malformed, not new.
    """
    if not isinstance(kind, str) or not kind:
        loc.fail(what, kind, expected)
    counts = _SKIPPED.get()
    if counts is not None:
        counts[kind] = counts.get(kind, 0) + 1


def _kind_name(kind: type | tuple[type, ...]) -> str:
    """``a string``, ``an array or a string``...: the JSON kinds of ``kind``, with articles."""
    names: dict[type, str] = {str: "a string", list: "an array", dict: "an object"}
    names.update({Mapping: "an object", bool: "a boolean"})
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, f"a {k.__name__}") for k in kinds)


def read_text(path: Path, *, torn_tail: bool = False) -> str:
    """The file's text, decoded as UTF-8 (``torn_tail``: bytes after the last newline that
    are no UTF-8, a line cut inside a character, are read as U+FFFD: the caller takes that line
    as torn).

    Raises:
        TranscriptError: the file is not UTF-8 (the message names the byte offset and line).
        OSError: the file cannot be read.
    """
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        end = data.rfind(b"\n") + 1
        if torn_tail and exc.start >= end and not data.endswith(b"\n"):
            return data[:end].decode("utf-8") + data[end:].decode("utf-8", "replace")
        line = data.count(b"\n", 0, exc.start) + 1
        bad = data[exc.start : exc.start + 4]
        raise TranscriptError(
            f"{path}: not UTF-8 text at byte offset {exc.start:,} (line {line}: {exc.reason}, "
            f"bytes {bad!r}); expected a UTF-8 transcript"
        ) from None


def nested_too_deeply(where: str) -> TranscriptError:
    """The error for JSON nested deeper than Python can decode."""
    return TranscriptError(
        f"{where}: JSON nested too deeply to decode (past Python's recursion limit); "
        "expected a transcript of ordinary depth"
    )


def read_jsonl(path: Path, torn: list[int] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-empty line of a JSONL file.

    ``torn``: a list to put the number of a torn last line in (invalid JSON with no newline
    after it: the writer was still writing, or stopped mid-line), which is then skipped, as
    an agent harness reading its own session file skips it; without it, an error.

    Raises:
        TranscriptError: the file is not UTF-8, or a line is not valid JSON (a torn last one
            too, unless ``torn`` is given), is nested too deeply, or is not an object.
    """
    text = read_text(path, torn_tail=torn is not None)
    lines = text.split("\n")  # JSON strings may hold U+2028
    last = len(lines) if torn is not None and not text.endswith("\n") else 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == last and torn is not None:
                torn.append(n)
                return
            raise TranscriptError(
                f"{path} line {n}: invalid JSON ({exc.msg} at column {exc.colno}); "
                "expected one JSON object per line"
            ) from None
        except RecursionError:
            raise nested_too_deeply(f"{path} line {n}") from None
        if not isinstance(value, dict):
            raise TranscriptError(
                f"{path} line {n}: value is {short(value)}; expected a JSON object"
            )
        yield n, value


def parse_arguments(raw: object, loc: Loc) -> dict[str, Any] | str:
    """Tool-call arguments as a dict; a JSON string holding an object is decoded.

    Non-object JSON, invalid JSON and partial JSON stay a string (the contract of
    :class:`~ctxengine.transcript.ToolCall`).
    """
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    if not isinstance(raw, str):
        loc.fail("tool arguments", raw, "a JSON object or a JSON string")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    except RecursionError:
        raise nested_too_deeply(f"{loc.path} tool arguments") from None
    return value if isinstance(value, dict) else raw


def dump_arguments(arguments: dict[str, Any] | str) -> str:
    """Tool-call arguments as the JSON string OpenAI wire formats carry."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def arguments_object(arguments: dict[str, Any] | str) -> dict[str, Any]:
    """Tool-call arguments as the JSON object Anthropic and Gemini need.

    A string (non-object or invalid JSON) is wrapped as ``{"arguments": <string>}``.
    """
    return arguments if isinstance(arguments, dict) else {"arguments": arguments}


#: OpenAI's image ``detail`` values, kept on import.
DETAILS: Final = frozenset({"low", "high", "auto"})


def image_from_url(
    url: str, *, default: str = "image/jpeg", name: str | None = None, detail: object = None
) -> Image:
    """An :class:`Image` from a ``data:`` URL (decoded to media type + base64) or a plain URL
    (its type guessed from its extension, else ``default``); ``detail`` kept when it is one of
    OpenAI's (:data:`DETAILS`)."""
    kept = detail if isinstance(detail, str) and detail in DETAILS else None
    m = _DATA_URL.fullmatch(url)
    if m:
        media = m.group("mt") or "application/octet-stream"
        return Image(media, data=m.group("data"), name=name, detail=kept)
    return Image(_guess_media_type(url, default), url=url, name=name, detail=kept)


def image_urls(urls: list[Any], loc: Loc) -> list[Image]:
    """The images of a list of image URLs (``data:`` URLs or links) at ``loc``.

    Raises:
        TranscriptError: an item is not a string (named by its index).
    """
    out = []
    for i, url in enumerate(urls):
        if not isinstance(url, str):
            loc.at(i).fail("image url", url, "a string")
        out.append(image_from_url(url))
    return out


def file_from_data(data: str, filename: object) -> Image:
    """An :class:`Image` from a file part's inline data: a ``data:`` URL, or bare base64 (a
    PDF, the one document type the providers take, unless ``filename`` names an image). The
    file name, when there is one, is kept as the image's ``name`` (not the name the exporters
    give a nameless PDF, so a neutral PDF comes back as it went out)."""
    name = filename if isinstance(filename, str) and filename not in ("", PDF_FILENAME) else None
    if data.startswith("data:"):
        return image_from_url(data, name=name)
    lower = name.lower() if name else ""
    media = _guess_media_type(lower, PDF) if lower.endswith(_IMAGE_EXTENSIONS) else PDF
    return Image(media, data=data, name=name)


def image_url(image: Image) -> str:
    """The URL form of an image: a ``data:`` URL for inline data."""
    if image.data is not None:
        return f"data:{image.media_type};base64,{image.data}"
    return image.url or ""


PDF: Final = "application/pdf"
_IMAGE_EXTENSIONS = (".png", ".gif", ".webp", ".jpg", ".jpeg")
_EXTENSIONS = (
    (".png", "image/png"),
    (".gif", "image/gif"),
    (".webp", "image/webp"),
    (".jpg", "image/jpeg"),
    (".jpeg", "image/jpeg"),
    (".pdf", PDF),
    (".mp3", "audio/mpeg"),
    (".wav", "audio/wav"),
    (".mp4", "video/mp4"),
)


def _guess_media_type(url: str, default: str = "image/jpeg") -> str:
    lower = url.lower().split("?", 1)[0]
    for ext, mt in _EXTENSIONS:
        if lower.endswith(ext):
            return mt
    return default


def text_of(content: object, loc: Loc) -> str:
    """Text from a string or a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    parts = loc.items(content)
    out = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            out.append(part)
            continue
        p = loc.at(i).obj(part)
        if isinstance(p.get("text"), str):
            out.append(p["text"])
        else:
            loc.at(i).fail("content part", p.get("type"), "a text part")
    return "\n".join(out)


def fill_result_names(messages: Sequence[Message]) -> list[Message]:
    """Give every nameless :class:`ToolResult` the name of the call it answers."""
    names: dict[str, str] = {}
    out: list[Message] = []
    for m in messages:
        if m.role == "assistant":
            for c in m.tool_calls:
                names[c.id] = c.name
            out.append(m)
        elif m.role == "tool" and any(
            r.name is None and r.call_id in names for r in m.tool_results
        ):
            blocks: list[Block] = []
            for r in m.tool_results:
                if r.name is None and r.call_id in names:
                    r = ToolResult(r.call_id, r.content, r.is_error, names[r.call_id])
                blocks.append(r)
            out.append(Message(m.role, tuple(blocks), m.id, m.stop_reason, m.meta))
        else:
            out.append(m)
    return out


def tool_call(call_id: object, name: object, arguments: object, loc: Loc) -> ToolCall:
    """A :class:`ToolCall` with its fields checked."""
    if not isinstance(call_id, str) or not call_id:
        loc.fail("tool call id", call_id, "a non-empty string")
    if not isinstance(name, str):
        loc.fail("tool name", name, "a string")
    return ToolCall(call_id, name, parse_arguments(arguments, loc))


def redacted_thinking(block: Mapping[str, Any], loc: Loc) -> Thinking:
    """An Anthropic ``redacted_thinking`` block (as the API, LiteLLM and ChatAnthropic keep
    it): its encrypted ``data``, sent back as it came.

    Raises:
        TranscriptError: the block has no ``data`` string.
    """
    return Thinking("", loc.need(block, "data", str), redacted=True)


def litellm_thinking(message: Mapping[str, Any], loc: Loc) -> list[Thinking]:
    """The reasoning of an assistant message as LiteLLM gives it (OpenHands, SWE-agent):
    ``thinking_blocks`` (Anthropic ``thinking`` with its ``signature``, or
    ``redacted_thinking`` with its ``data``), else the unsigned ``reasoning_content``.

    Raises:
        TranscriptError: a thinking block is not an object or lacks its text or data.
    """
    out: list[Thinking] = []
    for i, raw in enumerate(loc.at("thinking_blocks").items(message.get("thinking_blocks") or [])):
        at = loc.at("thinking_blocks").at(i)
        b = at.obj(raw)
        if b.get("type") == "redacted_thinking":
            out.append(redacted_thinking(b, at))
        else:
            sig = b.get("signature")
            out.append(Thinking(at.need(b, "thinking", str), sig if isinstance(sig, str) else None))
    reasoning = message.get("reasoning_content")
    if not out and isinstance(reasoning, str) and reasoning:
        out.append(Thinking(reasoning))
    return out


def thinking_family(blocks: Sequence[Block], unsigned: str) -> dict[str, str]:
    """``provider_family`` for a message with LiteLLM thinking: Anthropic when a block is
    signed; ``unsigned`` otherwise (bare ``reasoning_content`` has no signature, so no provider
    takes it back). Empty when the message holds no thinking."""
    thinking = [b for b in blocks if isinstance(b, Thinking)]
    if not thinking:
        return {}
    signed = any(b.signature for b in thinking)
    return {"provider_family": "anthropic" if signed else unsigned}
