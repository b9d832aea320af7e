"""Stub of the native module ``ctxengine._core`` (hand-written; checked by ``mypy.stubtest`` in
``.ci/run`` with ``.stubtest-allowlist``)."""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypedDict, TypeVar, final

_T = TypeVar("_T")

__all__ = [
    "FLAG_FEEDBACK",
    "FLAG_HAS_TOOL_CALL",
    "FLAG_IMAGE",
    "FLAG_PROTECTED",
    "FLAG_STRUCTURAL",
    "KIND_CONTEXT",
    "KIND_MESSAGE",
    "KIND_TOOL_RESULT",
    "PLACEHOLDER_ID",
    "ROLE_ASSISTANT",
    "ROLE_SYSTEM",
    "ROLE_TOOL",
    "ROLE_USER",
    "STAGE_COMPACTION",
    "STAGE_FOLD",
    "STAGE_GUARD",
    "STAGE_HARD",
    "STAGE_NONE",
    "STAGE_SOFT",
    "STATUS_CLEARED",
    "STATUS_DROPPED",
    "STATUS_FOLDED",
    "STATUS_KEPT",
    "STATUS_TRIMMED",
    "Assembly",
    "Bm25Index",
    "Handout",
    "Plan",
    "Tokenizer",
    "__version__",
    "bare_model",
    "bm25_tokenize",
    "bm25_words",
    "cache_info",
    "clear_cache",
    "differing",
    "fresh_tree",
    "fuse",
    "hand_out",
    "read_first_line",
    "read_identifier_kinds",
    "read_identifiers",
    "read_prose",
    "read_shell_files",
    "set_cache_capacity",
]

__version__: str

# Item kinds: the ``kinds`` column of ``Assembly.upsert``.
KIND_CONTEXT: Final = 0
"""A context grain outside the transcript (sys, mem, rag, task, ...)."""
KIND_MESSAGE: Final = 1
"""A user or assistant message of the history."""
KIND_TOOL_RESULT: Final = 2
"""A tool result of the history (its role is ``ROLE_TOOL``)."""

# Message roles: the ``roles`` column.
ROLE_SYSTEM: Final = 0
ROLE_USER: Final = 1
ROLE_ASSISTANT: Final = 2
ROLE_TOOL: Final = 3

# Flag bits: the ``flags`` column (an OR of these).
FLAG_HAS_TOOL_CALL: Final = 1
"""The message carries a tool call."""
FLAG_FEEDBACK: Final = 2
"""Explicit user feedback."""
FLAG_STRUCTURAL: Final = 4
"""A state-changing tool call (edit, write, ...)."""
FLAG_IMAGE: Final = 8
"""An image result (never soft-trimmed)."""
FLAG_PROTECTED: Final = 16
"""Never trimmed, folded or dropped."""

# Decisions of a plan: the ``status`` column of ``Plan.decisions``.
STATUS_KEPT: Final = 0
STATUS_TRIMMED: Final = 1
STATUS_CLEARED: Final = 2
STATUS_FOLDED: Final = 3
STATUS_DROPPED: Final = 4

# Ladder steps: the ``stage`` column of ``Plan.decisions``.
STAGE_NONE: Final = 0
STAGE_GUARD: Final = 1
STAGE_SOFT: Final = 2
STAGE_HARD: Final = 3
STAGE_FOLD: Final = 4
STAGE_COMPACTION: Final = 5

PLACEHOLDER_ID: Final = "hist.removed"
"""Node id of the message standing for the turns hard trim removed."""

class CacheInfo(TypedDict):
    """What :func:`cache_info` returns (a plain dict at runtime)."""

    hits: int
    misses: int
    evictions: int
    size: int
    capacity: int

@final
class Tokenizer:
    """A resolved tokenizer: exact for OpenAI encodings, a calibrated estimate otherwise."""

    def __new__(cls, model_or_encoding: str) -> Tokenizer: ...
    @property
    def name(self) -> str:
        """``cl100k_base``, ``o200k_base``, or ``<family>~o200k_base`` for an estimate."""
    @property
    def encoding(self) -> str:
        """The exact encoding underneath."""
    @property
    def exact(self) -> bool:
        """True when counts are exact."""
    @property
    def factor(self) -> float:
        """Multiplier applied to the exact count (1.0 when exact)."""
    def count(self, text: str, *, cache: bool = True) -> int:
        """Token count of ``text``."""
    def count_many(self, texts: Sequence[str], *, cache: bool = True) -> list[int]:
        """Counts of a batch, in parallel with the GIL released."""
    def count_chat(
        self, groups: Iterable[Iterable[Mapping[str, Any]]], *, cache: bool = True
    ) -> list[int | None]:
        """For each group of OpenAI Chat message dicts, its tokens by the rule of
        ``count_messages`` (reply priming excluded), or None when a dict has a shape the
        exporters do not make (count it by ``count_messages`` then)."""
    def encode(self, text: str) -> list[int]:
        """Token ids; special-token text is ordinary text. Raises EncodingError for estimates."""
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (invalid UTF-8 replaced). Raises EncodingError for unknown ids."""
    def truncate(self, text: str, max_tokens: int) -> str:
        """Longest prefix that fits ``max_tokens``, cut at a token and character boundary."""

def cache_info() -> CacheInfo:
    """Counters of the process-wide token-count cache."""

def set_cache_capacity(capacity: int) -> None:
    """Set how many counts the cache may hold (0 disables it)."""

def clear_cache() -> None:
    """Empty the cache and reset its counters."""

def bare_model(model: str) -> str:
    """``model`` as its family is looked up: lower case, without a provider path
    (``openai/gpt-4o``), a fine-tune's ``ft:`` or a Bedrock vendor prefix and region
    (``us.anthropic.claude-…``)."""

@final
class Plan:
    """The decisions of one :meth:`Assembly.plan`; Rust vectors turned into Python on access.

    Status codes are the ``STATUS_*`` constants, stage codes the ``STAGE_*`` constants.
    """

    @property
    def budget(self) -> int:
        """The budget given to ``plan``."""
    @property
    def available(self) -> int:
        """Budget minus the reserve window's share."""
    @property
    def target(self) -> int:
        """``min(pretrim_ratio * budget, available)``: what the ladder aims at."""
    @property
    def high(self) -> int:
        """The high-water mark the ladder ran past: ``target``, or above it when the plan was
        asked to hold (``Assembly.plan(..., hold=...)``)."""
    @property
    def total_before(self) -> int:
        """Tokens of every live item before the ladder."""
    @property
    def total_after(self) -> int:
        """Tokens rendered after the ladder (replacements and placeholder included)."""
    @property
    def fits(self) -> bool:
        """``total_after <= target``, or ``<= high`` when the total was held under the mark."""
    @property
    def context_order(self) -> list[str]:
        """Rendered context grains (``KIND_CONTEXT``) by (priority, rank, seq); a folded branch
        appears once, as its first member (whose replacement is the branch stand-in)."""
    @property
    def history_order(self) -> list[str]:
        """Rendered history items (``KIND_MESSAGE``, ``KIND_TOOL_RESULT``) in seq order, with
        ``hist.removed`` where hard trim removed turns."""
    def history_after(self, prev: Plan, max_head: int) -> tuple[int, int, list[str]] | None:
        """Where :attr:`history_order` continues ``prev``'s: ``(head, k, fresh)`` when
        ``history_order[head:end]`` holds the node ids of ``prev.history_order[k:]`` in order
        (``end = head + len(prev.history_order) - k``), after ``head < max_head`` new ones
        (the first ``head`` whose node id ``prev`` holds decides); ``fresh``: the node ids
        before ``head`` and from ``end`` on. None otherwise. Found on the core's vectors,
        without making either list."""
    @property
    def replacements(self) -> dict[str, str]:
        """node_id -> text rendered instead (trimmed, cleared, stand-in, ``hist.removed``)."""
    @property
    def windows(self) -> list[tuple[str, int, int, int]]:
        """``(name, demand, alloc, used)`` per window, in window order."""
    @property
    def compaction_turns(self) -> list[int]:
        """Turn groups to summarize before planning again (oldest first); empty when none."""
    @property
    def compaction_tokens(self) -> int:
        """Tokens those turn groups hold."""
    @property
    def timings(self) -> dict[str, float]:
        """Seconds per stage: allocate, soft, hard, fold, compaction, order."""
    def decisions(
        self,
    ) -> tuple[list[str], list[int], list[int], list[str], list[int], list[int], list[int]]:
        """Columns for every live item: node_ids, status, stage, reason, tokens_before,
        tokens_after, window."""
    def tokens_after_of(self, node_ids: Sequence[str]) -> list[int]:
        """The ``tokens_after`` of :meth:`decisions` of each of ``node_ids`` (0 for one that
        is no live item of the plan), without making the other columns."""
    def changed(self) -> list[str]:
        """node_ids whose status is not kept."""

@final
class Assembly:
    """The items of a session kept in Rust between renders, and the planner that fits them into
    a budget (soft trim, hard trim, folding, compaction request).

    Raises EncodingError for an unknown model and ValueError for invalid windows or options.
    """

    def __new__(
        cls,
        model_or_encoding: str,
        windows: Sequence[tuple[str, float]],
        *,
        reserve: str | None = "reserve",
        pretrim_ratio: float = 0.8,
        weights: tuple[float, float, float, float] = (0.25, 0.65, 0.35, 0.1),
        soft_trim_chars: int = 4000,
        soft_keep_chars: int = 1500,
        protect_last_assistant: int = 3,
        hard_trim_max_score: float = 0.6,
    ) -> Assembly: ...
    def upsert(
        self,
        *,
        node_ids: Sequence[str],
        texts: Sequence[str],
        windows: Sequence[int],
        priorities: Sequence[int],
        ranks: Sequence[int],
        seqs: Sequence[int],
        kinds: Sequence[int],
        roles: Sequence[int],
        turns: Sequence[int],
        flags: Sequence[int],
        overheads: Sequence[int],
        labels: Sequence[str],
        summaries: Sequence[str | None],
    ) -> list[int]:
        """Insert or replace items given as keyword-only columns of equal length; returns each
        one's tokens (count + overhead). ``windows`` are indices of the configured windows,
        ``kinds`` ``KIND_*``, ``roles`` ``ROLE_*`` (``KIND_TOOL_RESULT`` goes with ``ROLE_TOOL``
        and only with it), ``flags`` an OR of ``FLAG_*``.

        Raises:
            ValueError: a column's length differs from ``node_ids``, or a value is out of range;
                the message names the column, the index and the value, e.g.
                ``kinds[3] = 7 (node_id 'hist.4'): not a kind; expected KIND_CONTEXT (0), ...``.
                A rejected batch changes nothing.
        """
    def remove(self, node_ids: Sequence[str]) -> int:
        """Remove items by node id; returns how many existed."""
    def __len__(self) -> int: ...
    def tokens(self, node_id: str) -> int | None:
        """Tokens of a live item (count + overhead), or None."""
    def tokens_of(self, node_ids: Sequence[str]) -> list[int]:
        """Tokens of each of ``node_ids`` (count + overhead), 0 for one that is no live
        item: :meth:`tokens` of each, in one call."""
    def protected_tokens(self) -> int:
        """Tokens of the protected items (PROTECTED flag, the latest user message's turn): the
        least budget ``plan`` accepts."""
    def plan(self, budget: int, *, full: bool = False, hold: float = 1.0) -> Plan:
        """Plan the render within ``budget`` tokens. Incremental: when everything fits, the plan
        follows the per-window totals and orders that ``upsert``/``remove`` keep up to date
        (no pass over the history); ``full=True`` recomputes everything from the items and
        gives the same plan. ``hold`` > 1 is a high-water mark: the ladder runs only when the
        total passes ``hold`` times the target (at most ``available``), and then cuts down to
        the target. Raises BudgetError when protected items (PROTECTED flag, the latest user
        message's turn) alone exceed the budget minus the reserve, and ValueError for a
        ``hold`` that is not finite."""

def fuse(
    node_ids: Sequence[str], priorities: Sequence[int], ranks: Sequence[int], seqs: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Fuse the grains of one render: (index of the winner of each input's node_id group,
    winner indices in render order). Lowest priority wins, then lowest rank, then lowest seq."""

@final
class Bm25Index:
    """Okapi BM25 over added documents (lowercase unicode word tokens).

    ``cjk="chars"``: each CJK ideograph or kana is a term (:func:`bm25_tokenize`).
    ``cjk="pairs"``: a run of CJK ideographs, kana, Hangul, Thai, Lao, Myanmar or Khmer
    characters (:func:`bm25_words`) is cut into its overlapping character pairs, a run of one
    character into that character (Lucene's ``CJKBigramFilter``); documents also index each
    ideograph, kana or Hangul syllable on its own, queries only a lone one, so a query of one
    character finds the documents holding it and a longer one is matched by its pairs."""

    def __new__(
        cls, k1: float = 1.2, b: float = 0.75, *, cjk: Literal["chars", "pairs"] = "chars"
    ) -> Bm25Index:
        """Raises ValueError for a negative or non-finite ``k1``, ``b`` outside [0, 1], or
        another ``cjk``."""
    def add(self, ids: list[str], texts: list[str]) -> None:
        """Index documents; raises ValueError when the lists differ in length."""
    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` best documents for ``query`` as ``(id, score)``, best first."""
    def coverage(self, query: str) -> tuple[int, int]:
        """``(query terms present in the index, query terms)``."""
    def terms(self, query: str) -> list[str]:
        """The distinct terms :meth:`search` scores for ``query``, in first-seen order."""
    def document_terms(self, text: str) -> list[str]:
        """The terms a document's ``text`` is indexed under, repeats included."""
    def doc_freq(self, term: str) -> int:
        """Number of documents containing ``term``."""
    def __len__(self) -> int: ...

def bm25_tokenize(text: str) -> list[str]:
    """The tokens BM25 indexes for ``text`` (with ``cjk="chars"``, the default)."""

def bm25_words(text: str) -> list[str]:
    """The lowercase words of ``text``, a run of CJK, Hangul, Thai, Lao, Myanmar or Khmer
    characters one word: what a ``cjk="pairs"`` index cuts into pairs."""

def read_identifiers(text: str) -> tuple[str, ...] | None:
    """The identifiers in ``text`` (URLs, UUIDs, hashes, paths and ticket ids, each kind in
    text order), as the compaction's Python reading finds them; None when ``text`` is not
    ASCII (read it in Python then)."""

def read_identifier_kinds(
    text: str,
) -> (
    tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]
    | None
):
    """:func:`read_identifiers` by kind: ``(urls, uuids, hashes, paths, tickets)``, each in
    text order; None when ``text`` is not ASCII."""

def read_prose(text: str, max_line: int) -> tuple[tuple[str, ...], str] | None:
    """The decision lines and the first line (cut to ``max_line``) of an assistant message's
    text, as the extractive summary's Python reading finds them; None when ``text`` is not
    ASCII."""

def read_shell_files(command: str) -> tuple[list[str], list[str]] | None:
    """``(files read, files modified)`` by the shell command line ``command``, as the
    compaction's Python reading finds them; None when ``command`` is not ASCII."""

def read_first_line(text: str, limit: int) -> str | None:
    """The first non-blank line of ``text``, whitespace collapsed, cut to ``limit`` characters
    (an ellipsis last); None when ``text`` is not ASCII or ``limit`` is 0."""

def differing(
    new: tuple[Any, ...],
    new_start: int,
    old: tuple[Any, ...],
    old_start: int,
    count: int,
    limit: int,
) -> list[int] | None:
    """The offsets ``j < count`` at which ``new[new_start + j] is not old[old_start + j]``, in
    order; None when more than ``limit`` differ. Raises ``ValueError`` when a run is out of its
    tuple's range."""

def fresh_tree(value: _T) -> _T:
    """``value`` with every ``dict`` and ``list`` in it copied, at any depth (an instance of a
    subclass as a plain ``dict`` or ``list``; every other value shared): a payload a caller may
    edit anywhere without touching the dicts it was made from."""

@final
class Handout:
    """What one call of :func:`hand_out` handed out, for a later call to hand out again: the
    items (held: their addresses name them), their copies (a list of its own) and the shape of
    each item when copied."""

    @property
    def items(self) -> list[dict[str, Any]]:
        """The items, in order (a new list)."""
    @property
    def copies(self) -> list[dict[str, Any]]:
        """Their copies, in the same order (a new list: holding it holds the copies, which are
        then not handed out again)."""
    def __len__(self) -> int: ...

def hand_out(
    items: list[dict[str, Any]],
    deep: list[bool],
    earlier: Handout | None = None,
) -> tuple[list[dict[str, Any]], Handout]:
    """``[fresh_tree(d) if deep[i] else d.copy() for i, d in enumerate(items)]`` (a dict not
    ``deep`` must hold no dict or list), handing out again the copies of the ``earlier`` call
    that only its :class:`Handout` holds now and that still have the shape their item had when
    copied (same keys, order and objects at every depth: the copy is walked, the item is not,
    so an item must not be changed once handed out). Returns the copies and what this call
    handed out. Raises ``ValueError`` unless one flag per item."""
