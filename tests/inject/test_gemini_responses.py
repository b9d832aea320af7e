"""A Gemini ``functionResponse.response`` object goes back out as it came.

The API takes any JSON object there (``output`` and ``error`` keys are a convention: without
them the whole object is the function's output). The importer kept only ``{"output": str}`` and
``{"error": str}`` as text and made any other object its JSON text, which the exporter sent
back as ``{"output": "<json text>"}``: the model saw a string where the tool had returned an
object, and a load -> ``.to("gemini")`` round trip was not faithful. A result the pipeline
changed (cut, redacted, summarized...) goes out as its text, as before.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from contract_count import independent_count
from ctxengine import Budget, ContextEngine, FileStore, Session, TranscriptError
from ctxengine.inject.payload import payload_tokens
from ctxengine.transcript import Message, Text, ToolResult, Transcript, load
from transcript.helpers import assert_sdk_valid

WEATHER = {"temperature": 20, "unit": "C", "hourly": [18.5, 19, None, True]}
ROWS = {"output": {"rows": [[1, "Zoë"], [2, "日本"]], "count": 2}}
RESULT = {"result": "ok", "nested": {"a": [], "b": {}}}
ERROR = {"error": {"code": 404, "message": "no such city"}}


def _response(call_id: str, name: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"functionResponse": {"id": call_id, "name": name, "response": response}}


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"functionCall": {"id": call_id, "name": name, "args": {"q": call_id}}}


CONTENTS: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "What is the weather in Paris, and who signed up?"}]},
    {
        "role": "model",
        "parts": [_call("a", "weather"), _call("b", "query"), _call("c", "run")],
    },
    {
        "role": "user",
        "parts": [
            _response("a", "weather", WEATHER),
            _response("b", "query", ROWS),
            _response("c", "run", RESULT),
        ],
    },
    {"role": "model", "parts": [_call("d", "weather"), _call("e", "query"), _call("f", "run")]},
    {
        "role": "user",
        "parts": [
            _response("d", "weather", ERROR),
            _response("e", "query", {}),
            _response("f", "run", {"output": "plain text"}),
        ],
    },
    {"role": "model", "parts": [{"text": "20C in Paris; Zoë and 日本 signed up."}]},
    {"role": "user", "parts": [{"text": "Thanks. And tomorrow?"}]},
]


def _responses(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        p["functionResponse"]["id"]: p["functionResponse"]["response"]
        for c in payload["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    }


def test_import_then_export_gives_the_contents_back() -> None:
    source = copy.deepcopy(CONTENTS)
    t = load(source, format="gemini")
    out = t.to("gemini")
    assert out == {"contents": CONTENTS}
    assert_sdk_valid(out, "gemini")
    assert load(out, format="gemini") == t
    # the objects are the payload's own: editing one changes neither the source nor a render
    _responses(out)["a"]["unit"] = "F"
    _responses(out)["b"]["output"]["rows"].clear()
    assert source == CONTENTS
    assert t.to("gemini") == {"contents": CONTENTS}


def test_a_snake_case_source_comes_back_with_its_objects() -> None:
    contents = [
        {"role": "model", "parts": [{"function_call": {"name": "weather", "args": {}}}]},
        {
            "role": "user",
            "parts": [{"function_response": {"name": "weather", "response": WEATHER}}],
        },
    ]
    out = load(contents, format="gemini").to("gemini")
    assert list(_responses(out).values()) == [WEATHER]


def test_a_changed_result_goes_out_as_its_text() -> None:
    t = load(CONTENTS, format="gemini")
    tool = t.messages[2]
    first = tool.tool_results[0]
    shorter = dataclasses.replace(first, content=(Text('{"temperature": 20, "unit": "[cut]"}'),))
    # an error result with the object's text is not the object either
    flagged = dataclasses.replace(tool.tool_results[2], is_error=True)
    changed = dataclasses.replace(tool, blocks=(shorter, tool.tool_results[1], flagged))
    out = t.replace((*t.messages[:2], changed, *t.messages[3:])).to("gemini")
    got = _responses(out)
    assert got["a"] == {"output": '{"temperature": 20, "unit": "[cut]"}'}
    assert got["b"] == ROWS  # unchanged beside it
    assert got["c"] == {"error": json.dumps(RESULT, ensure_ascii=False)}


def test_a_result_split_from_its_message_or_built_by_hand_keeps_its_rule() -> None:
    """The engine renders each result of a tool message as a message of its own (the same
    ``meta``): each still finds its object; a result that came as text stays text."""
    t = load(CONTENTS, format="gemini")
    tool = t.messages[2]
    alone = [dataclasses.replace(tool, blocks=(r,)) for r in reversed(tool.tool_results)]
    out = t.replace((*t.messages[:2], *alone, *t.messages[3:])).to("gemini")
    assert _responses(out) == {
        "a": WEATHER,
        "b": ROWS,
        "c": RESULT,
        "d": ERROR,
        "e": {},
        "f": {"output": "plain text"},
    }
    by_hand = Transcript(
        (
            t.messages[1],
            Message("tool", (ToolResult("a", (Text(json.dumps(WEATHER)),)),)),
        )
    )
    assert _responses(by_hand.to("gemini"))["a"] == {"output": json.dumps(WEATHER)}


def test_the_payload_counter_reads_an_object_as_the_text_the_plan_counted() -> None:
    """The plan counts a result's text: the object's JSON. The payload's object is counted as
    that text (keys included), never as more: a key such as ``type`` or ``data`` is not
    skipped inside it, and ``{"type": "image"}`` is not an image."""
    model = "gemini-2.5-pro"
    for obj in (WEATHER, ROWS, {"type": "image", "data": "a long text " * 20}):
        text = json.dumps(obj, ensure_ascii=False)
        as_object = {"contents": [{"role": "user", "parts": [_response("x", "f", obj)]}]}
        as_text = {"contents": [{"role": "user", "parts": [_response("x", "f", {"output": text})]}]}
        counted = payload_tokens(as_object, "gemini", model)
        assert counted == payload_tokens(as_text, "gemini", model)
        assert independent_count(as_object, "gemini") == independent_count(as_text, "gemini")


def _as_text(payload: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    """``payload`` with the responses of ``ids`` as their JSON text under ``output``."""
    out = copy.deepcopy(payload)
    for c in out["contents"]:
        for p in c["parts"]:
            fr = p.get("functionResponse")
            if fr is not None and fr["id"] in ids:
                fr["response"] = {"output": json.dumps(fr["response"], ensure_ascii=False)}
    return out


@pytest.mark.anyio
async def test_a_session_render_sends_the_objects_within_its_count() -> None:
    engine = ContextEngine("gpt-4.1", Budget(total=8_000))
    async with engine.session("g") as s:
        await s.ingest(copy.deepcopy(CONTENTS))
        first = await s.render("gemini")
        step = [
            {"role": "model", "parts": [_call("g", "weather")]},
            {"role": "user", "parts": [_response("g", "weather", WEATHER)]},
        ]
        await s.ingest(step)
        out = await s.render("gemini")  # made from the first render's work, plus the step
        assert s.state.token_cache.memo.warm.reused == 1
    objects = {"a": WEATHER, "b": ROWS, "c": RESULT, "d": ERROR, "e": {}}
    assert _responses(first.payload) == objects | {"f": {"output": "plain text"}}
    assert _responses(out.payload) == objects | {"f": {"output": "plain text"}, "g": WEATHER}
    # counted as the text the plan counted: as the payload with each object as text is
    for got in (first, out):
        as_text = _as_text(got.payload, {*objects, "g"})
        assert got.tokens == payload_tokens(as_text, "gemini", "gpt-4.1") <= 8_000
        assert independent_count(got.payload, "gemini") == independent_count(as_text, "gemini")


@pytest.mark.anyio
async def test_a_result_the_guard_cut_goes_out_as_its_text() -> None:
    rows = {"rows": [{"line": i, "text": f"entry number {i}"} for i in range(300)]}
    contents = [
        {"role": "user", "parts": [{"text": "read the log and the weather"}]},
        {"role": "model", "parts": [_call("a", "read_log"), _call("b", "weather")]},
        {
            "role": "user",
            "parts": [_response("a", "read_log", rows), _response("b", "weather", WEATHER)],
        },
        {"role": "model", "parts": [{"text": "done"}]},
        {"role": "user", "parts": [{"text": "thanks"}]},
    ]
    engine = ContextEngine("gpt-4.1", Budget(total=3_000))
    async with engine.session("g") as s:
        await s.ingest(contents)
        out = await s.render("gemini")
    (cut,) = [g for g in out.report if g.stage == "guard"]
    assert cut.node_id == "act.tool_result.a"
    got = _responses(out.payload)
    assert list(got["a"]) == ["output"]
    assert got["a"]["output"].startswith('{"rows": [{"line": 0,')
    assert len(got["a"]["output"]) < len(json.dumps(rows))
    assert got["b"] == WEATHER  # the result beside it is whole: sent as it came
    assert out.tokens <= 3_000


@pytest.mark.anyio
async def test_a_session_reloaded_from_its_state_sends_the_objects_again() -> None:
    engine = ContextEngine("gpt-4.1", Budget(total=8_000))
    async with engine.session("g") as s:
        await s.ingest(copy.deepcopy(CONTENTS))
        before = await s.render("gemini")
        data = json.loads(json.dumps(s.state.to_json()))
    restored = Session.from_state(engine, engine.state_from_json(data))
    out = await restored.render("gemini")
    assert _responses(out.payload)["a"] == WEATHER
    assert out.payload == before.payload and out.tokens == before.tokens


@pytest.mark.anyio
async def test_a_session_reopened_from_a_file_store_sends_the_objects_again(
    tmp_path: Path,
) -> None:
    engine = ContextEngine("gpt-4.1", Budget(total=8_000), store=FileStore(tmp_path))
    async with engine.session("g") as s:
        await s.ingest(copy.deepcopy(CONTENTS))
        before = await s.render("gemini")
        assert await s.checkpoint() is not None
    engine.close()
    reopened = ContextEngine("gpt-4.1", Budget(total=8_000), store=FileStore(tmp_path))
    async with reopened.session("g") as s2:
        out = await s2.render("gemini")
    reopened.close()
    assert _responses(out.payload)["b"] == ROWS
    assert out.payload == before.payload


@pytest.mark.parametrize("value", [{1, 2}, object()], ids=["set", "object"])
def test_a_response_that_is_not_json_is_a_located_error(value: object) -> None:
    """A plain-dict response holding a value JSON has no form for (read before as a bare
    ``TypeError`` from ``json.dumps``): the error names the response and what was expected."""
    contents = [
        {"role": "user", "parts": [{"text": "run it"}]},
        {"role": "model", "parts": [_call("a", "run")]},
        {"role": "user", "parts": [_response("a", "run", {"value": value})]},
    ]
    with pytest.raises(
        TranscriptError,
        match=r"contents\[2\]\.parts\[0\]\.functionResponse\.response.*expected a JSON object",
    ):
        load({"contents": contents})


def test_an_error_object_is_an_error_and_goes_back_as_it_came() -> None:
    """``{"error": <object>}`` (read before as a success): the result is an error, so other
    providers flag it and the summary lists the failure, and Gemini gets the object back."""
    t = load(CONTENTS, format="gemini")
    (failed,) = [r for m in t.messages for r in m.tool_results if r.call_id == "d"]
    assert failed.is_error and json.loads(failed.text) == ERROR
    assert _responses(t.to("gemini"))["d"] == ERROR
    blocks = t.to("anthropic")["messages"]
    (result,) = [
        b
        for m in blocks
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b["tool_use_id"] == "d"
    ]
    assert result["is_error"] is True
    # unflagged by hand, the same text no longer stands for the error object
    tool = next(m for m in t.messages if failed in m.tool_results)
    cleared = dataclasses.replace(
        tool,
        blocks=tuple(
            dataclasses.replace(r, is_error=False) if r is failed else r for r in tool.blocks
        ),
    )
    out = t.replace(tuple(cleared if m is tool else m for m in t.messages)).to("gemini")
    assert _responses(out)["d"] == {"output": json.dumps(ERROR, ensure_ascii=False)}


#: Two turns that reuse the call id ``a`` (as a source that numbers its calls per turn does):
#: hygiene renames the second call and its result.
REUSED: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "the weather, then the sign-ups"}]},
    {"role": "model", "parts": [_call("a", "weather")]},
    {"role": "user", "parts": [_response("a", "weather", WEATHER)]},
    {"role": "model", "parts": [_call("a", "query")]},
    {"role": "user", "parts": [_response("a", "query", ROWS)]},
    {"role": "model", "parts": [{"text": "20C; Zoë and 日本 signed up."}]},
    {"role": "user", "parts": [{"text": "Thanks."}]},
]


def _renamed(payload: dict[str, Any]) -> str:
    """The id hygiene gave the second call of :data:`REUSED` (its result answers it)."""
    (renamed,) = [
        p["functionCall"]["id"]
        for c in payload["contents"]
        for p in c["parts"]
        if "functionCall" in p and p["functionCall"]["name"] == "query"
    ]
    assert renamed != "a"
    return str(renamed)


def test_a_result_whose_call_id_hygiene_renamed_goes_out_as_its_object() -> None:
    """Its message records the object under the id it came with; the rename must not turn
    the unchanged result into ``{"output": "<json text>"}``."""
    t = load(copy.deepcopy(REUSED), format="gemini")
    out = t.to("gemini")
    new = _renamed(out)
    assert _responses(out) == {"a": WEATHER, new: ROWS}
    assert_sdk_valid(out, "gemini")
    # changed under its new id, it goes out as its text, as any changed result
    tool = t.messages[4]
    (result,) = tool.tool_results
    cut = dataclasses.replace(result, content=(Text('{"output": "[cut]"}'),))
    changed = t.replace(
        (*t.messages[:4], dataclasses.replace(tool, blocks=(cut,)), *t.messages[5:])
    )
    assert _responses(changed.to("gemini"))[new] == {"output": '{"output": "[cut]"}'}


@pytest.mark.anyio
async def test_a_session_render_sends_the_object_of_a_renamed_result() -> None:
    engine = ContextEngine("gpt-4.1", Budget(total=8_000))
    async with engine.session("g") as s:
        await s.ingest(copy.deepcopy(REUSED))
        out = await s.render("gemini")
    new = _renamed(out.payload)
    assert out.report.hygiene["id_map"] == [["a", new]]
    assert _responses(out.payload) == {"a": WEATHER, new: ROWS}
    as_text = _as_text(out.payload, {"a", new})
    assert out.tokens == payload_tokens(as_text, "gemini", "gpt-4.1") <= 8_000


def test_results_of_a_turn_that_repeats_a_call_id_go_out_as_their_objects() -> None:
    """One turn calls two functions under one id: its message recorded one object per id, the
    last, so the first result went out as its text (and the second, renamed, found none)."""
    contents = [
        {"role": "user", "parts": [{"text": "the weather and the sign-ups"}]},
        {"role": "model", "parts": [_call("a", "weather"), _call("a", "query")]},
        {
            "role": "user",
            "parts": [_response("a", "weather", WEATHER), _response("a", "query", ROWS)],
        },
        {"role": "model", "parts": [{"text": "20C; two sign-ups."}]},
    ]
    t = load(contents, format="gemini")
    out = t.to("gemini")
    new = _renamed(out)
    assert _responses(out) == {"a": WEATHER, new: ROWS}
    assert_sdk_valid(out, "gemini")
    # each result split into a message of its own (as the engine renders them) keeps its rule
    tool = t.messages[2]
    alone = [dataclasses.replace(tool, blocks=(r,)) for r in tool.tool_results]
    split = t.replace((*t.messages[:2], *alone, *t.messages[3:])).to("gemini")
    assert _responses(split) == {"a": WEATHER, new: ROWS}
