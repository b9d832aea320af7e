"""Long-term memory: ``MEMORY.md`` plus daily logs in one folder, searched by a hybrid of BM25
(the Rust ``Bm25Index``) and cosine similarity of embeddings (numpy).

Any ``texts -> vectors`` callable is an embedder; :class:`HashingEmbedder` is a deterministic
one that needs no model (hashed word and character n-gram features), so search works offline.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .._core import Bm25Index, bm25_tokenize
from ..errors import ConfigError
from .daily import DAILY_DIR, LONG_TERM, append_daily, check_text

logger = logging.getLogger(__name__)

__all__ = ("Embedder", "HashingEmbedder", "MemoryHit", "MemoryStore", "split_entries")

Embedder = Callable[[Sequence[str]], Any]
_BLOCK: Final = re.compile(r"\n\s*\n|^(?=#{1,3} )", re.M)


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """One search result: the entry ``text``, its ``source`` file (relative to the folder),
    its ``index`` in that file, and the hybrid ``score`` (with its two parts)."""

    text: str
    source: str
    index: int
    score: float
    bm25: float
    vector: float


class HashingEmbedder:
    """Deterministic embeddings without a model: words and character 3-grams hashed (blake2b)
    into ``dim`` signed buckets, L2-normalized.

    Raises:
        ValueError: ``dim`` is below 8.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ConfigError(f"dim is {dim}; expected at least 8")
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        words = bm25_tokenize(text)
        grams = [w[i : i + 3] for w in words if len(w) > 3 for i in range(len(w) - 2)]
        return words + grams

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self.dim] += 1.0 if value >> 63 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def split_entries(text: str, max_chars: int = 1200) -> list[str]:
    """Entries of a memory file: blocks split at blank lines and headings, long ones cut."""
    entries = []
    for block in _BLOCK.split(text):
        block = block.strip()
        while block:
            entries.append(block[:max_chars])
            block = block[max_chars:].strip()
    return entries


class MemoryStore:
    """``MEMORY.md`` and ``memory/YYYY-MM-DD.md`` in ``folder``, searchable.

    Args:
        folder: The memory folder (created on first write).
        embedder: ``texts -> array (n, dim)``; None: BM25 only. Default :class:`HashingEmbedder`.
        weight: Share of the vector score in the hybrid (the rest is BM25, scaled to [0, 1]).

    Raises:
        ValueError: ``weight`` outside [0, 1].
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        embedder: Embedder | str | None = "hashing",
        weight: float = 0.5,
    ) -> None:
        if not 0 <= weight <= 1:
            raise ConfigError(f"weight is {weight}; expected a fraction in [0, 1]")
        self.folder = Path(folder)
        self.embedder: Embedder | None = HashingEmbedder() if embedder == "hashing" else embedder  # type: ignore[assignment]
        self.weight = weight if self.embedder is not None else 0.0
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[str, int, int], ...] | None = None
        self._entries: list[tuple[str, int, str]] = []
        self._index = Bm25Index()
        self._vectors: npt.NDArray[np.float32] | None = None

    def files(self) -> list[Path]:
        """``MEMORY.md`` (when present) then the daily logs, oldest first."""
        files = [self.folder / LONG_TERM] if (self.folder / LONG_TERM).is_file() else []
        daily = self.folder / DAILY_DIR
        # files only: a folder named *.md or a dangling link is not a log (it made every
        # search fail)
        return files + (
            sorted(p for p in daily.glob("*.md") if p.is_file()) if daily.is_dir() else []
        )

    def remember(self, text: str, *, when: datetime | None = None) -> Path:
        """Append ``text`` to today's daily log (or ``when``'s). Returns the file.

        Raises:
            OSError: the folder cannot be written.
        """
        return append_daily(self.folder, text, when or datetime.now())

    def add_long_term(self, text: str) -> Path:
        """Append ``text`` to ``MEMORY.md``.

        Raises:
            OSError: the folder cannot be written.
            EncodingError: ``text`` is not a str, or holds a lone surrogate (nothing written).
        """
        check_text(text)
        path = self.folder / LONG_TERM
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(("\n" if path.stat().st_size else "") + text.strip() + "\n")
        return path

    def _refresh(self) -> None:
        files: list[Path] = []
        stamp = []
        for p in self.files():
            try:
                st = p.stat()
            except OSError:  # gone, or unreadable, since it was listed: not searched
                continue
            files.append(p)
            stamp.append((str(p), st.st_mtime_ns, st.st_size))
        if tuple(stamp) == self._stamp:
            return
        entries = []
        for path in files:
            rel = path.relative_to(self.folder).as_posix()
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:  # unreadable (permissions, a race): the others are searched
                logger.warning("memory file %s skipped: %s", path, exc)
                continue
            entries += [(rel, i, e) for i, e in enumerate(split_entries(text))]
        index = Bm25Index()
        index.add([str(i) for i in range(len(entries))], [e[2] for e in entries])
        vectors = None
        if self.embedder is not None and entries:
            vectors = np.asarray(self.embedder([e[2] for e in entries]), dtype=np.float32)
            if vectors.shape[0] != len(entries):
                raise ConfigError(
                    f"embedder returned {vectors.shape[0]} vectors for {len(entries)} texts"
                )
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32)
        self._entries, self._index, self._vectors, self._stamp = (
            entries,
            index,
            vectors,
            tuple(stamp),
        )

    def __len__(self) -> int:
        with self._lock:
            self._refresh()
            return len(self._entries)

    def search(self, query: str, k: int = 5) -> list[MemoryHit]:
        """The ``k`` entries best matching ``query``, best first (ties: file order).

        Raises:
            ValueError: ``k`` is below 1, or the embedder returned the wrong number of vectors.
        """
        if k < 1:
            raise ConfigError(f"k is {k}; expected at least 1")
        with self._lock:
            self._refresh()
            entries, index, vectors = self._entries, self._index, self._vectors
        if not entries or not query.strip():
            return []
        lexical = np.zeros(len(entries), dtype=np.float32)
        for doc, score in index.search(query, len(entries)):
            lexical[int(doc)] = score
        if lexical.max() > 0:
            lexical /= lexical.max()
        semantic = np.zeros(len(entries), dtype=np.float32)
        if vectors is not None and self.embedder is not None:
            q = np.asarray(self.embedder([query]), dtype=np.float32)[0]
            norm = float(np.linalg.norm(q))
            if norm > 0:
                semantic = np.clip(vectors @ (q / norm), 0.0, 1.0)
        hybrid = (1 - self.weight) * lexical + self.weight * semantic
        order = np.argsort(-hybrid, kind="stable")[:k]
        return [
            MemoryHit(
                entries[i][2],
                entries[i][0],
                entries[i][1],
                round(float(hybrid[i]), 6),
                round(float(lexical[i]), 6),
                round(float(semantic[i]), 6),
            )
            for i in order
            if hybrid[i] > 0
        ]
