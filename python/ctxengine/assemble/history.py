"""Transcript messages as assembly items: node ids, turn groups, features, token overheads.

A user or assistant message is one item (``hist.<index>``); each tool result is its own item
(``act.tool_result.<call id>``), so a large result can be trimmed alone. Items are grouped into
steps that the core keeps or removes whole: a user message alone, or an assistant message with
the results of its tool calls. So a tool call is never separated from its result, and a long
agent run under one user request can still lose its oldest steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from .. import _core
from ..collect.namespaces import node_suffix
from ..grain import ContextGrain
from ..imagesize import image_size
from ..pdfpages import pdf_pages
from ..tokens import (
    IMAGE_TOKENS,
    is_text_media,
    media_tokens,
    pdf_page_tokens,
    text_media_tokens,
)
from ..transcript.model import (
    Block,
    Compaction,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from ..transcript.providers import family_of, image_placeholder
from .guard import truncate_tool_result

__all__ = (
    "FLAG",
    "KIND",
    "ROLE",
    "HistoryBuilder",
    "HistoryItem",
    "call_texts",
    "item_grains",
    "tool_result_node_id",
    "transcript_grain",
)

# The codes of the core's columns, by the names this module uses (the core owns the values).
KIND: Final = {
    "context": _core.KIND_CONTEXT,
    "message": _core.KIND_MESSAGE,
    "tool_result": _core.KIND_TOOL_RESULT,
}
ROLE: Final = {
    "system": _core.ROLE_SYSTEM,
    "user": _core.ROLE_USER,
    "assistant": _core.ROLE_ASSISTANT,
    "tool": _core.ROLE_TOOL,
}
FLAG: Final = {
    "tool_call": _core.FLAG_HAS_TOOL_CALL,
    "feedback": _core.FLAG_FEEDBACK,
    "structural": _core.FLAG_STRUCTURAL,
    "image": _core.FLAG_IMAGE,
    "protected": _core.FLAG_PROTECTED,
}

#: Tokens of OpenAI message framing: 3 per message plus the role.
MESSAGE_OVERHEAD: Final = 4

# The same codes as plain module constants (read once per message on a cold render).
_KIND_CONTEXT: Final[int] = _core.KIND_CONTEXT
_KIND_MESSAGE: Final[int] = _core.KIND_MESSAGE
_KIND_TOOL_RESULT: Final[int] = _core.KIND_TOOL_RESULT
_ROLE_TOOL: Final[int] = _core.ROLE_TOOL
_TOOL_CALL: Final[int] = _core.FLAG_HAS_TOOL_CALL
_STRUCTURAL_FLAG: Final[int] = _core.FLAG_STRUCTURAL
_FEEDBACK_FLAG: Final[int] = _core.FLAG_FEEDBACK
_IMAGE: Final[int] = _core.FLAG_IMAGE
_PROTECTED: Final[int] = _core.FLAG_PROTECTED
_ROLE_NAME: Final[dict[int, str]] = {code: name for name, code in ROLE.items()}


_FEEDBACK = re.compile(
    r"^\s*(thanks|thank you|great|perfect|nice|good|wrong|no[,.!]|nope|not what|that's not|"
    r"that is not|doesn't work|does not work|still (fails|broken)|works|correct|incorrect|stop)\b",
    re.IGNORECASE,
)
_STRUCTURAL = re.compile(
    r"(edit|write|create|delete|remove|rename|move|patch|replace|apply|commit|insert|mkdir)",
    re.IGNORECASE,
)


def transcript_grain(
    node_id: str, text: str, priority: int, protected: bool, meta: dict[str, Any]
) -> ContextGrain:
    """The ``transcript`` grain of a history item (lifespan ``session``, no window).

    Its fields are valid by construction: a node id made by :class:`HistoryBuilder`, an int
    priority, text the session repaired on entry. So for ASCII text (nothing to re-check) the
    grain is made without running :meth:`ContextGrain.check`, which costs more than the rest of
    the item on a cold render; other text is checked as usual."""
    if not text.isascii():
        return ContextGrain(node_id, "transcript", text, priority, "session", None, protected, meta)
    grain: ContextGrain = object.__new__(ContextGrain)
    grain.node_id, grain.origin, grain.content = node_id, "transcript", text
    grain.priority, grain.lifespan, grain.window = priority, "session", None
    grain.protected, grain.meta = protected, meta
    return grain


@lru_cache(maxsize=1024)
def _structural(tool_name: str) -> bool:
    """Whether a tool of this name changes things (edits, writes, commits...)."""
    return _STRUCTURAL.search(tool_name) is not None


#: An inline image's size and OpenAI detail: ``(width, height, detail)``.
ImageSize = tuple[int, int, "str | None"]


def sized_image(b: Image) -> ImageSize | None:
    """The size of inline image ``b`` (:func:`~ctxengine.imagesize.image_size`) with its
    detail; None for an image by URL, other media, or data whose header does not give it."""
    data = b.data
    if data is None or not b.media_type.startswith("image/"):
        return None
    size = image_size(data)
    return None if size is None else (size[0], size[1], b.detail)


def _placeholder_texts(blocks: Sequence[Block]) -> tuple[str, ...]:
    """The text placeholder of each media item among ``blocks``."""
    return tuple(image_placeholder(b).text for b in blocks if isinstance(b, Image))


def _media(blocks: Sequence[Block], sizes: list[ImageSize], pdfs: list[int | str]) -> int:
    """The tokens of the media among ``blocks``, the sizes of its sized images added to
    ``sizes`` (each counted as :data:`~ctxengine.tokens.IMAGE_TOKENS` here) and the pages of
    its inline PDFs to ``pdfs`` (each counted for no provider here: the largest count of the
    providers, :func:`~ctxengine.tokens.pdf_tokens`), and the data of its inline text files
    (each counted as :data:`~ctxengine.tokens.IMAGE_TOKENS` here: :func:`pdf_overhead`)."""
    media = 0
    for b in blocks:
        if isinstance(b, Image):
            size = sized_image(b)
            if size is None:
                media += media_tokens(b.media_type, b.data)
                if b.data is not None and b.media_type == _PDF:
                    pdfs.append(pdf_pages(b.data))
                elif b.data is not None and is_text_media(b.media_type):
                    pdfs.append(b.data)
            else:
                sizes.append(size)
                media += IMAGE_TOKENS
    return media


_PDF: Final = "application/pdf"


def pdf_overhead(pdfs: tuple[int | str, ...], provider: str, model: str) -> int:
    """What ``provider`` bills for the inline documents of ``pdfs`` sent to ``model`` over
    the count for no provider an item's overhead holds for them: a PDF of that many pages by
    the provider's rule for its pages (0 or less), a text file (its base64 data) by its text
    for Gemini, which reads it so (:func:`~ctxengine.tokens.text_media_tokens`), 0 elsewhere
    (its placeholder is sent). The plan counts each as the payload sent to ``provider`` does."""
    if not pdfs:
        return 0
    pages, extra = 0, 0
    for p in pdfs:
        if isinstance(p, int):
            pages += p
        elif provider == "gemini":
            extra += text_media_tokens(p, model) - IMAGE_TOKENS
    if pages:
        extra += pages * (pdf_page_tokens(provider, model) - pdf_page_tokens(None))
    return extra


@dataclass(slots=True)
class HistoryItem:
    """One assembly item derived from the transcript."""

    node_id: str
    index: int  # message index in the session transcript
    result: int  # index of the ToolResult inside a tool message, -1 otherwise
    text: str
    kind: int
    role: int
    turn: int
    flags: int
    overhead_texts: tuple[str, ...]  # tool call names and arguments (counted, never trimmed)
    overhead: int
    label: str
    grain_text: str  # the text the item was made with (its grain's content)
    source_text: str  # the text as the message holds it (compose re-renders when they differ)
    guarded_from: int = 0  # characters before the window guard cut it (0: not cut)
    composed: tuple[str, Message] | None = None  # last rendered (text, message), reused
    thinking: tuple[Thinking, ...] = ()  # counted only for a provider its export sends it to
    family: str | None = None  # the provider whose signatures the message carries
    tool: str | None = None  # a tool result's tool name
    #: A provider compaction the message opens: what its provider is sent of it besides its
    #: text is counted only for that provider (another is sent its text, or nothing)
    compaction: Compaction | None = None
    #: The inline images of a size their header gives, ``(width, height, OpenAI detail)``:
    #: :attr:`overhead` counts each as :data:`~ctxengine.tokens.IMAGE_TOKENS`, and a render
    #: counts them by its provider's rule (:func:`~ctxengine.assemble.sync.image_overhead`)
    images: tuple[ImageSize, ...] = ()
    #: The tokens :attr:`overhead` counts for the item's media (images, PDFs, audio), and
    #: the text placeholder each one is sent as where a provider takes no media at the
    #: item's place (an assistant turn but for Gemini, an OpenAI Chat tool result): a render
    #: for such a provider counts those texts instead
    #: (:func:`~ctxengine.assemble.sync.media_overhead`)
    media: int = 0
    placeholders: tuple[str, ...] = ()
    #: The pages of each inline PDF, and the base64 data of each inline text file:
    #: :attr:`overhead` counts each for no provider (a PDF by the largest count, a text file as
    #: an image), and a render counts them by its provider's rule (:func:`pdf_overhead`)
    pdfs: tuple[int | str, ...] = ()
    # :attr:`grain`, once made (not compared: an item equals itself before and after)
    made_grain: ContextGrain | None = field(default=None, compare=False, repr=False)

    @property
    def grain(self) -> ContextGrain:
        """The item's ``transcript`` grain (:func:`transcript_grain`), made on first use: a
        cold render reads it only for the items it keeps, a few hundred of a long session."""
        grain = self.made_grain
        if grain is None:
            context = self.kind == _KIND_CONTEXT
            meta: dict[str, Any] = {"message_index": self.index, "role": _ROLE_NAME[self.role]}
            if self.kind == _KIND_TOOL_RESULT:
                meta["tool"] = self.tool
            grain = transcript_grain(
                self.node_id, self.grain_text, 0 if context else 100, context, meta
            )
            self.made_grain = grain
        return grain

    @grain.setter
    def grain(self, grain: ContextGrain) -> None:
        self.made_grain = grain


def item_grains(items: Sequence[HistoryItem | None]) -> list[ContextGrain | None]:
    """``[i.grain if i is not None else None for i in items]``, the grains not made yet made
    in the loop (:attr:`HistoryItem.grain` written out: a cold render makes the grain of every
    item it keeps here)."""
    out: list[ContextGrain | None] = []
    append = out.append
    new = object.__new__
    for item in items:
        if item is None:
            append(None)
            continue
        grain = item.made_grain
        if grain is None:
            kind, text = item.kind, item.grain_text
            context = kind == _KIND_CONTEXT
            meta: dict[str, Any] = {"message_index": item.index, "role": _ROLE_NAME[item.role]}
            if kind == _KIND_TOOL_RESULT:
                meta["tool"] = item.tool
            if text.isascii():  # as :func:`transcript_grain` makes it
                grain = new(ContextGrain)
                grain.node_id, grain.origin, grain.content = item.node_id, "transcript", text
                grain.priority, grain.lifespan = (0 if context else 100), "session"
                grain.window, grain.protected, grain.meta = None, context, meta
            else:
                grain = transcript_grain(item.node_id, text, 0 if context else 100, context, meta)
            item.made_grain = grain
        append(grain)
    return out


def call_texts(calls: Sequence[ToolCall]) -> tuple[str, ...]:
    """What a message's tool calls add to its count: each name and its JSON arguments
    (:meth:`HistoryBuilder.message_item` writes the same out inline, in its one pass)."""
    return tuple(t for c in calls for t in (c.name, c.arguments_json))


def tool_result_node_id(call_id: str) -> str:
    """The node id of a tool result: ``act.tool_result.<call id>``, the id as
    :func:`~ctxengine.collect.namespaces.node_suffix` makes it safe (``""`` for an empty id)."""
    safe = node_suffix(call_id)
    return f"act.tool_result.{safe}" if safe else ""


def thinking_alone(blocks: tuple[Block, ...]) -> bool:
    """Whether ``blocks`` are thinking and nothing else (a turn logged as [thinking], then the
    rest: the history builder and the protected tail's start keep the two one turn)."""
    return bool(blocks) and all(type(b) is Thinking for b in blocks)


class HistoryBuilder:
    """Turns appended messages into items, tracking turns and tool names across calls."""

    def __init__(self) -> None:
        self.turn = -1
        #: Whether the last message was an assistant message of thinking alone: the assistant
        #: message after it is the same turn (a turn logged as [thinking], then [tool_use]),
        #: kept or cut with it (Anthropic wants a tool-loop turn to start with its thinking).
        self.leads = False
        self.max_result_chars: int | None = None
        self.tool_names: dict[str, str] = {}
        self.call_group: dict[str, int] = {}
        self.used_ids: set[str] = set()
        #: Call id → node id of the latest assistant item that made a call with it (the call a
        #: result with that id answers, as hygiene pairs them).
        self.call_items: dict[str, str] = {}
        #: (assistant item node id, call id) → node ids of the results answering that call
        #: (a call id used again later gets its own results, under ``-2``... node ids).
        self.answers: dict[tuple[str, str], list[str]] = {}
        #: Result node id → node id of the assistant item whose call it answers.
        self.result_owner: dict[str, str] = {}
        #: The item of the newest provider compaction
        #: (:class:`~ctxengine.transcript.model.Compaction`): the only one protected (the
        #: provider reads nothing before it, Anthropic drops it, OpenAI says it may be
        #: dropped). None: the session's messages held none, and a render looks for none.
        self.newest_compaction: HistoryItem | None = None
        #: Compaction items that were protected until a newer one came: the session upserts
        #: them again with their new flags.
        self.superseded: list[HistoryItem] = []

    def _node_id(self, base: str) -> str:
        """``base``, or ``base-2``, ``base-3``... when an earlier item took it."""
        used = self.used_ids
        node_id, n = base, 1
        while node_id in used:
            n += 1
            node_id = f"{base}-{n}"
        used.add(node_id)
        return node_id

    def items(self, index: int, message: Message) -> list[HistoryItem]:
        """Items for ``message`` at transcript position ``index``."""
        if message.role != "tool":
            return [self.message_item(index, message)]
        self.leads = False
        if self.turn < 0:
            self.turn = 0
        results = message.tool_results
        if len(results) == 1:  # the common case, without a comprehension's frame
            return [self._result(index, 0, results[0])]
        return [self._result(index, i, r) for i, r in enumerate(results)]

    def message_item(self, index: int, message: Message) -> HistoryItem:
        """The one item of ``message`` (not a tool message) at transcript position ``index``,
        which begins a turn (:meth:`items` without the list, for a caller's loop)."""
        # One pass over the message; every per-message cold render goes through here, so the
        # work is written out (see tests/transcript/test_cold_fast_paths.py for the reference).
        role = message.role
        blocks = message.blocks
        if len(blocks) == 1 and type(blocks[0]) is Text and role != "system":
            return self._text_item(index, role, blocks[0].text)
        if self.leads and role == "assistant":
            turn = self.turn  # the thinking before it is this turn's start
        else:
            self.turn = turn = self.turn + 1
        # thinking alone (its first block thinking, checked first: most messages stop there)
        self.leads = bool(blocks) and type(blocks[0]) is Thinking and thinking_alone(blocks)
        calls = message.tool_calls
        flags = 0
        texts: tuple[str, ...] = ()
        if calls:
            flags = _TOOL_CALL
            names, groups = self.tool_names, self.call_group
            structural = False
            if len(calls) == 1:  # the common case, without the list
                call = calls[0]
                cid, name = call.id, call.name
                names[cid] = name
                groups[cid] = turn
                structural = _structural(name)
                parts: tuple[str, ...] | list[str] = (name, call.arguments_json)
            else:
                parts = []
                for call in calls:
                    cid, name = call.id, call.name
                    names[cid] = name
                    groups[cid] = turn
                    if not structural and _structural(name):
                        structural = True
                    parts.append(name)
                    parts.append(call.arguments_json)
            # hygiene strips the calls of a failed turn: they are sent, so counted, only else
            if not message.failed:
                texts = tuple(parts)
            if structural:
                flags |= _STRUCTURAL_FLAG
        media = 0
        sizes: list[ImageSize] | None = None  # made only for blocks of more kinds
        pdfs: list[int | str] | None = None
        thinking: tuple[Thinking, ...] = ()
        n = len(blocks)
        first = type(blocks[0]) if n else None
        if n == 1 and first is Text:
            text = blocks[0].text  # type: ignore[union-attr]
        elif n == 2 and first is Text and type(blocks[1]) is ToolCall:
            # text then one call (what ``Message.assistant`` builds): the join of one string
            text = blocks[0].text  # type: ignore[union-attr]
        else:
            sizes, pdfs = [], []
            strings: list[str] = []
            signed: list[Thinking] = []
            images = 0
            for b in blocks:
                if isinstance(b, Text):
                    strings.append(b.text)
                elif isinstance(b, Image):
                    images += 1
                    media += _media((b,), sizes, pdfs)
                elif isinstance(b, Thinking) and (b.text or b.signature):
                    # Thinking goes back only to the provider that signed it (``exportable``):
                    # counted for the renders that send it (never trimmed alone: the turn's
                    # overhead). Thinking with no text counts too: a Responses reasoning item
                    # with an empty summary is sent whole, with its encrypted content.
                    signed.append(b)
            text = "\n".join(strings)
            if images:
                flags |= _IMAGE
            if signed:
                thinking = tuple(signed)
        if first is Compaction:
            # a provider compaction stands for all before it: never cut (as system text)
            # while it is the newest, sent verbatim to its provider, so what that payload
            # reads of it is counted
            flags |= _PROTECTED
            older = self.newest_compaction
            if older is not None and older.flags & _PROTECTED:
                older.flags &= ~_PROTECTED
                self.superseded.append(older)
        if role == "user" and (len(text) > 40 or _FEEDBACK.search(text)):
            # Explicit user input: a request worth stating, or feedback on the last step.
            flags |= _FEEDBACK_FLAG
        if role == "system":
            kind, flags = _KIND_CONTEXT, flags | _PROTECTED
            base = f"sys.transcript.{index}"
        else:
            kind = _KIND_MESSAGE
            base = f"hist.{index}"
        node_id = self._node_id(base)
        if calls:
            owners = self.call_items
            for call in calls:
                owners[call.id] = node_id
        item = HistoryItem(
            node_id,
            index,
            -1,
            text,
            kind,
            ROLE[role],
            turn,
            flags,
            texts,
            MESSAGE_OVERHEAD + media,
            f"{role} message {index}",
            text,
            text,
            0,
            None,
            thinking,
            family_of(message) if thinking else None,
        )
        if sizes:
            item.images = tuple(sizes)
        if pdfs:
            item.pdfs = tuple(pdfs)
        if media:
            item.media = media
            if role == "assistant":  # the only message a provider gets its media as text in
                item.placeholders = _placeholder_texts(blocks)
        if first is Compaction:
            item.compaction = blocks[0]  # type: ignore[assignment]
            self.newest_compaction = item
        return item

    def _text_item(self, index: int, role: str, text: str) -> HistoryItem:
        """:meth:`message_item` of a user or assistant message of one text (an exact
        :class:`Text`), the most common: no call, thinking, media or compaction to look at."""
        if self.leads and role == "assistant":
            turn = self.turn  # the thinking before it is this turn's start
        else:
            self.turn = turn = self.turn + 1
        self.leads = False
        flags = 0
        if role == "user" and (len(text) > 40 or _FEEDBACK.search(text)):
            flags = _FEEDBACK_FLAG  # explicit user input, as :meth:`message_item` says
        node_id = self._node_id(f"hist.{index}")
        return HistoryItem(
            node_id,
            index,
            -1,
            text,
            _KIND_MESSAGE,
            ROLE[role],
            turn,
            flags,
            (),
            MESSAGE_OVERHEAD,
            f"{role} message {index}",
            text,
            text,
            0,
            None,
            (),
            None,
        )

    def _result(self, index: int, position: int, result: ToolResult) -> HistoryItem:
        call_id = result.call_id
        name = result.name or self.tool_names.get(call_id, "tool")
        content = result.content
        sizes: tuple[ImageSize, ...] = ()
        pdfs: tuple[int | str, ...] = ()
        if len(content) == 1 and type(content[0]) is Text:
            images, media, source = 0, 0, content[0].text
        else:
            images = sum(isinstance(b, Image) for b in content)
            sized: list[ImageSize] = []
            pages: list[int | str] = []
            media = _media(content, sized, pages)
            sizes = tuple(sized)
            pdfs = tuple(pages)
            source = "\n".join(b.text for b in content if isinstance(b, Text))
        if call_id.isascii() and call_id.isalnum():  # safe as it is (:func:`node_suffix`)
            base = "act.tool_result." + call_id
        else:
            base = tool_result_node_id(call_id) or f"act.tool_result.m{index}"
        node_id = self._node_id(base)
        owner = self.call_items.get(call_id)
        if owner is not None:
            self.answers.setdefault((owner, call_id), []).append(node_id)
            self.result_owner[node_id] = owner
        text = source
        limit = self.max_result_chars
        if limit is not None and len(source) > limit:
            text = truncate_tool_result(source, limit)
        return HistoryItem(  # every field by position (faster than by keyword)
            node_id,
            index,
            position,
            text,
            _KIND_TOOL_RESULT,
            _ROLE_TOOL,
            self.call_group.get(call_id, self.turn),
            _IMAGE if images else 0,
            (call_id,),
            MESSAGE_OVERHEAD + media,
            f"tool result: {name}",
            text,
            source,
            len(source) if text is not source else 0,
            None,
            (),
            None,
            name,
            None,
            sizes,
            media,
            _placeholder_texts(content) if media else (),
            pdfs,
        )
