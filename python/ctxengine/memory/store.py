"""Long-term memory: ``MEMORY.md`` plus daily logs in one folder, searched by a hybrid of BM25
(the Rust ``Bm25Index``) and cosine similarity of embeddings (numpy).

Any ``texts -> vectors`` callable is an embedder; :class:`HashingEmbedder` is a deterministic
one that needs no model (hashed word and character n-gram features), so search works offline.

How a score is made (so that ``min_score`` means the same for every query):

- BM25 indexes the entries' words, :func:`fold`-ed (case, accents, Unicode forms: "cafe"
  meets "Café", "strasse" "Straße"), less common English function words (:data:`STOPWORDS`),
  each reduced by :func:`stem`, a light suffix stemmer: "the" or "is" in a question says
  nothing about which memory it is about, and a query made only of such words matches no
  entry lexically; "Can I deploy on Friday?" meets "Deploys ... never on Fridays".
- How each script is indexed. Words of scripts that space them (Latin, Cyrillic, Greek...):
  whole, as above. A run of CJK ideographs and kana (Chinese, Japanese), of Hangul (a Korean
  particle is written onto its word), or of Thai, Lao, Myanmar or Khmer letters (no space
  between words): its overlapping character pairs, as CJK search engines index them
  (Lucene's ``CJKBigramFilter``, Elasticsearch's ``cjk`` analyzer), so "数据库迁移" is
  searched as "数据", "据库", "库迁", "迁移", which an entry holding 数, 据, 库... apart does
  not hold (with one term per character, every entry holding the characters anywhere, in any
  order, matched the word, a shorter one better than the entry holding it). A Latin word or a
  number written against such a run is a word of its own ("用Redis做缓存": "用", "redis",
  "做缓", "缓存"); a run of one character is that character. Entries also index each
  ideograph, kana and Hangul syllable on its own (the filter's ``outputUnigrams``), queries
  only a lone one: a question of one character ("库", "の", "집") finds every entry holding
  it, a longer one is matched by its pairs only. A Thai letter is no word, so those scripts
  index pairs only. The Rust ``Bm25Index(cjk="pairs")`` cuts the runs; :func:`bm25_words`
  hands them to the filtering above whole.
- The BM25 part is the entry's BM25 score divided by the score of a complete match: an entry
  of average length holding each distinct query word once, i.e. the sum of the query words'
  idfs (``k1`` and ``b`` cancel out), those no entry holds counted at the highest idf. It is
  clipped to [0, 1] and absolute: 1.0 for a complete match (or a shorter entry, or one that
  repeats the words), about a third for an entry sharing one of three equally rare words,
  whatever the other entries score. (It was divided by the batch's best score, which made the
  best match 1.0 however weak, then by BM25's limit for words repeated without end,
  ``idf * (k1 + 1)``, which held a complete match to 0.45.) A word no entry holds still
  counts: it is what the message is about besides the entries, and without it a long message
  sharing two words with a short entry, or a three-word one sharing one, scores as if those
  were the whole message. Of 161 real user messages searched against five unrelated memories
  (BM25 alone, ``min_score`` 0.25), 69 then recalled one, 28 when only the three weightiest
  query words count, none with every word counted (``benches/memory_recall.py``). A pair of
  CJK characters no entry holds counts at the idf of its commoner character (see
  :func:`_doc_freq`): most such pairs of a question straddle two words or hold a particle.
- The vector part is the cosine similarity of the embeddings, clipped to [0, 1] (the
  :class:`HashingEmbedder` also leaves the :data:`STOPWORDS` out; its character 3-grams
  already meet across inflections, so its words are not stemmed); the hybrid is
  ``(1 - weight) * bm25 + weight * vector``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .._core import Bm25Index, bm25_tokenize, bm25_words
from ..errors import ConfigError, ConfigTypeError, EmbedderError
from ..transcript.model import valid_utf8
from .daily import DAILY_DIR, LONG_TERM, append_block, append_daily, check_text

logger = logging.getLogger(__name__)

__all__ = (
    "STOPWORDS",
    "Embedder",
    "HashingEmbedder",
    "MemoryHit",
    "MemoryStore",
    "fold",
    "split_entries",
    "stem",
)

Embedder = Callable[[Sequence[str]], Any]
_BLOCK: Final = re.compile(r"\n\s*\n|^(?=#{1,3} )", re.M)

STOPWORDS: Final = frozenset(
    # common English function words, as :func:`bm25_tokenize` yields them: lowercase, and the
    # pieces of contractions ("what's" -> "what", "s"; "don't" -> "don", "t") included
    """
    a about above after again against all am an and any are aren as at be because been before
    being below between both but by can could couldn d did didn do does doesn doing don during
    each few for from further had hadn has hasn have haven having he her here hers herself him
    himself his how i if in into is isn it its itself just ll m ma me might mightn more most
    must mustn my myself needn no nor not now o of on once only or other our ours ourselves out
    own re s same shan she should shouldn so some such t than that the their theirs them
    themselves then there these they this those through to too until ve very was wasn we were
    weren what when where which while who whom why will with won would wouldn y you your yours
    yourself yourselves
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
"""Words left out of the memory's BM25 index and queries (they appear in most entries and most
questions, so sharing one says nothing about relevance)."""


_VOWELS: Final = frozenset("aeiouy")


def stem(word: str) -> str:
    """A light English suffix stemmer for one :func:`bm25_words` word, so that the forms of
    one word meet: "deploys", "deployed", "deploying" -> "deploy"; "Fridays" -> "friday";
    "database", "databases" -> "databas"; "query", "queries" -> "queri".

    In order: a plural or third-person ``-ies`` becomes ``-i``, ``-sses`` ``-ss``, a final
    ``-s`` goes (not after ``s``, ``u`` or ``i``: "class", "status", "analysis"; not from a
    word of three letters: "gas"); else ``-ing`` or ``-ed`` goes when a vowel and two letters
    stay ("string", "shed" are kept; "-eed" too: "need"), and a doubled final consonant other
    than ``l``, ``s``, ``z`` is undoubled when four letters stay ("stopped" -> "stop", "added"
    -> "add"). Then a final ``-y`` after a consonant becomes ``-i`` and a final ``-e`` goes.
    A token that is not made of ASCII letters only (numbers, identifiers such as "e1042",
    other scripts) is returned as it is. Not a dictionary stemmer: a stem need not be a word,
    only the same for the forms of one word; it is deterministic and knows no exceptions.
    """
    if not (word.isascii() and word.isalpha()):
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "i"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s"):
        if len(word) > 3 and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
    elif word.endswith(("ing", "ed")) and not word.endswith("eed"):
        base = word[:-3] if word.endswith("ing") else word[:-2]
        if len(base) >= 2 and not _VOWELS.isdisjoint(base):
            word = base
            if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
    if len(word) > 2 and word[-1] == "y" and word[-2] not in _VOWELS:
        word = word[:-1] + "i"
    if len(word) > 2 and word[-1] == "e":
        word = word[:-1]
    return word


def _idf(n: int, df: int) -> float:
    """BM25's idf of a word ``df`` of ``n`` entries hold: the Rust index's formula
    (``rust/src/bm25.rs``, the Lucene variant), written again here for the score's ceiling; a
    change there must be made here too (``tests/memory/test_store.py`` pins both)."""
    return math.log1p((n - df + 0.5) / (df + 0.5))


#: Nonspacing and enclosing marks, less the kana voicing marks (NFC puts those back into the
#: kana, where "が" and "か" are different words).
_MARKS: Final = frozenset(("Mn", "Me"))
_KANA_VOICING: Final = frozenset("\u3099\u309a")
#: The breve that makes a letter of its own of a Cyrillic letter (й of и, ў of у): kept
#: after a Cyrillic letter ("мой" and "мои" are two words), taken off a Latin one (ă).
_BREVE: Final = "\u0306"


def _kept_mark(c: str, before: str) -> bool:
    """Whether :func:`fold` keeps the mark ``c`` after the character ``before``."""
    return c in _KANA_VOICING or (c == _BREVE and "\u0400" <= before <= "\u04ff")


def fold(text: str) -> str:
    """``text`` with case, accents and compatibility forms folded away, so that the ways of
    writing one word meet: "Café", "café" (composed or not) and "cafe"; "Straße" and
    "strasse"; full-width "ＤＢ" and "DB". Compatibility decomposition (NFKD), less the
    nonspacing and enclosing marks (accents; vowel points of Hebrew and Arabic; the marks of
    Thai and Indic scripts, which also split a word in two for :func:`bm25_tokenize`) but for
    the kana voicing marks and the breve of Cyrillic й and ў, recomposed (NFC) and
    case-folded. ASCII text is returned as it is.
    """
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKD", text)
    text = "".join(
        c
        for before, c in zip(" " + text, text, strict=False)
        if unicodedata.category(c) not in _MARKS or _kept_mark(c, before)
    )
    return unicodedata.normalize("NFC", text).casefold()


def _doc_freq(index: Bm25Index, term: str) -> int:
    """How many entries hold the query ``term``, for the score of a complete match; for a pair
    of CJK characters or Hangul syllables no entry holds, how many hold the commoner of its two
    characters (entries index them on their own too).

    Chinese and Japanese put no space between words, so most of a question's pairs no entry
    holds are no words: they straddle two ("迁移要注意", "migration: what to watch", gives
    "移要"), or hold a particle or a function character (的, 是, の, は), or are the question's
    own words ("你还记得", "do you remember"). Counted at the highest idf, as a word no entry
    holds, they kept an entry holding every word of the question that matters under
    ``min_score``: of 100 Chinese questions, 17 recalled their memory by BM25 alone; 80 with
    this count, and 3 other memories among their hits; 57 counting each such pair as often
    held as its rarer character, the most entries that could hold it
    (``benches/memory_recall.py``). A pair neither of whose characters any entry holds still
    counts at the highest idf.
    """
    df = index.doc_freq(term)
    if df:
        return df
    chars = [t for t in index.document_terms(term) if t != term]
    return max((index.doc_freq(c) for c in chars), default=0)


def _lexical(text: str) -> str:
    """``text`` as the BM25 index reads it: its :func:`fold`-ed words less :data:`STOPWORDS`,
    each :func:`stem`-med (:func:`stem` leaves words of other scripts as they are), a run of
    CJK, Hangul, Thai-like letters one word (:func:`bm25_words`), which the index
    (``cjk="pairs"``) cuts into character pairs."""
    return " ".join(stem(w) for w in bm25_words(fold(text)) if w not in STOPWORDS)


def _cjk_pairs(text: str) -> list[str]:
    """The overlapping character pairs of each run of CJK ideographs and kana in ``text`` (the
    runs :func:`bm25_tokenize` cuts into one word per character): with its characters alone
    among its features, an entry holding 数, 据, 库, 迁, 移 apart was as near to "数据库迁移"
    as the entry holding the word, and the hybrid score kept it over ``min_score``."""
    pairs: list[str] = []
    for run in bm25_words(fold(text)):
        if len(run) > 1 and not run.isascii():
            chars = bm25_tokenize(run)
            if len(chars) == len(run):  # one word per character: ideographs, kana
                pairs += [run[i : i + 2] for i in range(len(run) - 1)]
    return pairs


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
    into ``dim`` signed buckets, L2-normalized; a run of CJK ideographs and kana gives its
    characters and its overlapping pairs (:func:`_cjk_pairs`). Words of :data:`STOPWORDS` are
    left out, as from BM25, so a text made only of them is the zero vector (similar to
    nothing).

    Raises:
        ValueError: ``dim`` is below 8.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ConfigError(f"dim is {dim}; expected at least 8")
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        words = [w for w in bm25_tokenize(fold(text)) if w not in STOPWORDS]
        grams = [w[i : i + 3] for w in words if len(w) > 3 for i in range(len(w) - 2)]
        if text.isascii():
            return words + grams
        return words + grams + _cjk_pairs(text)

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
        start = 0  # cut by position: slicing off the rest each time was quadratic in the block
        while start < len(block):
            entries.append(block[start : start + max_chars])
            start += max_chars
            while start < len(block) and block[start].isspace():
                start += 1
    return entries


def _embed(embedder: Embedder, texts: list[str], names: list[str]) -> npt.NDArray[np.float32]:
    """``embedder(texts)`` as float32, checked: one row of finite real numbers per text, all
    of one length; ``names[i]`` says which text ``texts[i]`` is.

    A vector that is not finite used to make its entry's score NaN, and the entry was left out
    of every result (an exact lexical match too); a 1-D or wrong-length query vector raised
    numpy's own error.

    Raises:
        EmbedderError: the call raised, or what it returned is not such an array.
    """
    try:
        raw = embedder(texts)
    except Exception as exc:
        raise EmbedderError(
            f"embedder {_name(embedder)} raised {type(exc).__name__}: {exc} on "
            f"{_texts(len(texts))} ({names[0]}: {texts[0]!r:.60})"
        ) from exc
    try:
        array = np.asarray(raw)
    except ValueError as exc:  # rows of different lengths
        raise EmbedderError(
            f"embedder {_name(embedder)} returned {type(raw).__name__} that is not an array "
            f"({exc}); expected an array of shape ({len(texts)}, dim)"
        ) from exc
    if array.ndim != 2 or array.shape[0] != len(texts) or array.dtype.kind not in "biuf":
        raise EmbedderError(
            f"embedder {_name(embedder)} returned {type(raw).__name__} of shape {array.shape} "
            f"and dtype {array.dtype} for {_texts(len(texts))}; expected real numbers of shape "
            f"({len(texts)}, dim)"
        )
    array = array.astype(np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        raise EmbedderError(
            f"embedder {_name(embedder)} returned {array[row, col]} at [{row}, {col}], the vector "
            f"of {names[row]} {texts[row]!r:.60}; expected finite numbers"
        )
    largest = np.abs(array).max(axis=1, keepdims=True) if array.size else np.ones((len(texts), 1))
    if ((largest > 1e15) | ((largest > 0) & (largest < 1e-15))).any():
        # too large or too small for float32 or its norm (1e300 became inf, 1e-300 zero): each
        # row scaled to its largest value, which keeps its direction, all a cosine reads
        array = array / np.where(largest == 0, 1.0, largest)
    return array.astype(np.float32)


def _texts(n: int) -> str:
    return "1 text" if n == 1 else f"{n} texts"


def _name(embedder: object) -> str:
    return getattr(embedder, "__qualname__", None) or type(embedder).__name__


class MemoryStore:
    """``MEMORY.md`` and ``memory/YYYY-MM-DD.md`` in ``folder``, searchable.

    Args:
        folder: The memory folder (created on first write).
        embedder: ``texts -> array (n, dim)``; None: BM25 only. Default :class:`HashingEmbedder`.
        weight: Share of the vector score in the hybrid (the rest is BM25 over the score of
            a complete match, clipped to [0, 1]; see the module's notes).

    Raises:
        ConfigError: ``weight`` outside [0, 1], or ``folder`` holds a NUL.
        ConfigTypeError: ``folder`` is not a path, ``embedder`` neither ``"hashing"``, None
            nor a callable, or ``weight`` not a number.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        embedder: Embedder | str | None = "hashing",
        weight: float = 0.5,
    ) -> None:
        if not isinstance(folder, (str, os.PathLike)):
            raise ConfigTypeError(
                f"folder is {type(folder).__name__} {folder!r:.60}; expected a path (str or Path)"
            )
        if "\0" in os.fspath(folder):
            raise ConfigError(f"folder is {folder!r:.80}; expected a path without NUL")
        if embedder is not None and embedder != "hashing" and not callable(embedder):
            raise ConfigTypeError(
                f'embedder is {type(embedder).__name__} {embedder!r:.60}; expected "hashing", '
                "None or a callable texts -> array (n, dim)"
            )
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ConfigTypeError(
                f"weight is {type(weight).__name__} {weight!r:.60}; expected a number in [0, 1]"
            )
        if not 0 <= weight <= 1:
            raise ConfigError(f"weight is {weight}; expected a fraction in [0, 1]")
        self.folder = Path(folder)
        self.embedder: Embedder | None = HashingEmbedder() if embedder == "hashing" else embedder  # type: ignore[assignment]
        self.weight = weight if self.embedder is not None else 0.0
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[str, int, int], ...] | None = None
        self._entries: list[tuple[str, int, str]] = []
        self._index = Bm25Index(cjk="pairs")
        self._vectors: npt.NDArray[np.float32] | None = None
        # unit vectors by entry text, and the embedder that made them
        self._embedded: dict[str, npt.NDArray[np.float32]] = {}
        self._embedded_by: Embedder | None = None

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
            EncodingError: ``text`` is not a str, or holds a lone surrogate or a NUL (nothing
                written).
            ConfigError: ``text`` is blank or longer than
                :data:`~ctxengine.memory.daily.MAX_TEXT_CHARS` (nothing written).
            ConfigTypeError: ``when`` is not a datetime or a date.
        """
        return append_daily(self.folder, text, when or datetime.now())

    def add_long_term(self, text: str) -> Path:
        """Append ``text`` to ``MEMORY.md``, durably, as an entry of its own (see
        :func:`~ctxengine.memory.daily.append_block`).

        Raises:
            OSError: the folder cannot be written.
            EncodingError: ``text`` is not a str, or holds a lone surrogate or a NUL (nothing
                written).
            ConfigError: ``text`` is blank or longer than
                :data:`~ctxengine.memory.daily.MAX_TEXT_CHARS` (nothing written).
        """
        return append_block(self.folder / LONG_TERM, check_text(text))

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
        seen = tuple(stamp)
        if seen == self._stamp:
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
        index = Bm25Index(cjk="pairs")
        index.add([str(i) for i in range(len(entries))], [_lexical(e[2]) for e in entries])
        vectors = None
        if self.embedder is not None and entries:
            vectors = self._embed_entries(self.embedder, entries)
        self._entries, self._index, self._vectors, self._stamp = entries, index, vectors, seen

    def _embed_entries(
        self, embedder: Embedder, entries: list[tuple[str, int, str]]
    ) -> npt.NDArray[np.float32]:
        """The entries' unit vectors. Only texts not embedded before are sent to ``embedder``
        (each once): a fact appended to a log, or a compaction's flush, costs the embedding of
        the new entries, not of the whole memory again (a paid embedding model's cost and
        time, on the next search)."""
        known = self._embedded if self._embedded_by is embedder else {}
        new: dict[str, str] = {}  # text -> the name of its first entry
        for rel, i, text in entries:
            if text not in known and text not in new:
                new[text] = f"{rel} entry {i}"
        if new:
            fresh = _embed(embedder, list(new), list(new.values()))
            norms = np.linalg.norm(fresh, axis=1, keepdims=True)
            fresh = (fresh / np.where(norms == 0, 1.0, norms)).astype(np.float32)
            dim = next(iter(known.values())).shape[0] if known else fresh.shape[1]
            if fresh.shape[1] != dim:
                text = next(iter(new))
                raise EmbedderError(
                    f"embedder {_name(embedder)} returned vectors of {fresh.shape[1]} numbers "
                    f"for {_texts(len(new))} ({new[text]}: {text!r:.60}); expected {dim}, as "
                    "for the entries embedded before"
                )
            known = {**known, **dict(zip(new, fresh, strict=True))}
        self._embedded = {text: known[text] for _, _, text in entries}
        self._embedded_by = embedder
        return np.stack([known[text] for _, _, text in entries])

    def __len__(self) -> int:
        with self._lock:
            self._refresh()
            return len(self._entries)

    @staticmethod
    def _lexical_scores(index: Bm25Index, n: int, query: str) -> npt.NDArray[np.float32]:
        """Each entry's BM25 score for ``query`` (already :func:`_lexical`) over the score of a
        complete match (see the module's notes), clipped to 1."""
        lexical = np.zeros(n, dtype=np.float32)
        terms = index.terms(query)  # the terms the index scores, once each
        if not terms:
            return lexical
        # BM25 of an entry of average length that holds each query word once is the sum of
        # their idfs (k1 and b cancel out); a word no entry holds counts at the highest idf,
        # a pair of CJK characters no entry holds at the idf of its commoner character
        complete = sum(_idf(n, _doc_freq(index, t)) for t in terms)
        for doc, score in index.search(query, n):
            lexical[int(doc)] = min(score / complete, 1.0)
        return lexical

    def search(self, query: str, k: int = 5) -> list[MemoryHit]:
        """The ``k`` entries best matching ``query``, best first (ties: file order), an entry
        whose text an earlier hit holds left out (a fact written twice, or into a daily log
        and ``MEMORY.md``, takes one place, its first in file order). A lone
        surrogate in ``query`` (UTF-8 cannot hold one) is searched as U+FFFD, as text entering
        a session is. Scores are on an absolute scale (see the module's notes), comparable
        between queries.

        Raises:
            ConfigTypeError: ``query`` is not a str, or ``k`` not an int.
            ConfigError: ``k`` is below 1.
            EmbedderError: the embedder raised, or returned vectors that cannot be compared
                (not one row of finite real numbers per text, or the query's of another
                length than the entries'); no result is made of them.
        """
        if not isinstance(query, str):
            raise ConfigTypeError(f"query is {type(query).__name__} {query!r:.60}; expected a str")
        if not isinstance(k, int) or isinstance(k, bool):
            raise ConfigTypeError(f"k is {type(k).__name__} {k!r:.60}; expected an int >= 1")
        if k < 1:
            raise ConfigError(f"k is {k}; expected at least 1")
        query = valid_utf8(query)
        with self._lock:
            self._refresh()
            entries, index, vectors = self._entries, self._index, self._vectors
        if not entries or not query.strip():
            return []
        lexical = self._lexical_scores(index, len(entries), _lexical(query))
        semantic = np.zeros(len(entries), dtype=np.float32)
        if vectors is not None and self.embedder is not None:
            [q] = _embed(self.embedder, [query], ["the query"])
            if q.shape[0] != vectors.shape[1]:
                raise EmbedderError(
                    f"embedder returned a vector of {q.shape[0]} numbers for the query "
                    f"{query!r:.60}; expected {vectors.shape[1]}, as for the entries"
                )
            norm = float(np.linalg.norm(q))
            if norm > 0:
                semantic = np.clip(vectors @ (q / norm), 0.0, 1.0)
        hybrid = (1 - self.weight) * lexical + self.weight * semantic
        hits: list[MemoryHit] = []
        held: list[str] = []  # the hits' texts as compared: folded, spaces collapsed
        for i in np.argsort(-hybrid, kind="stable"):
            if len(hits) == k or not hybrid[i] > 0:
                break
            # a fact written twice (or into two files, or again in other case or spacing),
            # or held whole by a better hit, takes no second place
            key = f" {' '.join(fold(entries[i][2]).casefold().split())} "
            if any(key in text for text in held):  # whole words: " ci " is not in "special"
                continue
            held.append(key)
            hits.append(
                MemoryHit(
                    entries[i][2],
                    entries[i][0],
                    entries[i][1],
                    round(float(hybrid[i]), 6),
                    round(float(lexical[i]), 6),
                    round(float(semantic[i]), 6),
                )
            )
        return hits
