"""LangChain messages into the neutral model: the media blocks LangChain passes to providers."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

import ctxengine
from ctxengine.errors import TranscriptError
from ctxengine.transcript import Image, Text, load

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
    "rkJggg=="
)
PDF_DATA = "JVBERi0xLjQK"
PDF = "application/pdf"

#: (block, the neutral block it is read as)
BLOCKS: dict[str, tuple[dict[str, Any], Text | Image]] = {
    "anthropic image base64": (
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        Image("image/png", data=PNG),
    ),
    "anthropic image url": (
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        Image("image/jpeg", url="https://example.com/a.png"),
    ),
    "v1 file base64": (
        {"type": "file", "base64": PDF_DATA, "mime_type": PDF},
        Image(PDF, data=PDF_DATA),
    ),
    "v1 file base64 with a filename": (
        {"type": "file", "base64": PDF_DATA, "mime_type": PDF, "filename": "report.pdf"},
        Image(PDF, data=PDF_DATA, name="report.pdf"),
    ),
    "v1 file base64 without a mime type": (
        {"type": "file", "base64": PDF_DATA, "extras": {"filename": "scan.png"}},
        Image("image/png", data=PDF_DATA, name="scan.png"),
    ),
    "v1 file url": (
        {"type": "file", "url": "https://example.com/report"},
        Image(PDF, url="https://example.com/report"),
    ),
    "v0 file base64": (
        {"type": "file", "source_type": "base64", "data": PDF_DATA, "mime_type": PDF},
        Image(PDF, data=PDF_DATA),
    ),
    "openai file part": (
        {
            "type": "file",
            "file": {"file_data": f"data:{PDF};base64,{PDF_DATA}", "filename": "a.pdf"},
        },
        Image(PDF, data=PDF_DATA, name="a.pdf"),
    ),
    "anthropic document base64": (
        {
            "type": "document",
            "source": {"type": "base64", "media_type": PDF, "data": PDF_DATA},
            "title": "Q3",
        },
        Image(PDF, data=PDF_DATA, name="Q3"),
    ),
    "anthropic document text": (
        {"type": "document", "source": {"type": "text", "data": "the terms"}},
        Text("the terms"),
    ),
}


@pytest.mark.parametrize("shape", sorted(BLOCKS))
def test_media_blocks_are_read_in_user_and_tool_messages(shape: str) -> None:
    # Anthropic-native images and documents and LangChain's file blocks were refused
    block, expected = BLOCKS[shape]
    messages = [
        HumanMessage([{"type": "text", "text": "describe"}, block]),
        AIMessage("", tool_calls=[{"name": "fetch", "args": {}, "id": "c1"}]),
        ToolMessage([block], tool_call_id="c1"),
    ]
    transcript = load(messages)
    assert transcript[0].blocks == (Text("describe"), expected)
    assert transcript[2].tool_results[0].content == (expected,)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_fit_sends_an_anthropic_image_and_a_pdf(provider: str) -> None:
    image = BLOCKS["anthropic image base64"][0]
    pdf = BLOCKS["v1 file base64 with a filename"][0]
    out = ctxengine.fit(
        [HumanMessage([{"type": "text", "text": "compare"}, image, pdf])],
        model="claude-sonnet-4-5",
        budget=5_000,
        provider=provider,
    )
    text = str(out.payload)
    assert PNG in text and PDF_DATA in text


def test_a_block_naming_only_an_upload_is_refused_by_name() -> None:
    with pytest.raises(TranscriptError, match=r"content\[0\]: file block is .*'file_id'.*url"):
        load([HumanMessage([{"type": "file", "file_id": "file-123"}])])
    with pytest.raises(TranscriptError, match=r"content\[0\]: image block is .*'file_id'"):
        load([HumanMessage([{"type": "image", "file_id": "file-123"}])])
    with pytest.raises(TranscriptError, match=r"'document'; expected a block a system message"):
        load([SystemMessage([{"type": "document", "source": {"type": "text", "data": "x"}}])])


def test_an_image_url_block_keeps_its_detail() -> None:
    block = {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}}
    out = ctxengine.fit(
        [HumanMessage(content=[{"type": "text", "text": "hi"}, block])], model="gpt-4o", budget=5000
    )
    assert out.payload["messages"][0]["content"][1] == block
