"""``trim_messages``: ours vs LangChain's, on 1,000 messages of real shared transcripts.

Three groups, each with LangChain's ``trim_messages`` as the baseline:

- ``trim-exact``: an exact tiktoken count. LangChain gets a list counter (Python tiktoken,
  OpenAI's chat framing); ours gets ``token_counter="gpt-4o"`` (the same numbers from
  ctxengine's tokenizer). Ours is measured warm (counts cached between calls, the agent-loop
  case) and cold (caches cleared every round).
- ``trim-approx``: both get ``count_tokens_approximately``.
- ``trim-cached-counter``: both get the same per-message counter that caches its counts by
  message between calls (a fair warm baseline for LangChain).

And one group for the Agents SDK session, with the SDK's own ``SQLiteSession`` (on a file)
as the baseline:

- ``agents-session-tail-cold`` and ``-warm``: ``get_items(limit=20)`` of a 10,000-item
  session (2,500 turns of a user message, a function call, its output and an answer), cold (a
  new session and store object per call, as a stateless worker per request opens them) and
  warm (one object for every call). ``CtxEngineSession`` on a ``FileStore``, and on a
  ``RedisStore`` when ``CTXENGINE_REDIS_URL`` names a server.

Run ``pytest benches/test_bench_integrations.py --benchmark-enable --benchmark-only``; the
summary prints every median relative to its group's baseline.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agents import SQLiteSession
from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.messages import trim_messages as lc_trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from ctxengine import clear_cache
from ctxengine.integrations import _lc_trim
from ctxengine.integrations.langchain import trim_messages
from ctxengine.integrations.openai_agents import ITEM_KIND, CtxEngineSession
from ctxengine.store import FileStore, NewEntry, Store
from ctxengine.transcript import load
from offline_tiktoken import TRANSCRIPTS, encoding

MAX_TOKENS = 16_000
N = 1_000


@pytest.fixture(scope="module")
def messages() -> list[BaseMessage]:
    """1,000 LangChain messages: the pi/OpenClaw session, then a Claude Code session."""
    out: list[dict[str, Any]] = []
    for path in (
        TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl",
        TRANSCRIPTS / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    ):
        out += [m for m in load(path).to("openai")["messages"] if m["role"] != "system"]
    lc = convert_to_messages(out[:N])
    assert len(lc) == N
    return lc


def _tiktoken_list_counter() -> Any:
    enc = encoding("o200k_base")
    roles = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}

    def count(messages: list[BaseMessage]) -> int:
        total = 3
        for m in messages:
            content = m.content if isinstance(m.content, str) else str(m.content)
            total += 3 + len(enc.encode_ordinary(content)) + len(enc.encode_ordinary(roles[m.type]))
            for call in getattr(m, "tool_calls", None) or []:
                total += len(enc.encode_ordinary(call["name"] + str(call["args"])))
        return total

    return count


def _cached_per_message_counter() -> Any:
    cache: dict[int, int] = {}

    def count(message: BaseMessage) -> int:
        key = id(message)
        n = cache.get(key)
        if n is None:
            n = cache[key] = count_tokens_approximately([message])
        return n

    count.__annotations__["message"] = BaseMessage
    return count


def _run(benchmark: Any, fn: Any, messages: list[BaseMessage], impl: str, **kw: Any) -> None:
    kwargs = {"max_tokens": MAX_TOKENS, "strategy": "last", "include_system": True, **kw}
    fn(messages, **kwargs)  # warm-up (and the caches of warm runs)
    benchmark.extra_info.update(impl=impl, baseline=impl.startswith("langchain"))
    kept = benchmark(fn, messages, **kwargs)
    assert 0 < len(kept) < len(messages)


@pytest.mark.benchmark(group="trim-exact")
def test_langchain_trim_exact(benchmark: Any, messages: list[BaseMessage]) -> None:
    counter = _tiktoken_list_counter()
    _run(benchmark, lc_trim_messages, messages, "langchain tiktoken", token_counter=counter)


@pytest.mark.benchmark(group="trim-exact")
def test_ctxengine_trim_exact_warm(benchmark: Any, messages: list[BaseMessage]) -> None:
    _run(benchmark, trim_messages, messages, "ctxengine exact, warm", token_counter="gpt-4o")


@pytest.mark.benchmark(group="trim-exact")
def test_ctxengine_trim_exact_cold(benchmark: Any, messages: list[BaseMessage]) -> None:
    def cold(msgs: list[BaseMessage], **kwargs: Any) -> list[BaseMessage]:
        clear_cache()
        _lc_trim._EXACT_CACHES.clear()
        return trim_messages(msgs, **kwargs)  # type: ignore[no-any-return]

    _run(benchmark, cold, messages, "ctxengine exact, cold", token_counter="gpt-4o")


@pytest.mark.benchmark(group="trim-approx")
def test_langchain_trim_approx(benchmark: Any, messages: list[BaseMessage]) -> None:
    _run(
        benchmark,
        lc_trim_messages,
        messages,
        "langchain approximate",
        token_counter=count_tokens_approximately,
    )


@pytest.mark.benchmark(group="trim-approx")
def test_ctxengine_trim_approx(benchmark: Any, messages: list[BaseMessage]) -> None:
    _run(
        benchmark,
        trim_messages,
        messages,
        "ctxengine approximate",
        token_counter=count_tokens_approximately,
    )


@pytest.mark.benchmark(group="trim-cached-counter")
def test_langchain_trim_cached_counter(benchmark: Any, messages: list[BaseMessage]) -> None:
    counter = _cached_per_message_counter()
    _run(benchmark, lc_trim_messages, messages, "langchain cached counter", token_counter=counter)


@pytest.mark.benchmark(group="trim-cached-counter")
def test_ctxengine_trim_cached_counter(benchmark: Any, messages: list[BaseMessage]) -> None:
    counter = _cached_per_message_counter()
    _run(benchmark, trim_messages, messages, "ctxengine cached counter", token_counter=counter)


# -- the Agents SDK session: get_items(limit=20) of a long session ----------------------------

TURNS = 2_500  # four items a turn: 10,000 items
LIMIT = 20
REDIS_URL = os.environ.get("CTXENGINE_REDIS_URL")


def _turn(k: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"turn {k}: list the files under src/ and open the largest"},
        {"type": "function_call", "call_id": f"c{k}", "name": "ls", "arguments": '{"path":"src"}'},
        {"type": "function_call_output", "call_id": f"c{k}", "output": "main.py\nutil.py\n" * 4},
        {"role": "assistant", "content": f"turn {k}: main.py is the largest; it holds the CLI."},
    ]


class _Server:
    """An event loop running in its own thread for the whole group, as a server's: each call
    is a task on it (worker threads of ``to_thread`` are kept between calls, as they are
    between a server's requests)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._stop: asyncio.Event | None = None

        async def serve() -> None:
            self._stop = asyncio.Event()
            ready.set()
            await self._stop.wait()

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(serve(),))
        self.thread.start()
        ready.wait()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join()
        self.loop.close()


@pytest.fixture(scope="module")
def agents_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One 10,000-item session in each store, written turn by turn as a Runner adds items
    (the store's own appends, without fsync to build it quickly: the same lines)."""
    root = tmp_path_factory.mktemp("agents")
    db = root / "sdk.sqlite"
    sqlite = SQLiteSession("bench", db)
    file_store = FileStore(root / "file", fsync=False)
    makers: dict[str, Callable[[], Store]] = {"FileStore": lambda: FileStore(root / "file")}
    stores: list[Store] = [file_store]
    if REDIS_URL:
        from ctxengine.store import RedisStore

        prefix = f"bench{uuid.uuid4().hex[:8]}"
        makers["RedisStore"] = lambda: RedisStore(REDIS_URL, prefix=prefix)
        stores.append(makers["RedisStore"]())
    server = _Server()
    for k in range(TURNS):
        items = _turn(k)
        server.run(sqlite.add_items(items))
        for store in stores:
            store.append("bench", [NewEntry(ITEM_KIND, {"item": item}) for item in items])
    sqlite.close()
    yield {"db": db, "makers": makers, "server": server}
    for store in stores:
        if store is not file_store:
            store.delete("bench")
    server.close()


def _get_items(benchmark: Any, server: _Server, impl: str, session: Callable[[], Any]) -> None:
    async def call() -> list[Any]:
        return await session().get_items(limit=LIMIT)  # type: ignore[no-any-return]

    first = server.run(call())
    assert len(first) == LIMIT and first[-1]["content"].startswith(f"turn {TURNS - 1}:")
    benchmark.extra_info.update(impl=impl, baseline=impl.startswith("SDK"))
    got = benchmark(lambda: server.run(call()))
    assert got == first


@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_sdk_sqlite_session_get_items_limit(
    benchmark: Any, agents_sessions: dict[str, Any], mode: str
) -> None:
    benchmark.group = f"agents-session-tail-{mode}"
    db = agents_sessions["db"]
    kept = SQLiteSession("bench", db)
    opened: list[SQLiteSession] = []

    def session() -> SQLiteSession:
        if mode == "warm":
            return kept
        for old in opened:  # the previous call's: closed, as a worker's request ends
            old.close()
        opened[:] = [SQLiteSession("bench", db)]
        return opened[0]

    _get_items(benchmark, agents_sessions["server"], f"SDK SQLiteSession, {mode}", session)
    for s in [kept, *opened]:
        s.close()


@pytest.mark.parametrize("mode", ["cold", "warm", "warm, loaded"])
@pytest.mark.parametrize("store", ["FileStore", "RedisStore"] if REDIS_URL else ["FileStore"])
def test_ctxengine_session_get_items_limit(
    benchmark: Any, agents_sessions: dict[str, Any], mode: str, store: str
) -> None:
    """``warm``: one session and store object for every call, which reads the end of the
    session each time (it has not read the whole); ``warm, loaded``: the same once its store
    read the whole session (a ``get_items()`` without a limit, or the engine's reads)."""
    benchmark.group = f"agents-session-tail-{mode.split(',')[0]}"
    make = agents_sessions["makers"][store]
    kept = CtxEngineSession("bench", make())
    if mode == "warm, loaded":
        kept.store.branch("bench")

    def session() -> CtxEngineSession:
        return kept if mode.startswith("warm") else CtxEngineSession("bench", make())

    _get_items(benchmark, agents_sessions["server"], f"CtxEngineSession {store}, {mode}", session)
