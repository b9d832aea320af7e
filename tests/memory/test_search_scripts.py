"""Search across the ways of writing a word: case, accents, Unicode forms, scripts written
without spaces or with particles attached, and the same fact written twice."""

from __future__ import annotations

import inspect
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


#: Chinese facts: one holds the word 数据库迁移 (database migration), one each of its
#: characters apart ("it is said the stock of the storeroom moves to the mobile store"), one a
#: part of it (数据, data), one none of it.
CHINESE_WORD = [
    "据说库房的数量会迁到移动仓。",
    "周五不要做数据库迁移，先在测试环境验证。",
    "地图由库房数据生成，迁址后再更新。",
    "部署必须通过发布分支，绝不能用主分支。",
]
#: Japanese facts of kana and kanji: the production database's migration, a fact holding
#: 移, 行 and の apart ("the change of destination moves to next week"), the migration steps.
JAPANESE = [
    "本番データベースの移行は金曜日にしない。",
    "行き先の変更は来週に移す。",
    "データの移行手順はwikiにある。",
]


@EMBEDDERS
@pytest.mark.parametrize(
    "query",
    [
        pytest.param("数据库迁移", id="word"),  # database migration
        pytest.param("迁移", id="part"),  # migration
        pytest.param("数据库迁移要注意什么？", id="question"),  # what to watch in a migration?
    ],
)
def test_a_chinese_word_finds_the_fact_holding_it_not_its_characters_apart(
    tmp_path: Path, embedder: str | None, query: str
) -> None:
    # one term per character: the shorter fact holding 数, 据, 库, 迁, 移 apart matched the
    # word as well as the fact holding it, and ranked first
    store = _store(tmp_path, CHINESE_WORD, embedder)
    hits = store.search(query, k=4)
    assert hits[0].text == CHINESE_WORD[1], [h.text for h in hits]
    apart = [h.bm25 for h in hits if h.text == CHINESE_WORD[0]]
    assert apart in ([], [0.0]), apart


@EMBEDDERS
def test_japanese_kana_and_kanji_find_the_fact_holding_the_words(
    tmp_path: Path, embedder: str | None
) -> None:
    store = _store(tmp_path, JAPANESE, embedder)
    hits = store.search("データベースの移行", k=3)
    assert [h.text for h in hits[:2]] == [JAPANESE[0], JAPANESE[2]]
    # 移, 行 and の apart are no match (they were three of the query's eight terms)
    assert [h.bm25 for h in hits if h.text == JAPANESE[1]] in ([], [0.0])


@pytest.mark.parametrize(
    ("facts", "char"),
    [
        pytest.param(CHINESE_WORD, "库", id="chinese"),  # storeroom, store
        pytest.param(JAPANESE, "の", id="japanese-particle"),
        pytest.param(JAPANESE, "移", id="japanese-kanji"),
        # 집 (house) in 집에 (to the house) and 집중 (focus)
        pytest.param(
            ["집에 가고 싶어요.", "오후에는 집중 시간이에요.", "회의는 내일이에요."],
            "집",
            id="korean",
        ),
    ],
)
def test_a_query_of_one_character_finds_every_fact_holding_it(
    tmp_path: Path, facts: list[str], char: str
) -> None:
    """A lone character of a query is searched as itself (Lucene's CJKBigramFilter outputs a
    lone character as a unigram), and the entries index each ideograph, kana and Hangul
    syllable on their own as well as in pairs (its ``outputUnigrams``), so it finds them. A
    Korean syllable was found only where it stood alone: "집" met neither "집에" nor "집중"."""
    store = _store(tmp_path, facts, None)
    found = {h.text for h in store.search(char, k=len(facts)) if h.bm25 > 0}
    assert found == {f for f in facts if char in f}
    assert found


#: A memory folder's notes written in Chinese.
NOTES = [
    "测试数据库是db-staging-02，不要在上面运行迁移。",  # the staging database is ...
    "部署必须通过发布分支，绝不能用主分支。",  # deploys go through the release branch
    "周五下午不要部署，周一早上再发布。",  # no deploys on Friday afternoon, release on Monday
    "缓存用Redis，键在15分钟后过期。",  # the cache is Redis, keys expire after 15 minutes
    "前端目录里用pnpm安装依赖，不要用npm。",  # install dependencies with pnpm in the front end
    "数据库备份每天凌晨三点运行，保存三十天。",  # the database backup runs at 3 am, kept 30 days
    "用户说他更喜欢简短的回答，不要写太长。",  # the user prefers short answers
    "日志里的时间都是UTC，显示给用户时要转成北京时间。",  # log times are UTC, shown as Beijing time
    "我们的接口文档在docs/api目录，改接口时要一起更新。",  # the API docs are in docs/api
    "代码评审至少要有两个人同意才能合并。",  # a merge needs two approving reviews
]


@pytest.mark.parametrize(
    ("question", "note"),
    [
        # when does the database backup run, and how long is it kept?
        pytest.param("数据库备份是几点运行的，要保存多久？", 5, id="backup"),
        # what should install the front end's dependencies?
        pytest.param("前端那边安装依赖应该用什么工具？", 4, id="pnpm"),
        pytest.param("周五可以部署吗？", 2, id="friday"),  # can I deploy on Friday?
        pytest.param("发布分支是哪个？", 1, id="branch"),  # which is the release branch?
        pytest.param("合并代码之前要几个人评审？", 9, id="review"),  # reviews before a merge?
        pytest.param("日志的时间是什么时区的？", 7, id="timezone"),  # the log times' zone?
    ],
)
def test_a_chinese_question_recalls_its_note_and_only_it(
    tmp_path: Path, question: str, note: int
) -> None:
    """BM25 alone, at the default ``min_score``. One term per character recalled the staging
    database note too for the backup question (数据库, 运行 and 的 apart). Pairs of the
    question that no note holds ("志的", "么时"...: across words, or with a particle) counted
    at the highest idf held three of these under ``min_score``; they count at the idf of their
    commoner character."""
    store = _store(tmp_path, NOTES, None)
    recalled = [g.text.split("\n", 1)[1] for g in MemoryProvider(store).recall(question)]
    assert recalled == [NOTES[note]], recalled


MIXED = [
    "我们用Redis做缓存，键在15分钟后过期。",  # we cache with Redis, keys expire after 15 minutes
    "存档和缓冲区都保存在本地磁盘。",  # archives and buffers are kept on the local disk
    "Redis 只在测试环境运行。",  # Redis runs only in the test environment
    "FileStoreは書き込みごとにfsyncする。",  # FileStore fsyncs on every write
]


@EMBEDDERS
def test_latin_words_written_into_cjk_text_stay_whole(tmp_path: Path, embedder: str | None) -> None:
    store = _store(tmp_path, MIXED, embedder)
    hits = store.search("Redis缓存多久过期？", k=4)  # how long until the Redis cache expires?
    assert hits[0].text == MIXED[0]
    bm25 = {h.text: h.bm25 for h in hits}
    assert bm25.get(MIXED[2], 0) > 0  # "Redis" meets, written against Chinese or apart
    assert bm25.get(MIXED[1], 0) == 0  # 缓 and 存 apart (in 缓冲, 存档) are no match
    [hit] = store.search("FileStore の fsync", k=1)
    assert hit.text == MIXED[3] and hit.bm25 > 0.5


def test_latin_memories_score_the_same_with_cjk_pairs() -> None:
    """For text without CJK, Hangul or Thai-like letters the index of pairs is the index of
    words: the same terms, the same scores, bit for bit, on the Latin entries and questions of
    these tests and of ``test_store.py``."""
    from ctxengine._core import Bm25Index, bm25_tokenize, bm25_words
    from ctxengine.memory.store import _lexical

    from .test_store import FACTS, RECALL

    entries = [_lexical(t) for t in [*LATIN, *FACTS, *RECALL]]
    words, paired = Bm25Index(), Bm25Index(cjk="pairs")
    for index in (words, paired):
        index.add([str(i) for i in range(len(entries))], entries)
    queries = [
        "cafe zurich",
        "résumé template",
        "Can I deploy zephyr today? It's Friday",
        "Which port does the Zephyr staging database use?",
        "what color was the footer stats line using again, and what should it be instead?",
        "userMessageText is not used it seems?",
    ]
    for query in map(_lexical, queries):
        assert paired.search(query, len(entries)) == words.search(query, len(entries))
        assert paired.terms(query) == list(dict.fromkeys(bm25_tokenize(query)))
        assert bm25_words(query) == bm25_tokenize(query)


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


def test_the_default_embedder_keeps_a_fact_of_scattered_characters_under_the_threshold(
    tmp_path: Path,
) -> None:
    """The hashing embedder hashed one feature per CJK character: the fact holding 数, 据, 库,
    迁, 移 apart was as near to "数据库迁移" as the fact holding the word (vector 0.62), and the
    default hybrid kept it over ``min_score`` (0.31): the memory plugin injected it."""
    from ctxengine.memory.store import _cjk_pairs

    store = _store(tmp_path, CHINESE_WORD, "hashing")
    scores = {h.text: h for h in store.search("数据库迁移", k=4)}
    apart, holding = scores[CHINESE_WORD[0]], scores[CHINESE_WORD[1]]
    min_score = inspect.signature(MemoryProvider).parameters["min_score"].default
    assert apart.score < min_score < holding.score
    assert apart.vector < holding.vector
    # text without CJK keeps its features: no pairs are added to its words and 3-grams
    english = ["Deploys go through the release branch.", "Never deploy on Fridays, café or not."]
    assert [_cjk_pairs(t) for t in english] == [[], []]
