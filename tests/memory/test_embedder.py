"""What an embedding function returns is checked before a score is made of it: a wrong shape,
NaN or infinity, or a call that raises is reported with :class:`EmbedderError`, naming the text,
never turned into a silently wrong ranking."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxengine.builtins import MemoryProvider
from ctxengine.errors import ConfigError, ConfigTypeError, CtxEngineError, EmbedderError
from ctxengine.memory import HashingEmbedder, MemoryStore

FACTS = (
    "The staging database is db-staging-02; never run migrations on it.",
    "Deploys go through the release branch, never main.",
)
HASH = HashingEmbedder(16)


def _store(tmp_path: Path, embed: Callable[[Sequence[str]], Any]) -> MemoryStore:
    store = MemoryStore(tmp_path, embedder=embed)
    for fact in FACTS:
        store.add_long_term(fact)
    return store


def _on_entries(change: Callable[[np.ndarray], Any]) -> Callable[[Sequence[str]], Any]:
    """The hashing embedder, ``change``-d when it embeds the entries (not the query)."""
    return lambda texts: change(HASH(texts)) if len(texts) > 1 else HASH(texts)


def _on_query(change: Callable[[np.ndarray], Any]) -> Callable[[Sequence[str]], Any]:
    return lambda texts: change(HASH(texts)) if len(texts) == 1 else HASH(texts)


def _set(a: np.ndarray, value: float) -> np.ndarray:
    a = a.astype(np.float64)
    a[0, 3] = value
    return a


@pytest.mark.parametrize(
    ("embed", "message"),
    [
        # a NaN made the entry's score NaN and left it out of every result, an exact lexical
        # match too; an infinity did the same
        pytest.param(
            _on_entries(lambda a: _set(a, np.nan)),
            "returned nan at [0, 3], the vector of MEMORY.md entry 0 'The staging database",
            id="nan-entry",
        ),
        pytest.param(
            _on_entries(lambda a: _set(a, np.inf)),
            "returned inf at [0, 3], the vector of MEMORY.md entry 0",
            id="inf-entry",
        ),
        # a NaN query vector was taken as no vector: the ranking went on by BM25 alone
        pytest.param(
            _on_query(lambda a: _set(a, np.nan)),
            "returned nan at [0, 3], the vector of the query 'staging database'",
            id="nan-query",
        ),
        # the rest raised numpy's or Python's own errors
        pytest.param(
            _on_query(lambda a: a[0]),
            "returned ndarray of shape (16,) and dtype float32 for 1 text; expected real "
            "numbers of shape (1, dim)",
            id="1d-query",
        ),
        pytest.param(
            _on_query(lambda a: np.zeros((1, 32))),
            "a vector of 32 numbers for the query 'staging database'; expected 16",
            id="query-of-another-length",
        ),
        pytest.param(
            _on_query(lambda a: np.vstack([a, a])),
            "of shape (2, 16) and dtype float32 for 1 text",
            id="two-rows-for-the-query",
        ),
        pytest.param(
            _on_entries(lambda a: a[:1]),
            "of shape (1, 16) and dtype float32 for 2 texts",
            id="rows",
        ),
        pytest.param(_on_entries(lambda a: None), "returned NoneType of shape ()", id="none"),
        pytest.param(
            _on_entries(lambda a: [[1.0, 2.0], [1.0]]),
            "returned list that is not an array",
            id="ragged",
        ),
        pytest.param(
            _on_entries(lambda a: [["x"], ["y"]]), "of shape (2, 1) and dtype <U1", id="strings"
        ),
        pytest.param(
            _on_entries(lambda a: a.astype(complex)), "dtype complex128 for 2 texts", id="complex"
        ),
    ],
)
def test_vectors_a_score_cannot_be_made_of_are_reported_naming_the_text(
    tmp_path: Path, embed: Callable[[Sequence[str]], Any], message: str
) -> None:
    store = _store(tmp_path, embed)
    with pytest.raises(EmbedderError, match=re.escape(message)) as caught:
        store.search("staging database", k=2)
    assert isinstance(caught.value, CtxEngineError)
    with pytest.raises(EmbedderError):  # the plugin's recall too, not an empty recall
        MemoryProvider(store).recall("staging database")


def test_an_embedder_that_raises_is_reported_with_its_error(tmp_path: Path) -> None:
    class Remote:
        def __call__(self, texts: Sequence[str]) -> Any:
            raise ConnectionError("embeddings endpoint unreachable")

    store = _store(tmp_path, Remote())
    with pytest.raises(
        EmbedderError,
        match=re.escape(
            "embedder Remote raised ConnectionError: embeddings endpoint unreachable on 2 "
            "texts (MEMORY.md entry 0: 'The staging database"
        ),
    ) as caught:
        store.search("staging database")
    assert isinstance(caught.value.__cause__, ConnectionError)


def test_vectors_of_any_scale_give_the_same_ranking(tmp_path: Path) -> None:
    # float64 vectors of 1e300 became infinities in float32 and every entry was left out
    plain = _store(tmp_path / "plain", HASH).search("staging database", k=2)
    huge = _store(tmp_path / "huge", lambda texts: HASH(texts).astype(np.float64) * 1e300)
    assert huge.search("staging database", k=2) == plain
    tiny = _store(tmp_path / "tiny", lambda texts: HASH(texts).astype(np.float64) * 1e-300)
    assert tiny.search("staging database", k=2) == plain
    assert plain[0].text == FACTS[0] and plain[0].vector > 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param(
            {"folder": None},
            ConfigTypeError,
            "folder is NoneType None; expected a path",
            id="folder-None",
        ),
        pytest.param(
            {"folder": "mem\0x"},
            ConfigError,
            "folder is 'mem\\x00x'; expected a path without NUL",
            id="folder-nul",
        ),
        pytest.param(
            {"embedder": "openai"},
            ConfigTypeError,
            "embedder is str 'openai'; expected \"hashing\", None or a callable",
            id="embedder-str",
        ),
        pytest.param(
            {"embedder": 5}, ConfigTypeError, "embedder is int 5; expected", id="embedder-int"
        ),
        pytest.param(
            {"weight": "0.5"},
            ConfigTypeError,
            "weight is str '0.5'; expected a number in [0, 1]",
            id="weight-str",
        ),
        pytest.param(
            {"weight": float("nan")},
            ConfigError,
            "weight is nan; expected a fraction in [0, 1]",
            id="weight-nan",
        ),
    ],
)
def test_a_store_of_the_wrong_settings_is_refused_when_made(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    # a str embedder other than "hashing" or a number was taken, and every search then raised
    # "'str' object is not callable"; a folder or weight of the wrong kind raised a raw error
    args = {"folder": tmp_path, **kwargs}
    folder = args.pop("folder")
    with pytest.raises(error, match=re.escape(message)):
        MemoryStore(folder, **args)


def test_only_entries_not_embedded_before_are_sent_to_the_embedder(tmp_path: Path) -> None:
    # every write made the next search embed the whole memory again: with a paid embedding
    # model, each compaction's flush cost the embedding of every entry of every log
    sent: list[list[str]] = []

    def embed(texts: Sequence[str]) -> Any:
        sent.append(list(texts))
        return HASH(texts)

    store = _store(tmp_path, embed)
    first = store.search("staging database", k=2)
    assert sent == [list(FACTS), ["staging database"]]
    store.remember("The billing job fails with E1042 when its token expires.")
    store.add_long_term(FACTS[0])  # written again: already embedded
    hits = store.search("staging database", k=2)
    assert sent[2:] == [
        ["The billing job fails with E1042 when its token expires."],
        ["staging database"],
    ]
    # the same ranking as a store that embeds everything at once
    fresh = _store(tmp_path / "fresh", HASH)
    fresh.remember("The billing job fails with E1042 when its token expires.")
    fresh.add_long_term(FACTS[0])
    assert [(h.text, h.score) for h in hits] == [
        (h.text, h.score) for h in fresh.search("staging database", k=2)
    ]
    assert hits[0] == first[0]


def test_an_embedder_that_changes_its_length_between_calls_is_reported(tmp_path: Path) -> None:
    sizes = iter([16, 16, 32])

    def embed(texts: Sequence[str]) -> Any:
        return HashingEmbedder(next(sizes))(texts)

    store = _store(tmp_path, embed)
    store.search("staging database")
    store.add_long_term("Alice prefers answers in French.")
    with pytest.raises(
        EmbedderError, match=re.escape("of 32 numbers for 1 text (MEMORY.md entry 2")
    ):
        store.search("french")
