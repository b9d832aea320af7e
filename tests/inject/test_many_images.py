"""Anthropic's many-image rule: a request of more than 20 images is refused when one of them is
larger than 2000 px on a side ("At least one of the image dimensions exceed max allowed size
for many-image requests: 2000 pixels"; Anthropic's vision guide: "If you submit more than 20
images in one API request, this limit is 2000x2000 px"). A computer-use agent on a 2560 x 1440
screen passes it at its 21st screenshot, and every request after is refused. Renders for
Anthropic read each image's size from its header and, when the rule would refuse the request,
send the newest 20 (the older ones as placeholders, reported); other providers, smaller
screenshots and requests of 20 images or fewer are sent as before.
"""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.inject.images import MANY_IMAGES, MANY_IMAGES_PX, MEDIA_BYTES
from ctxengine.transcript import Image, Message, Text, ToolCall, ToolResult, Transcript, render
from image_bytes import png, png_bytes
from screenshots import image_parts
from transcript.helpers import assert_sdk_valid

pytestmark = pytest.mark.anyio

MODEL = "claude-sonnet-4-5"


def shots(n: int, width: int, height: int, start: int = 0) -> list[Message]:
    """``n`` computer-use steps, each a screenshot of ``width`` x ``height`` in its tool
    result (distinct images: the size differs by a pixel of height each)."""
    out: list[Message] = []
    for i in range(start, start + n):
        call = ToolCall(f"call{i}", "computer", {"action": "screenshot"})
        out.append(Message("assistant", (Text(f"Step {i}."), call)))
        image = Image("image/png", png(width, height + i % 7), name=f"shot{i}.png")
        out.append(Message("tool", (ToolResult(f"call{i}", (Text(f"step {i}"), image)),)))
    return out


def names_sent(payload: dict[str, Any], n: int) -> list[int]:
    """The screenshots of ``0 .. n-1`` whose placeholder the payload does not carry."""
    text = json.dumps(payload)
    return [i for i in range(n) if f"'shot{i}.png' omitted" not in text]


@pytest.mark.parametrize(("n", "width", "kept"), [(25, 2560, 19), (23, 2001, 19), (40, 3000, 20)])
def test_more_than_twenty_large_images_are_cut_to_the_newest_twenty(
    n: int, width: int, kept: int
) -> None:
    """The oldest go by the usual steps (a tenth of the limit: two at a time, as few steps as
    bring them within 20), so the prefix stays the same between two steps."""
    t = Transcript(tuple([Message.user("Fill in the form."), *shots(n, width, 1440)]))
    out = render(t, "anthropic")
    assert_sdk_valid(out.payload, "anthropic")
    assert image_parts(out.payload) == kept <= MANY_IMAGES
    assert names_sent(out.payload, n) == list(range(n - kept, n))  # the newest
    changes = out.report.of("image_omitted")
    assert len(changes) == n - kept
    assert all(f"at most {MANY_IMAGES_PX} px" in c.detail for c in changes)


@pytest.mark.parametrize(
    ("provider", "n", "width"),
    [
        ("anthropic", 25, 1920),  # every one within 2000 px: the rule takes 100 of them
        ("anthropic", 20, 4000),  # 20 or fewer: held to 8,000 px only
        ("openai-responses", 25, 2560),  # Anthropic's rule only
        ("gemini", 25, 2560),
    ],
)
def test_the_rule_leaves_other_requests_as_they_were(provider: str, n: int, width: int) -> None:
    t = Transcript(tuple([Message.user("Fill in the form."), *shots(n, width, 1080)]))
    out = render(t, provider)
    assert image_parts(out.payload) == n and not out.report.of("image_omitted")


def test_only_the_images_that_would_be_sent_decide() -> None:
    """An old large screenshot the provider's own limit already cuts does not count: 100 small
    ones after it fill Anthropic's 100, and no image sent is larger than 2000 px."""
    large = shots(10, 2560, 1440)
    small = shots(100, 1280, 800, start=10)
    t = Transcript(tuple([Message.user("Go on."), *large, *small]))
    out = render(t, "anthropic")
    assert image_parts(out.payload) == 100
    assert names_sent(out.payload, 110) == list(range(10, 110))
    text = json.dumps(out.payload)
    assert f"at most {MANY_IMAGES_PX} px" not in text


async def test_a_session_renders_its_newest_twenty_and_keeps_its_prefix_by_steps() -> None:
    """Turn by turn past 20 large screenshots, renders send at most 20, and the oldest go two
    at a time: the payload before a turn is the start of the next one but at those steps."""
    engine = ContextEngine(MODEL, Budget(total=150_000))
    payloads: list[list[Any]] = []
    async with engine.session("computer-use") as s:
        s.extend([Message.user("Book the flight."), *shots(15, 2560, 1440)])
        for step in range(15, 31):
            s.extend(shots(1, 2560, 1440, start=step))
            out = await s.render("anthropic")
            assert_sdk_valid(out.payload, "anthropic")
            assert image_parts(out.payload) <= MANY_IMAGES
            assert out.tokens <= 150_000
            payloads.append(out.payload["messages"])
    kept_prefix = [new[: len(old) - 1] == old[:-1] for old, new in itertools.pairwise(payloads)]
    breaks = [16 + k + 1 for k, same in enumerate(kept_prefix) if not same]
    assert breaks == [21, 23, 25, 27, 29, 31], breaks


def big_shots(n: int, size: int, start: int = 0) -> list[Message]:
    """``n`` steps, each a screenshot whose base64 text is ``size`` characters (a multiple of
    4): a real PNG (1280 x 802) with bytes after its end, as large as a photo-like one."""
    out: list[Message] = []
    for i in range(start, start + n):
        data = _padded(i, size)
        call = ToolCall(f"call{i}", "computer", {"action": "screenshot"})
        out.append(Message("assistant", (Text(f"Step {i}."), call)))
        if i % 2:  # in a user turn after the result, as OpenAI Chat agents send them
            out.append(Message("tool", (ToolResult(f"call{i}", (Text("taken"),)),)))
            out.append(Message("user", (Image("image/png", data, name=f"shot{i}.png"),)))
        else:
            out.append(Message("user", (Image("image/png", data, name=f"shot{i}.png"),)))
    return out


def _padded(i: int, size: int) -> str:
    """Screenshot ``i``: a PNG of 1280 x 802 and bytes after its end, as ``size`` characters
    of base64 (a multiple of 4) without ``+`` or ``/`` (the Gemini SDK's check writes bytes
    back URL-safe), told apart by ``i`` written in the characters after the PNG's."""
    head = png_bytes(1280, 802)
    start = base64.b64encode(head + bytes(-len(head) % 3)).decode()
    assert "+" not in start and "/" not in start
    tail = f"{i:08d}"
    return start + tail + "A" * (size - len(start) - len(tail))


@pytest.mark.parametrize("provider", ["anthropic", "openai", "openai-responses", "gemini"])
def test_a_request_never_carries_more_image_data_than_the_provider_takes(provider: str) -> None:
    """100 screenshots of 600 KB of base64 are 60 MB: past Anthropic's 32 MB request limit (a
    413 ``request_too_large`` on every turn), OpenAI's 50 MB and Gemini's 20 MB, though within
    every count limit. Renders keep the newest that fit, by the usual steps, and say why."""
    size = 600_000
    t = Transcript(tuple([Message.user("Check every page."), *big_shots(100, size)]))
    out = render(t, provider)
    assert_sdk_valid(out.payload, provider)
    kept = image_parts(out.payload)
    carried = sum(len(x) for x in _image_data(out.payload))
    assert carried == kept * size <= MEDIA_BYTES[provider]
    # the newest that fit, less at most one step of a tenth of them
    fit = MEDIA_BYTES[provider] // size
    assert fit - max(1, fit // 10) < kept <= fit
    assert names_sent(out.payload, 100) == list(range(100 - kept, 100))
    changes = out.report.of("image_omitted")
    assert len(changes) == 100 - kept
    assert all("characters of inline images" in c.detail for c in changes)
    assert len(json.dumps(out.payload)) < MEDIA_BYTES[provider] + 2**20


def _image_data(value: Any) -> list[str]:
    """The base64 data of every image part of a payload, in every provider's shape."""
    if isinstance(value, list):
        return [d for v in value for d in _image_data(v)]
    if not isinstance(value, dict):
        return []
    for key in ("data", "url", "image_url"):
        v = value.get(key)
        if isinstance(v, str) and len(v) > 100_000:
            return [v.partition(",")[2] if v.startswith("data:") else v]
    return [d for v in value.values() for d in _image_data(v)]


async def test_a_session_of_large_screenshots_stays_within_the_request_size_turn_by_turn() -> None:
    engine = ContextEngine(MODEL, Budget(total=190_000))
    async with engine.session("computer-use") as s:
        s.extend([Message.user("Check every page."), *big_shots(40, 700_000)])
        for step in range(40, 60):
            s.extend(big_shots(1, 700_000, start=step))
            out = await s.render("anthropic")
            assert sum(len(x) for x in _image_data(out.payload)) <= MEDIA_BYTES["anthropic"]
            assert image_parts(out.payload) >= 40  # the newest that fit: 44 less a step
            assert out.tokens <= 190_000


def varied_shots(n: int) -> list[Message]:
    """``n`` steps of :func:`big_shots`, each screenshot of its own size between 300 and 900 KB
    of base64 (a page of text compresses less than a blank one)."""
    out: list[Message] = []
    for i in range(n):
        size = (300_000 + (i * 7_919 * 37) % 600_000) // 4 * 4
        out += big_shots(1, size, start=i)
    return out


async def test_an_image_cut_for_the_request_size_stays_cut_as_screenshots_come() -> None:
    """Screenshots of varied sizes past Anthropic's 32 MB: turn by turn, the oldest images go
    by steps and an image cut is never sent again (cut by a tenth of the images that fit,
    whose number changes with their sizes, a request sent 10 placeholders and the next 8: it
    sent two images again and broke the prefix of both requests). Each payload holds the one
    before it as its start except where more images are cut, and renders through a session
    are those of a fresh engine."""
    history = [Message.user("Check every page."), *varied_shots(90)]
    omitted: list[int] = []
    payloads: list[list[Any]] = []
    engine = ContextEngine(MODEL, Budget(total=190_000))  # every turn fits: images decide
    async with engine.session("computer-use") as s:
        s.extend(history[:61])
        for end in range(61, len(history) + 1, 2):
            if end > 61:
                s.extend(history[end - 2 : end])
            out = await s.render("anthropic")
            fresh = ContextEngine(MODEL, Budget(total=190_000))
            async with fresh.session("computer-use") as again:
                again.extend(history[:end])
                assert out.payload == (await again.render("anthropic")).payload
            assert sum(len(x) for x in _image_data(out.payload)) <= MEDIA_BYTES["anthropic"]
            assert not out.report.compactions
            omitted.append(out.report.hygiene["counts"].get("image_omitted", 0))
            payloads.append(out.payload["messages"])
    assert omitted[-1] > 0 and omitted == sorted(omitted), omitted
    for (n, old), (m, new) in itertools.pairwise(zip(omitted, payloads, strict=True)):
        if n == m:
            assert new[: len(old) - 1] == old[:-1]


def test_the_size_cut_holds_when_the_newest_within_max_images_fit_again() -> None:
    """``max_images=30`` and screenshots of 0.8 to 1.3 MB: the newest 30 pass 32 MB on some
    turns and fit on others (the one leaving the window was larger than the one coming).
    Cut for the size by steps, the request still cut the images of the turn before when
    the newest 30 fit again, not fewer by the count limit's own steps (an image sent again,
    the prefix changed twice)."""
    messages = [Message.user("Check every page.")]
    omitted: list[int] = []
    for i in range(60):
        messages += big_shots(1, (800_000 + i * 7_919 * 3 % 500_000) // 4 * 4, start=i)
        out = render(Transcript(tuple(messages)), "anthropic", max_images=30)
        assert sum(len(x) for x in _image_data(out.payload)) <= MEDIA_BYTES["anthropic"]
        assert image_parts(out.payload) <= 30
        omitted.append(len(out.report.of("image_omitted")))
    assert omitted[-1] > 0 and omitted == sorted(omitted), omitted


@pytest.mark.parametrize("in_session", [False, True])
async def test_an_image_larger_than_8000_px_is_never_sent_to_anthropic(in_session: bool) -> None:
    """Anthropic refuses any image larger than 8,000 px on a side, whatever the count ("image
    dimensions exceed max allowed size: 8000 pixels"), on every turn after, as the image is
    history: a full-page screenshot of a long web page (1280 x 12000) is one. It is sent as
    its placeholder, reported, and the images around it are sent; other providers get it."""
    page = Image("image/png", png(1280, 12_000), name="page.png")
    messages = [
        Message.user("Read this page."),
        *shots(2, 1280, 800),
        Message("user", (Text("the whole page"), page)),
        *shots(2, 1280, 800, start=2),
        Message.user("What does it say?"),
    ]
    if in_session:
        engine = ContextEngine(MODEL, Budget(total=100_000))
        async with engine.session("page") as s:
            s.extend(messages)
            await s.render("anthropic")
            s.extend(shots(1, 1280, 800, start=4))  # a warm render after it
            out = await s.render("anthropic")
        t = Transcript(tuple([*messages, *shots(1, 1280, 800, start=4)]))
        assert out.payload == render(t, "anthropic").payload  # as a fresh render
        changes = [c for c in out.report.hygiene["changes"] if c["action"] == "image_omitted"]
        details = [c["detail"] for c in changes]
    else:
        out = render(Transcript(tuple(messages)), "anthropic")
        details = [c.detail for c in out.report.of("image_omitted")]
    assert_sdk_valid(out.payload, "anthropic")
    text = json.dumps(out.payload)
    assert "'page.png' omitted" in text and page.data not in text
    assert image_parts(out.payload) == (5 if in_session else 4)
    assert len(details) == 1 and "larger than 8000 px" in details[0]
    for provider in ("openai", "openai-responses", "gemini"):
        assert page.data in json.dumps(render(Transcript(tuple(messages)), provider).payload)


@pytest.mark.parametrize("budget", [8_000, 16_000])
async def test_screenshots_openai_chat_gets_as_placeholders_are_counted_as_placeholders(
    budget: int,
) -> None:
    """OpenAI Chat tool messages take text only: a screenshot in a tool result (how an
    Anthropic computer-use transcript holds them) is sent as its placeholder, a dozen tokens.
    The plan charged it as an image (1,105 tokens at 1280 x 800) and cut the session to about
    half its target; it counts the placeholder now, and the render fills its target. Sent to
    Anthropic, the same session still counts the images."""
    steps: list[Message] = [Message.user("Test the checkout flow.")]
    for i in range(150):
        steps += shots(1, 1280, 800, start=i)
        steps.append(Message.assistant(f"The page after step {i} shows the form. " * 6))
    steps.append(Message.user("Did it work?"))
    engine = ContextEngine("gpt-4o", Budget(total=budget))
    async with engine.session("cu") as s:
        s.extend(steps)
        out = await s.render("openai")
        anthropic = await s.render("anthropic")
    assert_sdk_valid(out.payload, "openai")
    assert any(g.status != "kept" for g in out.report)  # the session is cut
    assert out.tokens <= budget and out.tokens >= 0.95 * out.report.target
    assert anthropic.tokens <= budget and image_parts(anthropic.payload) > 0
