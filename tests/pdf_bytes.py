"""Real PDF files of a chosen number of pages, as base64 (imported as a plain module by the
tests), written by hand after ISO 32000-1: a catalog, a page tree (7.7.3) and its pages, each
page with an empty content stream, and the cross-reference section that locates them.

- :func:`pdf_plain`: PDF 1.4, every object in the file itself, a cross-reference table (7.5.4).
- :func:`pdf_compressed`: PDF 1.5 as current writers save it (Acrobat, Word, pikepdf/qpdf
  with object streams): the catalog, page tree and pages inside an object stream compressed
  by zlib (``/Type /ObjStm /Filter /FlateDecode``, 7.5.7), located by a cross-reference
  stream (7.5.8); the file's own text holds no ``/Type /Page`` at all.

``tree=True`` splits the pages under intermediate page tree nodes (each with its own
``/Count``), as writers do past a few dozen pages; ``count=False`` leaves ``/Count`` out of
every node (a damaged file: the pages are then found by their objects).
"""

from __future__ import annotations

import base64
import zlib


def _objects(pages: int, tree: bool, count: bool) -> dict[int, bytes]:
    """The objects of a document of ``pages`` pages, by number: 1 the catalog, 2 the root
    page tree node, then (``tree``) nodes of up to 10 pages each, then the pages, then one
    shared empty content stream."""
    objs: dict[int, bytes] = {1: b"<< /Type /Catalog /Pages 2 0 R >>"}
    groups = [list(range(i, min(i + 10, pages))) for i in range(0, pages, 10)] if tree else []
    first_page = 3 + len(groups)
    content = first_page + pages
    page_ids = [first_page + i for i in range(pages)]

    def node(kids: list[int], n: int, parent: int | None) -> bytes:
        refs = b" ".join(b"%d 0 R" % k for k in kids)
        up = b" /Parent %d 0 R" % parent if parent else b""
        total = b" /Count %d" % n if count else b""
        return b"<< /Type /Pages /Kids [%s]%s%s >>" % (refs, total, up)

    if tree:
        objs[2] = node([3 + g for g in range(len(groups))], pages, None)
        for g, members in enumerate(groups):
            objs[3 + g] = node([page_ids[i] for i in members], len(members), 2)
    else:
        objs[2] = node(page_ids, pages, None)
    for i, pid in enumerate(page_ids):
        parent = 3 + i // 10 if tree else 2
        objs[pid] = (
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R "
            b"/Resources << >> >>" % (parent, content)
        )
    objs[content] = b"<< /Length 0 >>\nstream\n\nendstream"
    return objs


def pdf_plain_bytes(pages: int, *, tree: bool = False, count: bool = True) -> bytes:
    """A PDF 1.4 file of ``pages`` empty A4 pages, every object in the file itself."""
    objs = _objects(pages, tree, count)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for num in sorted(objs):
        offsets[num] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (num, objs[num])
    size = max(objs) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for num in range(1, size):
        out += b"%010d 00000 n \n" % offsets[num]
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def pdf_compressed_bytes(pages: int, *, tree: bool = False, count: bool = True) -> bytes:
    """A PDF 1.5 file of ``pages`` empty A4 pages whose catalog, page tree and pages are in
    one object stream compressed by zlib, located by a cross-reference stream."""
    objs = _objects(pages, tree, count)
    content = max(objs)
    packed = [num for num in sorted(objs) if num != content]  # a stream cannot be packed
    header, body = bytearray(), bytearray()
    for num in packed:
        header += b"%d %d " % (num, len(body))
        body += objs[num] + b"\n"
    data = zlib.compress(bytes(header) + bytes(body))
    stm, xref_num = content + 1, content + 2
    out = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    offsets = {content: len(out)}
    out += b"%d 0 obj\n%s\nendobj\n" % (content, objs[content])
    offsets[stm] = len(out)
    out += (
        b"%d 0 obj\n<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\n"
        b"stream\n" % (stm, len(packed), len(header), len(data))
    )
    out += data + b"\nendstream\nendobj\n"
    offsets[xref_num] = len(out)
    # the cross-reference stream: type 1 (offset) or 2 (object stream, index) per object
    rows = bytearray(b"\x00\x00\x00\x00\x00\xff\xff")  # object 0, free
    for num in range(1, xref_num + 1):
        if num in packed:
            rows += bytes([2]) + stm.to_bytes(4, "big") + packed.index(num).to_bytes(2, "big")
        else:
            rows += bytes([1]) + offsets[num].to_bytes(4, "big") + b"\x00\x00"
    out += b"%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n" % (
        xref_num,
        xref_num + 1,
        len(rows),
    )
    out += rows + b"\nendstream\nendobj\n"
    out += b"startxref\n%d\n%%%%EOF\n" % offsets[xref_num]
    return bytes(out)


def pdf_plain(pages: int, *, tree: bool = False, count: bool = True) -> str:
    """:func:`pdf_plain_bytes` as base64."""
    return base64.b64encode(pdf_plain_bytes(pages, tree=tree, count=count)).decode()


def pdf_compressed(pages: int, *, tree: bool = False, count: bool = True) -> str:
    """:func:`pdf_compressed_bytes` as base64."""
    return base64.b64encode(pdf_compressed_bytes(pages, tree=tree, count=count)).decode()
