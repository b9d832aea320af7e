"""Transcript hygiene (DESIGN.md §5): make a transcript acceptable to a provider, in memory.

Each function takes a :class:`~ctxengine.transcript.Transcript` and returns
``(transcript, report)``; when nothing needs changing it returns **the same object** and an empty
:class:`Report`, so ``clean(t, p)[0] is t`` for a transcript that is already valid. Running any
function again on its own output changes nothing more.

Rules:

- :func:`sanitize_tool_ids`: ``strict`` ids are alphanumeric, at most 40 characters and distinct
  (``call|item:123`` -> ``callitem123``; a collision or an over-long id gets an 8-character hash
  suffix); ``strict9`` ids are exactly 9 alphanumeric characters. Results follow their call:
  when one turn repeats an id, its n-th result with that id goes to its n-th call with it.
- :func:`repair_pairing`: results are moved right after the assistant turn that made the call
  (before any interleaved user message); a call with no result gets a synthetic error result
  there; duplicate results keep the first; orphan results are dropped. A turn that ended in
  error or was aborted gets no synthetic result: its calls are removed (they can never be
  answered) and any late result for them is dropped as an orphan.
- :func:`fix_turn_order`: messages with nothing the provider accepts are dropped; for Anthropic
  and Gemini a system message after the start becomes a user message, consecutive same-role
  turns are merged, and a history that does not start with a user turn (or is empty) gets a
  bootstrap user turn. OpenAI needs no alternation, but rejects a request with nothing to
  answer: an empty history gets the bootstrap for Responses (``input`` must not be empty, even
  with ``instructions``), and for Chat when there is no message at all. For Anthropic a final
  assistant message (a prefill) loses the whitespace at its end, which Anthropic rejects
  ("final assistant content cannot end with trailing whitespace"), as the engine's renders do.
- :func:`validate` lists every rule above that the transcript breaks for a provider.
- :func:`clean` runs them in order: ids (when the provider's id rule is broken), pairing, order.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ..errors import AdapterError
from ..transcript.changes import Change, Problem, Report
from ..transcript.model import Message, Text, Thinking, Transcript
from ..transcript.providers import (
    STRICT_ALTERNATION,
    check_provider,
    exportable,
    family_of,
    id_ok,
    id_rule,
    sends_any,
    strip_trailing_space,
)
from .ids import IdRewriter, fits
from .pairing import SYNTHETIC_RESULT_TEXT, Pairing, check_pairing
from .warm import BOOTSTRAP_TEXT

if TYPE_CHECKING:
    from .memo import RenderMemo

__all__ = (
    "BOOTSTRAP_TEXT",
    "SYNTHETIC_RESULT_TEXT",
    "Change",
    "IdMode",
    "Problem",
    "Report",
    "clean",
    "fix_turn_order",
    "repair_pairing",
    "sanitize_tool_ids",
    "validate",
)

IdMode = Literal["strict", "strict9"]


def sanitize_tool_ids(
    t: Transcript, mode: IdMode = "strict", *, keep_valid_for: str | None = None
) -> tuple[Transcript, Report]:
    """Rewrite tool-call ids to the ``strict`` or ``strict9`` rule; results follow their call.

    Ids that already fit (and are not repeated) are kept; with ``keep_valid_for`` a provider
    name, ids that provider accepts are kept too, so only offending ids are rewritten. A result
    is remapped to the id of the latest earlier call with its old id; when that call's turn
    repeats the id, the n-th result goes to the n-th such call (parallel calls are answered in
    order). Results that answer no call keep their id.

    Raises:
        AdapterError: ``mode`` is not ``"strict"`` or ``"strict9"``, or unknown provider.
    """
    if mode not in ("strict", "strict9"):
        raise AdapterError(f"id mode is {mode!r}; expected 'strict' or 'strict9'")
    provider = check_provider(keep_valid_for) if keep_valid_for is not None else None

    def keep(cid: str) -> bool:
        return fits(cid, mode) or (provider is not None and id_ok(cid, provider))

    rewriter = IdRewriter(t, mode, keep)
    if not rewriter.needed:
        return t, Report()
    out = rewriter.run()
    return t.replace(out), Report(tuple(rewriter.changes), tuple(rewriter.id_map))


def repair_pairing(t: Transcript) -> tuple[Transcript, Report]:
    """Pair every tool call with exactly one result placed right after its turn.

    See the module docstring for the rules. Indexes in the report refer to ``t``.
    """
    pairing = Pairing(t.messages)
    out = pairing.run()
    if not pairing.changes:
        return t, Report()
    return t.replace(out), Report(tuple(pairing.changes))


# -- turn order ------------------------------------------------------------------------------


def merge_turns(a: Message, b: Message, provider: str, t: Transcript) -> Message:
    """One message with the blocks of both; thinking the provider would not take is left out,
    so the merged message can claim the provider as its signature family."""
    blocks = [x for m in (a, b) for x in m.blocks if exportable(x, provider, family_of(m, t))]
    meta = {**a.meta, "provider_family": provider, "merged": int(a.meta.get("merged", 1)) + 1}
    return dataclasses.replace(a, blocks=tuple(blocks), stop_reason=b.stop_reason, meta=meta)


def _nonempty(t: Transcript, provider: str, memo: RenderMemo | None) -> list[bool]:
    """Whether ``provider`` receives anything of each message of ``t`` (``memo`` reused)."""
    if memo is None:
        return [sends_any(m, provider, t) for m in t.messages]
    return memo.nonempty(t, provider)


def _order(
    t: Transcript, provider: str, changes: list[Change], memo: RenderMemo | None = None
) -> list[Message]:
    """Drop empty messages; for strict providers also demote late system messages and merge."""
    strict = provider in STRICT_ALTERNATION
    nonempty = _nonempty(t, provider, memo)
    messages = t.messages
    if not strict and all(nonempty):  # the loop below would take every message as it is
        return list(messages)
    out: list[Message] = []
    started = False
    carried: Message | None = None  # thinking alone, merged into the assistant turn after it
    for i, m in enumerate(messages):
        if not nonempty[i]:
            if strict and leads_turn(messages, nonempty, i, provider, t):
                # a turn logged as [thinking], then [tool_use]: its thinking goes first in it.
                # Reported as a run of assistant turns is: each message taken into the turn
                # before it, at its own index (the first of the run is taken into none).
                if carried is not None or (out and out[-1].role == "assistant"):
                    changes.append(merged_change(i, "assistant"))
                carried = m if carried is None else merge_turns(carried, m, provider, t)
                continue
            changes.append(Change("fix_turn_order", "dropped_empty", i, f"empty {m.role} message"))
            continue
        merged = carried is not None
        if carried is not None:
            m = merge_turns(carried, m, provider, t)
            carried = None
            changes.append(merged_change(i, m.role))
        if strict and m.role == "system" and started:
            changes.append(Change("fix_turn_order", "system_to_user", i, "late system message"))
            m = dataclasses.replace(m, role="user", meta={**m.meta, "was_system": True})
        started = started or m.role != "system"
        if strict and out and out[-1].role == m.role and m.role in ("user", "assistant"):
            if not merged:  # else reported above: one change per message merged
                changes.append(merged_change(i, m.role))
            out[-1] = merge_turns(out[-1], m, provider, t)
            continue
        out.append(m)
    return out


def merged_change(i: int, role: str) -> Change:
    """The report of message ``i`` merged into the ``role`` turn before it: one per message a
    merge takes into another (the first of a run is not reported), at its own index."""
    return Change("fix_turn_order", "merged_turns", i, f"merged into the {role} turn before it")


def leads_turn(
    messages: Sequence[Message], nonempty: list[bool], i: int, provider: str, t: Transcript
) -> bool:
    """Whether message ``i``, empty for ``provider`` (thinking alone: Anthropic takes no
    assistant message that ends with thinking), leads the assistant turn after it: its
    thinking is kept, first in that turn, rather than dropped (an assistant message with a
    tool call must start with its thinking when thinking is on). A run of such messages leads
    the first sent assistant message after it."""
    j = i
    while j < len(messages) and messages[j].role == "assistant" and not nonempty[j]:
        m = messages[j]
        family = family_of(m, t)
        if not any(isinstance(b, Thinking) and exportable(b, provider, family) for b in m.blocks):
            return False
        j += 1
    return j > i and j < len(messages) and messages[j].role == "assistant"


def _first(messages: Sequence[Message]) -> int | None:
    """Index of the first message that is not a system message, or None."""
    return next((k for k, m in enumerate(messages) if m.role != "system"), None)


def _needs_bootstrap(provider: str, messages: Sequence[Message], first: int | None) -> bool:
    """Whether the history needs the bootstrap user turn (``first``: its first message).

    Anthropic and Gemini reject a request without a user turn first: a history that starts
    with another role, or holds nothing at all (only a system prompt yet), gets it. OpenAI
    Responses rejects an empty ``input`` even with ``instructions``, OpenAI Chat an empty
    ``messages``."""
    if provider in STRICT_ALTERNATION:
        return first is None or messages[first].role != "user"
    if provider == "openai-responses":
        return first is None
    return not messages


def fix_turn_order(
    t: Transcript, provider: str, *, memo: RenderMemo | None = None
) -> tuple[Transcript, Report]:
    """Drop messages the provider would receive empty; for Anthropic and Gemini also turn late
    system messages into user messages, merge consecutive same-role turns and add a bootstrap
    user turn when the history does not start with one (or holds no message at all). OpenAI
    Responses gets the bootstrap when the history is empty, OpenAI Chat when there is no
    message at all (both reject such a request). For Anthropic, a final assistant message
    (a prefill) loses the whitespace at its end (see :func:`strip_trailing_space`).

    Raises:
        AdapterError: unknown provider.
    """
    check_provider(provider)
    changes: list[Change] = []
    messages = _order(t, provider, changes, memo)
    first = _first(messages)
    if _needs_bootstrap(provider, messages, first):
        bootstrap = Message("user", (Text(BOOTSTRAP_TEXT),), meta={"bootstrap": True})
        at = len(messages) if first is None else first
        detail = (
            "history was empty" if first is None else f"history started with {messages[first].role}"
        )
        messages.insert(at, bootstrap)
        changes.append(Change("fix_turn_order", "bootstrap_user", at, detail))
    if provider == "anthropic" and messages and messages[-1].role == "assistant":
        last = messages[-1]
        blocks = strip_trailing_space(last.blocks)
        if blocks is not None:  # never empty: a message with nothing to send was dropped above
            messages[-1] = dataclasses.replace(last, blocks=blocks)
            detail = "final assistant message ended in whitespace, which Anthropic rejects"
            changes.append(
                Change("fix_turn_order", "stripped_trailing_space", len(messages) - 1, detail)
            )
    if not changes:
        return t, Report()
    return t.replace(messages), Report(tuple(changes))


# -- validation ------------------------------------------------------------------------------


def _check_ids(t: Transcript, provider: str, problems: list[Problem]) -> None:
    counts = Counter(c.id for m in t.messages for c in m.tool_calls)
    reported: set[str] = set()
    for i, m in enumerate(t.messages):
        for c in m.tool_calls:
            if not id_ok(c.id, provider):
                why = f"tool call id {c.id!r} is not {id_rule(provider)}"
                problems.append(Problem("bad_tool_id", i, why, c.id))
            if counts[c.id] > 1 and c.id not in reported:
                reported.add(c.id)
                why = f"tool call id {c.id!r} is used {counts[c.id]} times"
                problems.append(Problem("duplicate_call_id", i, why, c.id))


def _check_order(t: Transcript, problems: list[Problem]) -> None:
    started = False
    prev: Message | None = None
    for i, m in enumerate(t.messages):
        if m.role == "system":
            if started:
                why = "system message after the start; expected only leading system messages"
                problems.append(Problem("system_position", i, why))
            continue
        if not started and m.role != "user":
            why = f"history starts with {m.role!r}; expected a user turn"
            problems.append(Problem("first_not_user", i, why))
        started = True
        if prev is not None and prev.role == m.role and m.role in ("user", "assistant"):
            why = f"two {m.role} turns in a row; expected alternation"
            problems.append(Problem("consecutive_roles", i, why))
        prev = m
    if not started:
        why = "no message after the system prompt; expected a user turn"
        problems.append(Problem("first_not_user", len(t.messages), why))


def validate(t: Transcript, provider: str) -> list[Problem]:
    """Every rule ``provider`` enforces that ``t`` breaks; empty when ``t`` can be sent as is.

    Checked: tool-call ids (provider rule, no repeats), pairing (each call answered exactly once
    right after its turn, no orphans, no calls in failed turns), no message left empty, and for
    Anthropic/Gemini: system messages only at the start, a user turn first, alternation; for
    OpenAI: a message after the system prompt (Responses), any message at all (Chat); for
    Anthropic also no whitespace at the end of a final assistant message.

    Raises:
        AdapterError: unknown provider.
    """
    check_provider(provider)
    problems: list[Problem] = []
    _check_ids(t, provider, problems)
    check_pairing(t, problems)
    for i, m in enumerate(t.messages):
        if not sends_any(m, provider, t):
            why = f"{m.role} message has nothing {provider} accepts"
            problems.append(Problem("empty_message", i, why))
    if provider in STRICT_ALTERNATION:
        _check_order(t, problems)
        last = t.messages[-1] if t.messages else None
        if (
            provider == "anthropic"
            and last is not None
            and last.role == "assistant"
            and strip_trailing_space(last.blocks) is not None
        ):
            why = "final assistant message ends in whitespace; Anthropic rejects it"
            problems.append(Problem("trailing_whitespace", len(t.messages) - 1, why))
    elif _needs_bootstrap(provider, t.messages, _first(t.messages)):
        why = "no message after the system prompt; expected one to answer"
        problems.append(Problem("first_not_user", len(t.messages), why))
    problems.sort(key=lambda p: p.index)
    return problems


def clean(
    t: Transcript, provider: str, *, id_mode: IdMode | None = None, memo: RenderMemo | None = None
) -> tuple[Transcript, Report]:
    """Run every hygiene step for ``provider``: ids, pairing, then turn order.

    Ids: when some break the provider's rule or repeat, only those are rewritten (``strict``
    style); with ``id_mode`` every id is rewritten to that mode.
    Returns ``t`` itself (and an empty report) when it is already valid. ``memo`` (a session's
    :class:`~ctxengine.inject.memo.RenderMemo`) reuses per-message checks of earlier renders.

    Raises:
        AdapterError: unknown provider or id mode.
    """
    check_provider(provider)
    reports: list[Report] = []
    if id_mode is not None:
        t, r = sanitize_tool_ids(t, id_mode)
        reports.append(r)
    else:
        t, r = sanitize_tool_ids(t, "strict", keep_valid_for=provider)
        reports.append(r)
    t, r = repair_pairing(t)
    reports.append(r)
    t, r = fix_turn_order(t, provider, memo=memo)
    reports.append(r)
    return t, Report.merge(reports)
