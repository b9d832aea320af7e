"""Warm renders reuse per-message work (issue 14): the payload is the one made from scratch.

Every render of a session goes through the session's :class:`RenderMemo`; here each one is also
rendered again from the same composed transcript with no memo (and validated in full), and the
two must agree byte for byte, over several renders of real sessions with new messages and trims.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ctxengine.inject.turn as turn_module
from ctxengine import Budget, ContextEngine
from ctxengine.hygiene import validate
from ctxengine.inject.memo import RenderMemo
from ctxengine.inject.payload import payload_tokens
from ctxengine.inject.render import Rendered, render
from ctxengine.transcript import Message, Transcript, load
from offline_tiktoken import TRANSCRIPTS

SESSIONS = [
    TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl",
    TRANSCRIPTS / "openhands" / "output.jsonl",
    TRANSCRIPTS / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
]
PROVIDERS = {
    "openai": {},
    "openai-responses": {},
    "anthropic": {"cache_breakpoints": 4},
    "gemini": {},
}


def _dump(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, ensure_ascii=False)


class Checked:
    """Wraps the inject phase's render: the memo path, compared with a render from scratch."""

    def __init__(self) -> None:
        self.renders = 0
        self.changed = 0

    def __call__(self, t: Transcript, provider: str, **options: Any) -> Rendered:
        assert isinstance(options.get("memo"), RenderMemo)
        fast = render(t, provider, **options)
        options.pop("memo")
        slow = render(t, provider, **options)
        assert _dump(fast.payload) == _dump(slow.payload)
        assert fast.transcript.messages == slow.transcript.messages
        assert fast.report == slow.report
        assert fast.breakpoints == slow.breakpoints
        assert validate(slow.transcript, provider) == []
        self.renders += 1
        self.changed += fast.report.changed
        return fast


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: Path(p).parent.name + "/" + p.name)
@pytest.mark.anyio
async def test_incremental_payload_equals_from_scratch(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = Checked()
    monkeypatch.setattr(turn_module, "render", checked)
    messages = list(load(path).messages)
    assert len(messages) >= 20, path
    half = len(messages) // 2
    engine = ContextEngine("gpt-4o", Budget(total=8_000))
    async with engine.session("incremental") as session:
        session.extend(messages[:half])
        await session.user_message("Where are we?")
        step = max(1, (len(messages) - half) // 6)
        cut = False
        for k, start in enumerate(range(half, len(messages), step)):
            session.extend(messages[start : start + step])
            session.extend([Message.assistant(f"ok {k}"), Message.user(f"next {k}")])
            for provider, options in PROVIDERS.items():
                out = await session.render(provider, **options)
                if provider == "openai":
                    assert out.tokens == payload_tokens(out.payload, "openai", "gpt-4o")
                assert out.report.tokens <= 8_000 or not out.report.fits
                cut = (
                    cut
                    or bool(out.report.compactions)
                    or any(g.status != "kept" for g in out.report)
                )
        # trims or compactions happened: the 8k budget keeps a window of a long session
        assert cut
    assert checked.renders >= 4 * 6
    assert checked.changed > 0  # the real sessions need repairs, so that path is compared too


@pytest.mark.anyio
async def test_memo_holds_only_the_last_renders() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=2_000))
    async with engine.session("memo") as session:
        widest = 0
        for i in range(60):
            session.extend([Message.user(f"question {i} " * 40), Message.assistant(f"answer {i}")])
            out = await session.render()
            widest = max(widest, len(out.transcript))
        memo = session._state.token_cache.memo
        # the warm record is the last render's, message for message
        record = memo.warm.records[("openai", None, "render")]
        assert [id(m) for m in record.src.messages] == [id(m) for m in out.transcript.messages]
        assert memo.warm.reused > 0
        # per-message tables hold at most one render's window, not the session's 120 messages
        for table in memo._tables.values():
            table.settle()  # the first render's values, if the table was not read since
            assert table.new == {}
            assert 0 < len(table.old) <= widest < 120


@pytest.mark.anyio
async def test_payload_dicts_are_not_shared_between_renders() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=32_000))
    async with engine.session("fresh") as session:
        session.extend([Message.user("hello"), Message.assistant("hi")])
        first = await session.render()
        first.payload["messages"][0]["content"] = "tampered"
        second = await session.render()
        assert second.payload["messages"][0]["content"] == "hello"


@pytest.mark.parametrize("nodes", [{"n3"}, {"n3", "n7", "gone"}, {f"n{i}" for i in range(12)}])
def test_compose_finds_the_retexted_nodes_of_the_kept_window(nodes: set[str]) -> None:
    """Compose composes again only the kept nodes a sync gave a new text: their positions
    in the kept part of the window, by index for a few nodes and by one pass for many."""
    from ctxengine.inject.compose import _positions

    order = [f"n{i}" for i in range(20)]
    got = sorted(_positions(order, nodes, 2, 10))
    assert got == [j for j in range(2, 10) if order[j] in nodes]


def test_a_first_render_gives_a_message_object_met_twice_one_value() -> None:
    """The first use of a memo table makes every value at once; a message object given twice
    still gets one value for both places (as every later render's lookups give it)."""
    from ctxengine.inject.memo import _Table

    again = Message.user("the same object twice")
    messages = [Message.user("first"), again, Message.assistant("between"), again]
    made: list[Message] = []

    def make(m: Message) -> list[str]:
        made.append(m)
        return [m.text]

    table: _Table[list[str]] = _Table()
    out = table.many(messages, make)
    assert out == [["first"], ["the same object twice"], ["between"], ["the same object twice"]]
    assert out[1] is out[3]
    assert len(table.new) == 3
    assert table.many(messages, make) == out  # all found now
    fresh: _Table[list[str]] = _Table()
    distinct = [Message.user("a"), Message.assistant("b")]
    assert fresh.many(distinct, make) == [["a"], ["b"]]
    fresh.settle()  # put in the table on its first lookup
    assert [id(m) for m, _ in fresh.new.values()] == [id(m) for m in distinct]


def test_a_first_render_values_outlive_changes_to_its_lists_and_roll_as_entries() -> None:
    """The values of a table's first use are put in it only when it is looked up again: as
    they were made (the caller may change both lists after), and as entries of the render
    that made them (kept through one more render, dropped after one that does not use them)."""
    from ctxengine.inject.memo import _Table

    made: list[Message] = []

    def make(m: Message) -> list[str]:
        made.append(m)
        return [m.text]

    a, b, c = Message.user("a"), Message.user("b"), Message.user("c")
    table: _Table[list[str]] = _Table()
    messages = [a, b]
    out = table.many(messages, make)
    messages[0], out[0] = c, ["changed"]
    table.roll()  # the first render ends
    table.roll()  # a render that did not use the table keeps it as it is
    made.clear()
    assert table.get(b, make) == ["b"] and made == []  # the second render uses b only
    table.roll()
    assert table.get(a, make) == ["a"] and table.get(b, make) == ["b"] and made == [a]
    assert table.get(c, make) == ["c"] and made == [a, c]


@pytest.mark.anyio
@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.parent.name)
async def test_composed_messages_equal_one_lookup_per_node(path: Path) -> None:
    """Compose takes a kept item's message in its loop where ``_message`` gives the message
    itself: the list is one ``_message`` per node, replaced texts and a placeholder among the
    nodes."""
    from ctxengine.inject.compose import _message, _messages

    engine = ContextEngine("gpt-4o", Budget(total=120_000))
    async with engine.session("compose") as session:
        session.extend(load(path))
        await session.render()
        state = session._state
        order = [*state.items, "hist.gone"]
        items = [state.items.get(n) for n in order]
        replacements = [f"replaced {k}" if k % 7 == 3 else None for k in range(len(order))]
        got = _messages(state, order, items, replacements)
        want = [_message(state, *node) for node in zip(order, items, replacements, strict=True)]
        # the same objects: a message composed anew is kept by its item and given back again
        assert len(got) == len(order) and all(g is w for g, w in zip(got, want, strict=True))
        assert (
            sum(g is state.messages[i.index] for g, i in zip(got, items, strict=True) if i)
            > len(got) // 2
        )


@pytest.mark.anyio
async def test_warm_renders_count_new_messages_as_the_whole_payload_counts() -> None:
    """A warm render counts only the messages new since the last one (and sums the dropped
    head off), and gets what a count of the whole payload does, leading messages dropped or
    not."""
    engine = ContextEngine("gpt-4o", Budget(total=1_200))
    async with engine.session("one-handle") as session:
        for k in range(40):
            session.extend([Message.user(f"question {k} " * 8), Message.assistant(f"answer {k}")])
            out = await session.render()
            assert out.tokens == payload_tokens(out.payload, "openai", "gpt-4o")
        assert out.transcript.messages[0].text != "question 0 " * 8  # the head was dropped
