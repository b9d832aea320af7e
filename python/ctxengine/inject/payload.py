"""Tokens of a rendered payload: exact for OpenAI Chat, per text leaf for the other shapes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any, Final

from ..tokens import (
    IMAGE_TOKENS,
    count_messages,
    document_text,
    file_part_tokens,
    get_tokenizer,
    image_tokens,
    input_audio_tokens,
    media_tokens,
    message_strings,
    part_file_tokens,
    part_image_tokens,
)
from ..transcript.importers.gemini import response_text
from ..transcript.model import Compaction, Message, Thinking, Transcript
from ..transcript.providers import responses_reasoning_item
from .memo import RenderMemo

__all__ = (
    "MessageTokenCache",
    "compaction_texts",
    "payload_leaves",
    "payload_tokens",
    "thinking_texts",
)

#: Keys whose values are never text the model reads: a part's kind and role, cache markers,
#: media types, inline data (counted by its own rule) and the opaque signatures of thinking
#: (Anthropic's ``signature``, Gemini's ``thoughtSignature``), which the plan does not count
#: either (counting a Gemini loop's 4 KB signatures as text made its re-plans cut every step).
_SKIP_KEYS: Final = frozenset(
    {
        "type",
        "role",
        "cache_control",
        "media_type",
        "mime_type",
        "mimeType",
        "signature",
        "thoughtSignature",
        "thought_signature",
        "data",
    }
)
_MESSAGE_OVERHEAD: Final = 4
_REPLY_PRIMING: Final = 3
#: Part types (Anthropic, Responses, Chat) and Gemini part keys that carry an image: counted by
#: the provider's rule for the image's size (:func:`~ctxengine.tokens.part_image_tokens`), not
#: by the text of their data or URL. A PDF part (``document``, ``file``, ``input_file``, Gemini
#: inline ``application/pdf`` data) by the provider's rule for its pages
#: (:func:`~ctxengine.tokens.part_file_tokens`), as the plan counts it; audio (a Chat
#: ``input_audio`` part, Gemini inline audio) by :func:`~ctxengine.tokens.audio_tokens`, as the
#: plan counts it too.
_IMAGE_TYPES: Final = frozenset({"image", "input_image", "image_url"})
_FILE_TYPES: Final = frozenset({"document", "file", "input_file"})
_MEDIA_KEYS: Final = frozenset({"inline_data", "file_data", "inlineData", "fileData"})
_FUNCTION_RESPONSE: Final = frozenset({"functionResponse", "function_response"})


#: How an image or PDF part is counted: (the part or Gemini media value, Gemini or not) →
#: tokens.
ImageRule = Callable[[Mapping[str, Any], bool], int]


def _flat(part: Mapping[str, Any], gemini: bool) -> int:
    """The rule of the leaves read without a provider (texts only are wanted there)."""
    return IMAGE_TOKENS


@lru_cache(maxsize=64)
def _image_rule(provider: str, model: str) -> ImageRule:
    """Images and PDFs counted for ``provider`` and ``model``
    (:func:`~ctxengine.tokens.image_tokens`, :func:`~ctxengine.tokens.pdf_tokens`)."""

    def rule(part: Mapping[str, Any], gemini: bool) -> int:
        if not gemini:
            if part.get("type") in _FILE_TYPES:
                return part_file_tokens(part, provider, model)
            return part_image_tokens(part, provider, model)
        mime = part.get("mimeType", part.get("mime_type"))
        data = part.get("data")
        if isinstance(mime, str) and isinstance(data, str):
            if mime.startswith("image/"):
                return image_tokens(data, provider, model=model)
            return media_tokens(mime, data, provider, model)
        return IMAGE_TOKENS

    return rule


@lru_cache(maxsize=64)
def payload_leaves(provider: str, model: str) -> Callable[[Any], Iterable[str | int]]:
    """The leaves a payload rendered for ``provider`` counts with ``model`` (:func:`_strings`
    with that provider's image rule): what a warm render's record counts."""
    rule = _image_rule(provider, model)

    def leaves(value: Any) -> Iterator[str | int]:
        return _strings(value, "", rule)

    return leaves


def _strings(value: Any, key: str = "", images: ImageRule = _flat) -> Iterator[str | int]:
    """The leaves of a payload value that count: a text to tokenize, or a count fixed by a
    rule (an image part: ``images``, the provider's rule for its size, as the plan counts it;
    its data or URL is never text). Both counters of a payload (:func:`payload_tokens` and a
    warm render's record) read these, so ``out.tokens`` counts images for every provider."""
    if key in _SKIP_KEYS:
        return
    if key in _MEDIA_KEYS:
        yield images(value, True) if isinstance(value, Mapping) else IMAGE_TOKENS
    elif isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        if key in {"input", "args", "arguments"}:
            yield json.dumps(value, ensure_ascii=False)
            return
        if key in _FUNCTION_RESPONSE:
            yield from _function_response(value, images)
            return
        kind = value.get("type")
        if isinstance(kind, str):  # else a part passed through as it came: all of it is read
            if kind in _IMAGE_TYPES or kind in _FILE_TYPES:
                # a document with a text source is read as its text (:func:`document_text`)
                text = document_text(value) if kind == "document" else None
                yield images(value, False) if text is None else text
                return
            if kind == "input_audio":
                yield input_audio_tokens(value)
                return
        for k, v in value.items():
            yield from _strings(v, k, images)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v, key, images)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def thinking_texts(block: Thinking, provider: str) -> tuple[str, ...]:
    """The texts :func:`payload_tokens` reads of thinking ``block`` as the exporter for
    ``provider`` sends it (the plan counts the same, so a render fits what it planned):
    Anthropic's ``thinking`` text (not its ``signature``; a ``redacted_thinking`` block's
    ``data`` is not read either), Gemini's thought text (not its ``thoughtSignature``), and the
    whole reasoning item sent back to OpenAI Responses: its id, summary and
    ``encrypted_content`` (a reasoning model's 2 KB of it per item when ``store=False``).
    Call only for a block :func:`~ctxengine.transcript.providers.exportable` sends."""
    if provider == "openai-responses":
        item = responses_reasoning_item(block.signature)
        if item is None:
            return ()
        return tuple(s for s in _strings(item) if type(s) is str)
    if block.redacted:
        return ()
    return (block.text,)


def compaction_texts(block: Compaction) -> tuple[str, ...]:
    """The texts :func:`payload_tokens` reads of a provider compaction sent back verbatim,
    besides its summary (the block's text, counted as text): an OpenAI item's id and
    ``encrypted_content``, an Anthropic block's ``encrypted_content`` and tool changes. The
    plan counts them for a render to the provider that made it, the one sent them
    (:func:`~ctxengine.assemble.sync.sync_history`)."""
    return tuple(
        s for k, v in block.item.items() if k != "content" for s in _strings(v, k) if type(s) is str
    )


def _function_response(fr: Mapping[str, Any], images: ImageRule) -> Iterator[str | int]:
    """The leaves of a Gemini ``functionResponse``: its ``response`` object is the result's
    text (:func:`~ctxengine.transcript.importers.gemini.response_text`: the text the plan
    counted, also for an object sent back as it came, whose keys the model reads too)."""
    for k, v in fr.items():
        if k == "response" and isinstance(v, Mapping):
            yield response_text(v)
        else:
            yield from _strings(v, k, images)


class MessageTokenCache:
    """Exact OpenAI tokens per rendered message, reused while the message object is unchanged.

    Renders reuse the session's frozen :class:`Message` objects, and hygiene returns unchanged
    messages as they are, so a warm render recounts only its new or changed messages. Entries
    hold their message (keeping its id valid) and live for one render after their last use.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Message, int]] = {}
        #: Per-message hygiene checks and exported dicts, for the session's renders.
        self.memo = RenderMemo()

    def tokens(
        self, transcript: Transcript, payload: dict[str, Any], provider: str, model: str
    ) -> int:
        """Tokens of a payload rendered for ``provider`` from ``transcript`` (what
        :func:`payload_tokens` counts): the counts of a render that reused the previous one's
        work are reused with it, only its new messages are counted."""
        record = self.memo.warm.record_of(payload)
        if record is not None:
            return record.tokens(model, payload_leaves(provider, model))
        if provider == "openai":
            return self.openai_tokens(transcript, payload, model)
        return payload_tokens(payload, provider, model)

    def openai_tokens(self, transcript: Transcript, payload: Mapping[str, Any], model: str) -> int:
        """Tokens of an OpenAI Chat payload rendered one dict per message from ``transcript``."""
        dicts = payload.get("messages", [])
        if len(dicts) != len(transcript.messages):  # not one dict per message: count it all
            self._entries = {}
            return count_messages(dicts, model=model)
        fresh: dict[int, tuple[Message, int]] = {}
        missing = [i for i, m in enumerate(transcript.messages) if id(m) not in self._entries]
        if missing:
            tokenizer = get_tokenizer(model)
            got = tokenizer.count_chat([[dicts[i]] for i in missing])  # the exported shapes
            for i, n in zip(missing, got, strict=True):
                if n is None:  # another shape: the rule in Python
                    texts, n = message_strings(dicts[i], model)
                    n += sum(tokenizer.count_many(texts))
                else:
                    n += file_part_tokens(dicts[i], model)
                m = transcript.messages[i]
                fresh[id(m)] = (m, n)
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
    binary data excluded), an image part by ``provider``'s rule for its size
    (:func:`~ctxengine.tokens.image_tokens`), plus 4 tokens per message and 3 for the reply.
    """
    if provider == "openai":
        return count_messages(payload.get("messages", []), model=model)
    items = payload.get("messages") or payload.get("input") or payload.get("contents") or []
    rule = _image_rule(provider, model)
    texts = [
        s
        for k, v in payload.items()
        if k not in {"messages", "input", "contents"}
        for s in _strings(v, k, rule)
    ]
    texts += [s for item in items for s in _strings(item, "", rule)]
    fixed = sum(t for t in texts if type(t) is int)
    counts = get_tokenizer(model).count_many([t for t in texts if type(t) is str])
    overhead = _MESSAGE_OVERHEAD * (len(items) + 1) + _REPLY_PRIMING
    return sum(counts) + fixed + overhead
