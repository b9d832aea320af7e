"""Stub of the native module ``ctxengine._core`` (hand-written; checked by mypy.stubtest)."""

from collections.abc import Sequence
from typing import TypedDict, final

__version__: str

class CacheInfo(TypedDict):
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
