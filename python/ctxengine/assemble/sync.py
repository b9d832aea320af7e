"""Keep the Rust assembly in step with the session state: only what changed crosses over."""

from __future__ import annotations

from collections.abc import Collection
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any, Final

from .. import _core
from ..grain import ContextGrain
from ..inject.pairing import SYNTHETIC_RESULT_TEXT
from ..inject.payload import compaction_texts, thinking_texts
from ..state import bulk
from ..tokens import IMAGE_TOKENS, count_many, provider_image_tokens
from ..transcript.providers import exportable
from .core import upsert
from .history import (
    FLAG,
    KIND,
    MESSAGE_OVERHEAD,
    ROLE,
    HistoryItem,
    call_texts,
    pdf_overhead,
    tool_result_node_id,
)
from .redact import Redaction

if TYPE_CHECKING:
    from ..collect.registry import Registry
    from ..config import RenderConfig
    from ..state import SessionState

__all__ = (
    "CONTEXT_OVERHEAD",
    "HISTORY_PRIORITY",
    "refresh_redaction",
    "sync_context",
    "sync_history",
)

_TOOL_CALL: Final[int] = _core.FLAG_HAS_TOOL_CALL
_TEXT: Final = attrgetter("text")
_KIND_MESSAGE: Final[int] = _core.KIND_MESSAGE
_TOOL_RESULT: Final = KIND["tool_result"]
_ASSISTANT: Final = ROLE["assistant"]

CONTEXT_OVERHEAD = 2  # separator between grains in the system message
HISTORY_PRIORITY = 100

#: Changed items up to this many are upserted by :func:`_upsert_few`.
_FEW: Final = 8


def item_text(state: SessionState, item: HistoryItem) -> str:
    """The text an item renders with: what the prune options left, else a plugin override's,
    else its own."""
    pruned = state.pruned.get(item.node_id)
    if pruned is not None:
        return pruned
    override = state.overrides.get(item.node_id)
    return override.text if override else _own_text(item)


def _own_text(item: HistoryItem) -> str:
    """An item's own text: its grain's, the text the item was made with while the grain is not
    made (a cold render makes few; a plugin may change a made grain's content)."""
    grain = item.made_grain
    return item.grain_text if grain is None else grain.text


def _texts(state: SessionState, items: list[HistoryItem]) -> list[str]:
    """``[item_text(state, i) for i in items]``: each item's own text when nothing is pruned or
    overridden."""
    if state.pruned or state.overrides:
        return [item_text(state, i) for i in items]
    return [i.grain_text if i.made_grain is None else i.made_grain.text for i in items]


def _changed_items(state: SessionState, scan: bool) -> tuple[list[HistoryItem], list[str]]:
    limited: Collection[str] = state.limited
    if state.unrendered:  # taken out of this render by a tree handler
        limited = state.limited.keys() | state.unrendered.keys()
    items = [i for i in state.pending if i.node_id not in limited] if limited else state.pending
    items = list(items)  # pending is cleared by the caller once the core took them
    texts = _texts(state, items)
    if not scan and not state.dirty:
        return items, texts
    candidates = (
        state.items.values() if scan else (state.items[n] for n in state.dirty if n in state.items)
    )
    seen = {id(i) for i in items}
    for item in candidates:
        if id(item) in seen or item.node_id in limited:
            continue
        text = item_text(state, item)
        if text is not item.text:
            items.append(item)
            texts.append(text)
    return items, texts


def _overhead_texts(state: SessionState, item: HistoryItem, provider: str) -> tuple[str, ...]:
    """What an item carries besides its text: tool calls (as the payload redactors leave
    their arguments, :mod:`~ctxengine.assemble.redact`), and the thinking ``provider``'s
    export sends (thinking goes back only to the provider that signed it), as the payload count
    reads it (:func:`~ctxengine.inject.payload.thinking_texts`: a Responses reasoning item
    whole, with its encrypted content)."""
    texts = item.overhead_texts
    redaction = state.redaction
    if redaction is not None and texts and item.kind == KIND["message"]:
        message = state.messages[item.index]
        redacted = redaction.message(item.index, message)
        if redacted is not message:  # the same message object when no redactor changed it
            texts = call_texts(redacted.tool_calls)
    compaction = item.compaction
    if compaction is not None and compaction.provider == provider:
        texts = compaction_texts(compaction) + texts  # sent to its provider verbatim
    if not item.thinking:
        return texts
    sent = tuple(
        t
        for b in item.thinking
        if exportable(b, provider, item.family)
        for t in thinking_texts(b, provider)
    )
    return sent + texts


def image_overhead(item: HistoryItem, provider: str, model: str) -> int:
    """What ``provider`` bills for the sized images of ``item`` (each by its rule for the
    image's size, :func:`~ctxengine.tokens.provider_image_tokens`) over the flat count its
    :attr:`~HistoryItem.overhead` holds for them: the plan counts each image as the payload
    sent to ``provider`` does."""
    return sum(
        provider_image_tokens(w, h, provider, model=model, detail=d) - IMAGE_TOKENS
        for w, h, d in item.images
    )


def media_overhead(item: HistoryItem, provider: str, model: str) -> int:
    """What a render for ``provider`` counts for the media of ``item`` over what its
    :attr:`~HistoryItem.overhead` holds for them: where ``provider`` takes no media at the
    item's place (an assistant turn but for Gemini; a tool result for OpenAI Chat, whose tool
    messages take text only) each is sent as its text placeholder, counted as that text (and
    a token for the part); else each sized image by the provider's rule
    (:func:`image_overhead`)."""
    if (item.kind == _TOOL_RESULT and provider == "openai") or (
        item.role == _ASSISTANT and provider != "gemini"
    ):
        sent = sum(count_many(list(item.placeholders), model=model)) + len(item.placeholders)
        return sent - item.media
    return image_overhead(item, provider, model) + pdf_overhead(item.pdfs, provider, model)


def _recount_thinking(state: SessionState, provider: str, items: list[HistoryItem]) -> None:
    """A render for another provider than the last one re-counts the items with thinking,
    a provider compaction, or sized images (each provider bills an image by its own rule)."""
    if state.counted_for in (None, provider):
        return
    queued = {id(i) for i in items}
    limited, out = state.limited, state.unrendered
    items.extend(
        i
        for i in state.items.values()
        if (i.thinking or i.compaction is not None or i.media)
        and id(i) not in queued
        and i.node_id not in limited
        and i.node_id not in out
    )


def _unanswered(state: SessionState, item: HistoryItem) -> list[tuple[str, str]]:
    """The (call id, result node id) pairs the tool calls of assistant ``item`` wait for:
    hygiene adds a synthetic error result for each call with no result in the history (and for
    each repeat of a call id, which it renames), so the plan counts them with the call, as a
    result item would count, until one comes."""
    if not item.flags & _TOOL_CALL or item.kind != _KIND_MESSAGE:
        return []
    message = state.messages[item.index]
    if message.failed:  # hygiene drops the calls of a failed turn
        return []
    live, answers, node_id = state.items.keys(), state.builder.answers, item.node_id
    calls = message.tool_calls
    if len(calls) == 1:  # the common case: no repeat to look for
        cid = calls[0].id
        if live.isdisjoint(answers.get((node_id, cid), ())):
            return [(cid, tool_result_node_id(cid))]
        return []
    seen: set[str] = set()
    out = []
    for call in calls:
        # this call's own results: a call id used again later is answered by the results after
        # that later call, not by the earlier call's (hygiene renames the repeat and pairs them)
        cid = call.id
        if cid in seen or live.isdisjoint(answers.get((node_id, cid), ())):
            out.append((cid, tool_result_node_id(cid)))
        seen.add(cid)
    return out


def _answered(state: SessionState, items: list[HistoryItem]) -> None:
    """Add to ``items`` the assistant items charged with a synthetic result that a result among
    them now answers (their count drops it)."""
    if not state.unanswered:
        return
    queued = {id(i) for i in items}
    owners = state.builder.result_owner
    waiting: set[str] | None = None
    for item in list(items):
        owner = (
            state.unanswered.pop(item.node_id, None) if item.kind == KIND["tool_result"] else None
        )
        if owner is None and item.kind == KIND["tool_result"]:
            # a result of a call id used again: its node id is not the one the call waited on
            owner = owners.get(item.node_id)
            if waiting is None:
                waiting = set(state.unanswered.values())
            if owner is not None and owner in waiting:
                waiting.discard(owner)
                for node in [n for n, o in state.unanswered.items() if o == owner]:
                    del state.unanswered[node]  # the call is counted again: it waits anew
            else:
                owner = None
        call = state.items.get(owner) if owner is not None else None
        if call is not None and id(call) not in queued and owner not in state.unrendered:
            items.append(call)
            queued.add(id(call))


def sync_history(
    state: SessionState, config: RenderConfig, scan: bool, provider: str = "openai"
) -> None:
    """Upsert new history items and those whose content changed since the last render (and,
    for a render to another provider, those whose thinking that provider is sent or not).

    Transactional: the pending and dirty sets are cleared only once the assembly took the
    items, so a render that fails here leaves them for the next one (no history is lost)."""
    with bulk():  # a cold render's columns: several objects per item, none to collect
        _sync_history(state, config, scan, provider)


def _sync_history(state: SessionState, config: RenderConfig, scan: bool, provider: str) -> None:
    items, texts = _changed_items(state, scan)
    _recount_thinking(state, provider, items)
    _answered(state, items)
    if len(texts) < len(items):
        texts.extend(item_text(state, i) for i in items[len(texts) :])
    if not items:
        state.pending.clear()
        state.dirty.clear()
        state.counted_for = provider
        return
    if len(items) <= _FEW:
        _upsert_few(state, config, provider, items, texts)
        return
    plain = state.redaction is None  # then an item without thinking carries its calls' texts
    extras = [
        i.overhead_texts
        if plain and not i.thinking and i.compaction is None
        else _overhead_texts(state, i, provider)
        for i in items
    ]
    flat = [t for e in extras for t in e]
    extra = count_many(flat, model=config.model) if flat else []
    overheads: list[int] = []
    k = 0
    synthetic = 0
    tool_call = FLAG["tool_call"]
    for item, e in zip(items, extras, strict=True):
        n = len(e)
        if n == 0:
            overhead = item.overhead
        elif n == 2:  # one tool call: its name and arguments
            overhead = item.overhead + extra[k] + extra[k + 1]
        else:
            overhead = item.overhead + sum(extra[k : k + n])
        if item.media:
            overhead += media_overhead(item, provider, config.model)
        waits = _unanswered(state, item) if item.flags & tool_call else None
        if waits:
            if not synthetic:
                synthetic = config.tokenizer.count(SYNTHETIC_RESULT_TEXT) + MESSAGE_OVERHEAD
            ids = count_many([c for c, _ in waits], model=config.model)
            overhead += synthetic * len(waits) + sum(ids)
            for _, node in waits:
                state.unanswered[node] = item.node_id
        overheads.append(overhead)
        k += n
    windows, window_of = config.window_index, config.budget.window_of
    # the columns, one comprehension each (faster than a tuple per item, then transposed)
    node_ids = [i.node_id for i in items]
    kinds = [i.kind for i in items]
    # window_of(node_id) depends on the prefix only, and the prefix of a history item's node id
    # on its kind (``sys.transcript.``, ``hist.``, ``act.tool_result.``: HistoryBuilder): one
    # window_of per kind, with any node id of that kind
    by_kind = {k: windows[window_of(n)] for k, n in dict(zip(kinds, node_ids, strict=True)).items()}
    win = list(map(by_kind.__getitem__, kinds))
    context = KIND["context"]
    pri = [0 if kind == context else HISTORY_PRIORITY for kind in kinds]
    seqs = [i.index * 1024 + (i.result if i.result > 0 else 0) for i in items]  # result -1: 0
    _upsert_columns(
        state,
        provider,
        items,
        texts,
        (
            node_ids,
            win,
            pri,
            seqs,
            kinds,
            [i.role for i in items],
            [i.turn for i in items],
            [i.flags for i in items],
            overheads,
            [i.label for i in items],
        ),
    )


#: The columns of history items for :func:`_upsert_columns`: node ids, windows, priorities,
#: seqs, kinds, roles, turns, flags, overheads, labels.
_Columns = tuple[
    list[str],
    list[int],
    list[int],
    list[int],
    list[int],
    list[int],
    list[int],
    list[int],
    list[int],
    list[str],
]


def _upsert_columns(
    state: SessionState,
    provider: str,
    items: list[HistoryItem],
    texts: list[str],
    columns: _Columns,
) -> None:
    """Upsert ``items`` given as their ``columns`` (node ids, windows, priorities, seqs, kinds,
    roles, turns, flags, overheads, labels), then mark them synced: the pending and dirty sets
    cleared (only once the assembly took them), each item's new text kept and listed in
    ``state.retexted``."""
    node_ids, win, pri, seqs, kinds, roles, turns, flags, overheads, labels = columns
    count = len(items)
    upsert(
        state.asm,
        node_ids=node_ids,
        texts=texts,
        windows=win,
        priorities=pri,
        ranks=[0] * count,
        seqs=seqs,
        kinds=kinds,
        roles=roles,
        turns=turns,
        flags=flags,
        overheads=overheads,
        labels=labels,
        summaries=[None] * count,
    )
    state.pending.clear()
    state.dirty.clear()
    state.counted_for = provider
    if all(map(is_, map(_TEXT, items), texts)):  # at C speed: no text changed (a cold render)
        return
    retexted = state.retexted
    for item, text in zip(items, texts, strict=True):
        if item.text is not text:
            item.text = text
            retexted.add(item.node_id)


def _upsert_few(
    state: SessionState,
    config: RenderConfig,
    provider: str,
    items: list[HistoryItem],
    texts: list[str],
) -> None:
    """:func:`_sync_history`'s upsert for a few items (a warm render's new messages): the same
    columns and counts, made in one loop over the items. The column-wise path's comprehensions
    and per-kind lookups pay for themselves on a cold render's thousands of items; for two
    items their setup cost more than the work."""
    model = config.model
    plain = state.redaction is None  # then an item without thinking carries its calls' texts
    extras: list[tuple[str, ...]] = []
    flat: list[str] = []
    for item in items:
        e = (
            item.overhead_texts
            if plain and not item.thinking and item.compaction is None
            else _overhead_texts(state, item, provider)
        )
        extras.append(e)
        if e:
            flat += e
    extra = count_many(flat, model=model) if flat else None
    windows, window_of = config.window_index, config.budget.window_of
    context = KIND["context"]
    tool_call = FLAG["tool_call"]
    node_ids: list[str] = []
    win: list[int] = []
    pri: list[int] = []
    seqs: list[int] = []
    kinds: list[int] = []
    roles: list[int] = []
    turns: list[int] = []
    flags: list[int] = []
    overheads: list[int] = []
    labels: list[str] = []
    k = 0
    synthetic = 0
    for item, e in zip(items, extras, strict=True):
        overhead = item.overhead
        if e and extra is not None:
            n = len(e)
            overhead += sum(extra[k : k + n])
            k += n
        if item.media:
            overhead += media_overhead(item, provider, model)
        flag = item.flags
        waits = _unanswered(state, item) if flag & tool_call else None
        if waits:
            if not synthetic:
                synthetic = config.tokenizer.count(SYNTHETIC_RESULT_TEXT) + MESSAGE_OVERHEAD
            ids = count_many([c for c, _ in waits], model=model)
            overhead += synthetic * len(waits) + sum(ids)
            for _, node in waits:
                state.unanswered[node] = item.node_id
        node_id, kind, result = item.node_id, item.kind, item.result
        node_ids.append(node_id)
        win.append(windows[window_of(node_id)])
        pri.append(0 if kind == context else HISTORY_PRIORITY)
        seqs.append(item.index * 1024 + (result if result > 0 else 0))  # result -1: 0
        kinds.append(kind)
        roles.append(item.role)
        turns.append(item.turn)
        flags.append(flag)
        overheads.append(overhead)
        labels.append(item.label)
    _upsert_columns(
        state,
        provider,
        items,
        texts,
        (node_ids, win, pri, seqs, kinds, roles, turns, flags, overheads, labels),
    )


def context_key(state: SessionState, registry: Registry, grain: ContextGrain) -> tuple[Any, ...]:
    """Everything the core holds of a context grain. By value, not by ``id()``: content can
    change in place (a list grown by the app) and a freed grain's id can be reused. For ``str``
    content the text is the content itself, so an unchanged grain compares by identity."""
    summary = grain.meta.get("summary")
    return (
        grain.text,
        grain.priority,
        grain.protected,
        grain.window,
        registry.rank(grain.origin),
        state.order.get(grain.node_id, 0),
        str(grain.meta.get("label", f"{grain.origin} grain")),
        summary if isinstance(summary, str) else None,
    )


def sync_context(
    state: SessionState, config: RenderConfig, registry: Registry, grains: list[ContextGrain]
) -> None:
    """Upsert context grains that are new or changed; remove those no longer present."""
    present = {g.node_id: g for g in grains}
    gone = [n for n in state.in_asm if n not in present]
    if gone:
        state.asm.remove(gone)
        for n in gone:
            del state.in_asm[n]
    keys = {n: context_key(state, registry, g) for n, g in present.items()}
    fresh = [g for n, g in present.items() if state.in_asm.get(n) != keys[n]]
    if not fresh:
        return
    windows, count = config.window_index, len(fresh)
    upsert(
        state.asm,
        node_ids=[g.node_id for g in fresh],
        texts=[keys[g.node_id][0] for g in fresh],
        windows=[windows[config.budget.window_of(g.node_id, g.window)] for g in fresh],
        priorities=[g.priority for g in fresh],
        ranks=[keys[g.node_id][4] for g in fresh],
        seqs=[keys[g.node_id][5] for g in fresh],
        kinds=[KIND["context"]] * count,
        roles=[_core.ROLE_SYSTEM] * count,
        turns=[0] * count,
        flags=[FLAG["protected"] if g.protected else 0 for g in fresh],
        overheads=[CONTEXT_OVERHEAD] * count,
        labels=[keys[g.node_id][6] for g in fresh],
        summaries=[keys[g.node_id][7] for g in fresh],
    )
    for g in fresh:
        state.in_asm[g.node_id] = keys[g.node_id]


def refresh_redaction(state: SessionState, registry: Registry) -> None:
    """Set the session's :class:`Redaction` for this render (None: no payload redactor), kept
    while its redactors stay the same. When they change, what was composed with the earlier
    ones is composed again."""
    redactors = tuple(registry.payload_redactors())
    current = state.redaction
    if (current is not None and current.redactors == redactors) or (
        current is None and not redactors
    ):
        return
    state.redaction = Redaction(redactors) if redactors else None
    state.token_cache.memo.composed = None  # reused messages carried the old redaction
    for item in state.items.values():
        item.composed = None
