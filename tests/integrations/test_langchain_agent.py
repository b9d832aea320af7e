"""A LangChain v1 agent (create_agent + a fake tool-calling model) runs 30 turns through
ContextMiddleware: every model call is within budget and its tool calls are paired."""

from __future__ import annotations

from typing import Any, cast

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxengine import ContextEngine
from ctxengine.builtins import ToolResultCompressor
from ctxengine.integrations.langchain import ContextMiddleware

from .agent_helpers import BUDGET, TURNS, tiktoken_chat_tokens, tool_outputs

OUTPUTS = tool_outputs()


class ToolCallingFake(BaseChatModel):
    """Answers a user turn with a tool call, a tool result with text; records its inputs."""

    received: list[list[BaseMessage]] = []  # noqa: RUF012

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append(list(messages))
        n = len(self.received)
        if isinstance(messages[-1], HumanMessage):
            call = {"name": "read_log", "args": {"part": n}, "id": f"call_{n}"}
            reply = AIMessage(f"Reading part {n}.", tool_calls=[call])
        else:
            reply = AIMessage(f"Part summarized ({len(messages)} messages seen).")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def read_log(part: int) -> str:
    """Read one part of the session log."""
    return OUTPUTS[part % len(OUTPUTS)]


def _valid(messages: list[BaseMessage]) -> bool:
    """Every tool call is answered right after it, and every result follows its call."""
    pending: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            if m.tool_call_id not in pending:
                return False
            pending.discard(m.tool_call_id)
        else:
            if pending:
                return False
            if isinstance(m, AIMessage):
                pending = {c["id"] for c in m.tool_calls if c["id"]}
    return not pending


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langchain_agent_30_turns_within_budget(mode: str) -> None:
    model = ToolCallingFake()
    model.received = []
    engine = ContextEngine("gpt-4o", BUDGET, plugins=[ToolResultCompressor()])
    middleware = ContextMiddleware(engine)
    agent = create_agent(
        model,
        tools=[read_log],
        system_prompt="You summarize logs. Call read_log for each request.",
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": mode}}
    for turn in range(TURNS):
        request = {"messages": [HumanMessage(f"Summarize part {turn} of the log.")]}
        if mode == "sync":
            state = agent.invoke(request, config)
        else:
            import asyncio

            state = asyncio.run(agent.ainvoke(request, config))
    middleware.close()

    assert len(model.received) == 2 * TURNS  # a tool call and an answer per turn
    full = tiktoken_chat_tokens(convert_to_openai_messages(state["messages"]))
    assert full > 4 * BUDGET  # the agent's own history is far over the budget
    for messages in model.received:
        assert _valid(messages)
        assert tiktoken_chat_tokens(convert_to_openai_messages(messages)) <= BUDGET
        assert isinstance(messages[-1], (HumanMessage, ToolMessage))  # the newest turn survives
    last = model.received[-1]
    assert last[0].type == "system" and "summarize logs" in str(last[0].content)
    assert middleware.last is not None and middleware.last.tokens <= BUDGET


def _fit_conversations_at_once(
    middleware: ContextMiddleware, conversations: int, turns: int
) -> list[str]:
    """``conversations`` threads, started together, each fitting ``turns`` calls of its own
    conversation through ``middleware``; what went wrong (a thread still running after the
    wait counts as hung: the threads are daemons, so a hang fails the test, not the run)."""
    import threading
    import time

    from langchain.agents.middleware import ModelRequest
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    model = ToolCallingFake()
    wrong: list[str] = []
    start = threading.Barrier(conversations)

    def converse(who: int) -> None:
        try:
            talk(who)
        except Exception as exc:  # a thread's error fails the test, not only a warning
            wrong.append(f"{who}: {exc!r}")

    def talk(who: int) -> None:
        history: list[BaseMessage] = []
        start.wait(10)
        for turn in range(turns):
            history.append(HumanMessage(f"conversation {who}, question {turn}"))
            request = ModelRequest(
                model=model, messages=list(history), system_message=SystemMessage(f"agent {who}")
            )
            fitted = middleware.fit(request)
            texts = [str(m.content) for m in fitted.messages]
            if texts[-1] != f"conversation {who}, question {turn}" or any(
                f"conversation {who}," not in t for t in texts if t.startswith("conversation")
            ):
                wrong.append(f"{who}/{turn}: {texts[-3:]}")
            if fitted.system_message is None or fitted.system_message.content != f"agent {who}":
                wrong.append(f"{who}/{turn}: system {fitted.system_message}")
            history.append(AIMessage(f"conversation {who}, answer {turn}"))

    threads = [
        threading.Thread(target=converse, args=(who,), name=f"conversation {who}", daemon=True)
        for who in range(conversations)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return wrong + [f"{t.name} hung" for t in threads if t.is_alive()]


def test_conversations_fitted_at_once_each_get_their_own_messages() -> None:
    """``abatch`` or threads: calls of several conversations through one middleware at once.
    Each call's rendered messages are its own conversation's, and a conversation that goes on
    continues its session (one session per conversation, not one restart per call)."""
    middleware = ContextMiddleware(ContextEngine("gpt-4o", BUDGET))
    wrong = _fit_conversations_at_once(middleware, conversations=4, turns=25)
    sessions = len(middleware._pool)
    middleware.close()
    assert wrong == []
    assert sessions == 4  # one session per conversation, each continued call after call


def test_conversations_starting_at_once_never_hang() -> None:
    """Round after round, conversations start on several threads at once through a fresh
    middleware and engine: their sessions open together, each on its own event loop. The
    engine's lock for plugin setup was an ``anyio.Lock`` whose release on one thread woke the
    next session with a wake-up its sleeping loop never ran, so the middleware hung in about
    one round in fifteen of four conversations."""
    for _ in range(12):
        middleware = ContextMiddleware(ContextEngine("gpt-4o", BUDGET))
        wrong = _fit_conversations_at_once(middleware, conversations=8, turns=3)
        middleware.close()
        assert wrong == []


def test_two_context_middlewares_in_one_agent_have_distinct_names() -> None:
    """``create_agent`` refuses middleware sharing a name ("Please remove duplicate middleware
    instances."): two ContextMiddleware objects (a trimming engine and a summarizing one) get
    distinct names by default, and keep the names they are given."""
    model = ToolCallingFake()
    model.received = []
    first = ContextMiddleware(ContextEngine("gpt-4o", BUDGET))
    second = ContextMiddleware(ContextEngine("gpt-4o", BUDGET * 2))
    assert first.name != second.name
    assert all(m.name.startswith("ContextMiddleware") for m in (first, second))
    agent = create_agent(model, tools=[read_log], middleware=[first, second])
    state = agent.invoke({"messages": [HumanMessage("Summarize part 1 of the log.")]})
    assert isinstance(state["messages"][-1], AIMessage)
    assert first.last is not None and second.last is not None  # both fitted each call
    first.close()
    second.close()

    named = [ContextMiddleware(name="trim"), ContextMiddleware(name="summarize")]
    assert [m.name for m in named] == ["trim", "summarize"]
    create_agent(model, tools=[read_log], middleware=named)
    with pytest.raises(AssertionError, match="duplicate middleware"):
        create_agent(model, tools=[read_log], middleware=[named[0], ContextMiddleware(name="trim")])


@pytest.mark.parametrize("name", ["", 3])
def test_a_context_middleware_name_must_be_a_non_empty_string(name: Any) -> None:
    from ctxengine.errors import ConfigTypeError

    with pytest.raises(ConfigTypeError, match="name is"):
        ContextMiddleware(name=name)


def test_a_store_backed_middleware_never_resumes_another_process_conversation(
    tmp_path: Any,
) -> None:
    # sessions were named by a counter that starts again in every process: a restarted worker
    # resumed the stored session of an earlier conversation as a new one's
    import json
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import json, sys
        from langchain.agents import create_agent
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, HumanMessage
        from ctxengine import ContextEngine, FileStore
        from ctxengine.integrations.langchain import ContextMiddleware

        engine = ContextEngine("gpt-4o", 4000, store=FileStore(sys.argv[1]))
        mw = ContextMiddleware(engine)
        model = GenericFakeChatModel(messages=iter([AIMessage("ok")]))
        agent = create_agent(model, tools=[], system_prompt="sys", middleware=[mw])
        agent.invoke({"messages": [HumanMessage(sys.argv[2])]})
        print(json.dumps([m.get("content") for m in mw.last.payload["messages"]]))
        mw.close()
        engine.close()
        """
    )
    seen = []
    for text in ("SECRET conversation A", "conversation B"):  # two processes, one store
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path), text],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        seen.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert seen == [["sys", "SECRET conversation A"], ["sys", "conversation B"]]


def test_the_middleware_sends_a_message_edited_in_place_as_edited() -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    mw = ContextMiddleware(ContextEngine("gpt-4o", 4000))
    model = GenericFakeChatModel(messages=iter([AIMessage("ok1"), AIMessage("ok2")]))
    agent = create_agent(model, tools=[], middleware=[mw])
    state = agent.invoke({"messages": [HumanMessage("my card is 4111-1111-1111-1111")]})
    state["messages"][0].content = "my card is [REDACTED]"  # a redaction, in place
    agent.invoke({"messages": [*state["messages"], HumanMessage("next")]})
    assert mw.last is not None
    sent = [m["content"] for m in mw.last.payload["messages"]]
    assert sent == ["my card is [REDACTED]", "ok1", "next"]
    mw.close()


def _thinking_history() -> list[AnyMessage]:
    """An Anthropic extended-thinking exchange: a signed thinking block, a tool call, ids."""
    return [
        HumanMessage("What's the weather in Paris?", id="h1"),
        AIMessage(
            [
                {"type": "thinking", "thinking": "Call the weather tool.", "signature": "EqQBsig"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"c": "Paris"}},
            ],
            tool_calls=[{"name": "weather", "args": {"c": "Paris"}, "id": "toolu_01"}],
            id="a1",
            response_metadata={"model_provider": "anthropic"},
        ),
        ToolMessage("18C, cloudy", tool_call_id="toolu_01", id="t1"),
    ]


def test_the_model_receives_the_callers_own_unchanged_messages() -> None:
    # every message was rebuilt from the OpenAI render: the signed thinking block and the ids
    # were gone, and Anthropic refuses a tool-use turn without its thinking block
    from langchain.agents.middleware import ModelRequest
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import SystemMessage

    mw = ContextMiddleware(ContextEngine("claude-sonnet-4-5", 20_000))
    history = _thinking_history()
    system = SystemMessage("You are an agent.")
    model = GenericFakeChatModel(messages=iter([]))
    request = ModelRequest(model=model, messages=list(history), system_message=system)
    fitted = mw.fit(request)
    assert fitted.system_message is system
    assert len(fitted.messages) == 3
    assert all(a is b for a, b in zip(fitted.messages, history, strict=True))
    thanks = HumanMessage("thanks")
    request = ModelRequest(model=model, messages=[*history, thanks], system_message=system)
    fitted = mw.fit(request)  # the same session, warm
    assert fitted.system_message is system
    assert all(a is b for a, b in zip(fitted.messages, [*history, thanks], strict=True))
    mw.close()


def test_a_turn_with_redacted_thinking_is_handed_back_as_it_came() -> None:
    """Claude may return a ``redacted_thinking`` block, which ChatAnthropic keeps in the
    ``AIMessage`` content: the middleware refused the whole history (``TranscriptError``:
    "content block type is 'redacted_thinking'"), so the agent's next model call failed."""
    from langchain.agents.middleware import ModelRequest
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    history = _thinking_history()
    blocks = list(cast("list[Any]", history[1].content))
    blocks.insert(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})
    history[1] = history[1].model_copy(update={"content": blocks})
    mw = ContextMiddleware(ContextEngine("claude-sonnet-4-5", 20_000))
    model = GenericFakeChatModel(messages=iter([]))
    fitted = mw.fit(ModelRequest(model=model, messages=list(history), system_message=None))
    assert all(a is b for a, b in zip(fitted.messages, history, strict=True))
    mw.close()


def test_an_agent_sends_anthropic_thinking_blocks_back() -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    received: list[list[BaseMessage]] = []

    class Spy(GenericFakeChatModel):
        def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
            received.append(messages)
            return super()._generate(messages, *a, **k)

    mw = ContextMiddleware(ContextEngine("claude-sonnet-4-5", 50_000))
    agent = create_agent(Spy(messages=iter([AIMessage("It's 18C.")])), tools=[], middleware=[mw])
    agent.invoke({"messages": _thinking_history()})
    ai = next(m for m in received[0] if isinstance(m, AIMessage))
    first: Any = ai.content[0] if isinstance(ai.content, list) else None
    assert first == _thinking_history()[1].content[0]  # the signed thinking block
    assert ai.id == "a1"
    assert [m.id for m in received[0]] == ["h1", "a1", "t1"]
    mw.close()


def test_only_the_messages_the_engine_changed_are_rebuilt() -> None:
    from langchain.agents.middleware import ModelRequest
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    compressor = ToolResultCompressor(threshold_chars=400, head_chars=120, tail_chars=60)
    mw = ContextMiddleware(ContextEngine("claude-sonnet-4-5", 20_000, plugins=[compressor]))
    history = _thinking_history()
    history[2] = ToolMessage("error: missing header foo.h\n" * 40, tool_call_id="toolu_01")
    history.append(HumanMessage("and now?", id="h2"))
    model = GenericFakeChatModel(messages=iter([]))
    fitted = mw.fit(ModelRequest(model=model, messages=list(history), system_message=None))
    sent = fitted.messages
    assert sent[0] is history[0] and sent[1] is history[1] and sent[3] is history[3]
    assert isinstance(sent[2], ToolMessage) and sent[2] is not history[2]  # compressed: rebuilt
    assert "omitted" in str(sent[2].content) and sent[2].tool_call_id == "toolu_01"
    mw.close()


def test_a_repeated_message_is_handed_back_as_its_newest_copy() -> None:
    """A render keeps the newest messages: a repeated one ("yes", "Done.") was matched to the
    oldest equal history message, so the model got old objects (another turn's id and signed
    thinking) in place of the ones the render sent."""
    from langchain.agents.middleware import ModelRequest
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    def ai(i: int) -> AIMessage:
        blocks = [
            {"type": "thinking", "thinking": f"turn {i} reasoning", "signature": f"sig{i}"},
            {"type": "text", "text": "Done."},
        ]
        return AIMessage(blocks, id=f"a{i}", response_metadata={"model_provider": "anthropic"})

    history: list[Any] = []
    for i in range(40):
        ask = HumanMessage(f"step {i} " + "filler words " * 60 if i % 5 == 0 else "yes", id=f"h{i}")
        history += [ask, ai(i)]
    history.append(HumanMessage("next", id="hz"))
    middleware = ContextMiddleware(ContextEngine("claude-sonnet-4-5", 1500))
    request = ModelRequest(
        model=GenericFakeChatModel(messages=iter([])),
        messages=list(history),
        system_message=SystemMessage("sys"),
    )
    try:
        fitted = middleware.fit(request)
    finally:
        middleware.close()
    where = {id(m): k for k, m in enumerate(history)}
    handed = [where[id(m)] for m in fitted.messages if id(m) in where]
    assert len(handed) > 10
    assert handed == list(range(len(history) - len(handed), len(history)))


class InvalidCallFake(ToolCallingFake):
    """Answers the first call with a tool call whose arguments did not parse (an
    ``invalid_tool_calls`` entry, as LangChain's parsers record one), then with text."""

    received: list[list[BaseMessage]] = []  # noqa: RUF012

    @property
    def _llm_type(self) -> str:
        return "invalid-call-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append(list(messages))
        if len(self.received) == 1:
            bad = {
                "type": "invalid_tool_call",
                "name": "read_log",
                "args": '{"part": 1',
                "id": "bad1",
                "error": "Expecting ',' delimiter",
            }
            reply = AIMessage("", invalid_tool_calls=[bad])
        else:
            reply = AIMessage("ok")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_the_model_sees_its_invalid_tool_call_and_the_error_for_it() -> None:
    """``create_agent`` answers an invalid tool call with an error ``ToolMessage`` before the
    next model call (``langchain/agents/factory.py``: ``_patch_invalid_tool_calls``), and
    ChatOpenAI sends the call as a tool call (langchain_openai ``_convert_message_to_dict``).
    The middleware dropped both, so the model never saw its failed call."""
    model = InvalidCallFake()
    model.received = []
    middleware = ContextMiddleware(ContextEngine("gpt-4o", 4000))
    agent = create_agent(
        model, tools=[read_log], middleware=[middleware], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("read part 1")]}, config)
    agent.invoke({"messages": [HumanMessage("try again")]}, config)
    middleware.close()
    got = model.received[1]
    assert [m.type for m in got] == ["human", "ai", "tool", "human"]
    assert isinstance(got[1], AIMessage) and got[1].invalid_tool_calls[0]["id"] == "bad1"
    assert isinstance(got[2], ToolMessage) and got[2].tool_call_id == "bad1"
    assert got[2].status == "error"
    assert middleware.last is not None
    calls = middleware.last.payload["messages"][1]["tool_calls"]
    assert calls[0]["function"]["arguments"] == '{"part": 1'
