"""A provider's compaction, passed back in the history, through render and ``fit``.

Shapes: ``openai.types.responses.ResponseCompactionItemParamParam`` (an input item whose
``encrypted_content`` only OpenAI reads) and ``anthropic.types.beta.BetaCompactionBlockParam``
(an assistant content block holding a readable summary; "the API automatically drops all
message blocks prior to the compaction block"). The provider that made one gets it back
verbatim, in its place, never cut, counted in the budget; another gets Anthropic's summary as
the summary of the earlier conversation and nothing of OpenAI's item, reported. Before, a
Responses compaction item raised TranscriptError and an Anthropic one was skipped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types.beta import BetaCompactionBlockParam, BetaMessageParam
from openai.types.responses import ResponseCompactionItemParamParam
from pydantic import TypeAdapter

from ctxengine import fit
from ctxengine.compaction.facts import is_summary
from ctxengine.inject.payload import payload_tokens
from ctxengine.transcript import load, render
from ctxengine.transcript.model import Message, Text
from transcript.helpers import PROVIDERS, assert_sdk_valid

ENCRYPTED = "gAAAAABo" + "Zq9x" * 300
SUMMARY = "Earlier: the user asked to fix test_parse in src/parse.py; the parser fix is in."
MODEL = "gpt-4o"


def _turns(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"role": "user", "content": f"step {i}: " + "please look at this " * 30})
        out.append({"role": "assistant", "content": f"answer {i}: " + "it is done " * 30})
    return out


def responses_history(before: int = 4, after: int = 12) -> list[Any]:
    item = ResponseCompactionItemParamParam(
        type="compaction", id="cmp_68a1", encrypted_content=ENCRYPTED
    )
    return [*_turns(before), item, *_turns(after), {"role": "user", "content": "and now?"}]


def anthropic_history(before: int = 4, after: int = 12) -> list[Any]:
    block = BetaCompactionBlockParam(type="compaction", content=SUMMARY)
    turn = {"role": "assistant", "content": [block, {"type": "text", "text": "Going on."}]}
    return [*_turns(before), {"role": "user", "content": "go on"}, turn, *_turns(after)[1:]]


def _valid(payload: dict[str, Any], provider: str) -> None:
    if provider == "anthropic":  # a compaction block is a beta type
        TypeAdapter(list[BetaMessageParam]).validate_python(payload["messages"])
        assert set(payload) <= {"messages", "system"}
    else:
        assert_sdk_valid(payload, provider)


def _actions(out: Any) -> list[str]:
    return [c["action"] for c in out.report.hygiene["changes"]]


def _items(payload: dict[str, Any]) -> list[Any]:
    return payload.get("input") or payload.get("messages") or payload.get("contents") or []


@pytest.mark.parametrize("budget", [None, 2500])
def test_responses_gets_its_compaction_item_back_verbatim(budget: int | None) -> None:
    history = responses_history()
    out = fit(history, model=MODEL, budget=budget or 100_000, provider="openai-responses")
    _valid(out.payload, "openai-responses")
    items = _items(out.payload)
    found = [it for it in items if it.get("type") == "compaction"]
    assert found == [history[8]]
    assert out.tokens == payload_tokens(out.payload, "openai-responses", MODEL)
    assert out.tokens <= (budget or 100_000)
    at = items.index(found[0])
    if budget is None:  # nothing cut: in its place, between the turns around it
        assert items[at - 1]["content"] == history[7]["content"]
        assert items[at + 1]["content"] == history[9]["content"]
        assert not out.report.compactions
    else:  # cut and compacted: the item stays, before the summary of what came after it
        assert any(c.get("ok") for c in out.report.compactions)
        assert is_summary(Message("user", (Text(items[at + 1]["content"]),)))
        assert items[-1]["content"] == "and now?"


@pytest.mark.parametrize("budget", [None, 2500])
def test_anthropic_gets_its_compaction_block_back_verbatim(budget: int | None) -> None:
    history = anthropic_history()
    out = fit(history, model=MODEL, budget=budget or 100_000, provider="anthropic")
    _valid(out.payload, "anthropic")
    turns = out.payload["messages"]
    blocks = [
        (k, b) for k, t in enumerate(turns) for b in t["content"] if b["type"] == "compaction"
    ]
    assert [b for _, b in blocks] == [history[9]["content"][0]]
    k = blocks[0][0]
    assert turns[k]["role"] == "assistant" and turns[k]["content"][0]["type"] == "compaction"
    assert out.tokens == payload_tokens(out.payload, "anthropic", MODEL)
    assert out.tokens <= (budget or 100_000)
    if budget is not None:
        # what the API reads starts at the compaction block: our summary must come after it
        later = json.dumps(turns[k + 1 :])
        assert "[Summary of the earlier conversation" in later
        assert "[Summary of the earlier conversation" not in json.dumps(turns[:k])


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p != "anthropic"])
@pytest.mark.parametrize("budget", [None, 2500])
def test_other_providers_get_anthropics_summary_as_text(provider: str, budget: int | None) -> None:
    out = fit(anthropic_history(), model=MODEL, budget=budget or 100_000, provider=provider)
    _valid(out.payload, provider)
    text = json.dumps(out.payload)
    assert SUMMARY in text and '"compaction"' not in text
    assert out.tokens <= (budget or 100_000)
    assert _actions(out).count("compaction_as_summary") == 1


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p != "openai-responses"])
@pytest.mark.parametrize("budget", [None, 2500])
def test_other_providers_leave_out_openais_item_and_say_so(
    provider: str, budget: int | None
) -> None:
    out = fit(responses_history(), model=MODEL, budget=budget or 100_000, provider=provider)
    _valid(out.payload, provider)
    text = json.dumps(out.payload)
    assert ENCRYPTED not in text and '"compaction"' not in text
    assert out.tokens <= (budget or 100_000)
    dropped = [c for c in out.report.hygiene["changes"] if c["action"] == "dropped_compaction"]
    assert len(dropped) == 1 and "cmp_68a1" in dropped[0]["detail"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fmt", ["openai-responses", "anthropic"])
def test_transcript_render_carries_a_compaction(provider: str, fmt: str) -> None:
    source = responses_history(1, 1) if fmt == "openai-responses" else anthropic_history(1, 2)
    t = load(source, format=fmt)
    out = render(t, provider)
    _valid(out.payload, provider)
    text = json.dumps(out.payload)
    if provider == fmt:
        assert '"compaction"' in text
    elif fmt == "anthropic":
        assert SUMMARY in text and out.report.of("compaction_as_summary")
    else:
        assert ENCRYPTED not in text and out.report.of("dropped_compaction")


def test_the_summary_mark_is_the_compaction_layers() -> None:
    from ctxengine.compaction import facts
    from ctxengine.inject import render as render_module

    assert render_module.SUMMARY_META == facts.SUMMARY_META


# -- a compaction block is not text to rewrite -------------------------------------------------


@pytest.mark.parametrize("how", ["render", "fit"])
@pytest.mark.parametrize("content", [SUMMARY + "\n", SUMMARY + "  \n- one  \n- two  "])
def test_a_history_ending_in_a_compaction_sends_it_back_whatever_its_summary_ends_with(
    how: str, content: str
) -> None:
    """``pause_after_compaction``: Anthropic answers with an assistant message holding only
    the compaction block, which the caller appends and sends back, so the history ends with
    it. A summary ending in whitespace went through the prefill's whitespace strip, which
    rebuilt the block as plain text: the compaction was lost and its summary became a
    prefill."""
    block = BetaCompactionBlockParam(type="compaction", content=content)
    history = [*_turns(3), {"role": "user", "content": "go on"}]
    history.append({"role": "assistant", "content": [block]})
    if how == "render":
        payload = render(load({"messages": history}, format="anthropic"), "anthropic").payload
    else:
        payload = fit(history, model=MODEL, budget=50_000, provider="anthropic").payload
    _valid(payload, "anthropic")
    assert payload["messages"][-1]["content"] == [{"type": "compaction", "content": content}]


def test_a_compaction_blocks_own_cache_marker_is_not_a_fifth() -> None:
    """Anthropic's compaction docs put a cache breakpoint on the compaction block; copied
    verbatim, it came on top of the four the render places, and the API takes at most four."""
    block = BetaCompactionBlockParam(
        type="compaction", content=SUMMARY, cache_control={"type": "ephemeral"}
    )
    turn = {"role": "assistant", "content": [block, {"type": "text", "text": "Going on."}]}
    history = [{"role": "user", "content": "go on"}, turn, *_turns(12)[1:]]
    t = load({"system": "Be brief.", "messages": history}, format="anthropic")
    fitted = fit(history, model=MODEL, budget=100_000, provider="anthropic", cache_breakpoints=4)
    for payload in (render(t, "anthropic", cache_breakpoints=4).payload, fitted.payload):
        _valid(payload, "anthropic")
        assert json.dumps(payload).count('"cache_control"') <= 4  # the API's most
        sent = payload["messages"][1]["content"][0]
        assert sent["type"] == "compaction" and sent["content"] == SUMMARY


def test_a_redactor_leaves_a_compaction_block_whole() -> None:
    """The redaction plugin rewrites a message's text blocks; a compaction block is one (its
    summary reads as text), so a summary naming an e-mail address went out as a plain text
    block: the compaction was lost, and Anthropic no longer dropped what came before it. It
    is sent back as the provider returned it, as signed thinking is."""
    import anyio

    from ctxengine import Budget, ContextEngine
    from ctxengine.builtins import RedactionProvider

    mail = "alice.smith@example.org"
    block = BetaCompactionBlockParam(type="compaction", content=f"Summary: the owner is {mail}.")
    turn = {"role": "assistant", "content": [block, {"type": "text", "text": "Going on."}]}
    history = [*_turns(2), {"role": "user", "content": "go on"}, turn, *_turns(2)[1:]]
    history.append({"role": "user", "content": "next"})

    async def main() -> dict[str, Any]:
        engine = ContextEngine(
            MODEL, Budget(total=50_000), plugins=[RedactionProvider()], allow_dangerous=True
        )
        async with engine.session("s") as s:
            s.extend(load(history, format="anthropic").messages)
            out = await s.render("anthropic")
        return out.payload

    payload = anyio.run(main)
    _valid(payload, "anthropic")
    blocks = [b for m in payload["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert {"type": "compaction", "content": f"Summary: the owner is {mail}."} in blocks


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "gemini"])
def test_a_redactor_redacts_a_compaction_summary_sent_to_another_provider(provider: str) -> None:
    """Another provider is sent Anthropic's summary as text, which the redactor never saw:
    an address (or key) in it went out as it was, and so did one in a text block beside the
    compaction (the whole message was passed over). Both are redacted now; Anthropic still
    gets its block verbatim (the test above)."""
    import anyio

    from ctxengine import Budget, ContextEngine
    from ctxengine.builtins import RedactionProvider

    mail, other = "alice.smith@example.org", "bob.jones@example.org"
    block = BetaCompactionBlockParam(type="compaction", content=f"Summary: the owner is {mail}.")
    turn = {"role": "assistant", "content": [block, {"type": "text", "text": f"Ask {other}."}]}
    history = [*_turns(2), {"role": "user", "content": "go on"}, turn, *_turns(2)[1:]]
    history.append({"role": "user", "content": "next"})

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        engine = ContextEngine(
            MODEL, Budget(total=50_000), plugins=[RedactionProvider()], allow_dangerous=True
        )
        async with engine.session("s") as s:
            s.extend(load(history, format="anthropic").messages)
            out = await s.render(provider)
            again = await s.render(provider)
        return out.payload, again.payload

    payload, again = anyio.run(main)
    _valid(payload, provider)
    sent = json.dumps(payload)
    assert mail not in sent and other not in sent
    assert "Summary: the owner is [REDACTED:email]." in sent
    assert "Ask [REDACTED:email]." in sent
    assert again == payload


# -- only the newest compaction stands for what came before ------------------------------------


def _day_of_compactions(k: int, provider: str) -> list[Any]:
    """A history appended to turn after turn, a provider compaction every three turns."""
    out: list[Any] = []
    for j in range(k):
        out += [*_turns(3)]
        if provider == "openai-responses":
            out.append({"type": "compaction", "id": f"cmp_{j}", "encrypted_content": ENCRYPTED})
        else:
            block = BetaCompactionBlockParam(type="compaction", content=f"{SUMMARY} ({j}) " * 20)
            out += [{"role": "user", "content": "go on"}, {"role": "assistant", "content": [block]}]
    return [*out, {"role": "user", "content": "and now?"}]


@pytest.mark.parametrize("provider", ["openai-responses", "anthropic"])
def test_older_compactions_are_not_protected_only_the_newest(provider: str) -> None:
    """A caller appending each response's output collects a compaction per compaction, and
    the provider reads nothing before the newest (Anthropic drops it; OpenAI says it may be
    dropped). Every one of them was protected: six raised BudgetError at 4,000 tokens
    ("protected items alone need 7273 tokens")."""
    history = _day_of_compactions(6, provider)
    out = fit(history, model=MODEL, budget=4_000, provider=provider)
    _valid(out.payload, provider)
    assert out.tokens <= 4_000
    sent = json.dumps(out.payload)
    newest = "cmp_5" if provider == "openai-responses" else f"{SUMMARY} (5)"
    assert newest in sent
    assert sent.count('"type": "compaction"') < 6


def test_a_session_given_a_newer_compaction_lets_the_older_one_go() -> None:
    """The same in a session fed turn by turn: the older compaction, protected when it came,
    is upserted again without its protection when a newer one comes."""
    import anyio

    from ctxengine import Budget, ContextEngine

    async def main() -> list[str]:
        engine = ContextEngine(MODEL, Budget(total=4_000))
        sent = []
        async with engine.session("s") as s:
            for j in range(6):
                day = _day_of_compactions(1, "openai-responses")[:-1]
                day[-1] = {**day[-1], "id": f"cmp_{j}"}
                s.extend(load(day, format="openai-responses").messages)
                await s.user_message(f"and now ({j})?")
                out = await s.render("openai-responses")
                assert out.tokens <= 4_000
                sent.append(json.dumps(out.payload))
        return sent

    sent = anyio.run(main)
    assert all(f"cmp_{j}" in s for j, s in enumerate(sent))
    assert '"cmp_0"' not in sent[-1]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_an_openai_compaction_another_provider_is_not_sent_takes_no_room(provider: str) -> None:
    """A Responses history falling back to another provider: its compaction item is not sent
    there (only OpenAI reads it), but the plan counted its ``encrypted_content`` for every
    provider, so a budget that fits what is sent raised BudgetError ("protected items alone
    need 1218 tokens") and a larger one summarized far more than needed."""
    history = responses_history(before=1, after=1)
    roomy = fit(history, model=MODEL, budget=100_000, provider=provider)
    assert "cmp_68a1" not in json.dumps(roomy.payload)
    budget = int(roomy.tokens / 0.75) + 50  # what is sent, and the render's headroom
    item = {"input": [{"type": "compaction", "encrypted_content": ENCRYPTED}]}
    assert budget < roomy.tokens + payload_tokens(item, "openai-responses", MODEL)
    out = fit(history, model=MODEL, budget=budget, provider=provider)
    _valid(out.payload, provider)
    assert out.tokens == roomy.tokens  # nothing cut: what is sent fits
    assert out.report.compactions == []
