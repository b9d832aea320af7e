"""Session.run: the overflow-recovery ladder against a fake model that rejects N times."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, count_messages
from ctxengine.errors import ConfigError, ConfigTypeError, ContextOverflowError
from ctxengine.inject.images import kept_images
from ctxengine.transcript import Image, Message, Text, ToolCall
from pdf_bytes import pdf_plain
from screenshots import data, image_parts, screenshots

pytestmark = pytest.mark.anyio

OVERFLOW = "Error code: 400 - prompt is too long: 208423 tokens > 200000 maximum"


class Model:
    def __init__(self, rejections: int) -> None:
        self.left = rejections
        self.sizes: list[int] = []

    async def __call__(self, payload: dict[str, Any]) -> str:
        self.sizes.append(len(str(payload)))
        if self.left:
            self.left -= 1
            raise RuntimeError(OVERFLOW)
        return "accepted"


async def _fill(s: Any) -> None:
    for i in range(40):
        await s.user_message(f"step {i}: please look at file_{i}.py and report " + "x " * 60)
        await s.assistant_message("", [ToolCall(f"c{i}", "read", {"path": f"file_{i}.py"})])
        # Every tenth result is a whole large file: what persistent truncation has to cut once
        # compaction has gone as far as the protected summary lets it.
        lines = 6000 if i % 10 == 9 else 600
        await s.tool_result(f"c{i}", f"line {i}\n" * lines, name="read")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
async def test_the_ladder_for_n_rejections(n: int) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=16000))
    async with engine.session("r") as s:
        await _fill(s)
        model = Model(n)
        if n == 5:
            with pytest.raises(ContextOverflowError, match="compact, compact, compact, truncate"):
                await s.run(model)
            return
        answer, out = await s.run(model)
        steps = [r["step"] for r in out.report.recovery]
        assert answer == "accepted"
        expected = ["render"] + ["compact"] * min(n, 3)
        if n == 4:
            expected.append("truncate_tool_results")
        assert steps[: len(expected)] == expected and out.report.recovery[-1]["ok"]
        assert model.sizes[-1] < model.sizes[0]  # every retry sent less
        if n <= 3:
            budgets = [r["budget"] for r in out.report.recovery]
            assert budgets == sorted(budgets, reverse=True) and budgets[-1] < 16000


async def test_the_error_carries_the_numbers_and_other_errors_pass_unchanged() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=16000))
    async with engine.session("r") as s:
        await _fill(s)
        with pytest.raises(ContextOverflowError) as info:
            await s.run(Model(99))
        assert (info.value.tokens, info.value.limit) == (208423, 200000)
        assert info.value.tried[0] == "render" and "truncate" in info.value.tried

        async def rate_limited(payload: dict[str, Any]) -> str:
            raise RuntimeError("429 Too Many Requests")

        with pytest.raises(RuntimeError, match="429"):
            await s.run(rate_limited)


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"max_compactions": "3"}, ConfigTypeError, "max_compactions is '3' (str); expected"),
        ({"max_compactions": 2.0}, ConfigTypeError, "max_compactions is 2.0 (float)"),
        ({"max_compactions": -1}, ConfigError, "max_compactions is -1; expected an int >= 0"),
        ({"shrink": "0.5"}, ConfigTypeError, "shrink is '0.5' (str); expected a number in"),
        ({"shrink": 1.5}, ConfigError, "shrink is 1.5; expected a number in (0, 1)"),
        ({"shrink": 0}, ConfigError, "shrink is 0; expected"),
    ],
)
async def test_run_refuses_options_that_are_not_numbers_in_range(
    options: dict[str, Any], error: type[Exception], named: str
) -> None:
    """They were only read after an overflow, where a wrong one failed with a bare TypeError
    (or, for shrink above 1, grew the budget it was meant to shrink)."""
    engine = ContextEngine("gpt-4o", Budget(total=8000))
    model = Model(0)
    async with engine.session("bad-options") as s:
        await s.user_message("hi")
        with pytest.raises(error) as info:
            await s.run(model, **options)
    assert str(info.value).startswith(named)
    assert model.sizes == []  # refused before any call


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: {n} tokens > {limit} maximum",  # Anthropic: input tokens
        # OpenAI: what it was asked for ("requested"), the input not said apart
        "This model's maximum context length is {limit} tokens. However, your messages "
        "resulted in {n} tokens. Please reduce the length of the messages.",
    ],
)
async def test_the_provider_ratio_shrinks_the_budget_whichever_count_it_states(
    message: str,
) -> None:
    # a provider whose window is far below the budget: one retry at its ratio fits (the
    # OpenAI wording used to give no input count, and the run fell back to 0.75 a step)
    engine = ContextEngine("gpt-4.1", Budget(total=20_000))
    async with engine.session("ratio") as s:
        await _fill(s)
        sizes: list[int] = []

        async def model(payload: dict[str, Any]) -> str:
            n = len(str(payload)) // 4
            sizes.append(n)
            if n > 3000:
                raise RuntimeError(message.format(n=n, limit=3000))
            return "accepted"

        answer, out = await s.run(model)
        assert answer == "accepted" and sizes[0] > 3000 >= sizes[-1]
        assert [r["step"] for r in out.report.recovery][:2] == ["render", "compact"]
        assert out.report.recovery[1]["budget"] < 20_000 * 3000 / sizes[0]


def _window(limit: int, sent: list[int], error: str) -> Any:
    """A model whose window is ``limit`` tokens (``gpt-4o`` counts): it notes each payload's
    count in ``sent`` and refuses one over ``limit`` with ``error`` (formatted with ``n``,
    ``limit`` and ``excess``)."""

    async def model(payload: dict[str, Any]) -> str:
        n = count_messages(payload["messages"], model="gpt-4o")
        sent.append(n)
        if n > limit:
            raise RuntimeError(error.format(n=n, limit=limit, excess=n - limit))
        return "ok"

    return model


async def test_a_budget_above_the_real_window_shrinks_from_what_was_sent() -> None:
    """A budget above the model's real window (a local model, a proxy): each retry was planned
    from the configured budget, not from the payload the provider refused, so while that
    budget stayed above the payload the same payload went out again, until the compactions
    were spent."""
    limit = 8000
    engine = ContextEngine("gpt-4o", Budget(total=30_000))
    async with engine.session("window") as s:
        for i in range(12):
            await s.user_message(f"question {i}: " + "please look at this and explain it. " * 40)
            await s.assistant_message(f"answer {i}: " + "here is a long explanation. " * 60)
        await s.user_message("and now?")
        sent: list[int] = []
        model = _window(
            limit,
            sent,
            "Error code: 400 - This model's maximum context length is {limit} tokens. However, "
            "your messages resulted in {n} tokens. Please reduce the length of the messages.",
        )
        answer, out = await s.run(model)
    assert answer == "ok" and sent[0] > limit and len(sent) == 2
    assert [r["step"] for r in out.report.recovery] == ["render", "compact"]
    assert out.report.recovery[1]["budget"] < sent[0] and sent[1] <= limit


async def test_a_provider_that_says_only_the_excess_shrinks_the_budget_by_it() -> None:
    """Ollama says how many tokens too many and nothing else ("prompt too long; exceeded max
    context length by N tokens", the error ollama/ollama PR 17944 documents): the retry takes
    that many off what was sent instead of the fixed 0.75 step, so a window far below the
    budget is reached in one retry."""
    limit = 3000
    engine = ContextEngine("gpt-4o", Budget(total=20_000))
    async with engine.session("excess") as s:
        await _fill(s)
        sent: list[int] = []
        model = _window(
            limit,
            sent,
            '{{"error":"prompt too long; exceeded max context length by {excess} tokens"}}',
        )
        answer, out = await s.run(model)
    assert answer == "ok" and sent[0] > limit >= sent[-1]
    assert [r["step"] for r in out.report.recovery] == ["render", "compact"]
    assert out.report.recovery[1]["budget"] <= limit


# -- too many images ---------------------------------------------------------------------------


def _gateway(limit: int, sent: list[int], error: str) -> Any:
    """An Anthropic model behind a gateway that takes ``limit`` images per request: it notes
    the images of each payload in ``sent`` and refuses more with ``error`` (formatted with
    ``n`` and ``limit``)."""

    async def model(payload: dict[str, Any]) -> str:
        n = image_parts(payload["messages"])
        sent.append(n)
        if n > limit:
            raise RuntimeError(error.format(n=n, limit=limit))
        return "ok"

    return model


@pytest.mark.parametrize(
    ("error", "limit"),
    [
        # Anthropic, anthropics/claude-code issue 24541: the excess is taken off
        (
            'Error: 400 {{"type":"error","error":{{"type":"invalid_request_error","message":'
            '"too many images and documents: {n} + 0 > {limit}"}}}}',
            50,
        ),
        # an OpenAI-compatible gateway, anomalyco/opencode issue 47721
        (
            "Error: 400 request contains {n} images, exceeding the maximum of {limit} allowed "
            "per request",
            50,
        ),
        # Azure OpenAI, the-open-agent/openagent issue 874: the maximum alone
        ("Error: 400 Too many images in request. Max is {limit}.", 10),
    ],
    ids=["anthropic", "gateway", "azure-openai"],
)
async def test_too_many_images_renders_again_with_the_newest_images(error: str, limit: int) -> None:
    engine = ContextEngine("gpt-4.1", Budget(total=200_000))
    async with engine.session("shots") as s:
        await s.user_message("Fill in the form.")
        s.extend(screenshots(70, "tool"))
        await s.user_message("Is it submitted?")
        sent: list[int] = []
        answer, out = await s.run(_gateway(limit, sent, error), provider="anthropic")
        assert answer == "ok" and sent == [70, limit]  # one retry, at the limit
        steps = out.report.recovery
        assert [r["step"] for r in steps] == ["render", "fewer_images"] and steps[-1]["ok"]
        assert steps[0]["error"] == "too_many_images"
        assert (steps[0]["images"], steps[0]["max_images"]) == (70, limit)
        kept = [i for i in range(70) if data(i) in str(out.payload)]
        assert kept == list(range(70 - limit, 70))  # the newest
        # the next turn goes out within the limit at once: the images are still history
        s.extend(screenshots(2, "tool", start=70))
        await s.user_message("And now?")
        answer, out = await s.run(_gateway(limit, sent, error), provider="anthropic")
        # the oldest go a tenth of the limit at a time (the prefix stays the same meanwhile)
        assert answer == "ok" and sent[2:] == [kept_images(72, limit)]
        assert sent[2] <= limit and [r["step"] for r in out.report.recovery] == ["render"]


async def test_the_many_image_dimension_error_keeps_twenty_images() -> None:
    """Anthropic, anthropics/claude-code issue 24630: over 20 images in a request, each must be
    within 2000 px; a large screenshot in a long session made every later request fail."""
    error = (  # a template for _gateway: its braces doubled
        'Error: 400 {{"type":"error","error":{{"type":"invalid_request_error","message":'
        '"messages.19.content.27.image.source.base64.data: At least one of the image '
        'dimensions exceed max allowed size for many-image requests: 2000 pixels"}}}}'
    )
    engine = ContextEngine("gpt-4.1", Budget(total=200_000))
    async with engine.session("large") as s:
        await s.user_message("Check the dashboard.")
        s.extend(screenshots(30, "tool"))
        await s.user_message("Done?")
        sent: list[int] = []
        answer, out = await s.run(_gateway(20, sent, error), provider="anthropic")
    assert answer == "ok" and sent == [30, 20]
    assert out.report.recovery[0]["limit"] == 20


async def test_a_gateway_that_keeps_refusing_gets_its_error_back() -> None:
    error = "Error: 400 request contains {n} images, exceeding the maximum of {limit} allowed"
    engine = ContextEngine("gpt-4.1", Budget(total=200_000))
    async with engine.session("stuck") as s:
        await s.user_message("Look.")
        s.extend(screenshots(8, "tool"))
        await s.user_message("Well?")
        sent: list[int] = []

        async def refuses(payload: dict[str, Any]) -> str:
            sent.append(image_parts(payload["messages"]))
            raise RuntimeError(error.format(n=8, limit=7))  # whatever it is sent

        with pytest.raises(RuntimeError, match="exceeding the maximum of 7"):
            await s.run(refuses, provider="anthropic")
        assert sent == [8, 7, 6, 5]  # three renders with fewer images, then the error itself

        sent.clear()
        with pytest.raises(RuntimeError, match="exceeding the maximum of 7"):
            await s.run(refuses, provider="openai")  # OpenAI Chat: no image part to take out
        assert sent == [0]


async def test_a_refusal_counting_pages_is_answered_with_the_pages_counted() -> None:
    """Anthropic refuses a request by one count of document pages and images ("Too much
    media: 0 document pages + 102 images > 100", anthropics/claude-code issue 19822), and the
    render's limit counts both (``PAGES_COUNTED``): the retry's limit is what was sent, pages
    included, less the excess, so a gateway that takes 60 gets 60 and not 60 less the pages."""
    sent: list[tuple[int, int]] = []

    async def gateway(payload: dict[str, Any]) -> str:
        images = image_parts(payload["messages"])
        pages = 20 * str(payload["messages"]).count("'type': 'document'")
        sent.append((pages, images))
        if pages + images > 60:
            raise RuntimeError(
                'Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":'
                f'"Too much media: {pages} document pages + {images} images > 60"}}}}'
            )
        return "ok"

    engine = ContextEngine("gpt-4.1", Budget(total=400_000))
    async with engine.session("pdf and shots") as s:
        s.extend([Message("user", (Text("Fill in the form from this."), _pdf_part()))])
        s.extend(screenshots(50, "tool"))
        await s.user_message("Is it submitted?")
        answer, out = await s.run(gateway, provider="anthropic")
        steps = out.report.recovery
        assert answer == "ok" and sent[0] == (20, 50)
        assert (steps[0]["images"], steps[0]["max_images"]) == (70, 60)
        assert sent[1] == (0, 50)  # the oldest part, the PDF, went whole; every image stayed


def _pdf_part() -> Image:
    return Image("application/pdf", data=pdf_plain(20), name="form.pdf")
