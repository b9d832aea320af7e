"""`knowledge_retriever`: BM25 over a folder of documents, only when the message calls for it.

Documents (``.md``, ``.markdown``, ``.txt``, ``.rst`` by default) are split into passages of
about ``chunk_chars`` characters at paragraph boundaries and indexed with the Rust
``Bm25Index``. On each user message the plugin decides whether retrieval is warranted (a
question, or enough of the message's content words occur in the documents) and, if so, returns
the best passages as ``rag.<doc>.<chunk>`` grains with the source path in ``meta``.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio

from ..collect.events import UserMessage
from ..collect.scene import ContextScene
from ..errors import PluginError
from ..grain import ContextGrain
from ..splitter import TextSplitter

__all__ = ("KnowledgeRetriever", "Passage", "split_passages")

DEFAULT_EXTENSIONS: Final = (".md", ".markdown", ".txt", ".rst")
_WORD = re.compile(r"[^\W_]+")
_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK = re.compile(f"[{_CJK_CHARS}]")
_TOKEN = re.compile(f"[{_CJK_CHARS}]|[^\\W_{_CJK_CHARS}]+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_QUESTION_WORDS: Final = _words(
    "what how why when where which who whom whose explain describe define compare difference "
    "documentation docs guide example examples show tell"
)
_CJK_QUESTION = re.compile(r"什么|怎么|怎样|如何|为什么|哪|吗|呢|多少|是否|介绍|解释|说明")
_STOPWORDS: Final = _words(
    "a an the is are was were be been being am do does did of to in on at for with by from "
    "and or not no but if then so as it its this that these those i you he she we they me my "
    "your our their his her them us can could would should will shall may might must have has "
    "had please thanks thank ok okay yes hi hello hey just about into over than too very "
    "what how why when where which who whom whose"
) | frozenset("的了是在我你他她它们吗呢吧啊和与这那有个一不也就都要会能请")


@dataclass(frozen=True, slots=True)
class Passage:
    """One indexed passage: ``doc`` slug, ``chunk`` index, source ``path``, ``text``."""

    doc: str
    chunk: int
    path: str
    text: str

    @property
    def node_id(self) -> str:
        """``rag.<doc>.<chunk>``."""
        return f"rag.{self.doc}.{self.chunk}"


def split_passages(text: str, chunk_chars: int) -> list[str]:
    """Split ``text`` into passages of at most ~``chunk_chars`` at blank lines, then lines."""
    passages: list[str] = []
    current = ""
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        pieces = [block]
        if len(block) > chunk_chars:
            pieces = [p.rstrip("\n") for p in TextSplitter(chunk_chars, ("\n",)).split(block)]
        for piece in pieces:
            if current and len(current) + len(piece) + 2 > chunk_chars:
                passages.append(current)
                current = ""
            current = f"{current}\n\n{piece}" if current else piece
    if current:
        passages.append(current)
    return passages


def _slug(path: Path) -> str:
    raw = "-".join(path.with_suffix("").parts)
    return re.sub(r"[^A-Za-z0-9_\-]", "_", raw) or "doc"


def content_terms(message: str) -> list[str]:
    """Distinct lowercase content words of ``message``, stopwords removed, CJK per character
    (the same tokens the Rust index uses)."""
    seen: dict[str, None] = {}
    for term in _TOKEN.findall(message.lower()):
        if term in _STOPWORDS or (len(term) == 1 and not _CJK.match(term)):
            continue
        seen.setdefault(term, None)
    return list(seen)


class KnowledgeRetriever:
    """Retrieve passages from a folder of documents when the user message calls for it.

    Args:
        docs_dir: Folder to index (recursively; hidden files and folders are skipped).
        k: Maximum passages per message.
        min_coverage: Share of the message's content words that must occur in the documents
            for a non-question message to trigger retrieval.
        min_terms: Minimum number of matching content words for a non-question message.
        chunk_chars: Target passage size in characters.
        extensions: File suffixes to index.
        max_file_bytes: Larger files are skipped.
        priority: Plugin priority; passage ``i`` (rank) gets grain priority ``priority + 10 + i``.

    Raises:
        PluginError: ``docs_dir`` is not a folder, or a numeric option is out of range.
    """

    name = "knowledge_retriever"
    version = "1.0.0"

    def __init__(
        self,
        docs_dir: str | Path,
        *,
        k: int = 3,
        min_coverage: float = 0.5,
        min_terms: int = 2,
        chunk_chars: int = 1200,
        extensions: tuple[str, ...] = DEFAULT_EXTENSIONS,
        max_file_bytes: int = 2_000_000,
        priority: int = 30,
    ) -> None:
        self.docs_dir = Path(docs_dir)
        if not self.docs_dir.is_dir():
            raise PluginError(f"docs_dir {str(docs_dir)!r} is not a folder", plugin=self.name)
        if k < 1 or chunk_chars < 100 or not 0 < min_coverage <= 1 or min_terms < 1:
            raise PluginError(
                "need k >= 1, chunk_chars >= 100, 0 < min_coverage <= 1, min_terms >= 1",
                plugin=self.name,
            )
        self.k = k
        self.min_coverage = min_coverage
        self.min_terms = min_terms
        self.chunk_chars = chunk_chars
        self.extensions = tuple(e.lower() for e in extensions)
        self.max_file_bytes = max_file_bytes
        self.priority = priority
        self.enabled = True
        self._lock = threading.Lock()
        self._index: Any = None
        self._passages: dict[str, Passage] = {}

    # -- index ------------------------------------------------------------------------------

    def _files(self) -> list[Path]:
        files = []
        root = self.docs_dir.resolve()
        for path in sorted(self.docs_dir.rglob("*")):
            rel = path.relative_to(self.docs_dir)
            if any(part.startswith(".") for part in rel.parts):
                continue
            if path.suffix.lower() not in self.extensions or not path.is_file():
                continue
            if not path.resolve().is_relative_to(root) or path.stat().st_size > self.max_file_bytes:
                continue
            files.append(path)
        return files

    def refresh(self) -> int:
        """(Re)build the index from the folder; returns the number of passages. Blocking."""
        from .._core import Bm25Index

        index = Bm25Index()
        passages: dict[str, Passage] = {}
        used: set[str] = set()
        for path in self._files():
            rel = path.relative_to(self.docs_dir)
            slug = base = _slug(rel)
            n = 2
            while slug in used:
                slug, n = f"{base}_{n}", n + 1
            used.add(slug)
            text = path.read_text(encoding="utf-8", errors="replace")
            for i, chunk in enumerate(split_passages(text, self.chunk_chars)):
                passage = Passage(slug, i, rel.as_posix(), chunk)
                passages[passage.node_id] = passage
        index.add(list(passages), [p.text for p in passages.values()])
        with self._lock:
            self._index, self._passages = index, passages
        return len(passages)

    async def setup(self, engine: object) -> None:
        """Build the index in a worker thread (called once by the engine)."""
        await anyio.to_thread.run_sync(self.refresh)

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Nothing per turn: retrieval happens in :meth:`on_user_msg`."""
        return []

    # -- retrieval ----------------------------------------------------------------------------

    def should_retrieve(self, message: str) -> bool:
        """Whether ``message`` calls for retrieval.

        A question (``?``, a question word, or a Chinese question phrase) with at least one
        content word found in the documents; or any message where at least ``min_terms`` content
        words, and ``min_coverage`` of them, occur in the documents.
        """
        index = self._ensure_index()
        terms = content_terms(message)
        if not terms:
            return False
        matched, total = (int(n) for n in index.coverage(" ".join(terms)))
        lowered = message.lower()
        question = (
            "?" in message
            or "？" in message
            or bool(_QUESTION_WORDS.intersection(_WORD.findall(lowered)))
            or bool(_CJK_QUESTION.search(message))
        )
        if question and matched >= 1:
            return True
        return matched >= self.min_terms and matched / max(total, 1) >= self.min_coverage

    def _ensure_index(self) -> Any:
        if self._index is None:
            self.refresh()
        return self._index

    def search(self, message: str) -> list[tuple[Passage, float]]:
        """The best passages for ``message`` (no trigger check). Blocking."""
        index = self._ensure_index()
        query = " ".join(content_terms(message)) or message
        return [(self._passages[node], score) for node, score in index.search(query, self.k)]

    def retrieve(self, message: str) -> list[ContextGrain]:
        """Grains for ``message`` if it calls for retrieval, else ``[]``. Blocking."""
        if not message.strip() or not self.should_retrieve(message):
            return []
        grains = []
        for rank, (passage, score) in enumerate(self.search(message)):
            grains.append(
                ContextGrain(
                    node_id=passage.node_id,
                    origin=self.name,
                    content=f"[{passage.path}]\n{passage.text}",
                    priority=self.priority + 10 + rank,
                    lifespan="turn",
                    meta={
                        "source": passage.path,
                        "path": str(self.docs_dir / passage.path),
                        "chunk": passage.chunk,
                        "rank": rank,
                        "score": round(float(score), 4),
                    },
                )
            )
        return grains

    async def on_user_msg(self, event: UserMessage) -> list[ContextGrain]:
        """Retrieve for the new message in a worker thread."""
        return await anyio.to_thread.run_sync(self.retrieve, event.user_message)
