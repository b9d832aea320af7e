"""ctxengine: build the context an LLM agent sends to its model on every turn.

``import ctxengine`` is cheap: only the error tree and the version are loaded; every other public
name is imported from its submodule the first time it is used (``ctxengine.ContextEngine``,
``from ctxengine import fit``), through the module ``__getattr__`` below (PEP 562).
"""

from __future__ import annotations

import logging as _logging
from importlib import import_module as _import_module
from typing import TYPE_CHECKING, Any

from ._core import __version__
from .errors import (
    AdapterError,
    BudgetError,
    ConfigError,
    CtxEngineError,
    EncodingError,
    GrainError,
    PluginError,
    SessionIdError,
    StoreConflictError,
    StoreError,
    TranscriptError,
)
from .errors import (
    ContextOverflowError as ContextOverflowError,
)
from .errors import (
    FoldError as FoldError,
)

if TYPE_CHECKING:
    from .assemble.budget import Budget
    from .assemble.report import GrainDecision, RenderReport
    from .collect.dispatch import Outcome as Outcome
    from .collect.dispatch import SessionDispatcher as SessionDispatcher
    from .collect.faults import PluginFault as PluginFault
    from .collect.protocol import AbstractContextProvider
    from .collect.registry import Registry
    from .collect.scene import ContextScene
    from .compaction import ExtractiveSummarizer, LLMSummarizer, Summarizer
    from .engine import ContextEngine, RenderedContext, Session
    from .fitting import fit
    from .grain import ContextGrain
    from .memory import MemoryStore
    from .overflow import ProviderErrorInfo, classify_provider_error, is_context_overflow
    from .state import SessionState
    from .store import FileStore, InMemoryStore, Store
    from .store.redis_store import RedisStore
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

# A library logs, the application decides where to: nothing is printed unless it configures
# logging (the command line shows warnings on stderr).
_logging.getLogger("ctxengine").addHandler(_logging.NullHandler())

#: Where each lazily imported name lives (relative to this package). A name is imported on first
#: access and then cached in the module's globals, so ``__getattr__`` runs once per name.
_LAZY: dict[str, str] = {
    "AbstractContextProvider": ".collect.protocol",
    "Budget": ".assemble.budget",
    "ContextEngine": ".engine",
    "ContextGrain": ".grain",
    "ContextScene": ".collect.scene",
    "ExtractiveSummarizer": ".compaction",
    "FileStore": ".store",
    "GrainDecision": ".assemble.report",
    "InMemoryStore": ".store",
    "LLMSummarizer": ".compaction",
    "MemoryStore": ".memory",
    "Outcome": ".collect.dispatch",
    "PluginFault": ".collect.faults",
    "ProviderErrorInfo": ".overflow",
    "RedisStore": ".store.redis_store",
    "Registry": ".collect.registry",
    "RenderReport": ".assemble.report",
    "RenderedContext": ".engine",
    "Session": ".engine",
    "SessionDispatcher": ".collect.dispatch",
    "SessionState": ".state",
    "Store": ".store",
    "Summarizer": ".compaction",
    "Tokenizer": ".tokens",
    "cache_info": ".tokens",
    "classify_provider_error": ".overflow",
    "clear_cache": ".tokens",
    "count_many": ".tokens",
    "count_messages": ".tokens",
    "count_tokens": ".tokens",
    "fit": ".fitting",
    "get_tokenizer": ".tokens",
    "is_context_overflow": ".overflow",
    "set_cache_capacity": ".tokens",
    "truncate_tokens": ".tokens",
}

# Also importable as ctxengine.X but left out of __all__: internals (SessionDispatcher, Outcome,
# PluginFault) and the error classes nothing raises yet (FoldError, ContextOverflowError), kept
# so code that imports them keeps working.
__all__ = (
    "AbstractContextProvider",
    "AdapterError",
    "Budget",
    "BudgetError",
    "ConfigError",
    "ContextEngine",
    "ContextGrain",
    "ContextScene",
    "CtxEngineError",
    "EncodingError",
    "ExtractiveSummarizer",
    "FileStore",
    "GrainDecision",
    "GrainError",
    "InMemoryStore",
    "LLMSummarizer",
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
    "StoreConflictError",
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
    """Import a public name from its submodule on first access (then it is a plain global)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxengine' has no attribute {name!r}")
    value = getattr(_import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
