"""The selection behind :func:`ctxengine.integrations.langchain.trim_messages`.

LangChain's algorithm (keep a prefix or a suffix that fits ``max_tokens``, optionally a partial
message, then ``start_on``/``end_on``), over *groups* instead of messages: an ``AIMessage`` with
tool calls and the ``ToolMessage`` results that follow it are one group, kept or cut whole.

Counting: an additive counter (ctxengine's exact counter, ``count_tokens_approximately``, a
per-message callable, ``len``) is called once per message and the selection runs on prefix
sums, O(n). The exact and approximate counts are cached between calls, keyed on the message
object and checked against a snapshot of what was counted (a message edited in place is counted
again), so a warm call on a growing history only counts the new messages. Any other callable
on a list is a black box: it is called on forward-ordered slices at group boundaries (binary
search, like LangChain).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

from ..errors import ConfigError, EncodingError
from ..tokens import (
    IMAGE_TOKENS,
    audio_tokens,
    document_text,
    get_tokenizer,
    image_tokens,
    input_audio_tokens,
    part_file_tokens,
    part_image_tokens,
    pdf_tokens,
)
from ..transcript.model import copy_data

__all__ = (
    "Counter",
    "call_ids",
    "end_on_cut",
    "has_calls",
    "resolve_counter",
    "select_first",
    "select_last",
    "start_on_cut",
)

_REPLY_PRIMING: Final = 3  # OpenAI's rule, as ctxengine.count_messages
_PER_MESSAGE: Final = 3
_MAX_CACHE: Final = 200_000
_ROLE: Final = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}

#: Content blocks charged as ``ctxengine.count_messages`` and the engine charge an image or a
#: PDF part: OpenAI's ``image_url`` / ``file`` (and the Responses names), LangChain's standard
#: ``image`` / ``file`` blocks (url, base64 or id), Anthropic's ``image`` / ``document`` (any
#: source). An image with inline data counts by OpenAI's rule for its size
#: (:func:`~ctxengine.tokens.image_tokens`), an inline PDF by its rule for its pages
#: (:func:`~ctxengine.tokens.pdf_tokens`), any other :data:`~ctxengine.tokens.IMAGE_TOKENS`.
_MEDIA_BLOCKS: Final = frozenset(
    {"image", "image_url", "input_image", "file", "input_file", "document"}
)
_IMAGE_BLOCKS: Final = frozenset({"image", "image_url", "input_image"})

MessageType = str | type[BaseMessage] | Sequence[str | type[BaseMessage]]


def call_ids(m: BaseMessage) -> list[Any]:
    """The ids of the calls an ``AIMessage`` makes (none for another message): its
    ``tool_calls``, then its ``invalid_tool_calls`` (arguments that did not parse), which
    ChatOpenAI sends as tool calls too (langchain_openai ``_convert_message_to_dict``) and
    ``create_agent`` answers with an error ``ToolMessage`` (``_patch_invalid_tool_calls``)."""
    if not isinstance(m, AIMessage):
        return []
    return [c.get("id") for c in m.tool_calls] + [c.get("id") for c in m.invalid_tool_calls]


def has_calls(m: BaseMessage) -> bool:
    """Whether ``m`` is an ``AIMessage`` with tool calls, valid or invalid."""
    return isinstance(m, AIMessage) and bool(m.tool_calls or m.invalid_tool_calls)


def _extra(m: BaseMessage) -> tuple[str, ...]:
    """The attributes a count of ``m`` reads besides its ``content`` and ``name``: the tool
    calls (valid and invalid) of an ``AIMessage``, the call id of a ``ToolMessage``, the role of
    a ``ChatMessage``."""
    if isinstance(m, AIMessage):
        return ("tool_calls", "invalid_tool_calls")
    if isinstance(m, ToolMessage):
        return ("tool_call_id",)
    if isinstance(m, ChatMessage):
        return ("role",)
    return ()


class _Cache:
    """Counts of message objects, each with a snapshot of what was counted (``content``,
    ``name`` and :func:`_extra`): a count is used again only while the message compares equal
    to its snapshot, so an edit in place (a block appended to a ``content`` list, a text or a
    tool call's arguments changed) is counted anew. For an unchanged message the comparison is
    mostly identity checks of the values it shares with its snapshot."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[
            int, tuple[BaseMessage, object, object, tuple[str, ...], tuple[object, ...], int]
        ] = {}

    def counts(
        self, messages: Sequence[BaseMessage], count: Callable[[BaseMessage], int]
    ) -> list[int]:
        entries = self.entries
        if len(entries) > _MAX_CACHE:
            entries.clear()
        out: list[int] = []
        for m in messages:
            hit = entries.get(id(m))
            if (
                hit is not None
                and hit[0] is m
                and hit[1] == m.content
                and hit[2] == m.name
                and all(getattr(m, a) == v for a, v in zip(hit[3], hit[4], strict=True))
            ):
                out.append(hit[5])
            else:
                n = count(m)
                extra = _extra(m)
                state = tuple(copy_data(getattr(m, a)) for a in extra)
                entries[id(m)] = (m, copy_data(m.content), m.name, extra, state, n)
                out.append(n)
        return out


_APPROX_CACHE = _Cache()
_EXACT_CACHES: dict[str, _Cache] = {}


def _approximate(message: BaseMessage) -> int:
    return count_tokens_approximately([message])


def _exact_strings(m: BaseMessage, model: str | None = None) -> tuple[list[str], int]:
    """Strings ctxengine counts for ``m`` as an OpenAI chat message sent to ``model``, and its
    fixed overhead."""
    role = m.role if isinstance(m, ChatMessage) else _ROLE.get(m.type, m.type)
    strings = [role]
    overhead = _PER_MESSAGE
    content = m.content
    if isinstance(content, str):
        strings.append(content)
    else:
        for block in content:
            if isinstance(block, str):
                strings.append(block)
            elif isinstance(block.get("text"), str):
                strings.append(block["text"])
            elif (text := document_text(block)) is not None:
                strings.append(text)
            else:
                overhead += _media_tokens(block, model)
    if m.name:
        strings.append(m.name)
        overhead += 1
    if isinstance(m, AIMessage):
        for call in m.tool_calls:
            strings += [call["name"], json.dumps(call["args"], ensure_ascii=False)]
        for bad in m.invalid_tool_calls:  # as ChatOpenAI sends one: the raw argument text
            strings += [x for x in (bad.get("name"), bad.get("args")) if isinstance(x, str)]
    elif isinstance(m, ToolMessage):
        strings.append(m.tool_call_id)
    return strings, overhead


def _media_tokens(block: dict[str, Any], model: str | None = None) -> int:
    """What ``ctxengine.count_messages`` charges for a media block of LangChain content sent
    to ``model``: an image with inline data by OpenAI's rule for its size, an inline PDF by
    OpenAI's rule for its pages (LangChain's ``file`` block with base64 data, OpenAI's
    ``file`` / ``input_file``, Anthropic's ``document``), another image or file
    :data:`~ctxengine.tokens.IMAGE_TOKENS`, audio by its duration (OpenAI's ``input_audio``,
    LangChain's ``audio`` with base64 data; audio by url or id as an image); 0 for any other
    block (a tool call in the content, reasoning: counted elsewhere or not at all)."""
    kind = block.get("type")
    if kind in _IMAGE_BLOCKS:
        data = block.get("base64")  # LangChain's v1 block; v0: ``source_type`` base64
        if not isinstance(data, str) and block.get("source_type") == "base64":
            data = block.get("data")
        if isinstance(data, str):
            return image_tokens(data, "openai", model=model)
        return part_image_tokens(block, "openai", model)
    if kind in _MEDIA_BLOCKS:
        data = block.get("base64", block.get("data"))  # LangChain's file block, v1 or v0
        if not isinstance(data, str):
            return part_file_tokens(block, "openai", model)
        # as the importer reads it: the type a data URL or ``mime_type`` gives, else a PDF
        mime = data[5:].partition(";")[0] if data.startswith("data:") else block.get("mime_type")
        if mime in (None, "", "application/pdf"):
            return pdf_tokens(data, "openai", model)
        return IMAGE_TOKENS
    if kind == "input_audio":
        return input_audio_tokens(block)
    if kind == "audio":
        data = block.get("base64", block.get("data"))
        return audio_tokens(data) if isinstance(data, str) else IMAGE_TOKENS
    return 0


class Counter:
    """A token counter resolved from ``token_counter``: additive (per message) or a list fn."""

    __slots__ = ("base", "cache", "list_fn", "one")

    def __init__(
        self,
        *,
        one: Callable[[BaseMessage], int] | None = None,
        cache: _Cache | None = None,
        base: int = 0,
        list_fn: Callable[[list[BaseMessage]], int] | None = None,
    ) -> None:
        self.one = one
        self.cache = cache
        self.base = base
        self.list_fn = list_fn

    @property
    def additive(self) -> bool:
        return self.one is not None

    def per_message(self, messages: Sequence[BaseMessage]) -> list[int]:
        assert self.one is not None
        if self.cache is not None:
            return self.cache.counts(messages, self.one)
        return [self.one(m) for m in messages]

    def total(self, messages: list[BaseMessage]) -> int:
        """The count of ``messages`` as one list (LangChain's ``token_counter(messages)``)."""
        if self.list_fn is not None:
            return self.list_fn(messages)
        return self.base + sum(self.per_message(messages))


def _exact(name: str) -> Counter:
    tokenizer = get_tokenizer(name)  # EncodingError: unknown

    def one(m: BaseMessage) -> int:
        strings, overhead = _exact_strings(m, name)
        return overhead + sum(tokenizer.count_many(strings))

    # by model, not encoding: an image's count depends on the model (OpenAI's rule for it)
    cache = _EXACT_CACHES.setdefault(name, _Cache())
    return Counter(one=one, cache=cache, base=_REPLY_PRIMING)


def _takes_message(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0].annotation in (BaseMessage, "BaseMessage")


def resolve_counter(token_counter: Any) -> Counter:
    """The :class:`Counter` for a ``token_counter`` argument of ``trim_messages``.

    Raises:
        ValueError: an unknown string, or neither a model nor a callable (LangChain's messages).
    """
    if isinstance(token_counter, str):
        if token_counter == "approximate":
            return Counter(one=_approximate, cache=_APPROX_CACHE)
        try:
            return _exact(token_counter)
        except EncodingError as exc:
            raise ConfigError(
                f"Invalid token_counter shortcut {token_counter!r}. Available shortcuts: "
                f"'approximate', or a model or encoding name ctxengine counts exactly ({exc})"
            ) from None
    if token_counter is count_tokens_approximately:
        return Counter(one=_approximate, cache=_APPROX_CACHE)
    name = getattr(token_counter, "name", None)
    if callable(getattr(token_counter, "encode_ordinary", None)) and isinstance(name, str):
        try:  # a tiktoken Encoding: the same ids, counted by ctxengine
            return _exact(name)
        except EncodingError:
            pass
    fn = getattr(token_counter, "get_num_tokens_from_messages", None)
    if callable(fn):
        kwargs = getattr(token_counter, "kwargs", None)
        tools = kwargs.get("tools") if isinstance(kwargs, dict) else None
        if tools:
            return Counter(list_fn=lambda ms: int(fn(ms, tools=tools)))
        return Counter(list_fn=fn)
    if token_counter is len:
        return Counter(one=lambda m: 1)
    if callable(token_counter):
        if _takes_message(token_counter):
            return Counter(one=token_counter)
        return Counter(list_fn=token_counter)
    raise ConfigError(
        "'token_counter' expected to be a model that implements "
        "'get_num_tokens_from_messages()' or a function. Received object of type "
        f"{type(token_counter)}."
    )


# -- groups and costs --------------------------------------------------------------------------


def group_bounds(messages: Sequence[BaseMessage]) -> list[int]:
    """Start indices of the groups, plus ``len(messages)``: an ``AIMessage`` with tool calls
    and the ``ToolMessage`` results answering it that follow are one group."""
    bounds = [0]
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        j = i + 1
        if has_calls(m):
            ids = set(call_ids(m))
            while j < n:
                result = messages[j]
                if not isinstance(result, ToolMessage) or result.tool_call_id not in ids:
                    break
                j += 1
        bounds.append(j)
        i = j
    return bounds


def group_start(messages: Sequence[BaseMessage], hi: int) -> int:
    """Start of the group that ends at ``hi`` (exclusive), found walking back: the same groups
    as :func:`group_bounds`, without scanning the messages before them."""
    last = messages[hi - 1]
    if not isinstance(last, ToolMessage):
        return hi - 1
    k = hi - 1
    while k > 0 and isinstance(messages[k - 1], ToolMessage):
        k -= 1
    call = messages[k - 1] if k > 0 else None
    if call is None or not has_calls(call):
        return hi - 1
    ids = set(call_ids(call))
    for p in range(k, hi):
        result = messages[p]
        if isinstance(result, ToolMessage) and result.tool_call_id not in ids:
            return hi - 1  # a result of another call ends the group before hi
    return k - 1


def group_end(messages: Sequence[BaseMessage], lo: int) -> int:
    """End (exclusive) of the group that starts at ``lo``."""
    m = messages[lo]
    j = lo + 1
    if has_calls(m):
        ids = set(call_ids(m))
        while j < len(messages):
            result = messages[j]
            if not isinstance(result, ToolMessage) or result.tool_call_id not in ids:
                break
            j += 1
    return j


class _Costs:
    """``cost(lo, hi)``: the count of ``messages[lo:hi]`` under a counter."""

    def __init__(self, messages: list[BaseMessage], counter: Counter) -> None:
        self.messages = messages
        self.counter = counter
        self.prefix: list[int] | None = None
        if counter.additive:
            prefix = [0]
            total = 0
            for n in counter.per_message(messages):
                total += n
                prefix.append(total)
            self.prefix = prefix

    def cost(self, lo: int, hi: int) -> int:
        if self.prefix is not None:
            return self.counter.base + self.prefix[hi] - self.prefix[lo]
        return self.counter.total(self.messages[lo:hi])

    def with_extra(self, lo: int, hi: int, extra: BaseMessage, *, before: bool) -> int:
        """The count of ``messages[lo:hi]`` with ``extra`` before or after them."""
        if self.prefix is not None:
            return self.cost(lo, hi) + self.counter.per_message([extra])[0]
        part = self.messages[lo:hi]
        return self.counter.total([extra, *part] if before else [*part, extra])

    def plus_one(self, lo: int, hi: int, extra: BaseMessage) -> int:
        """LangChain's text-split estimate: ``count(messages[lo:hi]) + count([extra])``."""
        if self.prefix is not None:
            return self.cost(lo, hi) + self.counter.per_message([extra])[0]
        return self.counter.total(self.messages[lo:hi]) + self.counter.total([extra])


def is_type(message: BaseMessage, type_: MessageType) -> bool:
    """LangChain's ``_is_message_type``."""
    types = [type_] if isinstance(type_, (str, type)) else type_
    names = [t for t in types if isinstance(t, str)]
    classes = tuple(t for t in types if isinstance(t, type))
    return message.type in names or isinstance(message, classes)


def _splittable(messages: list[BaseMessage], bounds: list[int], k: int) -> bool:
    """Whether group ``k`` may be cut partially: one message, no tool call or result."""
    if bounds[k + 1] - bounds[k] != 1:
        return False
    m = messages[bounds[k]]
    return not isinstance(m, ToolMessage) and not has_calls(m)


def _first_text(content: list[Any]) -> str | None:
    for block in content:
        if isinstance(block, str):
            return block
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            return text if isinstance(text, str) else None
    return None


def _partial(
    message: BaseMessage,
    fits_blocks: Callable[[BaseMessage], bool],
    fits_text: Callable[[BaseMessage], bool],
    splitter: Callable[[str], list[str]],
    *,
    from_end: bool,
) -> BaseMessage | None:
    """The largest part of ``message`` that fits: whole blocks first, then text splits.

    ``from_end`` keeps the end of the message (strategy "last"), else its start.
    """
    excluded = message.model_copy(deep=True)
    text: str | None = None
    if isinstance(message.content, list):
        blocks = list(message.content)
        for keep in range(len(blocks) - 1, 0, -1):
            excluded.content = blocks[-keep:] if from_end else blocks[:keep]
            if fits_blocks(excluded):
                return excluded
        text = _first_text(blocks[-1:] if from_end and blocks else blocks[:1])
    else:
        text = message.content
    if not text:
        return None
    splits = splitter(text)
    if from_end:
        splits = splits[::-1]
    left, right = 0, len(splits)
    while left < right:
        mid = (left + right + 1) // 2
        part = splits[:mid]
        excluded.content = "".join(part[::-1] if from_end else part)
        if fits_text(excluded):
            left = mid
        else:
            right = mid - 1
    if left == 0:
        return None
    part = splits[:left]
    excluded.content = "".join(part[::-1] if from_end else part)
    return excluded


def select_first(
    messages: list[BaseMessage],
    counter: Counter,
    max_tokens: int,
    splitter: Callable[[str], list[str]],
    *,
    allow_partial: bool,
    end_on: MessageType | None,
) -> list[BaseMessage]:
    """Strategy "first": the longest prefix of whole groups (plus a partial message) that fits."""
    n = len(messages)
    if n == 0:
        return []
    if counter.additive:
        kept = _first_additive(messages, counter, max_tokens, splitter, allow_partial)
        if end_on:
            kept = kept[: end_on_cut(kept, end_on)]
        return kept
    bounds = group_bounds(messages)
    costs = _Costs(messages, counter)
    if costs.cost(0, n) <= max_tokens:
        kept = messages
    else:
        lo, hi = 0, len(bounds) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if costs.cost(0, bounds[mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        idx = bounds[lo]
        kept = messages[:idx]
        if allow_partial and _splittable(messages, bounds, lo):
            part = _partial(
                messages[idx],
                lambda m: costs.with_extra(0, idx, m, before=False) <= max_tokens,
                lambda m: costs.plus_one(0, idx, m) <= max_tokens,
                splitter,
                from_end=False,
            )
            if part is not None:
                kept = [*kept, part]
    if end_on:
        kept = kept[: end_on_cut(kept, end_on)]
    return kept


def select_last(
    messages: list[BaseMessage],
    counter: Counter,
    max_tokens: int,
    splitter: Callable[[str], list[str]],
    *,
    allow_partial: bool,
    include_system: bool,
    start_on: MessageType | None,
    end_on: MessageType | None,
) -> list[BaseMessage]:
    """Strategy "last": the longest suffix of whole groups (plus a partial message) that fits,
    after the system message when ``include_system``."""
    if not messages:
        return []
    if end_on:
        messages = messages[: end_on_cut(messages, end_on)]
    system: BaseMessage | None = None
    if include_system and messages and isinstance(messages[0], SystemMessage):
        system, messages = messages[0], messages[1:]
    remaining = max_tokens
    if system is not None:
        extra = counter.per_message([system])[0] if counter.additive else counter.total([system])
        remaining = max(0, max_tokens - extra)
    kept = _last_groups(messages, counter, remaining, splitter, allow_partial=allow_partial)
    if start_on:
        kept = kept[start_on_cut(kept, start_on) :]
    return [system, *kept] if system is not None else kept


def start_on_cut(kept: list[BaseMessage], start_on: MessageType) -> int:
    """Where ``kept`` starts on a ``start_on`` message, cutting whole groups off its start
    (``len(kept)`` when none does)."""
    kb = group_bounds(kept)
    k = 0
    while k < len(kb) - 1 and not is_type(kept[kb[k]], start_on):
        k += 1
    return kb[k]


def end_on_cut(messages: Sequence[BaseMessage], end_on: MessageType, floor: int = 0) -> int:
    """Where ``messages`` end on an ``end_on`` message, cutting whole groups off their end, never
    before ``floor`` (``floor`` when none does)."""
    end = len(messages)
    while end > floor and not is_type(messages[end - 1], end_on):
        end = max(floor, group_start(messages, end))
    return end


def _last_groups(
    messages: list[BaseMessage],
    counter: Counter,
    budget: int,
    splitter: Callable[[str], list[str]],
    *,
    allow_partial: bool,
) -> list[BaseMessage]:
    n = len(messages)
    if n == 0:
        return []
    if counter.additive:
        return _last_additive(messages, counter, budget, splitter, allow_partial)
    bounds = group_bounds(messages)
    costs = _Costs(messages, counter)
    if costs.cost(0, n) <= budget:
        return messages
    g = len(bounds) - 1
    lo, hi = 0, g  # smallest group index k whose suffix fits; k == g keeps nothing
    while lo < hi:
        mid = (lo + hi) // 2
        if costs.cost(bounds[mid], n) <= budget:
            hi = mid
        else:
            lo = mid + 1
    start = bounds[lo]
    kept = messages[start:]
    if allow_partial and lo > 0 and _splittable(messages, bounds, lo - 1):
        part = _partial(
            messages[start - 1],
            lambda m: costs.with_extra(start, n, m, before=True) <= budget,
            lambda m: costs.plus_one(start, n, m) <= budget,
            splitter,
            from_end=True,
        )
        if part is not None:
            kept = [part, *kept]
    return kept


def _splittable_one(message: BaseMessage) -> bool:
    return not isinstance(message, ToolMessage) and not has_calls(message)


def _last_additive(
    messages: list[BaseMessage],
    counter: Counter,
    budget: int,
    splitter: Callable[[str], list[str]],
    allow_partial: bool,
) -> list[BaseMessage]:
    """Strategy "last" for an additive counter: walk groups back from the end, counting only
    the messages looked at (O(kept), not O(n))."""
    total = counter.base
    start = len(messages)
    lo = start
    while start > 0:
        lo = group_start(messages, start)
        add = sum(counter.per_message(messages[lo:start]))
        if total + add > budget:
            break
        total += add
        start = lo
    kept = messages[start:]
    if allow_partial and start > 0 and start - lo == 1 and _splittable_one(messages[lo]):
        used = total

        def fits(m: BaseMessage) -> bool:
            return used + counter.per_message([m])[0] <= budget

        part = _partial(messages[lo], fits, fits, splitter, from_end=True)
        if part is not None:
            kept = [part, *kept]
    return kept


def _first_additive(
    messages: list[BaseMessage],
    counter: Counter,
    budget: int,
    splitter: Callable[[str], list[str]],
    allow_partial: bool,
) -> list[BaseMessage]:
    """Strategy "first" for an additive counter: walk groups forward, O(kept)."""
    n = len(messages)
    total = counter.base
    end = 0
    hi = 0
    while end < n:
        hi = group_end(messages, end)
        add = sum(counter.per_message(messages[end:hi]))
        if total + add > budget:
            break
        total += add
        end = hi
    kept = messages[:end]
    if allow_partial and end < n and hi - end == 1 and _splittable_one(messages[end]):
        used = total

        def fits(m: BaseMessage) -> bool:
            return used + counter.per_message([m])[0] <= budget

        part = _partial(messages[end], fits, fits, splitter, from_end=False)
        if part is not None:
            kept = [*kept, part]
    return kept
