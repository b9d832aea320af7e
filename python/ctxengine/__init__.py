"""ctxengine: build the context an LLM agent sends to its model on every turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._core import __version__
from .assemble.budget import Budget
from .assemble.report import GrainDecision, RenderReport
from .collect.dispatch import Outcome as Outcome
from .collect.dispatch import SessionDispatcher as SessionDispatcher
from .collect.faults import PluginFault as PluginFault
from .collect.protocol import AbstractContextProvider
from .collect.registry import Registry
from .collect.scene import ContextScene
from .engine import ContextEngine, RenderedContext, Session
from .errors import (
    AdapterError,
    BudgetError,
    CtxEngineError,
    EncodingError,
    GrainError,
    PluginError,
    SessionIdError,
    StoreError,
    TranscriptError,
)
from .errors import (
    ContextOverflowError as ContextOverflowError,
)
from .errors import (
    FoldError as FoldError,
)
from .fitting import fit
from .grain import ContextGrain
from .overflow import ProviderErrorInfo, classify_provider_error, is_context_overflow
from .state import SessionState
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

# Also importable as ctxengine.X but left out of __all__: internals (SessionDispatcher, Outcome,
# PluginFault) and the error classes nothing raises yet (FoldError, ContextOverflowError), kept
# so code that imports them keeps working.
__all__ = (
    "AbstractContextProvider",
    "AdapterError",
    "Budget",
    "BudgetError",
    "ContextEngine",
    "ContextGrain",
    "ContextScene",
    "CtxEngineError",
    "EncodingError",
    "ExtractiveSummarizer",
    "FileStore",
    "GrainDecision",
    "GrainError",
    "MemoryStore",
    "PluginError",
    "ProviderErrorInfo",
    "RedisStore",
    "Registry",
    "RenderReport",
    "RenderedContext",
    "Session",
    "SessionIdError",
    "SessionState",
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
    "fit",
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
