"""Events, the bus on its own, and the scene."""

from __future__ import annotations

import dataclasses

import pytest

from ctxengine.errors import PluginError
from ctxengine.events import (
    HOOKS,
    AfterRender,
    BeforeRender,
    EventBus,
    OverBudget,
    SessionClose,
    SessionStart,
    ToolResult,
    UserMessage,
    current_bus,
    hook_for,
)
from ctxengine.scene import ContextScene


def test_every_event_maps_to_its_handler() -> None:
    events = [
        SessionStart("s"),
        UserMessage("s", 1, "hi"),
        ToolResult("s", "c1", "bash", "ok", False),
        BeforeRender([]),
        OverBudget([], 100, 5),
        AfterRender({}, 10, []),
        SessionClose("s"),
    ]
    assert [hook_for(e) for e in events] == list(HOOKS.values())
    assert list(HOOKS.values()) == [
        "on_session_start",
        "on_user_msg",
        "on_tool_result",
        "on_before_render",
        "on_over_budget",
        "on_after_render",
        "on_session_close",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[1].user_message = "changed"  # type: ignore[misc]
    with pytest.raises(PluginError, match="not a lifecycle event"):
        hook_for("on_user_msg")


@pytest.mark.anyio
async def test_bus_without_dispatcher() -> None:
    bus = EventBus()
    got: list[object] = []

    async def async_handler(event: object) -> None:
        got.append(("async", event.payload))  # type: ignore[attr-defined]

    sub = bus.subscribe("a.b", lambda e: got.append(("sync", e.payload)))
    bus.subscribe("a.b", async_handler)
    assert await bus.emit("a.b", 1) == 2
    sub.cancel()
    assert await bus.emit("a.b", 2) == 1
    assert await bus.emit("other", 3) == 0
    assert got == [("sync", 1), ("async", 1), ("async", 2)]
    with pytest.raises(PluginError, match="dotted name"):
        bus.subscribe("bad name", print)
    with pytest.raises(PluginError, match="not callable"):
        bus.subscribe("a.b", "nope")  # type: ignore[arg-type]
    bus.close()
    with pytest.raises(PluginError, match="closed"):
        await bus.emit("a.b")


def test_current_bus_outside_hook() -> None:
    with pytest.raises(PluginError, match="only available inside a plugin hook"):
        current_bus()


def test_scene_is_frozen_with_read_only_transcript() -> None:
    messages = [{"role": "user", "content": "hi"}]
    scene = ContextScene(session_id="s", turn=2, user_message="hi", transcript=messages)
    with pytest.raises(AttributeError, match="immutable"):
        scene.turn = 3  # type: ignore[misc]
    assert len(scene.transcript) == 1 and scene.transcript[0]["content"] == "hi"
    assert scene.transcript[0:1] == (messages[0],)
    assert not hasattr(scene.transcript, "append")
    messages.append({"role": "assistant", "content": "hello"})  # a view, not a copy
    assert len(scene.transcript) == 2


def test_scene_raw_message_is_privileged() -> None:
    scene = ContextScene(session_id="s", user_message="[REDACTED:email]", raw_user_message="a@b.c")
    with pytest.raises(PluginError, match="may not read the raw user message") as info:
        _ = scene.for_plugin("curious").raw_user_message
    assert info.value.plugin == "curious"
    with pytest.raises(PluginError):
        _ = scene.raw_user_message
    assert scene.for_plugin("trusted", privileged=True).raw_user_message == "a@b.c"
    plain = ContextScene(session_id="s", user_message="no redaction")
    assert plain.for_plugin("t", privileged=True).raw_user_message == "no redaction"
    assert scene.for_plugin("x").plugin == "x" and scene.plugin is None


def test_scene_accepts_a_transcript_object() -> None:
    from ctxengine.transcript import Message, Transcript

    transcript = Transcript((Message.user("hi"), Message.assistant("hello")))
    scene = ContextScene(session_id="s", transcript=transcript)
    assert [m.role for m in scene.transcript] == ["user", "assistant"]
