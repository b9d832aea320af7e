"""ctxengine: build the context an LLM agent sends to its model on every turn."""

from __future__ import annotations

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
    TranscriptError,
)
from .errors import (
    ContextOverflowError as ContextOverflowError,
)
from .errors import (
    FoldError as FoldError,
)
from .errors import (
    StoreError as StoreError,
)
from .grain import ContextGrain
from .state import SessionState
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

# Also importable as ctxengine.X but left out of __all__: internals (SessionDispatcher, Outcome,
# PluginFault) and the error classes nothing raises yet (FoldError, StoreError,
# ContextOverflowError), kept so code that imports them keeps working.
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
    "GrainDecision",
    "GrainError",
    "PluginError",
    "Registry",
    "RenderReport",
    "RenderedContext",
    "Session",
    "SessionState",
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
