"""Compactions made on the provider's side, passed back in the history.

OpenAI Responses (``context_management`` with ``compact_threshold``, or ``responses.compact``)
returns an input item ``{"type": "compaction", "id", "encrypted_content"}``
(``openai.types.responses.ResponseCompactionItemParam``); OpenAI's compaction guide: "you can
drop items that came before the most recent compaction item". Anthropic's beta
``compact_20260112`` edit returns an assistant content block ``{"type": "compaction",
"content": "<summary>"}`` (``anthropic.types.beta.BetaCompactionBlockParam``), and "the API
automatically drops all message blocks prior to the compaction block". Loading raised on the
first and skipped the second (its summary lost).
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types.beta import BetaCompactionBlockParam, BetaMessageParam
from openai.types.responses import ResponseCompactionItemParamParam, ResponseInputItemParam
from pydantic import TypeAdapter

from ctxengine.errors import TranscriptError
from ctxengine.transcript import Compaction, Message, Transcript, load, render
from ctxengine.transcript.model import compaction_of

ENCRYPTED = "gAAAAABo" + "Zq9" * 200
SUMMARY = "The user asked to fix test_parse in src/parse.py; the fix is in, one test still fails."


def responses_items() -> list[Any]:
    compaction = ResponseCompactionItemParamParam(
        type="compaction", id="cmp_68a1", encrypted_content=ENCRYPTED
    )
    items: list[Any] = [
        {"role": "user", "content": "fix test_parse"},
        {"role": "assistant", "content": "on it"},
        compaction,
        {"role": "user", "content": "and now the docs"},
    ]
    TypeAdapter(list[ResponseInputItemParam]).validate_python(items)
    return items


def anthropic_messages() -> list[Any]:
    block = BetaCompactionBlockParam(type="compaction", content=SUMMARY)
    messages: list[Any] = [
        {"role": "user", "content": "fix test_parse"},
        {"role": "assistant", "content": [{"type": "text", "text": "on it"}]},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": [block, {"type": "text", "text": "Done with the fix."}]},
        {"role": "user", "content": "and now the docs"},
    ]
    TypeAdapter(list[BetaMessageParam]).validate_python(messages)
    return messages


def test_a_responses_compaction_item_loads_whole_in_its_place() -> None:
    items = responses_items()
    t = load(items, format="openai-responses")
    assert [m.role for m in t] == ["user", "assistant", "assistant", "user"]
    block = compaction_of(t[2])
    assert isinstance(block, Compaction) and block.provider == "openai-responses"
    assert block.item == items[2]
    assert t.meta["compactions"] == [
        {"provider": "openai-responses", "index": 2, "id": "cmp_68a1", "summary": None}
    ]
    # detected without format=, and a payload dict too
    assert load(items).source_format == "openai-responses"
    assert compaction_of(load({"input": items})[2]) == block


def test_an_anthropic_compaction_block_keeps_its_summary() -> None:
    t = load(anthropic_messages())
    assert t.source_format == "anthropic"
    found = [(i, c) for i, m in enumerate(t) if (c := compaction_of(m)) is not None]
    assert len(found) == 1
    i, block = found[0]
    assert block.provider == "anthropic" and SUMMARY in block.text
    assert t[i].role == "assistant" and len(t[i].blocks) == 1
    assert t[i + 1].text == "Done with the fix."  # the rest of that turn follows it
    assert t.meta["compactions"][0]["summary"] == SUMMARY
    assert "skipped_blocks" not in t.meta


@pytest.mark.parametrize("fmt", ["openai-responses", "anthropic"])
def test_the_model_view_starts_at_the_latest_compaction(fmt: str) -> None:
    source = responses_items() if fmt == "openai-responses" else anthropic_messages()
    if fmt == "openai-responses":
        source = {"instructions": "be brief", "input": source}
    full = load(source, format=fmt)
    model = load(source, format=fmt, view="model")
    at = full.meta["compactions"][-1]["index"]
    heads = [m for m in full.messages[:at] if m.role == "system"]
    assert list(model.messages) == heads + list(full.messages[at:])
    assert compaction_of(model.messages[len(heads)]) is not None
    assert model.meta["compactions"] == full.meta["compactions"]


def test_a_failed_anthropic_compaction_loads_with_no_text() -> None:
    messages = anthropic_messages()
    messages[3]["content"][0] = {"type": "compaction", "content": None}
    block = next(c for m in load(messages) if (c := compaction_of(m)) is not None)
    assert block.text == "" and block.item == {"type": "compaction", "content": None}


def test_bad_compaction_fields_name_the_value() -> None:
    from ctxengine import TranscriptError

    with pytest.raises(TranscriptError, match="encrypted_content"):
        load([{"type": "compaction", "id": "cmp_1"}], format="openai-responses")
    bad = [{"role": "assistant", "content": [{"type": "compaction", "content": 7}]}]
    with pytest.raises(TranscriptError, match="7"):
        load(bad, format="anthropic")


@pytest.mark.parametrize(
    ("provider", "item"),
    [
        ("openai-responses", {}),
        ("openai-responses", {"type": "compaction"}),
        ("openai-responses", {"type": "message", "encrypted_content": ENCRYPTED}),
        ("anthropic", {}),
        ("anthropic", {"type": "compaction", "content": 3}),
        ("anthropic", ["compaction"]),
    ],
)
def test_a_compaction_without_its_providers_item_is_refused_naming_it(
    provider: str, item: Any
) -> None:
    """A provider's compaction is sent back to it as the item it returned: one built without
    that item rendered with a bare ``KeyError: 'type'`` (outside the error tree) for its own
    provider, or with Anthropic cache breakpoints."""
    with pytest.raises(TranscriptError, match=rf"Compaction for '{provider}': item is .*expected"):
        Compaction("", provider, item)


def test_a_compaction_with_its_providers_item_renders_for_it() -> None:
    anthropic = Compaction(SUMMARY, "anthropic", {"type": "compaction", "content": None})
    responses = Compaction("", "openai-responses", {"type": "compaction", "encrypted_content": "x"})
    assert compaction_of(Message("assistant", (anthropic,))) is anthropic
    for block, provider in ((anthropic, "anthropic"), (responses, "openai-responses")):
        t = Transcript(
            (Message.user("hi"), Message("assistant", (block,)), Message.user("go on")), "x"
        )
        assert render(t, provider)
    assert Compaction("a summary", "").item == {}  # no provider: nothing to send back
