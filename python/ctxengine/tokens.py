"""Token counting (DESIGN.md §8): exact for OpenAI encodings, calibrated estimates elsewhere.

Counting runs in Rust: `bpe-openai` for counts (identical to tiktoken's), `tiktoken-rs` for token
ids. Both vocabularies are compiled in, load lazily, and never download anything. Counts of texts
of 64 bytes or more are cached by a 128-bit content hash; see :func:`cache_info`.

Model → encoding:

- gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4 → ``o200k_base`` (exact)
- gpt-4, gpt-3.5-turbo, text-embedding-3 → ``cl100k_base`` (exact)
- claude-* → ``o200k_base`` count × 1.38 (estimate, ``exact=False``; calibrated on billed usage)
- gemini-* → ``o200k_base`` count × 1.08 (estimate, ``exact=False``; not calibrated)

See docs/tokens.md for how the factors were obtained.

With neither ``model`` nor ``encoding``, ``o200k_base`` is used.
"""

from __future__ import annotations

import binascii
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

from . import _core
from ._core import Tokenizer, cache_info, set_cache_capacity
from .errors import ConfigTypeError

__all__ = (
    "Tokenizer",
    "cache_info",
    "clear_cache",
    "count_many",
    "count_messages",
    "count_tokens",
    "get_tokenizer",
    "set_cache_capacity",
    "truncate_tokens",
)

#: What :func:`clear_cache` empties besides the count cache: the caches of other readings of
#: texts (the compaction's reading of identifiers, shell commands and failed outputs), each
#: registered by the module that keeps it (:func:`on_clear_cache`).
_CLEARERS: list[Callable[[], None]] = []


def on_clear_cache(clear: Callable[[], None]) -> None:
    """Have :func:`clear_cache` call ``clear`` too (a cache of something read from texts)."""
    _CLEARERS.append(clear)


def clear_cache() -> None:
    """Empty every cache of what was read from texts, and reset the count cache's counters:
    the count cache (``cache_info``) and the caches of the compaction's reading. Afterwards a
    render reads and counts everything anew, as in a new process."""
    _core.clear_cache()
    for clear in _CLEARERS:
        clear()


TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
#: Tokens charged per image part: OpenAI's documented tile rule for a high-detail image that
#: fills 2 × 2 tiles of 512 px (85 + 4 × 170). The plan charges every image this much too, for
#: every provider (the image's size is not known before it is sent).
IMAGE_TOKENS = 765
#: Tokens charged per second of audio: Gemini's documented rate for audio input (32 per
#: second), the highest of the providers that take audio (gpt-4o audio input costs about 10).
AUDIO_TOKENS_PER_SECOND = 32
#: Bytes per second assumed for audio that is not WAV: 32 kbit/s, the lowest MPEG-1 Layer III
#: bitrate, so an MP3's duration (and so its tokens) is not underestimated.
AUDIO_BYTES_PER_SECOND = 4_000
_WAV_HEADER = 44  # the bytes of a canonical WAV header, before the samples


def audio_tokens(data: str) -> int:
    """Tokens charged for base64 audio ``data``: its duration in seconds (rounded up, at least
    one) times :data:`AUDIO_TOKENS_PER_SECOND`. The duration of a WAV file is its size over the
    byte rate its header gives; other audio is taken to be :data:`AUDIO_BYTES_PER_SECOND`.

    >>> audio_tokens("A" * 5_336)  # 4,002 bytes of MP3: a bit over one second
    64
    """
    size = len(data.rstrip("=")) * 3 // 4
    rate = AUDIO_BYTES_PER_SECOND
    try:
        head = binascii.a2b_base64(data[:48])  # the 36 bytes up to the WAV byte rate
    except (binascii.Error, ValueError):
        head = b""
    if len(head) >= 32 and head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        rate = int.from_bytes(head[28:32], "little") or rate
        size = max(0, size - _WAV_HEADER)
    seconds = max(1, math.ceil(size / rate))
    return seconds * AUDIO_TOKENS_PER_SECOND


def media_tokens(media_type: str, data: str | None) -> int:
    """Tokens charged for one media item, by every counter (the plan and the payload's): audio
    given inline by :func:`audio_tokens`, anything else (an image, a PDF, media by URL) as
    :data:`IMAGE_TOKENS`."""
    if data is not None and media_type.startswith("audio/"):
        return audio_tokens(data)
    return IMAGE_TOKENS


@lru_cache(maxsize=256)
def get_tokenizer(model_or_encoding: str) -> Tokenizer:
    """Return a reusable tokenizer for a model or encoding name.

    The tokenizer has ``.count(text)``, ``.count_many(texts)``, ``.encode(text)``,
    ``.decode(ids)``, ``.truncate(text, max_tokens)``, ``.name`` and ``.exact``.

    Raises:
        EncodingError: the name is neither a known model family nor an encoding.
        ConfigTypeError: the name is not a ``str``.
    """
    try:
        return _core.Tokenizer(model_or_encoding)
    except TypeError as exc:  # checked on the failure path only (the call is cached anyway)
        raise _wrong_kind(exc, model_or_encoding=model_or_encoding) from exc


#: What each argument of the counting functions must be: (accepts the value, expected).
_KINDS: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    "text": (lambda v: isinstance(v, str), "a str"),
    "max_tokens": (lambda v: isinstance(v, int), "an int >= 0"),
    "model": (
        lambda v: v is None or isinstance(v, str),
        "a model name such as 'gpt-4o', or None",
    ),
    "encoding": (
        lambda v: v is None or isinstance(v, str),
        "an encoding name such as 'o200k_base', or None",
    ),
    "model_or_encoding": (
        lambda v: isinstance(v, str),
        "a model or encoding name such as 'gpt-4o' or 'o200k_base'",
    ),
}


def _wrong_kind(exc: TypeError, texts: Sequence[object] = (), **args: object) -> TypeError:
    """The :class:`ConfigTypeError` naming the first of ``args`` (or item of ``texts``) of the
    wrong kind, once ``exc`` came out of a counting call; ``exc`` itself when none is.

    Only called after a call failed: counting itself checks nothing in Python.
    """
    wrong = [(n, v) for n, v in args.items() if not _KINDS[n][0](v)]
    if wrong:
        name, value = wrong[0]
        expected = _KINDS[name][1]
    else:
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is None:
            return exc
        name, value, expected = f"texts[{bad}]", texts[bad], "a str"
    return ConfigTypeError(
        f"{name} is {type(value).__name__} {_preview(value)}; expected {expected}"
    )


def _resolve(model: str | None, encoding: str | None) -> Tokenizer:
    if encoding is not None:
        return get_tokenizer(encoding)
    return get_tokenizer(model if model is not None else "o200k_base")


def count_tokens(text: str, *, model: str | None = None, encoding: str | None = None) -> int:
    """Count the tokens of ``text``; special-token text counts as ordinary text.

    Raises:
        EncodingError: unknown model/encoding, or text with lone surrogates.
        ConfigTypeError: ``text`` is not a ``str`` (or ``model``/``encoding`` not a name).
    """
    try:
        return _resolve(model, encoding).count(text)
    except TypeError as exc:
        raise _wrong_kind(exc, text=text, model=model, encoding=encoding) from exc


def count_many(
    texts: Iterable[str], *, model: str | None = None, encoding: str | None = None
) -> list[int]:
    """Count a batch of texts in parallel on every core, with the GIL released.

    Raises:
        EncodingError: unknown model/encoding, or a text with lone surrogates (named by index).
        ConfigTypeError: ``texts`` is not an iterable of ``str`` (an item is named by index;
            a single ``str`` is refused too: it would be counted character by character).
    """
    if isinstance(texts, (list, tuple)):
        seq = texts
    elif isinstance(texts, str) or not isinstance(texts, Iterable):
        raise ConfigTypeError(
            f"texts is {type(texts).__name__} {_preview(texts)}; expected a list of str"
        )
    else:
        seq = list(texts)
    try:
        return _resolve(model, encoding).count_many(seq)
    except TypeError as exc:
        raise _wrong_kind(exc, seq, model=model, encoding=encoding) from exc


def truncate_tokens(
    text: str, max_tokens: int, *, model: str | None = None, encoding: str | None = None
) -> str:
    """Return the longest prefix of ``text`` that fits ``max_tokens``.

    The cut falls on a token boundary and never inside a UTF-8 character.

    Raises:
        EncodingError: unknown model/encoding, or text with lone surrogates.
        ConfigTypeError: ``text`` is not a ``str`` or ``max_tokens`` not an ``int``.
        OverflowError: ``max_tokens`` is negative.
    """
    try:
        return _resolve(model, encoding).truncate(text, max_tokens)
    except TypeError as exc:
        raise _wrong_kind(
            exc, text=text, max_tokens=max_tokens, model=model, encoding=encoding
        ) from exc


def _message_strings(message: Mapping[str, Any]) -> tuple[list[str], int]:
    """Strings counted for one message, and the fixed overhead it adds."""
    strings: list[str] = []
    overhead = TOKENS_PER_MESSAGE
    for key, value in message.items():
        kind = type(value)
        if kind is str and key != "tool_calls":  # role, content, name...: most values
            strings.append(value)
            if key == "name":
                overhead += TOKENS_PER_NAME
        elif value is None:
            continue
        elif key == "tool_calls" and (kind is list or isinstance(value, Sequence)):
            for call in value:
                if type(call) is dict:
                    fn = call.get("function", {})
                    if type(fn) is dict:  # the common shape: both values str already
                        name, arguments = fn.get("name", ""), fn.get("arguments", "")
                        if type(name) is str and type(arguments) is str:
                            strings.append(name)
                            strings.append(arguments)
                            continue
                else:
                    fn = call.get("function", {}) if isinstance(call, Mapping) else {}
                strings += [str(fn.get("name", "")), str(fn.get("arguments", ""))]
        elif key == "function_call" and isinstance(value, Mapping):
            strings += [str(value.get("name", "")), str(value.get("arguments", ""))]
        elif isinstance(value, str):
            strings.append(value)
            overhead += TOKENS_PER_NAME if key == "name" else 0
        elif isinstance(value, list):  # content parts
            for part in value:
                if not isinstance(part, Mapping):
                    continue
                if isinstance(part.get("text"), str):
                    strings.append(part["text"])
                elif part.get("type") in {"image_url", "input_image", "image", "file"}:
                    overhead += IMAGE_TOKENS
                elif part.get("type") == "input_audio":
                    overhead += input_audio_tokens(part)
        else:
            strings.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
    return strings, overhead


def _preview(value: object) -> str:
    """The short repr of the importers' error messages (imported on an error only: counting
    loads no transcript module)."""
    from .transcript.importers.common import short

    return short(value)


def count_messages(messages: Iterable[Mapping[str, Any]], *, model: str) -> int:
    """Count the prompt tokens of OpenAI-style chat messages.

    Follows OpenAI's documented rule for current chat models: every message costs 3 tokens of
    framing plus the tokens of each of its string values (role, content, name...); a ``name``
    costs 1 more; the reply is primed with 3 tokens. Tool calls are counted from their function
    name and JSON arguments; content parts from their text, an image part as
    :data:`IMAGE_TOKENS`. Non-OpenAI models get the same rule
    over their estimator (``exact=False``).

    Raises:
        EncodingError: ``model`` is unknown.
        ConfigTypeError: ``messages`` is not a list (or iterable) of message mappings, or
            ``model`` is not a ``str``.
    """
    try:
        tokenizer = get_tokenizer(model)
    except TypeError as exc:
        raise ConfigTypeError(
            f"model is {type(model).__name__} {_preview(model)}; "
            "expected a model name such as 'gpt-4o'"
        ) from exc
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        # a str iterates as characters and a dict as its keys: neither is a message list
        raise ConfigTypeError(
            f"messages is {type(messages).__name__} {_preview(messages)}; "
            "expected a list of message dicts"
        )
    messages = messages if isinstance(messages, list) else list(messages)
    fast = tokenizer.count_chat([messages])[0]  # the exported shapes, walked natively
    if fast is not None:
        return REPLY_PRIMING + fast + sum(map(file_part_tokens, messages))
    strings: list[str] = []
    total = REPLY_PRIMING
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ConfigTypeError(
                f"messages[{i}] is {type(message).__name__} {_preview(message)}; "
                "expected a message dict such as {'role': 'user', 'content': '...'}"
            )
        parts, overhead = _message_strings(message)
        strings += parts
        total += overhead
    return total + sum(tokenizer.count_many(strings))


def file_part_tokens(message: Mapping[str, Any]) -> int:
    """What the native chat counter leaves out of ``message``: its ``file`` parts (a PDF),
    each counted as :data:`IMAGE_TOKENS`, as an image part is and as the plan counts it, and
    its ``input_audio`` parts, by :func:`audio_tokens`."""
    content = (
        message.get("content")
        if type(message) is dict or isinstance(message, Mapping)  # a dict: no ABC check
        else None
    )
    if not isinstance(content, list):
        return 0
    total = 0
    for p in content:
        if isinstance(p, Mapping):
            kind = p.get("type")
            if kind == "file":
                total += IMAGE_TOKENS
            elif kind == "input_audio":
                total += input_audio_tokens(p)
    return total


def input_audio_tokens(part: Mapping[str, Any]) -> int:
    """Tokens of an OpenAI Chat ``input_audio`` part (:func:`audio_tokens` of its data; 0 for
    a part without data, which carries no sound)."""
    audio = part.get("input_audio")
    data = audio.get("data") if isinstance(audio, Mapping) else None
    return audio_tokens(data) if isinstance(data, str) else 0


#: Public name of the per-message string split (the payload counter shares it).
message_strings = _message_strings
