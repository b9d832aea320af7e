"""The OpenAI Agents SDK: CtxEngineSession (its session protocol) and fit_model_input, with a
real Runner and a fake Model returning a tool call, then text, for 30 turns."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.memory import Session as SessionProtocol
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from ctxengine import SessionIdError
from ctxengine.integrations.openai_agents import (
    ITEM_KIND,
    POP_KIND,
    CtxEngineSession,
    MemoryItemStore,
    fit_model_input,
)
from ctxengine.store import FileStore, InMemoryStore, NewEntry, Store

from .agent_helpers import BUDGET, TURNS, tiktoken_responses_tokens, tool_outputs

pytestmark = pytest.mark.anyio
OUTPUTS = tool_outputs()


class FakeModel(Model):
    """A tool call for a user turn, a text answer after a tool output; records its inputs."""

    def __init__(self) -> None:
        self.received: list[tuple[str | None, list[Any]]] = []

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        self.received.append((system_instructions, items))
        n = len(self.received)
        last = items[-1]
        output: list[Any]
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            text = ResponseOutputText(type="output_text", text=f"Done {n}.", annotations=[])
            output = [
                ResponseOutputMessage(
                    id=f"msg_{n}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{n}",
                    call_id=f"call_{n}",
                    name="read_log",
                    arguments=f'{{"part": {n}}}',
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


@function_tool
def read_log(part: int) -> str:
    """Read one part of the session log."""
    return OUTPUTS[part % len(OUTPUTS)]


def _plain(item: Any) -> dict[str, Any]:
    return item if isinstance(item, dict) else item.model_dump(exclude_none=True)


def _paired(items: list[dict[str, Any]]) -> bool:
    """Every function call is answered by the items right after it, and no output is orphan."""
    pending: set[str] = set()
    for item in items:
        kind = item.get("type")
        if kind == "function_call_output":
            if item["call_id"] not in pending:
                return False
            pending.discard(item["call_id"])
        elif kind == "function_call":
            pending.add(item["call_id"])
        elif pending:
            return False
    return not pending


async def test_runner_30_turns_through_session_and_filter() -> None:
    model = FakeModel()
    agent = Agent(
        name="summarizer", instructions="You summarize logs.", model=model, tools=[read_log]
    )
    session = CtxEngineSession("user-42")
    fit_filter = fit_model_input(model="gpt-4o", budget=BUDGET)
    config = RunConfig(call_model_input_filter=fit_filter, tracing_disabled=True)
    for turn in range(TURNS):
        result = await Runner.run(
            agent, f"Summarize part {turn}.", session=session, run_config=config
        )
        assert result.final_output == f"Done {2 * turn + 2}."

    assert len(model.received) == 2 * TURNS
    stored = await session.get_items()
    assert tiktoken_responses_tokens("You summarize logs.", stored) > 4 * BUDGET
    for instructions, items in model.received:
        plain = [_plain(i) for i in items]
        assert _paired(plain)
        assert tiktoken_responses_tokens(instructions, plain) <= BUDGET
        assert instructions == "You summarize logs."
    assert fit_filter.last is not None and fit_filter.last.tokens <= BUDGET


async def test_session_protocol_round_trip() -> None:
    store = MemoryItemStore()
    session = CtxEngineSession("s1", store)
    assert isinstance(session, SessionProtocol)
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=1) == items[-1:]
    assert await session.pop_item() == items[-1]
    assert await session.get_items() == items[:2]
    (await session.get_items())[0]["content"] = "edited"  # a copy: the store is unchanged
    assert (await session.get_items())[0]["content"] == "hi"
    assert await CtxEngineSession("s1", store).get_items() == items[:2]  # shared store
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_file_store_session_is_seen_by_a_new_session_on_the_same_folder(
    tmp_path: Path,
) -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        {"role": "assistant", "content": "one file"},
    ]
    first = CtxEngineSession("user-42", FileStore(tmp_path))
    await first.add_items(items[:3])
    await first.add_items(items[3:])
    assert await first.pop_item() == items[-1]
    reopened = CtxEngineSession("user-42", FileStore(tmp_path))  # as a new process would
    assert await reopened.get_items() == items[:3]
    assert await CtxEngineSession("other", FileStore(tmp_path)).get_items() == []
    await reopened.add_items(items[3:])
    assert await CtxEngineSession("user-42", FileStore(tmp_path)).get_items() == items
    await reopened.clear_session()
    assert await CtxEngineSession("user-42", FileStore(tmp_path)).get_items() == []


async def test_session_is_a_branch_of_the_store_transcript() -> None:
    store = InMemoryStore()
    session = CtxEngineSession("s1", store)
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    await session.pop_item()
    kinds = [e.kind for e in store.entries("s1")]
    assert kinds == [ITEM_KIND, ITEM_KIND, POP_KIND]  # append-only: the popped item is kept
    leaf = store.branch("s1")
    assert [e.kind for e in leaf] == [ITEM_KIND, POP_KIND]
    assert await session.get_items() == [{"role": "user", "content": "a"}]
    assert isinstance(store, Store)


class _Interleaved:
    """A FileStore on which another process's call runs right after this one's next read of a
    branch (whole or its tail): the window between a pop's read and its write, made to happen
    every time."""

    def __init__(self, root: Path) -> None:
        self.inner = FileStore(root)
        self.problems = self.inner.problems
        self.meanwhile: list[Any] = []  # callables, each run once, after a branch() read

    def branch(self, session_id: str, leaf_id: str | None = None) -> Any:
        out = self.inner.branch(session_id, leaf_id)
        if self.meanwhile:
            self.meanwhile.pop(0)()
        return out

    def branch_tail(self, session_id: str, count: int, **kwargs: Any) -> Any:
        out = self.inner.branch_tail(session_id, count, **kwargs)
        if self.meanwhile:
            self.meanwhile.pop(0)()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_pop_racing_another_process_neither_repeats_nor_drops_an_item(
    tmp_path: Path,
) -> None:
    """pop_item read the branch, then appended its marker at the newest item's parent: an item
    another process added in between fell off the branch (a lost write), and a pop in between
    made both return the same item. The marker is now a compare-and-append; a pop that loses
    starts again on the branch as it is."""
    store = _Interleaved(tmp_path)
    mine = CtxEngineSession("race", store)  # type: ignore[arg-type]
    other = CtxEngineSession("race", FileStore(tmp_path))  # another process's store object
    await mine.add_items([{"n": 0}, {"n": 1}, {"n": 2}])
    store.meanwhile.append(
        lambda: FileStore(tmp_path).append("race", [NewEntry(ITEM_KIND, {"item": {"n": 3}})])
    )
    assert await mine.pop_item() == {"n": 3}  # the item added meanwhile, not {"n": 2}
    assert await other.get_items() == [{"n": 0}, {"n": 1}, {"n": 2}]  # nothing dropped
    popped_meanwhile: list[Any] = []

    def pop_elsewhere() -> None:  # the other process pops while this one is between read/write
        branch = [e for e in FileStore(tmp_path).branch("race") if e.kind == ITEM_KIND]
        FileStore(tmp_path).append(
            "race", [NewEntry(POP_KIND, {"popped": branch[-1].id})], parent_id=branch[-1].parent_id
        )
        popped_meanwhile.append(branch[-1].data["item"])

    store.meanwhile.append(pop_elsewhere)
    assert await mine.pop_item() == {"n": 1}  # not {"n": 2} a second time
    assert popped_meanwhile == [{"n": 2}]
    assert await other.get_items() == [{"n": 0}]


def test_bad_session_id_is_refused_naming_it() -> None:
    with pytest.raises(SessionIdError, match=re.escape("'../x'")):
        CtxEngineSession("../x")


class ServerStateModel(FakeModel):
    """:class:`FakeModel` answering with response ids, recording the conversation state each
    call names (what the Runner passes a model with the conversation kept on the server)."""

    def __init__(self) -> None:
        super().__init__()
        self.state: list[tuple[str | None, str | None]] = []

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.state.append((kwargs.get("previous_response_id"), kwargs.get("conversation_id")))
        response = await super().get_response(system_instructions, input, *args, **kwargs)
        return ModelResponse(
            output=response.output, usage=Usage(), response_id=f"resp_{len(self.received)}"
        )


@pytest.mark.parametrize("server_state", [None, True])
@pytest.mark.parametrize(
    "state",
    [
        {"previous_response_id": "resp_0"},
        {"conversation_id": "conv_abc"},
        {"auto_previous_response_id": True},
    ],
)
async def test_the_filter_sends_the_output_of_a_call_the_server_holds(
    state: dict[str, Any], server_state: bool | None
) -> None:
    """With the conversation on the server the Runner sends only the new items
    (``agents/run_internal/oai_conversation.py``, ``OpenAIServerConversationTracker``): the
    second call's input is the tool output alone, its call being on the server. The filter
    dropped it as an orphan and sent a "(session bootstrap)" message instead. An input of
    outputs alone is taken for a delta when the filter is not told (``server_state=None``)."""
    model = ServerStateModel()
    agent = Agent(name="reader", instructions="Be brief.", model=model, tools=[read_log])
    config = RunConfig(
        call_model_input_filter=fit_model_input(
            model="gpt-4o", budget=BUDGET, server_state=server_state
        ),
        tracing_disabled=True,
    )
    result = await Runner.run(agent, "Read part 1.", run_config=config, **state)
    assert result.final_output == "Done 2."
    _, second = model.received[1]
    assert [_plain(i).get("type") for i in second] == ["function_call_output"]
    assert _plain(second[0])["call_id"] == "call_1"
    assert _plain(second[0])["output"] == OUTPUTS[1 % len(OUTPUTS)]
    assert model.state[1] != (None, None)  # the call named the server's conversation


async def test_outputs_sent_with_a_new_question_need_server_state() -> None:
    """A run that stopped at its tool (``tool_use_behavior="stop_on_first_tool"``) leaves a
    response whose call the server holds without its output; the caller goes on with
    ``previous_response_id`` and ``[output, user message]``, which the Runner passes the filter
    as it is. Only ``server_state=True`` tells that input from a client history cut to the same
    two items (whose output is an orphan): with it the output is sent, with the default it is
    left out."""
    model = ServerStateModel()
    first = Agent(
        name="reader", model=model, tools=[read_log], tool_use_behavior="stop_on_first_tool"
    )
    result = await Runner.run(first, "Read part 1.", run_config=RunConfig(tracing_disabled=True))
    outputs = [i for i in result.to_input_list() if _plain(i).get("type") == "function_call_output"]
    assert [_plain(i)["call_id"] for i in outputs] == ["call_1"]
    ask = {"role": "user", "content": "And part 2?"}
    sent: dict[bool | None, list[Any]] = {}
    for server_state in (True, None):
        model.received.clear()
        config = RunConfig(
            call_model_input_filter=fit_model_input(
                model="gpt-4o", budget=BUDGET, server_state=server_state
            ),
            tracing_disabled=True,
        )
        agent = Agent(name="reader", model=model, tools=[read_log])
        await Runner.run(
            agent,
            [*outputs, ask],
            run_config=config,
            previous_response_id=result.last_response_id,
        )
        sent[server_state] = [_plain(i) for i in model.received[0][1]]
    assert [i.get("type") or i.get("role") for i in sent[True]] == ["function_call_output", "user"]
    assert sent[True][0]["call_id"] == "call_1"
    assert [i.get("type") or i.get("role") for i in sent[None]] == ["user"]


def _store_maker(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """New store objects on one backing place: each call is a new worker's."""
    if kind == "memory":
        memory = InMemoryStore()
        return lambda: memory
    if kind == "file":
        return lambda: FileStore(tmp_path, fsync=False)
    from ctxengine.store import RedisStore

    url, prefix = request.getfixturevalue("redis_url"), f"t{uuid.uuid4().hex[:10]}"
    return lambda: RedisStore(url, prefix=prefix)


class _NoWholeBranch:
    """A store whose whole-branch read fails: what reads only the tail never calls it."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def branch(self, session_id: str, leaf_id: str | None = None) -> Any:
        raise AssertionError("the whole branch was read")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("kind", ["memory", "file", "redis"])
async def test_get_items_with_a_limit_and_pop_item_read_only_the_tail(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """They read the whole branch on every call (a 10,000-item session cost the read of
    10,000 entries per get_items(limit=20)); they now read the session's newest entries."""
    make = _store_maker(kind, tmp_path, request)
    session = CtxEngineSession("tail", _NoWholeBranch(make()))  # type: ignore[arg-type]
    await session.add_items([{"n": k} for k in range(6)])
    assert await session.get_items(limit=2) == [{"n": 4}, {"n": 5}]
    assert await session.pop_item() == {"n": 5}
    await session.add_items([{"n": 6}])
    assert await session.pop_item() == {"n": 6}
    assert await session.get_items(limit=9) == [{"n": k} for k in range(5)]
    assert await CtxEngineSession("tail", make()).get_items() == [{"n": k} for k in range(5)]


@pytest.mark.parametrize("kind", ["file", "redis"])
async def test_limited_reads_equal_the_full_read_across_workers(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each call from a new store object (a stateless worker) or the same one, on a session
    of adds, pops and clears longer than what a store reads from the end first: every
    get_items(limit) is the end of get_items(), every pop the last of them."""
    from ctxengine.store import file as file_module
    from ctxengine.store import redis_store

    monkeypatch.setattr(file_module, "TAIL_CHUNK", 256)
    monkeypatch.setattr(redis_store, "TAIL_PAGE", 3)
    make = _store_maker(kind, tmp_path, request)
    kept = CtxEngineSession("w", make())
    rng = random.Random(11)
    n = 0
    for step in range(60):
        worker = kept if step % 2 else CtxEngineSession("w", make())
        roll = rng.random()
        before = await CtxEngineSession("w", make()).get_items()
        if roll < 0.55:
            await worker.add_items([{"n": n + k} for k in range(rng.randint(1, 3))])
            n += 3
        elif roll < 0.9:
            assert await worker.pop_item() == (before[-1] if before else None)
        else:
            await worker.clear_session()
        full = await CtxEngineSession("w", make()).get_items()
        for limit in (1, 2, 5, 50):
            assert await CtxEngineSession("w", make()).get_items(limit=limit) == full[-limit:]
            assert await kept.get_items(limit=limit) == full[-limit:]
