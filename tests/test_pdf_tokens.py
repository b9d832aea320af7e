"""Inline PDFs counted by their pages, per provider (``ctxengine.pdfpages``,
``ctxengine.tokens.pdf_tokens``).

A PDF counted a flat 765 tokens whatever its length: a 40-page document, which a provider
reads as 40 pages of text and 40 page images (tens of thousands of tokens), passed a
32,000-token budget, and the request was refused as too long. The documents here are real PDF
files written by ``pdf_bytes`` (plain objects, and a PDF 1.5 object stream compressed by zlib);
the expected counts are the providers' documented figures, worked out here.
"""

from __future__ import annotations

import base64
import os
import tracemalloc
import zlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from ctxengine import Budget, ContextEngine, count_messages, pdfpages
from ctxengine.inject.payload import payload_tokens
from ctxengine.integrations.langchain import trim_messages
from ctxengine.pdfpages import BYTES_PER_PAGE, MAX_PAGES, pdf_pages
from ctxengine.tokens import (
    IMAGE_TOKENS,
    count_tokens,
    media_tokens,
    pdf_page_tokens,
    pdf_tokens,
)
from ctxengine.transcript import Image, Message, Text, load
from pdf_bytes import pdf_compressed, pdf_compressed_bytes, pdf_plain, pdf_plain_bytes

PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini"]
_PDF = "application/pdf"

# -- the page count ---------------------------------------------------------------------------


@pytest.mark.parametrize("pages", [1, 7, 40, 123])
@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("write", [pdf_plain, pdf_compressed], ids=["plain", "compressed"])
def test_the_pages_are_read_from_the_page_tree(write: Any, tree: bool, pages: int) -> None:
    data = write(pages, tree=tree)
    assert pdf_pages(data) == pages
    assert pdf_pages(f"data:application/pdf;base64,{data}") == pages


@pytest.mark.parametrize("write", [pdf_plain, pdf_compressed], ids=["plain", "compressed"])
def test_without_a_count_the_page_objects_are_counted(write: Any) -> None:
    assert pdf_pages(write(13, tree=True, count=False)) == 13


def test_a_compressed_document_holds_no_page_in_its_own_text() -> None:
    """The object stream is what is read: the file's text says nothing of its pages."""
    raw = pdf_compressed_bytes(9)
    assert b"/Page" not in raw and b"/Count" not in raw
    assert pdf_pages(base64.b64encode(raw).decode()) == 9


def test_an_incremental_update_counts_its_largest_page_tree() -> None:
    """A revision appended to a file (ISO 32000-1, 7.5.6) rewrites the page tree's root with
    the pages it adds; the older root stays in the file."""
    raw = pdf_plain_bytes(3)
    update = b"2 0 obj\n<< /Type /Pages /Kids [4 0 R 5 0 R 6 0 R 20 0 R] /Count 4 >>\nendobj\n"
    update += b"20 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] >>\nendobj\n"
    assert pdf_pages(base64.b64encode(raw + update).decode()) == 4


@pytest.mark.parametrize(
    "data",
    [
        "",
        "not base64 at all: %%%",
        base64.b64encode(b"%PDF-1.7\n").decode(),
        base64.b64encode(
            b"%PDF-1.5\n1 0 obj << /Type /ObjStm /Filter /FlateDecode /First 4 >>"
            b"\nstream\nnot zlib\nendstream"
        ).decode(),
        base64.b64encode(b"%PDF-1.4\n1 0 obj << /Type /Pages /Count " + b"9" * 5000).decode(),
    ],
    ids=["empty", "not-base64", "header-only", "bad-zlib", "huge-count"],
)
def test_a_malformed_document_counts_at_least_one_page_and_never_raises(data: str) -> None:
    assert 1 <= pdf_pages(data) <= MAX_PAGES


def test_a_document_whose_pages_cannot_be_read_is_counted_by_its_size() -> None:
    noise = os.urandom(20 * BYTES_PER_PAGE)
    assert pdf_pages(base64.b64encode(noise).decode()) == 20
    huge = os.urandom((MAX_PAGES + 5) * BYTES_PER_PAGE)
    assert pdf_pages(base64.b64encode(huge).decode()) == MAX_PAGES


def test_a_truncated_document_still_counts_the_pages_it_shows() -> None:
    """An upload cut short: the page tree read before the cut still counts; cut before it,
    the document is counted by its size, at least one page."""
    data = pdf_plain(40)  # the page tree is its second object
    assert pdf_pages(data[: len(data) * 3 // 4 - 1]) == 40  # cut inside a base64 quantum too
    assert pdf_pages(data[:40]) == 1  # the header alone


# -- tokens per page, by the providers' documentation -----------------------------------------

#: Anthropic: 3,000 tokens of text a page (the top of "1,500-3,000"), and the page image at the
#: long edge of the model's tier: 1,600 tokens before Claude Opus 4.7, 5,000 from it on (and for
#: a name that is not a Claude model's). OpenAI: the same text, and an A4 page by the tile rule
#: at high detail (2048 box, then 768 px on the short side: 768 x 1086, 2 x 3 tiles).
#: Gemini: 258 a page up to 2.x, 560 (medium resolution) from Gemini 3 on.
A4_TILES = 85 + 170 * 2 * 3


@pytest.mark.parametrize(
    ("provider", "model", "per_page"),
    [
        ("anthropic", "claude-sonnet-4-5", 3000 + 1600),
        ("anthropic", "claude-opus-4-7", 3000 + 5000),
        ("anthropic", "gpt-4o", 3000 + 5000),
        ("openai", "gpt-4o", 3000 + A4_TILES),
        ("openai-responses", "gpt-4.1", 3000 + A4_TILES),
        ("openai", "claude-sonnet-4-5", 3000 + 1600),  # billed by Claude: the larger
        ("gemini", "gemini-2.5-flash", 258),
        ("gemini", "gemini-3-pro-preview", 560),
        ("gemini", "gpt-4o", 560),
        (None, None, 3000 + 5000),
    ],
)
def test_a_page_costs_the_documented_tokens(
    provider: str | None, model: str | None, per_page: int
) -> None:
    assert pdf_page_tokens(provider, model) == per_page
    assert pdf_tokens(pdf_plain(40), provider, model) == 40 * per_page


def test_the_count_without_a_provider_is_the_largest() -> None:
    for model in ("gpt-4o", "claude-sonnet-4-5", "gemini-2.5-flash", None):
        each = [pdf_page_tokens(p, model) for p in PROVIDERS]
        assert pdf_page_tokens(None, model) == max(each)
    data = pdf_compressed(5)
    assert media_tokens("application/pdf", data) == pdf_tokens(data) == 5 * (3000 + 5000)


def test_a_pdf_by_url_keeps_the_flat_count() -> None:
    """Its bytes are not known here, so neither are its pages."""
    assert media_tokens("application/pdf", None) == IMAGE_TOKENS


# -- renders: the plan, the payload and the budget agree --------------------------------------


async def _render(provider: str, pdf: str | None, budget: int, model: str = "gpt-4o") -> Any:
    engine = ContextEngine(model, Budget(total=budget))
    async with engine.session("pdf") as s:
        media = (Image("application/pdf", data=pdf, name="report.pdf"),) if pdf else ()
        s.extend([Message("user", (Text("Summarize the report."), *media))])
        s.extend([Message.assistant("It covers Q3.")])
        await s.user_message("And the risks?")
        return await s.render(provider)


@pytest.mark.anyio
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_forty_page_pdf_is_not_sent_in_a_budget_it_does_not_fit(provider: str) -> None:
    """Counted 765, the 40-page report was sent within 32,000 tokens; by its pages it needs
    40 x 4,105 (OpenAI), 40 x 8,000 (Anthropic, a model of the larger image tier) or
    40 x 560 (Gemini 3's default), and a render sends it only where that fits."""
    data = pdf_plain(40)
    out = await _render(provider, data, 32_000)
    sent = data in str(out.payload)
    assert sent == (40 * pdf_page_tokens(provider, "gpt-4o") < 32_000)
    assert out.tokens <= 32_000 and out.report.fits
    assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o")


@pytest.mark.anyio
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("model", ["gpt-4o", "claude-sonnet-4-5", "gemini-2.5-flash"])
async def test_the_plan_and_the_payload_count_a_pdf_by_its_pages(provider: str, model: str) -> None:
    data = pdf_compressed(3)
    with_pdf = await _render(provider, data, 100_000, model)
    without = await _render(provider, None, 100_000, model)
    assert data in str(with_pdf.payload)
    assert with_pdf.tokens - without.tokens == 3 * pdf_page_tokens(provider, model)
    assert with_pdf.tokens == payload_tokens(with_pdf.payload, provider, model)
    assert abs(with_pdf.report.tokens_estimated - with_pdf.tokens) <= 20  # the plan agrees


@pytest.mark.anyio
async def test_one_session_rendered_for_each_provider_counts_the_pdf_for_each() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=60_000))
    async with engine.session("turns") as s:
        pdf = Image("application/pdf", data=pdf_plain(4))
        s.extend([Message("user", (Text("Read this."), pdf)), Message.assistant("Read.")])
        await s.user_message("What does page 2 say?")
        for provider in ("openai", "anthropic", "gemini", "openai-responses", "openai"):
            out = await s.render(provider)
            assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o")
            assert abs(out.report.tokens_estimated - out.tokens) <= 20, provider
            assert out.tokens > 4 * pdf_page_tokens(provider, "gpt-4o"), provider


# -- the chat counters ------------------------------------------------------------------------


def _chat(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "read"}, *parts]}]


def test_count_messages_counts_a_file_part_by_its_pages() -> None:
    url = "data:application/pdf;base64," + pdf_plain(3)
    file = {"type": "file", "file": {"file_data": url, "filename": "a.pdf"}}
    plain = count_messages(_chat(), model="gpt-4o")
    assert count_messages(_chat(file), model="gpt-4o") - plain == 3 * (3000 + A4_TILES)
    by_id = {"type": "file", "file": {"file_id": "file-1"}}  # its pages are not known
    assert count_messages(_chat(by_id), model="gpt-4o") - plain == IMAGE_TOKENS


@pytest.mark.anyio
async def test_count_messages_reads_bare_base64_file_data_as_the_engine_does() -> None:
    """``file_data`` as bare base64 (not a ``data:`` URL) is a PDF to the importer
    (``file_from_data``: the one document type the providers take), whatever its first bytes:
    here a PDF whose header comes after a line break, as PDF readers take it (ISO 32000-1,
    7.5.2: the header may follow other bytes), whose base64 does not open with ``JVBER``. The
    engine counts its pages: ``count_messages`` counted 765."""
    data = base64.b64encode(b"\n" + pdf_plain_bytes(12)).decode()
    part = {"type": "file", "file": {"file_data": data, "filename": "scan.pdf"}}
    messages = _chat(part)
    transcript = load(messages, "openai")
    engine = ContextEngine("gpt-4o", Budget(total=120_000))
    async with engine.session("bare") as s:
        s.extend(transcript.messages)
        await s.user_message("and?")
        rendered = (await s.render("openai")).tokens
    plain = count_messages(_chat(), model="gpt-4o")
    assert count_messages(messages, model="gpt-4o") - plain == 12 * pdf_page_tokens("openai")
    assert 0 < rendered - count_messages(messages, model="gpt-4o") < 20  # "and?" added


def test_the_langchain_trim_counts_a_pdf_by_its_pages() -> None:
    """LangChain's standard file block, v1 (``base64``) and v0 (``source_type``), OpenAI's
    ``file`` part and Anthropic's ``document``: a 40-page PDF does not pass a 32,000-token
    trim, as the engine would not send it."""
    data = pdf_plain(40)
    blocks = [
        {"type": "file", "base64": data, "mime_type": "application/pdf"},
        {"type": "file", "source_type": "base64", "data": data, "mime_type": "application/pdf"},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{data}"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": data},
        },
    ]
    for block in blocks:
        messages = [
            HumanMessage(content=[{"type": "text", "text": "summarize"}, block]),
            AIMessage("ok"),
            HumanMessage("and?"),
        ]
        kept = trim_messages(messages, max_tokens=32_000, token_counter="gpt-4o", strategy="last")
        assert kept == messages[1:], block["type"]
        kept = trim_messages(messages, max_tokens=200_000, token_counter="gpt-4o", strategy="last")
        assert kept == messages, block["type"]


# -- the read: once per document --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_pdf_is_read_once_by_the_plan_and_the_payload(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan reads the image's base64 data, the OpenAI exporters send it in a ``data:``
    URL: both are the same document, read once (a 20 MB PDF takes half a second a read)."""
    reads: list[int] = []
    count = pdfpages._count

    def counted(raw: bytes) -> int | None:
        reads.append(len(raw))
        return count(raw)

    monkeypatch.setattr(pdfpages, "_count", counted)
    pdfpages.clear_pages()
    data = pdf_plain(5, tree=True)
    for _ in range(2):
        out = await _render(provider, data, 100_000)
        assert data in str(out.payload)
    assert len(reads) == 1
    assert pdf_pages("data:application/pdf;base64," + data) == 5
    assert len(reads) == 1


def test_a_data_url_inside_a_data_url_is_read_as_it_is() -> None:
    """Only the outer ``data:`` prefix is taken off: what follows is read as the document
    (here not a PDF: counted by its size, its base64 letters ``data`` decoded), however many
    prefixes it repeats."""
    size = len(base64.b64decode("data" * 4999))
    assert pdf_pages("data:," * 5000) == -(-size // BYTES_PER_PAGE) > 1
    assert pdf_pages("data:application/pdf;base64,data:,JVBER") == 1


def _object_stream(objects: list[bytes]) -> bytes:
    """A PDF 1.5 file whose objects (numbered from 1) are all in one zlib object stream."""
    header, body = bytearray(), bytearray()
    for number, obj in enumerate(objects, 1):
        header += b"%d %d " % (number, len(body))
        body += obj + b"\n"
    data = zlib.compress(bytes(header) + bytes(body))
    return (
        (
            b"%%PDF-1.5\n%d 0 obj\n<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode >>\n"
            b"stream\n" % (len(objects) + 1, len(objects), len(header))
        )
        + data
        + b"\nendstream\nendobj\n%%%%EOF\n"
    )


def test_the_objects_read_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 KB of zlib inflates to millions of one-byte objects (the 64 MiB of MAX_INFLATED):
    each is read (a few regular expressions), so such a file took 12 s and 1.9 GB. At most
    MAX_OBJECTS objects are read (here lowered to 1,000), and a document read in part counts
    the pages it showed, at least its size's."""
    reads: list[int] = []
    read = pdfpages._Tally.read

    def counted(self: Any, buf: bytes, number: int, start: int, end: int) -> Any:
        reads.append(number)
        return read(self, buf, number, start, end)

    monkeypatch.setattr(pdfpages._Tally, "read", counted)
    monkeypatch.setattr(pdfpages, "MAX_OBJECTS", 1_000, raising=False)
    raw = _object_stream([b"<< /Type /Page /MediaBox [0 0 595 842] >>"] * 5_000)
    pages = pdf_pages(base64.b64encode(raw).decode())
    assert len(reads) <= 1_000
    assert 990 <= pages >= -(-len(raw) // BYTES_PER_PAGE)


def test_the_objects_are_read_one_at_a_time() -> None:
    """A file of 100,000 object headers (800 KB) is read without holding them all: the
    memory the read takes stays within a few times the document's size."""
    raw = b"%PDF-1.4\n" + b"1 0 obj " * 100_000
    data = base64.b64encode(raw).decode()
    tracemalloc.start()
    try:
        pdf_pages(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(raw)


def test_count_messages_counts_every_shape_of_a_pdf_part() -> None:
    """The PDF parts the LangChain trim counter and the importers read (Anthropic's
    ``document``, Responses' ``input_file``, LangChain's standard ``file`` block) count by
    their pages in ``count_messages`` too: they counted 0 (a part with no text) or 765."""
    data = pdf_plain(40)
    url = f"data:application/pdf;base64,{data}"
    parts = [
        {"type": "document", "source": {"type": "base64", "media_type": _PDF, "data": data}},
        {"type": "input_file", "file_data": url, "filename": "a.pdf"},
        {"type": "file", "base64": data, "mime_type": _PDF},
        {"type": "file", "source_type": "base64", "data": data, "mime_type": _PDF},
    ]
    plain = count_messages(_chat(), model="gpt-4o")
    for part in parts:
        added = count_messages(_chat(part), model="gpt-4o") - plain
        assert added == 40 * pdf_page_tokens("openai", "gpt-4o"), part["type"]


def test_count_messages_counts_a_text_document_by_its_text() -> None:
    """An Anthropic ``document`` whose source is text is read as its text by the importer
    (and by the LangChain trim counter): ``count_messages`` counts that text, not 0."""
    text = "The quarterly figures, region by region. " * 500
    part = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": text},
        "title": "Q3",
    }
    read = load([{"role": "user", "content": [part]}], "anthropic").messages[0].blocks[0]
    assert isinstance(read, Text)
    plain = count_messages(_chat(), model="gpt-4o")
    added = count_messages(_chat(part), model="gpt-4o") - plain
    assert added == count_tokens(read.text, model="gpt-4o")


def test_a_count_below_the_page_objects_does_not_hide_pages() -> None:
    """A page tree whose ``/Count`` says fewer pages than the document's page objects (a
    damaged or hand-edited file): a reader that walks ``/Kids`` shows, and bills, every page,
    so the larger of both is taken."""
    raw = pdf_plain_bytes(12).replace(b"/Count 12", b"/Count  1")
    assert pdf_pages(base64.b64encode(raw).decode()) == 12
