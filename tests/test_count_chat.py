"""``Tokenizer.count_chat``: the chat counting rule walked natively, equal to the Python rule.

The payload recount of every render and :func:`ctxengine.count_messages` use it for the shapes
the exporters make and fall back to the Python rule (``message_strings``) for any other; here
the two are compared on every message of every shared transcript, on generated dicts of every
shape, and the fallback is checked to give the same totals.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxengine import count_messages, get_tokenizer
from ctxengine.tokens import REPLY_PRIMING, file_part_tokens, message_strings, pdf_tokens
from ctxengine.transcript import load, render
from offline_tiktoken import TRANSCRIPTS
from pdf_bytes import pdf_compressed

REAL = sorted(
    p
    for p in TRANSCRIPTS.rglob("*")
    if p.is_file() and p.suffix in {".jsonl", ".traj", ".md"} and p.name != "README.md"
)
TOKENIZER = get_tokenizer("gpt-4o")


def _python_rule(dicts: list[dict[str, Any]]) -> int:
    total = 0
    for d in dicts:
        texts, overhead = message_strings(d)
        total += overhead + sum(TOKENIZER.count_many(texts))
    return total


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_exported_message_counts_as_the_python_rule_says(path: Any) -> None:
    messages = render(load(path), "openai").payload["messages"]
    got = TOKENIZER.count_chat([[m] for m in messages])
    assert None not in got  # the exporter's shapes are all walked natively
    assert got == [_python_rule([m]) for m in messages]
    assert count_messages(messages, model="gpt-4o") == REPLY_PRIMING + sum(got)


_text = st.text(max_size=30)
_call = st.fixed_dictionaries(
    {"id": _text, "type": st.just("function")},
    optional={"function": st.fixed_dictionaries({}, optional={"name": _text, "arguments": _text})},
)
_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_image", "image", "x"])}),
)
_value = st.one_of(
    _text,
    st.none(),
    st.lists(_part, max_size=3),
    st.integers(),
    st.booleans(),
    st.fixed_dictionaries({"name": _text}),
)
_message = st.dictionaries(
    st.sampled_from(["role", "content", "name", "tool_call_id", "extra"]), _value, max_size=4
).flatmap(
    lambda d: st.one_of(
        st.just(d),
        st.lists(st.one_of(_call, _text), max_size=3).map(lambda c: {**d, "tool_calls": c}),
        st.fixed_dictionaries({"name": _text}).map(lambda f: {**d, "function_call": f}),
    )
)


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.lists(_message, max_size=3), max_size=4))
def test_a_group_is_counted_natively_as_the_python_rule_or_left_to_it(groups: Any) -> None:
    got = TOKENIZER.count_chat(groups)
    assert len(got) == len(groups)
    for group, n in zip(groups, got, strict=True):
        if n is not None:
            assert n == _python_rule(group)
    flat = [d for g in groups for d in g]
    assert count_messages(flat, model="gpt-4o") == REPLY_PRIMING + _python_rule(flat)


def test_shapes_no_exporter_makes_are_left_to_the_python_rule() -> None:
    plain = {"role": "user", "content": "hi"}
    for odd in (
        {"role": "user", "content": 7},  # counted by Python as its JSON
        {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "assistant", "tool_calls": ["not a call"]},
        {"role": "assistant", "tool_calls": [{"function": {"name": 1}}]},
        {"role": "user", "content": ["a bare string part"]},
        {1: "a key that is no string"},
    ):
        assert TOKENIZER.count_chat([[plain], [plain, odd]]) == [_python_rule([plain]), None]


def test_an_image_part_and_a_name_add_their_fixed_tokens() -> None:
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    named = {"role": "user", "name": "ann", "content": "hi"}
    expected = [_python_rule([image]), _python_rule([named])]
    assert TOKENIZER.count_chat([[image], [named]]) == expected
    assert TOKENIZER.count_chat([[image]])[0] == 3 + 765 + TOKENIZER.count("user")


def test_a_pdf_file_part_counts_its_pages_natively_and_by_the_python_rule() -> None:
    """The native walk leaves a ``file`` part to :func:`file_part_tokens`; both ways count
    the PDF by its pages (:func:`pdf_tokens`), not as an image."""
    url = "data:application/pdf;base64," + pdf_compressed(3)
    m = {
        "role": "user",
        "content": [{"type": "text", "text": "read"}, {"type": "file", "file": {"file_data": url}}],
    }
    texts, overhead = message_strings(m, "gpt-4o")
    python = overhead + sum(TOKENIZER.count_many(texts))
    native = TOKENIZER.count_chat([[m]])[0]
    assert native is not None and native + file_part_tokens(m, "gpt-4o") == python
    assert count_messages([m], model="gpt-4o") == REPLY_PRIMING + python
    assert python - _python_rule(
        [{"role": "user", "content": [{"type": "text", "text": "read"}]}]
    ) == pdf_tokens(url, "openai", "gpt-4o")


def test_lone_surrogates_are_an_encoding_error() -> None:
    from ctxengine import EncodingError

    with pytest.raises(EncodingError, match="lone surrogates"):
        TOKENIZER.count_chat([[{"role": "user", "content": "bad \ud800"}]])
