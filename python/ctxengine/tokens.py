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
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

from . import _core
from ._core import Tokenizer, cache_info, set_cache_capacity
from .errors import ConfigTypeError
from .imagesize import image_size
from .pdfpages import clear_pages, pdf_pages

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


on_clear_cache(clear_pages)


def clear_cache() -> None:
    """Empty every cache of what was read from texts, and reset the count cache's counters:
    the count cache (``cache_info``), the caches of the compaction's reading and the pages of
    the PDFs read. Afterwards a render reads and counts everything anew, as in a new process."""
    _core.clear_cache()
    for clear in _CLEARERS:
        clear()


TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
#: Tokens charged for an image whose size is not known: one given by URL (the provider fetches
#: it), or whose header could not be read (:func:`~ctxengine.imagesize.image_size`). It is
#: OpenAI's tile rule for a high-detail image that fills 2 x 2 tiles of 512 px (85 + 4 x 170),
#: a 1024 x 1024 image, and not a bound: a larger image costs more (see :func:`image_tokens`).
#: A PDF given by URL or file id counts as much (its pages are not known); an inline PDF counts
#: by its pages (:func:`pdf_tokens`).
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


def media_tokens(
    media_type: str, data: str | None, provider: str | None = None, model: str | None = None
) -> int:
    """Tokens charged for one media item but an inline image of a known size (which counts by
    :func:`image_tokens`): audio given inline by :func:`audio_tokens`, an inline PDF by its
    pages (:func:`pdf_tokens` for ``provider`` and ``model``; without a provider, the largest
    count of the providers), an inline text file sent to Gemini by its text
    (:func:`text_media_tokens`), anything else (media by URL, an image of unknown size, a text
    file without a provider: its placeholder elsewhere) as :data:`IMAGE_TOKENS`."""
    if data is not None:
        if media_type.startswith("audio/"):
            return audio_tokens(data)
        if media_type == _PDF:
            return pdf_tokens(data, provider, model)
        if provider == "gemini" and is_text_media(media_type):
            return text_media_tokens(data, model)
    return IMAGE_TOKENS


# --- Text files, by their text ---------------------------------------------------------------
#
# Gemini takes a text file inline (``inlineData``) and reads it as its text: "plain-text
# documents are tokenized as text" (Google Cloud, Gemini "Document understanding", which lists
# text/plain, text/csv, text/html, text/css, text/md, text/rtf, text/xml, text/javascript,
# application/x-javascript, text/x-python and application/x-python); the Gemini API's
# "Document understanding" guide: a document other than a PDF is seen "as pure text". The other
# providers take no such file inline: their exporters send its text placeholder.

#: The media types besides ``text/*`` read as text.
_TEXT_MEDIA: Final = frozenset(
    {"application/x-javascript", "application/x-python", "application/json", "application/xml"}
)


def is_text_media(media_type: str) -> bool:
    """Whether ``media_type`` names a text file (``text/*``, JSON, XML, script source)."""
    return media_type.startswith("text/") or media_type in _TEXT_MEDIA


def text_media_tokens(data: str, model: str | None = None) -> int:
    """Tokens of the text file whose base64 text (or ``data:`` URL) is ``data``, sent to
    ``model``: its text, decoded as UTF-8 (a byte that is not becomes U+FFFD), counted by the
    model's tokenizer. Text that is not base64 is counted as it is (the provider refuses it)."""
    if data.startswith("data:"):
        data = data.partition(",")[2]
    try:
        raw = binascii.a2b_base64(data)
    except (binascii.Error, ValueError):
        body = data.strip()
        try:
            raw = binascii.a2b_base64(body[: len(body) // 4 * 4])
        except (binascii.Error, ValueError):  # not valid text either: a lone surrogate is "?"
            return _resolve(model, None).count(data.encode("utf-8", "replace").decode())
    return _resolve(model, None).count(raw.decode("utf-8", "replace"))


# --- Images, by their size -------------------------------------------------------------------
#
# Each provider bills an image by its size in pixels, read from the header of an inline image
# (:func:`~ctxengine.imagesize.image_size`). The rules below are the providers' documented ones;
# where a provider's documentation leaves a choice open (the model family is not known, a
# detail the request does not fix), the larger count is taken, so that a render counted within
# its budget is within it as the provider counts it too.

#: OpenAI's tile rule (OpenAI "Images and vision" guide, "Calculating costs", GPT-4o, GPT-4.1,
#: GPT-4.5, o-series...): the image is scaled to fit in 2048 x 2048, then down so that its
#: shortest side is 768 px; it costs a base plus a count per 512 px tile covering it. ``detail:
#: low`` costs the base alone. The guide's examples: 1024 x 1024 high detail is 765 tokens,
#: 2048 x 4096 is 1105, any size at low detail 85.
OPENAI_TILE_BASE = 85
OPENAI_TILE_TOKENS = 170
#: gpt-4o-mini bills the same tiles at 2833 + 5667 per tile (the same guide's table).
_OPENAI_MINI_TILES: Final = (2833, 5667)
#: OpenAI's patch rule (the same guide): the image is covered by 32 x 32 px patches, scaled
#: down when more than 1536 are needed until they fit, and the patches are multiplied by the
#: model's factor (gpt-4.1-mini 1.62, gpt-4.1-nano 2.46, o4-mini 1.72; gpt-5-mini and
#: gpt-5-nano the guide's 1.62 and 2.46, which the API was measured billing less). ``detail``
#: does not change it. Its example: 1800 x 2400 is 1452 patches.
OPENAI_PATCH_CAP = 1536
_OPENAI_PATCH_MODELS: Final = (
    ("gpt-4.1-mini", 1.62),
    ("gpt-4.1-nano", 2.46),
    ("o4-mini", 1.72),
    ("codex-mini", 1.72),
    ("gpt-5-mini", 1.62),
    ("gpt-5-nano", 2.46),
)
_GPT5_SMALL = re.compile(r"gpt-5(?:\.\d+)?-(mini|nano)")
#: Anthropic (Claude "Vision" docs, "Evaluate image size" and "Calculate image costs"): an
#: image costs about width x height / 750 tokens, after Claude scaled it down (aspect ratio
#: kept) so that its long edge is at most 1568 px and it is at most about 1,600 tokens. The
#: docs' table: 200 x 200 is ~54 tokens, 1000 x 1000 ~1334, 1092 x 1092 ~1590.
ANTHROPIC_PIXELS_PER_TOKEN = 750
_ANTHROPIC_TIERS: Final = {"standard": (1568, 1600), "high": (2576, 5000)}
#: Claude Opus 4.7 and the models after it take images up to 2576 px on the long edge, about
#: 3.75 megapixels (Anthropic's Opus 4.7 release notes): up to 5,000 tokens at 750 pixels a
#: token. Claude models before 4.7 scale to the standard tier; any other model name (the
#: engine counting for Anthropic with an OpenAI model's name) is charged the high tier.
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:[-.](\d{1,2})(?!\d))?")
#: Gemini 2.x and before (Gemini API "Understand and count tokens", images): an image with
#: both sides at most 384 px is 258 tokens; a larger one is cropped and scaled into tiles of
#: 768 x 768 px, 258 tokens each.
GEMINI_TILE_TOKENS = 258
#: Gemini 3 and after (Gemini API "Media resolution", token counts): an image costs at most
#: its ``media_resolution``'s tokens, 1120 at the default for images (high; low 280, medium
#: 560). A model name that is not a Gemini one is charged the larger of both rules.
GEMINI_3_IMAGE_TOKENS = 1120
_GEMINI_VERSION = re.compile(r"gemini-(\d+)")


@lru_cache(maxsize=256)
def _bare(model: str | None) -> str:
    """``model`` as its image rule is looked up: the tokenizer's bare name
    (:func:`ctxengine._core.bare_model`: lower case, without a provider path such as
    ``openai/`` or ``azure/``, a fine-tune's ``ft:``, a Bedrock vendor prefix and region).
    A name routed through a gateway (LiteLLM's ``openai/gpt-4.1-mini``, OpenRouter's
    ``anthropic/claude-3.5-sonnet``) is billed as the model it names."""
    return _core.bare_model(model) if model else ""


def openai_image_tokens(
    width: int, height: int, *, model: str | None = None, detail: str | None = None
) -> int:
    """Tokens OpenAI bills for a ``width`` x ``height`` image sent to ``model`` with
    ``detail`` (None or ``auto`` count as ``high``, the most ``auto`` may pick).

    >>> openai_image_tokens(1920, 1080)  # a screenshot: 3 x 2 tiles after scaling to 1365 x 768
    1105
    """
    name = _bare(model)
    for prefix, factor in _OPENAI_PATCH_MODELS:
        if name.startswith(prefix):
            return math.ceil(_patches(width, height) * factor)
    small = _GPT5_SMALL.match(name)
    if small is not None:
        return math.ceil(_patches(width, height) * (1.62 if small[1] == "mini" else 2.46))
    base, per_tile = (
        _OPENAI_MINI_TILES
        if name.startswith("gpt-4o-mini")
        else (
            OPENAI_TILE_BASE,
            OPENAI_TILE_TOKENS,
        )
    )
    if detail == "low":
        return base
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return base + per_tile * tiles


def _patches(width: int, height: int) -> int:
    """OpenAI's 32 px patches of an image, by the guide's steps: past the cap, the image is
    shrunk by ``sqrt(cap x 32^2 / (w x h))``, then again so that a whole number of patches fits
    its width or height (whichever needs the larger cut)."""
    patches = -(-width // 32) * -(-height // 32)
    if patches <= OPENAI_PATCH_CAP:
        return patches
    shrink = math.sqrt(OPENAI_PATCH_CAP * 32 * 32 / (width * height))
    w, h = width * shrink, height * shrink
    shrink = min(math.floor(w / 32) / (w / 32), math.floor(h / 32) / (h / 32))
    w, h = w * shrink, h * shrink
    return min(OPENAI_PATCH_CAP, math.ceil(w / 32) * math.ceil(h / 32))


def anthropic_image_tokens(width: int, height: int, *, model: str | None = None) -> int:
    """Tokens Anthropic bills for a ``width`` x ``height`` image sent to ``model``: the
    image's pixels / 750 once scaled to the model's tier (long edge and tokens).

    >>> anthropic_image_tokens(1000, 1000, model="claude-sonnet-4-5")  # the docs: ~1334
    1334
    """
    edge, most = _ANTHROPIC_TIERS[_claude_tier(model)]
    w, h = float(width), float(height)
    if max(w, h) > edge:
        scale = edge / max(w, h)
        w, h = w * scale, h * scale
    return min(most, math.ceil(w * h / ANTHROPIC_PIXELS_PER_TOKEN))


def _claude_tier(model: str | None) -> str:
    """``standard`` for a Claude model before 4.7, ``high`` for any other model name."""
    name = _bare(model)
    if name.startswith(("claude-3", "claude-2", "claude-instant")):
        return "standard"
    found = _CLAUDE_VERSION.search(name)
    if found is None:
        return "high"
    version = (int(found[1]), int(found[2] or 0))
    return "standard" if version < (4, 7) else "high"


def gemini_image_tokens(width: int, height: int, *, model: str | None = None) -> int:
    """Tokens Gemini bills for a ``width`` x ``height`` image sent to ``model``: 258 per
    768 px tile (258 in all with both sides at most 384 px) up to Gemini 2, the default media
    resolution's 1120 from Gemini 3 on, the larger of both for another model name.

    >>> gemini_image_tokens(1920, 1080, model="gemini-2.5-flash")  # 3 x 2 tiles
    1548
    """
    if width <= 384 and height <= 384:
        tiles = GEMINI_TILE_TOKENS
    else:
        tiles = -(-width // 768) * -(-height // 768) * GEMINI_TILE_TOKENS
    found = _GEMINI_VERSION.search(_bare(model))
    if found is None:
        return max(tiles, GEMINI_3_IMAGE_TOKENS)
    return GEMINI_3_IMAGE_TOKENS if int(found[1]) >= 3 else tiles


def provider_image_tokens(
    width: int, height: int, provider: str, *, model: str | None = None, detail: str | None = None
) -> int:
    """Tokens ``provider`` (``openai``, ``openai-responses``, ``anthropic``, ``gemini``) bills
    for a ``width`` x ``height`` image; ``detail`` is OpenAI's, which only OpenAI reads.

    An OpenAI-shaped request to a Claude or Gemini model (Anthropic's "OpenAI SDK
    compatibility" endpoint, Gemini's "OpenAI compatibility" one, a gateway such as LiteLLM
    or OpenRouter) is billed by the model's own vendor: such an image counts the larger of
    OpenAI's rule and that vendor's (a 1920 x 1080 screenshot is 1105 by OpenAI's tiles, 1600
    for Claude Sonnet 4.5)."""
    if provider == "anthropic":
        return anthropic_image_tokens(width, height, model=model)
    if provider == "gemini":
        return gemini_image_tokens(width, height, model=model)
    tokens = openai_image_tokens(width, height, model=model, detail=detail)
    name = _bare(model)
    if name.startswith("claude"):
        return max(tokens, anthropic_image_tokens(width, height, model=model))
    if name.startswith("gemini"):
        return max(tokens, gemini_image_tokens(width, height, model=model))
    return tokens


def image_tokens(
    data: str | None, provider: str, *, model: str | None = None, detail: str | None = None
) -> int:
    """Tokens ``provider`` bills for an image given as base64 ``data`` (or a ``data:`` URL):
    by its size (:func:`provider_image_tokens`) when its header gives it, else
    :data:`IMAGE_TOKENS` (an image by URL, data that is not a PNG, JPEG, GIF or WebP image)."""
    size = image_size(data) if isinstance(data, str) else None
    if size is None:
        return IMAGE_TOKENS
    return provider_image_tokens(*size, provider, model=model, detail=detail)


def part_image_tokens(part: Mapping[str, Any], provider: str, model: str | None) -> int:
    """Tokens of an exported image part (Anthropic ``image``, Chat ``image_url``, Responses
    ``input_image``) by :func:`image_tokens`, for ``provider``: its inline data is read (a
    ``base64`` source, a ``data:`` URL), a URL or file id counts :data:`IMAGE_TOKENS`."""
    kind = part.get("type")
    data: Any = None
    detail: Any = part.get("detail")
    if kind == "image":
        source = part.get("source")
        if isinstance(source, Mapping) and source.get("type") == "base64":
            data = source.get("data")
    elif kind == "image_url":
        url = part.get("image_url")
        if isinstance(url, Mapping):
            data, detail = url.get("url"), url.get("detail")
        else:
            data = url
    elif kind == "input_image":
        data = part.get("image_url")
    if not isinstance(data, str) or (kind != "image" and not data.startswith("data:")):
        return IMAGE_TOKENS
    return image_tokens(
        data, provider, model=model, detail=detail if isinstance(detail, str) else None
    )


def chat_image_delta(message: Mapping[str, Any], model: str | None) -> int:
    """What OpenAI's rule adds to the flat :data:`IMAGE_TOKENS` the chat counters charge an
    image part of ``message`` (the native walk and :func:`message_strings`): for each image
    part with inline data, :func:`part_image_tokens` less :data:`IMAGE_TOKENS` (less than 0
    for a small or ``detail: low`` image)."""
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    delta = 0
    for p in content:
        if (
            isinstance(p, Mapping)
            and p.get("type") in _CHAT_IMAGE_PARTS
            and not isinstance(p.get("text"), str)
        ):
            delta += part_image_tokens(p, "openai", model) - IMAGE_TOKENS
    return delta


_CHAT_IMAGE_PARTS: Final = frozenset({"image_url", "input_image", "image"})


# --- PDFs, by their pages --------------------------------------------------------------------
#
# Each provider reads an inline PDF page by page and bills every page; the pages are the
# document's own (:func:`~ctxengine.pdfpages.pdf_pages`: its page tree's ``/Count``). The rules
# below are the providers' documented ones; where the documentation gives a range or leaves a
# choice open, the larger count is taken, as for images. A PDF given by URL or file id counts
# :data:`IMAGE_TOKENS`: its bytes, so its pages, are not known here.

_PDF: Final = "application/pdf"
#: The text of a page. Anthropic (Claude "PDF support", "Estimate your costs"): each page is
#: sent as its extracted text and as an image; the text "typically" costs 1,500-3,000 tokens
#: a page, by its density: the larger figure. OpenAI ("File inputs", how it works) puts "both
#: the extracted text and an image of each page" into the model's context, with no figure for
#: the text: the same one is taken.
PDF_TEXT_TOKENS = 3000
#: The image of a page: an A4 page (210 x 297 mm; taller than US Letter, so it covers more of
#: OpenAI's tiles, 6 against 4) at 300 dpi, larger than any provider takes, so that each image
#: rule scales it down to its largest size: Anthropic's long edge (1568 px, or 2576 px from
#: Claude Opus 4.7 on: 1,600 or 5,000 tokens), OpenAI's tiles at high detail (1105 tokens).
PDF_PAGE_PIXELS: Final = (2480, 3508)
#: Gemini up to 2.x (Gemini API "Document understanding", technical details): "Each document
#: page is equivalent to 258 tokens", its text included.
GEMINI_PDF_PAGE_TOKENS = 258
#: Gemini 3 and after (Gemini API "Media resolution", token counts): a PDF page costs its
#: ``media_resolution``'s tokens, 560 at the default for PDFs (medium). A model name that is not
#: a Gemini one is charged the larger of both rules, as for images
#: (:data:`GEMINI_3_IMAGE_TOKENS`).
GEMINI_3_PDF_PAGE_TOKENS = 560


@lru_cache(maxsize=256)
def pdf_page_tokens(provider: str | None, model: str | None = None) -> int:
    """Tokens ``provider`` bills for one page of an inline PDF sent to ``model``: for
    Anthropic and OpenAI the page's text (:data:`PDF_TEXT_TOKENS`) and its image
    (:data:`PDF_PAGE_PIXELS` by the provider's image rule), for Gemini its page rate. An
    OpenAI-shaped request to a Claude or Gemini model counts the larger of OpenAI's rule and
    that vendor's (as :func:`provider_image_tokens`); without a provider, the largest of
    all three.

    >>> pdf_page_tokens("anthropic", "claude-sonnet-4-5")  # 3,000 of text, a 1,600-token image
    4600
    """
    if provider is None:
        return max(pdf_page_tokens(p, model) for p in ("anthropic", "openai", "gemini"))
    if provider == "anthropic":
        return PDF_TEXT_TOKENS + anthropic_image_tokens(*PDF_PAGE_PIXELS, model=model)
    if provider == "gemini":
        found = _GEMINI_VERSION.search(_bare(model))
        if found is None or int(found[1]) >= 3:
            return GEMINI_3_PDF_PAGE_TOKENS
        return GEMINI_PDF_PAGE_TOKENS
    tokens = PDF_TEXT_TOKENS + openai_image_tokens(*PDF_PAGE_PIXELS, model=model)
    name = _bare(model)
    if name.startswith("claude"):
        return max(tokens, pdf_page_tokens("anthropic", model))
    if name.startswith("gemini"):
        return max(tokens, pdf_page_tokens("gemini", model))
    return tokens


def pdf_tokens(data: str, provider: str | None = None, model: str | None = None) -> int:
    """Tokens ``provider`` bills for the PDF whose base64 text (or ``data:`` URL) is
    ``data``, sent to ``model``: its pages (:func:`~ctxengine.pdfpages.pdf_pages`) times
    :func:`pdf_page_tokens`; without a provider, the largest count of the providers."""
    return pdf_pages(data) * pdf_page_tokens(provider, model)


_FILE_PARTS: Final = frozenset({"document", "file", "input_file"})


def part_file_tokens(part: Mapping[str, Any], provider: str, model: str | None) -> int:
    """Tokens of an exported PDF part (Anthropic ``document``, Chat ``file``, Responses
    ``input_file``) for ``provider``: an inline PDF (a ``base64`` source, ``file_data`` as a
    ``data:application/pdf`` URL or as bare base64 not named as an image) by
    :func:`pdf_tokens`, any other (a URL, a file id, a text document, another file type)
    :data:`IMAGE_TOKENS`."""
    kind = part.get("type")
    data: Any = None
    name: Any = None
    if kind == "document":
        source = part.get("source")
        if (
            isinstance(source, Mapping)
            and source.get("type") == "base64"
            and source.get("media_type", _PDF) == _PDF
        ):
            data = source.get("data")
            if isinstance(data, str):
                return pdf_tokens(data, provider, model)
        return IMAGE_TOKENS
    if kind == "file":
        file = part.get("file")
        if isinstance(file, Mapping):
            data, name = file.get("file_data"), file.get("filename")
        else:  # LangChain's standard file block: ``base64`` (v1) or ``data`` (v0)
            data = part.get("base64", part.get("data"))
            mime = part.get("mime_type")
            if isinstance(data, str) and not data.startswith("data:") and mime in (None, "", _PDF):
                return pdf_tokens(data, provider, model)
    elif kind == "input_file":
        data, name = part.get("file_data"), part.get("filename")
    if isinstance(data, str) and (
        data.startswith("data:application/pdf;")
        or (not data.startswith("data:") and _pdf_named(name))
    ):
        return pdf_tokens(data, provider, model)
    return IMAGE_TOKENS


_IMAGE_NAMES: Final = (".png", ".gif", ".webp", ".jpg", ".jpeg")


def document_text(part: Mapping[str, Any]) -> str | None:
    """The text an Anthropic ``document`` part with a ``text`` (or ``content``) source is read
    as, as the importer reads it (its title, then its text); None for any other part (a PDF
    is media) and for one the importer refuses."""
    source = part.get("source")
    if part.get("type") != "document" or not isinstance(source, Mapping):
        return None
    if source.get("type") not in ("text", "content"):
        return None
    from .errors import TranscriptError  # imported for such a part only
    from .transcript.importers.anthropic import document_block
    from .transcript.importers.common import Loc
    from .transcript.model import Text

    try:
        read = document_block(part, Loc("content"))
    except TranscriptError:
        return None
    return read.text if isinstance(read, Text) else None


def _pdf_named(name: object) -> bool:
    """Whether bare base64 file data under the file name ``name`` is a PDF, as the importers
    read it (:func:`~ctxengine.transcript.importers.common.file_from_data`: a PDF, the one
    document type the providers take, unless the name is an image's)."""
    return not (isinstance(name, str) and name.lower().endswith(_IMAGE_NAMES))


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


def message_strings(message: Mapping[str, Any], model: str | None = None) -> tuple[list[str], int]:
    """The strings counted for one chat message and the fixed tokens it adds (the per-message
    split every chat counter shares); given ``model``, those add what OpenAI's rule for the
    size of its inline images adds to their flat count (:func:`chat_image_delta`)."""
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
                elif part.get("type") in {"image_url", "input_image", "image"}:
                    overhead += IMAGE_TOKENS
                elif part.get("type") in _FILE_PARTS:
                    text = document_text(part)
                    if text is None:
                        overhead += part_file_tokens(part, "openai", model)
                    else:
                        strings.append(text)
                elif part.get("type") == "input_audio":
                    overhead += input_audio_tokens(part)
        else:
            strings.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
    if model is not None:
        overhead += chat_image_delta(message, model)
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
    name and JSON arguments; content parts from their text, an image part by OpenAI's rule
    for its size and ``detail`` (:func:`openai_image_tokens`; for a Claude or Gemini model,
    which bills it by its own rule, the larger of both: :func:`provider_image_tokens`) when its
    inline data gives the size, else as :data:`IMAGE_TOKENS` (an image by URL); an inline PDF
    part (Chat ``file``, Responses ``input_file``, Anthropic ``document``, LangChain's ``file``
    block) by OpenAI's rule for its pages (:func:`part_file_tokens`), an Anthropic
    ``document`` with a text source by its text, as the importer reads it. Non-OpenAI models
    get the same rule over their estimator (``exact=False``).

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
        return REPLY_PRIMING + fast + sum(file_part_tokens(m, model) for m in messages)
    strings: list[str] = []
    total = REPLY_PRIMING
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ConfigTypeError(
                f"messages[{i}] is {type(message).__name__} {_preview(message)}; "
                "expected a message dict such as {'role': 'user', 'content': '...'}"
            )
        parts, overhead = message_strings(message, model)
        strings += parts
        total += overhead
    return total + sum(tokenizer.count_many(strings))


def file_part_tokens(message: Mapping[str, Any], model: str | None = None) -> int:
    """What the native chat counter leaves out of ``message``: its ``file``, ``input_file``
    and ``document`` parts (a PDF), each by OpenAI's rule for its pages
    (:func:`part_file_tokens`; :data:`IMAGE_TOKENS` for one by file id), as the plan counts
    it, or by its text (a text ``document``, :func:`document_text`), its ``input_audio`` parts,
    by :func:`audio_tokens`,
    and, given ``model``, what OpenAI's rule for the size of its inline images adds to their
    flat count (:func:`chat_image_delta`)."""
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
            if kind in _FILE_PARTS:
                text = document_text(p)
                if text is None:
                    total += part_file_tokens(p, "openai", model)
                else:
                    total += _resolve(model, None).count(text)
            elif kind == "input_audio":
                total += input_audio_tokens(p)
    if model is not None:
        total += chat_image_delta(message, model)
    return total


def input_audio_tokens(part: Mapping[str, Any]) -> int:
    """Tokens of an OpenAI Chat ``input_audio`` part (:func:`audio_tokens` of its data; 0 for
    a part without data, which carries no sound)."""
    audio = part.get("input_audio")
    data = audio.get("data") if isinstance(audio, Mapping) else None
    return audio_tokens(data) if isinstance(data, str) else 0
