"""The header reader of inline images (``ctxengine.imagesize``): the size of real PNG, GIF,
JPEG and WebP files (checked against Pillow's reading of the same bytes), read from their
first bytes, and ``None`` for anything it cannot read."""

from __future__ import annotations

import base64
import io
import textwrap

import pytest
from PIL import Image as PILImage

import ctxengine.imagesize as imagesize
from ctxengine.imagesize import image_size
from image_bytes import gif, jpeg, png, png_bytes, webp

SIZES = [(1, 1), (1920, 1080), (1080, 1920), (1366, 768), (3000, 2001), (16_383, 7)]

MAKERS = {
    "png": png,
    "gif": gif,
    "jpeg": jpeg,
    "jpeg exif": lambda w, h: jpeg(w, h, exif=True),
    "jpeg progressive": lambda w, h: jpeg(w, h, progressive=True),
    "webp lossy": webp,
    "webp lossless": lambda w, h: webp(w, h, lossless=True),
    "webp extended": lambda w, h: webp(w, h, extended=True),
}


def _pillow_size(data: str) -> tuple[int, int]:
    with PILImage.open(io.BytesIO(base64.b64decode(data))) as im:
        return im.size


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_the_size_of_a_real_image_is_read_from_its_header(kind: str, size: tuple[int, int]) -> None:
    if kind.startswith("jpeg") and size == (16_383, 7):
        size = (8_000, 7)  # a smaller JPEG: the test's run time, not the reader's
    data = MAKERS[kind](*size)
    assert _pillow_size(data) == size
    assert image_size(data) == size
    assert image_size(f"data:image/{kind.split()[0]};base64,{data}") == size  # a data URL


def test_a_jpeg_is_read_past_its_exif_without_decoding_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The frame header of a phone's JPEG comes after ~60 KB of EXIF and an ICC profile: the
    reader skips the segments by their lengths and decodes a few characters per segment."""
    data = jpeg(1170, 2532, exif=True)
    raw = base64.b64decode(data)
    assert raw.find(b"\xff\xc0") > 60_000  # the frame header is past the EXIF
    decoded: list[int] = []
    real = imagesize.b64decode

    def counting(chunk: str, validate: bool = False) -> bytes:
        decoded.append(len(chunk))
        return real(chunk, validate=validate)

    monkeypatch.setattr(imagesize, "b64decode", counting)
    assert image_size(data) == (1170, 2532)
    assert sum(decoded) < 200  # characters decoded, of the 100k+ the image holds
    assert len(data) > 80_000


def test_base64_in_lines_is_read() -> None:
    """Base64 wrapped at 76 characters (MIME, ``base64.encodebytes``) reads the same."""
    for data in (png(1280, 800), jpeg(1280, 800, exif=True), webp(1280, 800)):
        wrapped = "\n".join(textwrap.wrap(data, 76))
        assert image_size(wrapped) == (1280, 800)


def _truncated_jpeg() -> str:
    raw = base64.b64decode(jpeg(640, 480, exif=True))
    return base64.b64encode(raw[: raw.find(b"\xff\xc0")]).decode()  # cut before the frame


def _corrupt_jpeg() -> str:
    raw = bytearray(base64.b64decode(jpeg(640, 480)))
    raw[2:4] = b"\x12\x34"  # the first segment is not a marker
    return base64.b64encode(bytes(raw)).decode()


GARBAGE = {
    "empty": "",
    "short": "iVBOR",
    "text": base64.b64encode(b"hello, this is not an image at all").decode(),
    "not base64": "%%%% not base64 at all, ~~~~ \x00\x01 " * 4,
    "pdf": base64.b64encode(b"%PDF-1.4\n" + b"0" * 64).decode(),
    "png cut in its header": png(1920, 1080)[:20],
    "png without IHDR": base64.b64encode(png_bytes(8, 8)[:12] + b"IDAT" + b"\x00" * 16).decode(),
    "png of width 0": base64.b64encode(
        png_bytes(8, 8)[:16] + b"\x00\x00\x00\x00" + png_bytes(8, 8)[20:]
    ).decode(),
    "gif cut": gif(640, 480)[:10],
    "webp of another chunk": base64.b64encode(
        b"RIFF\x00\x00\x00\x00WEBPALPH" + b"\x00" * 20
    ).decode(),
    "jpeg cut before its frame": _truncated_jpeg(),
    "jpeg with a broken segment": _corrupt_jpeg(),
    "jpeg scan before a frame": base64.b64encode(
        b"\xff\xd8\xff\xda\x00\x08" + b"\x00" * 40
    ).decode(),
    "jpeg of zero-length segments": base64.b64encode(
        b"\xff\xd8" + b"\xff\xe0\x00\x00" * 20
    ).decode(),
    "jpeg of endless fill": base64.b64encode(b"\xff\xd8" + b"\xff" * 2_000).decode(),
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_data_that_is_not_a_readable_image_gives_none(name: str) -> None:
    assert image_size(GARBAGE[name]) is None


def test_a_jpeg_of_more_segments_than_the_bound_gives_none() -> None:
    """The walk stops after :data:`~ctxengine.imagesize.MAX_SEGMENTS` segments."""
    comments = b"\xff\xfe\x00\x04ab" * (imagesize.MAX_SEGMENTS + 1)
    frame = b"\xff\xc0\x00\x0b\x08\x01\xe0\x02\x80\x01\x01\x11\x00"  # 640 x 480
    over = base64.b64encode(b"\xff\xd8" + comments + frame).decode()
    under = base64.b64encode(b"\xff\xd8" + comments[:60] + frame).decode()
    assert image_size(under) == (640, 480)
    assert image_size(over) is None
