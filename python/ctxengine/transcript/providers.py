"""What each target provider accepts: names, tool-call id rules and which blocks can be sent.

Shared by hygiene (:mod:`ctxengine.hygiene`) and the exporters so that "valid" means the same
thing in both places: every block the exporter would drop is judged here, once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Final, Literal, get_args

from ..errors import AdapterError
from .model import (
    Block,
    Compaction,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
)

__all__ = (
    "IMAGE_LIMITS",
    "PROVIDERS",
    "STRICT_ALTERNATION",
    "Provider",
    "api_family",
    "check_provider",
    "exportable",
    "family_of",
    "id_ok",
    "image_count",
    "image_slots",
    "sends_any",
    "strip_trailing_space",
)

Provider = Literal["openai", "openai-responses", "anthropic", "gemini"]
PROVIDERS: Final[tuple[str, ...]] = get_args(Provider)

#: Providers that need strict user/assistant alternation starting with a user turn.
STRICT_ALTERNATION: Final = frozenset({"anthropic", "gemini"})

#: Image media types the providers accept inline; other media become a text placeholder.
IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

#: The document type Anthropic (``document``), OpenAI Chat (``file``) and Responses
#: (``input_file``) accept in user content; a PDF :class:`Image` is sent as one of those.
PDF: Final = "application/pdf"

#: The file name sent with inline PDF data when the :class:`Image` has no ``name`` (OpenAI
#: wants one).
PDF_FILENAME: Final = "document.pdf"

#: OpenAI Chat ``input_audio`` formats (the only two the API takes) and their media types.
AUDIO_MEDIA_TYPES: Final = {"wav": "audio/wav", "mp3": "audio/mpeg"}
#: Audio media type -> OpenAI Chat ``input_audio`` format; other audio becomes a placeholder.
AUDIO_FORMATS: Final = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}

# Tool-call id rules we enforce per provider (conservative: what the APIs are known to accept).
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ID_RULES: Final[dict[str, tuple[re.Pattern[str] | None, int, str]]] = {
    "openai": (None, 40, "1 to 40 characters"),
    "openai-responses": (None, 64, "1 to 64 characters"),
    "anthropic": (_SAFE_ID, 64, "1 to 64 characters from [A-Za-z0-9_-]"),
    "gemini": (_SAFE_ID, 64, "1 to 64 characters from [A-Za-z0-9_-]"),
}

# Where a message's signatures come from: source formats and pi ``api`` names -> provider.
_FAMILIES: Final[dict[str, str]] = {
    "openai": "openai",
    "openai-responses": "openai-responses",
    "anthropic": "anthropic",
    "claude-code": "anthropic",
    "gemini": "gemini",
    "anthropic-messages": "anthropic",
    "openai-completions": "openai",
    "openai-codex-responses": "openai-responses",
    "azure-openai-responses": "openai-responses",
    "google-generative-ai": "gemini",
    "google-gemini-cli": "gemini",
    "google-vertex": "gemini",
}


def api_family(name: object) -> str | None:
    """The provider a source format or a pi ``api`` name (``openai-codex-responses``,
    ``google-vertex``...) stands for, or None when it names none."""
    return _FAMILIES.get(name) if isinstance(name, str) else None


def check_provider(provider: str) -> str:
    """Return ``provider`` if it is a known target.

    Raises:
        AdapterError: unknown provider; the message lists the valid ones.
    """
    if provider not in PROVIDERS:
        raise AdapterError(f"unknown provider {provider!r}; expected one of {list(PROVIDERS)}")
    return provider


def id_ok(call_id: str, provider: str) -> bool:
    """True when ``call_id`` is acceptable to ``provider`` as a tool-call id."""
    pattern, max_len, _ = _ID_RULES[provider]
    if not call_id or len(call_id) > max_len:
        return False
    return pattern is None or pattern.fullmatch(call_id) is not None


def id_rule(provider: str) -> str:
    """Human description of the tool-call id rule for ``provider``."""
    return _ID_RULES[provider][2]


def family_of(message: Message, transcript: Transcript | None = None) -> str | None:
    """The provider whose signatures this message carries, or None when unknown.

    Taken from ``message.meta["provider_family"]`` (importers set it, e.g. from pi's ``api``),
    else from the transcript's ``source_format``.
    """
    meta = message.meta
    if meta:
        fam = meta.get("provider_family")
        if isinstance(fam, str):
            return _FAMILIES.get(fam, fam)
    if transcript is not None and transcript.source_format is not None:
        return _FAMILIES.get(transcript.source_format)
    return None


def responses_reasoning_item(signature: str | None) -> dict[str, object] | None:
    """The OpenAI Responses reasoning item stored in a thinking signature, if it is one."""
    if not signature or not signature.startswith("{"):
        return None
    try:
        item = json.loads(signature)
    except ValueError:
        return None
    if (
        isinstance(item, dict)
        and item.get("type") == "reasoning"
        and isinstance(item.get("id"), str)
    ):
        return item
    return None


def exportable(block: Block, provider: str, family: str | None) -> bool:
    """True when the exporter for ``provider`` sends ``block`` (others are left out).

    Thinking is only sent back to the provider that signed it: Anthropic needs a signature,
    OpenAI Responses needs its reasoning item, Gemini accepts its own thought parts; OpenAI Chat
    never takes reasoning. For Anthropic and Gemini, whitespace-only text is left out (the APIs
    reject it). A provider :class:`Compaction` goes back to the provider that made it, verbatim
    (a failed Anthropic one, with no summary, too: the API takes it as a no-op); another
    provider gets its text, if it has any. Everything else is always sent (images may become
    text placeholders).
    """
    if type(block) is Compaction:
        return block.provider == provider or bool(block.text)
    if isinstance(block, Thinking):
        if family not in (provider, None):
            return False
        if provider == "anthropic":
            return bool(block.signature)
        if provider == "openai-responses":
            return responses_reasoning_item(block.signature) is not None
        if provider == "gemini":
            return bool(block.text or block.signature)
        return False
    if isinstance(block, Text) and provider in STRICT_ALTERNATION:
        return bool(block.text.strip())
    return True


#: Block types every exporter sends (exact types: a subclass goes through :func:`exportable`).
_ALWAYS_SENT: Final = frozenset({ToolCall, ToolResult, Image})


def exported_blocks(message: Message, provider: str, family: str | None) -> list[Block]:
    """The blocks of ``message`` that the exporter for ``provider`` will send.

    OpenAI Responses: a reasoning item must be followed by the output item it led to (a
    message or a function call), so thinking after the last other block is not sent.
    Anthropic: see :func:`thinking_first`.
    """
    strict = provider in STRICT_ALTERNATION
    out: list[Block] = []
    thought = False
    for b in message.blocks:
        kind = type(b)
        if kind is Text:  # what :func:`exportable` decides for these exact types, inline
            if not strict or b.text.strip():  # type: ignore[union-attr]
                out.append(b)
        elif kind in _ALWAYS_SENT:
            out.append(b)
        elif exportable(b, provider, family):
            out.append(b)
            thought = thought or isinstance(b, Thinking)
    if provider == "openai-responses":
        while out and isinstance(out[-1], Thinking):
            out.pop()
    elif thought and provider == "anthropic":
        return thinking_first(out)
    return out


def sends_any(message: Message, provider: str, transcript: Transcript | None = None) -> bool:
    """``bool(exported_blocks(message, provider, family_of(message, transcript)))``, found at
    the first block that every export keeps whatever else the message holds (a text, unless
    blank for a strict provider; a tool call, a result, an image): neither the Responses cut
    of trailing thinking nor Anthropic's :func:`thinking_first` removes it. Only a message
    with none of them is exported to find out."""
    strict = provider in STRICT_ALTERNATION
    for b in message.blocks:
        kind = type(b)
        if kind is Text:
            if not strict or b.text.strip():  # type: ignore[union-attr]
                return True
        elif kind in _ALWAYS_SENT:
            return True
    return bool(exported_blocks(message, provider, family_of(message, transcript)))


def thinking_first(blocks: list[Block]) -> list[Block]:
    """``blocks`` of an assistant message as Anthropic takes them: when it holds thinking, its
    first blocks must be thinking ("the first block must be thinking or redacted_thinking"),
    and its last block cannot be ("the final block in an assistant message cannot be
    `thinking`"). Thinking that led to nothing sent (a turn whose calls were cut, aborted) is
    left out with its message; thinking after text (two turns merged into one, or blocks a log
    kept out of order) moves before the rest, in its order."""
    thinking = [b for b in blocks if isinstance(b, Thinking)]
    if not thinking:
        return blocks
    if len(thinking) == len(blocks):
        return []
    if all(isinstance(b, Thinking) for b in blocks[: len(thinking)]):
        return blocks
    return [*thinking, *(b for b in blocks if not isinstance(b, Thinking))]


def sent_as_image(image: Image) -> bool:
    """True when ``image`` goes out as an image part (OpenAI ``image_url``/``input_image``,
    Anthropic ``image``): inline data of a type the providers take, or a URL of an
    ``image/*`` type (the provider fetches it and reads its type). A PDF is a document, and
    audio, video or other files by URL are no image: they become what the provider takes for
    them, or a placeholder."""
    if image.data is not None:
        return image.media_type in IMAGE_TYPES
    return image.url is not None and image.media_type.startswith("image/")


#: The most images one request may carry, per provider: each API's documented limit.
#:
#: - OpenAI Chat Completions and Responses: 500 ("Up to 500 individual image inputs per
#:   request", the image input requirements of the images and vision guide,
#:   platform.openai.com/docs/guides/images-vision).
#: - Anthropic: 100 (docs.claude.com, vision, "General limits": 100 images per request for
#:   models with a 200k-token context window, 600 for the others; a model of the larger kind
#:   takes ``max_images=600``). Every image block counts, "including images from earlier
#:   conversation turns that you resend and images nested inside ``tool_result`` content",
#:   and the pages of the request's PDFs count with them (PDF support: "Maximum pages per
#:   request", the same 100 and 600; :data:`ctxengine.inject.images.PAGES_COUNTED`).
#: - Gemini: 3,000 (Vertex AI, image understanding: "Maximum images per prompt: 3,000" for
#:   Gemini 2.5 Pro and Flash; image generation models take far fewer, 3 to 14).
IMAGE_LIMITS: Final[dict[str, int]] = {
    "openai": 500,
    "openai-responses": 500,
    "anthropic": 100,
    "gemini": 3000,
}


def _image_part(b: Image, provider: str) -> bool:
    """Whether media ``b`` goes out as an image part of ``provider``'s request, at a place
    that takes one (see :func:`image_slots`)."""
    if provider == "gemini":  # any media type goes inline or by URL: the images are image/*
        return b.media_type.startswith("image/") and bool(b.data or b.url)
    return sent_as_image(b)


def image_slots(message: Message, provider: str) -> list[tuple[int, int]]:
    """Where ``message`` holds what ``provider``'s exporter sends as an image part, in block
    order: ``(block index, -1)`` for an image block, ``(block index, content index)`` for an
    image in a tool result's content. What an exporter sends as a text placeholder (images in
    assistant turns; in OpenAI Chat tool results, which take text only) is not an image part,
    and neither is a PDF (a document part) or other media (Gemini takes them inline, but they
    are not images).

    These are the images a provider's per-request limit counts (:data:`IMAGE_LIMITS`)."""
    if not takes_images(message.role, provider):
        return []
    out: list[tuple[int, int]] = []
    for i, b in enumerate(message.blocks):
        if isinstance(b, Image):
            if _image_part(b, provider):
                out.append((i, -1))
        elif isinstance(b, ToolResult):
            for k, c in enumerate(b.content):
                if isinstance(c, Image) and _image_part(c, provider):
                    out.append((i, k))
    return out


def takes_images(role: str, provider: str) -> bool:
    """Whether ``provider`` takes image parts in a message of ``role``: not in a system
    message (text only), nor in an assistant turn but Gemini's, nor in an OpenAI Chat tool
    message (text only); its exporter sends a text placeholder for each there."""
    if role == "assistant":
        return provider == "gemini"
    if role == "tool":
        return provider != "openai"
    return role != "system"


def image_count(message: Message, provider: str) -> int:
    """``len(image_slots(message, provider))``, told by the role alone where it can be
    (:func:`takes_images`) and for a message of one text."""
    if not takes_images(message.role, provider):
        return 0
    blocks = message.blocks
    if len(blocks) == 1 and type(blocks[0]) is Text:
        return 0
    return len(image_slots(message, provider))


def image_placeholder(image: Image) -> Text:
    """Text standing in for media a provider cannot take at that place (naming its type, its
    name and its URL, when it has them)."""
    name = f" {image.name!r}" if image.name else ""
    where = f" {image.url}" if image.url else ""
    return Text(f"[{image.media_type} attachment{name}{where} omitted]")


def strip_trailing_space(blocks: Sequence[Block]) -> tuple[Block, ...] | None:
    """``blocks`` (of a final assistant message) without the whitespace at the end of their
    last text: trailing text blocks are stripped, and dropped when nothing is left of them, up
    to the first block that is neither text nor thinking. Thinking is stepped over, left where
    it is: Anthropic is not sent one it cannot verify (unsigned, or signed by another provider)
    and gets the others first in the message (:func:`thinking_first`), so the text before it
    ends what Anthropic reads. None when there is no whitespace to strip.

    Anthropic rejects a final assistant message (a prefill) that ends in whitespace ("final
    assistant content cannot end with trailing whitespace"): the engine's renders and hygiene
    both strip it with this."""
    out = list(blocks)
    changed = False
    i = len(out) - 1
    while i >= 0:
        b = out[i]
        if type(b) is Compaction:  # sent back verbatim, as the provider returned it
            break
        if isinstance(b, Text):
            text = b.text.rstrip()
            if text == b.text:
                break
            changed = True
            if text:
                out[i] = Text(text)
                break
            del out[i]
        elif not isinstance(b, Thinking):
            break
        i -= 1
    return tuple(out) if changed else None


#: The tool names each provider takes in a request, history included: OpenAI
#: ``^[a-zA-Z0-9_-]+$`` (64 at most), Anthropic ``^[a-zA-Z0-9_-]{1,128}$``, Gemini a letter or
#: underscore first, then letters, digits, ``_ . : -`` (64 at most).
_NAME_RULES: Final = {
    "openai": (re.compile(r"[A-Za-z0-9_-]{1,64}"), re.compile(r"[^A-Za-z0-9_-]"), 64),
    "anthropic": (re.compile(r"[A-Za-z0-9_-]{1,128}"), re.compile(r"[^A-Za-z0-9_-]"), 128),
    "gemini": (re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}"), re.compile(r"[^A-Za-z0-9_.:-]"), 64),
}
_wire_names: dict[str, dict[str, str]] = {p: {} for p in ("openai", "anthropic", "gemini")}
#: The names :func:`wire_name` made for OpenAI so far (an exporter's loop reads it first).
OPENAI_NAMES: Final = _wire_names["openai"]


def wire_name(name: str, provider: str) -> str:
    """``name`` of a tool call or result as ``provider`` takes it: unchanged when it fits the
    provider's rule (:data:`_NAME_RULES`), else every other character becomes ``_`` (``""``
    becomes ``tool``; for Gemini one starting with neither a letter nor ``_`` gains a leading
    ``_``), and one still too long keeps its head and an 8-character hash of the whole. A name
    from another provider's log (``github.search``, ``fs/read file``, a call cut off before its
    name) made the request fail; the model reads the name it is sent."""
    table = _wire_names.get(provider)
    found = table.get(name) if table is not None else None
    if found is None:
        found = _wire(name, provider)
        if table is not None and len(table) < 4096:
            table[name] = found
    return found


def _wire(name: str, provider: str) -> str:
    ok, bad, limit = _NAME_RULES.get(provider, _NAME_RULES["openai"])
    if ok.fullmatch(name):
        return name
    safe = bad.sub("_", name) or "tool"
    if provider == "gemini" and not (safe[0] == "_" or (safe[0].isascii() and safe[0].isalpha())):
        safe = "_" + safe
    if len(safe) > limit:
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[: limit - 9]}_{digest}"
    return safe
