"""The pixel size of an inline image, read from the first bytes of its base64 data.

Providers bill an image by its size (:func:`ctxengine.tokens.image_tokens`), and an inline
image says its size in its header: PNG in its ``IHDR`` chunk, GIF in its logical screen
descriptor, WebP in its ``VP8 ``/``VP8L``/``VP8X`` chunk, JPEG in its start-of-frame (SOFn)
marker, after the segments before it (APPn: EXIF, ICC profiles; DQT, DHT). Only the bytes read
are decoded, a few base64 characters at a time: the data is never decoded whole (a screenshot
is a megabyte of it). A JPEG's segments are skipped by their lengths, at most
:data:`MAX_SEGMENTS` of them.

Anything else (truncated data, another format, invalid base64, a size of 0) gives ``None``,
and the caller counts the image as one of unknown size.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import Final

__all__ = ("MAX_SEGMENTS", "image_size")

#: JPEG segments skipped at most before its frame header (a camera's JPEG has about ten).
MAX_SEGMENTS: Final = 256
#: JPEG start-of-frame markers (they carry the size): C0-CF less DHT (C4), JPG (C8), DAC (CC).
_SOF: Final = frozenset(
    {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
)
#: JPEG markers without a length: TEM, RST0-7, SOI.
_STANDALONE: Final = frozenset({0x01, *range(0xD0, 0xD9)})
_WHITESPACE: Final = (" ", "\n", "\r", "\t")


def _read(data: str, start: int, n: int) -> bytes:
    """Bytes ``start`` to ``start + n`` of the base64 ``data`` (fewer at its end, none when
    the characters there are not base64), decoding only the characters that hold them."""
    lo = start // 3 * 4
    hi = (start + n + 2) // 3 * 4
    chunk = data[lo:hi]
    if not chunk:
        return b""
    try:
        raw = b64decode(chunk, validate=True)  # a character off the alphabet: not base64
    except (binascii.Error, ValueError):
        return b""
    skip = start - lo // 4 * 3
    return raw[skip : skip + n]


def image_size(data: str) -> tuple[int, int] | None:
    """``(width, height)`` in pixels of the PNG, JPEG, GIF or WebP image whose base64 text is
    ``data``; ``None`` when its header cannot be read.

    >>> image_size("R0lGODlhgAdAAQAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==")  # GIF, 1920 x 320
    (1920, 320)
    """
    if not isinstance(data, str) or len(data) < 16:
        return None
    if data.startswith("data:"):  # a data URL: the base64 follows the comma
        data = data.partition(",")[2]
    if any(c in data[:4096] for c in _WHITESPACE):  # MIME-style lines: offsets need one run
        data = "".join(data.split())
    head = _read(data, 0, 30)
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        if head[12:16] != b"IHDR" or len(head) < 24:
            return None
        return _checked(int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"))
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return _checked(int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little"))
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(head)
    if head[:2] == b"\xff\xd8":
        return _jpeg(data)
    return None


def _checked(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp(head: bytes) -> tuple[int, int] | None:
    """The canvas size of a WebP file (RIFF container, Google's "WebP Container Specification"):
    a ``VP8X`` chunk's 24-bit sizes less one, a lossless ``VP8L`` bitstream's 14-bit sizes less
    one after its 0x2F signature, a lossy ``VP8 `` key frame's 14-bit sizes after its start
    code 9D 01 2A."""
    kind = head[12:16]
    if kind == b"VP8X" and len(head) >= 30:
        w = int.from_bytes(head[24:27], "little") + 1
        h = int.from_bytes(head[27:30], "little") + 1
        return _checked(w, h)
    if kind == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return _checked((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if kind == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        w = int.from_bytes(head[26:28], "little") & 0x3FFF
        h = int.from_bytes(head[28:30], "little") & 0x3FFF
        return _checked(w, h)
    return None


def _jpeg(data: str) -> tuple[int, int] | None:
    """The frame size of a JPEG: its segments are walked from the SOI marker to the first
    start-of-frame marker (ITU-T T.81, B.2), each skipped by its length; None at the scan
    (SOS) before a frame, at a byte that is not a marker, or past :data:`MAX_SEGMENTS`."""
    pos = 2
    for _ in range(MAX_SEGMENTS):
        seg = _read(data, pos, 4)
        if len(seg) < 2 or seg[0] != 0xFF:
            return None
        marker = seg[1]
        if marker == 0xFF:  # a fill byte before the marker
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if len(seg) < 4 or marker == 0xDA or marker == 0xD9:  # scan or end before a frame
            return None
        if marker in _SOF:
            frame = _read(data, pos + 4, 5)  # precision, height, width
            if len(frame) < 5:
                return None
            return _checked(int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big"))
        length = int.from_bytes(seg[2:4], "big")
        if length < 2:
            return None
        pos += 2 + length
    return None
