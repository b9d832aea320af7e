"""`memory`: the long-term memory entries relevant to each user message, as ``mem.*`` grains.

Searches a :class:`~ctxengine.memory.MemoryStore` (``MEMORY.md`` plus daily logs; hybrid BM25
and vector search) with the user's message and returns the best entries above ``min_score`` as
``mem.recall.<i>`` grains (turn lifespan, the source file in ``meta``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from ..errors import PluginError
from ..grain import ContextGrain
from ..memory import Embedder, MemoryStore

__all__ = ("MemoryProvider",)


class MemoryProvider:
    """Inject relevant long-term memory on each user message.

    Args:
        folder: The memory folder (``MEMORY.md``, ``memory/YYYY-MM-DD.md``), or a store.
        k: Most entries per message.
        min_score: Hybrid score (0..1) an entry needs; scores are on one absolute scale
            for every message (:mod:`ctxengine.memory.store`). By BM25 alone, the default
            0.25 asks that an entry hold about a quarter of the message's words by weight
            (idf): one word of a three-word message is not enough, three key words among a
            handful of others are. On real transcripts (``benches/memory_recall.py``), none
            of 161 user messages recalled any of five unrelated memories (one or two did at
            0.2), and 100 questions made of three words of one of 221 assistant messages,
            padded with other words, recalled it in 71 cases with the hashing embedder, 66
            by BM25 alone (82 and 83 at 0.2).
        embedder: See :class:`~ctxengine.memory.MemoryStore` (default: hashing embedder).
        priority: Plugin priority; entry ``i`` (rank) gets grain priority ``priority + i``.

    Raises:
        PluginError: ``k`` not an int, below 1, or ``min_score`` outside [0, 1].
    """

    name = "memory"
    version = "1.0.0"

    def __init__(
        self,
        folder: str | Path | MemoryStore,
        *,
        k: int = 3,
        min_score: float = 0.25,
        embedder: Embedder | str | None = "hashing",
        priority: int = 40,
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, int):  # the store would refuse every search
            raise PluginError(
                f"k is {type(k).__name__} {k!r:.60}; expected an int >= 1", plugin=self.name
            )
        if k < 1 or not 0 <= min_score <= 1:
            raise PluginError(
                f"need k >= 1 and 0 <= min_score <= 1; got k={k}, min_score={min_score}",
                plugin=self.name,
            )
        self.store = (
            folder if isinstance(folder, MemoryStore) else MemoryStore(folder, embedder=embedder)
        )
        self.k = k
        self.min_score = min_score
        self.priority = priority
        self.enabled = True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        """Nothing per turn: recall happens in :meth:`on_user_msg`."""
        return []

    def recall(self, message: str) -> list[ContextGrain]:
        """Grains for ``message`` (blocking)."""
        hits = [h for h in self.store.search(message, self.k) if h.score >= self.min_score]
        return [
            ContextGrain(
                node_id=f"mem.recall.{rank}",
                origin=self.name,
                content=f"[memory: {hit.source}]\n{hit.text}",
                priority=self.priority + rank,
                lifespan="turn",
                meta={"source": hit.source, "entry": hit.index, "score": hit.score},
            )
            for rank, hit in enumerate(hits)
        ]

    async def on_user_msg(self, event: Any) -> list[ContextGrain]:
        """Search for the new message in a worker thread."""
        message = getattr(event, "user_message", "") or ""
        if not message.strip():
            return []
        return await anyio.to_thread.run_sync(self.recall, message)
