"""`legacy`: wrap an existing ``build_system_prompt()`` as one ``legacy.context`` grain, and
:func:`compare_node_order`, the migration regression check (seed 000 §5.3, §6.3).

Step 1 of a migration registers :class:`LegacyPromptProvider` so the old prompt keeps working
inside the engine; each piece later moved into its own plugin is checked with
:func:`compare_node_order` against the previous render, so the order the model sees does not
drift unnoticed.
"""

from __future__ import annotations

import bisect
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..collect.scene import ContextScene
from ..errors import PluginError
from ..grain import ContextGrain

__all__ = ("LegacyPromptProvider", "NodeOrderDiff", "compare_node_order")


def _wants_scene(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        and p.default is p.empty
        for p in params
    )


class LegacyPromptProvider:
    """Expose a legacy prompt builder as a single ``legacy.context`` grain.

    Args:
        build_system_prompt: Callable returning the prompt text; sync or async; called with
            the scene if it takes a required positional argument, else with none. Sync
            builders run in a worker thread (so the dispatcher's timeout applies).
        name: Plugin name (several legacy builders can coexist under different names).
        priority: Plugin and grain priority (10: early, like a system prompt).
        window: Budget window of the grain.
        protected: Never fold or drop the legacy prompt.
        node_id: Node id of the grain.

    Raises:
        PluginError: ``build_system_prompt`` is not callable.
    """

    version = "1.0.0"

    def __init__(
        self,
        build_system_prompt: Callable[..., Any],
        *,
        name: str = "legacy",
        priority: int = 10,
        window: str | None = "instruction",
        protected: bool = False,
        node_id: str = "legacy.context",
    ) -> None:
        if not callable(build_system_prompt):
            raise PluginError("build_system_prompt must be callable", plugin=name)
        self.build = build_system_prompt
        self.name = name
        self.priority = priority
        self.enabled = True
        self.window = window
        self.protected = protected
        self.node_id = node_id
        self._with_scene = _wants_scene(build_system_prompt)

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Call the builder and wrap its text.

        Raises:
            PluginError: the builder returned something other than ``str`` (reported by the
                dispatcher as a fault of this plugin).
        """
        args = (scene,) if self._with_scene else ()
        if inspect.iscoroutinefunction(self.build):
            text = await self.build(*args)
        else:
            text = await anyio.to_thread.run_sync(lambda: self.build(*args), abandon_on_cancel=True)
            if inspect.isawaitable(text):
                text = await text
        if not isinstance(text, str):
            raise PluginError(
                f"build_system_prompt returned {type(text).__name__}, expected str",
                plugin=self.name,
            )
        if not text.strip():
            return []
        return [
            ContextGrain(
                node_id=self.node_id,
                origin=self.name,
                content=text,
                priority=self.priority,
                window=self.window,
                protected=self.protected,
                meta={"legacy": True},
            )
        ]


@dataclass(frozen=True, slots=True)
class NodeOrderDiff:
    """Difference in node order between two renders.

    Attributes:
        added: Nodes only in ``b`` (in ``b`` order).
        removed: Nodes only in ``a`` (in ``a`` order).
        moved: ``(node_id, index_in_a, index_in_b)`` for the fewest common nodes whose relative
            order changed (the complement of the longest common subsequence).
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    moved: tuple[tuple[str, int, int], ...] = field(default=())

    @property
    def same(self) -> bool:
        """No node added, removed or moved."""
        return not (self.added or self.removed or self.moved)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form."""
        return {
            "same": self.same,
            "added": list(self.added),
            "removed": list(self.removed),
            "moved": [{"node_id": n, "from": a, "to": b} for n, a, b in self.moved],
        }

    def format(self) -> str:
        """Human-readable summary, one change per line."""
        if self.same:
            return "node order unchanged"
        lines = [f"+ {n}" for n in self.added] + [f"- {n}" for n in self.removed]
        lines += [f"~ {n}: position {a} -> {b}" for n, a, b in self.moved]
        return "\n".join(lines)


def _node_ids(render: Any) -> list[str]:
    """Node ids, in order, from ids, grains, report entries, or an object with ``.tree``."""
    for attr in ("tree", "report"):
        inner = render.get(attr) if isinstance(render, Mapping) else getattr(render, attr, None)
        if inner is not None and not isinstance(render, (str, Sequence)):
            return _node_ids(inner)
    if isinstance(render, Mapping):
        for key in ("nodes", "order", "entries", "grains"):
            if key in render:
                return _node_ids(render[key])
        raise PluginError(f"cannot find node ids in a mapping with keys {sorted(render)}")
    if isinstance(render, str) or not isinstance(render, Iterable):
        raise PluginError(f"expected a list of node ids, grains or report entries; got {render!r}")
    ids: list[str] = []
    for item in render:
        if isinstance(item, str):
            ids.append(item)
            continue
        node = item.get("node_id") if isinstance(item, Mapping) else getattr(item, "node_id", None)
        decision = (
            item.get("decision") if isinstance(item, Mapping) else getattr(item, "decision", None)
        )
        if not isinstance(node, str):
            raise PluginError(f"item without a node_id: {item!r}")
        if decision not in ("dropped", "removed", "expired", "shadowed"):
            ids.append(node)
    return ids


def _lcs(a: list[str], b: list[str]) -> set[str]:
    """Nodes of the longest common subsequence of two duplicate-free sequences."""
    pos = {n: i for i, n in enumerate(b)}
    seq = [pos[n] for n in a if n in pos]
    # Longest increasing subsequence of b-positions, O(n log n), with back-pointers.
    tails: list[int] = []
    tails_idx: list[int] = []
    prev = [-1] * len(seq)
    for i, value in enumerate(seq):
        k = bisect.bisect_left(tails, value)
        if k == len(tails):
            tails.append(value)
            tails_idx.append(i)
        else:
            tails[k] = value
            tails_idx[k] = i
        prev[i] = tails_idx[k - 1] if k else -1
    keep: set[str] = set()
    i = tails_idx[-1] if tails_idx else -1
    while i >= 0:
        keep.add(b[seq[i]])
        i = prev[i]
    return keep


def compare_node_order(render_a: Any, render_b: Any) -> NodeOrderDiff:
    """Compare the node order of two renders (the migration regression check).

    Each argument may be a list of node ids, a list of grains or report entries (entries whose
    ``decision`` is dropped/removed/expired/shadowed are ignored), a mapping with ``nodes``/
    ``order``/``entries``/``grains``, or an object with ``.tree`` (e.g. a rendered context).

    Raises:
        PluginError: node ids cannot be found in an argument.
    """
    a, b = _dedupe(_node_ids(render_a)), _dedupe(_node_ids(render_b))
    set_a, set_b = set(a), set(b)
    keep = _lcs(a, b)
    pos_a = {n: i for i, n in enumerate(a)}
    pos_b = {n: i for i, n in enumerate(b)}
    moved = tuple((n, pos_a[n], pos_b[n]) for n in a if n in set_b and n not in keep)
    return NodeOrderDiff(
        added=tuple(n for n in b if n not in set_a),
        removed=tuple(n for n in a if n not in set_b),
        moved=moved,
    )


def _dedupe(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))
