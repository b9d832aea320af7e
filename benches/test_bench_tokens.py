"""Token counting through Python, side by side with Python tiktoken in the same run.

Corpora: ~4 MB of the shared transcripts (every file, sorted by path, concatenated) and ~4 MB of
code (the installed ``openai`` package's ``.py`` files, sorted by path). Every benchmark also
checks its result against tiktoken, so the quick mode (``--benchmark-disable``: each body runs
once) still tests something. Real run::

    pytest benches --benchmark-enable --benchmark-only -q

The ratios printed at the end are relative to each group's baseline (see ``conftest.py``).
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import openai
import pytest

import ctxengine
from offline_tiktoken import TRANSCRIPTS, encoding

SIZE = 4_000_000
CHUNK = 4096
MB = 1 << 20


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


@pytest.mark.parametrize("impl", ["ctxengine", "tiktoken"])
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("kind", ["transcripts", "code"])
def test_count_single_thread(benchmark: Any, kind: str, name: str, impl: str) -> None:
    text = corpus(kind)
    tok, tk = ctxengine.get_tokenizer(name), encoding(name)
    if impl == "ctxengine":
        fn: Callable[[], int] = lambda: tok.count(text, cache=False)  # noqa: E731
    else:
        fn = lambda: len(tk.encode_ordinary(text))  # noqa: E731
    n = run(benchmark, f"count 4MB {kind} {name}", impl, fn, baseline=impl == "tiktoken")
    assert n == len(tk.encode_ordinary(text))


BATCH = {
    "ctxengine count_many": lambda tok, tk, xs: sum(tok.count_many(xs, cache=False)),
    "ctxengine loop of count": lambda tok, tk, xs: sum(tok.count(x, cache=False) for x in xs),
    "tiktoken encode_ordinary_batch(2)": lambda tok, tk, xs: sum(
        map(len, tk.encode_ordinary_batch(xs, num_threads=2))
    ),
}


@pytest.mark.parametrize("impl", BATCH)
@pytest.mark.parametrize("kind", ["transcripts", "code"])
def test_count_batch(benchmark: Any, kind: str, impl: str) -> None:
    xs = chunks(kind)
    tok, tk = ctxengine.get_tokenizer("o200k_base"), encoding("o200k_base")
    group = f"batch {len(xs)} x 4KB {kind} o200k_base"
    n = run(benchmark, group, impl, lambda: BATCH[impl](tok, tk, xs), impl.endswith("count"))
    assert n == sum(len(ids) for ids in tk.encode_ordinary_batch(xs))


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
