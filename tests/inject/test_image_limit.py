"""A payload never carries more images than its provider takes in one request.

A screenshot agent (computer use, a browser agent) sends every screenshot of the session again
on every turn; past the provider's per-request limit each request is refused with a 400
(Anthropic "too many images and documents: 120 + 0 > 100", anthropics/claude-code issue
24541). Renders keep the newest images, send the older ones as the text placeholder, report
each, and count the payload as sent.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, fit
from ctxengine.errors import AdapterError, ConfigError, ConfigTypeError
from ctxengine.inject.images import PAGES_COUNTED, count_images
from ctxengine.inject.payload import payload_tokens
from ctxengine.pdfpages import pdf_pages
from ctxengine.transcript import Image, Message, Text, ToolCall, ToolResult, Transcript, render
from ctxengine.transcript.changes import Change
from ctxengine.transcript.providers import IMAGE_LIMITS
from screenshots import data, image_parts, screenshots, shot
from transcript.helpers import assert_sdk_valid

pytestmark = pytest.mark.anyio

PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")
MODEL = "gpt-4.1"  # a 1M-token window: budgets that hold every screenshot are accepted


def session(n: int, where: str) -> list[Message]:
    return [Message.user("Click through the settings page."), *screenshots(n, where)]


def where_for(provider: str) -> Iterator[str]:
    yield "user"
    if provider != "openai":
        yield "tool"


CASES = [(p, w) for p in PROVIDERS for w in where_for(p)]


def sent(payload: dict[str, Any], n: int) -> list[int]:
    """The screenshots (of ``0 .. n-1``) whose data the payload carries."""
    text = json.dumps(payload)
    return [i for i in range(n) if data(i) in text]


def names(m: Message) -> list[str | None]:
    """The names of the images ``m`` holds, in its blocks and its tool results."""
    blocks = [c for b in m.blocks for c in (b.content if isinstance(b, ToolResult) else (b,))]
    return [b.name for b in blocks if isinstance(b, Image)]


def omitted(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report.get("changes", []) if c["action"] == "image_omitted"]


def test_the_default_limits_are_the_documented_ones() -> None:
    # OpenAI images and vision guide: "Up to 500 individual image inputs per request";
    # Anthropic vision docs: 100 per request (200k-window models); Vertex AI image
    # understanding: "Maximum images per prompt: 3,000" (Gemini 2.5 Pro and Flash).
    assert IMAGE_LIMITS == {
        "openai": 500,
        "openai-responses": 500,
        "anthropic": 100,
        "gemini": 3000,
    }


@pytest.mark.parametrize(("provider", "where"), CASES)
def test_a_transcript_render_sends_the_newest_images_up_to_the_provider_limit(
    provider: str, where: str
) -> None:
    limit = IMAGE_LIMITS[provider]
    n = limit + 7
    step = limit // 10  # the oldest go a tenth of the limit at a time
    t = Transcript(tuple(session(n, where)))
    out = render(t, provider)
    assert_sdk_valid(out.payload, provider)
    assert sent(out.payload, n) == list(range(step, n))  # the newest, every one of them
    assert image_parts(out.payload) == n - step <= limit
    # the older ones are there as their placeholder, each reported at its message
    text = json.dumps(out.payload)
    assert all(f"[image/png attachment 'shot{i}.png' omitted]" in text for i in range(step))
    changes = out.report.of("image_omitted")
    assert len(changes) == step and {c.rule for c in changes} == {"limit_images"}
    assert [names(t.messages[c.index]) for c in changes] == [[f"shot{i}.png"] for i in range(step)]
    assert t.to(provider) == out.payload  # Transcript.to renders the same


@pytest.mark.parametrize(
    ("total", "limit", "kept"),
    [
        (101, 100, 91),
        (110, 100, 100),
        (111, 100, 91),
        (125, 100, 95),
        (8, 5, 5),
        (6, 5, 5),
        (40, 0, 0),
        (3, 100, 3),
    ],
)
def test_the_oldest_images_go_a_tenth_of_the_limit_at_a_time(
    total: int, limit: int, kept: int
) -> None:
    from ctxengine.inject.images import kept_images

    assert kept_images(total, limit) == kept if total > limit else total == kept


async def test_a_screenshot_session_past_the_limit_keeps_its_prefix_from_turn_to_turn() -> None:
    """Cut to the limit exactly, each new screenshot past Anthropic's 100 turned the oldest
    one kept into its placeholder: the payload changed near its start on every turn, and the
    prompt cache missed the whole history each time. The oldest go ten at a time now: the
    payload before the new turn is the start of the next one but once per ten screenshots."""
    engine = ContextEngine(MODEL, Budget(total=400_000))
    payloads: list[list[Any]] = []
    async with engine.session("computer-use") as s:
        s.extend(session(95, "tool"))
        for step in range(95, 130):
            s.extend(screenshots(1, "tool", start=step))
            out = await s.render("anthropic")
            assert image_parts(out.payload) <= 100
            payloads.append(out.payload["messages"])
    kept_prefix = [new[: len(old) - 1] == old[:-1] for old, new in itertools.pairwise(payloads)]
    breaks = [96 + k + 1 for k, same in enumerate(kept_prefix) if not same]
    assert breaks == [101, 111, 121], breaks  # ten cut at 101, 111 and 121 screenshots


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_transcript_within_the_limit_is_rendered_as_it_is(provider: str) -> None:
    t = Transcript(tuple(session(6, "user")))
    out = render(t, provider, max_images=6)
    assert sent(out.payload, 6) == list(range(6))
    assert not out.report.of("image_omitted")
    assert out.payload == render(t, provider).payload


@pytest.mark.parametrize(("provider", "where"), CASES)
async def test_session_renders_keep_the_newest_images_count_them_and_report_them(
    provider: str, where: str
) -> None:
    engine = ContextEngine(MODEL, Budget(total=200_000), max_images=4)
    async with engine.session("shots") as s:
        s.extend(session(12, where))
        await s.user_message("What changed on the last screen?")
        cold = await s.render(provider)
        s.extend(screenshots(3, where, start=12))
        await s.user_message("And now?")
        warm = await s.render(provider)
    for out, n in ((cold, 12), (warm, 15)):
        assert_sdk_valid(out.payload, provider)
        assert sent(out.payload, n) == list(range(n - 4, n))
        assert image_parts(out.payload) == 4
        assert out.tokens == payload_tokens(out.payload, provider, MODEL)  # counted as sent
        assert out.tokens <= 200_000 and out.report.fits
        changes = omitted(out.report.hygiene)
        assert len(changes) == n - 4 and {c["rule"] for c in changes} == {"limit_images"}
        assert out.report.hygiene["counts"]["image_omitted"] == n - 4


async def test_an_anthropic_session_keeps_its_newest_hundred_images() -> None:
    """The error of anthropics/claude-code issue 3397 ("Too much media: 0 document pages + 103
    images > 100"): a session past 100 images is sent its newest 100."""
    engine = ContextEngine(MODEL, Budget(total=300_000))
    async with engine.session("computer-use") as s:
        s.extend(session(130, "tool"))
        await s.user_message("Is the form submitted?")
        out = await s.render("anthropic")
    assert_sdk_valid(out.payload, "anthropic")
    assert sent(out.payload, 130) == list(range(30, 130))
    assert out.tokens == payload_tokens(out.payload, "anthropic", MODEL)
    assert len(omitted(out.report.hygiene)) == 30


async def test_a_warm_render_that_cuts_as_many_images_makes_no_change_per_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A screenshot session past the limit cuts the same oldest images on the turns between
    two steps of the cut: its renders then reuse the messages and changes of the render
    before, instead of walking the whole window and making one change per image cut on
    every turn (which took more than half of the warm render of 600 screenshots at a
    400,000-token budget: benches/test_bench_engine.py, group ``render-warm-images``)."""
    from ctxengine.inject import images

    made: list[Any] = []

    def counted(*args: Any) -> Any:
        made.append(args)
        return Change(*args)

    engine = ContextEngine(MODEL, Budget(total=400_000))
    async with engine.session("computer-use") as s:
        s.extend(session(125, "tool"))  # past 100: 30 cut, 95 kept
        await s.user_message("Go on.")
        before = await s.render("anthropic")
        monkeypatch.setattr(images, "Change", counted)
        s.extend(screenshots(3, "tool", start=125))  # 128 images: still 30 cut
        after = await s.render("anthropic")
    assert made == []
    assert omitted(after.report.hygiene) == omitted(before.report.hygiene)
    assert len(omitted(after.report.hygiene)) == 30
    assert sent(after.payload, 128) == list(range(30, 128))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_warm_renders_past_the_limit_are_those_made_without_the_session_memo(
    provider: str,
) -> None:
    """Turn after turn, across steps of the cut and compactions (which drop the leading
    turns), a session's render past the limit sends what its twin sends, whose image cuts are
    made anew each turn (without the memo), with the same changes."""
    import ctxengine.inject.render as render_module
    from ctxengine.inject.images import limit_images

    def anew(t: Transcript, provider: str, max_images: Any, memo: Any) -> Any:
        return limit_images(t, provider, max_images, None)

    where = "user" if provider == "openai" else "tool"
    ours = ContextEngine(MODEL, Budget(total=40_000), max_images=30).session("ours")
    twin = ContextEngine(MODEL, Budget(total=40_000), max_images=30).session("twin")
    compacted, cuts = [], set()
    async with ours as a, twin as b:
        for s in (a, b):
            s.extend(session(30, where))
        for turn in range(24):
            for s in (a, b):
                s.extend(screenshots(1, where, start=100 + turn))
                await s.user_message(f"And now? ({turn})")
            got = await a.render(provider)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(render_module, "limit_images", anew)
                want = await b.render(provider)
            assert got.payload == want.payload, turn
            assert got.report.hygiene == want.report.hygiene, turn
            assert 0 < image_parts(got.payload) <= 30
            compacted += got.report.compactions
            cuts.add(got.report.hygiene["counts"]["image_omitted"])
    assert compacted and all(c["ok"] for c in compacted)
    assert len(cuts) > 2  # the cut went by steps (three turns each: 30 // 10 images)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_fit_keeps_the_newest_images_and_takes_a_lower_limit(provider: str) -> None:
    messages = [*session(9, "user"), Message.user("Summarize the screens.")]
    out = fit(messages, model=MODEL, budget=100_000, provider=provider, max_images=2)
    assert_sdk_valid(out.payload, provider)
    assert sent(out.payload, 9) == [7, 8]
    assert out.tokens == payload_tokens(out.payload, provider, MODEL)


@pytest.mark.parametrize("in_run", [False, True], ids=["after-a-run", "in-a-run"])
async def test_an_image_cut_is_reported_at_its_index_when_turns_are_merged(in_run: bool) -> None:
    """Anthropic takes no two user turns in a row: a session renders them merged, and reports
    each merge at the index of the message merged away, in the turns as composed. An image
    cut was reported at its index in the merged turns, one message early per merge before it
    (the message of the call, not of its result): the indices are those of the turns as
    composed, as a render of those turns reports them."""
    first = [Message.user("Open the form."), Message.user("Then fill it in.")]
    if in_run:  # the images cut are in the merged turns themselves
        first = [
            Message("user", (Text("Before:"), shot(90))),
            Message("user", (Text("After:"), shot(91))),
        ]
    engine = ContextEngine(MODEL, Budget(total=100_000), max_images=1)
    async with engine.session("merged") as s:
        s.extend([*first, *screenshots(3, "tool")])
        await s.user_message("Is it filled in?")
        out = await s.render("anthropic")
        composed = s.transcript()
    alone = render(composed, "anthropic", max_images=1).report.to_dict()
    assert omitted(out.report.hygiene) == omitted(alone)
    assert len(omitted(alone)) == (4 if in_run else 2)
    for change in omitted(out.report.hygiene):
        assert names(composed.messages[change["index"]])  # the message holding the image


async def test_the_render_option_wins_over_the_engine_setting() -> None:
    engine = ContextEngine(MODEL, Budget(total=100_000), max_images=5)
    async with engine.session("both") as s:
        s.extend(session(8, "tool"))
        await s.user_message("Next?")
        by_engine = await s.render("anthropic")
        by_option = await s.render("anthropic", max_images=1)
        none = await s.render("anthropic", max_images=0)
    assert sent(by_engine.payload, 8) == [3, 4, 5, 6, 7]
    assert sent(by_option.payload, 8) == [7]
    assert sent(none.payload, 8) == [] and len(omitted(none.report.hygiene)) == 8
    assert_sdk_valid(none.payload, "anthropic")


async def test_images_the_provider_gets_as_placeholders_do_not_count() -> None:
    """OpenAI Chat tool messages take text only: their images are placeholders already, so
    the user messages' images (the ones sent) all fit a limit of their number."""
    messages = [Message.user("Compare the screens.")]
    for i in range(5):
        call = ToolCall(f"c{i}", "screenshot", {})
        messages += [
            Message("assistant", (Text("shot"), call)),
            Message("tool", (ToolResult(f"c{i}", (Text("taken"), shot(100 + i))),)),
        ]
    messages += screenshots(3, "user")
    engine = ContextEngine(MODEL, Budget(total=100_000), max_images=3)
    async with engine.session("chat") as s:
        s.extend(messages)
        out = await s.render("openai")
    assert sent(out.payload, 3) == [0, 1, 2]
    assert not omitted(out.report.hygiene)
    assert count_images(out.transcript, "openai") == image_parts(out.payload) == 3


def _mixed() -> Transcript:
    """Images everywhere a transcript holds them: user, assistant and tool messages, by data
    and by URL, beside a PDF, audio and a video."""
    pdf = Image("application/pdf", "JVBERi0xLjQK", name="spec.pdf")
    audio = Image("audio/wav", "UklGRgAAAABXQVZF")
    video = Image("video/mp4", url="https://example.com/clip.mp4")
    url = Image("image/jpeg", url="https://example.com/screen.jpg")
    call = ToolCall("c1", "look", {})
    return Transcript(
        (
            Message.system("You see screens."),
            Message("user", (Text("Here:"), shot(2), url, pdf, audio, video)),
            Message("assistant", (Text("I drew this:"), shot(3), call)),
            Message("tool", (ToolResult("c1", (Text("seen"), shot(4), url, pdf)),)),
            Message("user", (shot(5),)),
        )
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_images_counted_are_the_image_parts_of_the_payload(provider: str) -> None:
    """What the image limit bounds: the image parts, and for Anthropic, which counts them
    together ("0 document pages + 102 images > 100"), the pages of the documents too."""
    t = _mixed()
    payload = t.to(provider, max_images=100)
    pages = sum(map(pdf_pages, _documents(payload))) if provider in PAGES_COUNTED else 0
    assert count_images(t, provider) == image_parts(payload) + pages
    fewer = t.to(provider, max_images=1)
    assert image_parts(fewer) == 1 and data(5) in json.dumps(fewer)  # the newest


@pytest.mark.parametrize("value", ["3", 2.5, True, None])
def test_a_bad_engine_max_images_is_refused_naming_it(value: Any) -> None:
    if value is None:  # the default: the provider's limit
        assert ContextEngine(MODEL, max_images=value).config.max_images is None
        return
    with pytest.raises(ConfigTypeError, match=f"max_images is {value!r}"):
        ContextEngine(MODEL, max_images=value)


def test_a_negative_engine_max_images_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_images is -1; expected None"):
        ContextEngine(MODEL, max_images=-1)


@pytest.mark.parametrize("value", ["3", -2, 1.5, False])
async def test_a_bad_render_max_images_is_refused_before_the_render(value: Any) -> None:
    t = Transcript(tuple(session(2, "user")))
    with pytest.raises(AdapterError, match=f"max_images is {value!r}"):
        t.to("anthropic", max_images=value)
    engine = ContextEngine(MODEL, Budget(total=10_000))
    async with engine.session("bad") as s:
        s.extend(list(t.messages))
        with pytest.raises(AdapterError, match="expected None"):
            await s.render("openai", max_images=value)
        assert s.turn == 0  # refused before the render ran


def _documents(value: Any) -> list[str]:
    """The base64 data of the inline document parts of an Anthropic payload."""
    if isinstance(value, list):
        return [d for v in value for d in _documents(v)]
    if not isinstance(value, dict):
        return []
    if value.get("type") == "document" and isinstance(value.get("source"), dict):
        return [value["source"]["data"]] if value["source"].get("type") == "base64" else []
    return [d for v in value.values() for d in _documents(v)]
