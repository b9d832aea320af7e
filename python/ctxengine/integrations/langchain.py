"""LangChain drop-ins: ``trim_messages`` and an agent middleware.

Install with ``pip install 'ctxengine[langchain]'``.

``trim_messages`` has the signature and behaviour of ``langchain_core.messages.trim_messages``
with two documented differences:

1. **A tool call is never separated from its results.** An ``AIMessage`` with ``tool_calls`` (or
   ``invalid_tool_calls``, which ChatOpenAI sends as tool calls and ``create_agent`` answers
   with an error ``ToolMessage``) and the ``ToolMessage`` results that follow it are kept or
   cut as one group, so the result never starts with an orphan ``ToolMessage``
   (langchain-ai/langchain issue 33245) nor ends with a call whose result was cut.
   ``allow_partial`` never cuts into such a group. A result that came after other messages (a
   human turn between a call and its result) is left out with its call when the call is cut:
   no ``ToolMessage`` is kept without its call, and no ``AIMessage`` whose call the input
   answered without that answer. ``start_on`` and ``end_on`` hold again after these are left
   out.
2. **Counts can be exact.** ``token_counter`` also takes a model or encoding name (``"gpt-4o"``,
   ``"o200k_base"``) or a tiktoken ``Encoding``: messages are counted by ctxengine's exact
   tokenizer with OpenAI's chat framing (3 tokens per message, 1 per name, 3 for the reply),
   an image with inline data by OpenAI's rule for its size, another image or a file (PDF)
   block as 765 tokens and audio by its duration (as ``ctxengine.count_messages`` counts
   them), cached between calls. ``"approximate"`` and
   ``count_tokens_approximately`` give LangChain's numbers, also cached.

``ContextMiddleware`` fits every model call of a LangChain v1 agent through a ctxengine session:
the agent's messages are ingested (plugins see ``on_user_msg`` / ``on_tool_result``), rendered
within the budget (plugins' grains, the trim ladder, pairing repair), and the model receives the
rendered messages: the caller's own message objects for those the render left unchanged
(Anthropic thinking blocks, ids and provider metadata kept), new ones for those it changed or
made.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Any, Literal, cast

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.runnables import RunnableLambda

from ..engine import ContextEngine, RenderedContext
from ..errors import ConfigError, ConfigTypeError, TranscriptError
from ..fitting import kept_copy, same_prefix
from ..store.base import new_id
from ..sync import SyncSession
from ..transcript import load
from ._lc_trim import (
    MessageType,
    call_ids,
    end_on_cut,
    has_calls,
    resolve_counter,
    select_first,
    select_last,
    start_on_cut,
)

__all__ = ("ContextMiddleware", "to_langchain", "trim_messages")


def _default_text_splitter(text: str) -> list[str]:
    splits = text.split("\n")
    return [s + "\n" for s in splits[:-1]] + splits[-1:]


def _as_messages(messages: Any) -> list[BaseMessage]:
    if isinstance(messages, list) and all(isinstance(m, BaseMessage) for m in messages):
        return messages
    return convert_to_messages(messages)


def trim_messages(
    messages: Iterable[Any] | None = None,
    *,
    max_tokens: int,
    token_counter: Any,
    strategy: Literal["first", "last"] = "last",
    allow_partial: bool = False,
    end_on: MessageType | None = None,
    start_on: MessageType | None = None,
    include_system: bool = False,
    text_splitter: Callable[[str], list[str]] | Any | None = None,
) -> Any:
    """Trim ``messages`` to ``max_tokens``; see ``langchain_core.messages.trim_messages``.

    Without ``messages`` it returns a ``Runnable`` doing the same (LangChain's partial form).

    Args:
        messages: Any LangChain message-like sequence (messages, dicts, tuples, strings) or a
            ``PromptValue``.
        max_tokens: The most tokens the result may count.
        token_counter: ``"approximate"``, a model or encoding name (exact), a tiktoken
            ``Encoding`` (exact), a model with ``get_num_tokens_from_messages``, a callable on a
            list of messages (``len`` included), or a callable on one ``BaseMessage`` (annotated).
        strategy: ``"last"`` keeps the end, ``"first"`` the start.
        allow_partial: Cut the boundary message to fit (its blocks, then ``text_splitter``
            pieces); never a message with tool calls or a tool result.
        end_on: Message types (names or classes) the result must end on.
        start_on: Message types the result must start on (after the system message); "last".
        include_system: Keep a leading ``SystemMessage``; "last" only.
        text_splitter: A callable ``str -> list[str]`` or a LangChain ``TextSplitter``; default
            splits on newlines.

    Returns:
        The kept messages: the caller's objects, except a partial message (a copy).

    Raises:
        ValueError: ``start_on`` or ``include_system`` with ``strategy="first"``, an unknown
            strategy, or an invalid ``token_counter`` (LangChain's messages).
    """
    options: dict[str, Any] = {
        "max_tokens": max_tokens,
        "token_counter": token_counter,
        "strategy": strategy,
        "allow_partial": allow_partial,
        "end_on": end_on,
        "start_on": start_on,
        "include_system": include_system,
        "text_splitter": text_splitter,
    }
    if messages is None:
        return RunnableLambda(partial(_trim, **options), name="trim_messages")
    return _trim(messages, **options)


def _trim(
    messages: Any,
    *,
    max_tokens: int,
    token_counter: Any,
    strategy: str,
    allow_partial: bool,
    end_on: MessageType | None,
    start_on: MessageType | None,
    include_system: bool,
    text_splitter: Any,
) -> list[BaseMessage]:
    if start_on and strategy == "first":
        raise ConfigError("start_on parameter is only valid with strategy='last'")
    if include_system and strategy == "first":
        raise ConfigError("include_system parameter is only valid with strategy='last'")
    msgs = _as_messages(messages)
    counter = resolve_counter(token_counter)
    split_text = getattr(text_splitter, "split_text", None)
    splitter: Callable[[str], list[str]] = (
        split_text if callable(split_text) else text_splitter or _default_text_splitter
    )
    if strategy == "first":
        kept = select_first(
            list(msgs), counter, max_tokens, splitter, allow_partial=allow_partial, end_on=end_on
        )
        return _without_orphans(kept, msgs, end_on=end_on)
    if strategy == "last":
        kept = select_last(
            list(msgs),
            counter,
            max_tokens,
            splitter,
            allow_partial=allow_partial,
            include_system=include_system,
            start_on=start_on,
            end_on=end_on,
        )
        return _without_orphans(
            kept, msgs, end_on=end_on, start_on=start_on, include_system=include_system
        )
    raise ConfigError(
        f"Unrecognized strategy={strategy!r}. Supported strategies are 'last' and 'first'."
    )


def _without_orphans(
    kept: list[BaseMessage],
    given: Sequence[BaseMessage],
    *,
    end_on: MessageType | None,
    start_on: MessageType | None = None,
    include_system: bool = False,
) -> list[BaseMessage]:
    """``kept`` with every tool call and result the trim separated left out.

    A result that came after other messages (a human turn between a call and its result) is no
    part of its call's group, so the trim could keep one without the other. Left out, until
    none is left: a ``ToolMessage`` whose call (made in ``given``) no kept ``AIMessage`` before
    it made, and an ``AIMessage`` with a call that ``given`` answered and no kept result
    answers (with its other results, as the group it heads is cut whole). A result whose call
    was never given, and a call never answered in ``given``, are left as they came. After a
    message is left out, ``end_on`` and ``start_on`` hold again (whole groups cut off the end
    and the start; a leading system message kept by ``include_system`` stays)."""
    calls: set[Any] = set()
    results: set[Any] = set()
    unmatched = False  # a kept result without a kept call before it
    for m in kept:
        if has_calls(m):
            calls.update(call_ids(m))
        elif isinstance(m, ToolMessage):
            results.add(m.tool_call_id)
            unmatched = unmatched or m.tool_call_id not in calls
    pending = calls - results
    if not unmatched and not (pending and _answered_after(given, kept[-1], pending)):
        return kept  # the common case: no scan of all the given messages
    made = {i for m in given for i in call_ids(m)}
    answered = {m.tool_call_id for m in given if isinstance(m, ToolMessage)}
    head = int(
        include_system and bool(kept) and isinstance(kept[0], SystemMessage) and kept[0] is given[0]
    )
    out = kept
    while True:
        paired = _paired(out, made, answered)
        if len(paired) == len(out):
            return out
        out = paired[: end_on_cut(paired, end_on, head)] if end_on else paired
        if start_on:
            out = out[:head] + out[head + start_on_cut(out[head:], start_on) :]


def _answered_after(given: Sequence[BaseMessage], last: BaseMessage, ids: set[Any]) -> bool:
    """Whether a result of one of the calls ``ids`` comes after ``last`` in ``given``: the kept
    messages are a run of ``given`` (after a system message), so a result of a kept call that
    was not kept can only come after the run; the walk back from the end stops at ``last``."""
    for m in reversed(given):
        if m is last:
            return False
        if isinstance(m, ToolMessage) and m.tool_call_id in ids:
            return True
    return False


def _paired(kept: list[BaseMessage], made: set[Any], answered: set[Any]) -> list[BaseMessage]:
    """``kept`` without its unpaired calls and results (see :func:`_without_orphans`), left
    out until none is left: leaving out a call orphans its other results."""
    out = kept
    while True:
        results = {m.tool_call_id for m in out if isinstance(m, ToolMessage)}
        calls: set[Any] = set()
        nxt: list[BaseMessage] = []
        for m in out:
            if has_calls(m):
                ids = call_ids(m)
                if any(i in answered and i not in results for i in ids):
                    continue
                calls.update(ids)
            elif (
                isinstance(m, ToolMessage)
                and m.tool_call_id in made
                and m.tool_call_id not in calls
            ):
                continue
            nxt.append(m)
        if len(nxt) == len(out):
            return out
        out = nxt


def to_langchain(payload: dict[str, Any]) -> list[AnyMessage]:
    """LangChain messages from an OpenAI Chat payload (``RenderedContext.payload``)."""
    return cast("list[AnyMessage]", convert_to_messages(payload["messages"]))


#: What a middleware keeps of a conversation: copies of the messages it ingested, their own
#: OpenAI exports (:func:`_exported`), and its session.
_Conversation = tuple[list[BaseMessage], list[dict[str, Any] | None], SyncSession]


def _exported(message: BaseMessage) -> dict[str, Any] | None:
    """``message`` as the OpenAI Chat message a render sends when it leaves it unchanged
    (exported alone, no hygiene); None when that is not one message."""
    try:
        sent = load([message]).to("openai", hygiene=False)["messages"]
    except TranscriptError:  # not expected after the session took it; then never matched
        return None
    return cast("dict[str, Any]", sent[0]) if len(sent) == 1 else None


def _signature(sent: dict[str, Any]) -> tuple[Any, ...]:
    """A cheap key of an OpenAI Chat message (role, call ids, content size): equal messages
    have equal keys; :func:`_restored` checks a candidate with ``==``."""
    content = sent.get("content")
    size = len(content) if isinstance(content, (str, list)) else -1
    calls = sent.get("tool_calls")
    ids = tuple(c.get("id") for c in calls) if isinstance(calls, list) else ()
    return (sent.get("role"), sent.get("tool_call_id"), size, ids)


def _restored(
    sent: list[dict[str, Any]], exports: list[dict[str, Any] | None], history: list[BaseMessage]
) -> list[AnyMessage]:
    """The LangChain messages of a render: the caller's own object for each message the
    render sent as that message's own export (``exports[j]`` of ``history[j]``, matched in
    order from the newest), so what the OpenAI form cannot carry (Anthropic thinking blocks
    and their signatures, ids, provider metadata) reaches the model; a message the render
    changed or made (a summary, a trimmed result, a placeholder) is built from the payload
    (each message on its own, as ``convert_to_messages`` converts a list: only those)."""
    where: dict[tuple[Any, ...], list[int]] = {}
    for j, export in enumerate(exports):
        if export is not None:
            where.setdefault(_signature(export), []).append(j)
    out: list[AnyMessage] = []
    # matched from the newest back, each before the one matched after it (order kept): a
    # render keeps the newest messages, so a repeated one ("yes", "Done.") is the newest copy,
    # not an old one the trim left out (whose ids and thinking belong to another turn)
    before = len(exports)
    for message in reversed(sent):
        candidates = where.get(_signature(message), [])
        older = candidates[: bisect_left(candidates, before)]
        found = next((j for j in reversed(older) if exports[j] == message), None)
        if found is None:
            out.append(to_langchain({"messages": [message]})[0])
        else:
            out.append(cast("AnyMessage", history[found]))
            before = found
    out.reverse()
    return out


#: How many middleware objects this process made (the default names, see ContextMiddleware).
_made = itertools.count(1)

#: The open sessions a :class:`ContextMiddleware` keeps (its most recent conversations).
_POOL = 8


class ContextMiddleware(AgentMiddleware):
    """Fit each model call of a LangChain v1 agent through a ctxengine session.

    ``create_agent(model, tools, middleware=[ContextMiddleware(engine)])``: before each call the
    new messages of the agent state are ingested into the session (firing ``on_user_msg`` and
    ``on_tool_result`` for the engine's plugins), the session renders for OpenAI Chat within the
    engine's budget, and the model receives the rendered system message and messages. A
    message the render sent as it was is handed to the model as the caller's own object (what
    the OpenAI form cannot carry, such as a signed Anthropic thinking block, its id and
    provider metadata, goes with it); a message the engine changed or made (a compressed
    result, a summary, a placeholder) is built from the render. The agent's own state keeps the
    full history. Tool schemas are not part of the budget, nor is what only the caller's
    objects carry (thinking blocks).

    Args:
        engine: The engine (model, budget, plugins); default ``ContextEngine(model, budget)``.
        model: Model name for a default engine.
        budget: Budget for a default engine.
        session_id: Id of the ctxengine session (a suffix is added when the agent's history is
            rewritten and a new session starts).
        name: The middleware's name in the agent, which ``create_agent`` requires unique among
            its middleware (it raises ``AssertionError`` on a repeated one). Default
            ``"ContextMiddleware"`` for the first one made in the process, then
            ``"ContextMiddleware-2"``, ``"-3"``...: two in one agent (say a trimming engine and a
            summarizing one) work as they are; name them for names that do not depend on the
            order they were made in.

    Raises:
        ConfigTypeError: ``name`` is not a non-empty string.

    Attributes:
        last: The :class:`RenderedContext` of the latest model call (payload, tokens, report).
    """

    def __init__(
        self,
        engine: ContextEngine | None = None,
        *,
        model: str = "gpt-4o",
        budget: int | None = None,
        session_id: str = "langchain-agent",
        name: str | None = None,
    ) -> None:
        super().__init__()
        if name is None:
            n = next(_made)
            name = "ContextMiddleware" if n == 1 else f"ContextMiddleware-{n}"
        elif not isinstance(name, str) or not name:
            raise ConfigTypeError(
                f"name is {name!r} ({type(name).__name__}); expected a non-empty string, or "
                "None for a default unique in the process"
            )
        self._name = name
        self.engine = engine if engine is not None else ContextEngine(model, budget)
        self.session_id = session_id
        self.last: RenderedContext | None = None
        #: Open sessions, least recently used first, each with the history it has ingested
        #: and that history's own OpenAI export (:func:`_exported`); a call takes the one
        #: whose history its own extends (out of the pool while it runs).
        self._pool: list[_Conversation] = []
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The middleware's name in the agent (unique per object unless given)."""
        return self._name

    def _claim(self, history: Sequence[BaseMessage]) -> _Conversation:
        """The session of the conversation ``history`` extends (the longest such), taken out of
        the pool; a new session when none is free."""
        with self._lock:
            best, longest = None, -1
            for k, (seen, _, _) in enumerate(self._pool):
                # ``seen`` holds copies: a message the caller edited in place differs from its
                # copy, and the conversation gets a new session (the edit is sent)
                if longest < len(seen) <= len(history) and same_prefix(seen, history):
                    best, longest = k, len(seen)
            if best is not None:
                return self._pool.pop(best)
        # a new id in every process: a stored session of another process (a restart, another
        # worker on the same store) is never resumed as this conversation's
        return [], [], self.engine.session_sync(f"{self.session_id}-{new_id()}").open()

    def _release(self, conversation: _Conversation) -> None:
        with self._lock:
            self._pool.append(conversation)
            evicted = self._pool[:-_POOL] if len(self._pool) > _POOL else []
            del self._pool[: len(evicted)]
        for _, _, old in evicted:
            old.close()

    def fit(self, request: ModelRequest) -> ModelRequest:
        """The request with its system message and messages rendered by the engine.

        Each conversation has its own session: a call continues the session whose ingested
        history its messages extend, so calls of several conversations (``abatch``, threads)
        may run at once; a rewritten history starts a new session."""
        system = [request.system_message] if request.system_message is not None else []
        history: list[BaseMessage] = [*system, *request.messages]
        seen, exports, session = self._claim(history)
        new = history[len(seen) :]
        try:
            session.ingest(new)
            out = session.render("openai")
            exports = [*exports, *map(_exported, new)]
        except BaseException:
            session.close()  # its state may hold part of this call: not used again
            raise
        self._release(([*seen, *map(kept_copy, new)], exports, session))
        self.last = out
        rendered = _restored(out.payload["messages"], exports, history)
        head = rendered[0] if rendered and isinstance(rendered[0], SystemMessage) else None
        rest = rendered[1:] if head is not None else rendered
        return request.override(messages=rest, system_message=head)

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        """Fit the request, then call the model."""
        return handler(self.fit(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """Fit the request (off the event loop), then call the model."""
        return await handler(await asyncio.to_thread(self.fit, request))

    def close(self) -> None:
        """Close the ctxengine sessions (``on_session_close``)."""
        with self._lock:
            pool, self._pool = self._pool, []
        for _, _, session in pool:
            session.close()
