"""With the redaction plugin on, no payload carries a secret it detects: not the compaction
summary (made after ``on_before_render``, from the messages as they came, and carried into
the summaries after it), nor the arguments of tool calls (no grain holds them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine.builtins import RedactionProvider
from ctxengine.compaction import parse_sections
from ctxengine.transcript import ToolCall

pytestmark = pytest.mark.anyio

KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.payload-0123456789"
MAIL = "alice.smith@example.org"
SECRETS = (KEY, TOKEN, MAIL)
PROVIDERS = ("openai", "anthropic", "gemini")


async def _run(engine: ContextEngine, renders: int) -> tuple[list[dict[str, Any]], Any]:
    """A long agent loop under one request holding a key: each step calls curl with a bearer
    token and gets back a result naming an e-mail address. Returns every payload (each
    render for every provider) and the session state."""
    payloads: list[dict[str, Any]] = []
    async with engine.session("r") as s:
        await s.user_message(f"use my key {KEY} to call the API\nand report what it says")
        for i in range(renders):
            for provider in PROVIDERS:
                out = await s.render(provider=provider)
                payloads.append(out.payload)
            command = f"curl -H 'Authorization: Bearer {TOKEN}' https://api.example.com/{i}"
            await s.assistant_message("", [ToolCall(f"c{i}", "bash", {"command": command})])
            await s.tool_result(f"c{i}", f"owner {MAIL}\n" + f"response {i}\n" * 40, name="bash")
        return payloads, s.state


def _engine(*plugins: object) -> ContextEngine:
    return ContextEngine("gpt-4o", Budget(total=2000), plugins=list(plugins), allow_dangerous=True)


async def test_no_payload_of_a_long_compacting_run_carries_a_secret() -> None:
    payloads, state = await _run(_engine(RedactionProvider()), 30)
    assert state.summary is not None and state.compaction_backoff is None
    sent = [json.dumps(p, ensure_ascii=False) for p in payloads]
    assert [s for s in sent if any(x in s for x in SECRETS)] == []
    summary = state.summary.text
    # a summary of summaries by now: it stands for more messages than one compaction took
    assert int(summary.split(": ", 1)[1].split(" ", 1)[0]) > 40
    # redacted where the secret was, its structure intact
    sections = parse_sections(summary)
    assert "(latest) use my key [REDACTED:api_key] to call the API" in sections["Requests"]
    first = next(p for p in payloads if "Summary of the earlier" in json.dumps(p))
    assert "use my key [REDACTED:api_key] to call the API\\nand report what it says" in (
        json.dumps(first)
    )  # the first summary holds the request verbatim, redacted
    # the tool calls sent keep valid JSON arguments, the token redacted
    last = payloads[-3]  # openai
    calls = [c for m in last["messages"] for c in m.get("tool_calls", [])]
    assert calls
    for call in calls:
        args = json.loads(call["function"]["arguments"])
        assert args["command"].startswith("curl -H 'Authorization: Bearer [REDACTED:bearer_token]'")
    # the session keeps its messages as they came
    assert KEY in state.messages[0].text
    assert TOKEN in state.messages[-2].tool_calls[0].arguments_json


async def test_without_the_plugin_the_same_run_sends_them() -> None:
    payloads, state = await _run(_engine(), 12)
    assert state.summary is not None and MAIL in state.summary.text
    sent = [json.dumps(p) for p in payloads]
    assert all(any(x in s for s in sent) for x in SECRETS)


async def test_a_compaction_asked_for_writes_no_secret() -> None:
    engine = _engine(RedactionProvider())
    async with engine.session("c") as s:
        await s.user_message(f"deploy with {KEY}, then mail {MAIL}")
        for i in range(20):
            command = f"curl -H 'Authorization: Bearer {TOKEN}' https://h/{i}"
            await s.assistant_message(
                f"step {i}", [ToolCall(f"c{i}", "bash", {"command": command})]
            )
            await s.tool_result(f"c{i}", "ok\n" * 60, name="bash")
        result = await s.compact()
        assert result.ok, result.error
        assert s.state.summary is not None
        text = s.state.summary.text
        assert "deploy with [REDACTED:api_key], then mail [REDACTED:email]" in text
        assert not any(x in text for x in SECRETS)


class PlainRedactor:
    """A redactor without the privilege: it redacts what plugins see of the user message."""

    name = "plain-redactor"
    version = "1"
    priority = 50
    enabled = True

    def redact_text(self, text: str) -> str:
        return text.replace("https://api.example.com", "[host]")

    async def collect(self, scene: Any) -> list[Any]:
        return []


async def test_only_a_privileged_redactor_changes_what_is_sent() -> None:
    payloads, _ = await _run(_engine(PlainRedactor()), 3)
    assert "https://api.example.com/1" in json.dumps(payloads[-1])


class _Faulty:
    """A privileged redactor with a bug: it raises on some texts, returns no string on
    others."""

    name, version, priority, enabled, dangerous = "faulty", "1", 10, True, True

    def redact_text(self, text: str) -> Any:
        if "boom" in text:
            raise ValueError("redactor bug")
        if "odd" in text:
            return None
        return text

    async def collect(self, scene: Any) -> list[Any]:
        return []


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
async def test_a_redactor_that_fails_withholds_its_text_and_is_reported(provider: str) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=6000), plugins=[_Faulty()], allow_dangerous=True)
    async with engine.session("r") as s:
        await s.user_message("go")
        call = ToolCall("c1", "bash", {"command": "echo boom-secret", "note": "odd-secret"})
        await s.assistant_message("", [call])
        await s.tool_result("c1", "done", name="bash")
        out = await s.render(provider=provider)
        again = await s.render(provider=provider)
    sent = json.dumps(out.payload)
    assert "boom-secret" not in sent and "odd-secret" not in sent  # withheld, never sent
    assert "[REDACTED:redactor_failed]" in sent
    faults = [f for f in out.report.faults if f["plugin"] == "faulty"]
    assert {f["kind"] for f in faults} == {"raised", "invalid"}
    assert all(f["hook"] == "redact_text" for f in faults)
    assert json.dumps(again.payload) == sent  # the same payload, its faults reported once
    assert not [f for f in again.report.faults if f["plugin"] == "faulty"]
