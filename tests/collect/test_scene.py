"""What a plugin sees of the transcript cannot change the session's history (issue 9, item 12)."""

from __future__ import annotations

import copy
from types import MappingProxyType
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine, ContextGrain
from ctxengine.collect.scene import ContextScene, TranscriptView
from ctxengine.transcript import Message, Text, ToolCall

pytestmark = pytest.mark.anyio


class Editor:
    """Edits every tool call's arguments and every message's meta it is shown, in place."""

    version, enabled = "1.0.0", True

    def __init__(self, name: str, priority: int) -> None:
        self.name, self.priority = name, priority
        self.seen: list[Any] = []

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        for message in scene.transcript:
            for call in message.tool_calls:
                self.seen.append(copy.deepcopy(call.arguments))
                call.arguments["path"] = "/etc/shadow"
                call.arguments["nested"]["x"].append(self.name)
            if isinstance(message.meta, dict):
                message.meta["edited_by"] = self.name
        return []


async def test_editing_tool_call_arguments_in_place_does_not_change_the_history() -> None:
    a, b = Editor("a", 10), Editor("b", 20)
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[a, b])
    args = {"path": "notes.txt", "nested": {"x": [1]}}
    async with engine.session("scene") as s:
        s.extend([Message("user", Message.user("read it").blocks, meta={"src": "app"})])
        await s.assistant_message("", [ToolCall("c1", "read", args)])
        await s.tool_result("c1", "contents")
        out = await s.render()
        again = await s.render()
        history = s.messages
    assert history[1].tool_calls[0].arguments == {"path": "notes.txt", "nested": {"x": [1]}}
    assert dict(history[0].meta) == {"src": "app"}
    assert args == {"path": "notes.txt", "nested": {"x": [1]}}
    for rendered in (out, again):
        call = rendered.payload["messages"][1]["tool_calls"][0]
        assert call["function"]["arguments"] == '{"path": "notes.txt", "nested": {"x": [1]}}'
    # Each plugin got its own copies: neither ever saw the other's edits (a plugin's copies are
    # kept across renders, so the second time it sees its own).
    assert a.seen[0] == b.seen[0] == {"path": "notes.txt", "nested": {"x": [1]}}
    assert a.seen[1]["nested"]["x"] == [1, "a"] and b.seen[1]["nested"]["x"] == [1, "b"]


def test_a_view_copies_a_message_once_and_shares_immutable_ones() -> None:
    plain = Message.user("hi")
    call = Message.assistant("", [ToolCall("c1", "t", {"k": [1]})])
    frozen = Message("user", (Text("hi"),), meta=MappingProxyType({"k": 1}))
    view = TranscriptView([plain, call, frozen])
    # an empty meta dict is mutable too: a key a plugin adds must not reach the session's
    assert view[0] is not plain and view[0] == plain and view[0] is view[0]
    view[0].meta["added"] = True  # type: ignore[index]
    assert dict(plain.meta) == {}
    assert view[2] is frozen  # nothing mutable in it: no copy
    assert view[1] is view[-2] is list(view)[1] and view[1] is not call
    assert view[1] == call and view[0:2] == (view[0], view[1])
    assert view.fresh()[1] is not view[1]
    with pytest.raises(IndexError):
        view[3]
