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

The same in Chinese, on the two Chinese articles ctxengine was designed from
(``CTXENGINE_SHARED``/seeds): precision: each of their sentences of 30 to 300 characters
(195) is given to a provider over the five memories written in Chinese; recall: 100 of those
sentences, drawn with a fixed seed, are the memories of another folder, each asked about with
three pieces of two to four ideographs of it (Chinese puts no space between words, so a piece
stands for a word) set in one of five wordy Chinese templates; besides recall, how many other
memories the provider keeps (of up to 300 hits: Chinese text shares characters everywhere).
"""

from __future__ import annotations

import argparse
import os
import random
import re
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
SEEDS = SHARED / "seeds"
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


FACTS_ZH = (
    "测试数据库是 db-staging-02，不要在上面运行迁移。",
    "部署必须通过发布分支，绝不能用 main。",
    "Alice 希望用法语回答。",
    "API 密钥每 90 天轮换一次。",
    "web/ 目录里用 pnpm，不要用 npm。",
)
TEMPLATES_ZH = (
    "你还记得我们之前关于{a}、{b}和{c}是怎么决定的吗？我现在有点想不起来了。",
    "继续之前问一下：{a}{b}{c}这件事后来怎么样了？",
    "我在回看昨天的工作，想知道{a}和{b}、{c}之间是什么关系。",
    "上次提到{c}的时候，你关于{a}和{b}查到了什么",
    "在我忘记之前，能再告诉我一次{a}、{b}、{c}是怎么回事吗？",
)


def sentences() -> list[str]:
    """The distinct sentences of 30 to 300 characters of the Chinese seed articles."""
    found: list[str] = []
    for path in sorted(SEEDS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        found += [s.strip() for s in re.split(r"[。！？!?\n]+", text)]
    return [s for s in dict.fromkeys(found) if 30 <= len(s) <= 300]


def questions_zh(memories: list[str]) -> list[tuple[str, int]]:
    """100 Chinese questions, each with its memory's index: three distinct pieces of two to
    four ideographs of the memory in a template."""
    rng = random.Random(7)
    asked = []
    for i in sorted(rng.sample(range(len(memories)), min(100, len(memories)))):
        runs = re.findall("[\u4e00-\u9fff]{2,}", memories[i])
        pieces: list[str] = []
        for _ in range(50):
            if len(pieces) == 3:
                break
            run = rng.choice(runs)
            size = rng.randint(2, min(4, len(run)))
            start = rng.randrange(len(run) - size + 1)
            piece = run[start : start + size]
            if not any(piece in p or p in piece for p in pieces):
                pieces.append(piece)
        a, b, c = (pieces * 3)[:3]
        asked.append((rng.choice(TEMPLATES_ZH).format(a=a, b=b, c=c), i))
    return asked


def recall(
    store: MemoryStore, provider: MemoryProvider, owner: list[int], asked: list[tuple[str, int]]
) -> tuple[int, int, int]:
    """How many questions have their memory as the first hit, and among the hits the provider
    keeps (its k, its min_score); how many kept hits are other memories."""
    first = recalled = others = 0
    for question, i in asked:
        hits = store.search(question, provider.k)
        first += bool(hits) and owner[hits[0].index] == i
        kept = [owner[h.index] for h in hits if h.score >= provider.min_score]
        recalled += i in kept
        others += sum(j != i for j in kept)
    return first, recalled, others


def folder(
    path: Path, embedder: str | None, texts: list[str] | tuple[str, ...]
) -> tuple[MemoryStore, list[int]]:
    """A memory folder holding ``texts``, and the text each entry comes from (one may split)."""
    store = MemoryStore(path, embedder=embedder)
    owner: list[int] = []
    for j, text in enumerate(texts):
        store.add_long_term(text)
        owner += [j] * len(split_entries(text.strip()))
    return store, owner


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
    chinese = sentences()
    asked_zh = questions_zh(chinese)
    with tempfile.TemporaryDirectory() as tmp:
        for embedder in ("hashing", None):
            name = "hashing" if embedder else "BM25 alone"
            facts, _ = folder(Path(tmp, f"facts-{embedder}"), embedder, FACTS)
            provider = MemoryProvider(facts, min_score=args.min_score)
            false = [u for u in users if provider.recall(u)]
            store, owner = folder(Path(tmp, f"recall-{embedder}"), embedder, memories)
            recaller = MemoryProvider(store, min_score=args.min_score)
            parts = []
            for kind, asked in (("written", written), ("inflected", inflected)):
                first, recalled, _ = recall(store, recaller, owner, asked)
                parts.append(f"{kind}: at 1 {first}/100, recalled {recalled}/100")
            print(f"{name:10} false recalls {len(false)}/{len(users)} | " + " | ".join(parts))
            facts_zh, _ = folder(Path(tmp, f"facts-zh-{embedder}"), embedder, FACTS_ZH)
            provider_zh = MemoryProvider(facts_zh, min_score=args.min_score)
            false_zh = [s for s in chinese if provider_zh.recall(s)]
            store_zh, owner_zh = folder(Path(tmp, f"recall-zh-{embedder}"), embedder, chinese)
            recaller_zh = MemoryProvider(store_zh, min_score=args.min_score)
            first, recalled, others = recall(store_zh, recaller_zh, owner_zh, asked_zh)
            print(
                f"{name:10} Chinese: false recalls {len(false_zh)}/{len(chinese)} | at 1 "
                f"{first}/{len(asked_zh)}, recalled {recalled}/{len(asked_zh)}, other memories "
                f"recalled {others}"
            )
            if args.v:
                for u in false + false_zh:
                    print("    ", " ".join(u.split())[:100])
    return 0


if __name__ == "__main__":
    sys.exit(main())
