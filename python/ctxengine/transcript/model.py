"""The neutral transcript model (DESIGN.md §5).

One shape for every provider and log format: a :class:`Transcript` is a tuple of frozen
:class:`Message` objects, each holding typed blocks. Frozen means "returned unchanged" can be
checked with ``is`` and a transcript can be shared between threads without copying.

Invariants, checked when a message is built:

- ``system`` messages hold only :class:`Text`;
- tool results live only in ``tool`` messages, which hold only :class:`ToolResult` (one tool
  message may hold several results, e.g. one Anthropic user turn);
- :class:`ToolCall` and :class:`Thinking` live only in ``assistant`` messages.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Union, get_args, overload

from ..errors import TranscriptError

__all__ = (
    "Block",
    "Compaction",
    "Image",
    "Message",
    "Role",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "Transcript",
)

Role = Literal["system", "user", "assistant", "tool"]
ROLES: Final = frozenset(get_args(Role))

#: ``stop_reason`` values that mark an assistant turn as unfinished (hygiene treats them apart).
FAILED_STOP_REASONS: Final = frozenset({"error", "aborted"})


@dataclass(frozen=True, slots=True)
class Text:
    """Plain text."""

    text: str


@dataclass(frozen=True, slots=True)
class Compaction(Text):
    """A compaction the provider made on its side, standing for the whole conversation before
    it; it opens an ``assistant`` message (the importers give it one of its own).

    ``provider`` is ``"anthropic"`` (a ``compaction`` content block of the beta
    ``compact_20260112`` edit: its summary is readable, ``text`` holds it under a summary head)
    or ``"openai-responses"`` (a ``compaction`` input item: ``encrypted_content`` is opaque,
    ``text`` is empty). ``item`` is the block or item as the provider returned it, sent back
    to that provider verbatim. Being :class:`Text`, the summary reads as text wherever text is
    read; exporters and the engine treat it apart (see :func:`compaction_of`)."""

    provider: str = ""
    item: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        # sent back verbatim to its provider: without a compaction item there, the render
        # raised a bare KeyError
        what = _COMPACTION_ITEMS.get(self.provider)
        if what is None:
            return
        item = self.item
        key, kinds, expected = what
        if (
            not isinstance(item, Mapping)
            or item.get("type") != "compaction"
            or not isinstance(item.get(key), kinds)
        ):
            raise TranscriptError(
                f"Compaction for {self.provider!r}: item is {item!r:.80}; expected {expected}, "
                "as the provider returned it"
            )


#: Provider -> the key a compaction item of it must hold, its types, and how to say it.
_COMPACTION_ITEMS: Final[dict[str, tuple[str, tuple[type, ...], str]]] = {
    "anthropic": (
        "content",
        (str, type(None)),
        "a 'compaction' content block ({'type': 'compaction', 'content': <summary or None>})",
    ),
    "openai-responses": (
        "encrypted_content",
        (str,),
        "a 'compaction' input item ({'type': 'compaction', 'encrypted_content': <str>})",
    ),
}


def compaction_of(message: Message) -> Compaction | None:
    """The provider :class:`Compaction` ``message`` holds, or None."""
    blocks = message.blocks
    if blocks and type(blocks[0]) is Compaction:
        return blocks[0]
    return None


@dataclass(frozen=True, slots=True)
class Image:
    """An image (or other media: a PDF, audio, video) given inline as base64 ``data`` or by
    ``url``; ``name`` is the file name or title the source gave it (a PDF's ``filename`` or
    ``title``), if any; ``detail`` OpenAI's image detail (``low``, ``high``, ``auto``) when the
    source gave one (OpenAI formats send it back: ``low`` is billed 85 tokens, ``auto`` may be
    far more)."""

    media_type: str
    data: str | None = None
    url: str | None = None
    name: str | None = None
    detail: str | None = None

    def __post_init__(self) -> None:
        # a hand-built field of another type failed deep inside a render (``media_type.startswith``)
        # or went out as its repr (bytes in a ``data:`` URL)
        if not isinstance(self.media_type, str):
            raise TranscriptError(
                f"Image.media_type is {type(self.media_type).__name__} {self.media_type!r:.60}; "
                "expected a str such as 'image/png'"
            )
        for name in ("data", "url", "name", "detail"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TranscriptError(
                    f"Image ({self.media_type!r}) {name} is {type(value).__name__} "
                    f"{value!r:.60}; expected a str or None"
                    + (" (base64 text, not bytes)" if name == "data" else "")
                )
        # a data URL given as ``data`` (``"data:image/png;base64,iVBOR..."``, as a browser's
        # canvas or an OpenAI ``image_url`` holds it) is its base64 and its media type: each
        # exporter writes ``data`` as base64 (OpenAI behind its own ``data:`` prefix), and
        # sent the prefix twice, or inside Anthropic's and Gemini's base64, which they refuse
        data = self.data
        if data is not None and data[:5] == "data:":
            head, comma, rest = data.partition(",")
            if comma and head.endswith(";base64"):
                object.__setattr__(self, "data", rest)
                kind = head[5:-7].split(";", 1)[0]
                if kind:
                    object.__setattr__(self, "media_type", kind)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call made by the assistant.

    ``arguments`` is the decoded JSON object; it is a ``str`` only when the source arguments are
    not a JSON object (invalid or partial JSON, or another JSON value). A ``str`` given that
    holds a JSON object (OpenAI's ``function.arguments`` passed as it came) is decoded here, as
    the importers decode it: Anthropic and Gemini take an object, and were sent
    ``{"arguments": "<the JSON text>"}`` for it.
    """

    id: str
    name: str
    arguments: dict[str, Any] | str = field(hash=False)
    _json: str | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        args = self.arguments
        if type(args) is str and args.lstrip()[:1] == "{":
            try:
                value = json.loads(args)
            except (ValueError, RecursionError):  # invalid or partial: kept as it came
                return
            if type(value) is dict:
                object.__setattr__(self, "arguments", value)

    @property
    def arguments_json(self) -> str:
        """The arguments as the JSON string OpenAI wire formats carry (computed once)."""
        if self._json is None:
            args = self.arguments
            if isinstance(args, str):
                text = args
            else:
                try:
                    text = json.dumps(args, ensure_ascii=False)
                except (TypeError, ValueError, RecursionError) as exc:
                    raise TranscriptError(
                        f"tool call {self.id!r} ({self.name!r}): arguments are not JSON: {exc}"
                    ) from None
            object.__setattr__(self, "_json", text)
            return text
        return self._json


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call; lives in a ``tool`` message."""

    call_id: str
    content: tuple[Text | Image, ...]
    is_error: bool = False
    name: str | None = None

    def __post_init__(self) -> None:
        content = self.content
        if not isinstance(content, tuple):
            if isinstance(content, (str, bytes, Mapping)) or not isinstance(content, Iterable):
                raise TranscriptError(
                    f"ToolResult {self.call_id!r:.60}: content is {type(content).__name__} "
                    f"{content!r:.60}; expected a sequence of Text or Image items"
                )
            object.__setattr__(self, "content", tuple(content))
        if not isinstance(self.call_id, str):
            raise TranscriptError(
                f"ToolResult call_id is {type(self.call_id).__name__} {self.call_id!r:.60}; "
                "expected a str"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise TranscriptError(
                f"ToolResult {self.call_id!r}: name is {type(self.name).__name__} "
                f"{self.name!r:.60}; expected a str or None"
            )
        for item in self.content:
            if not isinstance(item, (Text, Image)):
                raise TranscriptError(
                    f"ToolResult {self.call_id!r}: content item is {type(item).__name__}; "
                    "expected Text or Image"
                )
            if isinstance(item, Text) and not isinstance(item.text, str):
                raise TranscriptError(
                    f"ToolResult {self.call_id!r}: a Text item's text is "
                    f"{type(item.text).__name__} {item.text!r:.60}; expected a str"
                )

    @property
    def text(self) -> str:
        """The text items joined with newlines (images left out)."""
        content = self.content
        if len(content) == 1 and type(content[0]) is Text and type(content[0].text) is str:
            return content[0].text  # what the join gives for one item: the str itself
        return "\n".join(b.text for b in content if isinstance(b, Text))


@dataclass(frozen=True, slots=True)
class Thinking:
    """Model reasoning. ``signature`` is the provider's opaque token (Anthropic signature,
    Gemini thought signature, or an OpenAI Responses reasoning item as JSON); ``redacted``
    marks Anthropic ``redacted_thinking`` whose data is in ``signature``."""

    text: str
    signature: str | None = None
    redacted: bool = False


#: Blocks that hold no :class:`Text` (none derives from it): a message of one of them alone,
#: a tool message's result or an assistant's call, has no text.
_NO_TEXT: Final = (ToolResult, ToolCall)
Block = Union[Text, Image, ToolCall, ToolResult, Thinking]  # noqa: UP007 (runtime alias on 3.10)
_BLOCK_TYPES: Final = (Text, Image, ToolCall, ToolResult, Thinking)
_ALLOWED: Final[Mapping[str, tuple[type, ...]]] = {
    "system": (Text,),
    "user": (Text, Image),
    "assistant": (Text, Image, ToolCall, Thinking),
    "tool": (ToolResult,),
}


#: The roles whose messages may hold a :class:`Text` block (a one-text message is checked in
#: one step: the most common message by far).
_TEXT_ROLES: Final = frozenset(r for r, allowed in _ALLOWED.items() if issubclass(Text, allowed))


def lone_surrogate(text: str) -> int | None:
    """The position of the first lone surrogate in ``text`` (what UTF-8 cannot hold), or None
    when it holds none."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def valid_utf8(text: str) -> str:
    """``text`` with each lone surrogate (e.g. from ``errors='surrogateescape'``) as U+FFFD:
    UTF-8 cannot hold one, so it cannot be counted, sent or stored (``text`` itself when it
    holds none)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _bad_field(block: Block) -> str | None:
    """What is wrong with a field of ``block`` (a str that is not one, arguments that are
    neither an object nor a string), or None: a typed field a hand-built block got wrong would
    otherwise fail deep inside a render."""
    if isinstance(block, (Text, Thinking)):
        if not isinstance(block.text, str):
            got = f"{type(block.text).__name__} {block.text!r:.60}"
            return f"{type(block).__name__}.text is {got}; expected a str"
        if isinstance(block, Thinking) and not isinstance(block.signature, (str, type(None))):
            got = f"{type(block.signature).__name__} {block.signature!r:.60}"
            return f"Thinking.signature is {got}; expected a str or None"
    elif isinstance(block, ToolCall):
        for name in ("id", "name"):
            value = getattr(block, name)
            if not isinstance(value, str):
                return f"ToolCall.{name} is {type(value).__name__} {value!r:.60}; expected a str"
        if not isinstance(block.arguments, (dict, str)):
            kind = type(block.arguments).__name__
            return f"ToolCall {block.id!r}: arguments is {kind}; expected a dict or a str"
    return None


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of the conversation.

    Args:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        blocks: The content, in order.
        id: The source's message id, when it has one.
        stop_reason: ``"error"`` or ``"aborted"`` when an assistant turn ended that way.
        meta: Free metadata (source details); not compared, not hashed.

    Raises:
        TranscriptError: a block is not allowed for the role (see module docstring).
    """

    role: Role
    blocks: tuple[Block, ...]
    id: str | None = None
    stop_reason: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # Derived once (renders read them for every message on every turn).
    _calls: tuple[ToolCall, ...] = field(init=False, repr=False, compare=False, hash=False)
    _results: tuple[ToolResult, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        meta = self.meta
        if type(meta) is not dict and not isinstance(meta, Mapping):
            # ``meta=None`` was taken, then failed inside the OpenAI exporters
            raise TranscriptError(
                f"{self.role!r:.20} message meta is {type(meta).__name__} {meta!r:.60}; "
                "expected a mapping (a dict)"
            )
        if not isinstance(self.blocks, tuple):
            object.__setattr__(self, "blocks", tuple(self.blocks))
        blocks = self.blocks
        if (
            len(blocks) == 1
            and type(blocks[0]) is Text
            and type(blocks[0].text) is str
            and self.role in _TEXT_ROLES
        ):  # one text: no call, no result, nothing else to check
            object.__setattr__(self, "_calls", ())
            object.__setattr__(self, "_results", ())
            return
        object.__setattr__(self, "_calls", tuple(b for b in blocks if isinstance(b, ToolCall)))
        object.__setattr__(self, "_results", tuple(b for b in blocks if isinstance(b, ToolResult)))
        allowed = _ALLOWED.get(self.role)
        if allowed is None:
            raise TranscriptError(f"message role is {self.role!r}; expected one of {sorted(ROLES)}")
        for i, block in enumerate(self.blocks):
            if not isinstance(block, allowed):
                names = ", ".join(t.__name__ for t in allowed)
                raise TranscriptError(
                    f"{self.role} message block {i} is {type(block).__name__}; "
                    f"a {self.role} message holds only {names}"
                )
            bad = _bad_field(block)
            if bad is not None:
                raise TranscriptError(f"{self.role} message block {i}: {bad}")

    @property
    def text(self) -> str:
        """The :class:`Text` blocks joined with newlines."""
        blocks = self.blocks
        n = len(blocks)
        if (
            (n == 1 or (n == 2 and type(blocks[1]) is ToolCall))
            and type(blocks[0]) is Text
            and type(blocks[0].text) is str
        ):
            # one text (then a tool call, as an assistant's): what the join gives for one
            # item, the str itself
            return blocks[0].text
        if n == 1 and type(blocks[0]) in _NO_TEXT:
            return ""  # one tool result, or one call: the join of nothing
        return "\n".join(b.text for b in blocks if isinstance(b, Text))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The :class:`ToolCall` blocks, in order."""
        return self._calls

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        """The :class:`ToolResult` blocks, in order."""
        return self._results

    @property
    def failed(self) -> bool:
        """True when this assistant turn ended in error or was aborted."""
        return self.stop_reason in FAILED_STOP_REASONS

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message holding one text block."""
        return cls("system", (Text(text),))

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text block."""
        return cls("user", (Text(text),))

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Iterable[ToolCall] = ()) -> Message:
        """An assistant message: the text (if any) followed by the tool calls."""
        blocks: list[Block] = [Text(text)] if text else []
        blocks.extend(tool_calls)
        return cls("assistant", tuple(blocks))

    @classmethod
    def tool(
        cls,
        call_id: str,
        output: str | Sequence[Text | Image],
        *,
        name: str | None = None,
        is_error: bool = False,
    ) -> Message:
        """A tool message holding the result of one call.

        Raises:
            TranscriptError: ``output`` is neither a str nor a sequence of Text/Image items.
        """
        if isinstance(output, str):
            content: tuple[Text | Image, ...] = (Text(output),)
        elif isinstance(output, Iterable) and not isinstance(output, (bytes, Mapping)):
            content = tuple(output)
        else:
            raise TranscriptError(
                f"tool output for {call_id!r} is {type(output).__name__} {output!r:.60}; "
                "expected a str or a sequence of Text/Image items"
            )
        return cls("tool", (ToolResult(call_id, content, is_error, name),))


@dataclass(frozen=True, slots=True)
class Transcript:
    """An immutable conversation.

    Args:
        messages: The messages, oldest first.
        source_format: The format it was loaded from (``"pi"``, ``"anthropic"``...), if any.
        meta: Free metadata about the source (file, session id, compactions...); not compared.

    Raises:
        TranscriptError: an item of ``messages`` is not a :class:`Message`.
    """

    messages: tuple[Message, ...]
    source_format: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        for i, m in enumerate(self.messages):
            if not isinstance(m, Message):
                raise TranscriptError(f"messages[{i}] is {type(m).__name__}; expected Message")

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Transcript: ...
    def __getitem__(self, index: int | slice) -> Message | Transcript:
        if isinstance(index, slice):
            return self.replace(self.messages[index])
        return self.messages[index]

    def __repr__(self) -> str:
        return f"Transcript({len(self.messages)} messages, source_format={self.source_format!r})"

    def replace(self, messages: Iterable[Message]) -> Transcript:
        """A transcript with other messages and the same source format and metadata."""
        return dataclasses.replace(self, messages=tuple(messages))

    def to(self, provider: str, **options: Any) -> dict[str, Any]:
        """Render the request payload for ``provider``.

        Hygiene for the provider runs first (see :func:`ctxengine.hygiene.clean`) unless
        ``hygiene=False``. See :func:`ctxengine.transcript.render` for the options.

        Args:
            provider: ``"openai"``, ``"openai-responses"``, ``"anthropic"`` or ``"gemini"``.
            **options: ``hygiene``, ``cache_breakpoints``, ``cache_ttl``, ``id_mode``,
                ``max_images``.

        Raises:
            AdapterError: unknown provider or option, or a transcript that hygiene could not
                make valid.
        """
        if _renderer is None:
            # ``import ctxengine`` is lazy and does not import the render layer: load it on the
            # first render (importing it installs the renderer through set_renderer).
            importlib.import_module("ctxengine.inject.render")
        if _renderer is None:
            raise TranscriptError(
                "no renderer installed: ctxengine.inject.render did not call set_renderer"
            )
        return _renderer(self, provider, options)


#: Renders a transcript for a provider: installed by :mod:`ctxengine.inject.render`, which
#: :meth:`Transcript.to` imports on first use, so the neutral model never imports the layer
#: that renders it at import time (and ``import ctxengine`` stays cheap).
Renderer = Callable[[Transcript, str, dict[str, Any]], dict[str, Any]]
_renderer: Renderer | None = None


def set_renderer(renderer: Renderer) -> None:
    """Install the function behind :meth:`Transcript.to`."""
    global _renderer
    _renderer = renderer


def copy_data(value: Any) -> Any:
    """A copy of JSON-like data: dicts and lists copied all the way down, other values shared
    (strings, numbers and tuples cannot be changed in place)."""
    if isinstance(value, dict):
        return {k: copy_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_data(v) for v in value]
    return value


def detached(message: Any) -> Any:
    """``message`` with its own copies of what a frozen message still holds mutable (tool-call
    arguments, ``meta``); the message itself when it holds nothing mutable."""
    calls = getattr(message, "tool_calls", ())
    meta = getattr(message, "meta", None)
    # an empty meta dict too: a key added to it would be added to the stored message's
    if not isinstance(message, Message) or (not calls and not isinstance(meta, MutableMapping)):
        return message
    blocks = tuple(
        ToolCall(b.id, b.name, copy_data(b.arguments)) if isinstance(b, ToolCall) else b
        for b in message.blocks
    )
    return Message(
        message.role,
        blocks,
        id=message.id,
        stop_reason=message.stop_reason,
        meta=copy_data(dict(meta)) if meta else {},
    )
