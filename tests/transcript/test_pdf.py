"""PDFs (``Image("application/pdf")``) are sent as the document part each API takes, not as
a text placeholder, and count by their pages (``tests/test_pdf_tokens.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ctxengine.inject.payload import payload_tokens
from ctxengine.tokens import IMAGE_TOKENS, count_messages, pdf_tokens
from ctxengine.transcript import Image, Message, Text, ToolCall, ToolResult, Transcript, load

from .helpers import PROVIDERS, assert_sdk_valid
from .test_variants import engine_payloads_valid

DATA = "JVBERi0xLjQKJcfsj6IK"
PDF = Image("application/pdf", data=DATA)
PDF_URL = Image("application/pdf", url="https://example.com/paper.pdf")
DATA_URL = f"data:application/pdf;base64,{DATA}"


def session(*media: Image) -> Transcript:
    call = ToolCall("c1", "fetch", {"path": "a.pdf"})
    return Transcript(
        (
            Message("user", (Text("Read these."), *media)),
            Message("assistant", (Text("Fetching."), call)),
            Message("tool", (ToolResult("c1", (Text("here"), *media)),)),
            Message("assistant", (Text("Echo:"), *media)),
            Message("user", (Text("Thanks."),)),
        ),
        "anthropic",
        {},
    )


def test_anthropic_sends_document_blocks_in_user_turns_and_tool_results() -> None:
    payload = session(PDF, PDF_URL).to("anthropic")
    assert_sdk_valid(payload, "anthropic")
    doc = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": DATA},
    }
    url_doc = {"type": "document", "source": {"type": "url", "url": PDF_URL.url}}
    user, _, results, assistant, _ = payload["messages"]
    assert user["content"][1:] == [doc, url_doc]
    assert results["content"][0]["content"][1:] == [doc, url_doc]
    assert [b["type"] for b in assistant["content"]] == ["text", "text", "text"]  # placeholders
    assert "application/pdf attachment" in assistant["content"][1]["text"]


def test_openai_chat_sends_inline_pdfs_in_user_messages_as_file_parts() -> None:
    payload = session(PDF, PDF_URL).to("openai")
    assert_sdk_valid(payload, "openai")
    user, _, result, assistant, _ = payload["messages"]
    assert user["content"][1] == {
        "type": "file",
        "file": {"file_data": DATA_URL, "filename": "document.pdf"},
    }
    # a file part takes no URL; tool results and assistant turns take no file at all
    assert user["content"][2] == {
        "type": "text",
        "text": f"[application/pdf attachment {PDF_URL.url} omitted]",
    }
    assert all(p["type"] == "text" for p in result["content"])
    assert isinstance(assistant["content"], list)
    assert all(p["type"] == "text" for p in assistant["content"])


def test_responses_sends_input_file_parts_in_user_messages_and_outputs() -> None:
    payload = session(PDF, PDF_URL).to("openai-responses")
    assert_sdk_valid(payload, "openai-responses")
    items = payload["input"]
    files = [
        {"type": "input_file", "file_data": DATA_URL, "filename": "document.pdf"},
        {"type": "input_file", "file_url": PDF_URL.url},
    ]
    assert items[0]["content"][1:] == files
    output = next(i for i in items if i["type"] == "function_call_output")
    assert output["output"][1:] == files
    echoes = [i for i in items if i.get("role") == "assistant"]
    assert all(isinstance(i["content"], str) for i in echoes)


@pytest.mark.parametrize("provider", ["anthropic", "openai", "openai-responses"])
def test_pdf_round_trips_through_each_provider(provider: str) -> None:
    media = (PDF, PDF_URL) if provider != "openai" else (PDF,)
    t = Transcript((Message("user", (Text("Read."), *media)),), provider, {})
    back = load(t.to(provider), format=provider)
    assert back[0].blocks == (Text("Read."), *media)
    assert "skipped_blocks" not in back.meta


def test_anthropic_document_import_export_import_keeps_the_blocks() -> None:
    doc = {
        "type": "document",
        "title": "Paper",
        "source": {"type": "base64", "media_type": "application/pdf", "data": DATA},
    }
    url = {"type": "document", "source": {"type": "url", "url": "https://example.com/x.pdf"}}
    first = load(
        [{"role": "user", "content": [doc, url, {"type": "text", "text": "sum up"}]}],
        format="anthropic",
    )
    again = load(first.to("anthropic"), format="anthropic")
    assert again[0].blocks == first[0].blocks
    named = Image("application/pdf", data=DATA, name="Paper")  # the title is kept
    assert first[0].blocks[:2] == (named, Image("application/pdf", url="https://example.com/x.pdf"))


def test_uploaded_file_ids_are_skipped_and_counted() -> None:
    chat = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "file", "file": {"file_id": "file-1"}},
            ],
        }
    ]
    t = load(chat, format="openai")
    assert t[0].blocks == (Text("hi"),) and t.meta["skipped_blocks"] == {"file": 1}
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_file", "file_id": "file-1"},
            ],
        }
    ]
    t = load(items, format="openai-responses")
    assert t[0].blocks == (Text("hi"),) and t.meta["skipped_blocks"] == {"input_file": 1}


def placeholder_tokens(provider: str) -> int:
    """Tokens of the same message with the placeholder text the exporters sent before."""
    text = Text("[application/pdf attachment omitted]")
    t = Transcript((Message("user", (Text("Read."), text)),), "anthropic", {})
    return payload_tokens(t.to(provider), provider, "gpt-4o")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_pdf_counts_its_pages_and_no_less_than_its_placeholder(provider: str) -> None:
    """``DATA`` is a PDF's header alone: one page, by its size."""
    tokens: dict[str, int] = {}
    for name, media in (("pdf", (PDF,)), ("none", ())):
        t = Transcript((Message("user", (Text("Read."), *media)),), "anthropic", {})
        tokens[name] = payload_tokens(t.to(provider), provider, "gpt-4o")
    assert tokens["pdf"] - tokens["none"] == pdf_tokens(DATA, provider, "gpt-4o")
    assert tokens["pdf"] > placeholder_tokens(provider)


def test_openai_count_messages_counts_a_file_part_by_its_pages() -> None:
    def msg(*part: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": "Read."}, *part]}]

    file = {"type": "file", "file": {"file_data": DATA_URL, "filename": "document.pdf"}}
    added = count_messages(msg(file), model="gpt-4o") - count_messages(msg(), model="gpt-4o")
    assert added == pdf_tokens(DATA, "openai", "gpt-4o") > IMAGE_TOKENS


def test_engine_renders_pdf_sessions_valid_for_every_provider() -> None:
    engine_payloads_valid(session(PDF, PDF_URL))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_engine_out_tokens_count_pdfs_as_the_plan_does(provider: str) -> None:
    """``out.tokens`` (cold and warm renders) counts the PDF as the plan counts it."""
    from ctxengine import Budget, ContextEngine

    async def run() -> list[int]:
        engine = ContextEngine("gpt-4o", Budget(total=20_000))
        async with engine.session("pdf") as s:
            s.extend([Message("user", (Text("Read."), PDF))])
            cold = (await s.render(provider)).tokens
            s.extend([Message("assistant", (Text("Done."),)), Message("user", (Text("Ok"),))])
            return [cold, (await s.render(provider)).tokens]

    cold, warm = asyncio.run(run())
    assert cold >= pdf_tokens(DATA, provider, "gpt-4o") and warm > cold
