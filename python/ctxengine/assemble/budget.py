"""`Budget`: how many input tokens a render may use, and how windows share them (DESIGN.md §4)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from .. import _core
from .._values import as_count, as_real
from ..errors import BudgetError

__all__ = ("DEFAULT_PREFIXES", "DEFAULT_WINDOWS", "Budget", "context_window")

DEFAULT_WINDOWS: Final[Mapping[str, float]] = MappingProxyType(
    {"instruction": 0.15, "core_memory": 0.15, "history": 0.40, "tool": 0.20, "reserve": 0.10}
)
DEFAULT_PREFIXES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "sys": "instruction",
        "mem": "core_memory",
        "hist": "history",
        "act": "tool",
        "rag": "tool",
        "task": "tool",
    }
)
RESERVE: Final = "reserve"
DEFAULT_OUTPUT_RESERVE: Final = 4096
#: Largest accepted ``total``/``output_reserve``: far above any model's window, and small enough
#: that every count and share stays exact in the core's 64-bit integers and in floats.
MAX_TOKENS: Final = 2**40

# Context windows (input + output tokens) by model-name prefix; the first match wins.
_CONTEXT_WINDOWS: Final[tuple[tuple[str, int], ...]] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("chatgpt-4o", 128_000),
    ("gpt-4.5", 128_000),
    ("gpt-5", 400_000),
    ("o1-mini", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo-instruct", 4_096),
    ("gpt-3.5-turbo", 16_385),
    ("davinci-002", 16_384),
    ("babbage-002", 16_384),
    ("claude", 200_000),
    ("gemini", 1_048_576),
)


def context_window(model: str) -> int:
    """The context window of ``model`` in tokens.

    Raises:
        BudgetError: the model's window is unknown (pass ``Budget(total=...)`` instead).
    """
    bare = _core.bare_model(model)  # the tokenizer's rule: ft: fine-tunes, Bedrock ids...
    for prefix, size in _CONTEXT_WINDOWS:
        if bare.startswith(prefix):
            return size
    known = ", ".join(p for p, _ in _CONTEXT_WINDOWS)
    raise BudgetError(
        f"no known context window for model {model!r} (known prefixes: {known}); "
        "pass Budget(total=N) to set the budget explicitly"
    )


@dataclass(frozen=True, slots=True)
class Budget:
    """The input-token budget of a render and its split into windows.

    Args:
        total: Tokens the rendered request may use, everything included. ``None``: the model's
            context window minus ``output_reserve``.
        model: Model whose context window sets ``total`` when it is ``None`` (the engine's model
            is used when this is ``None`` too).
        output_reserve: Tokens kept for the reply (the request's ``max_tokens``).
        windows: Window name → share of the budget; shares sum to 1. The ``reserve`` window is a
            safety margin that is never filled. Unused share of one window flows to the others.
        prefixes: ``node_id`` first segment → window, for grains without an explicit window.
        default_window: Window of grains whose prefix is not in ``prefixes``.
        pretrim_ratio: Fraction of the budget past which the trim ladder runs.

    Raises:
        BudgetError: a value is out of range (the message names it).
    """

    total: int | None = None
    model: str | None = None
    output_reserve: int = DEFAULT_OUTPUT_RESERVE
    windows: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WINDOWS))
    prefixes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PREFIXES))
    default_window: str = "tool"
    pretrim_ratio: float = 0.8

    def __post_init__(self) -> None:
        # numpy's ints and floats are taken as the plain values (as the settings take them)
        total = None if self.total is None else as_count(self.total)
        if self.total is not None and (total is None or not 0 < total <= MAX_TOKENS):
            raise BudgetError(
                f"total must be a positive int <= {MAX_TOKENS:,} or None; got {self.total!r}"
            )
        reserve = as_count(self.output_reserve)
        if reserve is None or not 0 <= reserve <= MAX_TOKENS:
            raise BudgetError(
                f"output_reserve must be an int in [0, {MAX_TOKENS:,}]; got {self.output_reserve!r}"
            )
        ratio = as_real(self.pretrim_ratio)
        if ratio is None or not 0 < ratio <= 1:
            raise BudgetError(f"pretrim_ratio must be in (0, 1]; got {self.pretrim_ratio!r}")
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "output_reserve", reserve)
        object.__setattr__(self, "pretrim_ratio", ratio)
        if self.model is not None and not isinstance(self.model, str):
            raise BudgetError(f"model must be a str or None; got {self.model!r:.60}")
        for name, value in (("windows", self.windows), ("prefixes", self.prefixes)):
            if not isinstance(value, Mapping):
                raise BudgetError(
                    f"{name} must be a mapping of str; got {type(value).__name__} {value!r:.60}"
                )
        self._check_windows()

    def _check_windows(self) -> None:
        for name, share in self.windows.items():
            if not isinstance(share, (int, float)) or not 0 <= share <= 1 or math.isnan(share):
                raise BudgetError(f"window {name!r} share must be in [0, 1]; got {share!r}")
        total = sum(self.windows.values())
        if abs(total - 1.0) > 1e-6:
            raise BudgetError(
                f"window shares must sum to 1; got {total:.4f} from {dict(self.windows)}"
            )
        for prefix, window in self.prefixes.items():
            if not isinstance(window, str) or window not in self.windows:
                raise BudgetError(
                    f"prefix {prefix!r} maps to unknown window {window!r}; "
                    f"windows are {sorted(self.windows)}"
                )
            if window == RESERVE:  # never filled: every grain of the prefix would be refused
                raise BudgetError(
                    f"prefix {prefix!r} maps to the {RESERVE!r} window, which is never filled; "
                    "expected a fillable window"
                )
        if self.default_window not in self.windows or self.default_window == RESERVE:
            raise BudgetError(
                f"default_window must be a fillable window of {sorted(self.windows)}; "
                f"got {self.default_window!r}"
            )

    def resolve(self, model: str | None = None) -> int:
        """The budget in tokens: ``total``, or the context window minus the output reserve.

        A ``total`` above the known context window of the model (``self.model``, else
        ``model``) is refused: the provider would reject such a request whatever the plan says.
        A model whose window is unknown accepts any ``total``.

        Raises:
            BudgetError: no total, no known model window, a reserve that leaves nothing, or a
                total above the model's window (the message names model, window and total).
        """
        name = self.model or model
        if self.total is not None:
            self._check_total_fits(name)
            return self.total
        if name is None:
            raise BudgetError("Budget has no total and no model: pass total= or model=")
        window = context_window(name)
        if self.output_reserve >= window:
            raise BudgetError(
                f"output_reserve {self.output_reserve} leaves no input room in {name!r}'s "
                f"{window}-token context window"
            )
        return window - self.output_reserve

    def _check_total_fits(self, name: str | None) -> None:
        if name is None or self.total is None:
            return
        try:
            window = context_window(name)
        except BudgetError:
            return  # unknown window: the caller's total is all we know
        if self.total > window:
            raise BudgetError(  # short: the CLI prints it on one 80-column line
                f"budget {self.total:,} is above the {window:,}-token context window of "
                f"model {name!r}"
            )

    def window_of(self, node_id: str, explicit: str | None = None) -> str:
        """The window a grain belongs to: its explicit window, else its prefix's.

        Raises:
            BudgetError: an explicit window that the budget does not define.
        """
        if explicit is not None:
            if explicit not in self.windows or explicit == RESERVE:
                raise BudgetError(
                    f"grain {node_id!r} names window {explicit!r}; fillable windows are "
                    f"{sorted(w for w in self.windows if w != RESERVE)}"
                )
            return explicit
        return self.prefixes.get(node_id.split(".", 1)[0], self.default_window)
