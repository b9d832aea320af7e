"""A payload is the caller's to edit (issue 14): editing it at any depth changes no other render.

Warm renders build their payloads from per-message dicts kept for the next render; every dict
and list a payload holds must be its own, or an edit of one payload (a block appended to a
message's content, a tool call's arguments changed) would show up in the next render's payload,
or in a payload the caller still holds. Each render here is compared with a render of the same
transcript from scratch (no memo).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pytest

from ctxengine import Budget, ContextEngine
from ctxengine._core import fresh_tree, hand_out
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

    class Items(list[Any]):
        pass

    leaf = "text"
    sub = Sub(a=Items([{"x": 1}]))
    value = {"a": [{"b": leaf, "c": [[], {"d": None}]}], "e": (1, 2), "f": sub, "g": 3.5}
    copy = fresh_tree(value)
    assert copy == value

    def containers(v: Any) -> list[Any]:
        if isinstance(v, dict):
            return [v, *(c for x in v.values() for c in containers(x))]
        if isinstance(v, list):
            return [v, *(c for x in v for c in containers(x))]
        return []

    old, new = containers(value), containers(copy)
    assert len(old) == len(new) == 9
    assert not {id(c) for c in old} & {id(c) for c in new}
    assert copy["a"][0]["b"] is leaf and copy["e"] is value["e"]
    # a subclass's instance becomes a plain dict or list: a payload is JSON, and its own
    assert type(copy["f"]) is dict and type(copy["f"]["a"]) is list
    assert copy["f"]["a"][0] == {"x": 1} and copy["f"]["a"][0] is not sub["a"][0]
    assert fresh_tree(leaf) is leaf
    deep: list[Any] = []
    node = deep
    for _ in range(100_000):  # far deeper than the native stack would allow by recursion
        node.append([])
        node = node[0]
    copied = fresh_tree(deep)
    assert copied is not deep and copied[0] is not deep[0]


def test_hand_out_copies_deep_dicts_deeply_and_the_others_as_they_are() -> None:
    flat = {"role": "user", "content": "hi"}
    nested = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}
    items = [flat, nested, flat]
    out, _ = hand_out(items, [False, True, False])
    assert out == items and out is not items
    assert all(a is not b for a, b in zip(out, items, strict=True))
    assert out[1]["tool_calls"] is not nested["tool_calls"]
    assert out[1]["tool_calls"][0]["function"] is not nested["tool_calls"][0]["function"]
    assert out[0]["content"] is flat["content"]
    with pytest.raises(ValueError, match="deep has 1 flags for 3 items"):
        hand_out(items, [True])


def _walk(value: Any) -> list[Any]:
    """Every dict and list of ``value``, at any depth."""
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _walk(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in _walk(v))]
    return []


def _items() -> tuple[list[dict[str, Any]], list[bool]]:
    plain = {"role": "user", "content": "hi"}
    nested = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    parts = {"role": "user", "content": [{"type": "text", "text": "see"}]}
    return [plain, nested, parts], [False, True, True]


def test_hand_out_hands_a_copy_out_again_only_when_let_go_and_unchanged() -> None:
    items, deep = _items()
    first, made = hand_out(items, deep)
    assert first == items and len(made) == 3
    assert all(a is b for a, b in zip(first, made.copies, strict=True))
    assert not {id(c) for c in _walk(first)} & {id(c) for c in _walk(items)}
    made.copies.clear()  # a list of its own: the copies handed out are still held
    del first  # the receiver let the copies go, unchanged
    again, remade = hand_out(items, deep, made)
    assert again == items
    assert all(a is b for a, b in zip(again, made.copies, strict=True))
    # a copy still held by its receiver is never handed out again
    third, _ = hand_out(items, deep, remade)
    assert third == items
    assert not {id(c) for c in _walk(third)} & {id(c) for c in _walk(again)}


def _edit(payload: list[dict[str, Any]], how: str) -> int:
    """Edit one copy of ``payload`` in place, the way ``how`` names; the index edited."""
    plain, nested, parts = payload
    if how == "value":
        plain["content"] = "changed"
    elif how == "key":
        plain["extra"] = "added"
    elif how == "order":  # the same keys and values, in another order
        plain["role"] = plain.pop("role")
    elif how == "equal-object":  # an equal string, but another object
        plain["role"] = "".join(["us", "er"])
    elif how == "deep-value":
        nested["tool_calls"][0]["function"]["arguments"] = '{"x": 1}'
        return 1
    elif how == "deep-append":
        nested["tool_calls"].append({"id": "c2"})
        return 1
    elif how == "part":
        parts["content"][0]["text"] = "SEE"
        return 2
    else:
        parts["content"].insert(0, {"type": "text", "text": "new"})
        return 2
    return 0


@pytest.mark.parametrize(
    "how",
    ["value", "key", "order", "equal-object", "deep-value", "deep-append", "part", "part-add"],
)
def test_hand_out_copies_again_what_its_receiver_edited(how: str) -> None:
    items, deep = _items()
    before = json.dumps(items)
    first, made = hand_out(items, deep)
    edited = _edit(first, how)
    del first
    again, _ = hand_out(items, deep, made)
    assert json.dumps(again) == before  # key order included
    assert again[edited] is not made.copies[edited]
    assert all(again[i] is made.copies[i] for i in range(3) if i != edited)


def test_hand_out_copies_again_a_copy_whose_part_is_still_held() -> None:
    items, deep = _items()
    first, made = hand_out(items, deep)
    calls = first[1]["tool_calls"]  # the receiver keeps a part of one copy
    text_part = first[2]["content"][0]
    del first
    again, _ = hand_out(items, deep, made)
    assert again[0] is made.copies[0]
    assert again[1] is not made.copies[1] and again[1]["tool_calls"] is not calls
    assert again[2] is not made.copies[2] and again[2]["content"][0] is not text_part
    calls.append("later edit")
    text_part["text"] = "later edit"
    assert again == items


def test_hand_out_never_hands_one_copy_out_twice() -> None:
    plain = {"role": "user", "content": "same"}
    items = [plain, plain]
    for deep in ([False, False], [True, True]):
        first, made = hand_out(items, deep)
        del first
        again, _ = hand_out(items, deep, made)
        assert again[0] is not again[1]
        assert any(a is b for a in again for b in made.copies)
        assert again == items


def test_hand_out_copies_the_items_appended_since_and_what_moved_safely() -> None:
    items, deep = _items()
    first, made = hand_out(items[:2], deep[:2])
    del first
    again, made = hand_out(items, deep, made)
    assert again == items
    assert again[0] is made.copies[0] and again[2] is not items[2]
    # the same items rotated: each copy equal to its item, none in two payloads held
    rotated, flags = [items[2], items[0], items[1]], [deep[2], deep[0], deep[1]]
    turned, _ = hand_out(rotated, flags, made)
    assert turned == rotated
    assert not {id(c) for c in _walk(turned)} & {id(c) for c in _walk(again)}
    del again, turned
    turned, _ = hand_out(rotated, flags, made)
    assert turned == rotated and turned[0] is made.copies[2]


def test_hand_out_copies_an_ordered_dict_as_a_plain_one_and_never_shares_it() -> None:
    item = {"role": "assistant", "args": OrderedDict(path="a.py")}
    first, made = hand_out([item], [True])
    assert type(first[0]["args"]) is dict and first[0] == item
    first[0]["args"]["path"] = "b.py"  # an edit of the copy: made again, the item untouched
    del first
    again, made = hand_out([item], [True], made)
    assert again == [item] and item["args"]["path"] == "a.py"
    assert type(again[0]["args"]) is dict and again[0]["args"] is not item["args"]
    del again  # let go unchanged: the plain copy is handed out again
    third, _ = hand_out([item], [True], made)
    assert third[0] is made.copies[0] and third == [item]


def test_hand_out_names_mismatched_flags() -> None:
    items, _ = _items()
    with pytest.raises(ValueError, match="deep has 1 flags for 3 items"):
        hand_out(items, [True])


@pytest.mark.anyio
@pytest.mark.parametrize("rehand", [True, False], ids=["counts-exact", "free-threaded"])
async def test_warm_renders_hand_out_again_the_dicts_of_the_payload_two_renders_back(
    rehand: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``out = await session.render()`` holds the last payload during the next render: the
    dicts handed out the render before are the ones handed out again, never the held ones.
    On a free-threaded interpreter running without its GIL reference counts are split per
    thread, so there (``warm._REHAND`` False) every payload is copied anew."""
    from ctxengine.inject import warm as warm_module

    monkeypatch.setattr(warm_module, "_REHAND", rehand)
    engine = ContextEngine("gpt-4o", Budget(total=32_000))
    async with engine.session("rehand") as session:
        session.extend(_session(8))
        out = await session.render()
        rehanded = expected = older_seen = 0
        for k in range(6):
            session.extend([Message.user(f"next {k}"), Message.assistant(f"ok {k}")])
            warm = session._state.token_cache.memo.warm
            gens = next(iter(warm.handed.values()))
            # what was handed out two renders back (held, not its copies: a copy held is
            # never handed out again)
            handout = gens[0] if len(gens) == 2 else None
            older_seen += len(handout) if handout is not None else 0
            previous = out.payload
            out = await session.render()
            mine = _walk(out.payload)
            assert not {id(c) for c in mine} & {id(c) for c in _walk(previous)}
            older = handout.copies if handout is not None else []
            rehanded += sum(1 for m in out.payload["messages"] if any(m is o for o in older))
            del older
            fresh = render(out.transcript, "openai", hygiene=False)
            assert json.dumps(out.payload) == json.dumps(fresh.payload)
            if k:  # all but the 4 messages new in this render and the one before
                expected += len(out.payload["messages"]) - 4
        assert warm.reused >= 5 and older_seen > 0
        assert rehanded == (expected if rehand else 0) and expected > 0


@pytest.mark.anyio
async def test_the_summary_is_one_message_between_compactions() -> None:
    """Compose makes the compaction summary once per text: the next render finds it among the
    messages it kept (a new object would be a new head, and the flat dicts made again)."""
    engine = ContextEngine("gpt-4o", Budget(total=4_000))
    async with engine.session("summary") as session:
        session.extend(_session(60))
        summaries: list[Message] = []
        for k in range(10):  # until the session compacts
            first = await session.render()
            summaries = [m for m in first.transcript.messages if m.meta.get("ctxengine_summary")]
            if summaries:
                break
            session.extend([Message.user(f"more {k}"), Message.assistant("x " * 200)])
        assert len(summaries) == 1
        session.extend([Message.user("next"), Message.assistant("ok")])
        second = await session.render()
        again = [m for m in second.transcript.messages if m.meta.get("ctxengine_summary")]
        assert again == summaries and again[0] is summaries[0]
        warm = session._state.token_cache.memo.warm
        record = next(iter(warm.records.values()))
        assert record.reused[0] == 0  # no new message in front of the kept ones


def _unanswered() -> list[Message]:
    """A call with no result yet: hygiene adds a synthetic one, and the render takes the path
    that exports the cleaned transcript whole (no warm record)."""
    call = ToolCall("c1", "read", {"path": "a.py", "opts": {"lines": [1, 2]}})
    return [Message.user("hello"), Message.assistant("reading", [call])]


@pytest.mark.anyio
@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_an_edited_payload_of_a_cleaned_transcript_changes_nothing_held(
    provider: str,
) -> None:
    # the exporters hand a tool call's arguments dict (and, for OpenAI, the memo's message
    # dicts) to the payload as they are: an edit reached the session's own transcript
    options = PROVIDERS[provider]
    engine = ContextEngine("gpt-4o", Budget(total=32_000))
    async with engine.session("isolation") as session:
        session.extend(_unanswered())
        before = _dump([m.tool_calls[0].arguments for m in session.messages[1:]])
        out = await session.render(provider, **options)
        assert session._state.token_cache.memo.warm.reused == 0
        assert _tamper(out.payload) > 3
        assert _dump([m.tool_calls[0].arguments for m in session.messages[1:]]) == before
        for again in PROVIDERS:  # every later render, whatever the provider, is as from scratch
            out = await session.render(again, **PROVIDERS[again])
            assert "TAMPERED" not in _dump(out.payload)
            fresh = render(out.transcript, again, hygiene=False, **PROVIDERS[again])
            assert _dump(out.payload) == _dump(fresh.payload)


@pytest.mark.anyio
@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_tool_arguments_of_a_dict_subclass_are_not_shared_with_a_payload(
    provider: str,
) -> None:
    args = OrderedDict(path="a.py", opts=OrderedDict(lines=[1, 2]))
    messages = [
        Message.user("read a.py"),
        Message.assistant("reading", [ToolCall("c1", "read", args)]),
        Message.tool("c1", "print(1)"),
    ]
    before = json.dumps(args)
    engine = ContextEngine("gpt-4o", Budget(total=32_000))
    async with engine.session("ordered-args") as session:
        session.extend(messages)
        for _ in range(2):  # from scratch, then warm
            await session.user_message("and then?")
            out = await session.render(provider, **PROVIDERS[provider])
            assert _tamper(out.payload) > 3
            assert json.dumps(args) == before
            held = session.messages[1].tool_calls[0].arguments
            assert json.dumps(held) == before


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_an_edited_payload_of_transcript_to_leaves_the_transcript_as_it_was(
    provider: str,
) -> None:
    t = Transcript((*_unanswered(), Message.tool("c1", "ok")))
    before = _dump([m.tool_calls[0].arguments for m in t.messages[1:2]])
    assert _tamper(t.to(provider)) > 3
    assert _dump([m.tool_calls[0].arguments for m in t.messages[1:2]]) == before
    assert "TAMPERED" not in _dump(t.to(provider))
