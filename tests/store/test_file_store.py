"""FileStore on disk: line format, torn lines, damaged snapshots, full disk, read-only folder."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxengine.errors import ConfigTypeError, CtxEngineError, StoreError
from ctxengine.store import FileStore, NewEntry
from ctxengine.store.file import STALE_TEMP_SECONDS


def msgs(*texts: str) -> list[NewEntry]:
    return [NewEntry("message", {"text": t}) for t in texts]


def texts(entries) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.data["text"] for e in entries]


def session_dir(root: Path, sid: str = "s1") -> Path:
    return root / "sessions" / sid


def test_each_entry_is_one_complete_json_line(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    a, _b = store.append("s1", msgs("a", "ü ✓"))
    raw = (session_dir(tmp_path) / "transcript.jsonl").read_bytes()
    lines = raw.split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    first, second = (json.loads(x) for x in lines[:2])
    assert first == {
        "id": a.id,
        "parent_id": None,
        "kind": "message",
        "ts": a.ts,
        "batch": 2,  # the first line of an append of several says how many it wrote
        "data": {"text": "a"},
    }
    assert second["parent_id"] == a.id and second["data"]["text"] == "ü ✓"
    assert "batch" not in second
    info = store.write_snapshot("s1", {"k": 1}, meta={"turn": 0})
    index = (session_dir(tmp_path) / "snapshots.jsonl").read_text().splitlines()
    assert [json.loads(x)["hash"] for x in index] == [info.hash]
    obj = session_dir(tmp_path) / "objects" / f"{info.hash}.json"
    assert obj.read_text() == '{"k":1}'
    store.write_snapshot("s1", {"k": 1})  # same content: stored once
    assert len(list((session_dir(tmp_path) / "objects").iterdir())) == 1


def test_a_torn_last_line_is_reported_skipped_and_repaired(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    _a, b = store.append("s1", msgs("a", "b"))
    path = session_dir(tmp_path) / "transcript.jsonl"
    with path.open("ab") as f:  # a process died in the middle of writing an entry
        f.write(b'{"id":"torn","parent_id":"' + b.id.encode() + b'","kind":"mess')
    reopened = FileStore(tmp_path)
    assert texts(reopened.entries("s1")) == ["a", "b"]
    assert len(reopened.problems) == 1 and "torn" in reopened.problems[0].message
    (c,) = reopened.append("s1", msgs("c"))
    assert c.parent_id == b.id  # the torn entry never became the leaf
    again = FileStore(tmp_path)
    assert texts(again.entries("s1")) == ["a", "b", "c"]
    assert len(again.problems) == 1 and "line 3" in again.problems[0].message
    assert path.read_bytes().count(b"\n") == 4  # the torn bytes are a line of their own


def test_a_damaged_middle_line_is_stepped_over_and_the_rest_is_read(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    a, b, c = store.append("s1", msgs("a", "b", "c"))
    (d,) = store.append("s1", msgs("d"))
    path = session_dir(tmp_path) / "transcript.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:30] + b"\xff" + lines[1][31:]  # one byte of b's line is not UTF-8
    path.write_bytes(b"\n".join(lines))
    reopened = FileStore(tmp_path)
    assert texts(reopened.branch("s1")) == ["a", "c", "d"]  # c named b as parent: not lost
    assert reopened.branch("s1")[1].id == c.id and reopened.leaf("s1") == d.id
    said = [str(p) for p in reopened.problems]
    assert len(said) == 2 and all(str(path) in m for m in said), said
    assert "line 2 is not a complete record" in said[0]
    assert f"entry {c.id!r} follows {b.id!r}, which was on the skipped line 2" in said[1]
    assert f"goes on from entry {a.id!r}" in said[1]
    (e,) = reopened.append("s1", msgs("e"))  # the session goes on after it
    assert e.parent_id == d.id and texts(FileStore(tmp_path).branch("s1"))[-2:] == ["d", "e"]


def test_a_damaged_first_line_leaves_the_branch_rooted_at_the_next(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.append("s1", msgs("a", "b"))
    path = session_dir(tmp_path) / "transcript.jsonl"
    path.write_bytes(b"{not json" + path.read_bytes()[path.read_bytes().index(b"\n") :])
    assert texts(FileStore(tmp_path).branch("s1")) == ["b"]


def test_a_complete_last_line_without_newline_counts(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    (a,) = store.append("s1", msgs("a"))
    path = session_dir(tmp_path) / "transcript.jsonl"
    line = json.dumps(
        {"id": "x1", "parent_id": a.id, "kind": "message", "ts": 1.0, "data": {"text": "b"}}
    )
    with path.open("ab") as f:
        f.write(line.encode())  # the newline did not make it
    reopened = FileStore(tmp_path)
    assert texts(reopened.entries("s1")) == ["a", "b"]
    (c,) = reopened.append("s1", msgs("c"))
    assert c.parent_id == "x1"
    assert texts(FileStore(tmp_path).entries("s1")) == ["a", "b", "c"]


def test_garbage_and_duplicate_lines_are_skipped(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    (a,) = store.append("s1", msgs("a"))
    path = session_dir(tmp_path) / "transcript.jsonl"
    first = path.read_text()
    with path.open("a") as f:
        f.write("not json\n" + first + '{"id": "x"}\n')
    reopened = FileStore(tmp_path)
    assert texts(reopened.entries("s1")) == ["a"]
    messages = [p.message for p in reopened.problems]
    assert len(messages) == 3
    assert any(m.startswith("line 2 is not a complete record") for m in messages)
    assert any(m.startswith("line 4 is not a complete record") for m in messages)
    assert any(f"entry {a.id!r} appears twice" in m for m in messages)


@pytest.mark.parametrize("cut", ["inside a line", "at a line's end"])
def test_an_append_cut_short_is_not_taken_as_written(tmp_path: Path, cut: str) -> None:
    """A rewrite (a marker and the new branch, one append) of which only the start reached
    the file, the process killed inside its one write: the session stays on the branch it
    had, not on the rewrite's first entries. Lines without a count (written before it
    existed) are read one by one, as before; a line of a complete append damaged later is
    stepped over like any damaged line."""
    store = FileStore(tmp_path)
    a, _b = store.append("s1", msgs("a", "b"))
    (c,) = store.append("s1", msgs("c"))
    rewrite = [NewEntry("rewrite", {"reason": "truncate"}), *msgs("b2", "c2", "d2")]
    store.append("s1", rewrite, parent_id=a.id)
    path = session_dir(tmp_path) / "transcript.jsonl"
    whole = path.read_bytes()
    lines = whole.split(b"\n")[:-1]
    assert [json.loads(x).get("batch") for x in lines] == [2, None, None, 4, None, None, None]
    torn = [*lines[:5], lines[5][:25] if cut == "inside a line" else b""]
    path.write_bytes(b"\n".join(torn))
    reopened = FileStore(tmp_path)
    assert texts(reopened.branch("s1")) == ["a", "b", "c"]
    assert reopened.leaf("s1") == c.id and texts(reopened.entries("s1")) == ["a", "b", "c"]
    said = [p.message for p in reopened.problems]
    assert any(
        m.startswith("line 4 starts an append of 4 entries of which only 2 reached the file")
        for m in said
    ), said
    (d,) = reopened.append("s1", msgs("d"))  # the session goes on from the branch it had
    assert d.parent_id == c.id
    assert texts(FileStore(tmp_path).branch("s1")) == ["a", "b", "c", "d"]
    # the same lines without "batch", as files written before it hold them: read as before
    old = [json.dumps({k: v for k, v in json.loads(x).items() if k != "batch"}) for x in lines]
    path.write_text("\n".join(old) + "\n")
    kinds = [e.data.get("text", e.kind) for e in FileStore(tmp_path).branch("s1")]
    assert kinds == ["a", "rewrite", "b2", "c2", "d2"]
    path.write_text("\n".join(old[:5]) + "\n")
    kinds = [e.data.get("text", e.kind) for e in FileStore(tmp_path).branch("s1")]
    assert kinds == ["a", "rewrite", "b2"]
    # a line of a complete append damaged later is stepped over, the rest of it is read
    lines[5] = lines[5][:30] + b"\xff" + lines[5][31:]
    path.write_bytes(b"\n".join(lines) + b"\n")
    kinds = [e.data.get("text", e.kind) for e in FileStore(tmp_path).branch("s1")]
    assert kinds == ["a", "rewrite", "b2", "d2"]


@pytest.mark.parametrize("damage", ["unknown", "itself", "a later entry"])
def test_an_entry_whose_parent_id_is_damaged_goes_on_from_the_one_before(
    tmp_path: Path, damage: str
) -> None:
    """Valid JSON whose parent_id names no earlier entry (a flipped digit, its own id, a later
    entry's: a cycle) is relinked to the intact entry before it, as a damaged line is."""
    store = FileStore(tmp_path)
    entries = store.append("s1", msgs("a", "b", "c")) + store.append("s1", msgs("d", "e"))
    path = session_dir(tmp_path) / "transcript.jsonl"
    lines = path.read_text().splitlines()
    k = 0 if damage == "a later entry" else 2
    bad = json.loads(lines[k])
    bad["parent_id"] = {"unknown": bad["id"][:-1] + "x", "itself": bad["id"]}.get(
        damage, entries[-1].id
    )
    lines[k] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    reopened = FileStore(tmp_path)
    assert [e.id for e in reopened.branch("s1")] == [e.id for e in entries]
    said = [p.message for p in reopened.problems]
    assert len(said) == 1 and said[0].startswith(
        f"entry {bad['id']!r} names {bad['parent_id']!r} as its parent, which is no entry"
    ), said
    assert reopened.branch("s1")[k].parent_id == bad["parent_id"]  # stored as it is
    (f,) = reopened.append("s1", msgs("f"))
    assert f.parent_id == entries[-1].id
    assert texts(FileStore(tmp_path).branch("s1")) == ["a", "b", "c", "d", "e", "f"]


def test_a_damaged_line_is_stepped_over_with_another_branchs_entry_after_it(
    tmp_path: Path,
) -> None:
    """a, b, c, then x branching from a, then d after c; c's line damaged. d's parent was lost
    in that hole, with x (another branch) read between: d went on from x, taking the other
    branch's message into its session; it goes on from b, the entry before the hole."""
    store = FileStore(tmp_path)
    a, _, c = (store.append("s1", msgs(t))[0] for t in ("a", "b", "c"))
    store.append("s1", msgs("x"), parent_id=a.id)
    store.append("s1", msgs("d"), parent_id=c.id)
    path = session_dir(tmp_path) / "transcript.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:20] + b"\xff" + lines[2][21:]  # c's line: no longer UTF-8
    path.write_bytes(b"\n".join(lines))
    reopened = FileStore(tmp_path)
    assert texts(reopened.branch("s1")) == ["a", "b", "d"]
    assert any("which was on the skipped line 3" in p.message for p in reopened.problems)


def test_a_transcript_that_is_a_folder_is_a_store_error_naming_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.append("s1", msgs("a"))
    path = session_dir(tmp_path) / "transcript.jsonl"
    path.unlink()
    path.mkdir()
    for call in (
        lambda: FileStore(tmp_path).branch("s1"),
        lambda: FileStore(tmp_path).append("s1", msgs("b")),
        lambda: FileStore(tmp_path).write_snapshot("s1", {"k": 1}),
    ):
        with pytest.raises(StoreError) as got:
            call()
        assert got.value.path == str(path) and got.value.errno == errno.EISDIR
        assert str(path) in str(got.value) and "a folder where the store expects a file" in str(
            got.value
        )


def test_a_damaged_or_missing_snapshot_falls_back_to_the_last_intact(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    good = store.write_snapshot("s1", {"turn": 1})
    half = store.write_snapshot("s1", {"turn": 2, "big": "x" * 1000})
    gone = store.write_snapshot("s1", {"turn": 3})
    objects = session_dir(tmp_path) / "objects"
    p = objects / f"{half.hash}.json"
    p.write_bytes(p.read_bytes()[:300])  # half-written content
    (objects / f"{gone.hash}.json").unlink()
    reopened = FileStore(tmp_path)
    snap = reopened.load_snapshot("s1")
    assert snap is not None and snap.info.id == good.id and snap.content == {"turn": 1}
    assert len(reopened.problems) == 2
    assert "missing" in reopened.problems[0].message
    assert "damaged" in reopened.problems[1].message
    assert "does not match its hash" in reopened.problems[1].message
    with pytest.raises(StoreError, match="damaged"):
        reopened.load_snapshot("s1", half.id)
    # a new write of the damaged content stores it again instead of trusting the bad file
    again = reopened.write_snapshot("s1", {"turn": 2, "big": "x" * 1000})
    latest = reopened.load_snapshot("s1")
    assert latest is not None and latest.info.id == again.id


def test_leftover_temp_files_are_ignored(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    info = store.write_snapshot("s1", {"turn": 1})
    objects = session_dir(tmp_path) / "objects"
    (objects / f".{info.hash}.123.abcd.tmp").write_text('{"turn": 9')  # died before rename
    snap = FileStore(tmp_path).load_snapshot("s1")
    assert snap is not None and snap.content == {"turn": 1}


KILLED_BEFORE_RENAME = (
    "import os, sys\n"
    "from ctxengine.store import FileStore, file\n"
    "store = FileStore(sys.argv[1])\n"
    "store.write_snapshot('s1', {'turn': 1})\n"
    "file.os.replace = lambda *a: os._exit(137)  # killed once the temp file is written\n"
    "store.write_snapshot('s1', {'turn': 2})\n"
)


def test_temp_files_of_killed_writers_are_removed_once_stale(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """A writer killed between writing its temp file and the rename leaves it behind; a store
    opening the session later removes it once it is older than any live write can be, and
    leaves a recent one (another process may be writing it right now) and the snapshots."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_RENAME, str(tmp_path)], env=child_env, check=False
    )
    assert done.returncode == 137
    objects = session_dir(tmp_path) / "objects"
    (left,) = objects.glob(".*.tmp")
    assert json.loads(left.read_text()) == {"turn": 2}  # the whole content, never renamed
    live = objects / f".{'0' * 64}.{os.getpid()}.beef.tmp"
    live.write_text('{"turn": 3')  # a write in progress
    old = left.stat().st_mtime - STALE_TEMP_SECONDS - 60
    os.utime(left, (old, old))
    snap = FileStore(tmp_path).load_snapshot("s1")
    assert snap is not None and snap.content == {"turn": 1}
    assert not left.exists() and live.exists()
    assert [p.name for p in objects.iterdir() if not p.name.startswith(".")] == [
        f"{snap.info.hash}.json"
    ]
    FileStore(tmp_path).append("s1", msgs("after"))  # the recent one stays for its writer
    assert live.exists()


def test_the_next_snapshot_removes_a_killed_writers_temp_file_at_once(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """Every writer holds the index's exclusive flock from creating its temp file to renaming
    it, so a temp file seen under that flock is a killed writer's, however recent: the next
    snapshot of the session removes it (a restarted agent does not leave one per crash for an
    hour), and the snapshots stay readable."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_RENAME, str(tmp_path)], env=child_env, check=False
    )
    assert done.returncode == 137
    objects = session_dir(tmp_path) / "objects"
    (left,) = objects.glob(".*.tmp")  # written a moment ago
    store = FileStore(tmp_path)
    info = store.write_snapshot("s1", {"turn": 3})
    assert not left.exists()
    assert sorted(p.name for p in objects.iterdir()) == sorted(
        f"{i.hash}.json" for i in store.snapshots("s1")
    )
    snap = FileStore(tmp_path).load_snapshot("s1")
    assert snap is not None and snap.info.id == info.id and snap.content == {"turn": 3}


KILLED_BEFORE_INDEX = (
    "import os, sys\n"
    "from ctxengine.store import FileStore\n"
    "store = FileStore(sys.argv[1])\n"
    "store.write_snapshot('s1', {'turn': 1})\n"
    "store.write_snapshot('s1', {'turn': 2})\n"
    "write = FileStore._write_lines\n"
    "def killed(self, lg, fd, lines):  # the content file is in place, its index line is next\n"
    "    if lg.path.name == 'snapshots.jsonl':\n"
    "        os.kill(os.getpid(), 9)\n"
    "    return write(self, lg, fd, lines)\n"
    "FileStore._write_lines = killed\n"
    "store.write_snapshot('s1', {'turn': 3})\n"
)


def test_a_content_file_a_killed_writer_never_indexed_is_removed_by_the_next_snapshot(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """A writer killed between a snapshot's content file and its index line left the content
    file for good: no index line names it, and nothing removed it."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_INDEX, str(tmp_path)], env=child_env, check=False
    )
    assert done.returncode == -signal.SIGKILL
    objects = session_dir(tmp_path) / "objects"
    indexed = {i.hash for i in FileStore(tmp_path).snapshots("s1")}
    (orphan,) = [p for p in objects.glob("*.json") if p.stem not in indexed]
    assert json.loads(orphan.read_text()) == {"turn": 3}  # whole, renamed, never indexed
    store = FileStore(tmp_path)
    reopened = store.load_snapshot("s1")
    assert reopened is not None and reopened.content == {"turn": 2}
    assert orphan.exists()  # reading removes nothing
    store.write_snapshot("s1", {"turn": 1})  # same content as the first: stored once, kept
    latest = store.write_snapshot("s1", {"turn": 4})
    assert not orphan.exists()
    kept = sorted(p.stem for p in objects.glob("*.json"))
    assert kept == sorted(indexed | {latest.hash})
    for info in FileStore(tmp_path).snapshots("s1"):  # every indexed snapshot still loads
        snap = FileStore(tmp_path).load_snapshot("s1", info.id)
        assert snap is not None and snap.info == info


def test_an_unindexed_content_file_newer_than_the_snapshot_is_left(tmp_path: Path) -> None:
    """Only files last written before the snapshot being indexed go: one written later (a
    clock step, a copy put there by hand) is not taken for a killed writer's."""
    store = FileStore(tmp_path)
    store.write_snapshot("s1", {"turn": 1})
    objects = session_dir(tmp_path) / "objects"
    later = objects / f"{'a' * 64}.json"
    later.write_text('{"turn": 9}')
    future = later.stat().st_mtime + 3600
    os.utime(later, (future, future))
    stray = objects / "notes.json"  # not a content file's name: never touched
    stray.write_text("{}")
    old = stray.stat().st_mtime - 3600
    os.utime(stray, (old, old))
    store.write_snapshot("s1", {"turn": 2})
    assert later.exists() and stray.exists()


def test_session_ids_never_leave_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = FileStore(root)
    for bad in ("../evil", "..", "a/../../b", "/abs"):
        with pytest.raises(ValueError, match=r"not allowed|characters"):
            store.append(bad, msgs("x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"] or not root.exists()
    assert not (tmp_path / "evil").exists()


def test_a_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        FileStore(f)


@pytest.mark.parametrize("bad", [5, None, b"state", 2.5])
def test_a_path_that_is_not_a_path_is_a_config_error_naming_it(bad: object) -> None:
    with pytest.raises(ConfigTypeError) as info:
        FileStore(bad)  # type: ignore[arg-type]
    assert isinstance(info.value, CtxEngineError) and isinstance(info.value, TypeError)
    message = str(info.value)
    assert repr(bad) in message and type(bad).__name__ in message
    assert "expected a directory path" in message


def test_processes_sharing_a_directory_append_in_one_chain(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    code = (
        "import sys\n"
        "from ctxengine.store import FileStore, NewEntry\n"
        "s = FileStore(sys.argv[1])\n"
        "for i in range(30):\n"
        "    s.append('shared', [NewEntry('message', {'text': f'{sys.argv[2]}:{i}'})])\n"
    )
    env = child_env
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(w)], env=env)
        for w in range(4)
    ]
    assert [p.wait(120) for p in procs] == [0] * 4
    entries = FileStore(tmp_path).entries("shared")
    assert len(entries) == 120 and len({e.id for e in entries}) == 120
    assert [e.parent_id for e in entries[1:]] == [e.id for e in entries[:-1]]


# -- full disk and read-only folder ---------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def _can_mount(tmp_path: Path) -> bool:
    probe = tmp_path / f"probe-{uuid.uuid4().hex[:6]}"
    try:
        with tmpfs(probe, "16k"):
            return True
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False


def test_full_disk_is_a_clear_error_and_damages_nothing(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    if not _can_mount(tmp_path):
        _full_disk_with_file_size_limit(tmp_path, child_env)
        return
    with tmpfs(tmp_path / "small", "64k") as root:
        store = FileStore(root)
        kept = store.append("s1", msgs("before the disk filled"))
        first = store.write_snapshot("s1", {"turn": 1})
        with pytest.raises(StoreError) as info:
            for i in range(10_000):
                store.append("s1", msgs(f"{i}: " + "x" * 2000))
        err = info.value
        assert err.errno == 28 and "No space left on device" in str(err)
        assert err.path is not None and err.path.endswith("transcript.jsonl")
        assert "disk is full" in str(err)
        with pytest.raises(StoreError, match="No space left") as snap_err:
            store.write_snapshot("s1", {"big": "y" * 200_000})
        assert snap_err.value.errno == 28
        reopened = FileStore(root)
        entries = reopened.entries("s1")
        assert entries[0].id == kept[0].id and len(entries) == len(store.entries("s1"))
        assert reopened.problems == []  # the failed append cut its partial bytes off again
        snap = reopened.load_snapshot("s1")
        assert snap is not None and snap.info.id == first.id
        assert not [p for p in (root / "sessions/s1/objects").iterdir() if p.suffix == ".tmp"]
        # space comes back: the store carries on
        reopened.delete("s1")
        assert FileStore(root).append("s1", msgs("after"))[0].parent_id is None


def test_file_size_limit_is_a_clear_error(tmp_path: Path, child_env: dict[str, str]) -> None:
    _full_disk_with_file_size_limit(tmp_path, child_env)


def _full_disk_with_file_size_limit(tmp_path: Path, child_env: dict[str, str]) -> None:
    """RLIMIT_FSIZE in a child process (SIGXFSZ ignored): also where mounting is not allowed."""
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "from ctxengine.store import FileStore, NewEntry\n"
        "from ctxengine.errors import StoreError\n"
        "s = FileStore(sys.argv[1]); s.append('s1', [NewEntry('m', {'t': 'kept'})])\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        "    [s.append('s1', [NewEntry('m', {'t': 'x' * 500})]) for _ in range(100)]\n"
        "except StoreError as e:\n"
        "    print(e.errno, e)\n"
    )
    env = child_env
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith("27 ") and "File too large" in out
    entries = FileStore(tmp_path).entries("s1")
    assert entries[0].data == {"t": "kept"}


def test_read_only_folder_is_a_clear_error(tmp_path: Path) -> None:
    src = tmp_path / "src"
    store = FileStore(src)
    store.append("s1", msgs("a"))
    info = store.write_snapshot("s1", {"turn": 1})
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True)
    if mounted.returncode == 0:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        cleanup = ["umount", "-l", str(ro)]
        target = ro
    else:  # no mounting here: make the files immutable instead (works for root too)
        subprocess.run(["chattr", "-R", "+i", str(src)], check=True)
        cleanup = ["chattr", "-R", "-i", str(src)]
        target = src
    try:
        readonly = FileStore(target)
        assert texts(readonly.entries("s1")) == ["a"]  # reading still works
        with pytest.raises(StoreError) as err:
            readonly.append("s1", msgs("b"))
        assert err.value.errno in (1, 13, 30) and "read-only or not writable" in str(err.value)
        assert str(target) in str(err.value)
        with pytest.raises(StoreError):
            readonly.write_snapshot("s1", {"turn": 2})
        with pytest.raises(StoreError):
            readonly.append("s2", msgs("new session"))
        snap = readonly.load_snapshot("s1")
        assert snap is not None and snap.info.id == info.id
    finally:
        subprocess.run(cleanup, check=True)
    assert texts(FileStore(src).entries("s1")) == ["a"]


KILLED_DELETE = """
import os, shutil, signal, sys
from pathlib import Path
from ctxengine.store import FileStore

def rmtree(path, *args, **kwargs):  # the process dies inside the removal, one file gone
    os.unlink(Path(path) / "transcript.jsonl")
    os.kill(os.getpid(), signal.SIGKILL)

shutil.rmtree = rmtree
FileStore(sys.argv[1]).delete("s")
"""


def test_a_delete_killed_midway_leaves_no_half_session(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    store = FileStore(tmp_path)
    store.append("s", [NewEntry("message", {"text": "hi"})])
    store.write_snapshot("s", {"turn": 1})
    store.append("keep", [NewEntry("message", {"text": "kept"})])
    done = subprocess.run(
        [sys.executable, "-c", KILLED_DELETE, str(tmp_path)], env=child_env, check=False
    )
    assert done.returncode == -signal.SIGKILL
    again = FileStore(tmp_path)
    assert not again.exists("s")  # its snapshots without its transcript were a session before
    assert again.sessions() == ["keep"]
    assert again.entries("s") == [] and again.load_snapshot("s") is None
    again.append("other", [NewEntry("message", {"text": "x"})])
    assert again.delete("other")  # a later delete removes what the killed one left
    assert sorted(os.listdir(tmp_path / "sessions")) == ["keep"]
    assert [e.data["text"] for e in again.branch("keep")] == ["kept"]
