"""Media that is text: a text file given inline (``text/plain``, ``text/csv``...).

The Gemini exporter sends such a file as it came, as ``inlineData``, and Gemini reads it as
its text: "plain-text documents are tokenized as text" (Google Cloud, Gemini "Document
understanding"; the Gemini API's "Document understanding" guide: documents other than PDFs
are seen "as pure text"). Counted a flat 765 tokens (``IMAGE_TOKENS``) whatever its length, a
file of 20,000 tokens passed a 12,000-token budget. The other exporters send it as a short
text placeholder, which the plan and the payload already count.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.inject.payload import payload_tokens
from ctxengine.tokens import IMAGE_TOKENS, count_tokens
from ctxengine.transcript import Image, Message, Text, ToolCall

PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini"]
#: A text file of about 20,000 tokens (o200k), well past 765.
TEXT = "".join(f"Row {i}: revenue {i * 37 % 1000} units, region {i % 7}.\n" for i in range(1500))
DATA = base64.b64encode(TEXT.encode()).decode()


async def _render(provider: str, where: str, budget: int, media: str = "text/plain") -> Any:
    engine = ContextEngine("gpt-4o", Budget(total=budget))
    async with engine.session("text-media") as s:
        doc = Image(media, data=DATA, name="rows.txt")
        if where == "user":
            s.extend([Message("user", (Text("Sum the rows."), doc)), Message.assistant("Done.")])
        else:  # a tool result that returns the file
            call = ToolCall("c1", "read_file", {"path": "rows.txt"})
            s.extend(
                [
                    Message("user", (Text("Sum the rows."),)),
                    Message.assistant("", [call]),
                    Message.tool("c1", [Text("rows.txt:"), doc], name="read_file"),
                    Message.assistant("Done."),
                ]
            )
        await s.user_message("And the mean?")
        return await s.render(provider)


def test_the_file_is_long() -> None:
    assert count_tokens(TEXT, model="gpt-4o") > 15_000


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["user", "tool"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_text_file_is_counted_as_the_provider_reads_it(provider: str, where: str) -> None:
    """Where the file's data is sent, its text is counted, and the plan agrees with the
    payload; elsewhere its placeholder is sent, which the plan does not count less than."""
    out = await _render(provider, where, 100_000)
    sent = DATA in str(out.payload)
    assert sent == (provider == "gemini")
    text = count_tokens(TEXT, model="gpt-4o")
    if sent:
        assert out.tokens > text
    else:
        assert out.tokens < IMAGE_TOKENS + 200
    assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o")
    if sent:
        assert abs(out.report.tokens_estimated - out.tokens) <= 20
    assert out.report.tokens_estimated >= out.tokens - 20


@pytest.mark.anyio
@pytest.mark.parametrize("media", ["text/plain", "text/csv", "text/x-python"])
async def test_a_text_file_is_not_sent_to_gemini_in_a_budget_it_does_not_fit(media: str) -> None:
    out = await _render("gemini", "user", 12_000, media)
    assert DATA not in str(out.payload)
    assert out.tokens <= 12_000 and out.report.fits
    assert out.tokens == payload_tokens(out.payload, "gemini", "gpt-4o")


def test_the_payload_counts_an_inline_text_file_by_its_text() -> None:
    """A Gemini payload passed to the counter as it is: the ``inlineData`` text file counts
    its text's tokens, with the tokenizer of the model."""
    part = {"inlineData": {"mimeType": "text/csv", "data": DATA}}
    payload = {"contents": [{"role": "user", "parts": [{"text": "sum"}, part]}]}
    bare = {"contents": [{"role": "user", "parts": [{"text": "sum"}]}]}
    added = payload_tokens(payload, "gemini", "gpt-4o") - payload_tokens(bare, "gemini", "gpt-4o")
    assert added == count_tokens(TEXT, model="gpt-4o")


@pytest.mark.anyio
@pytest.mark.parametrize("data", ["\ud800 not base64", "é" * 40, "====", ""])
async def test_a_text_file_that_is_not_base64_is_counted_without_an_error(data: str) -> None:
    """Gemini refuses such data; counting it never raises (a lone surrogate counts as "?")."""
    engine = ContextEngine("gpt-4o", Budget(total=20_000))
    async with engine.session("bad-data") as s:
        s.extend([Message("user", (Text("read"), Image("text/plain", data=data)))])
        await s.user_message("and?")
        out = await s.render("gemini")
    assert out.tokens == payload_tokens(out.payload, "gemini", "gpt-4o")
    assert abs(out.report.tokens_estimated - out.tokens) <= 20


def test_the_payload_counts_a_text_document_by_its_text() -> None:
    """An Anthropic ``document`` with a text source in a payload counted as it came (as
    ``count_messages`` and the LangChain trim counter read it: its text), not as a flat 765."""
    part = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": TEXT},
        "title": "rows",
    }
    payload = {"messages": [{"role": "user", "content": [{"type": "text", "text": "sum"}, part]}]}
    bare = {"messages": [{"role": "user", "content": [{"type": "text", "text": "sum"}]}]}
    added = payload_tokens(payload, "anthropic", "gpt-4o") - payload_tokens(
        bare, "anthropic", "gpt-4o"
    )
    assert added == count_tokens("[document: rows]\n" + TEXT, model="gpt-4o")
