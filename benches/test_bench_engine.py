"""Render benchmarks, side by side with LangChain's ``trim_messages`` in the same run.

- cold: a ~1,000-message real session (pi/OpenClaw, 914 messages) into 32k tokens, counts not
  cached, vs ``trim_messages`` with an exact tiktoken counter;
- warm: one more exchange (an answer and a question) on that session, then render, vs
  ``trim_messages`` of the grown list with the exact counter memoized per message;
- scaling: cold and warm renders of synthetic sessions of 1k, 10k and 100k grains; the warm
  ones also in one group per size with the memoized ``trim_messages`` peer on the same session
  (``render-warm-synthetic-<n>``: the ratio of that run);
- images: warm renders of a screenshot session past Anthropic's 100 images, beside the same
  session sent whole (``render-warm-images``).

Each warm round adds an exchange, so a session grows with the rounds run: the two sides of a
warm comparison run the same number of rounds (:data:`WARM_ROUNDS`, not the benchmark's own
calibration, which would run the faster side longer on a longer session), so both time the
same sequence of sessions.

Run ``pytest benches/test_bench_engine.py --benchmark-enable --benchmark-only`` and compare the
``mean`` columns inside each group.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import convert_to_messages, trim_messages

from ctxengine import Budget, ContextEngine, clear_cache
from ctxengine.transcript import Image, Message, Text, ToolCall, Transcript, load
from offline_tiktoken import TRANSCRIPTS, encoding
from pdf_bytes import pdf_plain
from screenshots import screenshots

SESSION = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"
BUDGET = 32_000
#: Rounds of each side of a warm comparison, by session size (see the module docstring).
WARM_ROUNDS = {1_000: 200, 10_000: 100, 100_000: 30}


def _rounds(benchmark, fn, rounds: int, *args):  # type: ignore[no-untyped-def]
    """``fn(*args)`` timed ``rounds`` times, one call per round, no warm-up round."""
    return benchmark.pedantic(fn, args=args, rounds=rounds, iterations=1, warmup_rounds=0)


@pytest.fixture(scope="module")
def transcript():  # type: ignore[no-untyped-def]
    return load(SESSION)


def _tiktoken_counter():  # type: ignore[no-untyped-def]
    """An exact o200k message counter, nothing kept between calls."""
    enc = encoding("o200k_base")

    def tokens(text: str) -> int:
        return len(enc.encode_ordinary(text))

    def count(messages) -> int:  # type: ignore[no-untyped-def]
        total = 3
        for m in messages:
            content = m.content if isinstance(m.content, str) else str(m.content)
            total += 4 + tokens(content)
            for call in getattr(m, "tool_calls", None) or []:
                total += tokens(call["name"] + str(call["args"]))
        return total

    return count


class Runner:
    """Keeps one event loop, on the benchmark's own thread, for a whole benchmark: rounds
    measure the render, not a hop to a loop in another thread (a blocking portal added about
    0.4 ms per call)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def call(self, fn, *args):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(fn(*args))

    def close(self) -> None:
        self.loop.close()


@pytest.fixture
def runner():  # type: ignore[no-untyped-def]
    r = Runner()
    yield r
    r.close()


async def _open(engine: ContextEngine, messages):  # type: ignore[no-untyped-def]
    """A session of ``engine`` holding ``messages`` and a question, with its context manager:
    keep it, as ``async with`` does (a dropped one closes the session when it is collected,
    and a closed session has dropped its session grains, the compaction summary among them)."""
    cm = engine.session("bench")
    session = await cm.__aenter__()
    session.extend(messages)
    await session.user_message("What is the status of the task?")
    return cm, session


def _bench_langchain(benchmark, transcript, extra: list[dict[str, str]]):  # type: ignore[no-untyped-def]
    """LangChain's trim of the whole session (plus ``extra``) with an exact tiktoken counter."""
    lc_messages = convert_to_messages(transcript.to("openai")["messages"] + extra)
    counter = _tiktoken_counter()
    kept = benchmark(
        trim_messages,
        lc_messages,
        max_tokens=BUDGET,
        token_counter=counter,
        strategy="last",
        include_system=True,
        start_on="human",
    )
    assert 0 < len(kept) < len(lc_messages)


@pytest.mark.benchmark(group="render-cold-1k-messages-32k")
def test_langchain_trim_messages_cold(benchmark, transcript) -> None:  # type: ignore[no-untyped-def]
    _bench_langchain(benchmark, transcript, [])


@pytest.mark.benchmark(group="render-cold-1k-messages-32k")
def test_ctxengine_render_cold(benchmark, transcript, runner) -> None:  # type: ignore[no-untyped-def]
    async def cold():  # type: ignore[no-untyped-def]
        clear_cache()
        engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
        cm, session = await _open(engine, transcript)
        try:
            return await session.render()
        finally:
            await cm.__aexit__(None, None, None)

    out = benchmark(runner.call, cold)
    assert out.tokens <= BUDGET


def memoized_message_counter():  # type: ignore[no-untyped-def]
    """The strongest fair exact counter for repeated trims of a growing session: each message's
    count (o200k, the same accounting as :func:`_tiktoken_counter`) is computed once and kept
    by message identity (LangChain messages are not hashable), so a trim's binary search costs
    one dict lookup per message, summed at C speed; what a user would write to make
    ``trim_messages`` cheap on every turn."""
    enc = encoding("o200k_base")
    memo: dict[int, tuple[object, int]] = {}

    def one(m):  # type: ignore[no-untyped-def]
        hit = memo.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        content = m.content if isinstance(m.content, str) else str(m.content)
        n = 4 + len(enc.encode_ordinary(content))
        for call in getattr(m, "tool_calls", None) or []:
            n += len(enc.encode_ordinary(call["name"] + str(call["args"])))
        memo[id(m)] = (m, n)
        return n

    def count(messages) -> int:  # type: ignore[no-untyped-def]
        return 3 + sum(map(one, messages))

    return count


def langchain_warm_round(transcript):  # type: ignore[no-untyped-def]
    """A function doing one warm round of the memoized LangChain peer: the same exchange as
    ours appended to its message list, then ``trim_messages`` of the whole list (the messages
    are converted once, as a caller keeping them would)."""
    lc_messages = convert_to_messages(transcript.to("openai")["messages"])
    trim = dict(
        max_tokens=BUDGET,
        token_counter=memoized_message_counter(),
        strategy="last",
        include_system=True,
        start_on="human",
    )
    trim_messages(lc_messages, **trim)  # warm the memo

    def warm_round():  # type: ignore[no-untyped-def]
        exchange = [{"role": "assistant", "content": "ok"}, "one more question"]
        lc_messages.extend(convert_to_messages(exchange))
        return trim_messages(lc_messages, **trim)

    return warm_round, lc_messages


@pytest.mark.benchmark(group="render-warm-1k-messages-32k")
def test_memoized_langchain_trim_messages_warm(benchmark, transcript) -> None:  # type: ignore[no-untyped-def]
    """The warm peer of issue 14: ``trim_messages`` with the exact counter memoized across calls
    per message, one more exchange per call, as in :func:`_bench_warm`."""
    benchmark.extra_info.update(impl="langchain trim_messages (exact, memoized)", baseline=True)
    warm, lc_messages = langchain_warm_round(transcript)
    kept = _rounds(benchmark, warm, WARM_ROUNDS[1_000])
    assert 0 < len(kept) < len(lc_messages)


@pytest.mark.benchmark(group="render-warm-1k-messages-32k")
def test_langchain_trim_messages_warm(benchmark, transcript) -> None:  # type: ignore[no-untyped-def]
    # LangChain keeps no state between calls: a "warm" trim is the same full pass plus one message.
    _bench_langchain(benchmark, transcript, [{"role": "user", "content": "one more question"}])


def _bench_warm(benchmark, runner, messages, rounds: int = WARM_ROUNDS[1_000]) -> None:  # type: ignore[no-untyped-def]
    """Render once, then measure ``rounds`` rounds: one more exchange appended, render again."""
    engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
    cm, session = runner.call(_open, engine, messages)
    runner.call(session.render)

    async def warm():  # type: ignore[no-untyped-def]
        session.extend([Message.assistant("ok"), Message.user("one more question")])
        return await session.render()

    out = _rounds(benchmark, runner.call, rounds, warm)
    assert out.tokens <= BUDGET
    runner.call(cm.__aexit__, None, None, None)  # held open until here: a dropped one closes


@pytest.mark.benchmark(group="render-warm-1k-messages-32k")
def test_ctxengine_render_warm(benchmark, transcript, runner) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="ctxengine render (warm)")
    _bench_warm(benchmark, runner, transcript)


def _synthetic(n_grains: int) -> list[Message]:
    messages: list[Message] = []
    i = 0
    while len(messages) < n_grains:
        messages.append(Message.user(f"request {i}: check module_{i}.py for the bug"))
        call = ToolCall(f"c{i}", "read", {"path": f"module_{i}.py"})
        messages.append(Message.assistant(f"looking at module_{i}", [call]))
        messages.append(Message.tool(f"c{i}", f"def f_{i}():\n    return {i}\n" * 5))
        messages.append(Message.assistant(f"module_{i} is fine"))
        i += 1
    return messages


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
@pytest.mark.benchmark(group="render-warm-scaling")
def test_ctxengine_warm_scaling(benchmark, runner, n: int) -> None:  # type: ignore[no-untyped-def]
    _bench_warm(benchmark, runner, _synthetic(n), WARM_ROUNDS[n])


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_ctxengine_warm_vs_memoized_langchain(benchmark, runner, n: int) -> None:  # type: ignore[no-untyped-def]
    """Our warm render of the synthetic session of ``n`` grains, in one group with the
    memoized LangChain peer on the same messages (issue 14: flat, and ahead of the peer)."""
    benchmark.group = f"render-warm-synthetic-{n}"
    benchmark.extra_info.update(impl="ctxengine render (warm)")
    _bench_warm(benchmark, runner, _synthetic(n), WARM_ROUNDS[n])


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_memoized_langchain_trim_messages_warm_synthetic(benchmark, n: int) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"render-warm-synthetic-{n}"
    benchmark.extra_info.update(impl="langchain trim_messages (exact, memoized)", baseline=True)
    warm, lc_messages = langchain_warm_round(Transcript(tuple(_synthetic(n)), source_format="x"))
    kept = _rounds(benchmark, warm, WARM_ROUNDS[n])
    assert 0 < len(kept) <= len(lc_messages)


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
@pytest.mark.benchmark(group="render-cold-scaling")
def test_ctxengine_cold_scaling(benchmark, runner, n: int) -> None:  # type: ignore[no-untyped-def]
    """A new engine and session on ``n`` grains, counts not cached, one render."""
    _bench_cold(benchmark, runner, _synthetic(n))


def _bench_cold(benchmark, runner, messages) -> None:  # type: ignore[no-untyped-def]
    """Time a cold render of ``messages``: a new engine and session, counts not cached."""

    async def cold():  # type: ignore[no-untyped-def]
        clear_cache()
        engine = ContextEngine("gpt-4o", Budget(total=BUDGET))
        cm, session = await _open(engine, messages)
        try:
            return await session.render()
        finally:
            await cm.__aexit__(None, None, None)

    out = benchmark(runner.call, cold)
    assert out.tokens <= BUDGET


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_cold_scaling_against_langchain(benchmark, runner, n: int) -> None:  # type: ignore[no-untyped-def]
    """The cold goal of issue 14 at ``n`` grains, side by side in one group: our cold render
    (a new engine and session, counts not cached) and LangChain's ``trim_messages`` of the same
    session with the exact counter (nothing kept between calls), its group's baseline."""
    benchmark.group = f"render-cold-{n // 1000}k-synthetic-32k"
    benchmark.extra_info.update(impl=f"ctxengine render (cold, {n:,} grains)")
    _bench_cold(benchmark, runner, _synthetic(n))


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_langchain_cold_scaling(benchmark, n: int) -> None:  # type: ignore[no-untyped-def]
    """The peer of :func:`test_cold_scaling_against_langchain`: ``trim_messages`` of the same
    synthetic session plus the same question, with the exact tiktoken counter."""
    benchmark.group = f"render-cold-{n // 1000}k-synthetic-32k"
    benchmark.extra_info.update(
        impl=f"langchain trim_messages (exact, {n:,} grains)", baseline=True
    )
    session = Transcript((*_synthetic(n), Message.user("What is the status of the task?")))
    lc_messages = convert_to_messages(session.to("openai")["messages"])
    counter = _tiktoken_counter()
    kept = benchmark(
        trim_messages,
        lc_messages,
        max_tokens=BUDGET,
        token_counter=counter,
        strategy="last",
        include_system=True,
        start_on="human",
    )
    assert 0 < len(kept) <= len(lc_messages)
    assert len(kept) < len(lc_messages) or n < 10_000  # 1,000 grains fit in 32k whole


#: A computer-use session past Anthropic's 100 images: screenshots in tool results, at a budget
#: whose window holds about 500 of them (an image whose data gives no size counts 765 tokens).
SCREENSHOTS = 600
IMAGES_BUDGET = 400_000
IMAGES_ROUNDS = 60


def _bench_warm_images(benchmark, runner, max_images: int | None) -> None:  # type: ignore[no-untyped-def]
    """Render once, then measure rounds of one more screenshot step, then render again."""
    engine = ContextEngine("gpt-4.1", Budget(total=IMAGES_BUDGET), max_images=max_images)
    cm, session = runner.call(_open, engine, screenshots(SCREENSHOTS, "tool"))
    runner.call(session.render, "anthropic")
    step = [SCREENSHOTS]

    async def warm():  # type: ignore[no-untyped-def]
        session.extend(screenshots(1, "tool", start=step[0]))
        step[0] += 1
        return await session.render("anthropic")

    out = _rounds(benchmark, runner.call, IMAGES_ROUNDS, warm)
    omitted = out.report.hygiene["counts"].get("image_omitted", 0)
    assert (omitted >= 100) == (max_images is None)  # past the limit: hundreds cut
    runner.call(cm.__aexit__, None, None, None)


@pytest.mark.benchmark(group="render-warm-images")
def test_ctxengine_warm_past_the_image_limit(benchmark, runner) -> None:  # type: ignore[no-untyped-def]
    """A warm render that sends the newest 100 screenshots and the older ones as placeholders,
    beside the same session sent whole (its baseline): the cost of the cut, which follows the
    steps of the cut, not the images cut."""
    benchmark.extra_info.update(impl="ctxengine render (warm, past the image limit)")
    _bench_warm_images(benchmark, runner, None)


@pytest.mark.benchmark(group="render-warm-images")
def test_ctxengine_warm_within_the_image_limit(benchmark, runner) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="ctxengine render (warm, no image cut)", baseline=True)
    _bench_warm_images(benchmark, runner, 100_000)


#: Rounds of each side of the warm renders beside a PDF.
PDF_ROUNDS = 100


def _bench_warm_pdf(benchmark, runner, pdf: bool) -> None:  # type: ignore[no-untyped-def]
    """Warm renders of the 1k synthetic session for Anthropic, all of it within a 1M budget,
    with or without a 3-page report sent at its start."""
    head = [Message("user", (Text("Keep this report."), Image("application/pdf", pdf_plain(3))))]
    messages = [*(head if pdf else [Message.user("Keep this in mind.")]), *_synthetic(1_000)]
    engine = ContextEngine("gpt-4.1", Budget(total=1_000_000))
    cm, session = runner.call(_open, engine, messages)
    runner.call(session.render, "anthropic")

    async def warm():  # type: ignore[no-untyped-def]
        session.extend([Message.assistant("ok"), Message.user("one more question")])
        return await session.render("anthropic")

    out = _rounds(benchmark, runner.call, PDF_ROUNDS, warm)
    assert ('"document"' in str(out.payload).replace("'", '"')) == pdf
    runner.call(cm.__aexit__, None, None, None)


@pytest.mark.benchmark(group="render-warm-pdf")
def test_ctxengine_warm_beside_a_pdf(benchmark, runner) -> None:  # type: ignore[no-untyped-def]
    """A warm render of a session holding a PDF, beside the same session without it (its
    baseline): the PDF's media check looks at the new messages only, so the two are level."""
    benchmark.extra_info.update(impl="ctxengine render (warm, a PDF in the session)")
    _bench_warm_pdf(benchmark, runner, True)


@pytest.mark.benchmark(group="render-warm-pdf")
def test_ctxengine_warm_without_a_pdf(benchmark, runner) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info.update(impl="ctxengine render (warm, no PDF)", baseline=True)
    _bench_warm_pdf(benchmark, runner, False)
