"""ctxengine: build the context an LLM agent sends to its model on every turn."""

from __future__ import annotations

from ._core import __version__
from .assemble.budget import Budget
from .assemble.report import GrainDecision, RenderReport
from .collect.dispatch import Outcome, SessionDispatcher
from .collect.faults import PluginFault
from .collect.protocol import AbstractContextProvider
from .collect.registry import Registry
from .collect.scene import ContextScene
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
    StoreError,
    TranscriptError,
)
from .grain import ContextGrain
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
    "FoldError",
    "GrainDecision",
    "GrainError",
    "Outcome",
    "PluginError",
    "PluginFault",
    "Registry",
    "RenderReport",
    "RenderedContext",
    "Session",
    "SessionDispatcher",
    "StoreError",
    "Summarizer",
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
