"""Shared by the agent tests: real tool outputs, and an independent tiktoken count."""

from __future__ import annotations

import json
from typing import Any

from ctxengine.transcript import load
from offline_tiktoken import TRANSCRIPTS, encoding

BUDGET = 4_000
TURNS = 30


def tool_outputs() -> list[str]:
    """Real tool outputs of a shared session (500 to 20,000 chars), in order."""
    transcript = load(TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl")
    texts = [r.text for m in transcript for r in m.tool_results]
    return [t for t in texts if 500 <= len(t) <= 20_000]


def tiktoken_chat_tokens(messages: list[dict[str, Any]]) -> int:
    """OpenAI's chat rule with Python tiktoken (o200k): 3 per message, 1 per name, 3 priming."""
    enc = encoding("o200k_base")
    total = 3
    for m in messages:
        total += 3
        for key, value in m.items():
            if key == "tool_calls":
                for call in value:
                    fn = call["function"]
                    total += len(enc.encode_ordinary(fn["name"]))
                    total += len(enc.encode_ordinary(fn["arguments"]))
            elif isinstance(value, str):
                total += len(enc.encode_ordinary(value)) + (1 if key == "name" else 0)
            elif isinstance(value, list):
                for part in value:
                    total += len(enc.encode_ordinary(part.get("text", "")))
    return total


def tiktoken_responses_tokens(instructions: str | None, items: list[dict[str, Any]]) -> int:
    """The same rule over Responses input items (text, call name + arguments, outputs)."""
    enc = encoding("o200k_base")
    total = 3 + (3 + len(enc.encode_ordinary(instructions)) if instructions else 0)
    for item in items:
        total += 3
        kind = item.get("type", "message")
        if kind == "function_call":
            total += len(enc.encode_ordinary(item["name"] + item["arguments"]))
        elif kind == "function_call_output":
            output = item["output"]
            total += len(
                enc.encode_ordinary(output if isinstance(output, str) else json.dumps(output))
            )
        else:
            content = item["content"]
            texts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
            total += sum(len(enc.encode_ordinary(t)) for t in texts)
    return total
