"""The per-message fast paths of a cold render give exactly what the straightforward
definitions give (the definitions below are the code as it was before the fast paths):

- the history builder's items (every field, the grain included, and the builder's bookkeeping);
- ``repair_text``'s clean check (the message itself when clean, the same repair otherwise);
- the OpenAI Chat dicts of a message, the strings and overhead counted for a dict;
- ``exported_blocks`` and ``family_of`` for every provider, and what hygiene and the image
  limit read of them (``sends_any``, ``image_count``, the id check ``fits``);
- ``to_messages`` on neutral lists, ``sync_history``'s texts, ``SessionState.extend``.

On every message of the shared sessions and on hand-made edge cases (images, thinking,
subclasses of the block types, lone surrogates, odd payload shapes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from ctxengine import _core
from ctxengine.assemble.guard import truncate_tool_result
from ctxengine.assemble.history import (
    FLAG,
    KIND,
    MESSAGE_OVERHEAD,
    ROLE,
    HistoryBuilder,
    HistoryItem,
    item_grains,
    tool_result_node_id,
    transcript_grain,
)
from ctxengine.assemble.sync import _texts, item_text
from ctxengine.grain import ContextGrain
from ctxengine.inject.adapters.openai import message_dicts
from ctxengine.inject.ids import fits
from ctxengine.state import _clean, _clean_blocks, repair_text
from ctxengine.tokens import IMAGE_TOKENS, message_strings
from ctxengine.transcript import Message, ToolCall, load_all
from ctxengine.transcript.coerce import to_messages
from ctxengine.transcript.importers.common import image_url
from ctxengine.transcript.model import Image, Text, Thinking, ToolResult, Transcript
from ctxengine.transcript.providers import (
    IMAGE_TYPES,
    exportable,
    exported_blocks,
    family_of,
    image_count,
    image_placeholder,
    image_slots,
    sends_any,
    thinking_first,
)

from .helpers import PROVIDERS, all_files

# -- the straightforward definitions ---------------------------------------------------------

_FEEDBACK = re.compile(
    r"^\s*(thanks|thank you|great|perfect|nice|good|wrong|no[,.!]|nope|not what|that's not|"
    r"that is not|doesn't work|does not work|still (fails|broken)|works|correct|incorrect|stop)\b",
    re.IGNORECASE,
)
_STRUCTURAL = re.compile(
    r"(edit|write|create|delete|remove|rename|move|patch|replace|apply|commit|insert|mkdir)",
    re.IGNORECASE,
)


class RefBuilder(HistoryBuilder):
    """The history builder as it was written before its per-message pass was unrolled."""

    def items(self, index: int, message: Message) -> list[HistoryItem]:
        follows = self.leads and message.role == "assistant"  # [thinking], then the rest
        if (message.role != "tool" or self.turn < 0) and not follows:
            self.turn += 1
        self.leads = (
            message.role == "assistant"
            and all(isinstance(b, Thinking) for b in message.blocks)
            and bool(message.blocks)
        )
        if message.role == "tool":
            return [self._result(index, i, r) for i, r in enumerate(message.tool_results)]
        return [self._message(index, message)]

    def _message(self, index: int, message: Message) -> HistoryItem:
        calls = message.tool_calls
        flags = 0
        if calls:
            flags = FLAG["tool_call"]
            for call in calls:
                self.tool_names[call.id] = call.name
                self.call_group[call.id] = self.turn
            if any(_STRUCTURAL.search(c.name) is not None for c in calls):
                flags |= FLAG["structural"]
        text = message.text
        role = message.role
        if role == "user" and (len(text) > 40 or _FEEDBACK.search(text)):
            flags |= FLAG["feedback"]
        blocks = message.blocks
        images = 0
        thinking: tuple[Thinking, ...] = ()
        if not (len(blocks) == 1 and type(blocks[0]) is Text):
            images = sum(isinstance(b, Image) for b in blocks)
            # thinking with no text counts too (a Responses reasoning item is sent whole)
            thinking = tuple(
                b for b in blocks if isinstance(b, Thinking) and (b.text or b.signature)
            )
        flags |= FLAG["image"] if images else 0
        kind = KIND["message"]
        if role == "system":
            kind, flags = KIND["context"], flags | FLAG["protected"]
        texts = tuple(t for c in calls for t in (c.name, c.arguments_json))
        texts = () if message.failed else texts  # hygiene strips a failed turn's calls
        context = kind == _core.KIND_CONTEXT
        node_id = self._node_id(f"sys.transcript.{index}" if context else f"hist.{index}")
        meta = {"message_index": index, "role": role}
        grain = transcript_grain(node_id, text, 0 if context else 100, context, meta)
        overhead = MESSAGE_OVERHEAD + images * IMAGE_TOKENS
        return HistoryItem(
            node_id, index, -1, text, kind, ROLE[role], self.turn, flags, texts, overhead,
            f"{role} message {index}", text, text, thinking=thinking,
            family=family_of(message) if thinking else None, made_grain=grain,
            media=images * IMAGE_TOKENS,
            placeholders=_placeholders(blocks) if images and role == "assistant" else (),
        )  # fmt: skip

    def _result(self, index: int, position: int, result: ToolResult) -> HistoryItem:
        name = result.name or self.tool_names.get(result.call_id, "tool")
        content = result.content
        if len(content) == 1 and type(content[0]) is Text:
            images, source = 0, content[0].text
        else:
            images = sum(isinstance(b, Image) for b in content)
            source = "\n".join(b.text for b in content if isinstance(b, Text))
        flags = FLAG["image"] if images else 0
        node_id = self._node_id(tool_result_node_id(result.call_id) or f"act.tool_result.m{index}")
        text = source
        if self.max_result_chars is not None and len(source) > self.max_result_chars:
            text = truncate_tool_result(source, self.max_result_chars)
        meta = {"message_index": index, "role": "tool", "tool": name}
        grain = transcript_grain(node_id, text, 100, False, meta)
        return HistoryItem(
            node_id, index, position, text, KIND["tool_result"], ROLE["tool"],
            self.call_group.get(result.call_id, self.turn), flags, (result.call_id,),
            MESSAGE_OVERHEAD + images * IMAGE_TOKENS, f"tool result: {name}", text, source,
            len(source) if text is not source else 0, tool=name, made_grain=grain,
            media=images * IMAGE_TOKENS, placeholders=_placeholders(content) if images else (),
        )  # fmt: skip


def _placeholders(blocks: Sequence[Any]) -> tuple[str, ...]:
    """What each media item of ``blocks`` is sent as where a provider takes none there."""
    return tuple(image_placeholder(b).text for b in blocks if isinstance(b, Image))


def ref_clean(message: Message) -> bool:
    return all(_clean(b) for b in message.blocks)


def _ref_text_content(blocks: list[Text]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1:
        return blocks[0].text
    return [{"type": "text", "text": b.text} for b in blocks]


def _ref_flat_text(content: tuple[Text | Image, ...]) -> list[Text]:
    return [b if isinstance(b, Text) else image_placeholder(b) for b in content]


def ref_message_dicts(m: Message) -> list[dict[str, Any]]:
    out = _ref_dicts(m)
    name = m.meta.get("name")
    if m.role != "tool" and isinstance(name, str) and name:
        out[0]["name"] = name  # the participant's name goes back
    return out


def _ref_dicts(m: Message) -> list[dict[str, Any]]:
    if m.role == "system":
        role = m.meta.get("openai_role", "system")
        texts = [b for b in m.blocks if isinstance(b, Text)]
        return [{"role": role, "content": _ref_text_content(texts) if texts else ""}]
    if m.role == "user":
        blocks = [b for b in m.blocks if isinstance(b, (Text, Image))]
        if all(isinstance(b, Text) for b in blocks) and len(blocks) == 1:
            return [{"role": "user", "content": blocks[0].text}]  # type: ignore[union-attr]
        parts: list[dict[str, Any]] = []
        for b in blocks:
            if isinstance(b, Text):
                parts.append({"type": "text", "text": b.text})
            elif b.media_type == "application/pdf" and b.data is not None:
                file = {"file_data": image_url(b), "filename": "document.pdf"}
                parts.append({"type": "file", "file": file})
            elif b.media_type == "application/pdf":  # a file part takes no URL
                parts.append({"type": "text", "text": image_placeholder(b).text})
            elif b.media_type in IMAGE_TYPES or b.url:
                url = {"url": image_url(b)} | ({"detail": b.detail} if b.detail else {})
                parts.append({"type": "image_url", "image_url": url})
            else:
                parts.append({"type": "text", "text": image_placeholder(b).text})
        return [{"role": "user", "content": parts}]
    if m.role == "assistant":
        texts = _ref_flat_text(tuple(b for b in m.blocks if isinstance(b, (Text, Image))))
        out: dict[str, Any] = {
            "role": "assistant",
            "content": _ref_text_content(texts) if texts else None,
        }
        calls = [b for b in m.blocks if isinstance(b, ToolCall)]
        if calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments_json}}
                for c in calls
            ]  # fmt: skip
        return [out]
    dicts: list[dict[str, Any]] = []
    for r in m.tool_results:
        flat = _ref_flat_text(r.content)
        content = _ref_text_content(flat) if flat else ""
        dicts.append({"role": "tool", "tool_call_id": r.call_id, "content": content})
    return dicts


def ref_message_strings(message: Mapping[str, Any]) -> tuple[list[str], int]:
    strings: list[str] = []
    overhead = 3
    for key, value in message.items():
        if type(value) is str and key != "tool_calls":
            strings.append(value)
            overhead += 1 if key == "name" else 0
        elif key == "tool_calls" and isinstance(value, Sequence):
            for call in value:
                fn = call.get("function", {}) if isinstance(call, Mapping) else {}
                strings += [str(fn.get("name", "")), str(fn.get("arguments", ""))]
        elif key == "function_call" and isinstance(value, Mapping):
            strings += [str(value.get("name", "")), str(value.get("arguments", ""))]
        elif isinstance(value, str):
            strings.append(value)
            overhead += 1 if key == "name" else 0
        elif isinstance(value, list):
            for part in value:
                if not isinstance(part, Mapping):
                    continue
                if isinstance(part.get("text"), str):
                    strings.append(part["text"])
                elif part.get("type") in {"image_url", "input_image", "image", "file"}:
                    overhead += IMAGE_TOKENS
        elif value is not None:
            strings.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
    return strings, overhead


def ref_family_of(message: Message, transcript: Transcript | None = None) -> str | None:
    from ctxengine.transcript.providers import _FAMILIES

    fam = message.meta.get("provider_family")
    if isinstance(fam, str):
        return _FAMILIES.get(fam, fam)
    if transcript is not None and transcript.source_format is not None:
        return _FAMILIES.get(transcript.source_format)
    return None


# -- the messages ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MyText(Text):
    """A subclass of a block type: the fast paths must send it the general way."""


@dataclass(frozen=True, slots=True)
class MyCall(ToolCall):
    pass


class Str(str):
    """A ``str`` subclass (payload values may be one)."""


def _edge_messages() -> list[Message]:
    img = Image("image/png", data="AAAA")
    doc = Image("application/pdf", url="https://x.test/a.pdf")
    lone = "bad \udcff byte"
    sig = json.dumps({"type": "reasoning", "id": "rs_1", "summary": []})
    return [
        Message.system("rules"),
        Message("system", (Text("a"), Text("b")), meta={"openai_role": "developer"}),
        Message("system", ()),
        Message.user("thanks"),
        Message.user("no, that is wrong"),
        Message.user("x" * 41),
        Message.user("short"),
        Message.user("   "),
        Message.user(lone),
        Message.user("héllo wörld"),
        Message("user", (Text("look"), img, doc)),
        Message("user", (img,)),
        Message("user", ()),
        Message("user", (MyText("sub"),)),
        Message("user", (Text("a"), MyText("b"))),
        Message.assistant(),
        Message.assistant("", [ToolCall("c1", "edit_file", {"path": "a.py"})]),
        Message.assistant("t", [ToolCall("c2", "read", "not json"), ToolCall("c3", "mkdir", {})]),
        Message("assistant", (Thinking("why", "sig-a"), Text("so"))),
        Message("assistant", (Thinking("", "sig"), Thinking("r", None, True), Text("x"))),
        Message("assistant", (Thinking("r", sig),), meta={"provider_family": "openai-responses"}),
        Message.assistant("the text of the turn its thinking began"),
        Message("assistant", (Thinking("g"), Text("y")), meta={"provider_family": "google"}),
        Message("assistant", (Thinking(lone, "s"), Text(lone)), meta={"provider_family": 3}),
        Message("assistant", (Text("a"), img, Text("b"), MyCall("c4", "write", {"x": 1}))),
        Message("assistant", (MyText("m"), Text(" "))),
        Message.tool("c1", "done"),
        Message.tool("c1", "again"),  # a second result for the same id: a fresh node id
        Message.tool("c9", "orphan", name="grep"),
        Message.tool("", "no id"),
        Message.tool("c/ä", lone),
        Message(
            "tool",
            (
                ToolResult("c2", (Text("a"), img, Text("b"))),
                ToolResult("c3", ()),
                ToolResult("c4", (MyText("s"),), True),
            ),
        ),
        Message("tool", (ToolResult("c5", (doc,)),)),
        Message("tool", (ToolResult("c6", (Text("x" * 300),)),)),
    ]


@cache
def _sessions() -> tuple[tuple[str, tuple[Message, ...], str | None], ...]:
    out = [("edge", tuple(_edge_messages()), None)]
    for path in all_files():
        for n, t in enumerate(load_all(path)):
            out.append((f"{path.parent.name}/{path.name[:30]}#{n}", t.messages, t.source_format))
    return tuple(out)


def _ids() -> list[str]:
    return [name for name, _, _ in _sessions()]


SESSIONS = _sessions()


# -- the checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [None, 120])
@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_history_items_equal_the_reference(
    name: str, msgs: tuple[Message, ...], fmt: str | None, limit: int | None
) -> None:
    fast, ref = HistoryBuilder(), RefBuilder()
    fast.max_result_chars = ref.max_result_chars = limit
    seen = 0
    for i, m in enumerate(msgs):
        m = repair_text(m)
        a, b = fast.items(i, m), ref.items(i, m)
        assert all(x.made_grain is None for x in a)  # made on first use
        for x, y in zip(a, b, strict=True):
            assert x.grain == y.grain and x.grain.meta == y.grain.meta
            assert x.grain is x.grain  # made once
        assert a == b, (name, i)
        for x in a:
            assert x.text is x.source_text or x.guarded_from  # one object unless cut
            seen += 1
        assert fast.turn == ref.turn
    assert fast.tool_names == ref.tool_names and fast.call_group == ref.call_group
    assert fast.used_ids == ref.used_ids
    assert seen >= len(msgs) // 2


@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_repair_text_clean_check_equals_the_reference(
    name: str, msgs: tuple[Message, ...], fmt: str | None
) -> None:
    for m in msgs:
        assert _clean_blocks(m.blocks) == ref_clean(m)
        fixed = repair_text(m)
        assert (fixed is m) == ref_clean(m) or fixed == m


def test_repair_text_repairs_every_kind_of_block() -> None:
    lone = "a\udcffb"
    cases = [
        Message.user(lone),
        Message("assistant", (Thinking(lone),)),
        Message.tool("c", lone),
        Message("tool", (ToolResult("c", (Image("image/png", data="A"), MyText(lone))),)),
        Message("user", (MyText(lone),)),
    ]
    for m in cases:
        assert not _clean_blocks(m.blocks) and not ref_clean(m)
        fixed = repair_text(m)
        assert fixed is not m and "\ufffd" in repr(fixed.blocks)
        assert _clean_blocks(fixed.blocks) == ref_clean(fixed)  # a subclass: never taken as clean
    assert _clean_blocks(Message("user", (Text("ok"), Image("image/png"))).blocks)
    assert not _clean_blocks(Message("user", (MyText("ok"),)).blocks)  # as the reference


@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_openai_dicts_and_their_strings_equal_the_reference(
    name: str, msgs: tuple[Message, ...], fmt: str | None
) -> None:
    for m in msgs:
        dicts = message_dicts(m)
        assert dicts == ref_message_dicts(m)
        assert json.dumps(dicts) == json.dumps(ref_message_dicts(m))  # key order too
        for d in dicts:
            assert message_strings(d) == ref_message_strings(d)


def test_message_strings_on_odd_shapes_equal_the_reference() -> None:
    shapes: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "name": "bob"},
        {"role": Str("user"), "content": Str("hi"), "name": Str("n")},
        {"role": "assistant", "tool_calls": "oops"},
        {"role": "assistant", "tool_calls": None},
        {"role": "assistant", "tool_calls": ({"function": {"name": "f", "arguments": "{}"}},)},
        {"role": "assistant", "tool_calls": [{"function": {"name": 3, "arguments": {"a": 1}}}]},
        {"role": "assistant", "tool_calls": [{"id": "x"}, "bad", {"function": {"name": "g"}}]},
        {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, 3]},
        {"role": "user", "content": [{"type": "input_image"}, {"text": 5}]},
        {"role": "tool", "content": {"b": 1, "a": [2]}, "extra": 7},
    ]
    for d in shapes:
        assert message_strings(d) == ref_message_strings(d), d


@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_exported_blocks_and_family_equal_the_reference(
    name: str, msgs: tuple[Message, ...], fmt: str | None
) -> None:
    t = Transcript(msgs, source_format=fmt)
    for m in msgs:
        assert family_of(m) == ref_family_of(m)
        assert family_of(m, t) == ref_family_of(m, t)
        for provider in PROVIDERS:
            for family in {None, provider, "anthropic", family_of(m, t)}:
                want = [b for b in m.blocks if exportable(b, provider, family)]
                while provider == "openai-responses" and want and isinstance(want[-1], Thinking):
                    want.pop()  # a reasoning item is sent only before the item it led to
                if provider == "anthropic":
                    want = thinking_first(want)  # thinking first, never last
                got = exported_blocks(m, provider, family)
                assert len(got) == len(want) and all(a is b for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_sends_any_and_image_count_equal_the_definitions(
    name: str, msgs: tuple[Message, ...], fmt: str | None
) -> None:
    t = Transcript(msgs, source_format=fmt)
    blank = Message("assistant", (Text(" "), Thinking("r", "sig")))
    for m in (*msgs, blank):
        for provider in PROVIDERS:
            assert sends_any(m, provider, t) is bool(exported_blocks(m, provider, family_of(m, t)))
            assert image_count(m, provider) == len(image_slots(m, provider))
    assert sends_any(blank, "openai") and not sends_any(blank, "anthropic")  # thinking alone


def test_id_fit_equals_the_pattern() -> None:
    pattern = re.compile(r"[A-Za-z0-9]+")
    ids = ["", "a", "call_1", "toolu_01ABC", "x" * 40, "x" * 41, "abc123def", "ab-12", "١٢٣", "é1"]
    ids += [c.id for _, msgs, _ in SESSIONS for m in msgs for c in m.tool_calls]
    for cid in ids:
        for mode in ("strict", "strict9"):
            want = cid.isascii() and pattern.fullmatch(cid) is not None
            want = want and (len(cid) == 9 if mode == "strict9" else len(cid) <= 40)
            assert fits(cid, mode) is want, (cid, mode)


@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_item_grains_equal_each_items_grain(
    name: str, msgs: tuple[Message, ...], fmt: str | None
) -> None:
    fast, ref = HistoryBuilder(), HistoryBuilder()
    a = [x for i, m in enumerate(msgs) for x in fast.items(i, repair_text(m))]
    b = [x for i, m in enumerate(msgs) for x in ref.items(i, repair_text(m))]
    made = a[0].grain if a else None  # one made before: given back as it is
    got = item_grains([*a, None])
    assert got[-1] is None and (made is None or got[0] is made)
    for x, y, g in zip(a, b, got, strict=False):
        assert g is x.grain and g == y.grain and g.meta == y.grain.meta
        assert type(g) is ContextGrain and repr(g) == repr(y.grain)


def test_to_messages_returns_neutral_lists_as_they_are_and_still_checks_others() -> None:
    msgs = list(_edge_messages())
    out = to_messages(msgs)
    assert out == msgs and out is not msgs and all(a is b for a, b in zip(out, msgs, strict=True))
    mixed = [*msgs[:3], {"role": "user", "content": "hi"}]
    out = to_messages(mixed)
    assert out[:3] == msgs[:3] and out[3] == Message.user("hi")
    assert to_messages([]) == []


def test_sync_texts_equal_item_text_with_and_without_overrides() -> None:
    from ctxengine import ContextEngine
    from ctxengine.grain import ContextGrain

    state = ContextEngine("gpt-4o", 8000).new_state("s")
    state.extend(_edge_messages())
    items = list(state.items.values())
    assert _texts(state, items) == [item_text(state, i) for i in items]
    items[0].grain.content = ["a", {"b": 1}]  # a plugin may change a grain's content
    assert _texts(state, items) == [item_text(state, i) for i in items]
    assert _texts(state, items)[0] == '["a",{"b":1}]'
    state.overrides[items[1].node_id] = ContextGrain(items[1].node_id, "p", "over")
    assert _texts(state, items) == [item_text(state, i) for i in items]
    assert _texts(state, items)[1] == "over"


def test_state_extend_equals_one_append_per_message() -> None:
    from ctxengine import ContextEngine

    msgs = [m for _, ms, _ in SESSIONS[:3] for m in ms]
    engine = ContextEngine("gpt-4o", 8000)
    sa, sb = engine.new_state("a"), engine.new_state("b")
    sa.extend(msgs)
    for m in msgs:
        sb.append(m)
    assert sa.messages == sb.messages and list(sa.items) == list(sb.items)
    assert list(sa.items.values()) == list(sb.items.values()) and sa.pending == sb.pending
    assert sa.guarded == sb.guarded


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_compaction_message_counts_equal_the_definition_in_and_out_of_a_scope(
    encoding: str,
) -> None:
    from ctxengine.compaction import message_tokens
    from ctxengine.compaction.facts import message_scope
    from ctxengine.compaction.pipeline import _BATCH_CHARS
    from ctxengine.tokens import get_tokenizer

    count = get_tokenizer(encoding).count

    def joined(m: Message) -> str:  # role, text, calls, results: the empty ones left out
        parts = [m.role, m.text, *(f"{c.name} {c.arguments_json}" for c in m.tool_calls)]
        parts += [r.text for r in m.tool_results]
        return "\n".join(p for p in parts if p)

    big = Message.tool("cb", "line of output\n" * (_BATCH_CHARS // 10))  # counted by parts
    for _, msgs, _ in SESSIONS:
        clean = [repair_text(m) for m in msgs]  # as the session holds them
        batch = [*clean, big, clean[0]]  # a message twice: the same count
        want = [count(joined(m)) + 4 for m in batch]
        assert message_tokens(batch, count) == want
        with message_scope():
            assert message_tokens(batch, count) == want
            assert message_tokens(batch, count) == want  # from the scope's memo
            assert message_tokens(batch, lambda t: count(t)) == want  # another counter: again


@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_message_and_result_text_equal_the_join(
    name: str, msgs: tuple[Message, ...], fmt: str | None
) -> None:
    for m in [*msgs, Message.user(Str("sub")), Message.tool("c", Str("out"))]:
        want = "\n".join(b.text for b in m.blocks if isinstance(b, Text))
        assert m.text == want and type(m.text) is str
        for r in m.tool_results:
            want = "\n".join(b.text for b in r.content if isinstance(b, Text))
            assert r.text == want and type(r.text) is str


def _ref_identifiers(text: str) -> tuple[str, ...]:
    from ctxengine.compaction import facts as F

    found = [u.rstrip(".,;:!?") for u in F._URL.findall(text)] if "://" in text else []
    stripped = F._URL.sub(" ", text) if found else text
    uuids: list[str] = []
    hashes: list[str] = []
    paths: list[str] = []
    tickets: list[str] = []
    for word in stripped.split():
        if len(word) >= 7 and not word.isalpha():
            if len(word) >= 36 and "-" in word:
                uuids += F._UUID.findall(word)
            hashes += [h for h in F._HASH.findall(word) if not h.isdigit()]
        if "/" in word and "." in word:
            paths += F._PATHLIKE.findall(word)
        if "-" in word or "#" in word:
            tickets += F._TICKET.findall(word)
    return (*found, *uuids, *hashes, *paths, *tickets)


IDENTIFIER_CASES = [
    "commit 3f2a9c1d fixed JIRA-123 and #45, see https://x.test/a/b.py?q=1.",
    "uuid 123E4567-E89B-12D3-A456-426614174000 and 123e4567-e89b-12d3-a456-426614174000",
    "deadbee 1234567 abcdefa 0123456789abcdef0123 src/a/b.rs ./c.py ~/d/e.txt",
    "AB-1 x-1 #1 #١٢ A1-٣ ab-12 ZZ9-0",
    "FFFFFFF ffffff0 no ids here at all",
    "",
]


@pytest.mark.parametrize(("name", "msgs", "fmt"), SESSIONS, ids=_ids())
def test_identifiers_equal_the_reference(
    name: str, msgs: tuple[Message, ...], fmt: str | None
) -> None:
    from ctxengine.compaction import facts as F

    texts = [m.text for m in msgs] + [c.arguments_json for m in msgs for c in m.tool_calls]
    texts += [r.text for m in msgs for r in m.tool_results]
    for text in [*texts, *IDENTIFIER_CASES]:
        expected = _ref_identifiers(text)
        assert F._read_identifiers(text) == F._identifiers(text) == expected, text[:80]
    assert any(_ref_identifiers(t) for t in IDENTIFIER_CASES[:4])


def test_bulk_pauses_the_collector_and_restores_it_as_it_was() -> None:
    import gc

    from ctxengine.state import bulk

    assert gc.isenabled()
    with bulk():
        assert not gc.isenabled()
        with bulk():  # nested: the outer one restores
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), bulk():
        raise KeyError("x")
    assert gc.isenabled()  # restored after an error too
    gc.disable()
    try:
        with bulk():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller's choice is left alone
    finally:
        gc.enable()


def test_extractive_summary_from_the_scope_memo_equals_a_fresh_one() -> None:
    from ctxengine.compaction import ExtractiveSummarizer
    from ctxengine.compaction.facts import message_scope

    summarizer = ExtractiveSummarizer()
    for _, msgs, _ in SESSIONS[1:]:
        clean = [repair_text(m) for m in msgs]
        fresh = summarizer.summarize_sync(clean)
        half = summarizer.summarize_sync(clean[len(clean) // 2 :])
        with message_scope():  # an outer scope: the second reading comes from its memo
            assert summarizer.summarize_sync(clean[len(clean) // 2 :]) == half
            assert summarizer.summarize_sync(clean) == fresh
            assert summarizer.summarize_sync(clean) == fresh


def test_an_item_equals_itself_before_and_after_its_grain_is_made() -> None:
    a = HistoryBuilder().items(0, Message.user("hello there"))[0]
    b = HistoryBuilder().items(0, Message.user("hello there"))[0]
    assert a == b and a.made_grain is None
    grain = a.grain
    assert a == b and a.made_grain is grain and b.made_grain is None
    b.grain = grain  # set by hand, as a plugin holding an item could
    assert b.grain is grain
