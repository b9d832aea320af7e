"""Step 1 of the pipeline: key state is appended to ``memory/YYYY-MM-DD.md`` of the configured
memory folder before anything is summarized, once per compaction, durably, and the memory
store finds it afterwards."""

from __future__ import annotations

import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from ctxengine import Budget, ContextEngine, MemoryStore
from ctxengine.compaction import CompactionConfig, compact, compact_history, message_tokens
from ctxengine.memory.daily import append_daily
from ctxengine.tokens import get_tokenizer
from ctxengine.transcript import Message

from .helpers import Failing
from .test_engine_compaction import request, rules, turn

WHEN = datetime(2026, 3, 7, 14, 5)
COUNT = get_tokenizer("o200k_base").count
BLOCK = re.compile(r"^## \d\d:\d\d compaction of (\d+) messages$", re.M)


def _blocks(folder: Path) -> list[str]:
    path = folder / "memory" / "2026-03-07.md"
    return BLOCK.findall(path.read_text(encoding="utf-8")) if path.exists() else []


def test_every_engine_compaction_writes_one_block_the_memory_store_finds(tmp_path: Path) -> None:
    config = CompactionConfig(memory_dir=tmp_path, clock=lambda: WHEN)
    attempts: list[dict[str, Any]] = []

    async def main() -> None:
        engine = ContextEngine("gpt-4o", Budget(total=2000), compaction=config)
        async with engine.session("s") as s:
            s.add(rules())
            for i in range(60):
                await turn(s, i)
                out = await s.render("openai")
                attempts.extend(out.report.compactions)

    anyio.run(main)
    assert len(attempts) >= 3 and all(a["ok"] for a in attempts)
    log = tmp_path / "memory" / "2026-03-07.md"
    assert all(a["memory_file"] == str(log) for a in attempts)
    # one block per compaction, in order, each naming how many messages it summarized
    assert [int(n) for n in _blocks(tmp_path)] == [a["messages"] for a in attempts]
    # the memory plugin's store finds the flushed key state: a summarized request and the
    # failure of a tool call (request 7's test failed with exit code 1)
    store = MemoryStore(tmp_path)
    hits = store.search(request(7), k=3)
    assert hits and hits[0].source == "memory/2026-03-07.md"
    assert request(7) in hits[0].text
    failed = store.search("bash exit=1 test_7", k=3)
    assert any("Failed: bash exit=1" in h.text and "test_7" in h.text for h in failed)


def test_no_memory_folder_no_file(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        engine = ContextEngine("gpt-4o", Budget(total=1500))
        async with engine.session("s") as s:
            for i in range(40):
                await turn(s, i)
                out = await s.render("openai")
                if out.report.compactions:
                    return out.report.compactions[0]
        raise AssertionError("no compaction ran")

    entry = anyio.run(main)
    assert entry["memory_file"] is None
    assert not list(tmp_path.rglob("*.md"))


@pytest.mark.anyio
async def test_the_flush_comes_before_the_summarizer_and_stays_when_it_fails(
    tmp_path: Path,
) -> None:
    seen: list[list[str]] = []

    class Watching:
        async def summarize(self, messages: Any, *, instructions: str, max_tokens: int) -> str:
            seen.append(_blocks(tmp_path))  # what the memory file held when it was called
            raise RuntimeError("model unavailable")

    history = [Message.user(f"request {i}: update src/mod_{i}.py") for i in range(6)]
    config = CompactionConfig(memory_dir=tmp_path, clock=lambda: WHEN, chunk_retries=0)
    result = await compact(history, max_tokens=500, summarizer=Watching(), config=config)
    assert not result.ok and seen and seen[0] == ["6"]  # written before the first call
    assert _blocks(tmp_path) == ["6"]  # once, not again for the gate retry or the fallbacks
    failing = await compact(history, max_tokens=500, summarizer=Failing(), config=config)
    assert not failing.ok and _blocks(tmp_path) == ["6", "6"]


@pytest.mark.anyio
async def test_repeated_compact_history_writes_one_block_per_compaction(tmp_path: Path) -> None:
    config = CompactionConfig(memory_dir=tmp_path, clock=lambda: WHEN)
    history: list[Message] = [Message.system("Be brief.")]
    sizes = []
    for i in range(120):
        history += [Message.user(f"do step {i} " + "x " * 40), Message.assistant(f"step {i}")]
        if sum(message_tokens(history, COUNT)) > 1500:
            result = await compact_history(history, budget=1500, config=config)
            assert result.ok, result.error
            sizes.append(len(result.replaced))
            history = list(result.history)
    assert len(sizes) >= 3
    assert [int(n) for n in _blocks(tmp_path)] == sizes


def test_the_block_is_written_whole_then_fsynced_file_then_folder(
    tmp_path: Path, monkeypatch: Any
) -> None:
    calls: list[tuple[str, Any]] = []
    real_write, real_fsync = os.write, os.fsync

    def write(fd: int, data: Any) -> int:
        calls.append(("write", bytes(data)))
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        calls.append(("fsync", stat.S_ISDIR(os.fstat(fd).st_mode)))
        real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    block = "## 14:05 compaction of 3 messages\n- Latest request: " + "é" * 5000
    path = append_daily(tmp_path, block, WHEN)
    # one write of the new file, its fsync, then its folder's (which holds its new name)
    assert calls == [("write", (block + "\n").encode()), ("fsync", False), ("fsync", True)]
    calls.clear()
    append_daily(tmp_path, "## 14:06 compaction of 4 messages", WHEN)
    assert calls == [
        ("write", (block + "\n\n## 14:06 compaction of 4 messages\n").encode()),
        ("fsync", False),
        ("fsync", True),
    ]
    assert path.read_text(encoding="utf-8").count("compaction of") == 2
