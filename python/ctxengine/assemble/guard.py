"""Window guard (seed 001, layer 1): cheap, in-memory trimming before anything is summarized.

- :func:`truncate_tool_result` caps one oversized tool result: head and tail kept on line
  boundaries, a trailing error/summary line kept, never below 2,000 characters, with a notice
  telling the model how much was omitted and that the tool can be re-run with offset/limit.
  :func:`max_tool_result_chars` gives the limit for a window (30 %, capped at 400,000 chars) and
  :func:`truncate_tool_results` applies it to a whole transcript.
- :func:`prune_tool_results` trims old tool results once the context passes 30 % of the window
  (soft trim: first 1,500 + last 1,500 chars of results over 4,000) and clears them to a
  placeholder past 50 % when at least 50,000 prunable characters exist. Protected: everything
  before the first user message, the last 3 assistant turns and what follows them, results
  holding images, and tools outside the allow/deny globs.
- :func:`limit_history_turns` keeps the last *n* user turns, cutting only at a user turn.

Sizes are estimated in characters (``chars_per_token`` = 4, an image = 8,000 chars), as the
seed does; nothing here needs the tokenizer. Every function returns new objects (``(transcript,
report)``, the same transcript when nothing changes): the stored transcript is never touched.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Final

from .. import _core
from .._values import as_names, checked_count, checked_real, first_not_str, kind
from ..errors import ConfigError, ConfigTypeError
from ..grain import ContextGrain
from ..splitter import TextSplitter
from ..tokens import pdf_tokens
from ..transcript.changes import Change, Report
from ..transcript.model import (
    Block,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
)
from .budget import Budget
from .report import Extra, GrainDecision, report_window

__all__ = (
    "HARD_MAX_TOOL_RESULT_CHARS",
    "MIN_KEEP_CHARS",
    "SPLIT_CHARS",
    "TOOL_RESULT_SHARE",
    "PruneSettings",
    "estimate_chars",
    "limit_history_turns",
    "max_tool_result_chars",
    "plan_prune",
    "prune_tool_results",
    "replace_results",
    "result_text",
    "split_large",
    "truncate_tool_result",
    "truncate_tool_results",
    "turn_cut",
    "turn_starts",
)

TOOL_RESULT_SHARE: Final = 0.3
HARD_MAX_TOOL_RESULT_CHARS: Final = 400_000
MIN_KEEP_CHARS: Final = 2_000
CHARS_PER_TOKEN: Final = 4.0
IMAGE_CHARS: Final = 8_000

_NOTICE_RESERVE = 360  # room kept for the notice, so the result never exceeds the limit
_TAIL_SHARE = 0.3
_IMPORTANT = re.compile(
    r"error|exception|traceback|failed|failure|fatal|panic|exit (code|status)|summary|total|"
    r"passed|\d+ (tests?|errors?|warnings?)",
    re.IGNORECASE,
)


# -- single result ---------------------------------------------------------------------------


def max_tool_result_chars(
    window_tokens: int,
    *,
    share: float = TOOL_RESULT_SHARE,
    hard_cap: int = HARD_MAX_TOOL_RESULT_CHARS,
    chars_per_token: float = CHARS_PER_TOKEN,
) -> int:
    """Largest tool result (in characters) allowed for a window: ``share`` of it, at most
    ``hard_cap``, at least :data:`MIN_KEEP_CHARS`.

    Raises:
        ValueError: ``window_tokens`` is not positive or ``share`` is not in (0, 1].
    """
    if window_tokens <= 0:
        raise ConfigError(f"window_tokens is {window_tokens}; expected a positive number of tokens")
    if not 0 < share <= 1:
        raise ConfigError(f"share is {share}; expected a fraction in (0, 1]")
    return max(MIN_KEEP_CHARS, min(hard_cap, int(window_tokens * share * chars_per_token)))


def _notice(omitted: int, total: int, lines: int) -> str:
    return (
        f"\n\n[... {omitted:,} of {total:,} characters ({lines:,} lines) omitted: this tool result "
        "was too large for the context window. Re-run the tool with offset/limit (or a narrower "
        "query) to read the omitted part. ...]\n\n"
    )


def _head(text: str, budget: int) -> str:
    head = text[:budget]
    cut = head.rfind("\n")
    return head[: cut + 1] if cut >= budget // 2 else head


def _tail_start(text: str, budget: int) -> int:
    """Where the kept tail starts: on a line boundary, pulled back to a late error line."""
    start = max(0, len(text) - budget)
    nl = text.find("\n", start)
    if start > 0 and nl != -1 and nl - start < budget // 2:
        start = nl + 1
    return start


def _important_line_start(text: str, start: int, budget: int) -> int:
    """Start of the last error/summary line among the final 20 lines, if it lies just before
    ``start`` and fits in ``budget``; else ``start``."""
    lines = text.rstrip("\n").rsplit("\n", 20)
    if len(lines) > 20:  # the first piece is everything before the last 20 lines: not searched
        lines = lines[1:]
    pos = len(text.rstrip("\n"))
    for line in reversed(lines):
        pos -= len(line)
        if _IMPORTANT.search(line):
            if pos < start and len(text) - pos <= budget:
                return pos
            return start
        pos -= 1
    return start


def truncate_tool_result(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max(max_chars, 2000)`` characters, keeping head and tail.

    Cuts fall on line boundaries where one is near; a trailing error/summary line (among the
    last 20 lines) is kept; a notice between head and tail says how many characters and lines
    were omitted and that the tool can be re-run with offset/limit. Text within the limit is
    returned unchanged.

    Raises:
        ValueError: ``max_chars`` is not positive.
    """
    if max_chars <= 0:
        raise ConfigError(f"max_chars is {max_chars}; expected a positive number of characters")
    limit = max(max_chars, MIN_KEEP_CHARS)
    if len(text) <= limit:
        return text
    budget = limit - _NOTICE_RESERVE
    tail_budget = int(budget * _TAIL_SHARE)
    start = _tail_start(text, tail_budget)
    start = _important_line_start(text, start, budget // 2)
    tail = text[start:]
    head = _head(text, budget - len(tail))
    omitted = len(text) - len(head) - len(tail)
    lines = text.count("\n", len(head), start)
    return head + _notice(omitted, len(text), lines) + tail


def result_text(r: ToolResult) -> str:
    """The text blocks of a tool result, joined by newlines."""
    return "\n".join(c.text for c in r.content if isinstance(c, Text))


def _has_image(r: ToolResult) -> bool:
    return any(isinstance(c, Image) for c in r.content)


def _with_text(r: ToolResult, text: str) -> ToolResult:
    return dataclasses.replace(r, content=(Text(text),))


def replace_results(t: Transcript, new: Mapping[tuple[int, int], ToolResult]) -> Transcript:
    """``t`` with the result at (message index, block index) replaced."""
    messages = list(t.messages)
    for i in sorted({i for i, _ in new}):
        m = messages[i]
        blocks = [new.get((i, k), b) for k, b in enumerate(m.blocks)]
        messages[i] = dataclasses.replace(m, blocks=tuple(blocks))
    return t.replace(messages)


def _results(t: Transcript) -> Iterator[tuple[int, int, ToolResult]]:
    for i, m in enumerate(t.messages):
        if m.role == "tool":
            for k, b in enumerate(m.blocks):
                if isinstance(b, ToolResult):
                    yield i, k, b


def truncate_tool_results(
    t: Transcript, window_tokens: int, *, chars_per_token: float = CHARS_PER_TOKEN
) -> tuple[Transcript, Report]:
    """Apply :func:`truncate_tool_result` with :func:`max_tool_result_chars` to every text
    tool result of ``t`` (results holding images are left alone).

    Raises:
        ValueError: ``window_tokens`` is not positive.
    """
    limit = max_tool_result_chars(window_tokens, chars_per_token=chars_per_token)
    new: dict[tuple[int, int], ToolResult] = {}
    changes: list[Change] = []
    for i, k, r in _results(t):
        text = result_text(r)
        if len(text) > limit and not _has_image(r):
            new[(i, k)] = _with_text(r, truncate_tool_result(text, limit))
            detail = f"{len(text):,} chars cut to at most {limit:,}"
            changes.append(Change("truncate_tool_results", "truncated", i, detail, r.call_id))
    if not new:
        return t, Report()
    return replace_results(t, new), Report(tuple(changes))


# -- pruning ---------------------------------------------------------------------------------


#: :class:`PruneSettings` fields that are counts (characters, turns), and the turns of them
#: that may be None.
_COUNTS: Final = (
    "min_prunable_chars",
    "soft_trim_max_chars",
    "soft_trim_head_chars",
    "soft_trim_tail_chars",
    "keep_last_assistants",
    "image_chars",
    "ttl_turns",
    "max_turns",
)
_TURNS: Final = ("ttl_turns", "max_turns")
#: :class:`PruneSettings` fields that are numbers (``ttl_seconds`` may be None).
_REALS: Final = ("soft_trim_ratio", "hard_clear_ratio", "chars_per_token", "ttl_seconds")


@dataclass(frozen=True, slots=True)
class PruneSettings:
    """Thresholds of :func:`prune_tool_results` (defaults from seed 001 / OpenClaw).

    Attributes:
        soft_trim_ratio: Start soft trimming once the context passes this share of the window.
        hard_clear_ratio: Clear old results to a placeholder past this share...
        min_prunable_chars: ...but only when at least this many prunable characters exist.
        soft_trim_max_chars: Results longer than this are soft-trimmed...
        soft_trim_head_chars: ...to their first this many characters...
        soft_trim_tail_chars: ...and their last this many.
        placeholder: What a cleared result says.
        keep_last_assistants: The last this many assistant turns (and what follows) are kept.
        allow: Tool-name globs that may be pruned (case-insensitive); empty = every tool.
        deny: Tool-name globs never pruned; deny wins over allow.
        ttl_seconds: When set, prune only once the provider's prompt cache has expired, i.e.
            when the ``cache_age`` passed to :func:`prune_tool_results` is at least this (or
            unknown): pruning a warm cache would throw away the cached prefix. The engine passes
            the seconds since the session's previous render.
        ttl_turns: When set, prunable results older than the last this many user turns are
            cleared to the placeholder whatever the context's size (``expired`` in the report).
        max_turns: When set, the engine keeps only the leading system messages and the last
            this many user turns of the history (what :func:`limit_history_turns` does); the
            dropped items are reported with stage ``max_turns``.
        chars_per_token: Characters per token for the size estimate.
        image_chars: Characters one image counts for (an inline PDF counts its pages' tokens at
            ``chars_per_token``: :func:`estimate_chars`).

    Raises:
        ValueError: a ratio is outside (0, 1], hard_clear_ratio < soft_trim_ratio, or a size is
            negative.
    """

    soft_trim_ratio: float = 0.3
    hard_clear_ratio: float = 0.5
    min_prunable_chars: int = 50_000
    soft_trim_max_chars: int = 4_000
    soft_trim_head_chars: int = 1_500
    soft_trim_tail_chars: int = 1_500
    placeholder: str = "[Old tool result content cleared]"
    keep_last_assistants: int = 3
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    ttl_seconds: float | None = None
    ttl_turns: int | None = None
    max_turns: int | None = None
    chars_per_token: float = CHARS_PER_TOKEN
    image_chars: int = IMAGE_CHARS

    def __post_init__(self) -> None:
        self._check_kinds()
        for name in ("soft_trim_ratio", "hard_clear_ratio"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ConfigError(f"{name} is {value}; expected a fraction in (0, 1]")
        if self.hard_clear_ratio < self.soft_trim_ratio:
            raise ConfigError(
                f"hard_clear_ratio ({self.hard_clear_ratio}) is below soft_trim_ratio "
                f"({self.soft_trim_ratio}); expected hard >= soft"
            )
        for name in _COUNTS:
            if name not in _TURNS and getattr(self, name) < 0:
                raise ConfigError(f"{name} is {getattr(self, name)}; expected a value >= 0")
        for name in _TURNS:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} is {value}; expected None or at least 1 user turn")
        if self.ttl_seconds is not None and self.ttl_seconds < 0:
            raise ConfigError(f"ttl_seconds is {self.ttl_seconds}; expected None or >= 0")
        if self.chars_per_token <= 0:
            raise ConfigError(f"chars_per_token is {self.chars_per_token}; expected > 0")

    def _check_kinds(self) -> None:
        """Raise :class:`ConfigTypeError` for a field of the wrong kind: a number given as a
        str, a float where a count goes to the Rust ladder, globs given as one str (taken as
        one glob per character) failed inside a render, or quietly pruned nothing."""
        for name in _COUNTS:
            count = checked_count(name, getattr(self, name), optional=name in _TURNS)
            object.__setattr__(self, name, count)
        for name in _REALS:
            real = checked_real(name, getattr(self, name), optional=name == "ttl_seconds")
            object.__setattr__(self, name, real)
        if not isinstance(self.placeholder, str):
            raise ConfigTypeError(f"placeholder is {kind(self.placeholder)}; expected a str")
        for name in ("allow", "deny"):
            globs = getattr(self, name)
            names = as_names(globs)
            if names is None:
                raise ConfigTypeError(
                    f"{name} is {kind(globs)}; expected a tuple of tool-name globs such as "
                    "('read*', 'bash')"
                )
            bad = first_not_str(names)
            if bad is not None:
                raise ConfigTypeError(f"{name} holds {kind(bad)}; expected tool-name globs (str)")
            object.__setattr__(self, name, names)

    @property
    def in_render(self) -> bool:
        """Whether the engine runs these options in its renders: only when one of allow, deny,
        ttl_seconds, ttl_turns or max_turns is set (else the Rust ladder alone trims)."""
        return bool(
            self.allow
            or self.deny
            or self.ttl_seconds is not None
            or self.ttl_turns is not None
            or self.max_turns is not None
        )

    def tool_allowed(self, name: str | None) -> bool:
        """True when results of tool ``name`` may be pruned (deny wins over allow)."""
        low = (name or "").lower()
        if any(fnmatchcase(low, g.lower()) for g in self.deny):
            return False
        return not self.allow or any(fnmatchcase(low, g.lower()) for g in self.allow)


def _block_chars(b: Block, image_chars: int, chars_per_token: float) -> int:
    if isinstance(b, (Text, Thinking)):
        return len(b.text)
    if isinstance(b, Image):
        if b.data is not None and b.media_type == _PDF:  # billed by its pages, not as an image
            return round(pdf_tokens(b.data) * chars_per_token)
        return image_chars
    if isinstance(b, ToolCall):
        args = b.arguments if isinstance(b.arguments, str) else json.dumps(b.arguments)
        return len(b.name) + len(args)
    return sum(_block_chars(c, image_chars, chars_per_token) for c in b.content)


_PDF: Final = "application/pdf"


def estimate_chars(
    t: Transcript, *, image_chars: int = IMAGE_CHARS, chars_per_token: float = CHARS_PER_TOKEN
) -> int:
    """Size of the transcript in characters (text, call arguments, results; images fixed; an
    inline PDF its tokens for no provider, :func:`~ctxengine.tokens.pdf_tokens`, at
    ``chars_per_token``)."""
    return sum(_block_chars(b, image_chars, chars_per_token) for m in t.messages for b in m.blocks)


def _prunable(t: Transcript, s: PruneSettings) -> list[tuple[int, int, ToolResult]]:
    """Results outside the protected zones, oldest first."""
    first_user = next((i for i, m in enumerate(t.messages) if m.role == "user"), None)
    assistants = [i for i, m in enumerate(t.messages) if m.role == "assistant"]
    if first_user is None or len(assistants) < s.keep_last_assistants:
        return []
    cutoff = assistants[-s.keep_last_assistants] if s.keep_last_assistants else len(t.messages)
    names = {c.id: c.name for m in t.messages for c in m.tool_calls}
    return [
        (i, k, r)
        for i, k, r in _results(t)
        if first_user < i < cutoff
        and not _has_image(r)
        and s.tool_allowed(r.name or names.get(r.call_id))
    ]


def _soft_trim(text: str, s: PruneSettings) -> str:
    head, tail = text[: s.soft_trim_head_chars], text[len(text) - s.soft_trim_tail_chars :]
    return (
        f"{head}\n...\n{tail}\n\n[Tool result trimmed: kept first {s.soft_trim_head_chars:,} "
        f"chars and last {s.soft_trim_tail_chars:,} chars of {len(text):,} chars.]"
    )


def prune_tool_results(
    t: Transcript,
    window_tokens: int,
    settings: PruneSettings | None = None,
    *,
    cache_age: float | None = None,
) -> tuple[Transcript, Report]:
    """Soft-trim, then clear, old tool results while the context is too large for the window.

    Args:
        t: The transcript (left untouched; a new one is returned).
        window_tokens: The model's context window in tokens.
        settings: Thresholds; the defaults of :class:`PruneSettings` when None.
        cache_age: Seconds since the provider's prompt cache was last written; with
            ``settings.ttl_seconds`` set, nothing is pruned while the cache is younger.

    Returns:
        ``(transcript, report)``; report actions are ``soft_trim``, ``hard_clear`` and
        ``expired``.

    Raises:
        ValueError: ``window_tokens`` is not positive.
    """
    new, changes = plan_prune(t, window_tokens, settings or PruneSettings(), cache_age=cache_age)
    if not new:
        return t, Report()
    return replace_results(t, new), Report(tuple(changes))


def plan_prune(
    t: Transcript, window_tokens: int, s: PruneSettings, *, cache_age: float | None = None
) -> tuple[dict[tuple[int, int], ToolResult], list[Change]]:
    """What :func:`prune_tool_results` changes, without applying it: the new results by
    (message index, block index), and one change per result (the engine applies the same plan
    to its history items).

    Raises:
        ValueError: ``window_tokens`` is not positive.
    """
    if window_tokens <= 0:
        raise ConfigError(f"window_tokens is {window_tokens}; expected a positive number of tokens")
    if s.ttl_seconds is not None and cache_age is not None and cache_age < s.ttl_seconds:
        return {}, []
    window_chars = window_tokens * s.chars_per_token
    total = estimate_chars(t, image_chars=s.image_chars, chars_per_token=s.chars_per_token)
    pruner = _Pruner(s, total, window_chars)
    if s.ttl_turns is not None:
        starts = turn_starts(t.messages)
        if len(starts) > s.ttl_turns:
            pruner.expire(_prunable(t, s), starts[-s.ttl_turns])
    if pruner.ratio < s.soft_trim_ratio:
        return pruner.new, pruner.changes
    prunable = _prunable(t, s)
    pruner.soft_trim(prunable)
    if (
        pruner.ratio >= s.hard_clear_ratio
        and pruner.prunable_chars(prunable) >= s.min_prunable_chars
    ):
        pruner.hard_clear(prunable)
    return pruner.new, pruner.changes


class _Pruner:
    """The running state of one :func:`prune_tool_results` call."""

    def __init__(self, s: PruneSettings, total: int, window_chars: float) -> None:
        self.s = s
        self.total = total
        self.window_chars = window_chars
        self.new: dict[tuple[int, int], ToolResult] = {}
        self.changes: list[Change] = []

    @property
    def ratio(self) -> float:
        return self.total / self.window_chars

    def text(self, i: int, k: int, r: ToolResult) -> str:
        return result_text(self.new.get((i, k), r))

    def prunable_chars(self, prunable: list[tuple[int, int, ToolResult]]) -> int:
        return sum(len(self.text(i, k, r)) for i, k, r in prunable)

    def replace(self, i: int, k: int, r: ToolResult, text: str, action: str) -> None:
        old = len(self.text(i, k, r))
        self.new[(i, k)] = _with_text(r, text)
        self.total -= old - len(text)
        detail = f"{old:,} chars {'trimmed' if action == 'soft_trim' else 'cleared'}"
        if action == "expired":
            detail += " (older than the last turns ttl_turns keeps)"
        self.changes.append(Change("prune_tool_results", action, i, detail, r.call_id))

    def expire(self, prunable: list[tuple[int, int, ToolResult]], before: int) -> None:
        for i, k, r in prunable:
            if i < before and self.text(i, k, r) != self.s.placeholder:
                self.replace(i, k, r, self.s.placeholder, "expired")

    def soft_trim(self, prunable: list[tuple[int, int, ToolResult]]) -> None:
        for i, k, r in prunable:
            if (i, k) in self.new:
                continue  # already cleared by expire
            text = result_text(r)
            if len(text) > self.s.soft_trim_max_chars:
                trimmed = _soft_trim(text, self.s)
                if len(trimmed) < len(text):
                    self.replace(i, k, r, trimmed, "soft_trim")

    def hard_clear(self, prunable: list[tuple[int, int, ToolResult]]) -> None:
        for i, k, r in prunable:
            if self.ratio < self.s.hard_clear_ratio:
                return
            if self.text(i, k, r) != self.s.placeholder:
                self.replace(i, k, r, self.s.placeholder, "hard_clear")


# -- history ---------------------------------------------------------------------------------


def turn_starts(msgs: Sequence[Message]) -> list[int]:
    """Indices where a user turn starts (a run of consecutive user messages is one turn)."""
    return [
        i for i, m in enumerate(msgs) if m.role == "user" and (i == 0 or msgs[i - 1].role != "user")
    ]


def turn_cut(msgs: Sequence[Message], n: int) -> tuple[int, int, int] | None:
    """The part of ``msgs`` that keeping the last ``n`` user turns drops: ``(start, stop,
    turns)``, messages ``start:stop`` dropped (the leading system messages before ``start`` are
    kept), ``turns`` user turns among them; None when nothing is dropped.

    Raises:
        ValueError: ``n`` is below 1.
    """
    if n < 1:
        raise ConfigError(f"n is {n}; expected at least 1 user turn")
    starts = turn_starts(msgs)
    if len(starts) <= n:
        return None
    cut = starts[-n]
    lead = next((i for i, m in enumerate(msgs) if m.role != "system"), len(msgs))
    return min(lead, cut), cut, len(starts) - n


def limit_history_turns(t: Transcript, n: int) -> tuple[Transcript, Report]:
    """Keep the leading system messages and the last ``n`` user turns.

    A user turn starts at a user message (a run of consecutive user messages is one turn) and
    runs to the next one, so a tool call and its results are never separated.

    Raises:
        ValueError: ``n`` is below 1.
    """
    found = turn_cut(t.messages, n)
    if found is None:
        return t, Report()
    start, cut, turns = found
    msgs = t.messages
    change = Change(
        "limit_history_turns",
        "dropped_turns",
        0,
        f"{turns} user turns ({cut - start} messages) dropped",
    )
    return t.replace([*msgs[:start], *msgs[cut:]]), Report((change,))


# -- step 0 of the engine's ladder: split oversized grains ------------------------------------

#: A grain over this many characters is split into ``<node_id>.<i>`` chunks (DESIGN.md §4).
SPLIT_CHARS: Final = 80_000


def _chunks(grain: ContextGrain, text: str) -> list[ContextGrain]:
    return [
        dataclasses.replace(
            grain,
            node_id=f"{grain.node_id}.{i}",
            content=piece,
            meta={**grain.meta, "split_from": grain.node_id, "chunk": i},
        )
        for i, piece in enumerate(TextSplitter(SPLIT_CHARS).split(text))
    ]


Splits = dict[str, tuple[Any, list[ContextGrain]]]


def split_large(
    grains: list[ContextGrain],
    splits: Splits,
    budget: Budget,
    tokenizer: _core.Tokenizer,
    decisions: list[Extra],
    whole: Collection[str] = (),
) -> tuple[list[ContextGrain], Splits]:
    """Guard: a grain over ``SPLIT_CHARS`` becomes ``<node_id>.<i>`` chunks (not those of
    ``whole``: the compaction summary is one message, fitted to the room as a whole).

    ``splits`` caches the chunks of the last render by content; the cache of this render (only
    grains still present) is returned with the grains. A decision per split grain is appended.
    """
    out: list[ContextGrain] = []
    fresh: Splits = {}
    for grain in grains:
        text = grain.text
        if len(text) <= SPLIT_CHARS or grain.node_id in whole:
            out.append(grain)
            continue
        key = (text, grain.origin, grain.priority, grain.lifespan, grain.window, grain.protected)
        cached = splits.get(grain.node_id)
        chunks = cached[1] if cached is not None and cached[0] == key else _chunks(grain, text)
        fresh[grain.node_id] = (key, chunks)
        window = report_window(budget, grain)
        reason = f"{len(text):,} chars split into {len(chunks)} chunks {grain.node_id}.<i>"
        tokens = tokenizer.count(text)
        decisions.append(
            GrainDecision(
                grain.node_id, grain.origin, window, "folded", "split", "guard", reason, tokens, 0
            )
        )
        out.extend(chunks)
    return out, fresh
