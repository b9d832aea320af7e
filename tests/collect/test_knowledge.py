"""BM25 (Rust binding, checked against a Python reference) and the knowledge_retriever plugin."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxengine._core import Bm25Index
from ctxengine.builtins import KnowledgeRetriever
from ctxengine.builtins.knowledge_retriever import content_terms, split_passages
from ctxengine.errors import PluginError
from ctxengine.events import UserMessage
from ctxengine.plugins import SessionDispatcher
from ctxengine.registry import Registry

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
TOKEN = re.compile(f"[{CJK}]|[^\\W_{CJK}]+")


#: ``cjk="pairs"``: runs of ideographs, kana and Hangul syllables (indexed one by one too) and
#: runs of Thai letters (pairs only), apart from the other words
SYLLABIC = CJK + "\uac00-\ud7af"
LETTERS = "\u0e00-\u0eff"
RUN = re.compile(f"([{SYLLABIC}]+)|([{LETTERS}]+)|[^\\W_{SYLLABIC}{LETTERS}]+")


def reference_pairs(text: str, document: bool) -> list[str]:
    """Lucene's CJKBigramFilter: a run as its overlapping pairs, a run of one as itself; a
    document's ideographs, kana and syllables also one by one (``outputUnigrams``)."""
    terms = []
    for match in RUN.finditer(text.lower()):
        run = match.group()
        if len(run) == 1 or not (match.group(1) or match.group(2)):
            terms.append(run)
            continue
        terms += [run[i : i + 2] for i in range(len(run) - 1)]
        if document and match.group(1):
            terms += list(run)
    return terms


def reference_scores(
    docs: list[str],
    query: str,
    k1: float = 1.2,
    b: float = 0.75,
    cjk: str = "chars",
) -> list[float]:
    """Textbook Okapi BM25 with the non-negative Lucene IDF, distinct query terms."""
    if cjk == "pairs":
        tokenized = [reference_pairs(d, document=True) for d in docs]
        asked = reference_pairs(query, document=False)
    else:
        tokenized = [TOKEN.findall(d.lower()) for d in docs]
        asked = TOKEN.findall(query.lower())
    n = len(docs)
    avg = max(sum(map(len, tokenized)) / n, 1.0)
    scores = [0.0] * n
    for term in dict.fromkeys(asked):
        df = sum(term in t for t in tokenized)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, toks in enumerate(tokenized):
            tf = toks.count(term)
            if tf:
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avg))
    return scores


DOCS = [
    "Plugins register through manifest.json files with a name and a version.",
    "The budget allocator splits tokens between windows: history, tool, instruction.",
    "Folding replaces a branch by a one-line stand-in; folding keeps existence visible.",
    "插件通过清单文件注册，引擎按优先级调度插件。",
]


def test_binding_matches_reference() -> None:
    index = Bm25Index()
    index.add([f"d{i}" for i in range(len(DOCS))], DOCS)
    assert len(index) == 4 and "documents=4" in repr(index)
    for query in ["folding branch", "plugins version manifest", "插件注册", "tokens windows"]:
        expected = reference_scores(DOCS, query)
        got = dict(index.search(query, 10))
        for i, score in enumerate(expected):
            assert got.get(f"d{i}", 0.0) == pytest.approx(score, rel=1e-5), (query, i)
        ranked = [doc for doc, _ in index.search(query, 10)]
        assert ranked == sorted(got, key=lambda d: (-got[d], int(d[1:])))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(alphabet="abc de插件", min_size=1, max_size=30), min_size=1, max_size=8),
    st.text(alphabet="abc d插", max_size=10),
)
def test_binding_matches_reference_on_random_text(docs: list[str], query: str) -> None:
    index = Bm25Index()
    index.add([str(i) for i in range(len(docs))], docs)
    got = dict(index.search(query, len(docs)))
    for i, score in enumerate(reference_scores(docs, query)):
        assert got.get(str(i), 0.0) == pytest.approx(score, rel=1e-4, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(alphabet="ab d插件数据の집에ทด", min_size=1, max_size=30), min_size=1, max_size=8
    ),
    st.text(alphabet="ab d插件数据の집ทด", max_size=10),
)
def test_binding_with_cjk_pairs_matches_reference_on_random_text(
    docs: list[str], query: str
) -> None:
    index = Bm25Index(cjk="pairs")
    index.add([str(i) for i in range(len(docs))], docs)
    got = dict(index.search(query, len(docs)))
    for i, score in enumerate(reference_scores(docs, query, cjk="pairs")):
        assert got.get(str(i), 0.0) == pytest.approx(score, rel=1e-4, abs=1e-6)
    assert index.terms(query) == list(dict.fromkeys(reference_pairs(query, document=False)))


def test_binding_errors_and_coverage() -> None:
    index = Bm25Index(k1=1.5, b=0.5)
    index.add(["a"], ["Fox fox den"])
    assert index.coverage("fox zebra FOX") == (1, 2) and index.doc_freq("FOX") == 1
    assert index.search("fox", 0) == []
    with pytest.raises(ValueError, match="same length"):
        index.add(["x", "y"], ["only one"])
    with pytest.raises(ValueError, match="b must be between 0 and 1"):
        Bm25Index(b=1.5)
    with pytest.raises(ValueError, match="k1"):
        Bm25Index(k1=-1)
    with pytest.raises(ValueError, match='cjk must be "chars" or "pairs"; got "bigrams"'):
        Bm25Index(cjk="bigrams")  # type: ignore[arg-type]


def test_split_passages_and_terms() -> None:
    text = "\n\n".join(f"paragraph {i} " + "word " * 40 for i in range(10))
    passages = split_passages(text, 500)
    assert all(len(p) <= 500 for p in passages) and len(passages) >= 4
    assert "".join(passages).count("paragraph") == 10
    assert split_passages("x" * 1200, 500) == ["x" * 500, "x" * 500, "x" * 200]
    assert content_terms("How do I register a plugin? 插件注册") == [
        "register",
        "plugin",
        "插",
        "件",
        "注",
        "册",
    ]


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "guide" / "plugins.md").write_text(
        "# Plugins\n\nA plugin folder holds manifest.json and plugin.py.\n\n"
        "The manifest declares name, version, entry and priority.\n"
    )
    (root / "budget.txt").write_text(
        "Budget windows share the token budget. The reserve window is never filled.\n"
    )
    (root / "插件.md").write_text("插件通过清单文件注册，引擎按优先级调度插件。\n")
    (root / ".hidden" / "secret.md").write_text("manifest secret never indexed\n")
    (root / "image.png").write_bytes(b"\x89PNG manifest")
    return root


def test_retriever_only_when_called_for(docs: Path) -> None:
    kr = KnowledgeRetriever(docs, k=2)
    assert kr.refresh() == 3
    assert kr.retrieve("thanks, that's all!") == []
    assert kr.retrieve("ok") == []
    assert kr.retrieve("What is the capital of France?") == []  # question, but no overlap
    grains = kr.retrieve("How does the manifest declare the plugin version?")
    assert [g.node_id for g in grains] == ["rag.guide-plugins.0"]
    grain = grains[0]
    assert grain.meta["source"] == "guide/plugins.md" and grain.meta["rank"] == 0
    assert grain.text.startswith("[guide/plugins.md]\n# Plugins")
    assert grain.priority == 40 and grain.lifespan == "turn"
    # Not a question, but most content words are in the documents.
    assert [g.meta["source"] for g in kr.retrieve("reserve window token budget")] == ["budget.txt"]
    assert [g.meta["source"] for g in kr.retrieve("插件怎么注册")] == ["插件.md"]


def test_retriever_refresh_and_options(docs: Path, tmp_path: Path) -> None:
    kr = KnowledgeRetriever(docs, k=1)
    assert kr.retrieve("what about kubernetes operators?") == []
    (docs / "k8s.md").write_text("Kubernetes operators reconcile desired state.\n")
    assert kr.refresh() == 4
    assert [g.node_id for g in kr.retrieve("what about kubernetes operators?")] == ["rag.k8s.0"]
    with pytest.raises(PluginError, match="not a folder"):
        KnowledgeRetriever(tmp_path / "missing")
    with pytest.raises(PluginError, match="k >= 1"):
        KnowledgeRetriever(docs, k=0)


@pytest.mark.anyio
async def test_retriever_through_dispatcher(docs: Path) -> None:
    reg = Registry()
    kr = reg.register(KnowledgeRetriever(docs))
    assert await reg.setup(engine=None) == []
    d = SessionDispatcher(reg, "s1")
    out = await d.fire(UserMessage("s1", 0, "Which windows share the token budget?"))
    assert (out.grains[0].node_id, out.grains[0].origin) == ("rag.budget.0", kr.name)
    assert out.faults == []
