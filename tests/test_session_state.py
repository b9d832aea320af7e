"""SessionState: one object with everything a render reads or writes, round-tripped as JSON."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain, FileStore, Session
from ctxengine.transcript import Message, Text, ToolCall

pytestmark = pytest.mark.anyio


async def _steps(s: Session, tag: str, n: int) -> None:
    for i in range(n):
        await s.user_message(
            f"request {tag}-{i}: look at module_{tag}_{i}.py and explain it carefully in depth"
        )
        call = ToolCall(f"c{tag}_{i}", "read_file", {"path": f"m{tag}_{i}.py"})
        await s.assistant_message("", [call])
        await s.tool_result(f"c{tag}_{i}", f"RESULT-{tag}-{i} " + "content line\n" * 40)
        await s.assistant_message(f"done {tag}-{i}")


async def _session(s: Session) -> None:
    s.add(ContextGrain("sys.rules", "app", "Be terse.", priority=0, lifespan="session"))
    s.add(ContextGrain("task.goal", "app", "Fix the failing test.", lifespan="task"))
    await _steps(s, "a", 30)
    s.add(ContextGrain("rag.note", "app", "A note for this turn only.", lifespan="turn"))


async def test_state_round_trips_through_json_and_renders_the_same() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("s1") as s:
        await _session(s)
        for r in range(4):  # render and grow until a compaction has happened
            first = await s.render()
            if s.state.compacted:
                break
            await _steps(s, str(r), 15)
        assert any(c["ok"] for c in first.report.compactions)
        assert s.state.compacted and s.state.summary is not None
        s.add(ContextGrain("rag.next", "app", "Queued for the next render.", lifespan="turn"))
        data = json.loads(json.dumps(s.state.to_json()))
        again = await s.render()
    restored = Session.from_state(engine, engine.state_from_json(data))
    assert restored.state is not s.state and restored.state.asm is not s.state.asm
    assert restored.state.to_json() == data
    out = await restored.render()
    assert out.payload == again.payload
    assert out.tokens == again.tokens
    decisions = {g.node_id: (g.decision, g.tokens) for g in again.report}
    assert {g.node_id: (g.decision, g.tokens) for g in out.report} == decisions


async def test_state_json_is_plain_data() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("s2") as s:
        await _session(s)
        for r in range(4):
            await s.render()
            if s.state.compacted:
                break
            await _steps(s, str(r), 15)
        data = s.state.to_json()
    assert json.loads(json.dumps(data)) == data
    assert {"messages", "stored", "queued", "compacted", "summary", "turn"} <= set(data)
    assert data["turn"] >= 1 and data["summary"] == "mem.summary"  # the stored grain it is
    stored = {g["grain"]["node_id"]: g["grain"] for g in data["stored"]}
    assert stored["mem.summary"]["content"].startswith("[Summary of the earlier conversation")


async def test_shadowed_carried_grains_round_trip_and_still_render_shadowed() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("s3") as s:
        s.add(ContextGrain("mem.profile", "app", "LOSER", priority=50, lifespan="session"))
        s.add(ContextGrain("mem.profile", "app", "WINNER", priority=30, lifespan="session"))
        await s.user_message("hi")
        before = await s.render()
        data = json.loads(json.dumps(s.state.to_json()))
    restored = Session.from_state(engine, engine.state_from_json(data))
    out = await restored.render()
    for rendered in (before, out):
        assert "WINNER" in str(rendered.payload) and "LOSER" not in str(rendered.payload)
        shadowed = [d.grain.content for d in rendered.report if d.decision == "shadowed"]
        assert shadowed == ["LOSER"]


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque handle>"


#: Free metadata JSON cannot hold as it is.
ODD_META = {
    "added": datetime.datetime(2026, 1, 1, 9, 30),
    "tags": {"b"},
    "pair": (1, "x"),
    "handle": _Opaque(),
    "nested": {"when": datetime.date(2026, 1, 2), 3: "int key", ("a", 1): "tuple key"},
    "plain": {"n": 1, "xs": [1.5, None, True]},
    "score": float("nan"),
    "bounds": [float("-inf"), 0.5],
}
#: What the state stores for it: each value JSON lacks as its repr, keys as text.
ODD_META_JSON = {
    "added": "datetime.datetime(2026, 1, 1, 9, 30)",
    "tags": "{'b'}",
    "pair": [1, "x"],
    "handle": "<opaque handle>",
    "nested": {"when": "datetime.date(2026, 1, 2)", "3": "int key", "('a', 1)": "tuple key"},
    "plain": {"n": 1, "xs": [1.5, None, True]},
    "score": "nan",
    "bounds": ["-inf", 0.5],
}


async def test_grain_meta_json_cannot_hold_is_stored_as_its_repr() -> None:
    """A datetime (or a set, an object) in a grain's free meta is stored as its repr: the
    state stays JSON, the grain renders as before, and the caller's grain is not touched."""
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    rules = ContextGrain(
        "sys.rules", "app", "RULE: answer in French.", 0, "session", protected=True, meta=ODD_META
    )
    async with engine.session("m1") as s:
        s.add(rules)
        s.add(ContextGrain("task.plan", "app", "PLAN: step 1", lifespan="task", meta=ODD_META))
        await s.user_message("hello")
        before = await s.render()
        data = json.loads(json.dumps(s.state.to_json()))
    stored = {g["grain"]["node_id"]: g["grain"]["meta"] for g in data["stored"]}
    assert stored == {"sys.rules": ODD_META_JSON, "task.plan": ODD_META_JSON}
    assert rules.meta is ODD_META and rules.meta["added"] == datetime.datetime(2026, 1, 1, 9, 30)
    out = await Session.from_state(engine, engine.state_from_json(data)).render()
    assert out.payload == before.payload and "RULE: answer in French." in str(out.payload)


async def test_message_meta_json_cannot_hold_is_stored_as_its_repr() -> None:
    """The same for a message's meta: the state with its messages stays JSON."""
    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("m3") as s:
        s.extend([Message("user", (Text("hello"),), meta=ODD_META)])
        data = json.loads(json.dumps(s.state.to_json()))
    assert data["messages"][0]["meta"] == ODD_META_JSON


async def test_grains_with_odd_meta_survive_a_file_store_reopen(tmp_path: Path) -> None:
    """The snapshot of a session carrying such a grain is written (it used to fail with
    StoreError, every render), so reopening the session keeps its protected grains."""
    engine = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    async with engine.session("m2") as s:
        s.add(ContextGrain("sys.rules", "app", "RULE: be brief.", 0, "session", meta=ODD_META))
        await s.user_message("hello")
        before = await s.render()
        assert await s.checkpoint() is not None
        again = await s.render()
        assert not again.report.faults
    engine.close()
    reopened = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    async with reopened.session("m2") as s2:
        assert s2.state.stored["sys.rules"].grain.meta == ODD_META_JSON
        out = await s2.render()
    reopened.close()
    assert out.payload == before.payload and "RULE: be brief." in str(out.payload)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("order", None, "session state field 'order' is None (NoneType); expected an object"),
        ("limited", [1, "a"], "field 'limited' is [1, 'a'] (list); expected an object"),
        ("pruned", "x", "field 'pruned' is 'x' (str); expected an object"),
        ("settled", [], "field 'settled' is [] (list); expected a list of 2 ints or null"),
        ("stored", {}, "field 'stored' is {} (dict); expected a list of stored grains"),
        ("seq", True, "field 'seq' is True (bool); expected an int"),
        ("turn", None, "field 'turn' is None (NoneType); expected an int"),
        ("version", 7, "version is 7 (written by a newer ctxengine); expected 1 or 2 or 3"),
    ],
)
async def test_a_state_of_the_wrong_shape_is_a_config_error_naming_the_field(
    field: str, value: object, said: str
) -> None:
    from ctxengine.errors import ConfigError

    engine = ContextEngine("gpt-4o", Budget(total=3_000))
    async with engine.session("s1") as s:
        await _steps(s, "a", 2)
        await s.render()
        data = json.loads(json.dumps(s.state.to_json()))
    data[field] = value
    with pytest.raises(ConfigError) as info:  # an AttributeError or IndexError before
        engine.state_from_json(data)
    assert said in str(info.value)
    del data[field]
    if field not in ("limited", "pruned", "settled", "version"):  # optional ones may be absent
        with pytest.raises(ConfigError, match=f"session state has no field '{field}'"):
            engine.state_from_json(data)


async def test_a_snapshot_whose_state_is_damaged_restores_from_the_messages(
    tmp_path: Path,
) -> None:
    from ctxengine.store.base import canonical_json, content_hash

    engine = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    async with engine.session("s1") as s:
        await _steps(s, "a", 3)
        live = await s.render()
        await s.checkpoint()
    engine.close()
    objects = tmp_path / "sessions" / "s1" / "objects"
    index = tmp_path / "sessions" / "s1" / "snapshots.jsonl"
    info = json.loads(index.read_text().splitlines()[-1])
    content = json.loads((objects / f"{info['hash']}.json").read_text())
    content["state"]["order"] = None  # made every open and restore raise AttributeError
    text = canonical_json(content)
    info.update(hash=content_hash(text), size=len(text.encode()), id=info["id"] + "x")
    (objects / f"{info['hash']}.json").write_text(text)
    index.write_text(index.read_text() + canonical_json(info) + "\n")
    again = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    out = await again.restore("s1")
    assert out.payload == live.payload
    faults = [f for f in out.report.faults if (f["plugin"], f["hook"]) == ("store", "restore")]
    assert len(faults) == 1 and "field 'order' is None" in faults[0]["message"]


def _reads(n: int, start: int = 0) -> list[Message]:
    """``n`` asks, each answered by a file read and its result, then a reply."""
    out: list[Message] = []
    for i in range(start, start + n):
        out.append(Message.user(f"ask {i}: look at src/mod_{i}.py"))
        out.append(Message.assistant("", [ToolCall(f"c{i}", "read", {"path": f"src/mod_{i}.py"})]))
        out.append(Message.tool(f"c{i}", f"def f_{i}():\n    return {i}\n" * 8))
        out.append(Message.assistant(f"mod_{i} is fine"))
    return out


async def test_a_snapshot_writes_the_summarized_messages_as_spans() -> None:
    """A state listed every history node id ever summarized in each snapshot: a long session's
    snapshots grew with every message it summarized (a soak of 2,000 renders reached 445 MB of
    snapshot files, 358 KB of a 411 KB snapshot being that list). They are written as spans of
    message indices now; a rebuilt state has the same ids summarized and the same live items."""
    engine = ContextEngine("gpt-4o", Budget(total=4_000))
    async with engine.session("spans") as s:
        for k in range(6):
            s.extend(_reads(60, 60 * k))
            await s.user_message(f"status {k}?")
            out = await s.render()
        state = s.state
        assert len(state.compacted) > 400
        data = json.loads(json.dumps(state.to_json()))
    compacted = data["compacted"]
    assert data["version"] == 3 and set(compacted) == {"messages", "ids"}
    assert len(json.dumps(compacted)) < 400  # was every id: tens of kilobytes
    rebuilt = engine.state_from_json(data)
    assert rebuilt.compacted == state.compacted
    assert rebuilt.items.keys() == state.items.keys()
    restored = json.loads(json.dumps(rebuilt.to_json()))
    assert restored["compacted"] == compacted
    assert out.tokens <= 4_000


async def test_a_version_1_state_with_a_list_of_ids_still_loads() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4_000))
    async with engine.session("v1") as s:
        s.extend(_reads(80))
        await s.user_message("status?")
        await s.render()
        state = s.state
        data = json.loads(json.dumps(state.to_json()))
    assert state.compacted
    data["version"], data["compacted"] = 1, sorted(state.compacted)
    stored = {g["grain"]["node_id"]: g["grain"] for g in data["stored"]}
    data["summary"] = stored["mem.summary"]  # versions 1 and 2 wrote the grain again
    data["limited"] = {}  # version 1: node id -> tokens
    rebuilt = engine.state_from_json(data)
    assert rebuilt.compacted == state.compacted
    assert rebuilt.items.keys() == state.items.keys()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"messages": [[3, 1]], "ids": []}, "message span [3, 1]; expected [start, stop]"),
        ({"messages": [[0, 4], [2, 6]], "ids": []}, "message span [2, 6]"),
        ({"messages": [["a", 2]], "ids": []}, "message span ['a', 2]"),
        ({"messages": [[0, 2]]}, "expected an object with lists 'messages'"),
        ("x", "field 'compacted' is 'x' (str); expected an object of message spans"),
    ],
)
async def test_bad_compacted_spans_are_a_config_error(value: object, said: str) -> None:
    from ctxengine.errors import ConfigError

    engine = ContextEngine("gpt-4o", Budget(total=4_000))
    async with engine.session("bad") as s:
        s.extend(_reads(5))
        await s.render()
        data = json.loads(json.dumps(s.state.to_json()))
    data["compacted"] = value
    with pytest.raises(ConfigError) as info:
        engine.state_from_json(data)
    assert said in str(info.value)


async def test_grain_content_strict_json_cannot_hold_survives_a_reopen(tmp_path: Path) -> None:
    """Structured content with a NaN (a score) made every snapshot fail (the store writes
    strict JSON) and the grain was gone on reopening: it is stored as the text it is sent as."""
    engine = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    async with engine.session("nan") as s:
        s.add(ContextGrain("mem.scores", "app", {"score": float("nan")}, lifespan="session"))
        await s.user_message("hello")
        before = await s.render()
        again = await s.render()
        assert not again.report.faults
    engine.close()
    reopened = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    async with reopened.session("nan") as s:
        out = await s.render()
    assert out.payload == before.payload and "NaN" in str(out.payload)


async def test_a_nan_of_a_float_subclass_is_stored_too(tmp_path: Path) -> None:
    """numpy's float64 is a float subclass (a similarity score): its NaN passed as plain data
    and broke every snapshot as a plain float's did."""

    class Score(float):
        pass

    engine = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    async with engine.session("sub") as s:
        nan = Score("nan")
        s.add(ContextGrain("rag.doc", "app", {"score": nan}, lifespan="session", meta={"s": nan}))
        await s.user_message("hello")
        before = await s.render()
        assert not (await s.render()).report.faults
    engine.close()
    reopened = ContextEngine("gpt-4o", Budget(total=3_000), store=FileStore(tmp_path))
    async with reopened.session("sub") as s:
        assert "rag.doc" in str((await s.render()).report.to_dict())
        out = await s.render()
    assert out.payload == before.payload
