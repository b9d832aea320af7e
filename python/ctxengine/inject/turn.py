"""The inject phase of a render: compose, render for the provider, count, report."""

from __future__ import annotations

import dataclasses
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, islice
from operator import attrgetter, eq, is_
from typing import TYPE_CHECKING, Any, Final

from ..assemble.pipeline import FRAMING_TOKENS, Assembled, plan_budget, plan_within
from ..assemble.report import LazyColumns, Origins, RenderReport
from ..collect.events import AfterRender
from ..collect.scene import copy_data
from ..compaction.facts import paused_collector
from ..errors import BudgetError
from ..grain import ContextGrain
from ..transcript.changes import Change, Report
from ..transcript.model import Message, Text, ToolCall, Transcript, compaction_of
from ..transcript.providers import STRICT_ALTERNATION, strip_trailing_space
from .compose import compose, history_grains
from .hygiene import leads_turn, merge_turns, merged_change
from .pairing import dropped_calls, without_calls
from .render import Rendered, carry_compactions, dropped_compaction, render
from .warm import trusted_transcript

if TYPE_CHECKING:
    from ..collect.dispatch import SessionDispatcher
    from ..config import RenderConfig
    from ..state import SessionState, TurnLog
    from .memo import RenderMemo

__all__ = ("MAX_REPLANS", "RenderedContext", "inject")

#: Re-plans when the rendered payload counts more than the budget (what the plan could not see,
#: e.g. synthetic results hygiene added for unanswered tool calls).
MAX_REPLANS: Final = 3


@dataclass(slots=True)
class RenderedContext:
    """The result of :meth:`Session.render`.

    Attributes:
        payload: The provider request body (``messages``/``input``/``contents``...).
        tokens: Tokens of the payload (exact for OpenAI models, estimated otherwise).
        tree: The grains of this render after fusion and plugin edits, in render order.
        report: The manifest: every grain's decision, stage, reason and tokens.
        transcript: The neutral transcript the payload was rendered from.
    """

    payload: dict[str, Any]
    tokens: int
    tree: list[ContextGrain]
    report: RenderReport
    transcript: Transcript


@dataclass(frozen=True, slots=True)
class Request:
    """What the caller asked of this render, and what the engine adds to its first report."""

    provider: str
    options: dict[str, Any]
    started: float
    timings: dict[str, float]
    setup_faults: list[dict[str, Any]]


def _report(
    state: SessionState,
    config: RenderConfig,
    a: Assembled,
    tokens: int,
    rq: Request,
    log: TurnLog,
    unsent: dict[str, str],
) -> RenderReport:
    origins = {n: g.origin for n, g in a.by_id.items()}
    origins.update({n: g.origin for n, g in state.overrides.items()})
    windows = [
        {"window": name, "demand": demand, "alloc": alloc, "used": used}
        for name, demand, alloc, used in a.plan.windows
    ]
    return RenderReport(
        provider=rq.provider,
        model=config.model,
        budget=config.tokens_total,
        target=a.plan.target,
        high_water=a.plan.high,
        tokens=tokens,
        tokens_estimated=a.plan.total_after + FRAMING_TOKENS,
        fits=tokens <= config.tokens_total,
        windows=windows,
        timings=rq.timings,
        faults=(rq.setup_faults if state.turn == 0 else []) + [f.to_dict() for f in log.faults],
        shadowed=log.shadowed,
        compactions=log.compactions,
        _columns=LazyColumns(a.plan),
        _origins=Origins(origins),
        _window_names=config.windows,
        _extra=log.extra,
        _guarded=state.guarded,
        _before_guard=_before_guard(state, config) if state.guarded else None,
        _unsent=unsent,
        _edited=log.edited,
    )


def _before_guard(state: SessionState, config: RenderConfig) -> Callable[[str, int], int]:
    """The tokens a tool result the window guard cut held before the cut: the plan's count of
    it (``tokens``) with its text's count replaced by its whole source's (the items of this
    render, read when the report is)."""
    items = {n: state.items[n] for n in state.guarded if n in state.items}
    count = config.tokenizer.count

    def before(node_id: str, tokens: int) -> int:
        item = items.get(node_id)
        if item is None or item.text == item.source_text:
            return tokens
        return tokens - count(item.text) + count(item.source_text)

    return before


#: The pairing repairs that leave a whole history message out of the payload.
_UNSENT: Final = frozenset({"dropped_orphan", "dropped_duplicate", "dropped_message"})


def _unsent(
    memo: RenderMemo, composed: int, changes: tuple[Change, ...], dropped: list[dict[str, Any]]
) -> dict[str, str]:
    """History node -> why, for each message the plan kept but hygiene left out of the
    payload. The plan counts those nodes and the payload does not, so the report must say
    they were dropped and take no tokens.

    ``composed``: the length of what :func:`compose` made (the system message and the summary,
    then one message per history node: a tool message holds one result); ``dropped``:
    :func:`_non_empty`'s changes, indices in that; ``changes``: the render's hygiene, indices
    in what was left after ``dropped``. Positions are mapped back by arithmetic, not by
    looking through the history: a warm render may drop an empty message every time."""
    made = memo.composed
    if made is None or not (dropped or changes):
        return {}
    order = made.order
    head = composed - len(order)
    out: dict[str, str] = {}

    def note(index: int, rule: str, detail: str) -> None:
        k = index - head
        if 0 <= k < len(order):
            out.setdefault(order[k], f"left out of the payload by hygiene ({rule}): {detail}")

    gone = [d["index"] for d in dropped]  # ascending
    for d in dropped:
        note(d["index"], d["rule"], d["detail"])
    for c in changes:
        if c.action in _UNSENT and c.index is not None:  # pairing's: whole messages left out
            index = c.index
            for g in gone:  # its position before _non_empty removed messages
                if g > index:
                    break
                index += 1
            note(index, c.rule, c.detail)
    return out


#: What a blank user message becomes for providers that reject blank text (Anthropic, Gemini):
#: without it their payload would have no message at all, which both reject.
BLANK_USER_TEXT: Final = "(empty message)"
_REJECT_BLANK: Final = frozenset({"anthropic", "gemini"})


def _blank(m: Message) -> bool:
    return m.role == "user" and all(isinstance(b, Text) and not b.text.strip() for b in m.blocks)


def _non_blank(t: Transcript, provider: str, memo: RenderMemo) -> Transcript:
    """``t`` with its blank user messages (whitespace text only) given a visible text, for the
    providers that reject blank text; ``t`` itself otherwise. The message standing for a blank
    one is the same object on every render that keeps it (so warm renders reuse its work)."""
    if provider not in _REJECT_BLANK:
        return t
    messages = t.messages
    blank = memo.aligned("blank").many(messages, _blank, lambda: list(map(_blank, messages)))
    if not any(blank):
        return t
    out = list(messages)
    subs = memo.table("blank")
    i = blank.index(True)
    while True:
        out[i] = subs.get(messages[i], _blank_stand_in)
        try:
            i = blank.index(True, i + 1)
        except ValueError:
            break
    return trusted_transcript(tuple(out), t.source_format)


def _stripped_failed(m: Message) -> bool:
    """Whether hygiene strips ``m``'s tool calls and keeps the rest of it: an assistant turn
    that ended in error or was aborted, holding calls and something else."""
    return (
        m.role == "assistant"
        and m.failed
        and bool(m.tool_calls)
        and any(not isinstance(b, ToolCall) for b in m.blocks)
    )


def _failed_calls_stripped(t: Transcript, memo: RenderMemo) -> tuple[Transcript, list[Change]]:
    """``t`` with the tool calls of its failed assistant turns removed, as hygiene's pairing
    removes them (they can never be answered), and the changes it would report for that
    (indices in ``t``). Hygiene would remove them itself, on every render: a render whose
    hygiene changed something cannot be reused by the next one, so one failed turn with a
    call in the kept history made every warm render a full one. The message standing for a
    failed one is the same object on every render that keeps it. Left to hygiene: a failed
    turn holding only calls (dropped whole) and a failed last message (a prefill whose
    trailing whitespace is stripped after its calls)."""
    messages = t.messages
    failed, n_failed = memo.aligned("failed").counted(
        messages, _stripped_failed, lambda: list(map(_stripped_failed, messages))
    )
    if not n_failed:
        return t, []
    last = len(messages) - 1
    try:
        i = failed.index(True, 0, last)
    except ValueError:
        return t, []
    out = list(messages)
    subs = memo.table("failed")
    changes: list[Change] = []
    while i < last:
        m = messages[i]
        out[i] = subs.get(m, without_calls)
        changes += dropped_calls(i, m)
        try:
            i = failed.index(True, i + 1)
        except ValueError:
            break
    return trusted_transcript(tuple(out), t.source_format), changes


def _with_stripped(rendered: Rendered, stripped: list[Change]) -> Rendered:
    """``rendered`` with the changes of :func:`_failed_calls_stripped` in its hygiene report,
    where hygiene's own pairing would have reported them (after its id renames)."""
    changes = rendered.report.changes
    at = next((k for k, c in enumerate(changes) if c.rule != "sanitize_tool_ids"), len(changes))
    report = Report((*changes[:at], *stripped, *changes[at:]), rendered.report.id_map)
    return dataclasses.replace(rendered, report=report)


def _blank_stand_in(m: Message) -> Message:
    return Message.user(BLANK_USER_TEXT)


def _non_empty(
    t: Transcript, provider: str, memo: RenderMemo
) -> tuple[Transcript, list[dict[str, Any]]]:
    """``t`` without the assistant messages that carry nothing ``provider``'s exporter sends
    (an aborted turn's empty message), and the hygiene changes saying so. Hygiene would drop
    them itself, on every render: a render whose hygiene changed something cannot be reused by
    the next one, so one empty message in the kept history made every warm render a full one."""
    sent, n_sent = memo.nonempty_counted(t, provider)
    if n_sent == len(sent):
        return t, []
    messages = t.messages
    drop: list[int] = []
    i = sent.index(False)
    strict = provider in STRICT_ALTERNATION
    while True:
        if messages[i].role == "assistant" and not (
            strict and leads_turn(messages, sent, i, provider, t)
        ):
            drop.append(i)
        try:
            i = sent.index(False, i + 1)
        except ValueError:
            break
    if not drop:
        return t, []
    keep = [True] * len(messages)
    for i in drop:
        keep[i] = False
    kept = tuple(compress(messages, keep))
    changes = [_dropped(messages[i], i, provider) for i in drop]
    return trusted_transcript(kept, t.source_format), changes


def _dropped(m: Message, i: int, provider: str) -> dict[str, Any]:
    """The change saying message ``i`` (``m``) sends nothing to ``provider``: an empty
    assistant message, or a provider compaction only its own provider reads."""
    c = compaction_of(m)
    if c is None:
        return {
            "rule": "fix_turn_order",
            "action": "dropped_empty",
            "index": i,
            "detail": "empty assistant message",
            "call_id": None,
        }
    return {
        "rule": "carry_compactions",
        "action": "dropped_compaction",
        "index": i,
        "detail": dropped_compaction(c, provider),
        "call_id": None,
    }


_ROLE: Final = attrgetter("role")
_TURN_ROLES: Final = frozenset({"user", "assistant"})


def _mergeable(m: Message, last: bool) -> bool:
    """Whether ``m`` may be merged before hygiene in a run of same-role turns (at its end when
    ``last``): no tool result, and tool calls only in the run's last message, so that the
    merge moves no call away from its results (hygiene's pairing decides the same)."""
    return not m.tool_results and (last or not m.tool_calls)


def _merged(t: Transcript, provider: str, memo: RenderMemo) -> tuple[Transcript, list[Change]]:
    """For Anthropic and Gemini: ``t`` with its runs of consecutive user or assistant messages
    merged as hygiene's turn order merges them, and the changes hygiene would report for that
    (indices in ``t``); ``t`` itself otherwise. Hygiene would merge them itself, on every
    render: a render whose hygiene changed something cannot be reused by the next one. A
    merged message is the same object on every render that keeps its run, so warm renders
    reuse its work; :func:`inject` renders ``t`` itself when hygiene finds anything else to
    change (its report would then hold indices of ``t``)."""
    if provider not in STRICT_ALTERNATION:
        return t, []
    messages = t.messages
    roles = memo.aligned("role").many(messages, _ROLE, lambda: list(map(_ROLE, messages)))
    same = list(map(eq, roles, islice(roles, 1, None)))
    if True not in same:
        return t, []
    runs: list[tuple[int, int]] = []  # [start, end) of each run to merge
    i = same.index(True)
    while True:
        start = i
        while i < len(same) and same[i]:
            i += 1
        end = i + 1
        run = messages[start:end]
        if roles[start] in _TURN_ROLES and all(
            _mergeable(m, k == len(run) - 1) for k, m in enumerate(run)
        ):
            runs.append((start, end))
        try:
            i = same.index(True, i)
        except ValueError:
            break
    if not runs:
        return t, []
    table = memo.table("merged", provider, t.source_format)
    out: list[Message] = []
    changes: list[Change] = []
    done = 0
    for start, end in runs:
        out.extend(messages[done:start])
        run = messages[start:end]
        made: list[tuple[tuple[Message, ...], Message]] = table.get(run[0], _no_runs)
        merged = next((m for r, m in made if len(r) == len(run) and all(map(is_, r, run))), None)
        if merged is None:
            merged = run[0]
            for m in run[1:]:
                merged = merge_turns(merged, m, provider, t)
            made.append((run, merged))
            del made[:-4]  # the runs of the last renders, not every run this message headed
        out.append(merged)
        changes.extend(merged_change(k, roles[start]) for k in range(start + 1, end))
        done = end
    out.extend(messages[done:])
    return trusted_transcript(tuple(out), t.source_format), changes


def _no_runs(m: Message) -> list[tuple[tuple[Message, ...], Message]]:
    return []


#: The changes a render of the merged turns may make and still stand for the render of the
#: turns as composed: the bootstrap turn, and images sent as placeholders (the same images
#: either way: merging moves none).
_KEPT_AFTER_MERGE: Final = frozenset({"bootstrap_user", "image_omitted"})


def _render_merged(
    composed: Transcript, provider: str, memo: RenderMemo, options: dict[str, Any]
) -> Rendered:
    """:func:`render` of ``composed``, its same-role runs merged first (see :func:`_merged`)
    when hygiene then has nothing else to change but the bootstrap turn (images sent as
    placeholders aside)."""
    merged, changes = _merged(composed, provider, memo)
    if merged is not composed:
        rendered = render(merged, provider, memo=memo, **options)
        report = rendered.report
        if all(c.action in _KEPT_AFTER_MERGE for c in report.changes) and not report.id_map:
            kept = _as_composed(report.changes, changes, memo)
            if kept is not None:
                return dataclasses.replace(rendered, report=Report((*changes, *kept)))
    return render(composed, provider, memo=memo, **options)


def _as_composed(
    made: tuple[Change, ...], merges: list[Change], memo: RenderMemo
) -> tuple[Change, ...] | None:
    """``made``, the changes of a render of the merged turns (indices in those), at the
    indices of the turns as composed, where ``merges`` (:func:`_merged`'s changes: indices of
    the messages merged into the one before, ascending, in the turns as composed) lie between
    them. None when an image was cut in a merged message: its images came from several
    messages, and the render of the turns as composed reports each at its own.

    The answer for the same changes (the same objects: a render cutting the images the one
    before cut reuses its changes) and merges is the one before, found in one C-level pass."""
    if not any(c.action == "image_omitted" for c in made):
        return made  # the bootstrap turn: before every merged run, at the same index
    absorbed = [c.index for c in merges if c.index is not None]
    last = memo.as_composed
    if (
        last is not None
        and last[1] == absorbed
        and len(last[0]) == len(made)
        and all(map(is_, last[0], made))
    ):
        return last[2]
    answer = _at_composed(made, absorbed)
    memo.as_composed = (made, absorbed, answer)
    return answer


def _at_composed(made: tuple[Change, ...], absorbed: list[int]) -> tuple[Change, ...] | None:
    """:func:`_as_composed`, made (``absorbed``: the indices of the messages merged away)."""
    out: list[Change] = []
    for c in made:
        if c.action != "image_omitted" or c.index is None:
            out.append(c)
            continue
        i = c.index  # the merged message's index, then its first message's as composed
        while (moved := c.index + bisect_right(absorbed, i)) != i:
            i = moved
        after = bisect_right(absorbed, i)
        if after < len(absorbed) and absorbed[after] == i + 1:  # the head of a merged run
            return None
        out.append(c if i == c.index else dataclasses.replace(c, index=i))
    return tuple(out)


def _with_changes(hygiene: dict[str, Any], changes: list[dict[str, Any]]) -> dict[str, Any]:
    """The render's hygiene report with ``changes`` made before it (by :func:`_non_empty`)."""
    if not changes:
        return hygiene
    out = dict(hygiene)
    counts = dict(out.get("counts", {}))
    for c in changes:
        counts[c["action"]] = counts.get(c["action"], 0) + 1
    out.update(changed=True, counts=counts, changes=changes + list(out.get("changes", [])))
    out.setdefault("id_map", [])
    return out


def _no_trailing_space(t: Transcript, provider: str) -> Transcript:
    """For Anthropic, ``t`` without trailing whitespace at the end of a final assistant message
    (a prefill, which Anthropic rejects when it ends in whitespace); ``t`` itself otherwise.
    An assistant message left with no content at all is not sent."""
    if provider != "anthropic" or not t.messages or t.messages[-1].role != "assistant":
        return t
    last = t.messages[-1]
    blocks = strip_trailing_space(last.blocks)
    if blocks is None:
        return t
    rest = t.messages[:-1]
    messages = (*rest, dataclasses.replace(last, blocks=blocks)) if blocks else rest
    return Transcript(messages, source_format=t.source_format)


def _tree(state: SessionState, a: Assembled) -> list[ContextGrain]:
    by_id = a.by_id
    history = history_grains(state, a.plan)  # a new list: the tree when there is no context
    if not by_id:  # no context grain (the plan's context order is not made)
        return history
    context = [by_id[n] for n in a.plan.context_order if n in by_id]
    if not context:
        return history
    context += history
    return context


def _replan_cut(state: SessionState, config: RenderConfig, plan: Any, cut: int, tokens: int) -> int:
    """The cut of the next re-plan, after a payload of ``tokens`` passed the budget.

    The payload carries what the plan did not count (in proportion to what it keeps, as
    synthetic results are), so the plan must keep at most its estimate scaled by the
    overshoot. Scaling the plan's budget is not enough when the plan keeps far less than it:
    the plan cuts only what passes its target (``pretrim_ratio`` of its budget, or less after
    the reserve), so the next plan is given the budget whose target is that scaled estimate.
    The cut never takes the plan's budget below the protected content, which no plan can cut.
    """
    budget = config.tokens_total
    planned = budget - FRAMING_TOKENS - cut
    scaled = planned * budget // tokens - 1
    keep = (plan.total_after + FRAMING_TOKENS) * budget // tokens - 1 - FRAMING_TOKENS
    ratio = min(config.budget.pretrim_ratio, plan.target / max(plan.budget, 1))
    by_target = int(max(keep, 0) / ratio) if ratio > 0 else scaled
    most = plan_budget(state, config) - state.asm.protected_tokens()
    return min(budget - FRAMING_TOKENS - min(scaled, by_target), max(most, 0))


#: The names of the core's timings in a render's report, made once.
_CORE_TIMINGS: Final = {
    k: f"core.{k}" for k in ("allocate", "soft", "hard", "fold", "compaction", "order")
}


async def inject(
    state: SessionState,
    config: RenderConfig,
    plugins: SessionDispatcher,
    assembled: Assembled,
    request: Request,
    log: TurnLog,
) -> RenderedContext:
    """The inject phase: the plan becomes the provider payload, counted and reported."""
    request.timings.update(
        {_CORE_TIMINGS.get(k) or f"core.{k}": v for k, v in assembled.plan.timings.items()}
    )
    memo = state.token_cache.memo
    cut, budget = 0, config.tokens_total
    options = request.options
    if config.max_images is not None and "max_images" not in options:
        options = {**options, "max_images": config.max_images}
    with paused_collector():
        for attempt in range(MAX_REPLANS + 1):
            composed = compose(state, assembled.plan, assembled.by_id)
            made = len(composed.messages)
            carried: tuple[Change, ...] = ()
            # a look through every message: only in a session that holds a compaction
            if state.builder.newest_compaction is not None:
                composed, carried = carry_compactions(composed, request.provider, drop=False)
            composed = _non_blank(composed, request.provider, memo)
            composed = _no_trailing_space(composed, request.provider)
            composed, dropped = _non_empty(composed, request.provider, memo)
            composed, stripped = _failed_calls_stripped(composed, memo)
            rendered = _render_merged(composed, request.provider, memo, options)
            if stripped:
                rendered = _with_stripped(rendered, stripped)
            if carried:
                hyg = Report((*carried, *rendered.report.changes), rendered.report.id_map)
                rendered = dataclasses.replace(rendered, report=hyg)
            payload, transcript = rendered.payload, rendered.transcript
            tokens = state.token_cache.tokens(transcript, payload, request.provider, config.model)
            if tokens <= budget:
                break
            if attempt == MAX_REPLANS:
                memo.end_render()
                raise BudgetError(
                    f"the rendered payload has {tokens} tokens, over the budget of {budget}, after "
                    f"{MAX_REPLANS} re-plans cutting {cut} tokens; raise the budget"
                )
            cut = _replan_cut(state, config, assembled.plan, cut, tokens)
            assembled = Assembled(plan_within(state, config, cut), assembled.by_id)
    memo.end_render()
    request.timings["total"] = time.perf_counter() - request.started
    unsent = _unsent(memo, made, rendered.report.changes, dropped)
    if state.redaction is not None:  # a payload redactor that raised this render
        log.faults.extend(state.redaction.take_faults())
    report = _report(state, config, assembled, tokens, request, log, unsent)
    # the parts of ``rendered.to_dict()`` the report takes, without the rest of it
    report.hygiene = _with_changes(rendered.report.to_dict(), dropped)
    report.cache_breakpoints = [b.to_dict() for b in rendered.breakpoints]
    out = RenderedContext(payload, tokens, _tree(state, assembled), report, transcript)
    if plugins.registry.has_hook("on_after_render"):
        event = AfterRender(copy_data(payload), tokens, report.copy())
        outcome = await plugins.fire(event)
        report.faults.extend(f.to_dict() for f in outcome.faults)
    state.turn += 1
    return out
