"""`ctxengine snapshots`, `restore`, `context list|detail` on sessions a real engine stored."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxengine import FileStore, RedisStore
from ctxengine.cli import main
from ctxengine.store.snapshot import payload_hash
from stored_sessions import BUDGET, COMPACT_AT, MODEL, Made, write_session

COMMANDS = ("snapshots", "restore", "context list", "context detail")


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Made]:
    root = tmp_path_factory.mktemp("store")
    store = FileStore(root)
    made = write_session(store, "agent-1")
    write_session(store, "unrendered", turns=3, render=False)
    write_session(store, "stale", turns=2)
    write_session(store, "stale", turns=1, render=False)  # resumed: one more turn, no render
    store.close()
    return root, made


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    status, out, err = _run(capsys, *argv, "--json")
    assert status == 0, err
    return json.loads(out)


# -- snapshots -----------------------------------------------------------------------------------


def test_snapshots_lists_one_per_render_with_its_payload_hash(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, made = stored
    data = _json(capsys, "snapshots", "agent-1", "--store", str(root))
    rows = data["snapshots"]
    assert len(rows) == len(made.renders) == 12
    assert [r["turn"] for r in rows] == list(range(12))
    assert [r["payload_hash"] for r in rows] == [payload_hash(r.payload) for r in made.renders]
    assert [r["tokens"] for r in rows] == [r.tokens for r in made.renders]
    assert {r["budget"] for r in rows} == {BUDGET} and {r["model"] for r in rows} == {MODEL}
    assert all(r["ok"] for r in rows) and data["damaged"] == 0 and data["problems"] == []
    assert set(rows[0]) == {  # the keys docs/cli.md lists
        *("n", "id", "turn", "created_at", "time", "tokens", "budget", "model", "provider"),
        *("payload_hash", "content_hash", "size", "leaf_id", "ok", "pruned", "problem"),
        "core_memory",
    }
    assert set(data) == {"session", "store", "snapshots", "damaged", "pruned", "drift", "problems"}


def test_snapshots_show_the_summary_drift_at_each_compaction(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    data = _json(capsys, "snapshots", "agent-1", "--store", str(root))
    hashes = [r["core_memory"]["hash"] for r in data["snapshots"]]
    changed = [i for i in range(1, len(hashes)) if hashes[i] != hashes[i - 1]]
    # the summary appears, then is rewritten: at the explicit compactions, and at the renders
    # whose plan passed the high-water mark
    assert set(COMPACT_AT) <= set(changed), changed
    assert hashes[0] is None and data["snapshots"][0]["core_memory"]["chars"] == 0
    drift = data["drift"]
    assert [(d["before_turn"], d["after_turn"]) for d in drift] == [(i - 1, i) for i in changed]
    assert {d["node_id"] for d in drift} == {"mem.summary"}
    assert drift[0]["chars_before"] == 0 and drift[1]["chars_before"] == drift[0]["chars_after"]
    assert 0 < drift[1]["similarity"] < 1


def test_snapshots_lists_pruned_snapshots_from_their_index_lines(
    stored: tuple[Path, Made], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that pruned the content of old snapshots still lists every render with its
    turn, tokens, payload hash and summary, says which were pruned, and shows the drift
    between the snapshots it kept."""
    root, _ = stored
    store = FileStore(tmp_path, keep_snapshots=3, keep_compactions=1)
    made = write_session(store, "agent-1")
    store.close()
    data = _json(capsys, "snapshots", "agent-1", "--store", str(tmp_path))
    rows = data["snapshots"]
    assert len(rows) == len(made.renders) == 12
    assert data["pruned"] == 8 and sum(r["pruned"] for r in rows) == 8
    assert all(r["ok"] for r in rows) and data["damaged"] == 0 and data["problems"] == []
    kept = [r["turn"] for r in rows if not r["pruned"]]
    assert kept[1:] == [9, 10, 11]  # the newest 3, after the first snapshot of a compaction
    every = _json(capsys, "snapshots", "agent-1", "--store", str(root))["snapshots"]
    for field in ("turn", "tokens", "budget", "payload_hash"):  # the same session, all kept
        assert [r[field] for r in rows] == [r[field] for r in every], field
    memory = [(m["chars"], m["hash"]) for m in (r["core_memory"] for r in rows)]
    assert memory == [(m["chars"], m["hash"]) for m in (r["core_memory"] for r in every)]
    assert [(d["before_turn"], d["after_turn"]) for d in data["drift"]] == [
        (a, b) for a, b in itertools.pairwise(kept) if memory[a] != memory[b]
    ]
    status, out, _ = _run(capsys, "snapshots", "agent-1", "--store", str(tmp_path))
    assert status == 0
    lines = [x for x in out.splitlines() if x.split()[:1] in ([str(r["turn"])] for r in rows)]
    assert [line.split()[-1] for line in lines] == [
        "kept" if not r["pruned"] else "pruned" for r in rows
    ]


def test_a_damaged_snapshot_is_listed_and_warned_about_never_fatal(
    stored: tuple[Path, Made], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, made = stored
    copy = tmp_path / "store"
    _copy_tree(root, copy)
    session = copy / "sessions" / "agent-1"
    index = [json.loads(line) for line in (session / "snapshots.jsonl").read_text().splitlines()]
    (session / "objects" / f"{index[-1]['hash']}.json").write_text('{"half": ')
    with (session / "snapshots.jsonl").open("a") as f:
        f.write('{"id": "torn')  # a write that died half way
    status, out, err = _run(capsys, "snapshots", "agent-1", "--store", str(copy), "--json")
    assert status == 0
    rows = json.loads(out)["snapshots"]
    assert len(rows) == 12 and [r["ok"] for r in rows] == [True] * 11 + [False]
    assert "damaged" in rows[-1]["problem"]
    assert "last line is torn" in err and f"snapshot 12 ({index[-1]['id']}) skipped" in err
    assert err.count("\n") == 2  # one line per problem
    # restore falls back to the snapshot before and replays the messages after it
    data = _json(capsys, "restore", "agent-1", "--store", str(copy))
    assert data["restored_from"]["snapshot"] == index[-2]["id"]
    assert data["payload"] == made.last.payload


def _copy_tree(src: Path, dst: Path) -> None:
    import shutil

    shutil.copytree(src, dst)


# -- restore -------------------------------------------------------------------------------------


def test_restore_gives_the_last_rendered_payload_at_the_recorded_model_and_budget(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, made = stored
    data = _json(capsys, "restore", "agent-1", "--store", str(root))
    assert data["payload"] == made.last.payload
    assert data["payload_hash"] == payload_hash(made.last.payload)
    assert data["same_as_snapshot"] is True
    assert data["report"]["model"] == MODEL and data["report"]["budget"] == BUDGET
    assert data["restored_from"]["turn"] == 11
    assert data["tokens"] == made.last.tokens
    # the same grains but those the last render summarized (restored, they are the summary)
    assert sorted(g["node_id"] for g in data["report"]["grains"]) == sorted(
        g.node_id for g in made.last.report.grains if g.stage != "compaction"
    )


def test_restore_with_every_snapshot_content_lost_keeps_the_recorded_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every content file of a session's snapshots gone (objects/ emptied): restore fell back
    to gpt-4o and its whole window, though the index lines record the model, budget and
    provider; it takes them from the newest index line."""
    store = FileStore(tmp_path)
    made = write_session(store, "s", turns=2)
    store.close()
    for content in (tmp_path / "sessions" / "s" / "objects").glob("*.json"):
        content.unlink()
    data = _json(capsys, "restore", "s", "--store", str(tmp_path))
    assert data["report"]["model"] == MODEL and data["report"]["budget"] == BUDGET
    assert data["restored_from"]["snapshot"] is None
    assert data["payload"] == made.last.payload


def test_restore_at_another_budget_and_provider_says_it_differs(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    argv = ("restore", "agent-1", "--store", str(root), "--budget", "1200")
    data = _json(capsys, *argv, "--provider", "anthropic")
    assert data["same_as_snapshot"] is False
    assert data["report"]["budget"] == 1200 and data["tokens"] <= 1200
    assert data["report"]["provider"] == "anthropic" and "messages" in data["payload"]
    status, out, _ = _run(capsys, *argv)
    assert status == 0
    assert "differs from the last snapshot's" in out
    assert "session agent-1 restored (last snapshot: turn 11" in out


def test_restore_prints_the_messages_readably(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, made = stored
    status, out, err = _run(capsys, "restore", "agent-1", "--store", str(root))
    assert status == 0 and err == ""
    assert "the payload equals the last snapshot's" in out
    messages = made.last.transcript.messages
    assert f"[{len(messages)}] {messages[-1].role}" in out
    assert "[Summary of the earlier conversation" in out  # the compaction summary
    assert "→ read(" in out and "← toolu_0111ReadTheModuleSourceFile: def f11(x):" in out
    assert "chars] …" in out  # long texts previewed; --full prints them whole
    _, full, _ = _run(capsys, "restore", "agent-1", "--store", str(root), "--full")
    assert "chars] …" not in full and len(full) > len(out)


# -- context -------------------------------------------------------------------------------------


def test_context_list_totals_equal_the_report(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, made = stored
    report = made.last.report
    data = _json(capsys, "context", "list", "agent-1", "--store", str(root))
    assert data["source"]["kind"] == "snapshot" and data["turn"] == 11
    assert data["tokens"] == report.tokens
    windows = data["windows"]
    assert sum(w["tokens"] for w in windows) + data["framing"] == report.tokens
    used = {w["window"]: w["used"] for w in report.windows if w["used"]}
    assert {w["window"]: w["tokens"] for w in windows if w["tokens"]} == used
    for w in windows:
        assert sum(o["tokens"] for o in w["origins"]) == w["tokens"]
        assert sum(o["grains"] for o in w["origins"]) == w["grains"]
    assert sum(w["grains"] for w in windows) == len(report.grains)
    assert data["counts"] == report.counts()
    origins = {(w["window"], o["origin"]) for w in windows for o in w["origins"]}
    assert ("core_memory", "compaction") in origins and ("tool", "transcript") in origins
    assert "grains" not in data  # that is what detail adds


def test_context_detail_has_a_row_for_every_item_of_the_report(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, made = stored
    data = _json(capsys, "context", "detail", "agent-1", "--store", str(root))
    rows = data["grains"]
    expected = made.last.report.grains
    assert [r["node_id"] for r in rows] == [g.node_id for g in expected]
    for row, g in zip(rows, expected, strict=True):
        assert (row["origin"], row["window"], row["decision"], row["reason"]) == (
            g.origin,
            g.window,
            g.decision,
            g.reason,
        )
        assert (row["tokens_before"], row["tokens_after"]) == (g.tokens_before, g.tokens_after)
        if g.stage != "compaction":  # a summarized item is no longer in the state
            assert isinstance(row["priority"], int) and row["lifespan"] == "session"
    assert {r["decision"] for r in rows} > {"kept"}  # and something cut


def test_context_render_rebuilds_the_same_window_as_the_snapshot(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    snap = _json(capsys, "context", "detail", "agent-1", "--store", str(root))
    fresh = _json(capsys, "context", "detail", "agent-1", "--store", str(root), "--render")
    assert fresh["source"]["kind"] == "render" and snap["source"]["kind"] == "snapshot"

    def by_id(view: dict[str, Any]) -> list[dict[str, Any]]:
        return sorted(view["grains"], key=lambda g: str(g["node_id"]))

    def kept(view: dict[str, Any]) -> list[dict[str, Any]]:  # the snapshot's render compacted
        return [g for g in by_id(view) if g["stage"] != "compaction"]

    assert kept(fresh) == kept(snap) and fresh["tokens"] == snap["tokens"]
    assert [(w["window"], w["tokens"]) for w in fresh["windows"]] == [
        (w["window"], w["tokens"]) for w in snap["windows"]
    ]


def test_context_says_when_messages_came_after_the_snapshot(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    assert _json(capsys, "context", "list", "agent-1", "--store", str(root))["source"] == {
        "kind": "snapshot",
        "snapshot": _json(capsys, "snapshots", "agent-1", "--store", str(root))["snapshots"][-1][
            "id"
        ],
        "newer": False,
    }
    old = _json(capsys, "context", "detail", "stale", "--store", str(root))
    new = _json(capsys, "context", "detail", "stale", "--store", str(root), "--render")
    assert old["source"]["newer"] is True and new["source"]["kind"] == "render"
    assert len(new["grains"]) > len(old["grains"]) and new["tokens"] > old["tokens"]
    status, out, _ = _run(capsys, "context", "list", "stale", "--store", str(root))
    assert status == 0 and "messages were stored after this snapshot; --render" in out


def test_context_of_a_session_never_rendered_restores_and_renders_it(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    data = _json(capsys, "context", "list", "unrendered", "--store", str(root), "--budget", "900")
    assert data["source"] == {"kind": "render", "snapshot": None, "newer": False}
    assert data["budget"] == 900 and 0 < data["tokens"] <= 900
    assert sum(w["tokens"] for w in data["windows"]) + data["framing"] == data["tokens"]
    snaps = _json(capsys, "snapshots", "unrendered", "--store", str(root))
    assert snaps["snapshots"] == []  # nothing was written by the render


def test_tables_fit_80_columns(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    for command in COMMANDS:
        status, out, err = _run(capsys, *command.split(), "agent-1", "--store", str(root))
        assert status == 0, err
        assert max(len(line) for line in out.splitlines()) <= 80, command
    _, detail, _ = _run(capsys, "context", "detail", "agent-1", "--store", str(root))
    assert "act.tool_result.toolu_0111ReadTheModule" in detail  # whole ids: rows stay distinct
    assert "dropped [compaction]: summarized into" in detail  # decisions with their reasons
    for stage in ("soft", "hard"):  # a stage its reason names is said once
        assert f"{stage} trim:" not in detail or f"[{stage}]" not in detail


# -- the store option and errors -----------------------------------------------------------------


def test_the_default_store_is_the_env_variable_else_dot_ctxengine(
    stored: tuple[Path, Made], tmp_path: Path, child_env: dict[str, str]
) -> None:
    root, made = stored
    argv = [sys.executable, "-m", "ctxengine", "snapshots", "agent-1", "--json"]
    env = {k: v for k, v in child_env.items() if k != "CTXENGINE_STORE"}
    by_env = subprocess.run(
        argv, env={**env, "CTXENGINE_STORE": str(root)}, capture_output=True, text=True
    )
    assert by_env.returncode == 0, by_env.stderr
    assert len(json.loads(by_env.stdout)["snapshots"]) == len(made.renders)
    _copy_tree(root, tmp_path / ".ctxengine")
    in_cwd = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert in_cwd.returncode == 0, in_cwd.stderr
    assert json.loads(in_cwd.stdout)["store"] == ".ctxengine"
    missing = subprocess.run(argv, env=env, cwd=tmp_path / ".ctxengine", capture_output=True)
    assert missing.returncode == 2
    assert missing.stderr.decode() == (
        "error: no store at .ctxengine: the folder does not exist; expected a store folder "
        "(see --store, $CTXENGINE_STORE)\n"
    )


BAD = {
    "unknown session": (
        ["snapshots", "nobody"],
        "no session 'nobody' in the store {root} (it holds agent-1, stale, unrendered)",
    ),
    "path traversal": (["restore", "../agent-1"], "session id '../agent-1' is not allowed"),
    "empty id": (["context", "list", ""], "session id must be 1 to 128 characters"),
    "unknown scheme": (
        ["context", "detail", "agent-1", "--store", "s3://bucket/x"],
        "--store s3://bucket/x: unknown scheme 's3'",
    ),
    "store is a file": (
        ["snapshots", "agent-1", "--store", "{root}/sessions/agent-1/snapshots.jsonl"],
        "exists and is not a directory",
    ),
    "bad budget": (["restore", "agent-1", "--budget", "0"], "'0' is not a token count"),
    "unknown model": (["restore", "agent-1", "--model", "llama-3"], "unknown model or encoding"),
    # 20 tokens: the latest request alone does not fit (at 50 it does, and the summary is
    # shortened or cut to the room it leaves: the summary never causes a BudgetError)
    "budget too small": (
        ["context", "list", "agent-1", "--render", "--budget", "20"],
        "protected items alone need 20 tokens but the budget of 20",
    ),
    "unknown provider": (["restore", "agent-1", "--provider", "bard"], "invalid choice: 'bard'"),
    # '--store "$STORE"' with STORE unset read $CTXENGINE_STORE or ./.ctxengine instead, and
    # the message named that store, not the empty option
    "empty store": (
        ["snapshots", "agent-1", "--store", ""],
        "--store '': an empty name; expected a store folder or a redis:// URL",
    ),
    "redis down": (
        ["snapshots", "agent-1", "--store", "redis://127.0.0.1:1/0"],
        "Connection refused",
    ),
    # an option redis-py does not take was an internal error (TypeError, exit status 1) at the
    # first command, and a password in the URL was not masked in it
    "unknown redis url option": (
        ["context", "list", "agent-1", "--store", "redis://:pw@127.0.0.1:1/0?timeout=5"],
        "invalid Redis URL 'redis://:***@127.0.0.1:1/0?timeout=5': unknown option 'timeout'",
    ),
    "unknown option beside a prefix": (
        ["restore", "agent-1", "--store", "redis://127.0.0.1:1/0?prefix=app&db_name=x"],
        "unknown option 'db_name'",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_user_errors_are_one_line_on_stderr_with_status_2(
    case: str, stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    argv, expected = BAD[case]
    argv = [a.format(root=root) for a in argv]
    if "--store" not in argv:
        argv += ["--store", str(root)]
    status, out, err = _run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert expected.format(root=root) in err


def test_debug_shows_the_traceback(
    stored: tuple[Path, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = stored
    status, _, err = _run(capsys, "restore", "nobody", "--store", str(root), "--debug")
    assert status == 2 and "Traceback (most recent call last)" in err and "UsageError" in err


def test_a_redis_url_without_the_redis_package_is_one_clear_line(
    child_env: dict[str, str],
) -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"  # as if the extra were not installed
        "from ctxengine.cli import main\n"
        "sys.exit(main(['snapshots', 's', '--store', 'rediss://me:secret@db.example:6380/1']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=child_env, capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        "error: --store rediss://me:***@db.example:6380/1: a Redis store needs the redis "
        "package; install it with: pip install 'ctxengine[redis]'\n"
    )


# -- on Redis ------------------------------------------------------------------------------------


@pytest.fixture
def on_redis(redis_url: str) -> Iterator[tuple[str, Made]]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    store = RedisStore(redis_url, prefix=prefix)
    made = write_session(store, "worker.7")
    sep = "&" if "?" in redis_url else "?"
    yield f"{redis_url}{sep}prefix={prefix}", made
    store.delete("worker.7")
    store.close()


def test_the_commands_read_a_redis_store(
    on_redis: tuple[str, Made], capsys: pytest.CaptureFixture[str]
) -> None:
    url, made = on_redis
    snaps = _json(capsys, "snapshots", "worker.7", "--store", url)
    assert len(snaps["snapshots"]) == len(made.renders)
    assert [r["payload_hash"] for r in snaps["snapshots"]] == [
        payload_hash(r.payload) for r in made.renders
    ]
    restored = _json(capsys, "restore", "worker.7", "--store", url)
    assert restored["payload"] == made.last.payload and restored["same_as_snapshot"] is True
    listed = _json(capsys, "context", "list", "worker.7", "--store", url)
    assert sum(w["tokens"] for w in listed["windows"]) + listed["framing"] == made.last.tokens
    detail = _json(capsys, "context", "detail", "worker.7", "--store", url)
    assert [g["node_id"] for g in detail["grains"]] == [g.node_id for g in made.last.report.grains]
    # the default prefix holds no such session: the prefix in the URL is what found it
    status, _, err = _run(capsys, "snapshots", "worker.7", "--store", url.split("?")[0])
    assert status == 2 and "no session 'worker.7'" in err


def _add_future_snapshot(store: FileStore, session_id: str) -> str:
    """A snapshot a newer ctxengine wrote: another schema, other shapes."""
    last = store.load_snapshot(session_id)
    assert last is not None
    content = dict(last.content, schema="ctxengine.snapshot/9", core_memory=["x"], grains=7)
    content["state"] = dict(content["state"], version=99)
    return store.write_snapshot(session_id, content, meta=dict(last.info.meta)).id


def test_a_snapshot_of_a_newer_schema_is_named_not_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = FileStore(tmp_path)
    made = write_session(store, "s", turns=3)
    future = _add_future_snapshot(store, "s")
    data = _json(capsys, "snapshots", "s", "--store", str(tmp_path))  # AttributeError before
    rows = data["snapshots"]
    assert [r["ok"] for r in rows] == [True] * (len(rows) - 1) + [False]
    assert rows[-1]["id"] == future
    assert (
        "has schema 'ctxengine.snapshot/9' (written by a newer ctxengine?)" in rows[-1]["problem"]
    )
    assert "ctxengine.snapshot/2" in rows[-1]["problem"]
    view = _json(capsys, "context", "list", "s", "--store", str(tmp_path))
    assert view["source"]["kind"] == "render" and sum(view["counts"].values()) > 0
    assert any("ctxengine.snapshot/9" in p for p in view["problems"])  # not 0 grains, silently
    restored = _json(capsys, "restore", "s", "--store", str(tmp_path))
    assert restored["payload"] == made.last.payload  # its state unreadable: rebuilt, the same
