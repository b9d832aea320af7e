"""Writes to the memory folder: what a memory file can hold, and appends that keep every entry
whole and separate, durably, whatever the file held before."""

from __future__ import annotations

import os
import re
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxengine.compaction import CompactionConfig, compact
from ctxengine.errors import ConfigError, ConfigTypeError, CtxEngineError, EncodingError
from ctxengine.memory import MemoryStore, split_entries
from ctxengine.memory.daily import MAX_TEXT_CHARS
from ctxengine.transcript import Message

WHEN = datetime(2026, 3, 7, 14, 5)


def _writes(store: MemoryStore) -> list[Any]:
    return [store.add_long_term, lambda text: store.remember(text, when=WHEN)]


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        pytest.param("", ConfigError, "memory text is ''; expected some text", id="empty"),
        pytest.param(" \n\t ", ConfigError, "memory text is ' \\n\\t '; expected some", id="blank"),
        pytest.param(
            "key\0value",
            EncodingError,
            "a NUL character at character 3 ('key' before it)",
            id="nul",
        ),
        pytest.param(
            "x" * (MAX_TEXT_CHARS + 1),
            ConfigError,
            f"memory text is {MAX_TEXT_CHARS + 1} characters ('xxxx",
            id="huge",
        ),
    ],
)
def test_text_no_entry_can_be_made_of_is_refused_and_nothing_written(
    tmp_path: Path, text: str, error: type[Exception], message: str
) -> None:
    # a blank text was written as an empty line, a NUL made the file read as binary, and a
    # text of any size was taken (each search reads, splits and embeds all of it)
    store = MemoryStore(tmp_path)
    for write in _writes(store):
        with pytest.raises(error, match=re.escape(message)) as caught:
            write(text)
        assert isinstance(caught.value, CtxEngineError)
    assert store.files() == [] and len(store) == 0


@pytest.mark.parametrize("when", ["../../outside", 20260307, "2026-03-07"])
def test_a_when_that_is_not_a_date_is_refused_naming_it(tmp_path: Path, when: object) -> None:
    # it raised a raw ValueError ("Invalid format specifier") from the file name's format
    store = MemoryStore(tmp_path / "mem")
    with pytest.raises(ConfigTypeError, match=re.escape(f"when is {type(when).__name__} {when!r}")):
        store.remember("a fact", when=when)  # type: ignore[arg-type]
    assert not (tmp_path / "mem").exists() and not (tmp_path / "outside").exists()


def test_the_daily_log_name_is_made_of_the_date_alone(tmp_path: Path) -> None:
    class Hostile(datetime):
        def __format__(self, spec: str) -> str:
            return "../../escaped"

    store = MemoryStore(tmp_path / "mem")
    path = store.remember("a fact", when=Hostile(2026, 3, 7))
    assert path == tmp_path / "mem" / "memory" / "2026-03-07.md"
    assert store.remember("a fact of a day", when=date(2026, 3, 8)).name == "2026-03-08.md"
    assert sorted(p.name for p in tmp_path.rglob("*.md")) == ["2026-03-07.md", "2026-03-08.md"]


@pytest.mark.parametrize("ending", ["", " ", "\r\n", "\n\n\n"])
@pytest.mark.parametrize("log", ["MEMORY.md", "memory/2026-03-07.md"])
def test_an_append_is_an_entry_of_its_own_whatever_the_file_ended_with(
    tmp_path: Path, log: str, ending: str
) -> None:
    # a file edited by hand without a final newline (or left with part of a block by a
    # crash) took the next fact into its last entry: "Deploys go through the release branch"
    # then read "...branch\nThe staging database is db-02", one entry
    path = tmp_path / log
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("# Notes\n\nDeploys go through the release branch" + ending).encode())
    store = MemoryStore(tmp_path)
    for _ in range(2):
        if log == "MEMORY.md":
            store.add_long_term("The staging database is db-02.")
        else:
            store.remember("The staging database is db-02.", when=WHEN)
    assert split_entries(path.read_text(encoding="utf-8")) == [
        "# Notes",
        "Deploys go through the release branch",
        "The staging database is db-02.",
        "The staging database is db-02.",
    ]
    assert path.read_bytes().startswith(
        ("# Notes\n\nDeploys go through the release branch" + ending).encode()
    )


def test_a_long_term_fact_is_written_in_one_append_then_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MEMORY.md was written through a buffered file and never fsynced: a crash after
    # add_long_term returned could lose the fact
    calls: list[tuple[str, Any]] = []
    real_write, real_fsync = os.write, os.fsync

    def write(fd: int, data: bytes) -> int:
        calls.append(("write", data))
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        calls.append(("fsync", (st.st_dev, st.st_ino)))
        real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    store = MemoryStore(tmp_path / "mem")
    path = store.add_long_term("Deploys go through the release branch.")
    folder = path.parent.stat()
    file = path.stat()
    assert calls == [
        ("write", b"Deploys go through the release branch.\n"),
        ("fsync", (file.st_dev, file.st_ino)),
        ("fsync", (folder.st_dev, folder.st_ino)),  # a new file: its folder too
    ]
    calls.clear()
    store.add_long_term("Never on Fridays.")
    assert calls == [("write", b"\nNever on Fridays.\n"), ("fsync", (file.st_dev, file.st_ino))]


@pytest.mark.anyio
async def test_a_nul_in_the_conversation_does_not_reach_the_memory_file(tmp_path: Path) -> None:
    # the flush wrote the NUL of a request (from pasted binary output) into the daily log
    history = [
        Message.user(f"request {i}: parse the header \0\x01 of dump_{i}.bin") for i in range(6)
    ]
    config = CompactionConfig(memory_dir=tmp_path, clock=lambda: WHEN)
    result = await compact(history, max_tokens=500, config=config)
    assert result.ok and "memory_error" not in result.stats
    text = Path(result.stats["memory_file"]).read_text(encoding="utf-8")
    assert "\0" not in text and "parse the header \ufffd\x01 of dump_5.bin" in text
    [hit] = MemoryStore(tmp_path).search("parse the header of dump_5.bin", k=1)
    assert "dump_5.bin" in hit.text
