"""Token counting through the public API, against the official Python tiktoken (built offline)."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from hypothesis import example, given
from hypothesis import strategies as st

import ctxengine
from ctxengine import errors
from offline_tiktoken import TRANSCRIPTS, encoding

ENCODINGS = ("cl100k_base", "o200k_base")
FILES = sorted(p for p in TRANSCRIPTS.rglob("*") if p.is_file())
SPECIALS = (
    "<|endoftext|>",
    "<|endofprompt|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|im_start|>",
    "<|im_end|>",
)
MB = 1 << 20


def _rel(path: Path) -> str:
    return str(path.relative_to(TRANSCRIPTS))


def _json_strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value: message contents, tool arguments, ids..."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)


def _contents(path: Path) -> list[str]:
    """The file split into its messages: JSON strings, or markdown paragraphs."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [s for line in text.splitlines() for s in _json_strings(json.loads(line))]
    if path.suffix in (".json", ".traj"):
        return list(_json_strings(json.loads(text)))
    return text.split("\n\n")


def _tk(name: str) -> tiktoken.Encoding:
    return encoding(name)


# --- parity with tiktoken on the shared transcripts ------------------------------------------


def test_every_transcript_file_is_covered() -> None:
    assert len(FILES) >= 17
    assert {p.suffix for p in FILES} >= {".jsonl", ".traj", ".md"}


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_whole_file_ids_and_counts_equal_tiktoken(path: Path, name: str) -> None:
    text = path.read_text(encoding="utf-8")
    expected = _tk(name).encode_ordinary(text)
    tok = ctxengine.get_tokenizer(name)
    assert tok.encode(text) == expected
    assert tok.count(text, cache=False) == len(expected)
    assert ctxengine.count_tokens(text, encoding=name) == len(expected)


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_per_line_and_per_message_equal_tiktoken(path: Path, name: str) -> None:
    text = path.read_text(encoding="utf-8")
    tok = ctxengine.get_tokenizer(name)
    for pieces in (text.splitlines(keepends=True), _contents(path)):
        expected = _tk(name).encode_ordinary_batch(pieces)
        assert ctxengine.count_many(pieces, encoding=name) == [len(ids) for ids in expected]
        assert [tok.encode(p) for p in pieces] == expected


def test_counts_are_the_same_from_many_threads() -> None:
    text = "".join(p.read_text(encoding="utf-8") for p in FILES)
    chunks = [text[i : i + 50_000] for i in range(0, len(text), 50_000)]
    tok = ctxengine.get_tokenizer("o200k_base")
    serial = [tok.count(c, cache=False) for c in chunks]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda c: tok.count(c, cache=False), chunks))
    assert threaded == serial == tok.count_many(chunks, cache=False)


# --- parity on generated text ----------------------------------------------------------------

tricky = st.text(alphabet=st.sampled_from(" \t\n\r'sStTdDmMlLvVreRE1234567890.,/-_😀日本ß\u0301ǅ"))
texts = st.lists(st.one_of(st.text(), tricky, st.sampled_from(SPECIALS)), max_size=8).map("".join)


#: The codepoints Unicode 17.0 assigned or re-classed (U+0295: Lo to Ll): tiktoken 0.14.0's
#: regex engine classes them by Unicode 16.0 (unassigned: neither letter, number nor space).
UNICODE_17 = (
    (0x0295, 0x0295), (0x088F, 0x088F), (0x0C5C, 0x0C5C), (0x0CDC, 0x0CDC),
    (0x1ACF, 0x1ADD), (0x1AE0, 0x1AEB), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D2),
    (0xA7D4, 0xA7D4), (0xA7F1, 0xA7F1), (0x10940, 0x10959), (0x10EC5, 0x10EC7),
    (0x10EFA, 0x10EFB), (0x11B60, 0x11B67), (0x11DB0, 0x11DDB), (0x11DE0, 0x11DE9),
    (0x16EA0, 0x16EB8), (0x16EBB, 0x16ED3), (0x16FF2, 0x16FF6), (0x187F8, 0x187FF),
    (0x18D09, 0x18D1E), (0x18D80, 0x18DF2), (0x1E6C0, 0x1E6F5), (0x1E6FE, 0x1E6FF),
    (0x2B73A, 0x2B73F), (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479),
)  # fmt: skip


@pytest.mark.parametrize("name", ENCODINGS)
def test_letters_unicode_17_added_split_as_tiktoken_splits_them(name: str) -> None:
    """The class tables came from a regex module of Unicode 17.0: its new letters (an
    ideograph of CJK Extension J, U+323B0, before ``/A``) were split as letters where
    tiktoken, on Unicode 16.0, splits them with the symbols after them, so 4,644 codepoints
    counted apart from it. Each is tried where a letter, a number, a space, a case and a
    contraction would split differently."""
    tk, ours = _tk(name), ctxengine.get_tokenizer(name)
    shapes = ("{c}/A", "A{c}b", "1{c}2", " {c}", "\n{c}x", "{c}{c} a", "a'{c}", "Ab{c}cD")
    texts = [
        shape.format(c=chr(cp))
        for lo, hi in UNICODE_17
        for cp in range(lo, hi + 1)
        for shape in shapes
    ]
    assert len(texts) > 8 * 4_644
    differ = [t for t in texts if ours.encode(t) != tk.encode_ordinary(t)]
    assert not differ, [ascii(t) for t in differ[:5]]


@pytest.mark.parametrize("name", ENCODINGS)
@given(text=texts)
@example(text="<|endoftext|>")
@example(text="a<|endoftext|>b<|fim_prefix|> <|endofprompt|>\n")
@example(text="  \n  \t x 's  ")
def test_generated_text_equals_tiktoken(name: str, text: str) -> None:
    expected = _tk(name).encode_ordinary(text)
    tok = ctxengine.get_tokenizer(name)
    assert tok.encode(text) == expected
    assert tok.count(text, cache=False) == len(expected) == tok.count(text)
    assert ctxengine.count_many([text, text], encoding=name) == [len(expected)] * 2
    assert tok.decode(expected) == text


@pytest.mark.parametrize("special", SPECIALS)
def test_special_token_text_is_ordinary_text(special: str) -> None:
    text = f"before {special} after"
    for name in ENCODINGS:
        ids = ctxengine.get_tokenizer(name).encode(text)
        assert ids == _tk(name).encode(text, disallowed_special=())
        assert _tk(name).eot_token not in ids
        assert ctxengine.count_tokens(text, encoding=name) == len(ids)
    assert ctxengine.count_tokens(text, model="claude-sonnet-4-5") > 0


@given(text=texts)
def test_decode_inverts_encode(text: str) -> None:
    for name in ENCODINGS:
        tok = ctxengine.get_tokenizer(name)
        assert tok.decode(tok.encode(text)) == text


# --- text that is not valid Unicode ----------------------------------------------------------

surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


@given(head=st.text(), bad=surrogate, tail=st.text())
def test_lone_surrogates_raise_a_clear_error(head: str, bad: str, tail: str) -> None:
    text = head + bad + tail
    with pytest.raises(ctxengine.EncodingError, match="surrogate"):
        ctxengine.count_tokens(text)
    with pytest.raises(ctxengine.EncodingError, match=r"texts\[2\].*surrogate"):
        ctxengine.count_many(["fine", head, text, tail])


def test_lone_surrogate_error_is_a_value_error_everywhere() -> None:
    text = "a\ud800b"
    tok = ctxengine.get_tokenizer("cl100k_base")
    calls = [
        lambda: ctxengine.count_tokens(text),
        lambda: ctxengine.count_tokens(text, model="claude-opus-4-6"),
        lambda: ctxengine.truncate_tokens(text, 1),
        lambda: tok.encode(text),
        lambda: tok.count(text, cache=False),
        lambda: tok.count_many(t for t in ["x", text]),
    ]
    for call in calls:
        with pytest.raises(ctxengine.EncodingError) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, ctxengine.CtxEngineError)
        assert "lone surrogates cannot be encoded" in str(info.value)


def test_count_many_names_a_non_string_item() -> None:
    with pytest.raises(errors.ConfigTypeError, match=r"texts\[1\] is int 1; expected a str"):
        ctxengine.count_many(["a", 1])
    with pytest.raises(errors.ConfigTypeError, match=r"texts\[2\] is NoneType None"):
        ctxengine.count_many(iter(["a", "b", None]))


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: ctxengine.count_tokens(5), "text is int 5; expected a str"),
        (lambda: ctxengine.count_tokens(None), "text is NoneType None; expected a str"),
        (lambda: ctxengine.count_tokens(b"abc"), "text is bytes b'abc'; expected a str"),
        (lambda: ctxengine.count_tokens("a", model=5), "model is int 5; expected a model name"),
        (lambda: ctxengine.count_tokens("a", encoding=[1]), "encoding is list [1]; expected"),
        (lambda: ctxengine.count_many(5), "texts is int 5; expected a list of str"),
        (lambda: ctxengine.count_many("abc"), "texts is str 'abc'; expected a list of str"),
        (lambda: ctxengine.truncate_tokens(5, 3), "text is int 5; expected a str"),
        (lambda: ctxengine.truncate_tokens("a", "3"), "max_tokens is str '3'; expected an int"),
        (
            lambda: ctxengine.count_messages([], model=5),  # type: ignore[arg-type]
            "model is int 5; expected a model name",
        ),
        (lambda: ctxengine.get_tokenizer(5), "model_or_encoding is int 5; expected a model"),
    ],
)
def test_counting_names_an_argument_of_the_wrong_kind(call: Any, named: str) -> None:
    with pytest.raises(errors.ConfigTypeError) as info:
        call()
    assert str(info.value).startswith(named)
    assert isinstance(info.value, TypeError)  # ``except TypeError`` still catches it
    assert isinstance(info.value, ctxengine.CtxEngineError)


@pytest.mark.parametrize("name", ENCODINGS)
def test_count_many_of_a_large_mixed_batch_equals_tiktoken(name: str) -> None:
    # Many runs for the pool (a run is ~64 KB or 512 texts): empty, tiny and 200 KB texts, in
    # an order that mixes them, from the shared transcripts; every count in its place.
    text = "".join(p.read_text(encoding="utf-8") for p in FILES)[:2_000_000]
    rng = random.Random(7)
    batch, at = [], 0
    while at < len(text):
        size = rng.choice([0, 1, 7, 300, 4096, 200_000])
        batch.append(text[at : at + size])
        at += size
    tk = _tk(name)
    expected = [len(tk.encode_ordinary(t)) for t in batch]
    tok = ctxengine.get_tokenizer(name)
    assert tok.count_many(batch, cache=False) == expected
    ctxengine.clear_cache()
    assert tok.count_many(tuple(batch)) == expected  # misses, then the cache in place
    assert tok.count_many(iter(batch)) == expected  # hits


def test_count_many_names_a_bad_item_after_counting_started() -> None:
    # The bad items come after several runs have gone to the pool.
    good = ["lorem ipsum dolor sit amet " * 400] * 40
    with pytest.raises(errors.ConfigTypeError, match=r"texts\[40\] is bytes b'x'; expected a str"):
        ctxengine.count_many([*good, b"x", "y"])
    with pytest.raises(errors.EncodingError, match=r"texts\[41\] is not valid Unicode"):
        ctxengine.count_many([*good, "ok", "bad \ud800 surrogate"])
    assert ctxengine.count_many(good) == [ctxengine.count_tokens(good[0])] * 40


# --- pathological inputs ---------------------------------------------------------------------


def _no_whitespace() -> str:
    rng = random.Random(1)
    alphabet = "abcXYZ019_-+=/\\.,;:!?()[]{}<>\"'日本語ü😀"
    return "".join(rng.choice(alphabet) for _ in range(MB))


PATHOLOGICAL = {
    "spaces": " " * MB,
    "one-char": "a" * MB,
    "no-whitespace": _no_whitespace(),
    "newlines": "\n" * MB,
    "digits": "7" * MB,
}


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", PATHOLOGICAL)
def test_pathological_input_counts_equal_tiktoken(kind: str, name: str) -> None:
    text = PATHOLOGICAL[kind]
    tok = ctxengine.get_tokenizer(name)
    if kind == "spaces":
        # Python tiktoken's own regex engine overflows its stack on 1 MB of spaces with
        # o200k_base (a panic). The run is a single pre-token (`\s+(?!\S)` at the end of the
        # text), so its reference is the BPE of that one piece; the check below shows that this
        # equals tiktoken's full encoding at the largest size tiktoken survives.
        expected = _tk(name)._encode_single_piece(text)
        quarter = text[: MB // 4]
        assert _tk(name).encode_ordinary(quarter) == _tk(name)._encode_single_piece(quarter)
    else:
        expected = _tk(name).encode_ordinary(text)
    assert tok.count(text, cache=False) == len(expected)
    assert tok.encode(text) == expected
    cut = tok.truncate(text, 1000)
    assert text.startswith(cut)
    assert 990 <= tok.count(cut, cache=False) <= 1000


# --- truncation ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ENCODINGS)
@given(text=texts, max_tokens=st.integers(0, 60))
def test_truncate_is_a_fitting_prefix(name: str, text: str, max_tokens: int) -> None:
    tok = ctxengine.get_tokenizer(name)
    cut = ctxengine.truncate_tokens(text, max_tokens, encoding=name)
    assert text.startswith(cut)
    assert text.encode().startswith(cut.encode())  # whole characters only
    n = tok.count(cut)
    assert n <= max_tokens
    total = tok.count(text)
    if total <= max_tokens:
        assert cut == text
    else:
        # Cut at a token boundary: at most one character's tokens (≤ 4 bytes) are given up.
        assert n >= max_tokens - 4


def test_truncate_returns_the_input_when_it_fits() -> None:
    text = "Hello, world! " * 20
    n = ctxengine.count_tokens(text, model="gpt-4o")
    assert ctxengine.truncate_tokens(text, n, model="gpt-4o") == text
    assert ctxengine.truncate_tokens(text, n - 1, model="gpt-4o") != text
    assert ctxengine.truncate_tokens("", 0) == ""


def test_truncate_never_splits_multibyte_characters() -> None:
    text = "😀日本語ß" * 50
    for name in ENCODINGS:
        for max_tokens in range(30):
            cut = ctxengine.truncate_tokens(text, max_tokens, encoding=name)
            assert text.startswith(cut)
            assert ctxengine.count_tokens(cut, encoding=name) <= max_tokens


@given(text=texts, max_tokens=st.integers(0, 60))
def test_truncate_with_an_estimator_fits_the_estimate(text: str, max_tokens: int) -> None:
    model = "claude-sonnet-4-5"
    cut = ctxengine.truncate_tokens(text, max_tokens, model=model)
    assert text.startswith(cut)
    assert ctxengine.count_tokens(cut, model=model) <= max_tokens


def test_truncate_rejects_a_negative_budget() -> None:
    with pytest.raises(OverflowError):
        ctxengine.truncate_tokens("abc", -1)


# --- model -> encoding -----------------------------------------------------------------------

EXACT = {
    "o200k_base": [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4o-2024-08-06",
        "chatgpt-4o-latest",
        "gpt-4.1",
        "gpt-4.1-nano",
        "gpt-4.5-preview",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5.1-codex",
        "o1",
        "o1-mini",
        "o3",
        "o3-mini",
        "o4-mini",
        "openai/gpt-4o",
        "GPT-4o",
        "ft:gpt-4o-mini-2024-07-18:my-org:custom-suffix:9abcDEF",
        "o200k_base",
    ],
    "cl100k_base": [
        "gpt-4",
        "gpt-4-0613",
        "gpt-4-turbo",
        "gpt-4-32k",
        "gpt-3.5-turbo",
        "gpt-3.5-turbo-16k",
        "text-embedding-3-small",
        "text-embedding-ada-002",
        "cl100k_base",
        # tiktoken's own map: the fine-tuning base models, and fine-tunes of any of them
        "davinci-002",
        "babbage-002",
        "ft:gpt-3.5-turbo-0125:my-org::9xyzABC",
    ],
}
ESTIMATED = {
    "claude": [
        "claude-sonnet-4-5",
        "claude-opus-4-6",
        "claude-3-5-haiku-20241022",
        # Amazon Bedrock model ids and inference profiles
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
        "us.anthropic.claude-sonnet-4-20250514-v1:0",
    ],
    "gemini": ["gemini-2.5-pro", "gemini-1.5-flash", "google/gemini-2.0-flash"],
}


@pytest.mark.parametrize(("model", "name"), [(m, e) for e, ms in EXACT.items() for m in ms])
def test_openai_models_map_to_their_exact_encoding(model: str, name: str) -> None:
    tok = ctxengine.get_tokenizer(model)
    assert (tok.name, tok.encoding, tok.exact, tok.factor) == (name, name, True, 1.0)
    text = "Token counting for model routing."
    assert ctxengine.count_tokens(text, model=model) == len(_tk(name).encode_ordinary(text))


@pytest.mark.parametrize(("model", "family"), [(m, f) for f, ms in ESTIMATED.items() for m in ms])
def test_claude_and_gemini_are_estimates(model: str, family: str) -> None:
    tok = ctxengine.get_tokenizer(model)
    assert (tok.name, tok.encoding, tok.exact) == (f"{family}~o200k_base", "o200k_base", False)
    assert tok.factor > 1.0
    text = "An estimate must say that it is one. " * 10
    base = len(_tk("o200k_base").encode_ordinary(text))
    assert tok.count(text) == math.ceil(base * tok.factor)
    with pytest.raises(ctxengine.EncodingError, match="no public tokenizer"):
        tok.encode(text)


def test_documented_factors_are_the_ones_in_use() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "tokens.md").read_text(encoding="utf-8")
    for family, models in ESTIMATED.items():
        factor = ctxengine.get_tokenizer(models[0]).factor
        assert f"| {family} | `{factor:.2f}` |" in docs


@pytest.mark.parametrize("model", ["llama-3-70b", "mistral-large", "gpt", "", "deepseek-r1"])
def test_unknown_model_names_the_known_families_and_encoding(model: str) -> None:
    with pytest.raises(ctxengine.EncodingError) as info:
        ctxengine.count_tokens("hi", model=model)
    message = str(info.value)
    assert repr(model).replace("'", '"') in message
    for needle in ("gpt-4o", "gpt-3.5-turbo", "claude", "gemini", "encoding=", "o200k_base"):
        assert needle in message
    assert isinstance(info.value, ValueError)


def test_default_encoding_is_o200k() -> None:
    text = "default encoding"
    assert ctxengine.count_tokens(text) == len(_tk("o200k_base").encode_ordinary(text))


# --- errors raised on the Rust side ----------------------------------------------------------


def test_rust_errors_become_the_python_error_tree() -> None:
    with pytest.raises(errors.EncodingError, match="unknown model or encoding") as info:
        ctxengine._core.Tokenizer("p50k_base")
    assert type(info.value) is ctxengine.EncodingError
    with pytest.raises(errors.EncodingError, match="unknown model or encoding"):
        ctxengine.count_tokens("x", encoding="r50k_base")
    tok = ctxengine.get_tokenizer("cl100k_base")
    with pytest.raises(errors.EncodingError, match="token id 1000000 is not in the cl100k_base"):
        tok.decode([15339, 1_000_000])
    assert tok.decode([_tk("cl100k_base").eot_token]) == "<|endoftext|>"


# --- count_messages --------------------------------------------------------------------------


def _cookbook_count(messages: list[dict[str, Any]], name: str) -> int:
    """OpenAI cookbook "How to count tokens with tiktoken", for current chat models.

    3 tokens frame every message, each string value counts its tokens, a ``name`` costs 1 more,
    and 3 tokens prime the reply. Extended as the issue specifies: a tool call counts its
    function name and JSON arguments; content parts count their text.
    """
    enc = _tk(name)

    def n(text: str) -> int:
        return len(enc.encode_ordinary(text))

    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            if key == "tool_calls":
                total += sum(
                    n(c["function"]["name"]) + n(c["function"]["arguments"]) for c in value
                )
            elif isinstance(value, list):
                total += sum(n(part["text"]) for part in value if "text" in part)
            elif isinstance(value, str):
                total += n(value) + (1 if key == "name" else 0)
    return total


def _swe_agent_messages(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in json.loads(path.read_text(encoding="utf-8"))["history"]:
        msg: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            msg["tool_calls"] = m["tool_calls"]
        if m.get("tool_call_ids"):
            msg["tool_call_id"] = m["tool_call_ids"][0]
        out.append(msg)
    return out


SYNTHETIC = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive us."},
    {"role": "user", "content": [{"type": "text", "text": "What is in this file?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "src/main.rs"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "grep", "arguments": '{"pattern": "<|endoftext|>"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "fn main() {}\n"},
]


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4", "gpt-5-mini"])
def test_count_messages_follows_the_documented_rule(model: str) -> None:
    name = ctxengine.get_tokenizer(model).encoding
    assert ctxengine.count_messages(SYNTHETIC, model=model) == _cookbook_count(SYNTHETIC, name)
    assert ctxengine.count_messages([], model=model) == 3
    for path in FILES:
        if path.suffix == ".traj":
            messages = _swe_agent_messages(path)
            expected = _cookbook_count(messages, name)
            assert ctxengine.count_messages(iter(messages), model=model) == expected


def test_count_messages_with_an_estimator_is_not_exact_but_scaled() -> None:
    exact = ctxengine.count_messages(SYNTHETIC, model="gpt-4o")
    estimate = ctxengine.count_messages(SYNTHETIC, model="claude-sonnet-4-5")
    assert estimate > exact
    with pytest.raises(ctxengine.EncodingError):
        ctxengine.count_messages(SYNTHETIC, model="llama-3")


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        ("abc", "messages is str 'abc'"),  # a str iterates as characters
        ({"role": "user", "content": "hi"}, "messages is dict"),  # a dict as its keys
        (5, "messages is int 5"),
        ([{"role": "user", "content": "hi"}, "oops"], "messages[1] is str 'oops'"),
    ],
)
def test_count_messages_refuses_what_is_not_a_message_list(messages: Any, named: str) -> None:
    with pytest.raises(errors.ConfigTypeError, match="expected a") as info:
        ctxengine.count_messages(messages, model="gpt-4o")
    assert str(info.value).startswith(named) and isinstance(info.value, TypeError)


def test_count_messages_charges_each_image_part() -> None:
    from ctxengine.tokens import IMAGE_TOKENS

    text = {"type": "text", "text": "what is this?"}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 4000}}
    plain = [{"role": "user", "content": [text]}]
    with_images = [{"role": "user", "content": [text, image, image]}]
    base = ctxengine.count_messages(plain, model="gpt-4o")
    assert ctxengine.count_messages(with_images, model="gpt-4o") == base + 2 * IMAGE_TOKENS
    assert IMAGE_TOKENS == 85 + 4 * 170  # OpenAI's tile rule: 2 x 2 tiles of 512 px, high detail


# --- cache -----------------------------------------------------------------------------------

LONG = "The cache keys on content, so this text must be long enough to be cached. " * 10


@pytest.mark.usefixtures("token_cache")
def test_repeated_count_is_a_cache_hit() -> None:
    tok = ctxengine.get_tokenizer("o200k_base")
    first = tok.count(LONG)
    assert ctxengine.cache_info() | {"capacity": 0} == {
        "hits": 0,
        "misses": 1,
        "evictions": 0,
        "size": 1,
        "capacity": 0,
    }
    assert tok.count(LONG) == first
    assert ctxengine.count_tokens(LONG, model="gpt-4o") == first
    info = ctxengine.cache_info()
    assert (info["hits"], info["misses"], info["size"]) == (2, 1, 1)
    # The estimators reuse the o200k_base entry; another encoding is another entry.
    ctxengine.count_tokens(LONG, model="claude-opus-4-6")
    ctxengine.count_tokens(LONG, encoding="cl100k_base")
    info = ctxengine.cache_info()
    assert (info["hits"], info["misses"], info["size"]) == (3, 2, 2)
    assert ctxengine.count_many([LONG] * 4) == [first] * 4
    assert ctxengine.cache_info()["hits"] == 7


@pytest.mark.usefixtures("token_cache")
def test_a_large_batch_of_cached_and_new_texts_counts_each_once() -> None:
    # past the parallel threshold, the texts whose counts the cache holds are answered as
    # they are read and the others counted by the pool: each text's count, in its place,
    # one hit or one miss each, and short texts (never cached) neither
    tok = ctxengine.get_tokenizer("o200k_base")
    known = [f"{i} {LONG}" for i in range(0, 400, 2)]
    assert sum(map(len, known)) > 64 * 1024  # the batch of hits alone is a parallel one
    tok.count_many(known)
    batch = [f"{i} {LONG}" for i in range(400)] + ["short", ""]
    info = ctxengine.cache_info()
    counts = tok.count_many(batch)
    assert counts == [len(_tk("o200k_base").encode_ordinary(t)) for t in batch]
    after = ctxengine.cache_info()
    assert (after["hits"] - info["hits"], after["misses"] - info["misses"]) == (200, 200)
    assert tok.count_many(known) == counts[:400:2]
    assert tok.count_many(batch, cache=False) == counts


@pytest.mark.usefixtures("token_cache")
def test_uncached_and_short_counts_bypass_the_cache() -> None:
    tok = ctxengine.get_tokenizer("cl100k_base")
    tok.count(LONG, cache=False)
    tok.count_many([LONG, LONG + "!"], cache=False)
    tok.count("short text")
    info = ctxengine.cache_info()
    assert (info["hits"], info["misses"], info["size"]) == (0, 0, 0)


@pytest.mark.usefixtures("token_cache")
def test_capacity_bounds_the_cache_and_counts_evictions() -> None:
    ctxengine.set_cache_capacity(3)
    texts = [f"{i} {LONG}" for i in range(5)]
    counts = ctxengine.count_many(texts)
    assert counts == [len(_tk("o200k_base").encode_ordinary(t)) for t in texts]
    info = ctxengine.cache_info()
    assert (info["size"], info["evictions"], info["capacity"]) == (3, 2, 3)
    ctxengine.set_cache_capacity(1)
    info = ctxengine.cache_info()
    assert (info["size"], info["evictions"]) == (1, 4)
    # The survivor is the newest entry: first in, first out.
    ctxengine.count_tokens(texts[4])
    assert ctxengine.cache_info()["hits"] == 1


@pytest.mark.usefixtures("token_cache")
def test_capacity_zero_disables_the_cache() -> None:
    ctxengine.set_cache_capacity(0)
    for _ in range(3):
        assert ctxengine.count_tokens(LONG) == len(_tk("o200k_base").encode_ordinary(LONG))
    info = ctxengine.cache_info()
    assert (info["hits"], info["size"], info["capacity"]) == (0, 0, 0)


@pytest.mark.usefixtures("token_cache")
def test_clear_cache_resets_entries_and_counters() -> None:
    ctxengine.count_tokens(LONG)
    ctxengine.count_tokens(LONG)
    ctxengine.clear_cache()
    info = ctxengine.cache_info()
    assert (info["hits"], info["misses"], info["evictions"], info["size"]) == (0, 0, 0, 0)


# --- lazy loading ----------------------------------------------------------------------------

RSS_PROBE = """
import json, re
def rss_kib():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
before = rss_kib()
import ctxengine
imported = rss_kib()
ctxengine.count_tokens("hello", encoding="o200k_base")
counted = rss_kib()
print(json.dumps({"import": imported - before, "first_count": counted - imported}))
"""


def test_import_does_not_load_a_vocabulary() -> None:
    # Building o200k_base costs ~65 MB of memory. If import built it, the first count would not
    # grow the process; it must, and import itself must stay well below one vocabulary.
    out = subprocess.run(
        [sys.executable, "-c", RSS_PROBE], capture_output=True, text=True, check=True
    )
    growth_kib = json.loads(out.stdout)
    assert growth_kib["first_count"] > 32 * 1024
    assert growth_kib["import"] < 32 * 1024
