"""Who may write which node ids: the engine's namespaces and other owners' protected grains.

The one list of what the engine reserves (DESIGN.md §2, "Engine namespaces"). A plugin without
the dangerous consent (``dangerous: true`` *and* ``ContextEngine(allow_dangerous=...)``) that
returns a grain in one of them, or one that would shadow another owner's protected grain, has
that grain refused with a ``denied`` fault naming the plugin, the node id and the reason; the
rest of its grains are kept. With the consent the grain takes part in fusion like any other.

A leaf module: it imports nothing from the rest of :mod:`ctxengine.collect`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = (
    "ENGINE_IDS",
    "ENGINE_PREFIXES",
    "emitter_of",
    "engine_namespace",
    "node_suffix",
    "own_tool_result_id",
    "shadowing_refusals",
)

#: Node-id prefixes the engine writes: ``(prefix, what lives there)``. A node id is in one when
#: it equals the prefix or starts with ``prefix + "."``.
ENGINE_PREFIXES: Final[tuple[tuple[str, str], ...]] = (
    ("hist", "the session's user and assistant messages (and the trim placeholder)"),
    ("act.tool_result", "the session's tool results"),
    ("sys.transcript", "the system messages of the transcript"),
)
#: Single node ids the engine writes: ``{node id: what it is}``.
ENGINE_IDS: Final[dict[str, str]] = {
    "mem.summary": "the compaction summary of the earlier history",
}

# The characters a node-id segment may not hold become "_" in a tool result's node id.
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_\-:]")


def engine_namespace(node_id: str) -> str | None:
    """The engine namespace ``node_id`` falls in, described (``"'hist.*': ..."``), or None."""
    what = ENGINE_IDS.get(node_id)
    if what is not None:
        return f"{node_id!r}: {what}"
    for prefix, what in ENGINE_PREFIXES:
        if node_id == prefix or node_id.startswith(prefix + "."):
            return f"'{prefix}.*': {what}"
    return None


def node_suffix(call_id: str) -> str:
    """``call_id`` as the end of a node id: each character other than letters, digits and
    ``_ - :`` made ``_`` (``""`` for an empty id). The one rule of a tool result's node id:
    the history item's (``ctxengine.assemble.history``) and what a handler returns for it."""
    if call_id.isascii() and (call_id.isalnum() or call_id.replace("_", "").isalnum()):
        return call_id  # nothing to replace (the common ids)
    return _UNSAFE.sub("_", call_id)


def own_tool_result_id(call_id: str) -> str:
    """The node id of the result of ``call_id``: what an ``on_tool_result`` handler may return
    for that very result (a compressed or summarized version of it) without the consent."""
    return "act.tool_result." + (node_suffix(call_id) or "unknown")


def emitter_of(grain: Any, is_plugin: Callable[[str], bool]) -> str | None:
    """The plugin that emitted ``grain``, or None for the application's (or engine's) own.

    The dispatcher guarantees that a plugin's grain carries either the plugin's name as
    ``origin`` or, when it claims an origin that is no plugin, the plugin's name in
    ``meta["emitted_by"]`` (always overwritten, so it cannot be forged).
    """
    origin = grain.origin if isinstance(grain.origin, str) else ""
    if origin and is_plugin(origin):
        return origin
    meta = grain.meta if isinstance(grain.meta, dict) else {}
    emitted = meta.get("emitted_by")
    return emitted if isinstance(emitted, str) and is_plugin(emitted) else None


def _key(grain: Any, rank: Callable[[str], int], index: int) -> tuple[int, int, int] | None:
    """The fusion key of ``grain`` (as ``ctxengine.assemble.core.fuse`` orders), or None when
    its fields are broken (admission reports those)."""
    priority, origin = grain.priority, grain.origin
    if isinstance(priority, bool) or not isinstance(priority, int) or not isinstance(origin, str):
        return None
    return (priority, rank(origin), index)


def shadowing_refusals(
    grains: Sequence[Any],
    *,
    is_plugin: Callable[[str], bool],
    privileged: Callable[[str], bool],
    rank: Callable[[str], int],
) -> dict[int, str]:
    """Indexes of the grains that would shadow another owner's protected grain, with why.

    A grain is refused when a plugin without the consent emitted it and it would win fusion
    (lower priority, then plugin rank, then order) against a ``protected`` grain with its node
    id that someone else (the application, the engine or another plugin) owns.
    """
    guards: dict[str, list[tuple[tuple[int, int, int], str | None, Any]]] = {}
    for i, g in enumerate(grains):
        if g.protected is True and isinstance(g.node_id, str):
            key = _key(g, rank, i)
            if key is not None:
                guards.setdefault(g.node_id, []).append((key, emitter_of(g, is_plugin), g))
    refused: dict[int, str] = {}
    if not guards:
        return refused
    for i, g in enumerate(grains):
        held = guards.get(g.node_id) if isinstance(g.node_id, str) else None
        if not held:
            continue
        who = emitter_of(g, is_plugin)
        key = _key(g, rank, i)
        if who is None or key is None or privileged(who):
            continue
        for guard_key, owner, guard in held:
            if guard is g or owner == who or key >= guard_key:
                continue
            holder = f"plugin {owner!r}" if owner else f"{guard.origin or 'the application'!r}"
            refused[i] = (
                f"plugin {who!r}: grain {g.node_id!r} (priority {g.priority}) would shadow the "
                f"protected grain {g.node_id!r} of {holder} (priority {guard.priority}); "
                "shadowing another owner's protected grain needs `dangerous: true` and the "
                "engine's consent (ContextEngine(allow_dangerous=...)); refused"
            )
            break
    return refused
