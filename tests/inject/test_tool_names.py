"""Tool names go out as each provider takes them: a name from another provider's log
(``github.search``, ``fs/read file``) or a call cut off before its name (``""``) was sent as
it came, and OpenAI refuses the whole request ("Invalid 'messages[1].tool_calls[0].function.
name': string does not match pattern"; "empty string"); Anthropic and Gemini likewise."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ctxengine import fit
from ctxengine.transcript import Message, Text, ToolCall, ToolResult
from ctxengine.transcript.providers import wire_name

RULES = {
    "openai": re.compile(r"[A-Za-z0-9_-]{1,64}"),
    "openai-responses": re.compile(r"[A-Za-z0-9_-]{1,64}"),
    "anthropic": re.compile(r"[A-Za-z0-9_-]{1,128}"),
    "gemini": re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}"),
}
NAMES = ["", "github.search", "fs/read file", "9lives", "ünïcode", "x" * 200, "read_file", "-a"]


def _names(payload: dict[str, Any], provider: str) -> list[str]:
    if provider == "openai":
        return [c["function"]["name"] for m in payload["messages"] for c in m.get("tool_calls", [])]
    if provider == "openai-responses":
        return [i["name"] for i in payload["input"] if i.get("type") == "function_call"]
    if provider == "anthropic":
        return [
            b["name"]
            for m in payload["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        ]
    parts = [p for c in payload["contents"] for p in c["parts"]]
    calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
    results = [p["functionResponse"]["name"] for p in parts if "functionResponse" in p]
    assert results == calls  # a response names its call as sent
    return calls


@pytest.mark.parametrize("provider", list(RULES))
def test_every_tool_name_sent_fits_the_provider_rule(provider: str) -> None:
    calls = [ToolCall(f"c{i}", name, {}) for i, name in enumerate(NAMES)]
    results = [
        Message("tool", (ToolResult(f"c{i}", (Text(str(i)),), name=name),))
        for i, name in enumerate(NAMES)
    ]
    messages = [Message.user("go"), Message.assistant("", calls), *results, Message.user("now?")]
    out = fit(messages, model="gpt-4o", budget=8000, provider=provider)
    sent = _names(out.payload, provider)
    assert len(sent) == len(NAMES)
    assert all(RULES[provider].fullmatch(n) for n in sent), sent
    assert sent[NAMES.index("read_file")] == "read_file"  # a valid name is sent as it is
    assert sent[NAMES.index("github.search")] == (
        "github.search" if provider == "gemini" else "github_search"
    )
    assert len(set(sent)) == len(sent)


def test_wire_name_is_stable_and_keeps_long_names_apart() -> None:
    a, b = "x" * 100 + "a", "x" * 100 + "b"
    assert wire_name(a, "openai") != wire_name(b, "openai")
    assert wire_name(a, "openai") == wire_name(a, "openai") and len(wire_name(a, "openai")) == 64
    assert wire_name(a, "anthropic") == a  # within Anthropic's 128
    assert wire_name("", "gemini") == "tool" and wire_name("9lives", "gemini") == "_9lives"
    assert wire_name("9lives", "openai") == "9lives"
