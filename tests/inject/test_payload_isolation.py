"""A payload is the caller's to edit (issue 14): editing it at any depth changes no other render.

Warm renders build their payloads from per-message dicts kept for the next render; every dict
and list a payload holds must be its own, or an edit of one payload (a block appended to a
message's content, a tool call's arguments changed) would show up in the next render's payload,
or in a payload the caller still holds. Each render here is compared with a render of the same
transcript from scratch (no memo).
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine._core import fresh_items, fresh_tree
from ctxengine.inject.memo import RenderMemo
from ctxengine.inject.render import render
from ctxengine.transcript import Message, Text, ToolCall, ToolResult, Transcript

from .test_incremental import PROVIDERS, _dump


def _tamper(value: Any) -> int:
    """Edit every container of ``value`` in place (strings replaced, a key added to each dict,
    an item appended to each list); the number of containers edited."""
    edited = 0
    if isinstance(value, dict):
        for k, v in list(value.items()):
            if isinstance(v, str):
                value[k] = "TAMPERED"
            else:
                edited += _tamper(v)
        value["tampered"] = True
        edited += 1
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, str):
                value[i] = "TAMPERED"
            else:
                edited += _tamper(v)
        value.append("TAMPERED")
        edited += 1
    return edited


def _session(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        out.append(Message.user(f"question {i}"))
        call = ToolCall(f"call_{i}", "read", {"path": f"f{i}.py", "opts": {"lines": [1, 2]}})
        out.append(Message.assistant(f"reading {i}", [call]))
        out.append(Message("tool", (ToolResult(f"call_{i}", (Text(f"body {i}"),)),)))
        out.append(Message.assistant(f"answer {i}"))
    return out


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_editing_a_payload_changes_neither_the_next_render_nor_another_payload(
    provider: str,
) -> None:
    options = PROVIDERS[provider]
    memo = RenderMemo()
    messages = [Message.system("You are terse."), *_session(6)]
    t = Transcript(tuple(messages), source_format="x")
    first = render(t, provider, memo=memo, **options)
    assert _tamper(first.payload) > 10
    # the next render reuses the first one's work: it must not see the edits
    t2 = t.replace((*messages, Message.user("more")))
    second = render(t2, provider, memo=memo, **options)
    assert memo.warm.reused == 1
    assert "TAMPERED" not in _dump(second.payload)
    assert _dump(second.payload) == _dump(render(t2, provider, **options).payload)
    # nor does a payload the caller keeps share anything with a later one
    kept = _dump(second.payload)
    t3 = t2.replace((*t2.messages, Message.assistant("fine"), Message.user("again")))
    third = render(t3, provider, memo=memo, **options)
    assert memo.warm.reused == 2
    _tamper(third.payload)
    assert _dump(second.payload) == kept
    fourth = render(t3.replace((*t3.messages[:1], *t3.messages[5:])), provider, memo=memo)
    assert "TAMPERED" not in _dump(fourth.payload)


@pytest.mark.anyio
@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_session_renders_after_an_edited_payload_are_as_from_scratch(provider: str) -> None:
    options = PROVIDERS[provider]
    engine = ContextEngine("gpt-4o", Budget(total=32_000))
    async with engine.session("isolation") as session:
        session.extend(_session(8))
        out = await session.render(provider, **options)
        for k in range(4):
            _tamper(out.payload)
            session.extend([Message.user(f"next {k}"), Message.assistant(f"ok {k}")])
            out = await session.render(provider, **options)
            fresh = render(out.transcript, provider, hygiene=False, **options)
            assert _dump(out.payload) == _dump(fresh.payload)
        assert session._state.token_cache.memo.warm.reused >= 4


def test_fresh_tree_copies_every_container_and_shares_the_rest() -> None:
    class Sub(dict[str, Any]):
        pass

    leaf = "text"
    sub = Sub(a=[1])
    value = {"a": [{"b": leaf, "c": [[], {"d": None}]}], "e": (1, 2), "f": sub, "g": 3.5}
    copy = fresh_tree(value)
    assert copy == value

    def containers(v: Any) -> list[Any]:
        if type(v) is dict:
            return [v, *(c for x in v.values() for c in containers(x))]
        if type(v) is list:
            return [v, *(c for x in v for c in containers(x))]
        return []

    old, new = containers(value), containers(copy)
    assert len(old) == len(new) == 6
    assert not {id(c) for c in old} & {id(c) for c in new}
    assert copy["a"][0]["b"] is leaf and copy["e"] is value["e"] and copy["f"] is sub
    assert fresh_tree(leaf) is leaf
    deep: list[Any] = []
    node = deep
    for _ in range(100_000):  # far deeper than the native stack would allow by recursion
        node.append([])
        node = node[0]
    copied = fresh_tree(deep)
    assert copied is not deep and copied[0] is not deep[0]


def test_fresh_items_copies_deep_dicts_deeply_and_the_others_as_they_are() -> None:
    flat = {"role": "user", "content": "hi"}
    nested = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}
    items = [flat, nested, flat]
    out = fresh_items(items, [False, True, False])
    assert out == items and out is not items
    assert all(a is not b for a, b in zip(out, items, strict=True))
    assert out[1]["tool_calls"] is not nested["tool_calls"]
    assert out[1]["tool_calls"][0]["function"] is not nested["tool_calls"][0]["function"]
    assert out[0]["content"] is flat["content"]
    with pytest.raises(ValueError, match="deep has 1 flags for 3 items"):
        fresh_items(items, [True])
