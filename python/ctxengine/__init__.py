"""ctxengine: build the context an LLM agent sends to its model on every turn."""

from __future__ import annotations

import logging as _logging

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
    StoreError,
    TranscriptError,
)
from .grain import ContextGrain
from .plugins import AbstractContextProvider, Outcome, PluginFault, SessionDispatcher
from .registry import Registry
from .report import GrainDecision, RenderReport
from .scene import ContextScene
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

# A library logs, the application decides where to: nothing is printed unless it configures
# logging (the command line shows warnings on stderr).
_logging.getLogger("ctxengine").addHandler(_logging.NullHandler())

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
