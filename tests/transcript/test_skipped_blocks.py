"""Blocks and parts of types an importer does not know load as the rest of their item,
skipped and counted in ``meta["skipped_blocks"]`` by type (they failed the whole source)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine.transcript import Text, ToolCall, load, load_all

from .test_variants import Write, jsonl

NEW = {"type": "hologram", "data": "..."}


def test_anthropic_payload_skips_unknown_blocks_everywhere() -> None:
    payload = {
        "system": [{"type": "text", "text": "sys"}, NEW],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}, NEW]},
            {
                "role": "assistant",
                "content": [NEW, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [NEW]}],
            },
        ],
    }
    t = load(payload, format="anthropic")
    assert [m.role for m in t] == ["system", "user", "assistant", "tool"]
    assert t[1].blocks == (Text("hi"),) and t[2].blocks == (ToolCall("t1", "f", {}),)
    assert t[3].tool_results[0].content == ()
    assert t.meta["skipped_blocks"] == {"hologram": 4}


def test_meta_has_no_skipped_blocks_when_nothing_was_skipped() -> None:
    t = load([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], format="anthropic")
    assert "skipped_blocks" not in t.meta


@pytest.mark.parametrize(
    ("items", "fmt", "kind"),
    [
        (  # Chat ``input_audio`` is imported (tests/transcript/test_media.py); a newer part is not
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi"}, {"type": "input_video"}],
                }
            ],
            "openai",
            "input_video",
        ),
        (
            [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hi"}, {"type": "input_audio"}],
                }
            ],
            "openai-responses",
            "input_audio",
        ),
        (
            [{"role": "user", "parts": [{"text": "hi"}, {"executableCode": {"code": "1"}}]}],
            "gemini",
            "executableCode",
        ),
    ],
)
def test_provider_payloads_skip_unknown_parts(items: list[Any], fmt: str, kind: str) -> None:
    t = load(items, format=fmt)
    assert [m.role for m in t] == ["user"] and t[0].blocks == (Text("hi"),)
    assert t.meta["skipped_blocks"] == {kind: 1}


def test_pi_skips_unknown_blocks(write: Write) -> None:
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/w"}
    user = {"role": "user", "content": [{"type": "text", "text": "hi"}, NEW], "timestamp": 1}
    asst = {
        "role": "assistant",
        "content": [NEW, {"type": "text", "text": "yo"}],
        "api": "anthropic-messages",
        "stopReason": "stop",
    }
    rows = [
        header,
        {"type": "message", "id": "1", "parentId": None, "timestamp": "t", "message": user},
        {"type": "message", "id": "2", "parentId": "1", "timestamp": "t", "message": asst},
    ]
    t = load(write("p.jsonl", jsonl(*rows)))
    assert [m.text for m in t] == ["hi", "yo"]
    assert t.meta["skipped_blocks"] == {"hologram": 2}


def test_counts_are_per_transcript_of_a_multi_instance_output(write: Write) -> None:
    """Each instance of an OpenHands ``output.jsonl`` is its own transcript, with its count."""

    def row(iid: str, parts: list[Any]) -> dict[str, Any]:
        llm = {"role": "user", "content": [{"type": "text", "text": iid}, *parts]}
        ev = {"kind": "MessageEvent", "id": "m", "source": "user", "llm_message": llm}
        return {"instance_id": iid, "history": [ev]}

    a, b = load_all(write("output.jsonl", jsonl(row("a", [NEW, NEW]), row("b", []))))
    assert (a[0].text, b[0].text) == ("a", "b")
    assert a.meta["skipped_blocks"] == {"hologram": 2}
    assert "skipped_blocks" not in b.meta
