"""Precision and recall of long-term memory search on the shared real transcripts.

    PYTHONPATH=python python benches/memory_recall.py [--min-score 0.25] [-v]

Every transcript (``CTXENGINE_SHARED``/data/transcripts) is read with ``load_all``:

- precision: each of the user messages (161; those that are not tool results) is given to a
  ``MemoryProvider`` over five memories about another project; any recalled entry is a false
  recall;
- recall: the distinct assistant messages of 150 to 1,200 characters (221) are the memories;
  100 of them, drawn with a fixed seed, each give a question made of three of their words
  (four letters or more, not stopwords) set in one of five wordy templates, once as written
  and once with two of the words inflected ("line" -> "lines", "fixed" -> "fixing"). A
  question is recalled at 1 when its memory is the first hit, recalled when the provider
  (``k=3``, the ``min_score``) returns it.

Both with the hashing embedder and with BM25 alone.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

from ctxengine._core import bm25_tokenize
from ctxengine.builtins import MemoryProvider
from ctxengine.memory import MemoryStore, split_entries
from ctxengine.memory.store import STOPWORDS
from ctxengine.transcript import load_all

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXENGINE_SHARED", ROOT.parents[0] / "shared"))
DATA = SHARED / "data" / "transcripts"
FACTS = (
    "The staging database is db-staging-02; never run migrations on it.",
    "Deploys go through the release branch, never main.",
    "Alice prefers answers in French.",
    "The API key rotation happens every 90 days.",
    "Use pnpm, not npm, in the web/ folder.",
)
TEMPLATES = (
    "Can you remind me what we decided about {a}, {b} and {c}? I don't quite remember it now.",
    "Quick question before we go on: what was the story with {a} {b} {c} again?",
    "I was looking back over yesterday's work and wondered how {a} related to {b} and {c}.",
    "what did you find about {a} and {b} when {c} came up last time",
    "Hey, before I forget, could you tell me once more what happened with {a}, {b}, {c}?",
)


def messages() -> tuple[list[str], list[str]]:
    """The user messages and the memories (distinct assistant messages of 150..1200 chars)."""
    users: list[str] = []
    assistants: list[str] = []
    suffixes = (".jsonl", ".md", ".traj", ".json")
    for path in sorted(p for p in DATA.rglob("*") if p.suffix in suffixes):
        if path.name == "README.md":
            continue
        for transcript in load_all(path):
            for message in transcript:
                text = message.text.strip()
                if not text:
                    continue
                if message.role == "user" and not message.tool_results:
                    users.append(text)
                elif message.role == "assistant":
                    assistants.append(text)
    return users, [m for m in dict.fromkeys(assistants) if 150 <= len(m) <= 1200]


def inflect(word: str) -> str:
    """Another form of ``word``."""
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("ing") and len(word) > 5:
        return word[:-3] + "s"
    if word.endswith("ed") and len(word) > 4:
        return word[:-2] + "ing"
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word + "s"


def questions(memories: list[str]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """100 questions as written and inflected, each with its memory's index."""
    rng = random.Random(7)
    written, inflected = [], []
    for i in sorted(rng.sample(range(len(memories)), 100)):
        words = list(
            dict.fromkeys(
                t
                for t in bm25_tokenize(memories[i])
                if t.isalpha() and len(t) >= 4 and t not in STOPWORDS
            )
        )
        a, b, c = rng.sample(words, 3) if len(words) >= 3 else (words * 3)[:3]
        template = rng.choice(TEMPLATES)
        written.append((template.format(a=a, b=b, c=c), i))
        inflected.append((template.format(a=inflect(a), b=inflect(b), c=c), i))
    return written, inflected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-score", type=float, default=0.25)
    parser.add_argument("-v", action="store_true", help="print the false recalls")
    args = parser.parse_args(argv)
    users, memories = messages()
    written, inflected = questions(memories)
    print(f"{len(users)} user messages, {len(memories)} memories, min_score {args.min_score}")
    with tempfile.TemporaryDirectory() as tmp:
        for embedder in ("hashing", None):
            facts = MemoryStore(Path(tmp, f"facts-{embedder}"), embedder=embedder)
            for fact in FACTS:
                facts.add_long_term(fact)
            provider = MemoryProvider(facts, min_score=args.min_score)
            false = [u for u in users if provider.recall(u)]
            store = MemoryStore(Path(tmp, f"recall-{embedder}"), embedder=embedder)
            owner: list[int] = []  # entry index -> memory index (a memory may split)
            for j, memory in enumerate(memories):
                store.add_long_term(memory)
                owner += [j] * len(split_entries(memory.strip()))
            recaller = MemoryProvider(store, min_score=args.min_score)
            parts = []
            for name, asked in (("written", written), ("inflected", inflected)):
                first = recalled = 0
                for question, i in asked:
                    # what the provider reads and keeps (its k, its min_score), and the first hit
                    hits = store.search(question, recaller.k)
                    first += bool(hits) and owner[hits[0].index] == i
                    kept = (h for h in hits if h.score >= recaller.min_score)
                    recalled += any(owner[h.index] == i for h in kept)
                parts.append(f"{name}: at 1 {first}/100, recalled {recalled}/100")
            print(
                f"{'hashing' if embedder else 'BM25 alone':10} false recalls {len(false)}/"
                f"{len(users)} | " + " | ".join(parts)
            )
            if args.v:
                for u in false:
                    print("    ", " ".join(u.split())[:100])
    return 0


if __name__ == "__main__":
    sys.exit(main())
