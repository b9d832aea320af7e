"""Inject: turn a plan into a neutral transcript: one system message, then the kept history,
headed by the compaction summary (a user message, never system text)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from itertools import islice
from operator import attrgetter, ne
from typing import TYPE_CHECKING, Any, Final

from ..assemble.compact import SUMMARY_META
from ..assemble.history import KIND, HistoryItem, item_grains
from ..compaction import summary_message
from ..grain import ContextGrain
from ..transcript.model import Message, Text, Transcript, compaction_of
from .align import splice
from .warm import trusted_transcript

if TYPE_CHECKING:
    from ..state import SessionState
    from .memo import RenderMemo

__all__ = ("compose", "history_grains", "is_summary_grain")

SEPARATOR: Final = "\n\n"
_SKIP_KEYS: Final = frozenset(
    {"type", "role", "cache_control", "media_type", "mime_type", "mimeType", "signature", "data"}
)
_GRAIN: Final = attrgetter("grain")
_MESSAGE_OVERHEAD: Final = 4
_REPLY_PRIMING: Final = 3
_TOOL_RESULT: Final = KIND["tool_result"]


def is_summary_grain(grain: ContextGrain | None) -> bool:
    """Whether ``grain`` is the compaction summary (composed as history, not system text)."""
    return grain is not None and grain.meta.get(SUMMARY_META) is True


def _summary(plan: Any, by_id: Mapping[str, ContextGrain], memo: RenderMemo) -> Message | None:
    """The compaction summary kept by the plan, as the first history message: the same object
    as in the render before while its text is the same (so that render's work is reused)."""
    for node_id in plan.context_order:
        grain = by_id.get(node_id)
        if is_summary_grain(grain):
            assert grain is not None
            text = plan.replacements.get(node_id, grain.text)
            replaced = grain.meta.get("replaced", 0)
            replaced = replaced if isinstance(replaced, int) else 0
            return memo.made(("summary", text, replaced), partial(summary_message, text, replaced))
    return None


def _context_texts(state: SessionState, plan: Any, by_id: Mapping[str, ContextGrain]) -> list[str]:
    """System-message texts: stable grains first (cache-friendly), per-turn grains last.
    The compaction summary is history and is left out (see :func:`_summary`)."""
    replacements = plan.replacements
    stable: list[str] = []
    volatile: list[str] = []
    for node_id in plan.context_order:
        grain = by_id.get(node_id)
        if is_summary_grain(grain):
            continue
        item = state.items.get(node_id)
        text = replacements.get(node_id)
        if text is None:
            text = grain.text if grain is not None else item.text if item is not None else ""
        if not text:
            continue
        turn_only = grain is not None and grain.lifespan == "turn" and grain.branch != "sys"
        (volatile if turn_only else stable).append(text)
    return stable + volatile


def _with_text(message: Message, text: str) -> Message:
    """``message`` with its text blocks replaced by one block holding ``text``."""
    blocks: list[Any] = []
    placed = False
    for block in message.blocks:
        if isinstance(block, Text):
            if not placed:
                blocks.append(Text(text))
                placed = True
            continue
        blocks.append(block)
    if not placed:
        blocks.insert(0, Text(text))
    return dataclasses.replace(message, blocks=tuple(blocks))


def _message(
    state: SessionState, node_id: str, item: HistoryItem | None, text: str | None
) -> Message:
    """The history message of one plan node (``text``: the plan's replacement, if any)."""
    memo = state.token_cache.memo
    if item is None:  # a placeholder standing for removed turns
        return memo.message("user", text if text is not None else f"[{node_id}]")
    message = state.messages[item.index]
    redaction = state.redaction
    if redaction is not None and message.tool_calls:  # their arguments are in no grain
        message = redaction.message(item.index, message)
    if item.compaction is not None:
        # a provider compaction goes back as the provider returned it (protected: never
        # trimmed): not rebuilt from the grain's text. Another provider is sent its summary
        # text, which the payload redactors see as they see tool-call arguments.
        return redaction.message(item.index, message) if redaction is not None else message
    if text is None:
        text = item.text
    if text is item.source_text and (item.kind != KIND["tool_result"] or len(message.blocks) == 1):
        return message
    if item.composed is not None and item.composed[0] == text:
        return item.composed[1]
    composed = _recompose(message, item.result, text, text is not item.source_text)
    item.composed = (text, composed)
    return composed


def _messages(
    state: SessionState,
    order: list[str],
    items: list[HistoryItem | None],
    replacements: list[str | None],
) -> list[Message]:
    """``[_message(state, *node) for node in zip(order, items, replacements)]``, the message
    itself taken in the loop where :func:`_message` returns it (an item sent as the session
    holds it: no redaction, replacement or provider compaction, its text its source's)."""
    if state.redaction is not None:
        return list(map(partial(_message, state), order, items, replacements))
    held = state.messages
    out: list[Message] = []
    append = out.append
    for node_id, item, text in zip(order, items, replacements, strict=True):
        if (
            item is not None
            and text is None
            and item.compaction is None
            and item.text is item.source_text
        ):
            message = held[item.index]
            if item.kind != _TOOL_RESULT or len(message.blocks) == 1:
                append(message)
                continue
        append(_message(state, node_id, item, text))
    return out


@dataclasses.dataclass(slots=True)
class Composed:
    """The history of the last composed transcript, and what each message was made from."""

    order: list[str]
    items: list[HistoryItem | None]  # by node of ``order`` (None: a placeholder)
    replacements: list[str | None]
    messages: list[Message]
    grains: list[ContextGrain | None]  # the items' grains (None: a placeholder)
    plan: Any = None  # the plan composed
    holes: int = 0  # placeholders: the Nones of ``grains``
    replaced: bool = False  # whether ``replacements`` holds any text


#: New history nodes looked for in front of the kept ones (placeholders, the summary).
_HEAD: Final = 4


def _changed(new: list[Any], old: list[Any]) -> set[int]:
    """Positions where two lists of the same length differ (found at C speed)."""
    if new == old:
        return set()
    flags = list(map(ne, new, old))
    out: set[int] = set()
    j = flags.index(True)
    while True:
        out.add(j)
        try:
            j = flags.index(True, j + 1)
        except ValueError:
            return out


def _history(state: SessionState, plan: Any) -> list[Message]:
    """The kept history as messages. The previous render's messages are reused for the nodes
    it also kept, when their texts and replacements are unchanged (a few C-level passes over
    the window instead of a Python loop); only new nodes at either end are composed.

    A node's item is looked up once, when it is new to the window: an item is made once per
    node id (ids are never reused) and is only ever deleted, never replaced; its text may
    change in place, only in a sync (a prune), which lists the node in ``state.retexted``."""
    rep = plan.replacements
    memo = state.token_cache.memo
    prev: Composed | None = memo.composed
    # where the plan's history continues the previous one's, found by the core on its own
    # vectors: the window's node ids are not made into a list for every render
    after = plan.history_after(prev.plan, _HEAD) if prev is not None else None
    retexted = state.retexted
    if prev is None or after is None:
        order: list[str] = plan.history_order  # a new list on every access
        replacements = list(map(rep.get, order)) if rep else [None] * len(order)
        items = list(map(state.items.get, order))
        messages = _messages(state, order, items, replacements)
        grains = item_grains(items)
        holes = sum(1 for i in items if i is None)
    else:
        head, k, fresh_ids = after
        end = head + len(prev.order) - k
        # the previous history is forgotten first, so that a failure below leaves none half
        # changed for the next render; its order is taken over (the new ids put in place)
        memo.composed = None
        order = splice(prev.order, k, fresh_ids, head)
        fresh = [*range(head), *range(end, len(order))]
        if rep:
            replacements = list(map(rep.get, order))
        elif prev.replaced:
            replacements = [None] * len(order)
        else:  # no text replaced now nor then: the previous list of Nones, taken over
            replacements = splice(prev.replacements, k, [None] * len(fresh), head)
        get = state.items.get
        new_items = [get(order[j]) for j in fresh]
        make = [
            _message(state, order[j], i, replacements[j])
            for j, i in zip(fresh, new_items, strict=True)
        ]
        new_grains = item_grains(new_items)
        holes = prev.holes - sum(1 for g in islice(prev.grains, k) if g is None)
        holes += sum(1 for g in new_grains if g is None)
        # the previous lists are taken over, their dropped head cut and the new nodes put at
        # either end in place (no copy of the window)
        items = splice(prev.items, k, new_items, head)
        messages = splice(prev.messages, k, make, head)
        grains = splice(prev.grains, k, new_grains, head)
        # kept nodes whose text a sync changed (a prune) or the plan replaced (a soft trim):
        # composed again. Only those are looked up: each item looked at again is a cache miss
        # on every render, most of a warm render's compose.
        again = (
            _changed(replacements[head:end], prev.replacements[k:])
            if rep or prev.replaced
            else set()
        )
        if retexted:
            again |= {j - head for j in _positions(order, retexted, head, end)}
        for j in again:
            j += head
            messages[j] = _message(state, order[j], items[j], replacements[j])
    retexted.clear()
    memo.composed = Composed(order, items, replacements, messages, grains, plan, holes, bool(rep))
    return messages


def _positions(order: list[str], nodes: set[str], start: int, end: int) -> list[int]:
    """The positions in ``order[start:end]`` (offset by ``start``) of ``nodes``."""
    if len(nodes) * 8 < end - start:
        out = []
        for node in nodes:
            try:
                out.append(order.index(node, start, end))
            except ValueError:
                continue
        return out
    return [j for j in range(start, end) if order[j] in nodes]


def history_grains(state: SessionState, plan: Any) -> list[ContextGrain]:
    """The grains of the history nodes ``plan`` keeps, in order: taken from what
    :func:`compose` made for that plan (one C-level pass), else looked up again."""
    composed: Composed | None = state.token_cache.memo.composed
    if composed is not None and composed.plan is plan:
        if not composed.holes:
            return composed.grains.copy()  # type: ignore[return-value]
        return list(filter(None, composed.grains))
    return list(map(_GRAIN, filter(None, map(state.items.get, plan.history_order))))


def _recompose(message: Message, result_index: int, text: str, changed: bool) -> Message:
    """``message`` carrying ``text``: one result of a tool message, or the text of a turn."""
    if result_index < 0:
        return _with_text(message, text)
    result = message.tool_results[result_index]
    if changed:
        result = dataclasses.replace(result, content=(Text(text),))
    return dataclasses.replace(message, blocks=(result,))


def compose(state: SessionState, plan: Any, by_id: Mapping[str, ContextGrain]) -> Transcript:
    """The neutral transcript of a render: one system message, then the kept history (the
    compaction summary first, as a user message)."""
    texts = _context_texts(state, plan, by_id)
    memo = state.token_cache.memo
    messages = [memo.message("system", SEPARATOR.join(texts))] if texts else []
    summary = _summary(plan, by_id, memo)
    history = _history(state, plan)
    if summary is not None and summary.text:
        # after the latest provider compaction kept, if any: Anthropic drops every block
        # before a compaction block, and the summary may hold turns that came after it
        at = -1
        if state.builder.newest_compaction is not None:
            at = next((k for k in range(len(history) - 1, -1, -1) if compaction_of(history[k])), -1)
        if at < 0:  # the summary first (list spreads: C-level copies, no iterator per item)
            return trusted_transcript((*messages, summary, *history), "render")
        k = at + 1
        return trusted_transcript((*messages, *history[:k], summary, *history[k:]), "render")
    if not messages:  # one copy of the window into a tuple, no list built on the way
        return trusted_transcript(tuple(history), "render")
    return trusted_transcript((*messages, *history), "render")
