"""MemoryStore: MEMORY.md plus daily logs, hybrid BM25 + vector search, and the memory plugin."""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from ctxengine import ContextEngine
from ctxengine.builtins import BUILTINS, MemoryProvider
from ctxengine.errors import ConfigTypeError, CtxEngineError, PluginError
from ctxengine.events import UserMessage
from ctxengine.memory import HashingEmbedder, MemoryStore, split_entries

pytestmark = pytest.mark.anyio


def _store(tmp_path: Path, **kwargs: object) -> MemoryStore:
    store = MemoryStore(tmp_path, **kwargs)  # type: ignore[arg-type]
    store.add_long_term("# Facts\n\nThe staging database is db-staging-02; never migrate it.")
    store.add_long_term("Deploys go through the release branch, never main.")
    store.remember(
        "Fixed flaky test tests/test_io.py by pinning the clock.", when=datetime(2026, 3, 6, 9, 0)
    )
    store.remember(
        "Error E1042 in the billing job comes from an expired token.",
        when=datetime(2026, 3, 7, 9, 0),
    )
    return store


def test_files_are_memory_md_then_daily_logs(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in store.files()] == [
        "MEMORY.md",
        "memory/2026-03-06.md",
        "memory/2026-03-07.md",
    ]
    assert len(store) == 5  # heading, 2 long-term facts, 2 daily entries
    assert split_entries("a\n\nb\n## c\nd") == ["a", "b", "## c\nd"]


def test_search_finds_exact_identifiers_and_paraphrases(tmp_path: Path) -> None:
    store = _store(tmp_path)
    [hit] = store.search("what causes E1042?", k=1)
    assert "expired token" in hit.text and hit.source == "memory/2026-03-07.md"
    assert 0 < hit.bm25 < 1 and 0 < hit.vector <= 1  # BM25 over its ceiling, never 1.0
    assert "db-staging-02" in store.search("staging databases", k=1)[0].text  # stem-ish match
    assert store.search("", k=3) == []
    with pytest.raises(ValueError, match="k is 0"):
        store.search("x", k=0)


def test_search_is_deterministic_and_sees_new_entries(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = store.search("release branch deploy", k=3)
    assert first == _store(tmp_path / "again").search("release branch deploy", k=3) or first
    assert store.search("release branch deploy", k=3) == first
    store.remember("The deploy freeze starts on 2026-04-01.", when=datetime(2026, 3, 8))
    assert any("freeze" in h.text for h in store.search("deploy freeze", k=2))


def test_any_embedding_callable_works_and_bm25_alone_too(tmp_path: Path) -> None:
    calls: list[int] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return np.array([[t.count("e"), len(t) % 7, 1.0] for t in texts])

    store = _store(tmp_path, embedder=embed)
    assert store.search("billing token", k=2)[0].text.startswith("Error E1042")
    assert calls[0] == 5 and calls[1] == 1
    lexical = _store(tmp_path / "lex", embedder=None)
    hit = lexical.search("billing token", k=1)[0]
    assert hit.vector == 0 and 0 < hit.score == hit.bm25 < 1


def test_hashing_embedder_is_normalized_and_stable() -> None:
    emb = HashingEmbedder(64)
    a, b = emb(["release branch", "release branch"]), emb(["release branches"])
    assert a.shape == (2, 64) and np.allclose(np.linalg.norm(a, axis=1), 1)
    assert np.array_equal(a[0], a[1]) and float(a[0] @ b[0]) > 0.5
    with pytest.raises(ValueError, match="dim is 4"):
        HashingEmbedder(4)


def test_the_hashing_embedder_leaves_common_words_out() -> None:
    # "the", "is", "what" made an unrelated entry look about 0.2 similar to a question
    emb = HashingEmbedder()
    assert np.array_equal(emb(["What is the release branch?"])[0], emb(["release branch"])[0])
    assert not emb(["is the", "what's it?"]).any()  # similar to nothing


async def test_the_memory_plugin_injects_relevant_mem_grains(tmp_path: Path) -> None:
    assert BUILTINS["memory"] is MemoryProvider
    plugin = MemoryProvider(_store(tmp_path), k=2)
    grains = await plugin.on_user_msg(UserMessage("s", 1, "the billing job fails with E1042"))
    assert grains and grains[0].node_id == "mem.recall.0" and grains[0].origin == "memory"
    assert "expired token" in grains[0].text and grains[0].meta["source"] == "memory/2026-03-07.md"
    assert await plugin.on_user_msg(UserMessage("s", 2, "   ")) == []
    engine = ContextEngine("gpt-4o", plugins=[plugin])
    async with engine.session("m") as s:
        await s.user_message("why does the billing job fail with E1042?")
        out = await s.render()
    assert any(g.node_id.startswith("mem.recall.") for g in out.tree)
    assert "expired token" in str(out.payload)


def test_a_stray_entry_in_the_logs_folder_does_not_stop_search(tmp_path: Path) -> None:
    # a dangling link or a folder named *.md made every search raise a raw OSError
    store = MemoryStore(tmp_path)
    store.add_long_term("The deploy of service alpha uses blue/green.")
    store.remember("Checked the canary of service alpha.", when=datetime(2024, 1, 2))
    logs = tmp_path / "memory"
    (logs / "2024-01-03.md").symlink_to(tmp_path / "gone.md")
    (logs / "2024-01-04.md").mkdir()
    hits = store.search("service alpha")
    assert {h.source for h in hits} == {"MEMORY.md", "memory/2024-01-02.md"}
    assert len(store) == 2


def test_text_a_memory_file_cannot_hold_is_refused_and_nothing_written(tmp_path: Path) -> None:
    from ctxengine.errors import EncodingError

    store = MemoryStore(tmp_path)
    for write in (store.remember, store.add_long_term):
        with pytest.raises(EncodingError, match="lone surrogate '\\\\udcff' at character 4"):
            write("bad \udcff text")
        with pytest.raises(EncodingError, match="memory text is bytes"):
            write(b"bytes")  # type: ignore[arg-type]
    assert store.files() == [] and len(store) == 0


FACTS = (
    "The staging database is db-staging-02; never run migrations on it.",
    "Deploys go through the release branch, never main.",
    "Alice prefers answers in French.",
    "The API key rotation happens every 90 days.",
    "Use pnpm, not npm, in the web/ folder.",
)


def _facts(tmp_path: Path, *extra: str, **kwargs: object) -> MemoryStore:
    store = MemoryStore(tmp_path, **kwargs)  # type: ignore[arg-type]
    for text in (*FACTS, *extra):
        store.add_long_term(text)
    return store


@pytest.mark.parametrize(
    "query",
    [
        "what's the weather like today?",
        "is the",
        "can you do it for me?",
        "is there anything else?",
        "what is it?",
    ],
)
def test_a_message_sharing_only_common_words_with_the_memories_recalls_nothing(
    tmp_path: Path, query: str
) -> None:
    # the best lexical match was scaled to 1.0 however weak, so a shared "the" or "it" put
    # the hybrid at 0.5 and the plugin injected unrelated memories
    store = _facts(tmp_path)
    assert MemoryProvider(store).recall(query) == []  # default min_score
    assert all(h.bm25 == 0 for h in store.search(query, k=5))


@pytest.mark.parametrize("embedder", ["hashing", None])
def test_a_relevant_query_recalls_its_memory_first_and_not_a_wordy_unrelated_one(
    tmp_path: Path, embedder: str | None
) -> None:
    wordy = "The owner of the repo is the one who has to approve all of the merges to main."
    plugin = MemoryProvider(_facts(tmp_path, wordy, embedder=embedder))
    for query, fact in [
        ("what is the name of the staging database?", FACTS[0]),
        ("what is the name of the release branch for deploys?", FACTS[1]),
        ("should I use npm in the web folder?", FACTS[4]),
        ("who is the one to approve a merge?", wordy),
    ]:
        assert [g.text.split("\n", 1)[1] for g in plugin.recall(query)] == [fact], query


def test_bm25_scores_are_on_one_scale_for_every_query(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, embedder=None)
    store.add_long_term("alpha beta")
    store.add_long_term("gamma delta")

    def bm25(query: str) -> float:
        [hit] = store.search(query, k=5)
        assert hit.text == "alpha beta" and hit.score == hit.bm25
        return hit.bm25

    # an entry of average length holding each query word once is a complete match: 1.0,
    # whatever the other entries score (it was 1 / (k1 + 1), BM25's limit for a word repeated
    # without end, so a complete match scored 0.45)
    assert bm25("alpha") == pytest.approx(1.0, abs=1e-6)
    assert bm25("alpha beta") == pytest.approx(1.0, abs=1e-6)
    # a word no entry holds counts against the match (at the highest idf): half a question is
    # a weaker match
    weak = bm25("alpha zeta")
    assert weak == pytest.approx(math.log(2) / math.log(12), abs=1e-6)
    assert bm25("alphas zeta") == weak  # the forms of a word meet
    assert bm25("the alpha of it") == bm25("alpha")  # common words neither help nor hurt
    assert store.search("the of it", k=5) == []


@pytest.mark.parametrize(
    ("query", "k", "message"),
    [
        pytest.param(None, 3, "query is NoneType None; expected a str", id="query-None"),
        pytest.param(5, 3, "query is int 5; expected a str", id="query-int"),
        pytest.param(b"db", 3, "query is bytes b'db'; expected a str", id="query-bytes"),
        pytest.param("db", 2.5, "k is float 2.5; expected an int >= 1", id="k-float"),
        pytest.param("db", "3", "k is str '3'; expected an int >= 1", id="k-str"),
        pytest.param("db", True, "k is bool True; expected an int >= 1", id="k-bool"),
        pytest.param("db", None, "k is NoneType None; expected an int >= 1", id="k-None"),
    ],
)
def test_search_refuses_a_query_or_k_of_the_wrong_kind_with_the_library_error(
    tmp_path: Path, query: object, k: object, message: str
) -> None:
    # these raised a raw AttributeError or TypeError (and True was taken as k=1)
    store = _store(tmp_path)
    with pytest.raises(ConfigTypeError, match=re.escape(message)) as caught:
        store.search(query, k=k)  # type: ignore[arg-type]
    assert isinstance(caught.value, CtxEngineError) and isinstance(caught.value, TypeError)
    if not isinstance(k, int) or isinstance(k, bool):  # the plugin refuses it up front
        with pytest.raises(PluginError, match=re.escape(message)):
            MemoryProvider(store, k=k)  # type: ignore[arg-type]


def test_a_lone_surrogate_in_the_query_is_searched_as_a_replacement_character(
    tmp_path: Path,
) -> None:
    # the query reached the Rust index as is and raised a raw UnicodeEncodeError, so the
    # memory plugin faulted on such a user message
    seen: list[str] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return HashingEmbedder()(texts)

    store = _store(tmp_path, embedder=embed)
    [hit] = store.search("staging \udcff database", k=1)
    assert "db-staging-02" in hit.text and seen[-1] == "staging \ufffd database"
    [grain] = MemoryProvider(store, k=1).recall("why E1042 \ud800?")
    assert "expired token" in grain.text


def test_the_stemmer_meets_the_forms_of_a_word_and_leaves_identifiers_alone() -> None:
    from ctxengine.memory.store import stem

    for forms in [
        ("deploy", "deploys", "deployed", "deploying"),
        ("friday", "fridays"),
        ("database", "databases"),
        ("query", "queries", "queried"),
        ("stop", "stops", "stopped", "stopping"),
        ("cache", "caches", "cached", "caching"),
        ("fix", "fixes", "fixed"),
        ("class", "classes"),
        ("add", "added", "adds"),
    ]:
        assert len({stem(w) for w in forms}) == 1, forms
    # words the rules would break, numbers, identifiers and other scripts stay as they are
    for word in ("status", "analysis", "gas", "string", "thing", "need", "e1042", "15", "日"):
        assert stem(word) == word


# entries from the real transcripts (shared data/transcripts) and the notes of a reviewer's
# memory folder, with questions a user would ask about them in their own words
RECALL = (
    "Deploys of Zephyr go through the GitHub Actions workflow deploy.yml; never deploy on Fridays.",
    "The staging database for project Zephyr runs Postgres 15 on port 5433.",
    "Redis cache keys are prefixed with zph: and expire after 15 minutes.",
    "Done! I've created `~/.pi/agent/themes/custom-light.json` (copied from the light theme) and"
    ' opened it in VS Code. Use `/theme` to select "custom-light" and edit away!',
    'The footer is using `theme.fg("muted", ...)` for both the pwd and stats lines. It should use'
    ' `"dim"` instead to be dimmer:',
    "The setup.py file contains a lot of useful information to install the package locally. In"
    " particular, I see there's a [dev] extras that installs all the dependencies needed for"
    " development. We can use this to install the package with all the necessary dependencies.",
    "It seems that the `ponyc` compiler was not built successfully. Let's check if there is a"
    " pre-built `ponyc` compiler available.",
)


@pytest.mark.parametrize("embedder", ["hashing", None])
@pytest.mark.parametrize(
    ("question", "memory"),
    [
        ("Can I deploy zephyr today? It's Friday", 0),
        ("Quick one before I push: are we allowed to deploy zephyr on a Friday afternoon?", 0),
        ("Which port does the Zephyr staging database use?", 1),
        ("How long until redis cache keys expire?", 2),
        (
            "hey, where did you put the custom light theme file you created, and how do I pick it?",
            3,
        ),
        ("what color was the footer stats line using again, and what should it be instead?", 4),
        ("I've got a fresh checkout: how did we install the package with the dev extras?", 5),
        ("so did the ponyc compiler build in the end, or do we need a prebuilt one?", 6),
    ],
)
def test_a_question_in_other_words_recalls_its_memory_at_the_default_min_score(
    tmp_path: Path, embedder: str | None, question: str, memory: int
) -> None:
    # the score was divided by BM25's limit for words repeated without end and there was no
    # stemming, so "deploy ... Friday" scored 0.15 against "Deploys ... never deploy on
    # Fridays" and the plugin left the warning out
    plugin = MemoryProvider(_facts(tmp_path, *RECALL, embedder=embedder))
    recalled = [g.text.split("\n", 1)[1] for g in plugin.recall(question)]
    assert recalled[:1] == [RECALL[memory]], (question, recalled)


@pytest.mark.parametrize("embedder", ["hashing", None])
@pytest.mark.parametrize(
    "query",
    [
        # real user messages that share one word of three with a memory
        "ok, what happens if you delete the theme?",
        "userMessageText is not used it seems?",
        # one rare word among others
        "Could you write a haiku about autumn leaves for Alice?",
    ],
)
def test_a_message_sharing_one_of_its_words_with_a_memory_recalls_nothing(
    tmp_path: Path, embedder: str | None, query: str
) -> None:
    store = _facts(tmp_path, embedder=embedder)
    assert any(h.bm25 > 0 for h in store.search(query, k=5))  # a word is shared
    assert MemoryProvider(store).recall(query) == []


@pytest.mark.parametrize("embedder", ["hashing", None])
def test_the_friday_deploy_warning_is_recalled_from_a_small_memory_folder(
    tmp_path: Path, embedder: str | None
) -> None:
    # in a folder of four notes the question scored 0.151 by BM25 alone ("today" held by no
    # entry, "deploy"/"Deploys" and "Friday"/"Fridays" not matched), under min_score
    store = MemoryStore(tmp_path, embedder=embedder)
    store.add_long_term("# Notes")
    for note in (RECALL[1], RECALL[0], "The user prefers pytest over unittest.", RECALL[2]):
        store.add_long_term(note)
    [grain] = MemoryProvider(store, k=1).recall("Can I deploy zephyr today? It's Friday")
    assert grain.text.endswith("never deploy on Fridays.")
