"""`RenderConfig`: what a render needs of its engine, frozen when the engine is built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from . import _core
from .assemble.budget import RESERVE, Budget
from .assemble.guard import PruneSettings
from .compaction import CompactionConfig
from .summarize import Summarizer

__all__ = ("RenderConfig",)


@dataclass(frozen=True, slots=True)
class RenderConfig:
    """The engine's settings as the pipeline reads them (built once per engine).

    Attributes:
        model: Model the context is built for.
        budget: The budget and its windows.
        tokens_total: The budget in tokens.
        tokenizer: Counter for ``model``.
        summarizer: Used by compaction.
        weights: Step-score weights of the core.
        windows: Window names, in the order the core numbers them.
        window_index: Window name → its number in the core.
        max_result_chars: Largest tool result the window guard lets through.
        prune: Trim-ladder settings for old tool results (soft trim, allow/deny, TTL).
        compaction: How the compaction pipeline runs (memory folder, rules file, timeout).
        max_images: The most image parts a render sends (None: the provider's limit); a
            render's own ``max_images`` option wins over it.
    """

    model: str
    budget: Budget
    tokens_total: int
    tokenizer: _core.Tokenizer
    summarizer: Summarizer
    weights: tuple[float, float, float, float]
    windows: tuple[str, ...]
    window_index: Mapping[str, int]
    max_result_chars: int
    prune: PruneSettings
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    max_images: int | None = None

    @classmethod
    def build(cls, model: str, budget: Budget, summarizer: Summarizer, **kw: Any) -> RenderConfig:
        """A config for ``model`` and ``budget`` (``kw``: weights, prune,
        max_result_chars, compaction, max_images)."""
        windows = tuple(budget.windows)
        return cls(
            model=model,
            budget=budget,
            tokens_total=budget.resolve(model),
            tokenizer=_core.Tokenizer(model),
            summarizer=summarizer,
            windows=windows,
            window_index=MappingProxyType({n: i for i, n in enumerate(windows)}),
            **kw,
        )

    def new_assembly(self) -> _core.Assembly:
        """A fresh Rust assembly configured from the budget and the prune settings."""
        return _core.Assembly(
            self.model,
            [(name, float(share)) for name, share in self.budget.windows.items()],
            reserve=RESERVE if RESERVE in self.budget.windows else None,
            pretrim_ratio=self.budget.pretrim_ratio,
            weights=self.weights,
            soft_trim_chars=self.prune.soft_trim_max_chars,
            soft_keep_chars=self.prune.soft_trim_head_chars,
            protect_last_assistant=self.prune.keep_last_assistants,
        )
