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


def test_a_long_term_fact_is_written_whole_fsynced_then_renamed_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MEMORY.md was written through a buffered file and never fsynced: a crash after
    # add_long_term returned could lose the fact; then appended in place, where a crash in
    # the middle of the write left part of the block, read back as a fact of its own
    calls: list[tuple[str, Any]] = []
    real_write, real_fsync, real_replace = os.write, os.fsync, os.replace

    def write(fd: int, data: Any) -> int:
        calls.append(("write", bytes(data)))
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        calls.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    store = MemoryStore(tmp_path / "mem")
    path = store.add_long_term("Deploys go through the release branch.")
    tmp = calls[1][1]
    assert re.fullmatch(rf"{re.escape(str(path.parent))}/\.MEMORY\.md\.\d+\.[0-9a-f]+\.tmp", tmp)
    assert calls == [
        ("write", b"Deploys go through the release branch.\n"),
        ("fsync", tmp),  # the whole new file, before it takes the name
        ("replace", "MEMORY.md"),
        ("fsync", str(path.parent)),  # then the folder, which holds the name
    ]
    calls.clear()
    store.add_long_term("Never on Fridays.")
    assert calls[0] == (
        "write",
        b"Deploys go through the release branch.\n\nNever on Fridays.\n",
    )
    assert [c[0] for c in calls] == ["write", "fsync", "replace", "fsync"]
    assert sorted(os.listdir(path.parent)) == ["MEMORY.md"]


@pytest.mark.parametrize("log", ["MEMORY.md", "memory/2026-03-07.md"])
def test_a_write_that_fails_midway_leaves_the_file_as_it_was_and_nothing_else(
    tmp_path: Path, log: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # appended in place, a write cut short (a full disk, a crash) left part of the block at
    # the file's end, read back by every search as a fact
    path = tmp_path / log
    path.parent.mkdir(parents=True, exist_ok=True)
    before = b"# Notes\n\nDeploys go through the release branch.\n"
    path.write_bytes(before)
    real_write = os.write

    def half_then_fail(fd: int, data: Any) -> int:
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    store = MemoryStore(tmp_path)
    write = _writes(store)[0 if log == "MEMORY.md" else 1]
    with pytest.raises(OSError, match="No space left"):
        write("The staging database is db-02, reached through the bastion host.")
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from ctxengine.memory import MemoryStore
real_fsync = os.fsync
def fsync(fd):
    if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
        os.kill(os.getpid(), signal.SIGKILL)  # the new file written, not yet renamed
    real_fsync(fd)
os.fsync = fsync
MemoryStore(Path(sys.argv[1])).add_long_term("A fact the crash must not half-write.")
"""


def test_a_writer_killed_before_its_rename_leaves_the_file_whole_and_the_next_write_cleans_up(
    tmp_path: Path,
) -> None:
    import signal
    import subprocess
    import sys

    path = tmp_path / "MEMORY.md"
    before = b"Deploys go through the release branch.\n"
    path.write_bytes(before)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], env=env, capture_output=True
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert path.read_bytes() == before
    left = [n for n in os.listdir(tmp_path) if n != "MEMORY.md"]
    assert len(left) == 1 and left[0].endswith(".tmp")  # what the killed writer left
    MemoryStore(tmp_path).add_long_term("Never on Fridays.")
    assert os.listdir(tmp_path) == ["MEMORY.md"]
    assert split_entries(path.read_text(encoding="utf-8")) == [
        "Deploys go through the release branch.",
        "Never on Fridays.",
    ]


def test_a_memory_file_that_is_a_link_is_written_where_it_leads_and_keeps_its_mode(
    tmp_path: Path,
) -> None:
    real = tmp_path / "dotfiles" / "memory-notes.md"
    real.parent.mkdir()
    real.write_text("Deploys go through the release branch.\n", encoding="utf-8")
    real.chmod(0o600)
    (tmp_path / "mem").mkdir()
    link = tmp_path / "mem" / "MEMORY.md"
    link.symlink_to(real)
    MemoryStore(tmp_path / "mem").add_long_term("Never on Fridays.")
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.stat().st_mode & 0o777 == 0o600
    assert split_entries(link.read_text(encoding="utf-8")) == [
        "Deploys go through the release branch.",
        "Never on Fridays.",
    ]


@pytest.mark.parametrize("mode", [0o664, 0o640, 0o600], ids=oct)
def test_a_rewrite_keeps_the_file_mode_whatever_the_umask(tmp_path: Path, mode: int) -> None:
    """The new file is created with ``os.open(..., mode)``, which the umask takes bits off: a
    group-writable MEMORY.md (a team's shared notes) lost its group write at the first fact
    added under the usual umask 022, and the next writer of the group was refused."""
    path = tmp_path / "MEMORY.md"
    path.write_text("Deploys go through the release branch.\n", encoding="utf-8")
    path.chmod(mode)
    umask = os.umask(0o022)
    try:
        MemoryStore(tmp_path).add_long_term("Never on Fridays.")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == mode
    assert split_entries(path.read_text(encoding="utf-8"))[-1] == "Never on Fridays."


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


_ADDER = """
import sys
from pathlib import Path
from ctxengine.memory import MemoryStore
store = MemoryStore(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    store.add_long_term(f"fact {sys.argv[2]}-{i}")
"""


def test_processes_and_threads_adding_at_once_each_keep_every_entry(tmp_path: Path) -> None:
    """A rename takes the file's name from under a writer that opened it: each write holds
    the folder's lock from its read to its rename, so none is written over."""
    import subprocess
    import sys
    import threading

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen([sys.executable, "-c", _ADDER, str(tmp_path), f"p{k}", "40"], env=env)
        for k in range(3)
    ]
    store = MemoryStore(tmp_path)

    def add(k: int) -> None:
        for i in range(40):
            store.add_long_term(f"fact t{k}-{i}")

    threads = [threading.Thread(target=add, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [c.wait(timeout=120) for c in children] == [0, 0, 0]
    entries = split_entries((tmp_path / "MEMORY.md").read_text(encoding="utf-8"))
    expected = {f"fact {w}-{i}" for w in ("p0", "p1", "p2", "t0", "t1") for i in range(40)}
    assert len(entries) == len(expected) and set(entries) == expected
    assert os.listdir(tmp_path) == ["MEMORY.md"]
