"""Long-term memory (DESIGN.md §6): ``MEMORY.md`` plus daily logs, hybrid search.

>>> import tempfile
>>> from ctxengine.memory import MemoryStore
>>> folder = tempfile.mkdtemp()
>>> store = MemoryStore(folder)
>>> _ = store.add_long_term("The staging database is db-staging-02; never run migrations on it.")
>>> _ = store.add_long_term("Deploys go through the release branch, never main.")
>>> store.search("which database is staging?", k=1)[0].text
'The staging database is db-staging-02; never run migrations on it.'
"""

from __future__ import annotations

from .daily import DAILY_DIR, LONG_TERM, append_daily, daily_path
from .store import Embedder, HashingEmbedder, MemoryHit, MemoryStore, split_entries

__all__ = (
    "DAILY_DIR",
    "LONG_TERM",
    "Embedder",
    "HashingEmbedder",
    "MemoryHit",
    "MemoryStore",
    "append_daily",
    "daily_path",
    "split_entries",
)
