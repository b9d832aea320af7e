"""A request's PDFs count with its images against the provider's media limits.

Anthropic counts the pages of a request's documents and its images against one limit ("Too
much media: 0 document pages + 102 images > 100", anthropics/claude-code issue 19822; PDF
support, "Maximum pages per request": 100 below a 1M-token window, "Both limits are on the
entire request payload, including any other content sent alongside PDFs"), and every provider
holds the request's size, the PDF's base64 included (Anthropic's 32 MB, OpenAI's 50 MB, Gemini's
20 MB). PDFs were left out of both counts: three 40-page reports, or a 25 MB PDF beside
screenshots, went out and were refused on every turn after. The PDFs are real files of the
chosen pages (``pdf_bytes``).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.inject.images import MANY_IMAGES, MEDIA_BYTES, cut_step, pdf_placeholder
from ctxengine.inject.payload import payload_tokens
from ctxengine.tokens import pdf_page_tokens
from ctxengine.transcript import Image, Message, Text, ToolCall, ToolResult, Transcript, render
from ctxengine.transcript.changes import Change
from ctxengine.transcript.providers import IMAGE_LIMITS
from image_bytes import png
from pdf_bytes import pdf_plain, pdf_plain_bytes
from screenshots import data, image_parts, screenshots
from transcript.helpers import assert_sdk_valid

PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini"]


def report(i: int, pages: int, pdf: str | None = None) -> Message:
    """A user turn sending report ``i``, a PDF of ``pages`` pages."""
    doc = Image("application/pdf", pdf or pdf_plain(pages), name=f"report{i}.pdf")
    return Message("user", (Text(f"Read report {i}."), doc))


def reports(*pages: int) -> list[Message]:
    out: list[Message] = []
    for i, n in enumerate(pages):
        out += [report(i, n), Message.assistant(f"Read report {i}.")]
    return out


def pdfs_sent(payload: dict[str, Any], n: int) -> list[int]:
    """The reports (of ``0 .. n-1``) the payload carries: not as their placeholder."""
    text = json.dumps(payload)
    return [i for i in range(n) if f"'report{i}.pdf' of " not in text]


def media_sent(payload: dict[str, Any], pages: dict[int, int]) -> int:
    """Images and document pages the payload carries (``pages``: each report's pages)."""
    return image_parts(payload) + sum(pages[i] for i in pdfs_sent(payload, len(pages)))


def test_a_pdf_placeholder_says_its_pages() -> None:
    doc = Image("application/pdf", pdf_plain(40), name="q3.pdf")
    assert (
        pdf_placeholder(doc, 40).text == "[application/pdf attachment 'q3.pdf' of 40 pages omitted]"
    )
    assert pdf_placeholder(Image("application/pdf", "JVBE"), 1).text == (
        "[application/pdf attachment of 1 page omitted]"
    )


def test_three_forty_page_pdfs_keep_the_newest_within_anthropics_hundred() -> None:
    t = Transcript((*reports(40, 40, 40), Message.user("Compare them.")))
    out = render(t, "anthropic")
    assert_sdk_valid(out.payload, "anthropic")
    assert pdfs_sent(out.payload, 3) == [1, 2]  # the oldest goes, as a whole
    assert media_sent(out.payload, {0: 40, 1: 40, 2: 40}) <= IMAGE_LIMITS["anthropic"]
    text = json.dumps(out.payload)
    assert "[application/pdf attachment 'report0.pdf' of 40 pages omitted]" in text
    changes = out.report.of("image_omitted")
    assert [c.index for c in changes] == [0]
    assert "PDF 1 of 1" in changes[0].detail and "40 pages" in changes[0].detail
    assert "100 images and document pages" in changes[0].detail


@pytest.mark.parametrize("pdf_first", [True, False], ids=["pdf-oldest", "pdf-newest"])
def test_images_and_a_pdf_together_stay_within_the_limit(pdf_first: bool) -> None:
    """70 screenshots and a 40-page report are 110 media: the oldest go by steps of ten
    slots; a PDF older than the images goes whole, images older than it go by the step."""
    shots = screenshots(70, "tool")
    doc = [report(0, 40), Message.assistant("Read.")]
    t = Transcript((Message.user("Go."), *(doc + shots if pdf_first else shots + doc)))
    out = render(t, "anthropic")
    assert_sdk_valid(out.payload, "anthropic")
    assert media_sent(out.payload, {0: 40}) <= 100
    text = json.dumps(out.payload)
    if pdf_first:
        assert pdfs_sent(out.payload, 1) == [] and image_parts(out.payload) == 70
    else:
        assert pdfs_sent(out.payload, 1) == [0]
        assert [i for i in range(70) if data(i) in text] == list(range(10, 70))


@pytest.mark.anyio
async def test_a_session_does_not_charge_the_pdf_it_cuts() -> None:
    """Three 34-page reports are 102 pages: a session's render for Anthropic sends the newest
    two and counts the payload as sent, the cut report as its placeholder (the plan, made
    before the render's provider limits, still counts it, as it does a cut image)."""
    engine = ContextEngine("gpt-4.1", Budget(total=1_000_000))
    async with engine.session("reports") as s:
        s.extend(reports(34, 34, 34))
        await s.user_message("Compare them.")
        out = await s.render("anthropic")
    assert pdfs_sent(out.payload, 3) == [1, 2]
    page = pdf_page_tokens("anthropic", "gpt-4.1")
    assert out.tokens == payload_tokens(out.payload, "anthropic", "gpt-4.1")
    assert 2 * 34 * page < out.tokens < 2 * 34 * page + 1_000
    assert out.report.tokens_estimated >= out.tokens


@pytest.mark.anyio
async def test_a_screenshot_session_after_a_report_stays_within_the_limit_turn_by_turn() -> None:
    """A 30-page report, then screenshots turn by turn: each render for Anthropic sends at
    most 100 images and pages, the report goes whole once they pass it, and stays cut."""
    engine = ContextEngine("gpt-4.1", Budget(total=1_000_000))
    async with engine.session("browse") as s:
        s.extend([Message.user("Read it, then check the pages."), *reports(30)])
        s.extend(screenshots(60, "tool"))
        cut_at = None
        for step in range(60, 90):
            s.extend(screenshots(1, "tool", start=step))
            out = await s.render("anthropic")
            assert media_sent(out.payload, {0: 30}) <= 100, step
            assert out.tokens == payload_tokens(out.payload, "anthropic", "gpt-4.1")
            if cut_at is None and not pdfs_sent(out.payload, 1):
                cut_at = step
            if cut_at is not None:
                assert not pdfs_sent(out.payload, 1), step
    assert cut_at == 70  # 30 pages and 71 screenshots: the report, the oldest, goes first


def _large_pdf(size: int) -> str:
    """Base64 of a 2-page PDF of ``size`` characters: the file, then bytes after its end."""
    head = pdf_plain_bytes(2)
    head += b" " * (-len(head) % 3)
    text = base64.b64encode(head).decode()
    return text + "A" * (size - len(text))


def _inline_data(value: Any) -> int:
    """The characters of inline media data in a payload, in every provider's shape."""
    if isinstance(value, list):
        return sum(_inline_data(v) for v in value)
    if not isinstance(value, dict):
        return 0
    total = 0
    for v in value.values():
        if isinstance(v, str) and len(v) > 100_000:
            total += len(v.partition(",")[2] if v.startswith("data:") else v)
        else:
            total += _inline_data(v)
    return total


def _megabyte_shots(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        image = Image("image/png", data(i) + "A" * 1_000_000, name=f"shot{i}.png")
        out += [Message.user(f"Step {i}."), Message("user", (image,)), Message.assistant("Ok.")]
    return out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_large_pdf_and_screenshots_stay_within_the_request_size(provider: str) -> None:
    """A 25 MB PDF and 30 screenshots of 1 MB are 55 MB of base64: past every provider's
    request size. The PDF counts toward it like an image."""
    pdf = _large_pdf(25_000_000)
    t = Transcript((report(0, 2, pdf), Message.assistant("Read."), *_megabyte_shots(30)))
    out = render(t, provider)
    assert _inline_data(out.payload) <= MEDIA_BYTES[provider]
    assert pdf not in json.dumps(out.payload)  # the oldest, and the largest, goes first
    assert "'report0.pdf' of 2 pages omitted" in json.dumps(out.payload)
    assert any("characters" in c.detail for c in out.report.of("image_omitted"))


def test_a_pdf_over_the_limit_alone_is_sent_as_its_placeholder_naming_both() -> None:
    t = Transcript((*reports(150), *screenshots(5, "tool"), Message.user("Summarize.")))
    out = render(t, "anthropic")
    assert pdfs_sent(out.payload, 1) == [] and image_parts(out.payload) == 5
    (change,) = out.report.of("image_omitted")
    assert "150 pages" in change.detail and "at most 100" in change.detail


def test_a_pdf_larger_than_the_request_size_alone_names_its_size_and_the_limit() -> None:
    pdf = _large_pdf(40_000_000)
    t = Transcript((report(0, 2, pdf), Message.assistant("Read."), Message.user("And?")))
    out = render(t, "anthropic")
    assert pdf not in json.dumps(out.payload)
    (change,) = out.report.of("image_omitted")
    assert f"{40_000_000:,}" in change.detail and f"{MEDIA_BYTES['anthropic']:,}" in change.detail


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "gemini"])
def test_pages_do_not_count_where_the_provider_documents_no_page_limit(provider: str) -> None:
    """OpenAI and Gemini document no per-request page limit shared with images: three 40-page
    reports and 70 screenshots are all sent (well within their request sizes)."""
    t = Transcript((*reports(40, 40, 40), *screenshots(70, "user"), Message.user("Go.")))
    out = render(t, provider)
    assert pdfs_sent(out.payload, 3) == [0, 1, 2] and image_parts(out.payload) == 70
    assert not out.report.of("image_omitted")


def test_a_pdf_by_url_takes_a_slot_of_anthropics_count() -> None:
    """Anthropic fetches a PDF given by URL and counts its pages with the images, one at least:
    100 screenshots beside one are "1 document pages + 100 images > 100", refused on every turn
    after. The PDF weighs the page it has at least; cut, it becomes the placeholder naming its
    URL (its pages are not known)."""
    url = "https://example.com/q3.pdf"
    doc = Image("application/pdf", url=url, name="q3.pdf")
    shots = screenshots(100, "tool")
    t = Transcript((Message("user", (Text("Read this."), doc)), Message.assistant("Read."), *shots))
    out = render(t, "anthropic")
    assert_sdk_valid(out.payload, "anthropic")
    documents = json.dumps(out.payload).count('"type": "document"')
    assert image_parts(out.payload) + documents <= IMAGE_LIMITS["anthropic"]
    assert f"[application/pdf attachment 'q3.pdf' {url} omitted]" in json.dumps(out.payload)
    changes = out.report.of("image_omitted")
    assert len(changes) == 101 - image_parts(out.payload) - documents
    assert "by URL" in changes[0].detail and "100 images and document pages" in changes[0].detail


def _steps(changes: tuple[Change, ...]) -> set[int]:
    """The steps the changes say their cut goes by ("N more at a time")."""
    return {int(m.group(1)) for c in changes if (m := re.search(r"(\d+) more at a time", c.detail))}


def test_each_cut_beside_a_pdf_names_the_step_it_goes_by() -> None:
    """Each change says the step its own limit cuts by: Anthropic's many-image rule keeps 20
    images, 2 at a time (as a render without the PDF says), and the request size goes by a
    tenth of the parts it keeps; the changes beside a PDF said the count's step, a tenth of
    100, for every reason."""
    pre = (report(0, 2), Message.assistant("Read."))
    large: list[Message] = []
    for i in range(25):  # computer-use screenshots larger than 2000 px
        call = ToolCall(f"call{i}", "computer", {"action": "screenshot"})
        image = Image("image/png", png(2560, 1440 + i), name=f"shot{i}.png")
        large += [
            Message("assistant", (call,)),
            Message("tool", (ToolResult(f"call{i}", (image,)),)),
        ]
    plain = render(Transcript((Message.user("Go."), *large)), "anthropic")
    out = render(Transcript((*pre, *large)), "anthropic")
    assert (
        _steps(out.report.of("image_omitted"))
        == _steps(plain.report.of("image_omitted"))
        == {cut_step(MANY_IMAGES)}
    )
    out = render(Transcript((*pre, *_megabyte_shots(40))), "anthropic")
    kept = image_parts(out.payload) + len(pdfs_sent(out.payload, 1))
    assert out.report.of("image_omitted")
    assert _steps(out.report.of("image_omitted")) == {cut_step(kept)}


async def _cold(messages: list[Message], provider: str, max_images: int | None) -> Any:
    """A render of ``messages`` by a new engine's new session (nothing of earlier renders)."""
    engine = ContextEngine("gpt-4.1", Budget(total=1_000_000))
    async with engine.session("cold") as s:
        s.extend(messages)
        return await s.render(provider, max_images=max_images)


@pytest.mark.anyio
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("max_images", [None, 12])
async def test_turn_by_turn_renders_with_pdfs_are_those_of_a_new_session(
    provider: str, max_images: int | None
) -> None:
    """A session holding PDFs and growing by screenshots, another report and a PDF by URL,
    rendered turn after turn (the sums per message kept between renders tell most of them
    that nothing is cut): each payload is the one a new session renders of the same
    messages, before and after its media pass a limit (Anthropic's 100 images and pages;
    ``max_images`` for every provider)."""
    by_url = Image("application/pdf", url="https://example.com/spec.pdf", name="spec.pdf")
    steps: list[list[Message]] = [
        [Message.user("Read them, then check the pages."), *reports(6, 2)],
        *[screenshots(1, "tool", start=k) for k in range(4)],
        [Message("user", (Text("And this one."), by_url)), Message.assistant("Read it.")],
        *[screenshots(1, "tool", start=k) for k in range(4, 8)],
        [report(2, 40), Message.assistant("Read report 2.")],
        *[screenshots(25, "tool", start=8 + 25 * k) for k in range(3)],
    ]
    engine = ContextEngine("gpt-4.1", Budget(total=1_000_000))
    cut = False
    async with engine.session("warm") as s:
        sent: list[Message] = []
        for step in steps:
            s.extend(step)
            sent += step
            out = await s.render(provider, max_images=max_images)
            cold = await _cold(sent, provider, max_images)
            assert out.payload == cold.payload, len(sent)
            assert out.tokens == cold.tokens
            cut = cut or "omitted]" in json.dumps(out.payload)
    # the last steps pass the limit (without max_images, only Anthropic's is that low)
    assert cut or (max_images is None and provider != "anthropic")


@pytest.mark.anyio
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_warm_render_beside_a_pdf_reads_only_the_new_messages_media(
    monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    """A report at the start of a 1,000-message session: a render after one more exchange
    looks for PDFs in the new messages, not in all of them again (the render stays flat in
    the session's length, as without the PDF)."""
    import ctxengine.inject.images as images

    looked: list[Message] = []
    pdf_slots = images._pdf_slots

    def counted(m: Message, p: str) -> list[tuple[int, int]]:
        looked.append(m)
        return pdf_slots(m, p)

    monkeypatch.setattr(images, "_pdf_slots", counted)
    history: list[Message] = [Message.user("Keep this in mind."), *reports(3)]
    for i in range(500):
        history += [Message.user(f"Question {i}?"), Message.assistant(f"Answer {i}.")]
    engine = ContextEngine("gpt-4.1", Budget(total=1_000_000))
    async with engine.session("long") as s:
        s.extend(history)
        await s.render(provider)
        for i in range(3):
            s.extend([Message.user(f"More {i}?"), Message.assistant(f"Yes {i}.")])
            looked.clear()
            out = await s.render(provider)
            assert pdfs_sent(out.payload, 1) == [0]
            assert len(looked) <= 8, len(looked)
