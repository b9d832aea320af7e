"""Keep a request within the provider's per-request image limit: the newest images are sent,
the older ones become the text placeholder other media get where a provider takes none.

Every provider caps the images of one request (:data:`~ctxengine.transcript.providers.
IMAGE_LIMITS`) and rejects a request over the cap with a 400, on every turn after (the images
are history, sent again each time): Anthropic "too many images and documents: 120 + 0 > 100"
(anthropics/claude-code issue 24541), "Too much media: 0 document pages + 102 images > 100"
(issue 19822); an OpenAI-compatible gateway "request contains 52 images, exceeding the maximum
of 50 allowed per request" (anomalyco/opencode issue 47721). An agent that reads screenshots
(computer use, a browser agent) passes the cap in one long session.

:func:`limit_images` counts the image parts a render sends
(:func:`~ctxengine.transcript.providers.image_slots`: user turns and, but for OpenAI Chat, tool
results) from the newest message back, and turns every image past the limit into its
placeholder (:func:`~ctxengine.transcript.providers.image_placeholder`), one
``limit_images``/``image_omitted`` change each in the render's hygiene report. A screenshot
grows stale as the agent acts: the newest are what the model needs (the choice of Anthropic's
computer-use reference loop, ``_maybe_filter_to_n_most_recent_images`` in
anthropics/anthropic-quickstarts ``computer-use-demo/computer_use_demo/loop.py``). A transcript
within the limit is returned as it is.

An inline PDF is media of the request too (:func:`_limit_media`): Anthropic counts its pages
with the images against the same limit, and every provider's request size holds its base64;
a cut PDF goes as a whole, as :func:`pdf_placeholder`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from itertools import compress
from typing import TYPE_CHECKING, Any, Final

from ..errors import AdapterError
from ..imagesize import image_size
from ..pdfpages import pdf_pages
from ..transcript.changes import Change
from ..transcript.model import Image, Message, Text, ToolResult, Transcript
from ..transcript.providers import (
    IMAGE_LIMITS,
    PDF,
    image_count,
    image_placeholder,
    image_slots,
    takes_images,
)
from .warm import trusted_transcript

if TYPE_CHECKING:
    from .memo import RenderMemo

__all__ = (
    "MANY_IMAGES",
    "MANY_IMAGES_PX",
    "MAX_PX",
    "MEDIA_BYTES",
    "PAGES_COUNTED",
    "RULE",
    "check_max_images",
    "count_images",
    "cut_step",
    "image_limit",
    "kept_images",
    "limit_images",
    "pdf_placeholder",
)

#: The ``rule`` of the changes :func:`limit_images` reports (their ``action``: ``image_omitted``).
RULE = "limit_images"
#: Anthropic's many-image rule: a request of more than this many images is refused when one
#: of them is larger than :data:`MANY_IMAGES_PX` on a side ("At least one of the image
#: dimensions exceed max allowed size for many-image requests: 2000 pixels"; 20 images or
#: fewer are held to 8,000 px instead). Anthropic's vision guide: "If you submit more than 20
#: images in one API request, this limit is 2000x2000 px."
MANY_IMAGES: Final = 20
MANY_IMAGES_PX: Final = 2000
#: The most characters of inline image data (their base64 text, as the request carries it)
#: one request may hold, by provider: the request's own size limit less 1 MiB for the rest of
#: it (its text, a tool's definitions). Anthropic: "a maximum request size of 32 MB for
#: standard endpoints, including the Messages API" (API overview, request size limits; past
#: it a 413 ``request_too_large`` from Cloudflare); OpenAI: "up to 50 MB total payload size
#: per request" (images and vision guide); Gemini: inline data while "the total request size"
#: stays under 20 MB (image understanding; larger files go by the File API). A screenshot
#: agent passes these long before the count limits: 100 screenshots of 400 KB are 53 MB.
MEDIA_BYTES: Final[dict[str, int]] = {
    "openai": 50_000_000 - 2**20,
    "openai-responses": 50_000_000 - 2**20,
    "anthropic": 32_000_000 - 2**20,
    "gemini": 20_000_000 - 2**20,
}
#: Why a render for Anthropic keeps 20 images (its changes say it).
MANY_IMAGES_WHY: Final = (
    f"anthropic takes more than {MANY_IMAGES} images per request only when each is at most "
    f"{MANY_IMAGES_PX} px on a side, and one is larger"
)


def check_max_images(max_images: object) -> None:
    """Refuse a ``max_images`` that is neither None nor an int >= 0.

    Raises:
        AdapterError: naming the value and what was expected.
    """
    if max_images is None:
        return
    if not isinstance(max_images, int) or isinstance(max_images, bool) or max_images < 0:
        raise AdapterError(
            f"max_images is {max_images!r} ({type(max_images).__name__}); expected None "
            "(the provider's limit) or an int >= 0"
        )


def image_limit(provider: str, max_images: int | None) -> int:
    """The images a render for ``provider`` may send: ``max_images``, else the provider's
    documented limit."""
    return IMAGE_LIMITS[provider] if max_images is None else max_images


def count_images(t: Transcript, provider: str) -> int:
    """The image parts ``provider``'s payload of ``t`` carries (as rendered, without hygiene,
    which only removes), and the pages of its PDFs where the provider counts them with the
    images (:data:`PAGES_COUNTED`; one by URL weighs one): what :func:`image_limit` bounds."""
    n = sum(image_count(m, provider) for m in t.messages)
    if provider in PAGES_COUNTED:
        n += sum(p.weight for p in _parts(t.messages, provider) if p.pdf)
    return n


def limit_images(
    t: Transcript, provider: str, max_images: int | None = None, memo: RenderMemo | None = None
) -> tuple[Transcript, tuple[Change, ...]]:
    """``t`` with at most :func:`image_limit` image parts for ``provider``: the newest are
    kept (:func:`kept_images`: the oldest cut by steps of a tenth of the limit, so the
    prefix stays the same from one request to the next), each older one becomes its text
    placeholder (one change each, at its message's index). ``t`` itself, and no change, when
    it holds no more than that.

    With ``memo`` (a session's renders), the image count of a message and the message standing
    for one with images cut are made once while the message is kept, so the renders after
    reuse the work of the one before (the stand-in is the same object each time); a render
    that only adds messages after those of the render before and cuts as many images as it
    did reuses its messages and changes whole (:class:`_Cut`), so a screenshot session past
    the limit does no work per image cut on the turns between two steps of the cut."""
    limit = image_limit(provider, max_images)
    messages = t.messages

    def count(m: Message) -> int:
        return image_count(m, provider)

    if memo is None:
        counts = list(map(count, messages))
        total = sum(counts)
    else:
        key = ("images", provider)
        table = memo.table(*key)
        counts, total = memo.aligned(*key).counted(
            messages, count, lambda: table.many(messages, count)
        )
    refused: tuple[Change, ...] = ()
    if provider == "anthropic" and total:
        messages, counts, refused = _without_refused(messages, counts, memo)
        total = sum(counts)
    if _pdf_total(t.messages, provider, memo):  # a PDF weighs its pages and its data too
        if memo is not None and _no_media_cut(messages, total, provider, max_images, memo):
            return (_sent(t, messages, memo), refused) if refused else (t, ())
        return _limit_media(t, messages, refused, provider, max_images, memo)
    why = None
    cut = total - kept_images(total, limit) if total > limit else 0
    # the images that must go for the request size, whenever they do not all fit (not only
    # when the newest within the count limit do not: the cut must not fall back to the count's)
    over = _bytes_cut(messages, counts, provider, memo) if total else 0
    if over > cut:
        cut, limit = over, total - over
        why = f"{provider} takes at most {MEDIA_BYTES[provider]:,} characters of inline images"
    if (
        provider == "anthropic"
        and total - cut > MANY_IMAGES
        and limit > MANY_IMAGES
        and _too_large(messages, counts, total - cut, memo)
    ):
        limit, why = MANY_IMAGES, MANY_IMAGES_WHY
        cut = total - kept_images(total, limit)
    if not cut:
        if refused:
            return _sent(t, messages, memo), refused
        return t, ()
    if memo is None:
        out, ordered = _limited(messages, counts, cut, provider, max_images, limit, None, why)
        return t.replace(out), _in_order(refused, ordered)
    cuts: list[_Cut] = memo.image_cuts.setdefault((provider, max_images), [])
    done = next((c.after(messages, memo) for c in cuts if (c.cut, c.why) == (cut, why)), None)
    if done is None:
        made, ordered = _limited(messages, counts, cut, provider, max_images, limit, memo, why)
        done = _Cut(messages, tuple(made), ordered, cut, why)
    # the last two: a render may render the turns merged, then as they are
    cuts[:] = [*(c for c in cuts[-1:] if c is not done), done]
    # a session's render: the messages are known (no re-check)
    return trusted_transcript(done.out, t.source_format), _in_order(refused, done.changes)


def _sent(t: Transcript, messages: tuple[Message, ...], memo: RenderMemo | None) -> Transcript:
    return t.replace(messages) if memo is None else trusted_transcript(messages, t.source_format)


def _in_order(first: tuple[Change, ...], then: tuple[Change, ...]) -> tuple[Change, ...]:
    """The changes of both, by message index (each kind's own order kept within a message)."""
    if not first:
        return then
    return tuple(sorted((*first, *then), key=lambda c: -1 if c.index is None else c.index))


#: The longest side of an image Anthropic takes, whatever the count: "Images larger than
#: 8000x8000 px will be rejected" (vision guide); the API answers "image dimensions exceed
#: max allowed size: 8000 pixels", on every turn after, as the image is history.
MAX_PX: Final = 8000
#: Why an image larger than that is sent as its placeholder (its change says it).
MAX_PX_WHY: Final = f"anthropic refuses an image larger than {MAX_PX} px on a side"


def _without_refused(
    messages: tuple[Message, ...], counts: list[int], memo: RenderMemo | None
) -> tuple[tuple[Message, ...], list[int], tuple[Change, ...]]:
    """``messages`` with each image Anthropic refuses whatever the count (larger than
    :data:`MAX_PX` on a side, by its header) as its placeholder, their image counts, and one
    change per image; ``messages`` itself when there is none (the messages holding images
    are read once each with ``memo``: their sides are kept)."""
    out: list[Message] | None = None
    changes: list[Change] = []
    for i in compress(range(len(counts)), counts):
        m = messages[i]
        sides = _read(m, _sides, memo, "image sides")
        over = tuple(k for k, side in enumerate(sides) if side > MAX_PX)
        if not over:
            continue
        if out is None:
            out, counts = list(messages), list(counts)
        cut = _refused_cutter(over)
        out[i] = cut(m) if memo is None else memo.table("images-refused", over).get(m, cut)
        counts[i] -= len(over)
        changes += [
            Change(
                RULE,
                "image_omitted",
                i,
                f"image {k + 1} of {len(sides)} in this message sent as a text placeholder: "
                f"{MAX_PX_WHY}",
            )
            for k in over
        ]
    if out is None:
        return messages, counts, ()
    return tuple(out), counts, tuple(changes)


def _refused_cutter(over: tuple[int, ...]) -> Callable[[Message], Message]:
    def make(m: Message) -> Message:
        """``m`` with its image parts ``over`` (their order among its Anthropic image parts)
        replaced by their placeholder."""
        slots = image_slots(m, "anthropic")
        return _placeholders(m, [slots[n] for n in over])

    return make


@dataclasses.dataclass(frozen=True, slots=True)
class _Cut:
    """What :func:`limit_images` made of a session's ``messages``: the messages sent
    (``out``), the changes, and how many images it cut."""

    messages: tuple[Message, ...]
    out: tuple[Message, ...]
    changes: tuple[Change, ...]
    cut: int
    why: str | None = None  # the limit's reason, when not the count (see :func:`_limited`)

    def after(self, messages: tuple[Message, ...], memo: RenderMemo) -> _Cut | None:
        """This cut for ``messages`` when they are this one's messages with others after them
        (the same objects, none replaced) and the same number of images is cut: the images
        cut are then the same, in the same messages at the same indices. None otherwise."""
        old = self.messages
        if messages is old:
            return self
        found = memo.align(messages, old)
        if found is None or found[0] or found[1] or found[2]:
            return None
        return _Cut(messages, self.out + messages[len(old) :], self.changes, self.cut, self.why)


def _read(
    m: Message, read: Callable[[Message], tuple[int, ...]], memo: RenderMemo | None, key: str
) -> tuple[int, ...]:
    """``read(m)``; with ``memo``, once while the message is kept (the table ``key``)."""
    return read(m) if memo is None else memo.table(key).get(m, read)


def _newest(
    messages: tuple[Message, ...],
    counts: list[int],
    read: Callable[[Message], tuple[int, ...]],
    memo: RenderMemo | None,
    key: str,
) -> Iterator[int]:
    """``read`` of each image part of ``messages`` (``counts``: each message's image
    parts), the newest first."""
    for i in reversed(list(compress(range(len(counts)), counts))):
        yield from reversed(_read(messages[i], read, memo, key))


def _bytes_cut(
    messages: tuple[Message, ...], counts: list[int], provider: str, memo: RenderMemo | None
) -> int:
    """How many of the oldest image parts of ``messages`` are cut so that the others fit in
    :data:`MEDIA_BYTES`: the images are taken oldest first, as the turns added them, and each
    time those held pass the size, the oldest go by a step (:func:`cut_step` of the images
    held). The cut of a request is then the cut of the request before it, or more by whole
    steps: an image cut stays cut as screenshots of other sizes come (cut by a step of the
    images that fit, which changes with their sizes, a request could send again an image the
    one before cut, and change its prefix twice)."""
    read = _data_sizes(provider)
    key = f"image data {provider}"
    sizes = [
        size
        for i in compress(range(len(counts)), counts)
        for size in _read(messages[i], read, memo, key)
    ]
    return _oldest_cut(sizes, MEDIA_BYTES[provider])


def _oldest_cut(sizes: list[int], room: int) -> int:
    """How many of the oldest ``sizes`` to cut, by steps of a tenth of those held
    (:func:`cut_step`), so that the rest add up to at most ``room``."""
    cut = held = 0
    for k, size in enumerate(sizes, 1):
        held += size
        while held > room:
            end = min(k, cut + cut_step(k - cut))
            held -= sum(sizes[cut:end])
            cut = end
    return cut


def _data_sizes(provider: str) -> Callable[[Message], tuple[int, ...]]:
    def read(m: Message) -> tuple[int, ...]:
        """The characters of inline data of each image part ``provider``'s payload of ``m``
        holds, in block order (0 for an image by URL)."""
        return tuple(len(image.data or "") for image in _images(m, provider))

    return read


def _images(m: Message, provider: str) -> list[Image]:
    out = []
    for i, k in image_slots(m, provider):
        b = m.blocks[i]
        image = b.content[k] if isinstance(b, ToolResult) else b
        if isinstance(image, Image):
            out.append(image)
    return out


def _too_large(
    messages: tuple[Message, ...], counts: list[int], keep: int, memo: RenderMemo | None
) -> bool:
    """Whether one of the newest ``keep`` images of ``messages`` (``counts``: each message's
    images for Anthropic) is larger than :data:`MANY_IMAGES_PX` on a side, by its header
    (an image whose size cannot be read, or given by URL, is not known to be)."""
    sides = _newest(messages, counts, _sides, memo, "image sides")
    return any(side > MANY_IMAGES_PX for side in itertools.islice(sides, keep))


def _sides(m: Message) -> tuple[int, ...]:
    """The longer side of each image part Anthropic's payload of ``m`` holds, in block order
    (0 where its size is unknown)."""
    out = []
    for image in _images(m, "anthropic"):
        size = image_size(image.data) if image.data else None
        out.append(max(size) if size else 0)
    return tuple(out)


def _limited(
    messages: tuple[Message, ...],
    counts: list[int],
    cut: int,
    provider: str,
    max_images: int | None,
    limit: int,
    memo: RenderMemo | None,
    why: str | None = None,
) -> tuple[list[Message], tuple[Change, ...]]:
    """``messages`` with their ``cut`` oldest image parts as placeholders, and the changes
    (``why``: the limit's reason, when not the provider's count or ``max_images``)."""
    if why is None:
        why = (
            f"{provider} takes at most {limit} images per request"
            if max_images is None
            else f"max_images={limit}"
        )
    # the same for every render that cuts as many images (its changes are then reused)
    detail = (
        f"the request holds more images than the limit ({why}); its oldest {cut} are sent as "
        f"placeholders, {cut_step(limit)} more at a time, so the next requests' prefix stays "
        "the same"
    )
    out = list(messages)
    changes: list[Change] = []
    left = cut
    for i in compress(range(len(counts)), counts):  # the messages holding images, oldest first
        n = counts[i]
        here = min(n, left)  # the message's first images, its oldest
        left -= here
        m = messages[i]
        if memo is None:
            out[i] = _without_images(m, provider, here)
        else:
            out[i] = memo.table("images-cut", provider, here).get(m, _cutter(provider, here))
        changes += [
            Change(
                RULE,
                "image_omitted",
                i,
                f"image {k + 1} of {n} in this message sent as a text placeholder: {detail}",
            )
            for k in range(here)
        ]
        if not left:
            break
    return out, tuple(changes)


def cut_step(limit: int) -> int:
    """How many images go at a time past ``limit``: a tenth of it (one for a limit under 20)."""
    return max(1, limit // 10)


def kept_images(total: int, limit: int) -> int:
    """The newest images kept of ``total`` over ``limit``: the oldest are cut by whole steps
    (:func:`cut_step`), as few steps as bring them within the limit.

    Cut to the limit exactly, each new image past it turned the oldest one kept into its
    placeholder: the payload changed near its start on every turn, and a provider's prompt
    cache missed everything after that point, on every turn (a screenshot agent resends
    its whole history). Cut by steps, the oldest image kept stays the same for the next
    ``step`` images: the prefix breaks once per step, for at most ``step - 1`` images fewer
    than the limit (Anthropic's computer-use loop removes its old screenshots by a
    ``min_removal_threshold`` chunk for this reason, ``_maybe_filter_to_n_most_recent_images``
    in anthropics/anthropic-quickstarts)."""
    step = cut_step(limit)
    return total - min(total, -(-(total - limit) // step) * step)


def _cutter(provider: str, cut: int) -> Callable[[Message], Message]:
    def make(m: Message) -> Message:
        return _without_images(m, provider, cut)

    return make


def _without_images(m: Message, provider: str, cut: int) -> Message:
    """``m`` with its first ``cut`` image parts (block order) replaced by their placeholder."""
    return _placeholders(m, image_slots(m, provider)[:cut])


def _placeholders(m: Message, slots: list[tuple[int, int]]) -> Message:
    """``m`` with the images at ``slots`` (:func:`image_slots`' places) replaced by their
    placeholder."""
    blocks = list(m.blocks)
    for i, k in slots:
        b = blocks[i]
        if k < 0 and isinstance(b, Image):
            blocks[i] = image_placeholder(b)
        elif isinstance(b, ToolResult):
            content = list(b.content)
            image = content[k]
            if isinstance(image, Image):
                content[k] = image_placeholder(image)
            blocks[i] = dataclasses.replace(b, content=tuple(content))
    return dataclasses.replace(m, blocks=tuple(blocks))


# --- PDFs: their pages and their data count with the images ----------------------------------

#: The providers that count a request's document pages with its images against one limit
#: (:func:`image_limit`). Anthropic: "Maximum pages per request: 600 (100 when the request's
#: context window is under 1M tokens)", "Both limits are on the entire request payload,
#: including any other content sent alongside PDFs" (PDF support, "Check PDF requirements"),
#: the numbers of its image limit; the API answers one count of both, "Too much media: 0
#: document pages + 102 images > 100" (anthropics/claude-code issue 19822). OpenAI and
#: Gemini document no page limit per request shared with images: their PDFs weigh only their
#: data (:data:`MEDIA_BYTES`).
PAGES_COUNTED: Final = frozenset({"anthropic"})


def _is_pdf(b: object, by_url: bool) -> bool:
    """Whether ``b`` is an inline PDF (its pages and data are known), or, with ``by_url``, a
    PDF by URL (the provider fetches it: its pages are not known here)."""
    return (
        isinstance(b, Image)
        and b.media_type == PDF
        and (b.data is not None or (by_url and bool(b.url)))
    )


def _pdf_slots(m: Message, provider: str) -> list[tuple[int, int]]:
    """Where ``m`` holds an inline PDF ``provider``'s exporter sends as a document part, in
    block order, as :func:`image_slots` places an image (a PDF where the provider takes no
    media is already a placeholder). Where pages count (:data:`PAGES_COUNTED`), a PDF by URL
    too: the provider fetches it and counts its pages, at least one (Anthropic sends it as a
    ``url`` document source)."""
    if not takes_images(m.role, provider):
        return []
    blocks = m.blocks
    if len(blocks) == 1 and type(blocks[0]) is Text:
        return []
    by_url = provider in PAGES_COUNTED
    out: list[tuple[int, int]] = []
    for i, b in enumerate(blocks):
        if _is_pdf(b, by_url):
            out.append((i, -1))
        elif isinstance(b, ToolResult):
            out += [(i, k) for k, c in enumerate(b.content) if _is_pdf(c, by_url)]
    return out


def _pdf_total(messages: tuple[Message, ...], provider: str, memo: RenderMemo | None) -> int:
    """The inline PDFs ``provider``'s payload of ``messages`` carries (with ``memo``, counted
    along a session's renders as the image counts are); without ``memo``, 1 when it carries
    one, else 0."""

    def count(m: Message) -> int:
        return len(_pdf_slots(m, provider))

    if memo is None:  # whether there is one: most requests hold none, and most messages text
        for m in messages:
            blocks = m.blocks
            if (len(blocks) != 1 or type(blocks[0]) is not Text) and count(m):
                return 1
        return 0
    key = ("pdfs", provider)
    table = memo.table(*key)
    return memo.aligned(*key).counted(messages, count, lambda: table.many(messages, count))[1]


def pdf_placeholder(image: Image, pages: int) -> Text:
    """The text standing in for an inline PDF a render does not send: the image placeholder
    (:func:`~ctxengine.transcript.providers.image_placeholder`) with its pages."""
    name = f" {image.name!r}" if image.name else ""
    unit = "page" if pages == 1 else "pages"
    return Text(f"[{image.media_type} attachment{name} of {pages} {unit} omitted]")


@dataclasses.dataclass(frozen=True, slots=True)
class _Part:
    """One media part of a request: its message, its place there, whether a PDF, the slots of
    the count limit it takes (an image 1, a PDF its pages or, where pages do not count, 0), a
    PDF's pages, its base64 characters, and its order among the parts of its kind in its message."""

    index: int
    slot: tuple[int, int]
    image: Image
    pdf: bool
    weight: int
    pages: int
    size: int
    nth: int
    of: int


def _parts(messages: tuple[Message, ...], provider: str) -> list[_Part]:
    """The image and PDF parts of ``provider``'s payload of ``messages``, oldest first."""
    out: list[_Part] = []
    for i, m in enumerate(messages):
        out += _message_parts(i, m, provider)
    return out


def _message_parts(i: int, m: Message, provider: str) -> list[_Part]:
    """The image and PDF parts of ``provider``'s payload of ``m``, at index ``i``, in block
    order."""
    images, pdfs = image_slots(m, provider), _pdf_slots(m, provider)
    if not images and not pdfs:
        return []
    weighs = provider in PAGES_COUNTED
    found = [(slot, False, n, len(images)) for n, slot in enumerate(images)]
    found += [(slot, True, n, len(pdfs)) for n, slot in enumerate(pdfs)]
    out: list[_Part] = []
    for slot, pdf, nth, of in sorted(found):
        b = m.blocks[slot[0]]
        media = b.content[slot[1]] if isinstance(b, ToolResult) else b
        if not isinstance(media, Image):
            continue
        size = len(media.data or "")
        # a PDF by URL: its pages are not known here, and it has one at least
        pages = (pdf_pages(media.data) if media.data is not None else 1) if pdf else 0
        weight = (pages if weighs else 0) if pdf else 1
        out.append(_Part(i, slot, media, pdf, weight, pages, size, nth, of))
    return out


def _no_media_cut(
    messages: tuple[Message, ...],
    images: int,
    provider: str,
    max_images: int | None,
    memo: RenderMemo,
) -> bool:
    """Whether :func:`_limit_media` cuts nothing from ``messages`` (``images``: their image
    parts), told from sums per message kept along a session's renders, so that a warm render
    of a session holding a PDF looks at its new messages only: no PDF alone over a limit, the
    images and pages within the count limit, their data within :data:`MEDIA_BYTES`, and no
    more images than Anthropic's many-image rule allows (past it, the whole check runs)."""
    if provider == "anthropic" and images > MANY_IMAGES:
        return False
    limit, room = image_limit(provider, max_images), MEDIA_BYTES[provider]
    parts = memo.table("media parts", provider)

    def read(m: Message) -> list[_Part]:
        return parts.get(m, lambda m: _message_parts(0, m, provider))  # type: ignore[no-any-return]

    def alone(m: Message) -> int:
        return sum(1 for p in read(m) if p.pdf and (p.weight > limit or p.size > room))

    def pages(m: Message) -> int:
        return sum(p.weight for p in read(m) if p.pdf)

    def size(m: Message) -> int:
        return sum(p.size for p in read(m))

    return (
        _kept_sum(memo, ("pdfs alone over", provider, limit, room), messages, alone) == 0
        and _kept_sum(memo, ("pdf pages", provider), messages, pages) <= limit - images
        and _kept_sum(memo, ("media size", provider), messages, size) <= room
    )


def _kept_sum(
    memo: RenderMemo,
    key: tuple[Any, ...],
    messages: tuple[Message, ...],
    make: Callable[[Message], int],
) -> int:
    """The sum of ``make`` over ``messages``, kept along a session's renders (the values of
    the messages kept from the render before are not made again)."""
    table = memo.table(*key)
    return memo.aligned(*key).counted(messages, make, lambda: table.many(messages, make))[1]


def _limit_media(
    t: Transcript,
    messages: tuple[Message, ...],
    refused: tuple[Change, ...],
    provider: str,
    max_images: int | None,
    memo: RenderMemo | None,
) -> tuple[Transcript, tuple[Change, ...]]:
    """:func:`limit_images` of a request that carries PDFs: images and PDFs are parts of one
    request, each PDF cut as a whole. A PDF that alone passes a limit (more pages than the
    count limit, where pages count, or more characters than :data:`MEDIA_BYTES`) is sent as
    its placeholder whatever else the request holds; then the oldest parts go, by the steps
    of :func:`kept_images`, until the images and pages left are within the count limit and
    their data within :data:`MEDIA_BYTES` (Anthropic's many-image rule applied last, as for
    images alone). A cut PDF becomes :func:`pdf_placeholder`, one change each."""
    limit = image_limit(provider, max_images)
    room = MEDIA_BYTES[provider]
    parts = _parts(messages, provider)
    why: dict[int, str] = {}  # the reason each cut part was cut, by its order in ``parts``
    for n, p in enumerate(parts):
        if p.pdf and p.weight > limit:
            pages = f"{p.weight} pages" if p.image.data is not None else "at least 1 page"
            why[n] = (
                f"a PDF of {pages}, and {provider} takes at most {limit} images and "
                "document pages per request"
                if max_images is None
                else f"a PDF of {pages}, over max_images={limit}"
            )
        elif p.pdf and p.size > room:
            why[n] = (
                f"a PDF of {p.size:,} characters of base64, and {provider} takes at most "
                f"{room:,} characters of inline images and documents"
            )
    left = [n for n in range(len(parts)) if n not in why]
    step = cut_step(limit)
    # the count: the oldest parts that take slots, by whole steps of slots
    counted = [n for n in left if parts[n].weight]
    held = sum(parts[n].weight for n in counted)
    if held > limit:
        need = min(held, -(-(held - limit) // step) * step)
        what = "images and document pages" if provider in PAGES_COUNTED else "images"
        reason = (
            f"{provider} takes at most {limit} {what} per request"
            if max_images is None
            else f"max_images={limit}"
        )
        gone = 0
        for n in counted:
            if gone >= need:
                break
            why[n] = reason
            gone += parts[n].weight
    # the request size: the oldest parts, by steps of a tenth of those held (as _bytes_cut)
    cut = _oldest_cut([parts[n].size for n in left], room)
    size_why = f"{provider} takes at most {room:,} characters of inline images and documents"
    for n in left[:cut]:
        why.setdefault(n, size_why)
    # the step each reason cuts by, as its change says: the size's a tenth of the parts held
    # (as limit_images says it of the images kept), the many-image rule's that of its 20
    steps = {size_why: cut_step(len(left) - cut), MANY_IMAGES_WHY: cut_step(MANY_IMAGES)}
    images = [n for n, p in enumerate(parts) if not p.pdf]
    kept = [n for n in images if n not in why]
    if (
        provider == "anthropic"
        and len(kept) > MANY_IMAGES
        and limit > MANY_IMAGES
        and any(_side(parts[n].image) > MANY_IMAGES_PX for n in kept)
    ):
        for n in images[: len(images) - kept_images(len(images), MANY_IMAGES)]:
            why.setdefault(n, MANY_IMAGES_WHY)
    if not why:
        return (_sent(t, messages, memo), refused) if refused else (t, ())
    out = list(messages)
    changes: list[Change] = []
    by_message: dict[int, dict[tuple[int, int], Text]] = {}
    for n in sorted(why):
        p = parts[n]
        if p.pdf and p.image.data is None:  # by URL: its pages are not known, its URL is
            by_message.setdefault(p.index, {})[p.slot] = image_placeholder(p.image)
            what = f"PDF {p.nth + 1} of {p.of} in this message (by URL, at least 1 page)"
        elif p.pdf:
            by_message.setdefault(p.index, {})[p.slot] = pdf_placeholder(p.image, p.pages)
            what = (
                f"PDF {p.nth + 1} of {p.of} in this message ({p.pages} pages, "
                f"{p.size:,} characters)"
            )
        else:
            by_message.setdefault(p.index, {})[p.slot] = image_placeholder(p.image)
            what = f"image {p.nth + 1} of {p.of} in this message"
        detail = (
            why[n]
            if why[n].startswith("a PDF of")
            else (
                f"the request holds more media than the limit ({why[n]}); its oldest are sent "
                f"as placeholders, {steps.get(why[n], step)} more at a time, so the next "
                "requests' prefix stays the same"
            )
        )
        changes.append(
            Change(RULE, "image_omitted", p.index, f"{what} sent as a text placeholder: {detail}")
        )
    for i, slots in by_message.items():
        out[i] = _replaced(messages[i], slots)
    return _sent(t, tuple(out), memo), _in_order(refused, tuple(changes))


def _side(image: Image) -> int:
    """The longer side of ``image`` by its header (0 where it cannot be read)."""
    size = image_size(image.data) if image.data else None
    return max(size) if size else 0


def _replaced(m: Message, slots: dict[tuple[int, int], Text]) -> Message:
    """``m`` with the media at each of ``slots`` replaced by its text."""
    blocks = list(m.blocks)
    for (i, k), text in slots.items():
        b = blocks[i]
        if k < 0:
            blocks[i] = text
        elif isinstance(b, ToolResult):
            content = list(b.content)
            content[k] = text
            blocks[i] = dataclasses.replace(b, content=tuple(content))
    return dataclasses.replace(m, blocks=tuple(blocks))
