"""ctxengine.fitting.fit, engine.session_sync, and the optional extras staying optional."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import ctxengine.fitting
from ctxengine import BudgetError, ContextEngine, ContextGrain, CtxEngineError, TranscriptError
from ctxengine.fitting import fit
from ctxengine.hygiene import validate
from ctxengine.transcript import Message, ToolCall, load
from offline_tiktoken import TRANSCRIPTS

SESSION = TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl"


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
def test_fit_real_session_is_valid_and_within_budget(provider: str) -> None:
    messages = load(SESSION).to("openai")["messages"]
    out = fit(messages, model="gpt-4o", budget=8_000, provider=provider)
    assert out.tokens <= 8_000
    assert validate(out.transcript, provider) == []
    assert {d.decision for d in out.report} >= {"kept", "dropped"}


@pytest.mark.parametrize("budget", [6_000, 20_000])
def test_fit_warm_call_on_a_grown_history_extends_the_previous_payload(budget: int) -> None:
    messages = load(SESSION)[:200].to("openai")["messages"]
    ctxengine.fitting._local.warm = None
    first = fit(messages, model="gpt-4o", budget=budget)
    assert first.report.compactions  # the first call compacted
    grown = [*messages, {"role": "user", "content": "and now?"}]
    warm = fit(grown, model="gpt-4o", budget=budget)
    ctxengine.fitting._local.warm = None  # the next call starts a new session
    cold = fit(grown, model="gpt-4o", budget=budget)
    assert warm.tokens <= budget and cold.tokens <= budget
    assert warm.payload["messages"][-1] == {"role": "user", "content": "and now?"}
    # the warm session goes on from its compaction: the previous payload plus the new message
    assert warm.payload["messages"][:-1] == first.payload["messages"]
    if budget == 20_000:
        # the cold one compacts the same turns; at 6,000 its summary differs in one respect:
        # the first call's newest request was summarized, so that summary keeps it in full
        assert warm.payload == cold.payload


def test_fit_takes_langchain_messages_and_repairs_pairing() -> None:
    out = fit(
        [
            HumanMessage("list"),
            AIMessage("", tool_calls=[{"name": "ls", "args": {}, "id": "c1"}]),
            ToolMessage("a.py", tool_call_id="c1"),
            AIMessage("", tool_calls=[{"name": "cat", "args": {}, "id": "c2"}]),  # unanswered
        ],
        model="gpt-4o",
        budget=1_000,
    )
    roles = [m["role"] for m in out.payload["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]  # synthetic result added


def test_fit_errors_name_the_problem() -> None:
    with pytest.raises(TranscriptError, match=r"messages\[0\] is 3"):
        fit([3], model="gpt-4o", budget=1_000)
    with pytest.raises(BudgetError):
        fit([{"role": "user", "content": "hi"}], model="gpt-4o", budget=0)


def test_fit_inside_a_running_event_loop() -> None:
    async def main() -> int:
        return fit([{"role": "user", "content": "hi"}], model="gpt-4o", budget=100).tokens

    assert 0 < asyncio.run(main()) <= 100


def test_session_sync_mirrors_the_async_api() -> None:
    engine = ContextEngine("gpt-4o", 2_000)
    with engine.session_sync("script") as s:
        s.user_message("list the files")
        s.assistant_message("", [ToolCall("c1", "ls", {})])
        s.tool_result("c1", "a.py\nb.py")
        s.ingest([{"role": "assistant", "content": "two files"}])
        s.extend([Message.user("thanks")])
        out = s.render()
        inner = s.session
    assert [m["role"] for m in out.payload["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert inner.closed
    with pytest.raises(CtxEngineError, match="'script' is closed"):
        s.render()


def test_session_sync_has_run_and_compact() -> None:
    """DESIGN.md §2: the sync facade mirrors the async API; it had no ``run`` (render, call,
    recover from an overflow) nor ``compact``. A script's model client is sync: ``run`` takes
    a plain function as well as a coroutine function."""
    engine = ContextEngine("gpt-4o", 4_000)
    sent: list[int] = []

    def call_model(payload: dict) -> str:  # a sync client: too long once, then an answer
        sent.append(len(payload["messages"]))
        if len(sent) == 1:
            raise RuntimeError("This model's maximum context length is 128 tokens")
        return "answer"

    async def acall_model(payload: dict) -> str:
        return "async answer"

    with engine.session_sync("script-run") as s:
        for i in range(12):
            s.user_message(f"step {i}: what does module m{i} do?")
            s.assistant_message(f"Module m{i} parses the part {i} of the config file. " * 20)
        answer, out = s.run(call_model)
        assert answer == "answer" and out.tokens <= 4_000
        assert [r["step"] for r in out.report.recovery][-1] == "compact"
        assert sent[1] < sent[0]  # the retry sent the compacted history
        assert s.run(acall_model)[0] == "async answer"
        result = s.compact()
        assert result.ok, result.error
        assert s.render().payload["messages"][0]["content"].startswith("[Summary")


class _GatedSetup:
    """A plugin whose setup goes on until the test lets it finish."""

    name, version, priority, enabled = "gated_setup", "1.0.0", 10, True

    def __init__(self) -> None:
        self.started = threading.Event()
        self.finish = threading.Event()

    async def setup(self, engine: object) -> None:
        self.started.set()
        while not self.finish.is_set():
            await asyncio.sleep(0.005)

    async def collect(self, scene: object) -> list[ContextGrain]:
        return [ContextGrain("gated.ready", content="READY")]


def test_sync_sessions_opened_from_threads_during_plugin_setup_all_open() -> None:
    """Sessions opened on several threads (each its own event loop) while another thread's
    session sets the plugins up wait for the setup, then all open: the thread that finishes
    the setup wakes the others' loops (it once handed them the engine's lock with a wake-up
    their sleeping loops never ran, and every one of them hung)."""
    plugin = _GatedSetup()
    engine = ContextEngine("gpt-4o", 2_000, plugins=[plugin])
    systems: dict[int, str] = {}

    def converse(who: int) -> None:
        with engine.session_sync(f"thread-{who}") as s:
            s.user_message(f"question {who}")
            systems[who] = s.render().payload["messages"][0]["content"]

    first = threading.Thread(target=converse, args=(0,), daemon=True)
    first.start()
    assert plugin.started.wait(10)  # thread 0's session holds the setup
    others = [threading.Thread(target=converse, args=(w,), daemon=True) for w in range(1, 5)]
    for t in others:
        t.start()
    time.sleep(0.3)  # they wait for the setup, their loops idle
    plugin.finish.set()
    deadline = time.monotonic() + 10
    for t in [first, *others]:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in [first, *others] if t.is_alive()]
    assert hung == []
    assert sorted(systems) == [0, 1, 2, 3, 4]
    assert all("READY" in text for text in systems.values())


def test_fit_from_many_threads_at_once() -> None:
    """``fit`` from threads sharing its cached engines, each thread on its own loop."""
    errors: list[str] = []
    start = threading.Barrier(6)

    def work(who: int) -> None:
        try:
            start.wait()
            history: list[dict[str, str]] = []
            for turn in range(15):
                history.append({"role": "user", "content": f"thread {who}, turn {turn}"})
                out = fit(history, model="gpt-4o", budget=300 + 100 * (turn % 3))
                if out.payload["messages"][-1]["content"] != f"thread {who}, turn {turn}":
                    errors.append(f"{who}/{turn}")
                history.append({"role": "assistant", "content": f"answer {turn}"})
        except Exception as exc:
            errors.append(f"{who}: {exc!r}")

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [t.name for t in threads if t.is_alive()] == []
    assert errors == []


def test_import_ctxengine_imports_no_framework() -> None:
    code = (
        "import sys, ctxengine, ctxengine.integrations, ctxengine.fitting, ctxengine.sync\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'langgraph', 'agents'))\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("hook", ["sync", "async"])
def test_a_hook_calling_its_own_sync_session_gets_an_error_not_a_hang(hook: str) -> None:
    # A plugin hook runs inside the sync session's own call (an async hook on its event loop,
    # a sync one on a thread of it); a blocking call back into that session from it waited for
    # itself: forever from an async hook, until the hook's timeout from a sync one. It is
    # refused with an error naming the problem, which the engine reports as the plugin's
    # fault; the render goes on.
    holder: dict[str, object] = {}
    errors: list[str] = []

    def call_back() -> None:
        try:
            holder["s"].render()  # type: ignore[attr-defined]
        except CtxEngineError as exc:
            errors.append(str(exc))
            raise

    class Reentrant:
        name, version, priority, enabled = "reentrant", "1.0.0", 50, True

        async def collect(self, scene: object) -> list[ContextGrain]:
            return []

    if hook == "sync":
        Reentrant.on_before_render = lambda self, event: call_back()  # type: ignore[attr-defined]
    else:

        async def on_before_render(self: object, event: object) -> None:
            call_back()

        Reentrant.on_before_render = on_before_render  # type: ignore[attr-defined]

    engine = ContextEngine("gpt-4o", budget=2000, plugins=[Reentrant()])
    out: list[object] = []

    def drive() -> None:
        with engine.session_sync("re") as s:
            holder["s"] = s
            s.user_message("hello there")
            out.append(s.render())

    _in_a_thread(drive, "the reentrant call")
    assert errors and "session's own call" in errors[0] and "Session.render" in errors[0]
    [rendered] = out
    faults = rendered.report.faults  # type: ignore[attr-defined]
    # refused at once ("raised"), not abandoned at the hook's timeout ("timeout")
    assert [(f["plugin"], f["kind"]) for f in faults] == [("reentrant", "raised")]
    assert "wait for itself" in faults[0]["message"]


def test_a_hook_calling_back_through_another_sync_session_gets_an_error_not_a_hang() -> None:
    # Session A's hook renders session B; B's hook (the same plugin) renders A, whose call is
    # still running: refused at once, not left to wait for A's lock until the hook timeout.
    sessions: dict[str, object] = {}
    depth: list[str] = []
    errors: list[str] = []

    class Relay:
        name, version, priority, enabled = "relay", "1.0.0", 50, True

        async def collect(self, scene: object) -> list[ContextGrain]:
            return []

        def on_before_render(self, event: object) -> None:
            depth.append("x")
            try:
                if len(depth) == 1:  # A's render: render B from here
                    inner = sessions["b"].render()  # type: ignore[attr-defined]
                    sessions["inner"] = inner
                elif len(depth) == 2:  # B's render, inside A's: back to A
                    try:
                        sessions["a"].render()  # type: ignore[attr-defined]
                    except CtxEngineError as exc:
                        errors.append(str(exc))
                        raise
            finally:
                depth.pop()

    engine = ContextEngine("gpt-4o", budget=2000, plugins=[Relay()])
    out: list[object] = []

    def drive() -> None:
        with engine.session_sync("a") as a, engine.session_sync("b") as b:
            sessions.update(a=a, b=b)
            b.user_message("hello b")
            a.user_message("hello a")
            out.append(a.render())

    _in_a_thread(drive, "the call back into A")
    assert errors and "session's own call" in errors[0]
    inner = sessions["inner"].report.faults  # type: ignore[attr-defined]
    # refused at once ("raised"), not abandoned at the hook's timeout ("timeout")
    assert [(f["plugin"], f["kind"]) for f in inner] == [("relay", "raised")]
    assert out and out[0].report.faults == []  # type: ignore[attr-defined]


def _in_a_thread(drive: Callable[[], None], what: str) -> None:
    """Run ``drive`` on a daemon thread and wait for it: a hang fails the test, naming
    ``what``, instead of blocking the run."""
    done = threading.Event()

    def run() -> None:
        drive()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(30), f"{what} hung"


def test_a_message_edited_in_place_between_two_calls_is_sent_as_edited() -> None:
    # the warm session was reused when the new list began with the same objects: an edit in
    # place (a redaction) was undone by the payload
    msgs: list[object] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "My password is hunter2, remember it."},
        {"role": "assistant", "content": "OK."},
    ]
    fit(msgs, model="gpt-4o", budget=2000)
    msgs[1]["content"] = "[redacted]"  # type: ignore[index]
    msgs.append({"role": "user", "content": "what next?"})
    out = fit(msgs, model="gpt-4o", budget=2000)
    assert "hunter2" not in str(out.payload) and "[redacted]" in str(out.payload)
    lc = [HumanMessage("secret hunter2"), AIMessage("noted")]
    fit(lc, model="gpt-4o", budget=2000)
    lc[0].content = "[redacted]"
    lc.append(HumanMessage("next"))
    assert "hunter2" not in str(fit(lc, model="gpt-4o", budget=2000).payload)
    # unchanged messages still reuse the session (only the new one is converted)
    fit(msgs, model="gpt-4o", budget=2000)
    before = ctxengine.fitting._local.warm.session
    msgs.append({"role": "assistant", "content": "fine"})
    fit(msgs, model="gpt-4o", budget=2000)
    assert ctxengine.fitting._local.warm.session is before


def _race(engine: ContextEngine, session_id: str) -> None:
    s = engine.session_sync(session_id)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def first_call(i: int) -> None:
        barrier.wait()
        try:
            s.user_message(f"hi {i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(s.messages) == 4 and s.render().tokens > 0
    stop: list[BaseException] = []

    def spam() -> None:
        for i in range(100_000):
            try:
                s.user_message(f"m{i}")
            except BaseException as exc:
                stop.append(exc)
                return

    user = threading.Thread(target=spam)
    user.start()
    time.sleep(0.02)
    s.close()  # waits for the call under way; the next one is refused
    user.join(10)
    assert len(stop) == 1 and isinstance(stop[0], CtxEngineError), stop
    assert "closed" in str(stop[0])


def test_threads_opening_and_closing_one_sync_session_get_ctxengine_errors_only() -> None:
    # the first call opened the session in every thread at once (a second __aenter__, the
    # loop closed under the others), and a close from another thread ran while a call did
    engine = ContextEngine("gpt-4o", 2000)
    for trial in range(10):
        _race(engine, f"race{trial}")
