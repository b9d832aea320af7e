"""The compaction pipeline reads the extractive summarizer's prose of a whole stretch in one
pass, where a model summarizer (or a subclass) gets chunks and a merge of their summaries.

A merge keeps the first goal and the newest decisions and progress notes of its parts, so
without a cap the one pass gives the chunked summary; it differs only where chunking read a
message in pieces (each piece's first line taken for a progress note) or a chunk's cap cut
its prose before its sections.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from ctxengine import ExtractiveSummarizer, Tokenizer
from ctxengine.compaction import CompactionConfig, CompactionResult, compact
from ctxengine.compaction.facts import first_line, parse_sections
from ctxengine.transcript import Message, load

from .helpers import CC_MAIN, PI

TOK = Tokenizer("o200k_base")


class _Chunked(ExtractiveSummarizer):
    """Summarized chunk by chunk, then merged (the path of any summarizer but the extractive
    one itself)."""


def _both(
    messages: list[Message], window: int, max_tokens: int = 200_000
) -> tuple[CompactionResult, CompactionResult]:
    config = CompactionConfig(window_tokens=window)

    async def main() -> tuple[CompactionResult, CompactionResult]:
        one = await compact(messages, max_tokens=max_tokens, tokenizer=TOK, config=config)
        chunked = await compact(
            messages,
            max_tokens=max_tokens,
            tokenizer=TOK,
            config=config,
            summarizer=_Chunked(tokenizer=TOK),
        )
        return one, chunked

    return anyio.run(main)


@pytest.mark.parametrize("path", [PI, CC_MAIN], ids=["pi", "claude-code"])
@pytest.mark.parametrize("window", [8_000, 32_000])
def test_without_a_cap_the_one_pass_is_the_chunked_summary(path: Path, window: int) -> None:
    messages = list(load(path).messages)
    one, chunked = _both(messages, window)
    assert one.ok and chunked.ok
    assert chunked.stats["chunks"] > (10 if window == 8_000 else 1)
    # one reading of the whole stretch, one call
    assert one.stats["chunks"] == 1 and one.stats["calls"] == 1
    assert one.summary == chunked.summary


def test_an_oversized_message_gives_its_own_first_line_as_progress() -> None:
    # one assistant message far over half the summarizer's window: chunking reads it in pieces
    long = "\n".join(f"step {i}: looked at part {i} of the parser" for i in range(600))
    messages = [
        Message.user("fix the parser"),
        Message.assistant("Reading the parser first.\n" + long),
        Message.user("and the lexer"),
        Message.assistant("The lexer is fine."),
    ]
    one, chunked = _both(messages, window=2_000)
    assert chunked.stats["chunks"] > len(messages)  # pieces
    progress = parse_sections(one.summary)["Progress"]
    firsts = {first_line(m.text) for m in messages if m.role == "assistant"}
    assert progress and set(progress) <= firsts
    assert "Reading the parser first." in progress


def test_a_cap_cuts_the_summary_once() -> None:
    """Under a cap the summary is still one reading of the stretch, capped once (no chunk
    summaries, each under its own cap, before it)."""
    messages = list(load(PI).messages)
    whole, _ = _both(messages, window=8_000)
    size = whole.summary_tokens
    capped, _ = _both(messages, window=8_000, max_tokens=size // 2)
    assert capped.ok and capped.summary_tokens <= size // 2
    assert capped.stats["calls"] == 1
