"""Real image files of a chosen size, as base64 (imported as a plain module by the tests).

PNG and GIF are written by hand (the smallest valid file of the size: a 1-bit grey PNG, a
one-colour GIF), JPEG and WebP by Pillow (a test dependency only: ctxengine reads their headers
itself). Pillow opens each as an image of that size (tests/test_imagesize.py checks it).
"""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image as PILImage


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bytes(width: int, height: int) -> bytes:
    """A black 1-bit greyscale PNG of ``width`` x ``height`` (PNG spec: IHDR, IDAT of rows each
    led by filter type 0, IEND)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    row = b"\x00" + b"\x00" * ((width + 7) // 8)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(row * height, 9))
        + _chunk(b"IEND", b"")
    )


def png(width: int, height: int) -> str:
    """:func:`png_bytes` as base64."""
    return base64.b64encode(png_bytes(width, height)).decode()


def gif(width: int, height: int) -> str:
    """A one-colour GIF89a of ``width`` x ``height`` as base64: header, logical screen
    descriptor with a 2-colour global table, one image descriptor and a 2-bit LZW stream
    of clear code, one pixel (a GIF may hold fewer pixels than its frame; decoders fill)."""
    screen = struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    image = b"," + struct.pack("<HHHHB", 0, 0, width, height, 0) + b"\x02\x02\x44\x01\x00"
    return base64.b64encode(b"GIF89a" + screen + image + b";").decode()


def _pillow(width: int, height: int, fmt: str, **options: object) -> str:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), (40, 90, 200)).save(out, fmt, **options)
    return base64.b64encode(out.getvalue()).decode()


def jpeg(width: int, height: int, *, exif: bool = False, progressive: bool = False) -> str:
    """A JPEG of ``width`` x ``height`` by Pillow; with ``exif``, an APP1 EXIF segment of
    about 60 KB and an ICC profile come before its frame header (as a camera's or a phone's
    screenshot's), so the reader has segments to skip."""
    options: dict[str, object] = {"quality": 70, "progressive": progressive}
    if exif:
        data = PILImage.Exif()
        data[0x010E] = "x" * 60_000  # ImageDescription
        options["exif"] = data.tobytes()
        options["icc_profile"] = b"\x00" * 3_000
    return _pillow(width, height, "JPEG", **options)


def webp(width: int, height: int, *, lossless: bool = False, extended: bool = False) -> str:
    """A WebP of ``width`` x ``height`` by Pillow: lossy (``VP8 ``), ``lossless`` (``VP8L``),
    or ``extended`` (a ``VP8X`` header, which an EXIF chunk brings)."""
    options: dict[str, object] = {"lossless": lossless}
    if extended:
        data = PILImage.Exif()
        data[0x010E] = "screenshot"
        options["exif"] = data.tobytes()
    return _pillow(width, height, "WEBP", **options)
