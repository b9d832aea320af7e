"""Images counted by their size, per provider (``ctxengine.tokens``): the providers' own worked
examples, and renders of screenshot sessions that stay within their budget as each provider
counts the images (the flat 765 tokens an image used to count let a render of large
screenshots pass its budget)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contract_count import independent_count
from ctxengine import Budget, ContextEngine, count_messages
from ctxengine.inject.payload import payload_tokens
from ctxengine.tokens import (
    IMAGE_TOKENS,
    anthropic_image_tokens,
    gemini_image_tokens,
    image_tokens,
    openai_image_tokens,
)
from ctxengine.transcript import Image, Message, Text
from image_bytes import gif, jpeg, png, webp

# -- the providers' worked examples -----------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "detail", "tokens"),
    [
        ((1024, 1024), "high", 765),  # OpenAI vision guide, "Calculating costs": 4 tiles
        ((2048, 4096), "high", 1105),  # scaled to 1024 x 2048, then 768 x 1536: 6 tiles
        ((4096, 8192), "low", 85),  # low detail: the base alone, whatever the size
        ((1920, 1080), None, 1105),  # auto counts as high: 1365 x 768, 3 x 2 tiles
        ((512, 512), "auto", 255),
    ],
)
def test_openai_tile_rule_matches_the_guide(
    size: tuple[int, int], detail: str | None, tokens: int
) -> None:
    assert openai_image_tokens(*size, model="gpt-4o", detail=detail) == tokens
    assert openai_image_tokens(*size, model="gpt-4.1", detail=detail) == tokens


def test_openai_patch_rule_matches_the_guide() -> None:
    """The guide's patch examples: 1024 x 1024 is 32 x 32 = 1024 patches; 1800 x 2400 needs
    4275, over the 1536 cap, and is scaled to 1056 x 1408: 33 x 44 = 1452 patches; then the
    model's multiplier (gpt-4.1-mini 1.62, gpt-4.1-nano 2.46, o4-mini 1.72)."""
    assert openai_image_tokens(1024, 1024, model="gpt-4.1-mini") == 1659  # 1024 x 1.62
    assert openai_image_tokens(1800, 2400, model="gpt-4.1-mini") == 2353  # 1452 x 1.62
    assert openai_image_tokens(1800, 2400, model="gpt-4.1-nano") == 3572  # 1452 x 2.46
    assert openai_image_tokens(1800, 2400, model="o4-mini-2025-04-16") == 2498  # 1452 x 1.72
    # detail does not change a patch model's count
    assert openai_image_tokens(1024, 1024, model="gpt-4.1-mini", detail="low") == 1659


def test_gpt_4o_mini_bills_its_own_tile_constants() -> None:
    """gpt-4o-mini's row of the guide's table: 2833 base tokens, 5667 per tile."""
    assert openai_image_tokens(1024, 1024, model="gpt-4o-mini") == 2833 + 4 * 5667
    assert openai_image_tokens(1024, 1024, model="gpt-4o-mini", detail="low") == 2833


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((200, 200), 54), ((1000, 1000), 1334), ((1092, 1092), 1590)],
)
def test_anthropic_matches_the_vision_docs_table(size: tuple[int, int], tokens: int) -> None:
    """Claude's vision docs, "Calculate image costs": ~54, ~1334 and ~1590 tokens."""
    assert anthropic_image_tokens(*size, model="claude-sonnet-4-5") == tokens


def test_anthropic_scales_a_screenshot_to_its_tier() -> None:
    """A 1920 x 1080 screenshot: scaled to 1568 px on the long edge and ~1,600 tokens before
    Claude 4.7; 2765 tokens (1920 x 1080 / 750) on a model that takes 2576 px. A model name
    that is not an older Claude's is charged the larger tier."""
    assert anthropic_image_tokens(1920, 1080, model="claude-sonnet-4-5-20250929") == 1600
    assert anthropic_image_tokens(1920, 1080, model="claude-3-5-sonnet-20241022") == 1600
    assert anthropic_image_tokens(1920, 1080, model="claude-sonnet-4-20250514") == 1600
    assert anthropic_image_tokens(1920, 1080, model="claude-opus-4-7") == 2765
    assert anthropic_image_tokens(1920, 1080, model="claude-sonnet-5") == 2765
    assert anthropic_image_tokens(1920, 1080, model="gpt-4o") == 2765
    assert anthropic_image_tokens(8000, 8000, model="claude-opus-4-7") == 5000  # 3.75 MP


def test_gemini_tiles_and_media_resolution() -> None:
    """Gemini 2: 258 tokens with both sides at most 384 px, else 258 per 768 px tile (the
    count tokens guide's example: 600 x 400 is one tile, 258); Gemini 3: the default media
    resolution's 1120 for any image; another model name: the larger of both."""
    assert gemini_image_tokens(384, 384, model="gemini-2.0-flash") == 258
    assert gemini_image_tokens(600, 400, model="gemini-2.0-flash") == 258
    assert gemini_image_tokens(1920, 1080, model="gemini-2.5-pro") == 6 * 258
    assert gemini_image_tokens(1920, 1080, model="gemini-3-pro-preview") == 1120
    assert gemini_image_tokens(200, 200, model="gemini-3-flash") == 1120
    assert gemini_image_tokens(1920, 1080, model="gpt-4o") == 6 * 258
    assert gemini_image_tokens(200, 200, model="gpt-4o") == 1120


@pytest.mark.parametrize("maker", [png, gif, jpeg, webp], ids=["png", "gif", "jpeg", "webp"])
def test_image_tokens_reads_the_size_of_inline_data(maker) -> None:  # type: ignore[no-untyped-def]
    data = maker(1920, 1080)
    assert image_tokens(data, "openai", model="gpt-4o") == 1105
    assert image_tokens(f"data:image/x;base64,{data}", "openai", model="gpt-4o") == 1105
    assert image_tokens(data, "openai-responses", model="gpt-4o", detail="low") == 85
    assert image_tokens(data, "anthropic", model="claude-sonnet-4-5") == 1600
    assert image_tokens(data, "gemini", model="gemini-2.5-flash") == 1548


@pytest.mark.parametrize("data", [None, "", "bm90IGFuIGltYWdl", "%%%garbage%%%" * 10])
def test_an_image_of_unknown_size_counts_the_flat_rate(data: str | None) -> None:
    for provider in ("openai", "openai-responses", "anthropic", "gemini"):
        assert image_tokens(data, provider, model="gpt-4o") == IMAGE_TOKENS


def test_count_messages_counts_an_inline_image_by_its_size() -> None:
    """``count_messages`` charged every image part 765 tokens: a 1920 x 1080 screenshot is
    1105 on gpt-4o, 85 at ``detail: low``; an image by URL keeps the flat count."""
    shot = f"data:image/png;base64,{png(1920, 1080)}"

    def message(url: str, detail: str | None = None) -> list[dict[str, object]]:
        image: dict[str, object] = (
            {"url": url} if detail is None else {"url": url, "detail": detail}
        )
        return [{"role": "user", "content": [{"type": "image_url", "image_url": image}]}]

    text_only = count_messages([{"role": "user", "content": []}], model="gpt-4o")
    assert count_messages(message(shot), model="gpt-4o") == text_only + 1105
    assert count_messages(message(shot, "low"), model="gpt-4o") == text_only + 85
    assert count_messages(message(shot), model="gpt-4.1-mini") == text_only + openai_image_tokens(
        1920, 1080, model="gpt-4.1-mini"
    )
    url = "https://example.com/shot.png"
    assert count_messages(message(url), model="gpt-4o") == text_only + IMAGE_TOKENS
    # an odd shape (a non-str name) takes the Python rule: the same count
    odd = [{**message(shot)[0], "name": None, "extra": 1}]
    assert count_messages(odd, model="gpt-4o") == count_messages(
        [{**message(shot)[0], "extra": 1}], model="gpt-4o"
    )


# -- renders ----------------------------------------------------------------------------------

PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini"]
#: A full-HD screenshot, as a browser or computer-use agent takes them.
SHOT = png(1920, 1080)


async def _screenshots(provider: str, budget: int, n: int = 10, model: str = "gpt-4o"):  # type: ignore[no-untyped-def]
    engine = ContextEngine(model, Budget(total=budget))
    async with engine.session("shots") as s:
        for i in range(n):
            shot = Message(
                "user", (Text(f"screenshot {i}: what changed?"), Image("image/png", SHOT))
            )
            s.extend([shot, Message.assistant(f"In screenshot {i} the dialog moved.")])
        await s.user_message("summarize the changes")
        return await s.render(provider)


@pytest.mark.anyio
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_screenshot_session_fits_its_budget_as_the_provider_counts(provider: str) -> None:
    """Ten 1920 x 1080 screenshots at 10,000 tokens. Counted 765 each, all ten fit (7,650
    tokens and the text): OpenAI bills each 1105, Gemini 1548, Anthropic up to 2765, and the
    request was 11,050 to 27,650 tokens for the images alone. Counted by size, the render
    keeps the newest that fit, within the budget by the provider's rule (an independent
    count: Pillow reads the sizes)."""
    out = await _screenshots(provider, 10_000)
    kept = str(out.payload).count(SHOT)
    assert independent_count(out.payload, provider) <= 10_000
    assert 1 <= kept < 10
    assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o")
    assert abs(out.report.tokens_estimated - out.tokens) <= 20  # the plan counts the same
    assert out.tokens <= 10_000 and out.report.fits


@pytest.mark.anyio
async def test_a_claude_model_is_counted_by_its_tier() -> None:
    """With a Claude model before 4.7 the engine counts each screenshot at Claude's 1600, not
    the 2765 of the larger tier: more of them fit the same budget."""
    standard = await _screenshots("anthropic", 12_000, model="claude-sonnet-4-5")
    high = await _screenshots("anthropic", 12_000, model="claude-opus-4-7")
    kept = str(standard.payload).count(SHOT)
    assert kept > str(high.payload).count(SHOT)
    assert kept * 1600 < standard.tokens <= 12_000


@pytest.mark.anyio
async def test_one_session_rendered_for_each_provider_in_turn_fits_each_time() -> None:
    """The plan counts an image for the provider of the render: a session rendered for
    OpenAI, then Anthropic, then Gemini, then OpenAI again re-counts its images each time."""
    engine = ContextEngine("gpt-4o", Budget(total=12_000))
    async with engine.session("turns") as s:
        for i in range(10):
            shot = Message("user", (Text(f"screenshot {i}"), Image("image/png", SHOT)))
            s.extend([shot, Message.assistant(f"page {i}")])
        await s.user_message("summarize the changes")
        kept = []
        for provider in ("openai", "anthropic", "gemini", "openai"):
            out = await s.render(provider)
            assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o")
            assert independent_count(out.payload, provider) <= 12_000, provider
            # the plan counted the images as this provider's payload does (not as the last
            # render's provider did): within the framing estimates of it
            assert abs(out.report.tokens_estimated - out.tokens) <= 20, provider
            kept.append(str(out.payload).count(SHOT))
    assert kept[0] > kept[1] >= 1  # OpenAI's 1105 per image, Anthropic's 2765


@pytest.mark.anyio
async def test_an_image_whose_size_cannot_be_read_counts_the_flat_rate() -> None:
    """Data that is not a readable image (a truncated upload) counts 765, in the plan and in
    ``out.tokens``, for every provider."""
    broken = "iVBORw0KGgoAAAANSUhE"  # a PNG signature cut inside its header
    for provider in PROVIDERS:
        engine = ContextEngine("gpt-4o", Budget(total=20_000))
        async with engine.session("broken") as s:
            s.extend([Message("user", (Text("what is this?"), Image("image/png", broken)))])
            with_image = await s.render(provider)
        engine = ContextEngine("gpt-4o", Budget(total=20_000))
        async with engine.session("broken") as s:
            s.extend([Message("user", (Text("what is this?"),))])
            without = await s.render(provider)
        assert with_image.tokens - without.tokens == IMAGE_TOKENS, provider


# -- a model named through a gateway or a cloud -----------------------------------------------


@pytest.mark.parametrize(
    ("routed", "bare"),
    [
        ("openai/gpt-4.1-mini", "gpt-4.1-mini"),  # LiteLLM's provider path: patches x 1.62
        ("azure/gpt-4o-mini", "gpt-4o-mini"),  # gpt-4o-mini's own tile constants
        ("openai/o4-mini", "o4-mini"),
        ("ft:gpt-4.1-nano-2025-04-14:acme::abc123", "gpt-4.1-nano"),  # a fine-tune
        ("GPT-4.1-mini", "gpt-4.1-mini"),
    ],
)
def test_a_routed_openai_model_is_billed_as_the_model_it_names(routed: str, bare: str) -> None:
    """The tokenizer counts ``openai/gpt-4.1-mini`` as gpt-4.1-mini (``bare_model``); so is its
    image billed: counted by the tile rule of gpt-4o instead, a 1024 x 1024 image was 765
    tokens where the patch rule bills 1659, and gpt-4o-mini's 25,501 counted 765."""
    for size in ((1024, 1024), (1920, 1080), (1800, 2400)):
        assert openai_image_tokens(*size, model=routed) == openai_image_tokens(*size, model=bare)
    assert openai_image_tokens(1024, 1024, model=routed) > IMAGE_TOKENS


@pytest.mark.parametrize(
    ("routed", "bare"),
    [
        ("anthropic/claude-3-5-sonnet", "claude-3-5-sonnet"),  # OpenRouter, LiteLLM
        ("us.anthropic.claude-3-5-sonnet-20240620-v1:0", "claude-3-5-sonnet"),  # Bedrock
    ],
)
def test_a_routed_claude_model_is_counted_by_its_tier(routed: str, bare: str) -> None:
    assert anthropic_image_tokens(1920, 1080, model=routed) == anthropic_image_tokens(
        1920, 1080, model=bare
    )


@pytest.mark.anyio
async def test_a_render_for_a_routed_model_keeps_what_the_bare_model_keeps() -> None:
    """A screenshot session for ``openai/gpt-4.1-mini`` (a gateway's name) is planned and
    counted as one for ``gpt-4.1-mini``: the same images kept, the same ``out.tokens``,
    within the budget as gpt-4.1-mini bills the images."""
    routed = await _screenshots("openai", 12_000, model="openai/gpt-4.1-mini")
    bare = await _screenshots("openai", 12_000, model="gpt-4.1-mini")
    kept = str(routed.payload).count(SHOT)
    assert kept == str(bare.payload).count(SHOT)
    assert routed.tokens == bare.tokens <= 12_000
    assert kept * openai_image_tokens(1920, 1080, model="gpt-4.1-mini") < routed.tokens


@pytest.mark.parametrize(
    ("model", "vendor"),
    [
        ("claude-sonnet-4-5", anthropic_image_tokens),  # Anthropic's OpenAI-compatible endpoint
        ("anthropic/claude-opus-4-7", anthropic_image_tokens),  # OpenRouter's name
        ("gemini-2.5-flash", gemini_image_tokens),  # Gemini's OpenAI-compatible endpoint
    ],
)
@pytest.mark.parametrize("detail", [None, "low"])
def test_an_openai_shaped_request_to_another_vendors_model_counts_as_it_bills(
    model: str, vendor: Callable[..., int], detail: str | None
) -> None:
    """Claude and Gemini take OpenAI Chat requests (their OpenAI compatibility endpoints, a
    gateway) and bill an image by their own rule, which ignores ``detail``: a 1920 x 1080
    screenshot counted 1105 by OpenAI's tiles (85 at ``detail: low``) where Claude Sonnet 4.5
    bills 1600 and Gemini 2.5 1548."""
    data = png(1920, 1080)
    for provider in ("openai", "openai-responses"):
        got = image_tokens(data, provider, model=model, detail=detail)
        assert got >= vendor(1920, 1080, model=model)
        assert got >= openai_image_tokens(1920, 1080, model=model, detail=detail)


@pytest.mark.anyio
async def test_a_chat_render_for_a_claude_model_fits_its_budget_as_claude_bills() -> None:
    """Screenshots rendered in OpenAI's shape for ``claude-sonnet-4-5`` (Anthropic's OpenAI
    SDK compatibility): the plan and ``out.tokens`` count each as Claude bills it, so the
    images kept fit the budget at Claude's count."""
    model = "claude-sonnet-4-5"
    out = await _screenshots("openai", 10_000, model=model)
    kept = str(out.payload).count(SHOT)
    assert kept >= 1
    assert out.tokens == payload_tokens(out.payload, "openai", model) <= 10_000
    assert kept * anthropic_image_tokens(1920, 1080, model=model) < out.tokens
    assert abs(out.report.tokens_estimated - out.tokens) <= 20
