"""A snapshot's size follows its render, not the session's history (schema 3, state version 3).

Before, a snapshot held the compaction summary three times and a row (and a ``limited`` entry)
for every history item a render ever left out: an 8k-budget chat of 500 exchanges wrote 58 KB
snapshots for a 24 KB payload, and one with ``max_turns`` grew by about 330 bytes an exchange.
These tests render long sessions, bound the newest snapshot's size, restore them exactly, and
read what the previous version wrote (``data/v2``, made by ``data/make_v2.py``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain, FileStore, Session
from ctxengine.assemble.guard import PruneSettings
from ctxengine.cli import main
from ctxengine.errors import ConfigError, StoreError
from ctxengine.runs import encode_values
from ctxengine.store import Store
from ctxengine.store.base import canonical_json, content_hash
from ctxengine.store.snapshot import GRAIN_FIELDS, SCHEMA, grain_rows, payload_hash
from ctxengine.transcript import Message

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent / "data"


def _exchanges(start: int, n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(start, start + n):
        out.append(Message.user(f"question {i} about module_{i}.py " * 5))
        out.append(Message.assistant(f"answer {i}: " + "lorem ipsum " * 40))
    return out


async def _grow(s: Session, start: int, stop: int, chunk: int = 50) -> Any:
    """Add exchanges ``start``..``stop`` ``chunk`` at a time, a render after each chunk (the
    size of a snapshot depends on the state, not on how many renders built it)."""
    out = None
    for k in range(start, stop, chunk):
        s.extend(_exchanges(k, chunk - 1))
        await s.user_message(f"question {k + chunk - 1} about module_{k}.py " * 5)
        out = await s.render()
        await s.assistant_message(f"answer {k}: " + "lorem ipsum " * 40)
    return out


def _size(store: Store, session_id: str) -> tuple[int, dict[str, Any]]:
    snap = store.load_snapshot(session_id)
    assert snap is not None
    return snap.info.size, dict(snap.content)


def _json_size(value: Any) -> int:
    return len(canonical_json(value).encode())


async def test_a_long_sessions_snapshot_follows_its_render_not_its_history(
    tmp_path: Path,
) -> None:
    """At 1,000 and 2,000 exchanges (many compactions) the newest snapshot is about the size of
    its payload (which holds the summary once); it held the summary three times before."""
    store = FileStore(tmp_path)
    engine = ContextEngine("gpt-4o", Budget(total=8000), store=store)
    sizes = {}
    async with engine.session("long") as s:
        s.add(ContextGrain("mem.notes", "app", "Notes: be brief.", lifespan="session"))
        for start, stop in ((0, 1000), (1000, 2000)):
            out = await _grow(s, start, stop)
            await s.checkpoint()
            size, content = _size(store, "long")
            sizes[stop] = size
            payload = _json_size(out.payload)
            assert content["schema"] == SCHEMA and content["state"]["version"] == 3
            assert s.state.compacted and len(s.state.compacted) > stop  # summarized, many times
            # the summary's text once (in core_memory), the rendered grains' rows, and a state
            # of a few hundred bytes; the summary three times before (2.4 payloads and more)
            assert size < 1.5 * payload, (size, payload)
            assert _json_size(content["state"]) < 2048
    engine.close()
    assert abs(sizes[2000] - sizes[1000]) < 4096, sizes


async def test_a_max_turns_sessions_snapshot_grows_by_a_few_bytes_an_item(
    tmp_path: Path,
) -> None:
    """``max_turns`` drops every older item and the report keeps a row for each, every render;
    the rows repeat one another but their token counts, so each costs a few bytes now (about
    165 before: 330 an exchange)."""
    store = FileStore(tmp_path)
    engine = ContextEngine(
        "gpt-4o", Budget(total=8000), store=store, prune=PruneSettings(max_turns=10)
    )
    sizes = {}
    async with engine.session("limited") as s:
        for start, stop in ((0, 1000), (1000, 2000)):
            out = await _grow(s, start, stop)
            await s.checkpoint()
            sizes[stop], content = _size(store, "limited")
            assert len(s.state.limited) >= 2 * stop - 40
            rows = grain_rows(content)
            assert rows == [dict(zip(GRAIN_FIELDS, r, strict=True)) for r in _report_rows(out)]
    engine.close()
    per_exchange = (sizes[2000] - sizes[1000]) / 1000
    assert per_exchange < 16, sizes  # two items an exchange, each in limited and in grains


def _report_rows(out: Any) -> list[tuple[Any, ...]]:
    """The report's rows with every field a snapshot keeps (as schema 2 wrote them)."""
    tree = {g.node_id: g for g in out.tree}
    cols = out.report.columns()
    rows = []
    for i, node_id in enumerate(cols["node_id"]):
        g = tree.get(node_id)
        row = []
        for f in GRAIN_FIELDS:
            if f in ("priority", "lifespan", "protected"):
                row.append(getattr(g, f) if g is not None else None)
            else:
                row.append(cols[f][i])
        rows.append(tuple(row))
    return rows


@pytest.mark.parametrize("prune", [None, PruneSettings(max_turns=10)], ids=["compacted", "limited"])
async def test_a_long_session_restores_the_same_state_and_payload(
    make_store: Callable[[], Store], prune: PruneSettings | None
) -> None:
    """On every store: load() rebuilds the live state exactly (its JSON and the summary the
    same stored grain), restore() renders the last payload, restore(snapshot=) an older one."""
    store = make_store()
    engine = ContextEngine("gpt-4o", Budget(total=8000), store=store, prune=prune)
    async with engine.session("r") as s:
        s.add(ContextGrain("mem.notes", "app", "Notes: be brief.", lifespan="session"))
        s.add(ContextGrain("mem.notes", "other", "Shadowed notes.", lifespan="session"))
        older_out = await _grow(s, 0, 600)
        older = await s.checkpoint()
        await _grow(s, 600, 1200)
        await s.user_message("and the last question?")  # no message after its render
        last = await s.render()
        newest = await s.checkpoint()
        live = s.state.to_json(messages=False)
        assert prune is not None or live["summary"] == "mem.summary"
    engine.close()
    again = ContextEngine("gpt-4o", Budget(total=8000), store=make_store(), prune=prune)
    loaded = await again.load("r")
    assert loaded is not None
    state = loaded.state
    data = state.to_json(messages=False)
    assert {**data, "closed": True} == {**live, "closed": True}  # load() reopens it
    if state.summary is not None:
        assert state.summary is state.stored["mem.summary"].grain
    assert [g.origin for g in state.carried() if g.node_id == "mem.notes"] == ["app", "other"]
    out = await again.restore("r")
    assert out.payload == last.payload and out.tokens == last.tokens
    snap = make_store().load_snapshot("r")  # the snapshot records the render's high-water mark
    assert snap is not None
    assert snap.content["high_water"] == last.report.high_water > last.report.target
    assert newest is not None
    assert (await again.restore("r", snapshot=newest.id)).payload == last.payload
    assert older is not None and older_out is not None
    back = await again.restore("r", snapshot=older.id)
    assert back.payload == older_out.payload
    assert payload_hash(back.payload) == older.meta["payload_hash"]
    again.close()


# -- what the previous version wrote --------------------------------------------------------------


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    root = tmp_path / "v2"
    shutil.copytree(DATA / "v2", root)
    return root


@pytest.mark.parametrize("session_id", ["chat", "limited"])
async def test_a_schema_2_store_restores_and_goes_on_in_schema_3(v2: Path, session_id: str) -> None:
    store = FileStore(v2)
    infos = [i for i in store.snapshots(session_id) if not i.pruned]
    snap = store.load_snapshot(session_id)
    assert snap is not None and snap.content["schema"] == "ctxengine.snapshot/2"
    assert snap.content["state"]["version"] == 2
    prune = PruneSettings(max_turns=3) if session_id == "limited" else None
    budget = Budget(total=snap.content["budget"])
    engine = ContextEngine("gpt-4o", budget, store=store, prune=prune)
    for info in infos:  # each kept snapshot gives exactly the payload of its render
        out = await engine.restore(session_id, snapshot=info.id)
        assert payload_hash(out.payload) == info.meta["payload_hash"]
    loaded = await engine.load(session_id, snapshot=snap.info.id)
    assert loaded is not None
    old = loaded.state
    assert old.summary is None or old.summary is old.stored[old.summary.node_id].grain
    rows = grain_rows(snap)
    assert len(rows) == len(snap.content["grains"]["node_id"])
    async with engine.session(session_id) as s:
        await s.user_message("one more question")
        out = await s.render()
        await s.checkpoint()
    new = store.load_snapshot(session_id)
    assert new is not None and new.content["schema"] == SCHEMA
    assert new.content["state"]["version"] == 3
    assert (await engine.restore(session_id)).payload == out.payload
    engine.close()


@pytest.mark.parametrize("session_id", ["chat", "limited"])
def test_the_commands_show_a_schema_2_snapshot_as_before(
    v2: Path, session_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``context detail`` and ``snapshots`` of the stored sessions print what the previous
    version printed (the sha256 of its canonical JSON output is in ``data/v2-cli.json``)."""
    expected = json.loads((DATA / "v2-cli.json").read_text())[session_id]
    for name, argv in (("detail", ["context", "detail"]), ("snapshots", ["snapshots"])):
        assert main([*argv, session_id, "--store", str(v2), "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        got.pop("store", None)  # the folder it was read from
        assert content_hash(canonical_json(got)) == expected[name], name


# -- malformed input ------------------------------------------------------------------------------


async def _stored_content(tmp_path: Path) -> tuple[ContextEngine, dict[str, Any]]:
    store = FileStore(tmp_path)
    engine = ContextEngine(
        "gpt-4o", Budget(total=8000), store=store, prune=PruneSettings(max_turns=2)
    )
    async with engine.session("m") as s:
        await _grow(s, 0, 300)
        await s.checkpoint()
    snap = store.load_snapshot("m")
    assert snap is not None
    engine.close()
    return engine, json.loads(canonical_json(dict(snap.content)))


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("decision", [["kept", 1]], "column 'decision' is malformed: run ['kept', 1]"),
        ("node_id", [["hist.", -1, 3]], "column 'node_id' is malformed: run ['hist.', -1, 3]"),
        ("reason", "kept", "column 'reason' is malformed: 'kept' is not a list of runs"),
        ("status", [{"a": 1}], "column 'status' is malformed: run {'a': 1}"),
        ("window", [["history", 10**9]], "column 'window' is malformed: runs of more than"),
    ],
)
async def test_malformed_grain_runs_are_a_store_error_naming_the_column(
    tmp_path: Path, column: str, value: Any, said: str
) -> None:
    _, content = await _stored_content(tmp_path)
    assert grain_rows(content)
    content["grains"][column] = value
    with pytest.raises(StoreError, match="snapshot grains") as info:
        grain_rows(content)
    assert said in str(info.value)
    content["grains"][column] = encode_values(["x"])  # one row against many
    with pytest.raises(StoreError, match="columns of equal length"):
        grain_rows(content)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("summary", "mem.nothing", "field 'summary' is 'mem.nothing', a node id no stored grain"),
        ("limited", {"node_id": [["hist.", 0, 2]], "tokens": [5]}, "2 node ids and 1 tokens"),
        ("limited", {"node_id": ["hist.0"], "tokens": ["a"]}, "tokens 'a' is not an int"),
        ("limited", {"node_id": 5, "tokens": []}, "5 is not a list of node id runs"),
        # a version 2 object in a version 3 state: not read as an empty one
        ("limited", {"hist.1": 5}, "field 'limited' has the keys ['hist.1']"),
        # a damaged run count: refused by the items the state has, before it is expanded
        (
            "limited",
            {"node_id": [["hist.", 0, 9_999_999]], "tokens": [[5, 9_999_999]]},
            "(runs of more than 600 rows (a run of 9999999 after 0)); expected an object "
            "with 'node_id' and 'tokens', runs of equal length of at most 600 rows (the "
            "history items of its messages",
        ),
        (
            "limited",
            {"node_id": [["hist.", 0, 3]], "tokens": [1, 2, [3, 9_999_999]]},
            "runs of more than 600 rows (a run of 9999999 after 2)",
        ),
    ],
)
async def test_malformed_version_3_fields_are_a_config_error_naming_them(
    tmp_path: Path, field: str, value: Any, said: str
) -> None:
    engine, content = await _stored_content(tmp_path)
    state = content["state"]
    state[field] = value
    with pytest.raises(ConfigError) as info:
        engine.state_from_json(dict(state, messages=await _messages(tmp_path)))
    assert said in str(info.value)


async def _messages(tmp_path: Path) -> list[Any]:
    """The stored messages of session ``m`` (:func:`_stored_content`), as state JSON holds them."""
    engine = ContextEngine("gpt-4o", Budget(total=8000), store=FileStore(tmp_path))
    loaded = await engine.load("m")
    assert loaded is not None
    data = loaded.state.to_json()
    engine.close()
    messages: list[Any] = data["messages"]
    return messages


async def test_a_version_2_limited_with_more_ids_than_items_is_a_config_error(
    tmp_path: Path,
) -> None:
    engine, content = await _stored_content(tmp_path)
    messages = await _messages(tmp_path)
    state = dict(content["state"], version=2, messages=messages)
    state["compacted"] = []
    state["limited"] = {f"hist.{i}": 5 for i in range(601)}
    with pytest.raises(ConfigError, match="'limited' has 601 node ids; expected at most 600"):
        engine.state_from_json(state)
    state["limited"] = {f"hist.{i}": 5 for i in range(600)}
    assert len(engine.state_from_json(state).limited) == 600


async def test_a_grain_whose_content_is_in_core_memory_needs_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    engine = ContextEngine("gpt-4o", Budget(total=8000), store=store)
    async with engine.session("c") as s:
        await _grow(s, 0, 300)
        await s.checkpoint()
    snap = store.load_snapshot("c")
    assert snap is not None
    state = json.loads(canonical_json(snap.content["state"]))
    grains = {g["grain"]["node_id"]: g["grain"] for g in state["stored"]}
    assert grains["mem.summary"]["content_in"] == "core_memory"
    assert "content" not in grains["mem.summary"]
    data = dict(state, messages=[])
    with pytest.raises(ConfigError, match=r"'mem\.summary' has its content in the snapshot's core"):
        engine.state_from_json(data)
    texts = dict(snap.content["core_memory"])
    rebuilt = engine.state_from_json(data, texts=texts)
    assert rebuilt.stored["mem.summary"].grain.content == texts["mem.summary"]
    grains["mem.summary"]["content_in"] = "elsewhere"
    with pytest.raises(ConfigError, match="content_in 'elsewhere'; expected its content"):
        engine.state_from_json(data, texts=texts)
    engine.close()
