"""ctxengine: build the context an LLM agent sends to its model on every turn."""

from __future__ import annotations

from ._core import __version__
from .errors import (
    AdapterError,
    BudgetError,
    ContextOverflowError,
    CtxEngineError,
    EncodingError,
    FoldError,
    GrainError,
    PluginError,
    StoreError,
    TranscriptError,
)
from .grain import ContextGrain
from .tokens import (
    Tokenizer,
    cache_info,
    clear_cache,
    count_many,
    count_messages,
    count_tokens,
    get_tokenizer,
    set_cache_capacity,
    truncate_tokens,
)

__all__ = (
    "AdapterError",
    "BudgetError",
    "ContextGrain",
    "ContextOverflowError",
    "CtxEngineError",
    "EncodingError",
    "FoldError",
    "GrainError",
    "PluginError",
    "StoreError",
    "Tokenizer",
    "TranscriptError",
    "__version__",
    "cache_info",
    "clear_cache",
    "count_many",
    "count_messages",
    "count_tokens",
    "get_tokenizer",
    "set_cache_capacity",
    "truncate_tokens",
)
