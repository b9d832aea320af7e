"""Ladder step 3 and ``Session.compact()``: the compaction pipeline run on a session.

The turns the plan could not keep (or, for :func:`compact_now`, the older part of the live
history) are summarized by :func:`ctxengine.compaction.compact` into the session summary: a
``mem.summary`` grain that the Rust plan counts in ``core_memory`` and that inject composes as
the first history message (user role, "summary of the earlier conversation"), never as system
text. An earlier summary is one of the summarized messages, so the pipeline merges it section
by section (a summary of summaries). A failed, empty or timed-out summary writes nothing.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import accumulate, chain
from operator import attrgetter, itemgetter, methodcaller, sub
from typing import TYPE_CHECKING, Any, Final

from .. import _core
from ..compaction import (
    CompactionConfig,
    CompactionResult,
    ExtractiveSummarizer,
    compact_history,
    summary_message,
)
from ..compaction import compact as compact_messages
from ..compaction.facts import message_scope, newest_request, paused_collector
from ..compaction.pipeline import (
    MAX_LATEST_CHARS,
    fill_repeats,
    sections_tokens,
    steady_collector,
)
from ..compaction.requests import request_text
from ..compaction.sections import shorten_latest
from ..grain import ContextGrain
from ..transcript.model import Message
from .history import thinking_alone
from .prune import forget_pruned
from .report import STAGE, GrainDecision, LazyDecisions, decisions
from .sync import refresh_redaction

if TYPE_CHECKING:
    from ..collect.registry import Registry
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog

__all__ = (
    "MAX_COMPACTIONS",
    "SUMMARY_ID",
    "SUMMARY_META",
    "compact",
    "compact_now",
    "summary_limit",
    "tail_start",
)

MAX_COMPACTIONS = 3
#: Node id of the session summary grain.
SUMMARY_ID: Final = "mem.summary"
#: Meta key marking the summary grain: inject composes it as a history message.
SUMMARY_META: Final = "compaction_summary"
#: Tokens kept free below the plan's target when the summary takes its room (the summary's
#: message framing and the count's estimate of the rendered text).
SUMMARY_SLACK: Final = 16
#: What the plan counts for the summary grain beyond its text's tokens (its grain overhead;
#: the message framing is taken off the plan's budget, ``assemble.pipeline.SUMMARY_FRAMING``).
SUMMARY_FRAMING: Final = 2
#: Most summaries measured to land one compaction at its low-water mark.
MAX_TRIALS: Final = 6
#: Beyond this many turns to choose from, a landing measures :data:`LARGE_TRIALS` summaries:
#: each is a pass over most of the history (a cold 100k-message session took 6 of them).
LARGE_TURNS: Final = 2_000
LARGE_TRIALS: Final = 2
#: Below this use of the target a compaction that one big turn made overshoot stops before it.
MIN_USE: Final = 0.95
#: Most rounds of keeping summarized turns verbatim when a compaction overshot.
GIVE_BACK_ROUNDS: Final = 3
#: Fewest tokens a compaction that gives summarized turns back leaves below the target at a
#: tiny budget (room for the next turn, when the turns given back allow it).
MIN_ROOM: Final = 96
#: The most of the plan's target a summary takes to keep earlier requests it would
#: otherwise drop (its room, :func:`_cap`): a session of thousands of requests keeps the
#: newest of them and its newest turns verbatim, not a summary filling the whole target.
REQUESTS_ROOM: Final = 0.5
#: After a failed compaction: renders before the next attempt (doubled per failure in a row),
#: their most, and the history growth (share of the target) that brings the attempt forward.
RETRY_RENDERS: Final = 4
MAX_RETRY_RENDERS: Final = 64
RETRY_GROWTH: Final = 0.25


def summary_limit(config: RenderConfig) -> int:
    """The summary window's share of the target, in tokens (the summary's cap): at least 64, but
    never more than half the target (the summary is protected: at a tiny budget a larger one
    would leave no room for the latest request)."""
    budget = config.budget
    share = budget.windows[budget.window_of(SUMMARY_ID)]
    target = int(config.tokens_total * budget.pretrim_ratio)
    return max(min(64, target // 2), int(target * share))


def _summary_grain(
    state: SessionState, result: CompactionResult, turns: Sequence[int]
) -> ContextGrain:
    """The summary grain of ``result``. Redacted once more (compaction read redacted
    messages, :func:`_read`): a summary joins and cuts what it quotes, which may make a
    secret's whole form out of pieces no redactor matched apart."""
    redaction = state.redaction
    return ContextGrain(
        SUMMARY_ID,
        "compaction",
        result.summary if redaction is None else redaction.text(result.summary),
        priority=50,
        lifespan="session",
        protected=True,  # capped below the low-water mark; the ladder must not cut requests
        meta={
            "label": "summary of the earlier conversation",
            "turns": len(turns),
            "replaced": len(result.replaced),
            SUMMARY_META: True,
        },
    )


def _read(state: SessionState, index: int) -> Message:
    """Message ``index`` as compaction reads it: as the payload redactors leave it
    (:mod:`~ctxengine.assemble.redact`; a summary is made after ``on_before_render``, from
    the messages, so it would otherwise quote the secrets the render's grains had lost)."""
    message = state.messages[index]
    redaction = state.redaction
    return message if redaction is None else redaction.message(index, message)


def _previous(state: SessionState) -> list[Message]:
    """The earlier summary as a message, so the pipeline merges it (summary of summaries;
    redacted: it may have been written before a redactor was registered)."""
    summary = state.summary
    if summary is None or not summary.text:
        return []
    text = summary.text if state.redaction is None else state.redaction.text(summary.text)
    return [summary_message(text, int(summary.meta.get("replaced", 0) or 0))]


def _newest_user(state: SessionState) -> int:
    """Index of the newest user message (-1: none)."""
    messages = state.messages
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), -1)


def _latest_request(state: SessionState, indices: Sequence[int]) -> str | None:
    """The newest user request when it is among the summarized messages (``indices``,
    sorted), or when an earlier summary, merged into this one, holds it (compacted before,
    no request since: an agent loop compacted again): it must survive, whole. An
    observation, the harness's text or a slash command is no request
    (:mod:`ctxengine.compaction.requests`)."""
    newest = newest_request(state.messages)
    if newest < 0:
        return None
    at = bisect_left(indices, newest)
    if (at < len(indices) and indices[at] == newest) or (
        state.summary is not None and f"hist.{newest}" in state.compacted
    ):
        message = _read(state, newest)
        return request_text(message.text, message.meta)
    return None


def _continued_request(
    state: SessionState, indices: Sequence[int], live: Sequence[int]
) -> str | None:
    """The request of the agent loop the kept history starts in, when it is summarized: the
    oldest message kept (of ``live``, the sorted indices of the live history messages) is a
    later step of that loop, whose model would otherwise see its request only by the first
    line a summary keeps of an earlier request. Only when no summarized request is newer
    (the summary's newest request is then this one, kept whole), and only one the summary
    can carry whole (:data:`~ctxengine.compaction.pipeline.MAX_LATEST_CHARS`; a longer one
    keeps its first line, as every earlier request). Asked for on top of what
    the compaction must keep (:func:`_summarize` drops it when the summary cannot hold it)."""
    summarized = set(indices)
    first = next((i for i in live if i not in summarized), -1)
    messages = state.messages
    if first < 0 or messages[first].role != "assistant":
        return None

    def asks(j: int) -> bool:  # not an observation, the harness's text or a command
        m = messages[j]
        return m.role == "user" and request_text(m.text, m.meta) is not None

    asked = next((j for j in range(first - 1, -1, -1) if asks(j)), -1)
    if asked < 0:
        return None
    earlier = state.summary is not None and f"hist.{asked}" in state.compacted
    if asked not in summarized and not earlier:
        return None
    newer = indices[bisect_left(indices, asked + 1) :]
    if any(asks(i) for i in newer):
        return None
    message = _read(state, asked)
    text = request_text(message.text, message.meta) or ""
    # a longer one (a pasted log, a skill's instructions) could only be carried cut by the cap
    return text if text and len(text) <= MAX_LATEST_CHARS else None


def _protected(state: SessionState, grains: Sequence[ContextGrain]) -> list[str]:
    """The texts of the protected ``grains`` the summary must hold (redacted, as they are
    sent)."""
    texts = [g.text for g in grains if g.protected and g.text and g.node_id != SUMMARY_ID]
    return texts if state.redaction is None else state.redaction.texts(texts)


@paused_collector()  # a report entry per summarized item
def _apply(
    state: SessionState,
    config: RenderConfig,
    registry: Registry,
    result: CompactionResult,
    doomed: Sequence[Any],
    turns: Sequence[int],
    log: TurnLog | None,
) -> None:
    """Write a successful compaction: the new summary grain, the summarized items forgotten."""
    state.summary = _summary_grain(state, result, turns)
    state.store(state.summary, registry.rank("compaction"))
    ids = list(map(_NODE_ID, doomed))
    if log is not None:
        reason = f"summarized into {SUMMARY_ID} with {len(result.replaced)} earlier messages"
        # the turn: a whole turn is what backfill could have given back
        item_turns = list(map(_TURN, doomed))
        tokens = state.asm.tokens_of(ids)  # before the items leave
        log.extra.append(
            LazyDecisions(
                partial(_summarized, ids, config.budget.window_of, reason, item_turns, tokens)
            )
        )
    _forget(state, ids)


#: Why turns the ladder sent to compaction stayed out of a render's summary when no compaction
#: failed: :func:`_take_tail` left them out (the summary would have had to shrink).
TAIL_LEFT: Final = (
    "the protected tail passes the target, and a summary taking it beside what stays would "
    "have been cut below its size"
)


def unsummarized(
    state: SessionState, config: RenderConfig, plan: Any, why: str
) -> list[GrainDecision]:
    """Decisions for the items of the turns ``plan`` still sends to compaction after the
    render's compactions: dropped from this render and not summarized in it (``why``), not
    "to be summarized by compaction" as the plan says. They stay in the session: a later
    render keeps them or a later compaction summarizes them."""
    turns = set(plan.compaction_turns)
    if not turns:
        return []
    ids, _, stage, _, before, _, _ = _decisions(plan)
    items = state.items
    chosen = [
        (n, items[n].turn, b)
        for n, sg, b in zip(ids, stage, before, strict=True)
        if sg == _STAGE_COMPACTION and n in items and items[n].turn in turns
    ]
    window_of = config.budget.window_of
    return decisions(
        [n for n, _, _ in chosen],
        "transcript",
        [window_of(n) for n, _, _ in chosen],
        "dropped",
        "compaction",
        [
            f"turn {t} dropped for this render, not summarized in it: {why}; it stays in the "
            "session for a later render or compaction"
            for _, t, _ in chosen
        ],
        [b for _, _, b in chosen],
    )


def _entry(result: CompactionResult, turns: Sequence[int]) -> dict[str, Any]:
    return {"turns": list(turns), **result.entry(), "summary_chars": len(result.summary)}


def tail_start(state: SessionState, keep: int) -> int:
    """Message index where the protected tail starts: the last ``keep`` assistant turns, from
    the user message right before the oldest of them (``len(messages)`` when ``keep`` is 0).

    When other assistant messages lie between that user message and the oldest of them (an
    agent loop: one request, many tool steps), the tail starts at the oldest of them instead,
    so that a long loop can still be compacted; the request is then kept verbatim in the
    summary (the newest one as its latest request)."""
    messages = state.messages
    if keep <= 0:
        return len(messages)
    seen = 0
    for n in range(len(messages) - 1, -1, -1):
        if messages[n].role == "assistant":
            seen += 1
            if seen == keep:
                user = next((u for u in range(n, -1, -1) if messages[u].role == "user"), n)
                loop = any(messages[k].role == "assistant" for k in range(user + 1, n))
                if not loop:
                    return user
                while n > user + 1 and _leads(messages[n - 1]):
                    n -= 1  # its turn starts with that thinking (one history turn, not split)
                return n
    return 0


def _leads(m: Message) -> bool:
    """Whether ``m`` starts the turn of the assistant message after it (thinking alone)."""
    return m.role == "assistant" and thinking_alone(m.blocks)


def _tokens(state: SessionState, node_ids: Sequence[str]) -> int:
    return sum(state.asm.tokens_of(node_ids))  # 0: not in the plan


_INDEX: Final = attrgetter("index")
_NODE_ID: Final = attrgetter("node_id")
_TURN: Final = attrgetter("turn")
_PARTITION: Final = methodcaller("partition", ".")
_FIRST: Final = itemgetter(0)
_STAGE_COMPACTION: Final = next(k for k, v in STAGE.items() if v == "compaction")


@dataclass(slots=True)
class _Landing:
    """The turns a compaction may summarize and what the render weighs for each choice.

    ``forced`` are the turns the ladder sent to compaction; ``order`` the further turns outside
    the protected tail, oldest first. Summarizing ``forced`` and ``order[:k]`` leaves
    ``rest(k)`` tokens besides the new summary.

    A user message and the assistant message answering it (the next one but tool results)
    are two turns (so that an agent loop under one request can lose its oldest steps), but a
    compaction never parts them: ``questions`` maps such an answer's turn to its request's, and
    the cut never falls between them (``splits``: the choices ``k`` that would, see
    :meth:`first`), nor is an answer given back without its request, or a request without its
    summarized answer (:meth:`unit`). Else the kept history would start with an answer to a
    question the model sees only summarized, and the summary would call that question still
    pending (or show a question whose answer only the summary holds)."""

    by_turn: dict[int, list[Any]]
    forced: list[int]
    order: list[int]
    base: int
    freed: list[int]
    size: dict[int, int]
    kept: set[int] = field(default_factory=set)
    #: The summary's size when it fills the room its turns leave (see :func:`_fill`).
    fill: int | None = None
    #: Whether that fill writes every copy of an excerpt line (see :func:`_fill`).
    repeats: bool = False
    #: :meth:`items` by choice (``k`` and the turns kept): the trials of a landing, its
    #: summary and its report ask for the same items (a list per choice of a long history).
    chosen: dict[tuple[int, frozenset[int]], list[Any]] = field(default_factory=dict)
    #: :meth:`indices` by choice.
    positions: dict[tuple[int, frozenset[int]], list[int]] = field(default_factory=dict)
    #: Turn → the tokens the plan left its items (see :meth:`held`).
    after: dict[int, int] = field(default_factory=dict)
    #: :meth:`held`'s prefix sums (made again whenever ``after`` is).
    sums: tuple[list[int], int, int, dict[int, int], set[int]] | None = None
    #: What every summary of the landing reads besides its items: the earlier summary as a
    #: message and the protected texts, both redacted (read once: see :func:`_summarize`).
    inputs: tuple[list[Message], list[str]] | None = None
    #: An answer's turn → the turn of the request it answers (both among ``by_turn``).
    questions: dict[int, int] = field(default_factory=dict)
    #: The choices ``k`` that would summarize a request and keep its answer.
    splits: set[int] = field(default_factory=set)
    #: ``questions`` the other way: a request's turn → its answer's (made when first asked).
    answers: dict[int, int] | None = None
    #: The message indices of the live history messages, sorted (see :meth:`live`).
    messages: list[int] | None = None
    #: The indices of the user messages, sorted (see :meth:`request_of`).
    users: list[int] | None = None
    #: What the plan cut in the protected tail, taken off ``base`` (see :func:`_tail_cuts`).
    tail_cut: int = 0

    def rest(self, k: int) -> int:
        return self.base - self.freed[k] + sum(self.size[t] for t in self.kept)

    def turns(self, k: int) -> list[int]:
        return sorted({t for t in [*self.forced, *self.order[:k]] if t not in self.kept})

    def items(self, k: int) -> list[Any]:
        """The items summarizing ``forced`` and ``order[:k]`` replaces (the same list for the
        same choice: callers only read it)."""
        key = (k, frozenset(self.kept))
        items = self.chosen.get(key)
        if items is None:  # a turn's items are its own (one item per node id, one turn each)
            items = list(chain.from_iterable(map(self.by_turn.__getitem__, self.turns(k))))
            self.chosen[key] = items
        return items

    def indices(self, k: int) -> list[int]:
        """The message indices of :meth:`items`, sorted (the same list for the same choice)."""
        key = (k, frozenset(self.kept))
        found = self.positions.get(key)
        if found is None:
            found = self.positions[key] = sorted(set(map(_INDEX, self.items(k))))
        return found

    def held(self, k: int, plan: Any) -> tuple[int, int]:
        """The tokens of :meth:`items` in the plan, before and after its trims: the sums of
        their turns' (each turn's once per landing; a turn's items are its own, so the sums
        over its turns are those over the items)."""
        after, size = self.after, self.size
        if not after:
            left = plan.tokens_after_of(list(_ids(self.by_turn)))
            after.update(_turn_sums(self.by_turn, left))
            self.sums = None
        sums = self.sums
        if sums is None:  # once per landing: each trial's sums from prefix sums over order
            after_freed = [0]
            for t in self.order:
                after_freed.append(after_freed[-1] + after[t])
            forced = self.forced
            sums = self.sums = (
                after_freed,
                sum(size[t] for t in forced),
                sum(after[t] for t in forced),
                {t: i for i, t in enumerate(self.order)},
                set(forced),
            )
        after_freed, forced_before, forced_after, position, forced_set = sums
        before, held = forced_before + self.freed[k], forced_after + after_freed[k]
        for t in self.kept:  # turns given back are not summarized
            if t in forced_set or position.get(t, k) < k:
                before -= size[t]
                held -= after[t]
        return before, held

    def first(self, room: int, smallest: int) -> int:
        """The fewest further turns (at least ``smallest``) that bring the rest to ``room``
        (all of them when none does)."""
        # rest(k) only falls as k grows (each further turn frees its tokens): the first k
        # whose rest is within room, by bisection
        kept = sum(self.size[t] for t in self.kept)
        freed, need = self.freed, self.base + kept - room  # rest(k) <= room: freed[k] >= need
        k = min(bisect_left(freed, need, lo=min(smallest, len(freed))), len(self.order))
        while k in self.splits:  # the answer goes with its request (it only frees more)
            k += 1
        return k

    def before(self, k: int) -> int:
        """The choice summarizing fewer turns than ``k`` that parts no request from its
        answer (negative when there is none)."""
        k -= 1
        while k in self.splits:
            k -= 1
        return k

    def unit(self, t: int, chosen: set[int]) -> list[int]:
        """Turn ``t`` and, when it is an answer or a request whose request or answer is among
        ``chosen`` too, that turn: what is given back verbatim together (a request comes back
        alone only when its answer is not summarized)."""
        other = self.questions.get(t)
        if other is None:
            if self.answers is None:
                self.answers = {q: a for a, q in self.questions.items()}
            other = self.answers.get(t)
        return [t] if other is None or other not in chosen else [t, other]

    def request_of(self, state: SessionState, index: int) -> int:
        """The index of the user message that message ``index`` answers or is (-1: none)."""
        if self.users is None:
            self.users = [i for i, m in enumerate(state.messages) if m.role == "user"]
        at = bisect_right(self.users, index) - 1
        return self.users[at] if at >= 0 else -1

    def first_kept(self, state: SessionState, k: int) -> int:
        """The index of the oldest history message choice ``k`` keeps (the history's length
        when it keeps none)."""
        summarized = set(self.indices(k))
        return next((i for i in self.live(state) if i not in summarized), len(state.messages))

    def opens(self, state: SessionState, unit: list[int], first: int) -> int | None:
        """Where the kept history starts once ``unit`` is given back verbatim, or None when
        that start would be a step of another request than the one it starts in at ``first``
        (an answer whose request stays summarized, before the requests kept). Anything may
        start a history that keeps nothing yet (``first`` is the history's length)."""
        start = self.start(unit)
        if start >= first:
            return first
        if first >= len(state.messages) or state.messages[start].role != "assistant":
            return start  # nothing kept yet, or a request
        if self.request_of(state, start) == self.request_of(state, first):
            return start  # a further step of the loop the kept history starts in
        return None

    def beyond(self, state: SessionState, unit: list[int], first: int) -> bool:
        """Whether ``unit`` lies past ``first``, the start of the kept history (a turn of the
        protected tail the ladder could not keep, :func:`_take_tail`): it stands between no
        older summarized turn and the kept history, so one that does not come back does not
        stop the older ones that fit from coming back."""
        return first < len(state.messages) and self.start(unit) > first

    def start(self, unit: list[int]) -> int:
        """The index of the first message of the turns ``unit``."""
        found: int = min(i.index for t in unit for i in self.by_turn[t])
        return found

    def back(
        self,
        state: SessionState,
        k: int,
        back: set[int],
        at: int,
        limit: int,
        first: int,
        past_tail: bool = False,
    ) -> tuple[int, int]:
        """Add to ``back`` the newest turns summarized by choice ``k`` (each with its
        :meth:`unit`) that come back verbatim within ``limit`` tokens, the render at ``at``
        and the kept history starting at ``first``: in order from the newest, stopping at the
        first that does not fit or would start the history with a step of another request
        (:meth:`opens`), never all of them (a compaction summarizes something). With
        ``past_tail`` one :meth:`beyond` the kept history's start does not stop the older ones.
        Returns the render's tokens and the kept history's start with them back."""
        chosen = self.turns(k)
        among = set(chosen)
        for t in reversed(chosen):
            if t in back:
                continue
            unit = [u for u in self.unit(t, among) if u not in back]
            size = sum(self.size[u] for u in unit)
            if not (
                len(back) + len(unit) < len(chosen)
                and at + size <= limit
                and (start := self.opens(state, unit, first)) is not None
            ):
                if past_tail and self.beyond(state, unit, first):
                    continue  # a tail turn past the kept history's start: not in the way
                break  # only the newest summarized turns come back: the history stays in order
            back.update(unit)
            at += size
            first = start
        return at, first

    def live(self, state: SessionState) -> list[int]:
        """The message indices of the live history messages, sorted (read once per landing)."""
        if self.messages is None:
            self.messages = sorted(
                i.index for i in state.items.values() if i.kind == _core.KIND_MESSAGE
            )
        return self.messages


def _ids(by_turn: dict[int, list[Any]]) -> map[str]:
    """The node ids of the items of ``by_turn``, turn after turn."""
    return map(_NODE_ID, chain.from_iterable(by_turn.values()))


def _turn_sums(by_turn: dict[int, list[Any]], values: list[int]) -> dict[int, int]:
    """Turn → the sum of ``values`` (one per item of :func:`_ids`) over its items: the
    differences of their running sums at the turns' ends, in passes at C level (a ``sum``
    call per turn cost more than the rest of a landing's reading of a long history)."""
    sums = [0, *accumulate(values)]
    ends = list(accumulate(map(len, by_turn.values())))
    at = sums.__getitem__
    return dict(zip(by_turn, map(sub, map(at, ends), map(at, [0, *ends[:-1]])), strict=True))


def _held_out(state: SessionState) -> set[int]:
    """The turns a compaction in this render leaves alone: those of the history items a tree
    handler took out of it (``SessionState.unrendered``: it left them out of what is sent, so
    the summary, sent from now on, must not carry them either), and the answer of each such
    request (summarized, it would leave the request, back in the next render, after the
    summary that answered it, as if it were still to be answered). They stay in the session:
    the next render has them back. The request of an answer taken out may be summarized: the
    render does not send that answer, and a request kept without it would look unanswered."""
    out = state.unrendered
    if not out:
        return set()
    items = state.items
    held = {items[n].turn for n in out if n in items}
    if not held:
        return held
    requests: dict[int, list[Any]] = {}
    for item in items.values():
        if item.turn in held:
            requests.setdefault(item.turn, []).append(item)
    return held | set(_answers(state, requests.items()).values())


def _landing(
    state: SessionState, config: RenderConfig, turns: Sequence[int], plan: Any
) -> _Landing:
    start = tail_start(state, config.compaction.keep_assistant_turns)
    asked = set(turns)
    by_turn: dict[int, list[Any]] = {}
    context = _core.KIND_CONTEXT
    held = _held_out(state)
    for item in state.items.values():
        # a protected message (a provider's compaction) is never summarized away
        if (
            item.kind != context
            and item.index < start
            and item.turn not in held
            and not item.flags & _core.FLAG_PROTECTED
        ):
            by_turn.setdefault(item.turn, []).append(item)
    answers = {t: a for t, a in _answers(state, by_turn.items()).items() if a in by_turn}
    # a request the ladder sent to compaction goes with its answer, and an answer it sent
    # with its request: else the cut could keep the request verbatim (see _Landing)
    taken = {t for t in asked if t in by_turn}
    taken |= {answers[t] for t in taken if t in answers}
    taken |= {t for t, a in answers.items() if a in taken}
    # the newest request is summarized only with every turn before it (by the cut, not
    # wherever the ladder sent it): else an older request stayed verbatim after the summary
    # holding it, and the model read that stale request last
    newest = state.items.get(f"hist.{newest_request(state.messages)}")
    if newest is not None and newest.turn in taken:
        taken -= {newest.turn, answers.get(newest.turn)}
    forced = sorted(taken)
    order = sorted(t for t in by_turn if t not in taken) if plan is not None else []
    size = _turn_sums(by_turn, state.asm.tokens_of(list(_ids(by_turn))))  # 0: not in it
    old = _tokens(state, [SUMMARY_ID]) if state.summary is not None else 0
    total = plan.total_before if plan is not None else 0
    base = total - old - sum(size[t] for t in forced)
    freed = [0]
    for t in order:
        freed.append(freed[-1] + size[t])
    land = _Landing(by_turn, forced, order, base, freed, size)
    land.questions = {a: t for t, a in answers.items()}
    land.splits = {k for k in range(1, len(order)) if answers.get(order[k - 1]) == order[k]}
    if plan is not None and base - freed[-1] + _estimate(state) > plan.target:
        cuts = _tail_cuts(state, plan, start)
        land.tail_cut = sum(cuts.values())
        land.base -= land.tail_cut
        _take_tail(state, config, plan, land, start, asked, cuts)
    return land


def _take_tail(
    state: SessionState,
    config: RenderConfig,
    plan: Any,
    land: _Landing,
    start: int,
    asked: set[int],
    cuts: dict[int, int],
) -> None:
    """The protected tail's turns the ladder cannot keep, summarized with the rest instead of
    dropped unsummarized (lost to every render until they left the tail): those it sent to
    compaction, then, while even with every older turn summarized the tail passes the target,
    its oldest further ones (the ladder would send them next, for a second summary after older
    turns were summarized for room this frees anyway). Not at the high-water mark alone (the
    ladder asked for nothing): a render that fits once trimmed is left as it is, so that
    rendering it again gives the same payload. Only when the summary keeps its size
    beside what stays: when one huge request leaves it less, the turns stay dropped for this
    render, unsummarized (their report decisions say so: :func:`unsummarized`), and the
    summary whole for the next (:func:`_fit_summary` fits it to this one)."""
    over = land.base - land.freed[-1] + _estimate(state) - plan.target
    taken: list[tuple[int, list[Any], int]] = []
    tail = _tail_turns(state, start) if asked else []
    answers = _answers(state, tail)
    due: set[int] = set()  # the answers of the requests taken: they go with them
    for t, items in tail:
        if t in land.by_turn:  # a turn begun before the tail (a late result): not split
            continue
        if t not in asked and t not in due and over <= 0:
            continue
        held = _tokens(state, [i.node_id for i in items]) - cuts.get(t, 0)
        taken.append((t, items, held))
        over -= held
        if t in answers:
            due.add(answers[t])
    if not taken:
        return
    whole = config.tokenizer.count(state.summary.text) if state.summary is not None else 0
    low = _low(config, plan)
    if low - (land.base - land.freed[-1] - sum(h for _, _, h in taken)) < min(whole, low // 2):
        return
    for t, items, held in taken:
        land.by_turn[t] = items
        land.size[t] = held + cuts.get(t, 0)
        land.forced.append(t)
        land.base -= held
    land.forced.sort()
    for t, _, _ in taken:
        answer = answers.get(t)
        if answer is not None and answer in land.by_turn:  # given back only with its request
            land.questions[answer] = t
            land.answers = None
    land.chosen.clear()
    land.positions.clear()
    land.after.clear()


def _answers(state: SessionState, turns: Iterable[tuple[int, list[Any]]]) -> dict[int, int]:
    """Turn → the turn of the assistant message answering it, for the ``turns`` (turn, items)
    that hold a user message answered by the next message but tool results (a live one)."""
    messages, items = state.messages, state.items
    found: dict[int, int] = {}
    message, user, n = _core.KIND_MESSAGE, _core.ROLE_USER, len(messages)
    for t, held in turns:
        for item in held:
            if item.kind != message or item.role != user:
                continue
            j = item.index + 1
            while j < n and messages[j].role == "tool":
                j += 1
            answer = items.get(f"hist.{j}") if j < n else None
            if answer is not None and messages[j].role == "assistant":
                found[t] = answer.turn
    return found


def _tail_turns(state: SessionState, start: int) -> list[tuple[int, list[Any]]]:
    """The protected tail's turns the ladder may send to compaction, oldest first: not the
    latest user message's turn, none holding protected content or a system message, none a
    tree handler took out of this render (:func:`_held_out`)."""
    newest = _newest_user(state)
    turns: dict[int, list[Any]] = {}
    pinned = _held_out(state)
    for item in state.items.values():
        if item.kind == _core.KIND_CONTEXT or item.index < start:
            continue
        turns.setdefault(item.turn, []).append(item)
        if (
            item.index == newest
            or item.flags & _core.FLAG_PROTECTED
            or state.messages[item.index].role == "system"
        ):
            pinned.add(item.turn)
    return sorted((t, items) for t, items in turns.items() if t not in pinned)


def _tail_cuts(state: SessionState, plan: Any, start: int) -> dict[int, int]:
    """Tokens the plan cut from the protected tail, per turn. When the tail alone does not fit
    beside the other history (one huge message), the ladder cuts it whatever is summarized, so
    the landing is measured without what it cuts there (else every older turn would be
    summarized for room the ladder makes anyway)."""
    ids, _, _, _, before, after, _ = _decisions(plan)
    tail = {i.node_id: i.turn for i in state.items.values() if i.index >= start}
    cuts: dict[int, int] = {}
    for n, b, a in zip(ids, before, after, strict=True):
        if n in tail and b > a:
            cuts[tail[n]] = cuts.get(tail[n], 0) + b - a
    return cuts


def _low(config: RenderConfig, plan: Any) -> int:
    """The low-water mark in tokens: ``render_low_water`` of the target, lower when the
    high-water mark leaves less room above the target than the settings ask for (the mark is
    capped at the budget less the reserve: with ``pretrim_ratio`` near 1 it is the target
    itself), so the room to grow before the next compaction stays ``render_high_water -
    render_low_water`` of the target. At a tiny budget the room it leaves may be smaller than
    the next turn, so the next render compacts again; below about a thousand tokens no
    provider caches a prompt prefix anyway."""
    target = int(plan.target)
    settings = config.compaction
    high = min(int(target * settings.render_high_water), int(plan.available))
    gap = int(target * (settings.render_high_water - settings.render_low_water))
    return max(min(int(target * settings.render_low_water), high - gap), 0)


def _estimate(state: SessionState) -> int:
    """A first guess of the new summary's size: the previous summary's (it is merged into the
    new one, which adds the facts of the turns summarized now), at least a short one's."""
    previous = _tokens(state, [SUMMARY_ID]) if state.summary is not None else 0
    return max(previous + previous // 8, 128)


def _first_estimate(
    state: SessionState,
    config: RenderConfig,
    land: _Landing,
    plan: Any,
    protected: Sequence[ContextGrain],
    room: int,
    smallest: int,
) -> int:
    """The summary size a landing's first trial is chosen for (the fewest turns that bring the
    rest to ``room`` besides it): :func:`_estimate`, or, for a session's first summary, at
    least the sections (requests, failures, files...) of the stretch the fewest turns that
    :func:`_estimate` leaves room for would summarize, when they fit the summary's cap (a
    summary cut to its cap may be much smaller). The trials then go on from a stretch whose
    summary is not smaller than its sections: the real 914-message session's first summary
    holds 3,100 tokens of sections among 3,500, and from 128 its landing measured three
    summaries (turns 371, 384, 387), from its sections two (381, 387). Its reading of the
    stretch is the one the trials go on from (the same message scope)."""
    guess = _estimate(state)
    if state.summary is not None:
        return guess
    k = land.first(room - guess, smallest)
    messages, pinned = _stretch(state, land, land.indices(k), protected)
    if not messages:
        return guess
    sections = sections_tokens(
        messages, count=config.tokenizer.count, protected=pinned, config=config.compaction
    )
    cap, _ = _cap(state, config, land.held(k, plan), plan)
    if sections > cap:  # the summary is cut to its cap, by how much its sections do not say
        return guess
    # beside the rest, as the trials measure a landing: the summary and its grain's framing
    return max(guess, sections + SUMMARY_FRAMING)


def _cap(
    state: SessionState, config: RenderConfig, held: tuple[int, int], plan: Any
) -> tuple[int, int | None]:
    """The summary's cap and room: its window's share, or more when the plan leaves more room
    below the low-water mark; and the room up to the plan's target (at most
    :data:`REQUESTS_ROOM` of it) the summary may take rather than drop a request (the next
    render then compacts again: a long session at a small budget compacts more often, and
    loses no request while its requests fit that share), counting what stays at the size
    the plan left it when that leaves more (tool results the ladder soft-trimmed: a summary
    that must keep a long request then fits instead of failing the compaction).

    ``held``: the tokens of the summarized items in the plan, before and after its trims
    (:meth:`_Landing.held`)."""
    share = summary_limit(config)
    if plan is None:
        return share, None
    previous = _tokens(state, [SUMMARY_ID]) if state.summary is not None else 0
    before, after = held
    rest = plan.total_before - before - previous
    low = _low(config, plan)
    cap = int(max(share, low - rest))
    # what stays takes what the plan left it (soft trims stand when the summary needs room)
    stays = plan.total_after - after - plan.tokens_after_of([SUMMARY_ID])[0]
    room = max(plan.target - rest - SUMMARY_SLACK, plan.target - stays - SUMMARY_SLACK)
    # earlier requests take at most half the target: past it the oldest are dropped (with
    # their count), so the newest turns stay verbatim however many requests a session had
    return cap, max(cap, min(room, int(plan.target * REQUESTS_ROOM)))


_DECISIONS: list[tuple[Any, Any]] = []


def _decisions(plan: Any) -> Any:
    """``plan.decisions()``, read once per plan (the landing and each of its trials read them;
    a plan is never changed, a new state makes a new plan)."""
    entry = _DECISIONS[0] if _DECISIONS else None
    if entry is not None and entry[0] is plan:
        return entry[1]
    columns = plan.decisions()
    _DECISIONS[:] = [(plan, columns)]
    return columns


async def _summarize(
    state: SessionState,
    config: RenderConfig,
    land: _Landing,
    k: int,
    plan: Any,
    protected: Sequence[ContextGrain],
    summarizer: object,
    settings: CompactionConfig,
    cache: dict[str, str],
    fill: int | None = None,
) -> CompactionResult:
    """One run of the compaction pipeline on the previous summary and the items of choice
    ``k`` of ``land`` (``fill``: a summary of that size, its prose ending with excerpts of the
    newest summarized messages).

    The newest request, when summarized, must survive whole; else so must the request of
    the agent loop the kept history starts in (:func:`_continued_request`), but only when the
    summary can hold it: if that run fails (the request too long for the summary's room), it
    runs again without asking for it, as before the kept history's start was looked at. A
    run that still fails only for its size (:func:`_too_big`: the newest summarized request,
    the session's newest or an earlier one such as a pasted file before a follow-up question,
    passes the room whole) runs once more inside :func:`shorten_latest`: else no summary was
    written and the render dropped that request without a trace."""
    indices = land.indices(k)
    messages, pinned = _stretch(state, land, indices, protected)
    cap, room = _cap(state, config, land.held(k, plan), plan)
    latest = _latest_request(state, indices)
    continued = None if latest else _continued_request(state, indices, land.live(state))

    async def run(request: str | None, settings: CompactionConfig) -> CompactionResult:
        return await compact_messages(
            messages,
            max_tokens=fill if fill is not None else cap,
            room=room if fill is None or room is None else max(room, fill),
            fill=fill is not None,
            summarizer=summarizer,
            tokenizer=config.tokenizer.count,
            protected=pinned,
            latest_request=request,
            config=settings,
            cache=cache,
        )

    result = await run(latest or continued, settings)
    if result.ok:
        return result
    again = replace(settings, memory_dir=None)  # its memory flush is not written twice
    if continued is not None:
        result = await run(None, again)
        if result.ok:
            return result
    if _too_big(result.error):  # the newest summarized request, whichever, no longer whole
        with shorten_latest():
            return await run(None, again)
    return result


def _stretch(
    state: SessionState, land: _Landing, indices: list[int], protected: Sequence[ContextGrain]
) -> tuple[list[Message], list[str]]:
    """What a summary of a choice of ``land`` reads: the earlier summary and the messages at
    ``indices`` (the choice's :meth:`_Landing.indices`, as :func:`_read` gives them), and the
    texts of the ``protected`` grains."""
    if land.inputs is None:  # the same for every trial; one message object, read once
        land.inputs = (_previous(state), _protected(state, protected))
    previous, pinned = land.inputs
    if state.redaction is None:  # _read of each, at C level (a list of a long history)
        return previous + list(map(state.messages.__getitem__, indices)), pinned
    return previous + [_read(state, i) for i in indices], pinned


def _too_big(error: str | None) -> bool:
    """Whether a compaction failed only because the newest request does not fit: the summary
    holding it (cut to its last resort, :data:`~ctxengine.compaction.pipeline.
    MAX_LATEST_CHARS`) passes the room the render leaves it, or fits only with the request cut
    shorter than that. An agent run's task, a pasted log at a small budget: the summary then
    lists it as every earlier request (its first line, the cap's excerpt of it) rather than
    failing (no summary: the render would drop the request unsummarized)."""
    if error is None:
        return False
    return all(e.startswith(("size: ", "latest request ")) for e in error.split("; "))


def _over_cap(error: str | None) -> bool:
    """Whether a compaction failed only for its size: its summary passes its cap."""
    return error is not None and all(e.startswith("size: ") for e in error.split("; "))


def _estimator(config: RenderConfig) -> ExtractiveSummarizer:
    """What measures a landing's trials: the render's summarizer when it is extractive, else
    the extractive summarizer (the same for every trial of a landing: its readings of the
    stretches are kept in the message scope by summarizer)."""
    summarizer = config.summarizer
    if isinstance(summarizer, ExtractiveSummarizer):
        return summarizer
    return ExtractiveSummarizer(tokenizer=config.tokenizer.count)


async def _choose(
    state: SessionState,
    config: RenderConfig,
    turns: Sequence[int],
    plan: Any,
    protected: Sequence[ContextGrain],
    cache: dict[str, str],
) -> tuple[int, _Landing, dict[int, CompactionResult]]:
    """How many further turns to summarize so that the render lands at its low-water mark,
    measured with the actual summary, not the summary's whole limit.

    The summary of a choice is measured with the extractive summarizer (deterministic and
    cheap; for an LLM summarizer it is the estimate, so the LLM is called once): starting from
    the first estimate, the cut moves to the fewest turns whose rest plus the last measured
    summary fits the mark, until it settles (:data:`MAX_TRIALS` summaries at most,
    :data:`LARGE_TRIALS` beyond :data:`LARGE_TURNS` turns). Turns
    that fit come back verbatim. When one big turn makes the landing overshoot far below the
    mark (under :data:`MIN_USE` of the target), the cut stops before it if the render then
    still fits its target.

    The collector is paused for the whole landing when its summarizer is the extractive one
    itself (:func:`~ctxengine.compaction.pipeline.steady_collector`: its calls never wait),
    not per step of each trial: every step ran a collection of what the steps before it made,
    and a full one among them (a cold 100,000-message render), all finding nothing to free."""
    estimator = _estimator(config)
    with steady_collector(estimator):
        return await _choose_with(state, config, turns, plan, protected, cache, estimator)


async def _choose_with(
    state: SessionState,
    config: RenderConfig,
    turns: Sequence[int],
    plan: Any,
    protected: Sequence[ContextGrain],
    cache: dict[str, str],
    estimator: ExtractiveSummarizer,
) -> tuple[int, _Landing, dict[int, CompactionResult]]:
    """:func:`_choose` with its ``estimator``."""
    with paused_collector():  # a list per turn of a long history
        land = _landing(state, config, turns, plan)
    smallest = 0 if land.forced else 1
    if plan is None or len(land.order) < smallest:
        return 0, land, {}
    low = _low(config, plan)
    if not land.forced and _tail_fits(state, plan, land, low):
        return 0, land, {}  # what the ladder cuts in the tail anyway leaves room: keep the rest
    settings = replace(config.compaction, memory_dir=None)
    tried: dict[int, CompactionResult] = {}

    async def landing(k: int) -> int | None:
        if k not in tried:
            tried[k] = await _summarize(
                state, config, land, k, plan, protected, estimator, settings, cache
            )
        result = tried[k]
        return land.rest(k) + result.summary_tokens + SUMMARY_FRAMING if result.ok else None

    guess = _first_estimate(state, config, land, plan, protected, low, smallest)
    k = land.first(low - guess, smallest)
    trials = MAX_TRIALS if len(land.order) <= LARGE_TURNS else LARGE_TRIALS
    for _ in range(trials):
        at = await landing(k)
        if at is None:
            # a summary over its cap beside what stays: with more turns summarized it has
            # more room (a turn the ladder gave back between the turns it sent, above all)
            more = k + 1
            while more in land.splits:
                more += 1
            if not _over_cap(tried[k].error) or more > len(land.order) or more in tried:
                break
            k = more
            continue
        nxt = land.first(low - (at - land.rest(k)), smallest)
        if nxt == k or nxt in tried or (nxt > k and land.rest(k) + tried[k].summary_tokens <= low):
            # settled; or this choice already lands at the mark (as the choice below reads a
            # landing) and the next would only summarize more turns
            break
        k = nxt
    fits = {n: r for n, r in tried.items() if r.ok}
    good = sorted(n for n, r in fits.items() if land.rest(n) + r.summary_tokens <= low)
    if good:
        k = good[0]
    elif fits:
        k = max(fits)
    fewer = land.before(k)
    if fewer >= smallest and k in fits:
        ahead = land.rest(k) + fits[k].summary_tokens + SUMMARY_FRAMING
        if ahead < min(low, plan.target * MIN_USE):
            back = await landing(fewer) if len(tried) < trials + 1 else None
            if back is not None and back <= plan.target - SUMMARY_SLACK:
                k = fewer
    if k in tried and tried[k].ok and len(tried) <= trials + 1:
        await _give_back(state, config, plan, protected, land, k, tried, estimator, cache)
    if k in tried and tried[k].ok:
        await _fill(state, config, plan, protected, land, k, tried, estimator, cache)
        await _take_room(state, config, plan, protected, land, k, tried, estimator)
    return k, land, tried


def _tail_fits(state: SessionState, plan: Any, land: _Landing, low: int) -> bool:
    """Whether a compaction at the high-water mark alone (the ladder sent no turn) would
    summarize for nothing: what the ladder cuts in the protected tail anyway (one huge
    message it trims whatever is summarized) leaves the rest under the low-water mark, or
    within the target when that is all the plan cut (the landing itself keeps turns verbatim
    up to the target: :func:`_give_back`). A compaction then only lowers the render's use,
    the tail being trimmed all the same (the render of a state a compaction left just over
    the mark for that reason would otherwise compact again, for one turn, and land low)."""
    at = land.rest(0) + _tokens(state, [SUMMARY_ID])
    if at <= low:
        return True
    only_tail = plan.total_before - plan.total_after <= land.tail_cut
    return land.tail_cut > 0 and only_tail and at <= plan.target


async def _take_room(
    state: SessionState,
    config: RenderConfig,
    plan: Any,
    protected: Sequence[ContextGrain],
    land: _Landing,
    k: int,
    tried: dict[int, CompactionResult],
    estimator: object,
) -> None:
    """When the filled landing is still under :data:`MIN_USE` of the target, keep verbatim
    the newest summarized turns that fit in what is left of the target (at a tiny budget
    :func:`_give_back` keeps :data:`MIN_ROOM` of it free, which can leave a small turn out
    of a render with room for it): one more summary, kept only when the render fits and
    grows, and never with no turn left to summarize."""
    at = land.rest(k) + tried[k].summary_tokens + SUMMARY_FRAMING
    if at >= plan.target * (MIN_USE + 0.005):
        return
    back: set[int] = set()
    land.back(state, k, back, at, plan.target, land.first_kept(state, k), past_tail=True)
    if not back:
        return
    land.kept |= back
    settings = replace(config.compaction, memory_dir=None)
    with fill_repeats(land.repeats):
        result = await _summarize(
            state, config, land, k, plan, protected, estimator, settings, {}, fill=land.fill
        )
    landed = land.rest(k) + result.summary_tokens + SUMMARY_FRAMING
    if not result.ok or not at < landed <= plan.target:
        land.kept -= back
        return
    tried[k] = result


async def _fill(
    state: SessionState,
    config: RenderConfig,
    plan: Any,
    protected: Sequence[ContextGrain],
    land: _Landing,
    k: int,
    tried: dict[int, CompactionResult],
    estimator: object,
    cache: dict[str, str],
) -> None:
    """When the landing is still under :data:`MIN_USE` of the target (the summarized turns are
    larger than the room they leave: one huge message, or the protected tail's own turns),
    the summary takes that room up to the low-water mark (at a tiny budget halfway from it to
    the target), its prose ending with verbatim excerpts of the newest summarized messages,
    rather than leave it empty."""
    at = land.rest(k) + tried[k].summary_tokens + SUMMARY_FRAMING
    if at >= min(_low(config, plan), plan.target * (MIN_USE + 0.01)):
        return
    # up to the mark; at a tiny budget halfway from it to the target (a summary the cap had to
    # cut lands a few tokens short, a large share there)
    low = _low(config, plan)
    top = (low + plan.target) // 2 if plan.target < 16 * MIN_ROOM else low
    size = top - land.rest(k) - SUMMARY_FRAMING
    if size <= tried[k].summary_tokens:
        return
    settings = replace(config.compaction, memory_dir=None)
    result = await _summarize(
        state, config, land, k, plan, protected, estimator, settings, cache, fill=size
    )
    if result.ok and land.rest(k) + result.summary_tokens + SUMMARY_FRAMING <= plan.target:
        tried[k] = result
        land.fill = size
    at = land.rest(k) + tried[k].summary_tokens + SUMMARY_FRAMING
    if at < plan.target * (MIN_USE + 0.005) and any(
        land.size[t] <= plan.target - at for t in land.turns(k)
    ):
        # each excerpt line written once left the room short (too few distinct lines in the
        # summarized messages) and a summarized turn would fit in it, which the landing could
        # not give back (the only one left): write every copy rather than leave it empty
        with fill_repeats(True):
            again = await _summarize(
                state, config, land, k, plan, protected, estimator, settings, {}, fill=size
            )
        landed = land.rest(k) + again.summary_tokens + SUMMARY_FRAMING
        if again.ok and at < landed <= plan.target:
            tried[k] = again
            land.fill = size
            land.repeats = True


async def _give_back(
    state: SessionState,
    config: RenderConfig,
    plan: Any,
    protected: Sequence[ContextGrain],
    land: _Landing,
    k: int,
    tried: dict[int, CompactionResult],
    estimator: object,
    cache: dict[str, str],
) -> None:
    """When the landing is still under the mark and under :data:`MIN_USE` of the target (a
    big turn, or the ladder's own picks), keep verbatim the newest summarized turns that fit
    in the room left: up to the low-water mark first (room for the next renders), then up to
    the target (at a tiny budget less :data:`MIN_ROOM`, room for the next turn). Each round
    is measured with one more summary (a smaller one when the turns kept held requests, which
    may leave room for more); a round is kept only when the render still fits its target."""
    tiny = plan.target < 16 * MIN_ROOM
    room = min(MIN_ROOM, plan.target // 4) if tiny else 0
    settings = replace(config.compaction, memory_dir=None)
    # under the mark and under MIN_USE (with a margin for the payload's exact count)
    floor = min(_low(config, plan), plan.target * (MIN_USE + 0.01))
    for _ in range(GIVE_BACK_ROUNDS):
        at = land.rest(k) + tried[k].summary_tokens + SUMMARY_FRAMING
        if at >= floor:
            return
        back: set[int] = set()
        first = land.first_kept(state, k)
        for limit in (_low(config, plan), plan.target - room):
            at, first = land.back(state, k, back, at, limit, first)
            if at >= floor:
                break
        if not back:
            return
        land.kept |= back
        result = await _summarize(
            state, config, land, k, plan, protected, estimator, settings, cache
        )
        if not result.ok or land.rest(k) + result.summary_tokens + SUMMARY_FRAMING > plan.target:
            land.kept -= back
            return
        tried[k] = result


async def _summary(
    state: SessionState,
    config: RenderConfig,
    turns: Sequence[int],
    plan: Any,
    protected: Sequence[ContextGrain],
) -> tuple[CompactionResult, list[Any], list[int]] | None:
    """The landing chosen (:func:`_choose`) and its summary, with the items and turns it
    replaces; None when it replaces nothing (what the trials held is freed on return)."""
    cache: dict[str, str] = {}
    k, land, tried = await _choose(state, config, turns, plan, protected, cache)
    doomed, chosen = land.items(k), land.turns(k)
    if not doomed:
        return None
    trial = tried.get(k)
    reuse = isinstance(config.summarizer, ExtractiveSummarizer)
    if trial is not None and trial.ok and reuse and config.compaction.memory_dir is None:
        return trial, doomed, chosen  # the measured summary is the summary
    # the estimates' chunk summaries are reused only by the summarizer that wrote them
    with fill_repeats(land.repeats):
        result = await _summarize(
            state,
            config,
            land,
            k,
            plan,
            protected,
            config.summarizer,
            config.compaction,
            cache if reuse else {},
            fill=land.fill,
        )
    return result, doomed, chosen


def _deferred(state: SessionState, plan: Any) -> str | None:
    """Why no compaction is tried in this render after failed ones, or None: after the n-th
    failure in a row the next attempt waits :data:`RETRY_RENDERS` × 2ⁿ⁻¹ renders (at most
    :data:`MAX_RETRY_RENDERS`), or until the history grew by :data:`RETRY_GROWTH` of the
    target, so a failing or stalling summarizer does not cost every render its timeout."""
    backoff = state.compaction_backoff
    if backoff is None:
        return None
    failures, at_render, at_tokens = backoff
    wait = min(RETRY_RENDERS * 2 ** (failures - 1), MAX_RETRY_RENDERS)
    waited = state.turn - at_render
    total = plan.total_before if plan is not None else at_tokens
    grow = int(plan.target * RETRY_GROWTH) if plan is not None else 0
    if waited >= wait or (plan is not None and total - at_tokens >= grow):
        return None
    return (
        f"compaction deferred after failure: {failures} failed in a row; next attempt "
        f"{wait - waited} renders on, or when the history grew by {grow} tokens"
    )


async def compact(
    state: SessionState,
    config: RenderConfig,
    registry: Registry,
    turns: list[int],
    log: TurnLog,
    protected: Sequence[ContextGrain] = (),
    plan: Any = None,
) -> bool:
    """Summarize the history turns the plan could not keep into the session summary.

    The protected tail (``CompactionConfig.keep_assistant_turns``) is summarized only where the
    ladder could not keep it (its turns the plan sent to compaction, or would once the older
    turns are summarized: :func:`_landing`); with ``plan`` the oldest further turns are added
    down to the low-water mark, measured with the actual summary (:func:`_choose`).
    ``protected`` grains' texts must survive in the summary (the pipeline's quality gate).
    On failure nothing is written (the state is as before); the
    turns stay dropped for this render only, as the plan decided, the report's compaction
    entry says why (and their decisions that they were not summarized: :func:`unsummarized`),
    and the next attempts back off (:func:`_deferred`).
    """
    why = _deferred(state, plan)
    if why is not None:
        log.compactions.append({"ok": False, "stage": "deferred", "turns": [], "error": why})
        return False
    # One reading of each message (text, key facts, counts) for every trial of the landing
    # and the summary itself: the trials summarize overlapping stretches of the same history.
    # With the extractive summarizer the collector stays paused until that reading and the
    # trials are freed (one collection of what stays, instead of one of all they held).
    with steady_collector(config.summarizer):
        with message_scope():
            chosen = await _summary(state, config, turns, plan, protected)
        if chosen is None:
            return False
        result, doomed, turns = chosen
    log.compactions.append(_entry(result, turns))
    if not result.ok or not result.summary:
        failures = state.compaction_backoff[0] + 1 if state.compaction_backoff else 1
        total = plan.total_before if plan is not None else 0
        state.compaction_backoff = (failures, state.turn, total)
        return False
    state.compaction_backoff = None
    _apply(state, config, registry, result, doomed, turns, log)
    return True


async def compact_now(
    state: SessionState, config: RenderConfig, registry: Registry
) -> CompactionResult:
    """``Session.compact()``: compact the live history now, down to the low-water mark.

    The live history (the earlier summary, then every history message not yet compacted) goes
    through :func:`ctxengine.compaction.compact_history` with the render budget; its protected
    tail is never compacted. On success the summarized items are forgotten and the summary
    replaced; otherwise the state is untouched.
    """
    refresh_redaction(state, registry)
    indices = sorted(
        {
            i.index
            for i in state.items.values()
            if i.kind != _core.KIND_CONTEXT
            and state.messages[i.index].role != "system"
            and not i.flags & _core.FLAG_PROTECTED
        }
    )
    previous = _previous(state)
    messages = previous + [_read(state, i) for i in indices]
    protected = _protected(state, [s.grain for s in state.stored.values()])
    protected += _protected(state, state.queued)
    result = await compact_history(
        messages,
        budget=config.tokens_total,
        summarizer=config.summarizer,
        tokenizer=config.tokenizer.count,
        protected=protected,
        config=config.compaction,
    )
    if not result.ok or not result.summary:
        return result
    replaced = set(indices[: max(0, len(result.replaced) - len(previous))])
    doomed = [
        i for i in state.items.values() if i.index in replaced and i.kind != _core.KIND_CONTEXT
    ]
    turns = sorted({i.turn for i in doomed})
    _apply(state, config, registry, result, doomed, turns, None)
    return result


def _summarized(
    ids: list[str],
    window_of: Callable[[str], str],
    reason: str,
    item_turns: list[int],
    tokens: list[int],
) -> list[GrainDecision]:
    """The report's decisions on the items a compaction summarized (made when it is read)."""
    # a window depends on the node id's prefix alone (asked for the first id of each)
    prefixes = list(map(_FIRST, map(_PARTITION, ids)))
    first = dict(zip(reversed(prefixes), reversed(ids), strict=True))
    windows = {prefix: window_of(node_id) for prefix, node_id in first.items()}
    reasons = {t: f"{reason} (turn {t})" for t in set(item_turns)}
    return decisions(
        ids,
        "transcript",
        map(windows.__getitem__, prefixes),
        "dropped",
        "compaction",
        map(reasons.__getitem__, item_turns),
        tokens,
    )


def _forget(state: SessionState, ids: list[str]) -> None:
    state.asm.remove(ids)
    items = state.items
    forget_pruned(state, (items[n] for n in ids))
    at = state.compacted_at
    at.update(zip(ids, map(_INDEX, map(items.pop, ids)), strict=True))  # each popped, in order
    gone = set(ids)
    # e.g. a compressed copy of a compacted result (these tables are small: looked through)
    for table in (state.overrides, state.stored, state.guarded):
        for node_id in [n for n in table if n in gone]:
            del table[node_id]
    state.compacted.update(ids)
