"""Search across the ways of writing a word: case, accents, Unicode forms, scripts written
without spaces or with particles attached, and the same fact written twice."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from ctxengine.builtins import MemoryProvider
from ctxengine.memory import MemoryStore

EMBEDDERS = pytest.mark.parametrize("embedder", ["hashing", None])


def _store(tmp_path: Path, facts: list[str], embedder: str | None) -> MemoryStore:
    store = MemoryStore(tmp_path, embedder=embedder)
    for fact in facts:
        store.add_long_term(fact)
    return store


LATIN = [
    "Le café de Zürich ouvre à 8h.",
    "The Straße entrance is closed on Mondays.",
    # decomposed (NFD), as text pasted from a macOS file name is
    unicodedata.normalize("NFD", "The résumé template is in docs/cv.md."),
    "Deploys go through the release branch.",
]


@EMBEDDERS
@pytest.mark.parametrize(
    ("query", "fact"),
    [
        ("cafe zurich", 0),  # no accents typed
        ("CAFÉ ZÜRICH", 0),  # upper case
        (unicodedata.normalize("NFD", "café zürich"), 0),  # decomposed
        ("strasse entrance", 1),  # ß written out
        ("résumé template", 2),  # composed, against a decomposed entry
        ("resume template", 2),
        ("ＲＥＳＵＭＥ template", 2),  # full-width letters (an East Asian keyboard)
    ],
)
def test_the_ways_of_writing_a_latin_word_meet(
    tmp_path: Path, embedder: str | None, query: str, fact: int
) -> None:
    # BM25 matched none of these words: "cafe" is not "café", a decomposed "résumé" was two
    # tokens ("re", "sume"), "ＲＥＳＵＭＥ" a token of its own
    store = _store(tmp_path, LATIN, embedder)
    [grain] = MemoryProvider(store, k=1).recall(query)
    assert grain.text.endswith(LATIN[fact])
    assert store.search(query, k=1)[0].bm25 >= 0.5, query


KOREAN = [
    "스테이징 데이터베이스는 db-staging-02입니다.",  # the staging database is db-staging-02
    "배포는 릴리스 브랜치를 통해야 합니다.",  # deploys must go through the release branch
    "앨리스는 프랑스어 답변을 선호합니다.",  # Alice prefers answers in French
]
THAI = [
    "ฐานข้อมูลทดสอบคือ db-staging-02 ห้ามรันการย้ายข้อมูล",  # the test database is ...
    "การปรับใช้ต้องผ่านสาขารีลีส",  # deploys must go through the release branch
]


@EMBEDDERS
@pytest.mark.parametrize(
    ("facts", "query", "fact"),
    [
        # a particle is written onto its word: "데이터베이스가" (subject) against
        # "데이터베이스는" (topic) were different tokens, so BM25 matched nothing
        (KOREAN, "스테이징 데이터베이스가 뭐예요?", 0),
        (KOREAN, "배포를 어떻게 해요? 릴리스 브랜치로?", 1),
        # Thai has no spaces between words: a sentence was one token (cut at tone marks),
        # and a question matched only by chance
        (THAI, "ฐานข้อมูลทดสอบ", 0),
        (THAI, "การปรับใช้ผ่านสาขาไหน", 1),
    ],
)
def test_scripts_without_word_boundaries_for_bm25_recall_their_memory(
    tmp_path: Path, embedder: str | None, facts: list[str], query: str, fact: int
) -> None:
    store = _store(tmp_path, facts, embedder)
    recalled = [g.text.split("\n", 1)[1] for g in MemoryProvider(store).recall(query)]
    assert recalled[:1] == [facts[fact]], recalled
    assert store.search(query, k=1)[0].bm25 > 0.25


CHINESE = [
    "测试数据库是db-staging-02，不要在上面运行迁移。",  # the staging database is ...
    "部署必须通过发布分支，绝不能用主分支。",  # deploys go through the release branch
]


@EMBEDDERS
def test_chinese_recalls_its_memory_and_an_unrelated_message_nothing(
    tmp_path: Path, embedder: str | None
) -> None:
    store = _store(tmp_path, CHINESE, embedder)
    plugin = MemoryProvider(store)
    assert plugin.recall("测试数据库是哪个？")[0].text.endswith(CHINESE[0])
    assert plugin.recall("今天天气怎么样？") == []  # how is the weather today?


@EMBEDDERS
def test_a_fact_written_twice_takes_one_place_among_the_hits(
    tmp_path: Path, embedder: str | None
) -> None:
    # the same fact three times (remembered again, or flushed on each compaction attempt)
    # filled every one of the k places, and the other relevant entry was left out
    fact = "Deploys go through the release branch."
    other = "Release notes live in docs/releases."
    store = _store(tmp_path, [fact, fact, other], embedder)
    store.remember(fact)
    hits = store.search("release branch", k=2)
    assert [h.text for h in hits] == [fact, other]
    assert hits[0].source == "MEMORY.md" and hits[0].index == 0  # the first written


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("мой", "мои"),  # й and и: two letters in Russian ("my" and "mine", plural)
        ("Й", "И"),
        ("ў", "у"),  # Belarusian short u
    ],
)
def test_the_breve_of_a_cyrillic_letter_is_not_folded_away(one: str, other: str) -> None:
    """Folding takes accents off Latin letters (ă is a) but not the breve that makes й a
    letter of its own: "мой" and "мои" are two words, and a search for one must not count
    the other as a match."""
    from ctxengine.memory.store import fold

    assert fold(one) != fold(other)
    assert fold(one) == fold(unicodedata.normalize("NFD", one))  # one letter however written
    assert fold("ă") == "a"


def test_a_cyrillic_word_with_a_breve_finds_itself_not_its_neighbour(tmp_path: Path) -> None:
    facts = ["мой ключ лежит в сейфе", "мои ключи потеряны"]  # my key is in the safe / keys lost
    store = _store(tmp_path, facts, None)
    hits = store.search("мой", k=2)
    assert [h.text for h in hits if h.bm25 > 0] == [facts[0]]


def test_a_fact_written_again_in_other_case_or_held_by_a_better_hit_takes_no_place(
    tmp_path: Path,
) -> None:
    """Hits were told apart by their exact text: the same fact written again with a capital
    letter or other spacing took a second place, as did one a better hit holds whole."""
    facts = [
        "the user prefers tabs over spaces",
        "The user prefers  tabs over spaces",
        "the user prefers tabs",
        "Tabs are rendered as four spaces in the CI logs",
        "CI runs on every push",
    ]
    store = _store(tmp_path, facts, None)
    texts = [h.text for h in store.search("user prefers tabs over spaces", k=5)]
    assert texts[0] == facts[0]
    assert facts[1] not in texts and facts[2] not in texts
    assert facts[3] in texts  # another fact, however similar
    # held as whole words only: "ci" is in "special", not a hit holding "CI runs ..."
    special = "special characters are escaped"
    store.add_long_term(special)
    assert {special, facts[4]} <= {h.text for h in store.search("special CI", k=5)}
