"""The page count of an inline PDF, read from the document itself.

Providers bill a PDF by its pages (:func:`ctxengine.tokens.pdf_tokens`), and a PDF says how
many it has: the root of its page tree is a ``/Type /Pages`` dictionary whose ``/Count`` is the
number of pages under it (ISO 32000-1, 7.7.3.2 "Page Tree Nodes"), and each page is a ``/Type
/Page`` dictionary (7.7.3.3 "Page Objects"). :func:`pdf_pages` takes the largest ``/Count`` of
any ``/Type /Pages`` dictionary (the root's, also in a file updated incrementally, whose
older revisions stay in it), or the number of ``/Type /Page`` objects when that is larger (a
damaged ``/Count``: a reader walking the tree's ``/Kids`` finds every page).

From PDF 1.5 on, a writer may keep these dictionaries inside compressed object streams
(``/Type /ObjStm``, 7.5.7 "Object Streams"; ``/Filter /FlateDecode``, a zlib stream): when the
objects of the file itself hold no ``/Count`` of a page tree, those streams are inflated (at
most :data:`MAX_INFLATED` bytes in all) and their objects read the same way.

Every step is bounded: the file is read object by object, each object's dictionary once (up to
its ``stream`` keyword), so the work is linear in the file's size, one object held at a time,
and at most :data:`MAX_OBJECTS` objects are read (an object stream inflates to far more than
the file holds). A file that is not base64,
not a PDF, truncated, or whose pages cannot be found, is counted by its size
(:data:`BYTES_PER_PAGE`): counting never raises.
"""

from __future__ import annotations

import binascii
import math
import re
import zlib
from typing import Final

__all__ = ("BYTES_PER_PAGE", "MAX_INFLATED", "MAX_OBJECTS", "MAX_PAGES", "clear_pages", "pdf_pages")

#: The most pages a count gives. No provider takes a longer document (Gemini reads up to
#: 1,000 pages, Anthropic up to 600 per request), and at every provider's rate 10,000 pages
#: count more tokens than any model's context window holds (Gemini's 258 a page: 2.58
#: million), so a larger count changes nothing but could overflow the counts that hold it.
MAX_PAGES: Final = 10_000
#: The bytes per page assumed for a PDF whose pages cannot be read: about the least a page of
#: text takes in a file a word processor or TeX writes (its compressed content stream and page
#: object), so such a document is not counted fewer pages than it holds unless its pages are
#: smaller than that on average.
BYTES_PER_PAGE: Final = 2_000
#: The most bytes inflated from a document's object streams (a zip bomb stops there).
MAX_INFLATED: Final = 64 * 2**20
#: The most objects read from a document, its own and those of its object streams: a page
#: takes a few (its page object, its content stream, its resources), so a document of
#: :data:`MAX_PAGES` pages holds some tens of thousands; 64 KB of zlib can inflate to millions
#: of one-byte objects. A document read in part counts the pages it showed, and at least its
#: size's (:data:`BYTES_PER_PAGE`).
MAX_OBJECTS: Final = 1_000_000

#: The end of a PDF name: whitespace or a delimiter (ISO 32000-1, 7.2.2 "Character Set").
_END: Final = rb"(?![^\s()<>\[\]{}/%])"
_OBJECT: Final = re.compile(rb"(?<!\d)(\d{1,10})\s+\d{1,5}\s+obj(?![A-Za-z])")
_PAGES: Final = re.compile(rb"/Type\s*/Pages" + _END)
_PAGE: Final = re.compile(rb"/Type\s*/Page" + _END)
_COUNT: Final = re.compile(rb"/Count\s+(\d{1,12})(?!\d)")
_OBJSTM: Final = re.compile(rb"/Type\s*/ObjStm" + _END)
_FLATE: Final = re.compile(rb"/FlateDecode" + _END)
_FIRST: Final = re.compile(rb"/First\s+(\d{1,10})(?!\d)")
_STREAM: Final = re.compile(rb"stream\r?\n")
_INT: Final = re.compile(rb"\d{1,10}")


#: The pages of the documents read, by the length and hash of their text: a render counts the
#: same PDF in its plan and in its payload, and every render after counts it again. Keyed so,
#: the cache holds no document's text (a PDF is megabytes of it).
_READ: dict[tuple[int, int], int] = {}
_READ_MAX: Final = 256


def clear_pages() -> None:
    """Forget the pages of the documents read."""
    _READ.clear()


def pdf_pages(data: str) -> int:
    """The pages of the PDF whose base64 text (or ``data:`` URL) is ``data``: the
    ``/Count`` of its page tree, else its page objects, else one per :data:`BYTES_PER_PAGE`
    of it; at least 1, at most :data:`MAX_PAGES`.

    >>> pdf_pages("JVBERi0xLjQKMSAwIG9iaiA8PCAvVHlwZSAvUGFnZXMgL0NvdW50IDQwID4+IGVuZG9iag==")
    40
    """
    key = (len(data), hash(data))
    pages = _READ.get(key)
    if pages is None:
        # a data: URL: the document the plan read as base64, sent as a URL, read once
        url = data.startswith("data:")
        pages = _READ[key] = _cached(data.partition(",")[2]) if url else _cached(data, key)
    return pages


def _cached(data: str, key: tuple[int, int] | None = None) -> int:
    """The pages of base64 ``data``, read once."""
    key = key or (len(data), hash(data))
    pages = _READ.get(key)
    if pages is None:
        if len(_READ) >= _READ_MAX - 1:
            _READ.clear()
        pages = _READ[key] = _pages(data)
    return pages


def _pages(data: str) -> int:
    raw = _decode(data)
    if raw is None:  # not base64: counted by the size it would have
        return _by_size(len(data) * 3 // 4)
    try:
        found, whole = _count(raw)
    except (ValueError, IndexError, zlib.error, MemoryError):  # defensive: never raise
        found, whole = None, False
    if found is None:
        return _by_size(len(raw))
    if not whole:  # read in part: not counted fewer pages than its size gives
        return max(_by_size(len(raw)), min(MAX_PAGES, found))
    return min(MAX_PAGES, max(1, found))


def _by_size(size: int) -> int:
    return min(MAX_PAGES, max(1, math.ceil(size / BYTES_PER_PAGE)))


def _decode(data: str) -> bytes | None:
    """The bytes of base64 ``data``; a truncated text decodes up to its last whole quantum."""
    for text in (data, data.strip()[: len(data.strip()) // 4 * 4]):
        try:
            return binascii.a2b_base64(text)
        except (binascii.Error, ValueError):
            continue
    return None


class _Tally:
    """What the objects read so far say: the largest ``/Count`` of a page tree node, and the
    numbers of the page objects (an object rewritten by an update counts once), the larger of
    both counted; and how many
    more objects may be read (:data:`MAX_OBJECTS`)."""

    __slots__ = ("count", "pages", "room")

    def __init__(self) -> None:
        self.count = 0
        self.pages: set[int] = set()
        self.room = MAX_OBJECTS

    def spend(self) -> bool:
        """Take one object of :data:`MAX_OBJECTS`: False when none is left."""
        self.room -= 1
        return self.room >= 0

    def read(self, buf: bytes, number: int, start: int, end: int) -> None:
        """Read the dictionary of object ``number``, ``buf[start:end]``."""
        if _PAGES.search(buf, start, end):
            for m in _COUNT.finditer(buf, start, end):
                self.count = max(self.count, int(m[1]))
        elif _PAGE.search(buf, start, end):
            self.pages.add(number)

    def result(self) -> int | None:
        # a /Count below the page objects (a damaged file): a reader walking /Kids finds them
        return max(self.count, len(self.pages)) or None


def _count(raw: bytes) -> tuple[int | None, bool]:
    """The pages ``raw`` says it has, or None when it says nothing of them; and whether every
    object was read (not past :data:`MAX_OBJECTS`)."""
    tally = _Tally()
    streams: list[tuple[int, int, int]] = []  # (dictionary start and end, object end)
    heads = _OBJECT.finditer(raw)  # one at a time: a file may hold millions of them
    head = next(heads, None)
    while head is not None:
        following = next(heads, None)
        start = head.end()
        end = following.start() if following is not None else len(raw)
        found = _STREAM.search(raw, start, end)
        dict_end = found.start() if found else end
        if not tally.spend():
            return tally.result(), False
        tally.read(raw, int(head[1]), start, dict_end)
        if found and _OBJSTM.search(raw, start, dict_end) and _FLATE.search(raw, start, dict_end):
            streams.append((start, dict_end, end))
        head = following
    if tally.count or not streams:
        return tally.result(), True
    budget = MAX_INFLATED
    for start, dict_end, end in streams:
        if budget <= 0:
            break
        first = _FIRST.search(raw, start, dict_end)
        body = _STREAM.match(raw, dict_end)
        if first is None or body is None:
            continue
        try:
            content = zlib.decompressobj().decompress(raw[body.end() : end], budget)
        except zlib.error:  # damaged: what it held is not read
            continue
        budget -= len(content)
        if not _read_stream(content, int(first[1]), tally):
            return tally.result(), False
    return tally.result(), True


def _read_stream(content: bytes, first: int, tally: _Tally) -> bool:
    """Read the objects of an inflated object stream: its first ``first`` bytes are pairs of
    an object number and the object's offset after them, in order (7.5.7). False once the
    objects read reach :data:`MAX_OBJECTS`."""
    ints = _INT.finditer(content, 0, min(first, len(content)))
    pairs = zip(ints, ints, strict=False)  # one pair at a time: /First may span megabytes
    pair = next(pairs, None)
    while pair is not None:
        following = next(pairs, None)
        number, start = int(pair[0][0]), first + int(pair[1][0])
        end = first + int(following[1][0]) if following is not None else len(content)
        if not tally.spend():
            return False
        if start < end <= len(content):
            tally.read(content, number, start, end)
        pair = following
    return True
