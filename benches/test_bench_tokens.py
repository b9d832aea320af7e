"""Token counting through Python, side by side with its peers in the same run.

Peers: Python ``tiktoken`` (built offline from the shared rank files), ``toktok`` (the
``toktok-rs`` package on PyPI, the Python face of the crate ctxengine vendors) and
``quicktok`` (the C++ exact counter, PyPI package ``quicktok-v1``, which ships its own copy of
the vocabularies; the PyPI package named ``quicktok`` is an unrelated trainable BPE). On a
shared machine prefer ``benches/paired_tokens.py`` for the ratio
against toktok: it interleaves the two sides round by round and reports medians of the
per-round ratios, in wall and CPU time. Corpora: ~4 MB
of the shared transcripts (every file, sorted by path, concatenated) and ~4 MB of code (the
installed ``openai`` package's ``.py`` files, sorted by path). Counting runs on fresh text:
every round counts a different rotation of the corpus, and ctxengine's content cache is
emptied before it, so each ctxengine round is a cache miss through the default ``count``
(hash, count, insert). Every benchmark also checks its result against tiktoken, so the quick
mode (``--benchmark-disable``: each body runs once) still tests something. Real run::

    pytest benches --benchmark-enable --benchmark-only -q

The ratios printed at the end are relative to each group's baseline, with MB/s where the group
counts a known number of bytes (see ``conftest.py``).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import openai
import pytest
import quicktok
import toktok

import ctxengine
import first_count
from offline_tiktoken import TRANSCRIPTS, encoding

SIZE = 4_000_000
CHUNK = 4096
MB = 1 << 20
ROUNDS = 9


@cache
def corpus(kind: str) -> str:
    """~4 MB of ``kind``: ``transcripts`` or ``code``."""
    if kind == "transcripts":
        files = sorted(p for p in TRANSCRIPTS.rglob("*") if p.is_file())
    else:
        files = sorted(Path(openai.__file__).parent.rglob("*.py"))
    parts: list[str] = []
    size = 0
    for path in files:
        parts.append(path.read_text(encoding="utf-8"))
        size += len(parts[-1])
        if size >= SIZE:
            break
    text = "".join(parts)[:SIZE]
    assert len(text) == SIZE, f"{kind} corpus has only {len(text)} characters"
    return text


@cache
def chunks(kind: str) -> list[str]:
    text = corpus(kind)
    return [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]


def _no_whitespace() -> str:
    rng = random.Random(1)
    return "".join(rng.choice("abcXYZ019_-+=/\\.,;:!?()[]{}<>\"'日本語ü😀") for _ in range(MB))


PATHOLOGICAL: dict[str, Callable[[], str]] = {
    "spaces": lambda: " " * MB,
    "one-char": lambda: "a" * MB,
    "no-whitespace": _no_whitespace,
}


def run(
    benchmark: Any, group: str, impl: str, fn: Callable[[], Any], baseline: bool = False
) -> Any:
    benchmark.group = group
    benchmark.extra_info.update(impl=impl, baseline=baseline)
    return benchmark(fn)


@pytest.fixture
def uncached() -> None:
    ctxengine.clear_cache()


def rotations(text: str, pieces: int) -> list[str]:
    """``pieces`` distinct texts of ``text``'s length and content: fresh text for every round."""
    step = len(text) // pieces
    return [text[i * step :] + text[: i * step] for i in range(pieces)]


def fresh(
    benchmark: Any,
    group: str,
    impl: str,
    inputs: list[Any],
    fn: Callable[[Any], int],
    nbytes: int,
    baseline: bool = False,
) -> tuple[Any, int]:
    """Time ``fn`` on a new input each round, with ctxengine's content cache emptied first.

    Returns the last round's input and result, for the caller to check.
    """
    benchmark.group = group
    benchmark.extra_info.update(impl=impl, baseline=baseline, bytes=nbytes)
    feed = iter(inputs * 2)

    def setup() -> tuple[tuple[Any], dict[str, Any]]:
        ctxengine.clear_cache()
        return (next(feed),), {}

    results: list[tuple[Any, int]] = []
    benchmark.pedantic(lambda x: results.append((x, fn(x))), setup=setup, rounds=ROUNDS)
    return results[-1]


def _single(name: str, impl: str) -> Callable[[str], int]:
    if impl == "ctxengine":
        tok = ctxengine.get_tokenizer(name)
        return tok.count
    if impl == "toktok":
        return lambda x: toktok.batch_count([x], name, threads=1)[0]
    if impl == "quicktok":
        return quicktok.get_encoding(name).count
    tk = encoding(name)
    return lambda x: len(tk.encode_ordinary(x))


@pytest.mark.parametrize("impl", ["ctxengine", "toktok", "quicktok", "tiktoken"])
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("kind", ["transcripts", "code"])
def test_count_single_thread(benchmark: Any, kind: str, name: str, impl: str) -> None:
    text = corpus(kind)
    group = f"count 4MB {kind} {name}"
    nbytes = len(text.encode())
    fn = _single(name, impl)
    x, n = fresh(benchmark, group, impl, rotations(text, ROUNDS), fn, nbytes, impl == "toktok")
    assert n == len(encoding(name).encode_ordinary(x))


BATCH: dict[str, Callable[[str, list[str]], int]] = {
    "ctxengine count_many": lambda name, xs: sum(ctxengine.count_many(xs, encoding=name)),
    "ctxengine loop of count": lambda name, xs: sum(
        ctxengine.count_tokens(x, encoding=name) for x in xs
    ),
    "toktok batch_count(threads=2)": lambda name, xs: sum(toktok.batch_count(xs, name, threads=2)),
    "toktok batch_count(threads=1)": lambda name, xs: sum(toktok.batch_count(xs, name, threads=1)),
    "tiktoken encode_ordinary_batch(2)": lambda name, xs: sum(
        map(len, encoding(name).encode_ordinary_batch(xs, num_threads=2))
    ),
}


@pytest.mark.parametrize("impl", BATCH)
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("kind", ["transcripts", "code"])
def test_count_batch(benchmark: Any, kind: str, name: str, impl: str) -> None:
    text = corpus(kind)
    batches = [[t[i : i + CHUNK] for i in range(0, len(t), CHUNK)] for t in rotations(text, ROUNDS)]
    group = f"batch {len(batches[0])} x 4KB {kind} {name}"
    nbytes = len(text.encode())
    fn = BATCH[impl]
    xs, n = fresh(
        benchmark, group, impl, batches, lambda xs: fn(name, xs), nbytes, impl.endswith("count")
    )
    assert n == sum(map(len, encoding(name).encode_ordinary_batch(xs)))


@pytest.mark.parametrize("impl", ["hit", "fresh"])
def test_count_cache(benchmark: Any, uncached: None, impl: str) -> None:
    text = corpus("transcripts")
    tok = ctxengine.get_tokenizer("o200k_base")
    expected = tok.count(text)  # fills the cache
    fn = (lambda: tok.count(text)) if impl == "hit" else (lambda: tok.count(text, cache=False))
    assert run(benchmark, "cache 4MB transcripts o200k_base", impl, fn, impl == "fresh") == expected
    if impl == "hit":
        assert ctxengine.cache_info()["hits"] >= 1


def _pathological_cases() -> list[tuple[str, str, str]]:
    cases = []
    for name in ("cl100k_base", "o200k_base"):
        for kind in PATHOLOGICAL:
            cases.append((kind, name, "ctxengine"))
            # Python tiktoken panics (regex stack overflow) on 1 MB of spaces with o200k_base.
            if (kind, name) != ("spaces", "o200k_base"):
                cases.append((kind, name, "tiktoken"))
    return cases


@pytest.mark.parametrize(("kind", "name", "impl"), _pathological_cases())
def test_count_pathological(benchmark: Any, kind: str, name: str, impl: str) -> None:
    text = PATHOLOGICAL[kind]()
    tok, tk = ctxengine.get_tokenizer(name), encoding(name)
    if impl == "ctxengine":
        fn: Callable[[], int] = lambda: tok.count(text, cache=False)  # noqa: E731
    else:
        fn = lambda: len(tk.encode_ordinary(text))  # noqa: E731
    n = run(benchmark, f"pathological 1MB {kind} {name}", impl, fn, impl == "tiktoken")
    assert n == len(tk._encode_single_piece(text) if kind == "spaces" else tk.encode_ordinary(text))


IMPORTS = {"python -c pass": "pass", "import ctxengine": "import ctxengine"}


@pytest.mark.parametrize("impl", IMPORTS)
def test_import_time(benchmark: Any, impl: str) -> None:
    argv = [sys.executable, "-c", IMPORTS[impl]]
    done = run(
        benchmark, "interpreter start + import", impl, lambda: subprocess.run(argv, check=True)
    )
    assert done.returncode == 0


@pytest.mark.parametrize("impl", list(first_count.COUNTERS))
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_first_count_new_process(benchmark: Any, name: str, impl: str) -> None:
    """A new interpreter that imports a counter and counts one string: its start, the import
    and the vocabulary's build (each counter builds its tables then; tiktoken reads and parses
    its rank file). toktok-rs is the baseline; ``benches/first_count.py`` times the first count
    alone, inside the child, in paired rounds."""
    argv = [sys.executable, "-c", first_count.script(first_count.COUNTERS[impl], name)]
    group = f"first count {name} (new process)"
    done = run(
        benchmark,
        group,
        impl,
        lambda: subprocess.run(argv, check=True, capture_output=True, text=True),
        impl == "toktok-rs",
    )
    assert json.loads(done.stdout)["n"] == 2
