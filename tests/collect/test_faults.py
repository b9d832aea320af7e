"""Faults that used to break the turn (issue 9, item 13): broken grains, BaseExceptions,
cancellation, blocked loops, hung threads and quarantine. None of them escapes ``render``."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from plugin_helpers import Simple

from ctxengine import ContextEngine
from ctxengine.collect.events import BeforeRender
from ctxengine.grain import ContextGrain

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 30  # seconds: only stops a regression from hanging the suite; never a speed check


def _cycle() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


def _deep(depth: int = 50_000) -> list[Any]:
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested]
    return nested


# 21 ways to break a grain after it was made: (field, new value factory, node id reported).
MUTATIONS: dict[str, tuple[str, Callable[[], Any], str]] = {
    "priority-str": ("priority", lambda: "high", "task.bad"),
    "priority-none": ("priority", lambda: None, "task.bad"),
    "priority-float": ("priority", lambda: 1.5, "task.bad"),
    "priority-bool": ("priority", lambda: True, "task.bad"),
    "priority-huge": ("priority", lambda: 10**30, "task.bad"),
    "content-set": ("content", lambda: {1, 2}, "task.bad"),
    "content-none": ("content", lambda: None, "task.bad"),
    "content-bytes": ("content", lambda: b"bytes", "task.bad"),
    "content-list-of-set": ("content", lambda: [{1}], "task.bad"),
    "content-cycle": ("content", _cycle, "task.bad"),
    "content-surrogate": ("content", lambda: "caf\udce9", "task.bad"),
    "content-deep": ("content", _deep, "task.bad"),
    "content-tuple-key": ("content", lambda: {(1, 2): "x"}, "task.bad"),
    "meta-none": ("meta", lambda: None, "task.bad"),
    "meta-list": ("meta", lambda: [], "task.bad"),
    "node_id-int": ("node_id", lambda: 42, "<int node_id>"),
    "node_id-bad": ("node_id", lambda: "bad id!", "bad id!"),
    "origin-none": ("origin", lambda: None, "task.bad"),
    "lifespan": ("lifespan", lambda: "forever", "task.bad"),
    "window-int": ("window", lambda: 7, "task.bad"),
    "protected-str": ("protected", lambda: "yes", "task.bad"),
}


def broken_grain(mutation: str) -> ContextGrain:
    field, value, _ = MUTATIONS[mutation]
    grain = ContextGrain("task.bad", content="ok")
    setattr(grain, field, value())
    return grain


class Returns(Simple):
    """``collect`` returns a good grain and the grain made by ``make``."""

    def __init__(self, name: str, make: Callable[[], ContextGrain]) -> None:
        super().__init__(name)
        self.make = make

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("task.good", content="good grain"), self.make()]


class EditsOwnGrain(Simple):
    """Emits ``task.bad`` in ``collect`` and breaks it in ``on_before_render``."""

    def __init__(self, name: str, mutation: str) -> None:
        super().__init__(name)
        self.mutation = mutation

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("task.bad", content="ok")]

    def on_before_render(self, event: BeforeRender) -> None:
        field, value, _ = MUTATIONS[self.mutation]
        for grain in event.tree:
            if grain.origin == self.name:
                setattr(grain, field, value())


def decisions(out: Any) -> dict[str, str | None]:
    return {d.node_id: d.stage for d in out.report.grains if d.decision == "dropped"}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
async def test_a_broken_plugin_grain_is_a_fault_and_a_dropped_decision(mutation: str) -> None:
    grain = broken_grain(mutation)
    maker = Returns("maker", lambda: grain)  # a loaded machine must not turn it into a timeout
    engine = ContextEngine("gpt-4o", 4000, plugins=[maker], plugin_timeout=HANG_GUARD)
    async with engine.session("s") as s:
        await s.user_message("hello there")
        out = await s.render()
    node = MUTATIONS[mutation][2]
    faults = [f for f in out.report.faults if f["kind"] == "invalid"]
    assert [(f["plugin"], f["node_id"]) for f in faults] == [("maker", node)]
    assert decisions(out).get(node) == "admission"
    assert "good grain" in str(out.payload) and "hello there" in str(out.payload)


@pytest.mark.parametrize("mutation", list(MUTATIONS))
async def test_a_grain_broken_after_session_add_is_dropped_at_admission(mutation: str) -> None:
    """Dropped with one decision, and its fault names it."""
    engine = ContextEngine("gpt-4o", 4000)
    grain = ContextGrain("task.bad", content="ok")
    async with engine.session("s") as s:
        s.add(grain)
        s.add(ContextGrain("task.good", content="good grain", lifespan="session"))
        field, value, node = MUTATIONS[mutation]
        setattr(grain, field, value())
        await s.user_message("hello there")
        out = await s.render()
    faults = [(f["hook"], f["node_id"]) for f in out.report.faults if f["kind"] == "invalid"]
    assert faults == [("render", node)]
    assert decisions(out).get(node) == "admission"
    assert [(d.decision, d.stage) for d in out.report if d.node_id == node] == [
        ("dropped", "admission")
    ]
    assert "good grain" in str(out.payload) and "hello there" in str(out.payload)


async def test_a_grain_in_an_unknown_window_is_refused_with_its_node_id() -> None:
    maker = Returns("maker", lambda: ContextGrain("rag.x", content="x", window="nonexistent"))
    engine = ContextEngine("gpt-4o", 4000, plugins=[maker], plugin_timeout=HANG_GUARD)
    async with engine.session("s") as s:
        await s.user_message("hello there")
        out = await s.render()
    [fault] = out.report.faults
    assert (fault["plugin"], fault["kind"], fault["node_id"]) == ("maker", "invalid", "rag.x")
    assert "'nonexistent'" in fault["message"]
    assert [(d.decision, d.stage) for d in out.report if d.node_id == "rag.x"] == [
        ("dropped", "admission")
    ]
    assert "good grain" in str(out.payload)


@pytest.mark.parametrize("mutation", list(MUTATIONS))
async def test_a_tree_handler_breaking_its_own_grain_is_undone(mutation: str) -> None:
    editor = EditsOwnGrain("editor", mutation)
    engine = ContextEngine("gpt-4o", 4000, plugins=[editor], plugin_timeout=HANG_GUARD)
    async with engine.session("s") as s:
        await s.user_message("hello there")
        out = await s.render()
    faults = [(f["plugin"], f["hook"], f["kind"]) for f in out.report.faults]
    assert faults == [("editor", "on_before_render", "invalid")]
    kept = [g for g in out.tree if g.node_id == "task.bad"]
    assert len(kept) == 1 and kept[0].content == "ok"  # the edit was undone


def test_session_add_names_a_field_broken_before_the_call() -> None:
    from ctxengine import GrainError

    engine = ContextEngine("gpt-4o", 4000)

    async def main() -> None:
        async with engine.session("s") as s:
            with pytest.raises(GrainError, match=r"priority of 'task\.bad'"):
                s.add(broken_grain("priority-str"))

    anyio.run(main)


class Raises(Simple):
    def __init__(self, name: str, exc: Callable[[], BaseException], *, sync: bool = False) -> None:
        super().__init__(name)
        self.exc = exc
        if sync:
            self.on_user_msg = self._sync_raise

    async def collect(self, scene: Any) -> list[ContextGrain]:
        raise self.exc()

    def _sync_raise(self, event: Any) -> None:
        raise self.exc()


BASE_EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
}


@pytest.mark.parametrize("name", list(BASE_EXCEPTIONS))
async def test_base_exceptions_from_a_plugin_are_faults_not_the_end_of_the_render(
    name: str,
) -> None:
    plugins = [
        Raises("raiser", BASE_EXCEPTIONS[name]),
        Raises("sync_raiser", BASE_EXCEPTIONS[name], sync=True),
        Simple("fine"),
    ]
    engine = ContextEngine("gpt-4o", 4000, plugins=plugins)
    async with engine.session("s") as s:
        await s.user_message("hello there")
        out = await s.render()
    faults = {(f["plugin"], f["hook"], f["kind"]) for f in out.report.faults}
    assert faults == {
        ("raiser", "collect", "raised"),
        ("sync_raiser", "collect", "raised"),
        ("sync_raiser", "on_user_msg", "raised"),
    }
    assert all(f["message"].startswith(name) for f in out.report.faults)
    assert "fine 0" in str(out.payload)


async def test_the_renders_own_cancellation_still_cancels_it() -> None:
    class Slow(Simple):
        async def collect(self, scene: Any) -> list[ContextGrain]:
            await anyio.sleep(HANG_GUARD)
            return []

    engine = ContextEngine("gpt-4o", 4000, plugins=[Slow("slow")], plugin_timeout=None)
    async with engine.session("s") as s:
        await s.user_message("hi")
        with anyio.move_on_after(0.2) as scope:
            await s.render()
    assert scope.cancelled_caught  # cancellation from outside is not turned into a fault


class Held(Simple):
    """A plugin whose collect runs until the test sets ``release``; ``finished`` says it ended."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.release = threading.Event()
        self.finished = threading.Event()
        self.calls = 0


class Stubborn(Held):
    """An async collect that swallows cancellation and runs until ``release`` is set."""

    async def collect(self, scene: Any) -> list[ContextGrain]:
        self.calls += 1
        while not self.release.is_set():
            try:
                await anyio.sleep(0.01)
            except anyio.get_cancelled_exc_class():
                continue
        self.finished.set()
        return []


class LoopBlocker(Held):
    """An async collect that blocks its event loop (``time.sleep`` style) until released."""

    async def collect(self, scene: Any) -> list[ContextGrain]:
        self.calls += 1
        self.release.wait(HANG_GUARD)  # a blocking call in async code
        self.finished.set()
        return []


async def test_a_plugin_that_swallows_cancellation_is_abandoned_not_awaited() -> None:
    stubborn = Stubborn("stubborn")
    engine = ContextEngine("gpt-4o", 4000, plugins=[stubborn, Simple("fine")], plugin_timeout=0.1)
    try:
        async with engine.session("s") as s:
            await s.user_message("hi")
            with anyio.fail_after(HANG_GUARD):
                out = await s.render()
            assert not stubborn.finished.is_set()  # the render did not wait for it
            faults = [(f["plugin"], f["kind"]) for f in out.report.faults]
            assert faults == [("stubborn", "timeout")]
            assert "ignored cancellation" in out.report.faults[0]["message"]
            assert "fine 0" in str(out.payload)
            with anyio.fail_after(HANG_GUARD):
                again = await s.render()  # still running: skipped, not called a second time
            assert stubborn.calls == 1
            assert "still running" in again.report.faults[0]["message"]
    finally:
        stubborn.release.set()


async def test_an_async_plugin_blocking_its_loop_is_reported_and_quarantined() -> None:
    blocker = LoopBlocker("blocker")
    engine = ContextEngine("gpt-4o", 4000, plugins=[blocker, Simple("fine")], plugin_timeout=0.1)
    try:
        async with engine.session("s") as s:
            await s.user_message("hi")
            with anyio.fail_after(HANG_GUARD):
                out = await s.render()
            assert not blocker.finished.is_set()  # the render returned while it still blocks
            kinds = [(f["plugin"], f["kind"]) for f in out.report.faults]
            assert kinds == [("blocker", "blocked"), ("blocker", "quarantined")]
            assert "time.sleep" in out.report.faults[0]["message"]
            assert "fine 0" in str(out.payload)
            assert s.dispatcher.quarantined == {"blocker"}
            await s.render()
            assert blocker.calls == 1
    finally:
        blocker.release.set()


async def test_timeouts_count_toward_quarantine_even_when_calls_succeed_between() -> None:
    class Flaky(Simple):
        """``on_user_msg`` (sync) hangs until the test lets it go; ``collect`` always works."""

        def __init__(self, name: str) -> None:
            super().__init__(name)
            self.gate = threading.Event()
            self.done = threading.Event()

        def on_user_msg(self, event: Any) -> None:
            self.gate.wait(HANG_GUARD)
            self.done.set()

    flaky = Flaky("flaky")
    engine = ContextEngine("gpt-4o", 4000, plugins=[flaky], plugin_timeout=0.1, max_failures=3)
    faults: list[tuple[str, str]] = []
    async with engine.session("s") as s:
        for turn in range(3):
            await s.user_message(f"turn {turn}")
            flaky.gate.set()
            assert flaky.done.wait(HANG_GUARD)
            flaky.gate.clear()
            flaky.done.clear()
            out = await s.render()  # collect succeeds: consecutive failures reset, timeouts not
            faults += [(f["hook"], f["kind"]) for f in out.report.faults]
            assert "flaky 0" in str(out.payload) or turn == 2
    assert faults == [("on_user_msg", "timeout")] * 3 + [("on_user_msg", "quarantined")]
    assert "3 timeouts" in out.report.faults[-1]["message"]


def test_a_hung_sync_handler_does_not_keep_the_process_alive(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    script = tmp_path / "hang.py"
    script.write_text(
        textwrap.dedent(
            """
            import threading, time
            import anyio
            from ctxengine import ContextEngine

            class Hung:
                name, version, priority, enabled = "hung", "1.0", 10, True
                async def collect(self, scene):
                    return []
                def on_user_msg(self, event):
                    time.sleep(3600)

            async def main():
                engine = ContextEngine("gpt-4o", 4000, plugins=[Hung()], plugin_timeout=0.1)
                async with engine.session("s") as s:
                    await s.user_message("hi")
                    out = await s.render()
                print("faults", sorted({f["kind"] for f in out.report.faults}))
                print("non-daemon", [t.name for t in threading.enumerate()
                                     if not t.daemon and t is not threading.main_thread()])

            anyio.run(main)
            """
        ),
        encoding="utf-8",
    )
    env = {"PYTHONPATH": child_env["PYTHONPATH"], "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert "faults ['timeout']" in proc.stdout
    assert "non-daemon []" in proc.stdout  # and it exited without waiting for the hour's sleep


class _EvilGrain(ContextGrain):
    """A grain subclass whose own ``text`` raises (a plugin's bug, or an adversary's)."""

    @property
    def text(self) -> str:
        raise RuntimeError("evil property")


class _ContentRaises(ContextGrain):
    """A subclass whose field itself is a property that raises: it cannot be read at all."""

    @property
    def content(self) -> str:  # type: ignore[override]
        raise RuntimeError("no content")


async def test_a_grain_subclass_is_taken_by_its_fields_and_never_breaks_the_turn() -> None:
    class Subclassing:
        name, version, priority, enabled = "subclassing", "1.0", 50, True

        async def collect(self, scene: Any) -> list[ContextGrain]:
            return [_EvilGrain("rag.evil", content="kept as a plain grain")]

    engine = ContextEngine("gpt-4o", plugins=[Subclassing()])
    async with engine.session("s") as s:
        await s.user_message("hello")
        out = await s.render()
    assert "kept as a plain grain" in str(out.payload)
    assert [d.decision for d in out.report if d.node_id == "rag.evil"] == ["kept"]
    assert not out.report.faults


async def test_a_grain_subclass_that_cannot_be_read_is_a_fault_and_the_turn_goes_on() -> None:
    class Unreadable:
        name, version, priority, enabled = "unreadable", "1.0", 50, True

        async def collect(self, scene: Any) -> list[ContextGrain]:
            grain = object.__new__(_ContentRaises)  # its fields set, its content a property
            plain = ContextGrain("rag.bad", content="x")
            for f in dataclasses.fields(ContextGrain):
                if f.name != "content":
                    object.__setattr__(grain, f.name, getattr(plain, f.name))
            return [grain, ContextGrain("rag.good", content="still here")]

    engine = ContextEngine("gpt-4o", plugins=[Unreadable()])
    async with engine.session("s") as s:
        await s.user_message("hello")
        out = await s.render()
    assert "still here" in str(out.payload)
    faults = [f for f in out.report.faults if f["plugin"] == "unreadable"]
    assert len(faults) == 1 and faults[0]["kind"] == "invalid"
    assert "could not be read" in faults[0]["message"] and "no content" in faults[0]["message"]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str boom")


class _BrokenPlugin:
    """Raises an exception whose str() raises, from collect and from a lifecycle hook."""

    name, version, priority, enabled = "broken", "1", 10, True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        raise _Unprintable()

    async def on_user_msg(self, event: Any) -> None:
        raise _Unprintable()


async def test_an_exception_whose_str_raises_is_a_fault_and_the_turn_goes_on() -> None:
    engine = ContextEngine("gpt-4o", 3000, plugins=[_BrokenPlugin()])
    async with engine.session("s") as s:
        await s.user_message("hi")  # the hook's fault waits for the next render
        out = await s.render()
    messages = [(f["hook"], f["message"]) for f in out.report.faults]
    assert ("collect", "_Unprintable: <str() raised RuntimeError>") in messages
    assert ("on_user_msg", "_Unprintable: <str() raised RuntimeError>") in messages


class _Flagged:
    """Its ``enabled`` is a property that raises once a flag service goes down."""

    name, version, priority = "flagged", "1", 10

    def __init__(self) -> None:
        self.down = False

    @property
    def enabled(self) -> bool:
        if self.down:
            raise RuntimeError("flag service down")
        return True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("rag.flagged", content="from the flagged plugin")]


class _Plain:
    name, version, priority, enabled = "plain", "1", 10, True

    async def collect(self, scene: Any) -> list[ContextGrain]:
        return [ContextGrain("rag.plain", content="from the plain plugin")]


async def test_a_plugin_whose_flag_raises_or_hook_broke_is_skipped_with_a_fault() -> None:
    flagged, plain = _Flagged(), _Plain()
    engine = ContextEngine("gpt-4o", 3000, plugins=[flagged, plain])
    async with engine.session("s") as s:
        await s.user_message("hi")
        first = await s.render()
        assert "from the flagged plugin" in str(first.payload) and not first.report.faults
        flagged.down = True
        plain.collect = None  # type: ignore[assignment,method-assign]
        out = await s.render()  # no exception escapes the turn
    faults = {(f["plugin"], f["kind"]): f["message"] for f in out.report.faults}
    assert "flag service down" in faults[("flagged", "raised")]
    assert "its collect is now NoneType, not callable" in faults[("plain", "invalid")]
    assert "from the flagged plugin" not in str(out.payload)
    assert "from the plain plugin" not in str(out.payload)


async def test_a_flag_that_recovers_is_used_again_not_quarantined() -> None:
    flagged = _Flagged()
    engine = ContextEngine("gpt-4o", 3000, plugins=[flagged])
    async with engine.session("s") as s:
        await s.user_message("hi")
        flagged.down = True
        for _ in range(3):
            await s.user_message("again")
            down = await s.render()
        assert all(f["kind"] != "quarantined" for f in down.report.faults)
        flagged.down = False
        back = await s.render()
    assert "from the flagged plugin" in str(back.payload) and not back.report.faults


async def test_a_flag_down_when_the_engine_is_built_does_not_refuse_the_plugin() -> None:
    """Registration read the flag bare: the engine could not be built (a raw ConnectionError)
    while the flag service was down. The plugin is registered; its renders report the fault
    until the flag comes back."""
    flagged = _Flagged()
    flagged.down = True
    engine = ContextEngine("gpt-4o", 3000, plugins=[flagged])
    async with engine.session("s") as s:
        await s.user_message("hi")
        down = await s.render()
        assert any(f["plugin"] == "flagged" and f["kind"] == "raised" for f in down.report.faults)
        assert "from the flagged plugin" not in str(down.payload)
        flagged.down = False
        back = await s.render()
    assert "from the flagged plugin" in str(back.payload)
