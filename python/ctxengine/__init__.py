"""ctxengine: build the context an LLM agent sends to its model on every turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._core import __version__
from .budget import Budget
from .engine import ContextEngine, RenderedContext, Session
from .errors import (
    AdapterError,
    BudgetError,
    ContextOverflowError,
    CtxEngineError,
    EncodingError,
    FoldError,
    GrainError,
    PluginError,
    SessionIdError,
    StoreError,
    TranscriptError,
)
from .grain import ContextGrain
from .overflow import ProviderErrorInfo, classify_provider_error, is_context_overflow
from .plugins import AbstractContextProvider, Outcome, PluginFault, SessionDispatcher
from .registry import Registry
from .report import GrainDecision, RenderReport
from .scene import ContextScene
from .store import FileStore, MemoryStore, Store
from .summarize import ExtractiveSummarizer, Summarizer
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

if TYPE_CHECKING:
    from .store.redis_store import RedisStore

__all__ = (
    "AbstractContextProvider",
    "AdapterError",
    "Budget",
    "BudgetError",
    "ContextEngine",
    "ContextGrain",
    "ContextOverflowError",
    "ContextScene",
    "CtxEngineError",
    "EncodingError",
    "ExtractiveSummarizer",
    "FileStore",
    "FoldError",
    "GrainDecision",
    "GrainError",
    "MemoryStore",
    "Outcome",
    "PluginError",
    "PluginFault",
    "ProviderErrorInfo",
    "RedisStore",
    "Registry",
    "RenderReport",
    "RenderedContext",
    "Session",
    "SessionDispatcher",
    "SessionIdError",
    "Store",
    "StoreError",
    "Summarizer",
    "Tokenizer",
    "TranscriptError",
    "__version__",
    "cache_info",
    "classify_provider_error",
    "clear_cache",
    "count_many",
    "count_messages",
    "count_tokens",
    "get_tokenizer",
    "is_context_overflow",
    "set_cache_capacity",
    "truncate_tokens",
)


def __getattr__(name: str) -> Any:
    if name == "RedisStore":  # imported on first use: ``import ctxengine`` never imports redis
        from .store.redis_store import RedisStore

        return RedisStore
    raise AttributeError(f"module 'ctxengine' has no attribute {name!r}")
