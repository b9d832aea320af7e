"""Inject: turn a plan into a neutral transcript, and count the payload rendered from it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..assemble.history import KIND
from ..grain import ContextGrain
from ..tokens import _message_strings, count_messages, get_tokenizer
from ..transcript.model import Message, Text, Transcript

if TYPE_CHECKING:
    from ..engine import Session

__all__ = ("MessageTokenCache", "compose", "payload_tokens")

SEPARATOR: Final = "\n\n"
_SKIP_KEYS: Final = frozenset(
    {"type", "role", "cache_control", "media_type", "mime_type", "mimeType", "signature", "data"}
)
_MESSAGE_OVERHEAD: Final = 4
_REPLY_PRIMING: Final = 3


def _context_texts(session: Session, plan: Any, by_id: Mapping[str, ContextGrain]) -> list[str]:
    """System-message texts: stable grains first (cache-friendly), per-turn grains last."""
    replacements = plan.replacements
    stable: list[str] = []
    volatile: list[str] = []
    for node_id in plan.context_order:
        grain = by_id.get(node_id)
        item = session._items.get(node_id)
        text = replacements.get(node_id)
        if text is None:
            text = grain.text if grain is not None else item.text if item is not None else ""
        if not text:
            continue
        turn_only = grain is not None and grain.lifespan == "turn" and grain.branch != "sys"
        (volatile if turn_only else stable).append(text)
    return stable + volatile


def _with_text(message: Message, text: str) -> Message:
    """``message`` with its text blocks replaced by one block holding ``text``."""
    blocks: list[Any] = []
    placed = False
    for block in message.blocks:
        if isinstance(block, Text):
            if not placed:
                blocks.append(Text(text))
                placed = True
            continue
        blocks.append(block)
    if not placed:
        blocks.insert(0, Text(text))
    return dataclasses.replace(message, blocks=tuple(blocks))


def _history(session: Session, plan: Any) -> Iterator[Message]:
    replacements = plan.replacements
    for node_id in plan.history_order:
        item = session._items.get(node_id)
        if item is None:  # a placeholder standing for removed turns
            yield Message.user(replacements.get(node_id, f"[{node_id}]"))
            continue
        message = session.messages[item.index]
        text = replacements.get(node_id, item.text)
        if text is item.source_text and (
            item.kind != KIND["tool_result"] or len(message.blocks) == 1
        ):
            yield message
        elif item.composed is not None and item.composed[0] is text:
            yield item.composed[1]
        else:
            composed = _recompose(message, item.result, text, text is not item.source_text)
            item.composed = (text, composed)
            yield composed


def _recompose(message: Message, result_index: int, text: str, changed: bool) -> Message:
    """``message`` carrying ``text``: one result of a tool message, or the text of a turn."""
    if result_index < 0:
        return _with_text(message, text)
    result = message.tool_results[result_index]
    if changed:
        result = dataclasses.replace(result, content=(Text(text),))
    return dataclasses.replace(message, blocks=(result,))


def compose(session: Session, plan: Any, by_id: Mapping[str, ContextGrain]) -> Transcript:
    """The neutral transcript of a render: one system message, then the kept history."""
    texts = _context_texts(session, plan, by_id)
    messages = [Message.system(SEPARATOR.join(texts))] if texts else []
    messages.extend(_history(session, plan))
    return Transcript(tuple(messages), source_format="render")


def _strings(value: Any, key: str = "") -> Iterator[str]:
    if key in _SKIP_KEYS:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        if key in {"input", "args", "arguments"}:
            yield json.dumps(value, ensure_ascii=False)
            return
        for k, v in value.items():
            yield from _strings(v, k)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v, key)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


class MessageTokenCache:
    """Exact OpenAI tokens per rendered message, reused while the message object is unchanged.

    Renders reuse the session's frozen :class:`Message` objects, and hygiene returns unchanged
    messages as they are, so a warm render recounts only its new or changed messages. Entries
    hold their message (keeping its id valid) and live for one render after their last use.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Message, int]] = {}

    def openai_tokens(self, transcript: Transcript, payload: Mapping[str, Any], model: str) -> int:
        """Tokens of an OpenAI Chat payload rendered one dict per message from ``transcript``."""
        dicts = payload.get("messages", [])
        if len(dicts) != len(transcript.messages):  # not one dict per message: count it all
            self._entries = {}
            return count_messages(dicts, model=model)
        fresh: dict[int, tuple[Message, int]] = {}
        missing = [i for i, m in enumerate(transcript.messages) if id(m) not in self._entries]
        if missing:
            strings, overheads = zip(*(_message_strings(dicts[i]) for i in missing), strict=True)
            counts = iter(get_tokenizer(model).count_many([t for ts in strings for t in ts]))
            for i, texts, overhead in zip(missing, strings, overheads, strict=True):
                m = transcript.messages[i]
                fresh[id(m)] = (m, overhead + sum(next(counts) for _ in texts))
        total = _REPLY_PRIMING
        for m in transcript.messages:
            entry = fresh.get(id(m)) or self._entries[id(m)]
            fresh[id(m)] = entry
            total += entry[1]
        self._entries = fresh
        return total


def payload_tokens(payload: Mapping[str, Any], provider: str, model: str) -> int:
    """Tokens of a rendered payload.

    OpenAI Chat Completions: exact, by OpenAI's documented per-message rule
    (:func:`~ctxengine.count_messages`). Other shapes: every text leaf counted (ids, types and
    binary data excluded), plus 4 tokens per message and 3 for the reply.
    """
    if provider == "openai":
        return count_messages(payload.get("messages", []), model=model)
    items = payload.get("messages") or payload.get("input") or payload.get("contents") or []
    texts = [
        s
        for k, v in payload.items()
        if k not in {"messages", "input", "contents"}
        for s in _strings(v, k)
    ]
    texts += [s for item in items for s in _strings(item)]
    counts = get_tokenizer(model).count_many(texts)
    return sum(counts) + _MESSAGE_OVERHEAD * (len(items) + 1) + _REPLY_PRIMING
