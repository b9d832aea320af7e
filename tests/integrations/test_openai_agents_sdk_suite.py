"""The OpenAI Agents SDK's own session tests, re-created against ``CtxEngineSession``.

Ported from openai/openai-agents-python (the suite of openai-agents 0.24.0, installed here):
``tests/memory/test_session.py`` (SQLiteSession: add/get/pop/clear, limits, unicode and
special characters, threads each running their own event loop, session_settings, the Runner
with ``run`` / ``run_sync`` / ``run_streamed`` across turns, ``session_input_callback``),
``tests/memory/test_session_limit.py`` (``RunConfig(session_settings=...)`` limits, 0,
None, larger than the history, negative), ``tests/extensions/memory/test_redis_session.py``
(isolation, empty adds, problematic strings, concurrent ``gather`` writes, key-prefix
isolation), ``tests/memory/test_session_context_wrapper.py`` (a session without ``wrapper``
keeps the legacy call shapes) and the retry rewind of ``agents.run_internal``
(``rewind_session_items``: the tail read back must match what was written). Every case runs
on a :class:`~ctxengine.store.FileStore` and on a :class:`~ctxengine.store.RedisStore`
(the ``redis_url`` fixture), with a scripted fake ``Model`` written here.

Documented differences (docs/integrations/openai_agents.md): ``pop_item`` and
``clear_session`` append markers instead of deleting (the current branch holds exactly the
session's items, the older entries stay readable); a ``limit`` that is not an int raises
``ConfigTypeError``; a negative limit returns no items (as the SDK's Redis, MongoDB and Dapr
sessions do; 0.24's SQLiteSession returns every item); SDK item objects are stored as their
JSON dicts; there is no ``close()`` (the store belongs to the caller). Cases about SQLite
internals (connections, file locks, table names) and Redis client ownership / TTL have no
counterpart and are not ported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.memory import Session as SessionProtocol
from agents.memory import SessionSettings
from agents.memory.session import _session_accepts_wrapper
from agents.models.interface import Model
from agents.run_internal.session_persistence import rewind_session_items
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from ctxengine.errors import ConfigError, ConfigTypeError
from ctxengine.integrations.openai_agents import CtxEngineSession
from ctxengine.store import FileStore, RedisStore, Store

pytestmark = pytest.mark.anyio

RUNNERS = ("run", "run_sync", "run_streamed")


# --- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture(params=["file", "redis"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """New store objects on one backend: a FileStore folder, or a Redis prefix of this test."""
    if request.param == "file":
        return lambda: FileStore(tmp_path / "sessions")
    url = request.getfixturevalue("redis_url")
    prefix = f"sdk-suite-{uuid.uuid4().hex[:10]}"
    return lambda: RedisStore(url, prefix=prefix)


@pytest.fixture
def make_session(
    store_factory: Callable[[], Store],
) -> Callable[..., CtxEngineSession]:
    def make(session_id: str = "s1", **kwargs: Any) -> CtxEngineSession:
        return CtxEngineSession(session_id, store_factory(), **kwargs)

    return make


def text_message(text: str, n: int = 1) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{n}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def tool_call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", id=f"fc_{call_id}", call_id=call_id, name=name, arguments=arguments
    )


class ScriptedModel(Model):
    """Returns the queued outputs one turn at a time; records the arguments of each call."""

    def __init__(self) -> None:
        self.outputs: list[list[Any]] = []
        self.last_turn_args: dict[str, Any] = {}
        self.calls = 0

    def set_next_output(self, output: list[Any]) -> None:
        self.outputs.append(output)

    def _take(self, system_instructions: str | None, input: Any) -> list[Any]:
        self.calls += 1
        self.last_turn_args = {"system_instructions": system_instructions, "input": input}
        return self.outputs.pop(0) if self.outputs else []

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        output = self._take(system_instructions, input)
        return ModelResponse(output=output, usage=Usage(), response_id=f"resp_{self.calls}")

    async def stream_response(  # type: ignore[override]
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        output = self._take(system_instructions, input)
        response = Response(
            id=f"resp_{self.calls}",
            created_at=0,
            model="scripted",
            object="response",
            output=output,
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=False,
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )


def _run_sync_in_thread(agent: Agent[Any], data: Any, kwargs: dict[str, Any]) -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, data, **kwargs)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def run_agent(method: str, agent: Agent[Any], data: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("run_config", RunConfig(tracing_disabled=True))
    if method == "run":
        return await Runner.run(agent, data, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(_run_sync_in_thread, agent, data, kwargs)
    result = Runner.run_streamed(agent, data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


def contents(items: list[Any]) -> list[Any]:
    return [item.get("content") for item in items]


# --- the session protocol, directly ---------------------------------------------------------


async def test_is_the_sdk_session_protocol_with_legacy_call_shapes(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session()
    assert isinstance(session, SessionProtocol)
    assert not _session_accepts_wrapper(session)  # the Runner calls it without ``wrapper``


async def test_add_get_and_clear(make_session: Callable[..., CtxEngineSession]) -> None:
    session = make_session("direct_test")
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]
    await session.add_items(items)
    assert await session.get_items() == items
    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items(items[:1])  # a cleared session takes new items
    assert await session.get_items() == items[:1]


async def test_pop_item_returns_the_latest_until_empty(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session("pop_test")
    assert await session.pop_item() is None
    items = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "How are you?"},
    ]
    await session.add_items(items)
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    assert await session.pop_item() == items[1]
    assert await session.pop_item() == items[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_pop_affects_only_its_session(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    one, two = make_session("session_1"), make_session("session_2")
    await one.add_items([{"role": "user", "content": "Session 1 message"}])
    await two.add_items(
        [
            {"role": "user", "content": "Session 2 message 1"},
            {"role": "user", "content": "Session 2 message 2"},
        ]
    )
    popped = await two.pop_item()
    assert popped == {"role": "user", "content": "Session 2 message 2"}
    assert contents(await one.get_items()) == ["Session 1 message"]
    assert contents(await two.get_items()) == ["Session 2 message 1"]


async def test_get_items_with_limit(make_session: Callable[..., CtxEngineSession]) -> None:
    session = make_session("count_test")
    items = [
        {"role": role, "content": f"{word} {i}"}
        for i in range(1, 4)
        for role, word in (("user", "Message"), ("assistant", "Response"))
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=None) == items
    assert await session.get_items(limit=2) == items[-2:]  # the latest, oldest first
    assert contents(await session.get_items(limit=4)) == [
        "Message 2",
        "Response 2",
        "Message 3",
        "Response 3",
    ]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []


async def test_negative_limit_returns_no_items(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session("limit_negative_test")
    await session.add_items(
        [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]
    )
    assert await session.get_items(limit=-1) == []
    assert await session.get_items(limit=0) == []
    assert len(await session.get_items(limit=1)) == 1
    assert len(await session.get_items()) == 2


@pytest.mark.parametrize("bad", ["2", 2.0, True, [2]])
async def test_a_limit_that_is_not_an_int_is_refused_naming_it(
    make_session: Callable[..., CtxEngineSession], bad: Any
) -> None:
    session = make_session()
    with pytest.raises(ConfigTypeError, match=r"limit is .*expected an int or None"):
        await session.get_items(limit=bad)


async def test_adding_an_empty_list_is_a_no_op(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session()
    await session.add_items([])
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_an_item_that_is_not_a_dict_is_refused_naming_it(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session()
    with pytest.raises(ConfigTypeError, match=r"item 1 is 'hello' \(str\); expected"):
        await session.add_items([{"role": "user", "content": "ok"}, "hello"])
    assert await session.get_items() == []  # nothing of the refused call was written


async def test_unicode_and_problematic_strings_round_trip(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session("special_chars_test")
    texts = [
        "こんにちは",
        "😊👍",
        "Привет",
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
        '{"malicious": "json"}',
        "\\n\\t\\r Special escapes",
        "Line1\nLine2\tTabbed",
        "Normal message",
    ]
    items = [{"role": "user", "content": t} for t in texts]
    await session.add_items(items)
    assert contents(await session.get_items()) == texts


# Every item kind the SDK writes to a session (its TResponseInputItem union), as dicts.
ITEM_KINDS: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {"role": "system", "content": "system text"},
    {"role": "developer", "content": "developer text"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
            {"type": "input_file", "file_id": "file_1"},
        ],
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "answer", "annotations": [], "logprobs": []},
            {"type": "refusal", "refusal": "no"},
        ],
    },
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "thinking"}],
        "encrypted_content": "gAAAA...",
    },
    {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris", "days": [1, 2]}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21.5}'},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [{"type": "input_text", "text": "as parts"}],
    },
    {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    },
    {
        "id": "fs_1",
        "type": "file_search_call",
        "queries": ["q3 revenue"],
        "status": "completed",
        "results": [{"file_id": "file_1", "filename": "q3.pdf", "score": 0.9, "text": "..."}],
    },
    {
        "id": "cu_1",
        "type": "computer_call",
        "call_id": "call_3",
        "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "call_3",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
    },
    {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "code": "print(1)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "1"}],
        "status": "completed",
    },
    {"id": "ig_1", "type": "image_generation_call", "result": None, "status": "completed"},
    {
        "id": "lsc_1",
        "type": "local_shell_call",
        "call_id": "call_4",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
        "status": "completed",
    },
    {"type": "local_shell_call_output", "id": "call_4", "output": "a.py"},
    {
        "id": "mcpl_1",
        "type": "mcp_list_tools",
        "server_label": "srv",
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
    },
    {
        "id": "mcpr_1",
        "type": "mcp_approval_request",
        "server_label": "srv",
        "name": "t",
        "arguments": "{}",
    },
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
    {
        "id": "mcp_1",
        "type": "mcp_call",
        "server_label": "srv",
        "name": "t",
        "arguments": "{}",
        "output": "done",
    },
    {"type": "custom_tool_call", "call_id": "call_5", "name": "apply_patch", "input": "*** x"},
    {"type": "custom_tool_call_output", "call_id": "call_5", "output": "ok"},
    {"type": "item_reference", "id": "msg_0"},
    {"role": "user", "content": "with none", "status": None},
]


async def test_every_item_kind_round_trips_unchanged(
    make_session: Callable[..., CtxEngineSession], store_factory: Callable[[], Store]
) -> None:
    session = make_session("kinds")
    await session.add_items(ITEM_KINDS[:10])
    await session.add_items(ITEM_KINDS[10:])
    assert await session.get_items() == ITEM_KINDS
    reopened = CtxEngineSession("kinds", store_factory())  # another worker on the same store
    assert await reopened.get_items() == ITEM_KINDS
    assert await reopened.get_items(limit=3) == ITEM_KINDS[-3:]
    assert await reopened.pop_item() == ITEM_KINDS[-1]
    assert await session.get_items() == ITEM_KINDS[:-1]


async def test_returned_items_are_copies(make_session: Callable[..., CtxEngineSession]) -> None:
    session = make_session()
    item = {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    await session.add_items([item])
    item["content"][0]["text"] = "changed after add"
    got = await session.get_items()
    got[0]["content"][0]["text"] = "changed after get"
    assert await session.get_items() == [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    ]


async def test_sdk_item_objects_are_stored_as_their_dicts(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session()
    await session.add_items([text_message("hi", 7), tool_call("ls", "{}", "c7")])
    assert await session.get_items() == [
        text_message("hi", 7).model_dump(mode="json", exclude_none=True),
        tool_call("ls", "{}", "c7").model_dump(mode="json", exclude_none=True),
    ]


# --- concurrency ----------------------------------------------------------------------------


async def test_threads_each_running_their_own_event_loop(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    """The SDK's SQLite concurrency case: one session object, writes from five threads, each
    with its own event loop (a loop-bound lock deadlocked here)."""
    session = make_session("concurrent_test")
    items = [{"role": "user", "content": f"Message {i}"} for i in range(10)]

    def add_item(item: dict[str, Any]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(session.add_items([item]))
        finally:
            loop.close()

    def work() -> None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
            list(pool.map(add_item, items))

    await asyncio.wait_for(asyncio.to_thread(work), timeout=60)
    assert sorted(contents(await session.get_items())) == sorted(contents(items))


async def test_concurrent_gathered_writes_keep_every_item(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session("concurrent_gather")

    async def add(start: int) -> None:
        await session.add_items(
            [{"role": "user", "content": f"Message {start + i}"} for i in range(5)]
        )

    await asyncio.gather(add(0), add(5), add(10))
    got = contents(await session.get_items())
    assert sorted(got) == sorted(f"Message {i}" for i in range(15))
    for start in (0, 5, 10):  # one add_items call stays contiguous
        first = got.index(f"Message {start}")
        assert got[first : first + 5] == [f"Message {start + i}" for i in range(5)]


async def test_concurrent_pops_on_two_session_objects_pop_distinct_items(
    store_factory: Callable[[], Store],
) -> None:
    """Two session objects of one process on the same store and id share a lock: concurrent
    pops each remove a different item (SQLite's DELETE ... RETURNING guarantees as much)."""
    store = store_factory()
    a, b = CtxEngineSession("shared", store), CtxEngineSession("shared", store)
    await a.add_items([{"role": "user", "content": str(i)} for i in range(10)])
    popped = await asyncio.gather(*(s.pop_item() for s in [a, b] * 4))
    assert sorted(contents(popped)) == [str(i) for i in range(2, 10)]
    assert contents(await b.get_items()) == ["0", "1"]


async def test_sessions_on_two_store_objects_see_the_same_items(
    store_factory: Callable[[], Store],
) -> None:
    one = CtxEngineSession("same_id", store_factory())
    two = CtxEngineSession("same_id", store_factory())
    other = CtxEngineSession("other_id", store_factory())
    await one.add_items([{"role": "user", "content": "one"}])
    await two.add_items([{"role": "user", "content": "two"}])
    assert contents(await one.get_items()) == ["one", "two"]
    assert await other.get_items() == []


async def test_redis_prefixes_isolate_sessions_with_the_same_id(redis_url: str) -> None:
    run = uuid.uuid4().hex[:8]
    app1 = CtxEngineSession("same_id", RedisStore(redis_url, prefix=f"app1-{run}"))
    app2 = CtxEngineSession("same_id", RedisStore(redis_url, prefix=f"app2-{run}"))
    await app1.add_items([{"role": "user", "content": "app1 message"}])
    await app2.add_items([{"role": "user", "content": "app2 message"}])
    assert contents(await app1.get_items()) == ["app1 message"]
    assert contents(await app2.get_items()) == ["app2 message"]


# --- session_settings -----------------------------------------------------------------------


async def test_session_settings_default_and_constructor(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    default = make_session()
    assert isinstance(default.session_settings, SessionSettings)
    assert default.session_settings.limit is None
    assert make_session(session_settings=SessionSettings(limit=5)).session_settings == (
        SessionSettings(limit=5)
    )
    from_dict = make_session(session_settings={"limit": 4}).session_settings
    assert from_dict == SessionSettings(limit=4)


async def test_get_items_uses_the_settings_limit_and_an_explicit_limit_wins(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session(session_settings=SessionSettings(limit=3))
    await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)])
    assert contents(await session.get_items()) == ["Message 7", "Message 8", "Message 9"]
    assert contents(await session.get_items(limit=2)) == ["Message 8", "Message 9"]
    assert len(await session.get_items(limit=10)) == 10
    session.session_settings = SessionSettings(limit=1)  # settings can change later
    assert contents(await session.get_items()) == ["Message 9"]


@pytest.mark.parametrize(
    ("bad", "error"),
    [(5, ConfigTypeError), ("limit=3", ConfigTypeError), ({"bogus": 1}, ConfigError)],
)
async def test_bad_session_settings_are_refused_naming_them(
    make_session: Callable[..., CtxEngineSession], bad: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"session_settings is .*expected"):
        make_session(session_settings=bad)


# --- the Runner -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", RUNNERS)
async def test_runner_remembers_across_turns(
    make_session: Callable[..., CtxEngineSession], method: str
) -> None:
    session = make_session("test_session_123")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.set_next_output([text_message("San Francisco")])
    first = await run_agent(
        method, agent, "What city is the Golden Gate Bridge in?", session=session
    )
    assert first.final_output == "San Francisco"
    model.set_next_output([text_message("California")])
    second = await run_agent(method, agent, "What state is it in?", session=session)
    assert second.final_output == "California"
    sent = model.last_turn_args["input"]
    assert sent[0]["content"] == "What city is the Golden Gate Bridge in?"
    assert sent[1]["content"][0]["text"] == "San Francisco"
    assert sent[-1]["content"] == "What state is it in?"
    assert len(await session.get_items()) == 4


@pytest.mark.parametrize("method", RUNNERS)
async def test_runner_keeps_sessions_apart(
    make_session: Callable[..., CtxEngineSession], method: str
) -> None:
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    one, two = make_session("session_1"), make_session("session_2")
    model.set_next_output([text_message("I like cats")])
    await run_agent(method, agent, "I like cats", session=one)
    model.set_next_output([text_message("I like dogs")])
    await run_agent(method, agent, "I like dogs", session=two)
    model.set_next_output([text_message("Yes, you mentioned cats")])
    third = await run_agent(method, agent, "What did I say I like?", session=one)
    assert third.final_output == "Yes, you mentioned cats"
    sent = str(model.last_turn_args["input"])
    assert "cats" in sent and "dogs" not in sent


@pytest.mark.parametrize("method", RUNNERS)
async def test_list_input_is_appended_to_the_history(
    make_session: Callable[..., CtxEngineSession], method: str
) -> None:
    session = make_session()
    history = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    await session.add_items(history)
    model = ScriptedModel()
    model.set_next_output([text_message("This should run")])
    new = [{"role": "user", "content": "Test message"}]
    await run_agent(method, Agent(name="test", model=model), new, session=session)
    assert model.last_turn_args["input"] == history + new


@pytest.mark.parametrize("method", RUNNERS)
async def test_session_input_callback(
    make_session: Callable[..., CtxEngineSession], method: str
) -> None:
    session = make_session()
    history = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    await session.add_items(history)

    def users_only(old: list[Any], new: list[Any]) -> list[Any]:
        return [item for item in old if item["role"] == "user"] + new

    model = ScriptedModel()
    model.set_next_output([text_message("I'm gpt-4o")])
    new = [{"role": "user", "content": "What your name?"}]
    config = RunConfig(session_input_callback=users_only, tracing_disabled=True)
    await run_agent(
        method, Agent(name="test", model=model), new, session=session, run_config=config
    )
    assert model.last_turn_args["input"] == [history[0], new[0]]
    stored = await session.get_items()
    assert stored[:3] == [*history, new[0]]  # only the new turn is written, after the history
    assert stored[3]["content"][0]["text"] == "I'm gpt-4o"


@pytest.mark.parametrize("method", RUNNERS)
async def test_run_config_session_settings_limit(
    make_session: Callable[..., CtxEngineSession], method: str
) -> None:
    session = make_session("limit_test", session_settings=SessionSettings(limit=100))
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    for i in range(1, 4):
        model.set_next_output([text_message(f"Reply {i}")])
        await run_agent(method, agent, f"Message {i}", session=session)
    assert len(await session.get_items()) == 6

    model.set_next_output([text_message("Reply 4")])
    config = RunConfig(session_settings=SessionSettings(limit=2), tracing_disabled=True)
    await run_agent(method, agent, "Message 4", session=session, run_config=config)
    sent = model.last_turn_args["input"]
    assert len(sent) == 3
    assert sent[0]["content"] == "Message 3"
    assert sent[1]["content"][0]["text"] == "Reply 3"
    assert sent[2]["content"] == "Message 4"


@pytest.mark.parametrize("method", RUNNERS)
async def test_run_config_session_limit_zero_sends_no_history(
    make_session: Callable[..., CtxEngineSession], method: str
) -> None:
    session = make_session("limit_zero_test")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    for i in range(1, 3):
        model.set_next_output([text_message(f"Reply {i}")])
        await run_agent(method, agent, f"Message {i}", session=session)
    model.set_next_output([text_message("Reply 3")])
    config = RunConfig(session_settings=SessionSettings(limit=0), tracing_disabled=True)
    await run_agent(method, agent, "Message 3", session=session, run_config=config)
    assert model.last_turn_args["input"] == [{"role": "user", "content": "Message 3"}]
    assert len(await session.get_items()) == 6


@pytest.mark.parametrize("limit", [None, 100])
async def test_run_config_session_limit_none_or_larger_sends_everything(
    make_session: Callable[..., CtxEngineSession], limit: int | None
) -> None:
    session = make_session("limit_none_test")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    for i in range(1, 6):
        model.set_next_output([text_message(f"Reply {i}")])
        await run_agent("run", agent, f"Message {i}", session=session)
    model.set_next_output([text_message("Reply 6")])
    config = RunConfig(session_settings=SessionSettings(limit=limit), tracing_disabled=True)
    await run_agent("run", agent, "Message 6", session=session, run_config=config)
    sent = model.last_turn_args["input"]
    assert len(sent) == 11
    assert sent[0]["content"] == "Message 1"
    assert sent[-1]["content"] == "Message 6"


@function_tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"Sunny in {city}"


@pytest.mark.parametrize("method", RUNNERS)
async def test_runner_tool_turns_round_trip_through_the_store(
    make_session: Callable[..., CtxEngineSession],
    store_factory: Callable[[], Store],
    method: str,
) -> None:
    """The items the Runner writes (a function call, its output, the answer) come back as the
    next turn's input exactly as written, also through a second store object."""
    session = make_session("tools")
    model = ScriptedModel()
    agent = Agent(name="test", model=model, tools=[get_weather])
    model.set_next_output([tool_call("get_weather", '{"city": "Paris"}', "call_1")])
    model.set_next_output([text_message("It is sunny.", 2)])
    result = await run_agent(method, agent, "Weather in Paris?", session=session)
    assert result.final_output == "It is sunny."
    stored = await session.get_items()
    assert [item.get("type", "message") for item in stored] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert stored[2] == {
        "call_id": "call_1",
        "output": "Sunny in Paris",
        "type": "function_call_output",
    }
    assert stored == [*model.last_turn_args["input"], stored[-1]]

    model.set_next_output([text_message("Still sunny.", 3)])
    reopened = CtxEngineSession("tools", store_factory())
    await run_agent(method, agent, "And tomorrow?", session=reopened)
    assert model.last_turn_args["input"] == [*stored, {"role": "user", "content": "And tomorrow?"}]


async def test_add_items_failure_propagates_from_a_streamed_run(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    session = make_session()

    async def failing(_items: list[Any]) -> None:
        raise RuntimeError("Simulated session.add_items failure")

    session.add_items = failing  # type: ignore[method-assign]
    model = ScriptedModel()
    model.set_next_output([text_message("This should not be reached")])
    result = Runner.run_streamed(
        Agent(name="test", model=model),
        "Hello",
        session=session,
        run_config=RunConfig(tracing_disabled=True),
    )

    async def consume() -> None:
        async for _ in result.stream_events():
            pass

    with pytest.raises(RuntimeError, match=r"Simulated session\.add_items failure"):
        await asyncio.wait_for(consume(), timeout=10)


async def test_retry_rewind_pops_exactly_the_items_it_wrote(
    make_session: Callable[..., CtxEngineSession],
) -> None:
    """The Runner's retry rewind reads the tail back (``get_items(limit=n)``), compares it
    with what it wrote, then pops: a lossy round trip would leave duplicates behind."""
    session = make_session()
    keep = [{"role": "user", "content": "keep"}]
    written = [ITEM_KINDS[4], ITEM_KINDS[5], ITEM_KINDS[6], ITEM_KINDS[7]]
    await session.add_items(keep)
    await session.add_items(written)
    await rewind_session_items(session, written)
    assert await session.get_items() == keep
