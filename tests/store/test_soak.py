"""A long session's life, as a user runs it: real agent transcripts fed turn by turn at a tight
budget (many compactions), persisted in a FileStore and in a RedisStore, the process killed
with SIGKILL inside each stage of a turn (storing its messages, rendering, compacting, writing
its snapshot) and at random moments, then reopened.

After every kill:

- the store's branch holds exactly the acknowledged turns, each once, in order, plus at most
  the one turn being played (stored whole: ``ingest`` appends a turn in one write);
- ``engine.restore`` renders within the budget, valid for every provider (hygiene leaves the
  transcript unchanged), and a compaction summary keeps its structured sections and the
  latest request it summarized;
- the store folder holds no temp file or content file no index line names;
- the next child resumes exactly there (it checks its resumed messages itself).

At the end ``ctxengine snapshots`` and ``ctxengine restore`` read the same session. The child is
``soak_child.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from ctxengine.inject.hygiene import clean, validate
from ctxengine.store import FileStore
from ctxengine.store.codec import message_to_json
from ctxengine.store.session_io import resume

sys.path.insert(0, str(Path(__file__).parent))
import soak_child as child

CHILD = Path(child.__file__)
#: (stage, how many turns after the restart the child kills itself in it)
#: Turns of the day (of the ~120 the transcripts give): enough for a dozen compactions.
TURNS = 48
STAGED = [("extend", 5), ("compaction", 3), ("render", 7), ("snapshot", 4)]


def _spawn(spec: str, sid: str, last: int, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), spec, sid, str(last)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _acks(out: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("ACK ")]


def _check_store(
    spec: str, sid: str, acked: int, *, providers: tuple[str, ...], tidy: bool = False
) -> int:
    """Check what the store holds after a kill; returns the number of turns it holds. With
    ``tidy`` (a writer snapshotted since the last kill), that no leftover stays."""
    store = child.open_store(spec)
    try:
        back = resume(store, sid)
        held = [message_to_json(m) for m in back.messages]
        turns = child.turns()
        whole = [k for k in (acked, acked + 1) if k <= TURNS and held == child.stored(k)]
        assert whole, f"store holds {len(held)} messages, not turns 0..{acked - 1} (+1 at most)"
        eng = child.ContextEngine(child.MODEL, child.Budget(total=child.BUDGET), store=store)
        for provider in providers:
            out = asyncio.run(eng.restore(sid, provider=provider))
            assert out.tokens <= child.BUDGET
            assert validate(out.transcript, provider) == []
            assert clean(out.transcript, provider)[0] is out.transcript
        summary = next((g.text for g in out.tree if g.node_id == "mem.summary"), None)
        if summary is not None:  # it keeps the files, the failures and the latest request
            n = int(re.match(r"\[Summary of the earlier conversation: (\d+) messages", summary)[1])
            summarized = [m for t in turns for m in t][:n]
            assert "## Files" in summary and "(latest)" in summary
            if any(r.is_error for m in summarized for r in m.tool_results):
                assert "## Tool Failures" in summary
        eng.close()
        if tidy and isinstance(store, FileStore):
            objects = Path(spec) / "sessions" / sid / "objects"
            left = sorted(p.name for p in objects.iterdir() if not p.name.endswith(".json"))
            assert left == [], f"left behind in {objects}: {left}"
            named = {f"{i.hash}.json" for i in store.snapshots(sid)}
            assert {p.name for p in objects.iterdir()} <= named
        return whole[-1]
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["file", "redis"])
def test_a_long_session_survives_kills_in_every_stage(
    kind: str, tmp_path: Path, child_env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    if kind == "file":
        spec = str(tmp_path / "store")
    else:
        spec = f"{request.getfixturevalue('redis_url')}?prefix=soak{uuid.uuid4().hex[:8]}"
    sid = "day"
    rng = random.Random(kind)
    total = TURNS
    held = 0  # turns the store holds
    for k, (stage, after) in enumerate([*STAGED, ("random", 0)]):
        env = dict(child_env)
        if stage != "random":
            env["DIE"] = f"{stage}:{held + after}"
        proc = _spawn(spec, sid, total, env)
        read: list[int] = []
        if stage == "random":  # a kill at a random moment of a random turn
            assert proc.stdout is not None
            for _ in range(rng.randint(3, 12)):
                read += _acks(proc.stdout.readline())
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, err
        acks = read + _acks(out)
        assert acks == list(range(held, held + len(acks))), err
        if stage != "random":
            assert len(acks) == after  # it died in the turn it was told to
        provider = child.PROVIDERS[k % len(child.PROVIDERS)]  # all four at the end
        held = _check_store(spec, sid, held + len(acks), providers=(provider,))
    assert held < total
    proc = _spawn(spec, sid, total, dict(child_env))  # to the end of the day
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert _acks(out) == list(range(held, total))
    assert _check_store(spec, sid, total, providers=child.PROVIDERS, tidy=True) == total

    def cli(command: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "ctxengine", command, "--store", spec, sid, "--json"],
            env=child_env,
            capture_output=True,
            text=True,
            check=True,
        )
        out = json.loads(done.stdout)
        assert out, done.stdout
        return out

    cli("snapshots")
    cli("restore")
    if kind == "file":
        assert not [p for p in Path(spec).rglob("*") if p.name.endswith(".tmp")]
