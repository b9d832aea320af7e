"""One test per hygiene rule (DESIGN.md §5, issue 5)."""

from __future__ import annotations

import json

import pytest

from ctxengine.errors import AdapterError
from ctxengine.hygiene import (
    BOOTSTRAP_TEXT,
    SYNTHETIC_RESULT_TEXT,
    clean,
    fix_turn_order,
    repair_pairing,
    sanitize_tool_ids,
    validate,
)
from ctxengine.inject.memo import RenderMemo
from ctxengine.inject.render import render
from ctxengine.inject.turn import _merged
from ctxengine.transcript import (
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Transcript,
    load,
)
from transcript.helpers import PROVIDERS, assert_sdk_valid


def call(cid: str, name: str = "bash") -> ToolCall:
    return ToolCall(cid, name, {"cmd": cid})


def ask(*cids: str, stop: str | None = None) -> Message:
    return Message("assistant", tuple(call(c) for c in cids), stop_reason=stop)


def res(*cids: str) -> Message:
    return Message("tool", tuple(ToolResult(c, (Text(f"out {c}"),)) for c in cids))


def T(*messages: Message) -> Transcript:
    return Transcript(messages)


VALID = T(
    Message.system("sys"),
    Message.user("hi"),
    ask("a1", "a2"),
    res("a1"),
    res("a2"),
    Message.assistant("done"),
)


# -- nothing to do: same object ----------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_valid_transcript_is_returned_unchanged(provider: str) -> None:
    assert validate(VALID, provider) == []
    for fn in (repair_pairing, sanitize_tool_ids):
        out, report = fn(VALID)
        assert out is VALID and not report.changed
    out, report = fix_turn_order(VALID, provider)
    assert out is VALID and report.to_dict()["changed"] is False
    assert clean(VALID, provider)[0] is VALID


# -- sanitize_tool_ids -------------------------------------------------------------------------


def test_strict_strips_to_alphanumeric_and_results_follow() -> None:
    t = T(Message.user("x"), ask("call|item:123"), res("call|item:123"))
    out, report = sanitize_tool_ids(t)
    assert out[1].tool_calls[0].id == "callitem123"
    assert out[2].tool_results[0].call_id == "callitem123"
    assert report.id_map == (("call|item:123", "callitem123"),)
    assert sanitize_tool_ids(out)[0] is out  # idempotent


def test_strict_collisions_get_a_hash_suffix() -> None:
    t = T(Message.user("x"), ask("call|1", "call:1", "call1"), res("call|1", "call:1", "call1"))
    out, _ = sanitize_tool_ids(t)
    ids = [c.id for c in out[1].tool_calls]
    assert ids[2] == "call1"  # already valid: kept, and reserved before renaming the others
    assert len(set(ids)) == 3 and all(i.isalnum() and len(i) <= 40 for i in ids)
    assert ids[0].startswith("call1") and len(ids[0]) == len("call1") + 8
    assert [r.call_id for r in out[2].tool_results] == ids


def test_strict_caps_length_at_40() -> None:
    long_id = "toolu_" + "x" * 60
    out, _ = sanitize_tool_ids(T(Message.user("x"), ask(long_id), res(long_id)))
    new = out[1].tool_calls[0].id
    assert len(new) == 40 and new.isalnum() and out[2].tool_results[0].call_id == new


def test_strict9_is_exactly_nine_alphanumerics() -> None:
    t = T(Message.user("x"), ask("toolu_01ABC", "abc"), res("toolu_01ABC", "abc"))
    out, _ = sanitize_tool_ids(t, mode="strict9")
    ids = [c.id for c in out[1].tool_calls]
    assert all(len(i) == 9 and i.isalnum() for i in ids) and len(set(ids)) == 2
    assert [r.call_id for r in out[2].tool_results] == ids
    assert sanitize_tool_ids(out, mode="strict9")[0] is out


def test_repeated_id_in_later_turn_is_renamed_and_its_result_follows() -> None:
    t = T(Message.user("x"), ask("dup"), res("dup"), ask("dup"), res("dup"))
    out, _ = sanitize_tool_ids(t)
    first, second = out[1].tool_calls[0].id, out[3].tool_calls[0].id
    assert first == "dup" and second != "dup"
    assert out[2].tool_results[0].call_id == first and out[4].tool_results[0].call_id == second


@pytest.mark.parametrize("provider", PROVIDERS)
def test_repeated_id_in_one_turn_answers_its_calls_in_order(provider: str) -> None:
    """Two parallel calls sharing an id, answered in order: the n-th result with the id goes
    to the n-th call with it, so neither call gets the other's output nor a synthetic one."""
    results = (ToolResult("c1", (Text("of f"),)), ToolResult("c1", (Text("of g"),)))
    t = T(Message.user("go"), Message("assistant", (call("c1", "f"), call("c1", "g"))))
    t = Transcript((*t.messages, Message("tool", results[:1]), Message("tool", results[1:])))
    out, report = clean(t, provider)
    assert validate(out, provider) == []
    assert "synthetic_result" not in report.counts() and "dropped_duplicate" not in report.counts()
    back = load(out.to(provider), format=provider)  # and the payload keeps the pairing
    for m in (out, back):
        names = {c.id: c.name for msg in m for c in msg.tool_calls}
        assert len(names) == 2
        got = [(names[r.call_id], r.content) for msg in m for r in msg.tool_results]
        assert got == [("f", (Text("of f"),)), ("g", (Text("of g"),))]


def test_extra_result_for_a_repeated_id_is_a_duplicate_of_the_last_call() -> None:
    t = T(Message.user("x"), ask("d", "d"), res("d"), res("d"), res("d"))
    out, report = clean(t, "openai")
    ids = [c.id for c in out[1].tool_calls]
    assert [r.call_id for m in out for r in m.tool_results] == ids
    assert report.counts()["dropped_duplicate"] == 1


def test_sanitize_rejects_unknown_mode() -> None:
    with pytest.raises(AdapterError, match="strict9"):
        sanitize_tool_ids(VALID, mode="loose")  # type: ignore[arg-type]


def test_clean_renames_only_ids_the_provider_rejects() -> None:
    t = T(Message.user("x"), ask("toolu_ok", "bad|id"), res("toolu_ok", "bad|id"))
    out, report = clean(t, "anthropic")
    assert [c.id for c in out[1].tool_calls] == ["toolu_ok", "badid"]
    assert len(report.of("renamed_id")) == 1
    assert clean(t, "openai")[0] is t  # OpenAI accepts "bad|id"
    forced, _ = clean(t, "openai", id_mode="strict9")
    assert all(len(c.id) == 9 for c in forced[1].tool_calls)


# -- repair_pairing ----------------------------------------------------------------------------


def test_missing_result_gets_synthetic_error_right_after_its_turn() -> None:
    t = T(Message.user("x"), ask("a", "b"), res("a"), Message.user("next"))
    out, report = repair_pairing(t)
    assert [m.role for m in out] == ["user", "assistant", "tool", "tool", "user"]
    synthetic = out[3].tool_results[0]
    assert synthetic.call_id == "b" and synthetic.is_error and synthetic.name == "bash"
    assert synthetic.content == (Text(SYNTHETIC_RESULT_TEXT),)
    assert report.counts() == {"synthetic_result": 1}


def test_synthetic_goes_before_an_interleaved_user_message() -> None:
    t = T(Message.user("x"), ask("a"), Message.user("interrupt"))
    out, _ = repair_pairing(t)
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"]


def test_late_result_is_moved_before_the_interleaved_user_message() -> None:
    t = T(Message.user("x"), ask("a"), Message.user("hm"), res("a"))
    out, report = repair_pairing(t)
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"]
    assert out[2].tool_results[0].content == (Text("out a"),)
    assert report.counts() == {"moved_result": 1}


def test_duplicate_results_keep_the_first() -> None:
    first = ToolResult("a", (Text("first"),))
    t = T(Message.user("x"), ask("a"), Message("tool", (first,)), res("a"))
    out, report = repair_pairing(t)
    assert [r for m in out for r in m.tool_results] == [first]
    assert report.counts() == {"dropped_duplicate": 1, "dropped_message": 1}


def test_orphan_results_are_dropped() -> None:
    t = T(res("ghost"), Message.user("x"), ask("a"), res("a", "stray"), Message.assistant("ok"))
    out, report = repair_pairing(t)
    assert [r.call_id for m in out for r in m.tool_results] == ["a"]
    assert report.counts() == {"dropped_orphan": 2}


@pytest.mark.parametrize("stop", ["error", "aborted"])
def test_failed_turn_gets_no_synthetic_result_and_its_late_result_is_dropped(stop: str) -> None:
    failed = Message("assistant", (Text("partial"), call("x")), stop_reason=stop)
    t = T(Message.user("go"), failed, res("x"), Message.user("again"))
    assert {p.code for p in validate(t, "openai")} == {"unanswerable_call", "orphan_result"}
    out, report = repair_pairing(t)
    assert [m.role for m in out] == ["user", "assistant", "user"]
    assert out[1].blocks == (Text("partial"),) and out[1].stop_reason == stop
    assert report.counts() == {"dropped_call": 1, "dropped_orphan": 1}
    assert not report.of("synthetic_result")


def test_failed_turn_with_only_calls_is_dropped() -> None:
    t = T(Message.user("go"), ask("x", stop="error"), Message.user("again"))
    out, report = repair_pairing(t)
    assert [m.role for m in out] == ["user", "user"]
    assert report.counts() == {"dropped_call": 1, "dropped_message": 1}


def test_repair_is_deterministic_and_idempotent() -> None:
    t = T(res("o"), Message.user("x"), ask("a", "b"), Message.user("u"), res("b", "a", "a"))
    once, _ = repair_pairing(t)
    assert repair_pairing(t)[0] == once
    assert repair_pairing(once)[0] is once
    assert validate(once, "openai") == []


# -- fix_turn_order ----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_assistant_first_gets_bootstrap_user_turn(provider: str) -> None:
    t = T(Message.system("s"), Message.assistant("hello"), Message.user("hi"))
    assert {p.code for p in validate(t, provider)} == {"first_not_user"}
    out, report = fix_turn_order(t, provider)
    assert [m.role for m in out] == ["system", "user", "assistant", "user"]
    assert out[1].text == BOOTSTRAP_TEXT and report.counts() == {"bootstrap_user": 1}
    assert validate(out, provider) == []


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_an_empty_history_gets_the_bootstrap_user_turn(provider: str) -> None:
    """Only a system prompt (no message yet): Anthropic and Gemini reject a request with no
    message, so hygiene adds the bootstrap user turn there too."""
    for t in (T(Message.system("s")), T()):
        assert {p.code for p in validate(t, provider)} == {"first_not_user"}
        out, report = fix_turn_order(t, provider)
        assert [m.role for m in out] == [*(m.role for m in t), "user"]
        assert out[-1].text == BOOTSTRAP_TEXT and report.counts() == {"bootstrap_user": 1}
        assert validate(out, provider) == []
        assert fix_turn_order(out, provider)[0] is out


@pytest.mark.parametrize("provider", ["openai", "openai-responses"])
def test_openai_needs_no_alternation_or_bootstrap(provider: str) -> None:
    t = T(Message.assistant("hello"), Message.user("a"), Message.user("b"))
    assert validate(t, provider) == []
    assert fix_turn_order(t, provider)[0] is t


def test_openai_chat_takes_a_system_prompt_alone() -> None:
    only = T(Message.system("s"))
    assert validate(only, "openai") == [] and fix_turn_order(only, "openai")[0] is only
    assert only.to("openai") == {"messages": [{"role": "system", "content": "s"}]}


@pytest.mark.parametrize(
    ("provider", "t"),
    [
        ("openai-responses", T(Message.system("s"))),
        ("openai-responses", T(Message.system("s"), Message.system("t"))),
        ("openai-responses", T()),
        ("openai", T()),
    ],
)
def test_openai_request_with_nothing_to_answer_gets_the_bootstrap(
    provider: str, t: Transcript
) -> None:
    """The Responses API rejects an empty ``input`` even with ``instructions``, Chat an empty
    ``messages``: an empty history gets the bootstrap user turn, as for Anthropic/Gemini."""
    assert {p.code for p in validate(t, provider)} == {"first_not_user"}
    out, report = fix_turn_order(t, provider)
    assert [m.role for m in out] == [*(m.role for m in t), "user"]
    assert out[-1].text == BOOTSTRAP_TEXT and report.counts() == {"bootstrap_user": 1}
    assert validate(out, provider) == [] and fix_turn_order(out, provider)[0] is out
    payload = t.to(provider)
    items = payload["input"] if provider == "openai-responses" else payload["messages"]
    assert items[-1]["role"] == "user" and items[-1]["content"] == BOOTSTRAP_TEXT
    assert_sdk_valid(payload, provider)
    if len(t) == 1:
        assert payload == {"instructions": "s", "input": items} and len(items) == 1


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_consecutive_same_role_turns_are_merged(provider: str) -> None:
    t = T(Message.user("a"), Message.user("b"), Message.assistant("c"), Message.assistant("d"))
    assert [p.code for p in validate(t, provider)] == ["consecutive_roles"] * 2
    out, report = fix_turn_order(t, provider)
    assert [m.role for m in out] == ["user", "assistant"]
    assert out[0].blocks == (Text("a"), Text("b")) and out[1].text == "c\nd"
    assert report.counts() == {"merged_turns": 2}


def test_tool_then_user_is_one_provider_turn_not_a_violation() -> None:
    t = T(Message.user("x"), ask("a"), res("a"), Message.user("more"))
    assert validate(t, "anthropic") == []
    turns = t.to("anthropic")["messages"]
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "text"]


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_late_system_message_becomes_user(provider: str) -> None:
    t = T(Message.system("s"), Message.user("a"), Message.assistant("b"), Message.system("late"))
    assert {p.code for p in validate(t, provider)} == {"system_position"}
    out, report = fix_turn_order(t, provider)
    assert out[3].role == "user" and out[3].text == "late" and out[3].meta["was_system"]
    assert report.counts() == {"system_to_user": 1}
    assert validate(t, "openai") == []  # OpenAI takes system messages anywhere


@pytest.mark.parametrize("provider", PROVIDERS)
def test_messages_with_nothing_to_send_are_dropped(provider: str) -> None:
    t = T(Message.user("a"), Message("assistant", ()), Message.assistant("b"))
    assert "empty_message" in {p.code for p in validate(t, provider)}
    out, _ = fix_turn_order(t, provider)
    assert [m.text for m in out] == ["a", "b"]


def test_whitespace_text_and_foreign_thinking_count_as_nothing_for_anthropic() -> None:
    foreign = Message("assistant", (Thinking("hmm"), Text("  ")), meta={"provider_family": "x"})
    t = T(Message.user("a"), foreign, Message.user("b"))
    assert [p.code for p in validate(t, "anthropic")] == ["empty_message"]
    assert validate(t, "openai") == []  # "  " is fine for OpenAI
    out, _ = fix_turn_order(t, "anthropic")
    assert [m.role for m in out] == ["user"] and out[0].text == "a\nb"


def test_merging_keeps_only_thinking_the_provider_accepts() -> None:
    signed = Message(
        "assistant", (Thinking("t", "sig"), Text("a")), meta={"provider_family": "anthropic"}
    )
    other = Message(
        "assistant", (Thinking("u", "gsig"), Text("b")), meta={"provider_family": "gemini"}
    )
    out, _ = fix_turn_order(T(Message.user("q"), signed, other), "anthropic")
    assert out[1].blocks == (Thinking("t", "sig"), Text("a"), Text("b"))
    assert out[1].meta["provider_family"] == "anthropic"


def _thought(text: str) -> Message:
    """An assistant message holding only signed thinking (empty for Anthropic on its own)."""
    return Message("assistant", (Thinking(text, "sig"),), meta={"provider_family": "anthropic"})


@pytest.mark.parametrize(
    ("before", "thoughts", "merged"),
    [
        ([], 1, [2]),  # [thinking] then [tool_use]: the call merged into the thinking's turn
        ([], 2, [2, 3]),
        ([Message.assistant("Sure.")], 1, [2, 3]),  # both merged into "Sure."
        ([Message.assistant("Sure.")], 2, [2, 3, 4]),
    ],
)
def test_carried_thinking_reports_each_merged_message_once_as_a_run_merge_does(
    before: list[Message], thoughts: int, merged: list[int]
) -> None:
    """Thinking alone, carried into the assistant turn after it, is reported as the merge of
    a run of assistant turns: each message merged into the turn before it, at its own index,
    as the render's own merge pass (``_merged``) reports it. After an assistant turn hygiene
    reported the call's index twice and the thinking's not at all."""
    t = T(
        Message.user("list files"),
        *before,
        *(_thought(f"step {k}") for k in range(thoughts)),
        ask("toolu_1"),
        res("toolu_1"),
    )
    out, report = fix_turn_order(t, "anthropic")
    assert [m.role for m in out] == ["user", "assistant", "tool"]
    assert [c.index for c in report.changes] == merged
    assert {c.action for c in report.changes} == {"merged_turns"}
    assert {c.detail for c in report.changes} == {"merged into the assistant turn before it"}
    _, changes = _merged(t, "anthropic", RenderMemo())
    assert report.changes == tuple(changes)


# -- validate / clean --------------------------------------------------------------------------


def test_validate_reports_pairing_problems_with_index_and_call_id() -> None:
    t = T(Message.user("x"), ask("a", "b"), res("a", "a", "z"))
    problems = validate(t, "openai")
    codes = {(p.code, p.index, p.call_id) for p in problems}
    assert codes == {
        ("missing_result", 1, "b"),
        ("duplicate_result", 2, "a"),
        ("orphan_result", 2, "z"),
    }
    assert json.loads(json.dumps([p.to_dict() for p in problems]))[0]["code"]


def test_validate_checks_provider_id_rules() -> None:
    t = T(Message.user("x"), ask("a" * 41), res("a" * 41))
    assert [p.code for p in validate(t, "openai")] == ["bad_tool_id"]
    assert validate(t, "anthropic") == []
    t2 = T(Message.user("x"), ask("a.b"), res("a.b"))
    assert [p.code for p in validate(t2, "gemini")] == ["bad_tool_id"]


def test_validate_rejects_unknown_provider() -> None:
    with pytest.raises(AdapterError, match="expected one of"):
        validate(VALID, "cohere")


def test_clean_report_is_json_and_ordered() -> None:
    t = T(Message.assistant("hi"), ask("x|1"), Message.user("u"))
    out, report = clean(t, "gemini")
    assert validate(out, "gemini") == []
    rules = [c.rule for c in report.changes]
    assert rules == sorted(
        rules, key=["sanitize_tool_ids", "repair_pairing", "fix_turn_order"].index
    )
    assert json.loads(json.dumps(report.to_dict()))["counts"]["bootstrap_user"] == 1
    assert clean(out, "gemini")[0] is out


# -- a final assistant message (a prefill) ending in whitespace: Anthropic answers 400 ---------


def _prefill(*blocks: Text) -> Transcript:
    return Transcript((Message.user("question"), Message("assistant", blocks)))


@pytest.mark.parametrize(
    ("blocks", "kept"),
    [
        ((Text("answer \n"),), ("answer",)),
        ((Text("answer"), Text(" \n\t")), ("answer",)),  # a blank last block is not sent
        ((Text("one "), Text("two  ")), ("one ", "two")),  # only the end of the message
    ],
)
def test_anthropic_hygiene_strips_the_trailing_whitespace_of_a_prefill(
    blocks: tuple[Text, ...], kept: tuple[str, ...]
) -> None:
    t = _prefill(*blocks)
    assert [p.code for p in validate(t, "anthropic")] == ["trailing_whitespace"]
    cleaned, report = clean(t, "anthropic")
    assert [b.text for b in cleaned.messages[-1].blocks] == list(kept)  # type: ignore[union-attr]
    assert [(c.action, c.index) for c in report.changes] == [("stripped_trailing_space", 1)]
    assert validate(cleaned, "anthropic") == []
    assert clean(cleaned, "anthropic")[0] is cleaned  # idempotent
    sent = t.to("anthropic")["messages"][-1]["content"]
    assert [p["text"] for p in sent] == [k for k in kept if k.strip()]
    assert render(t, "anthropic").payload == t.to("anthropic")
    for provider in ("openai", "openai-responses", "gemini"):  # they take it as it is
        assert clean(t, provider)[0] is t


@pytest.mark.parametrize(
    ("blocks", "kept"),
    [
        ((Text("answer\n"), Thinking("unsigned")), ("answer",)),  # Anthropic is not sent it
        ((Text("a "), Thinking("x"), Text("  "), Thinking("y")), ("a",)),
        # signed by Anthropic (the family unknown): sent, but first in the message (thinking
        # first), so the text before it ends what Anthropic reads
        ((Text("answer\n"), Thinking("x", signature="sig")), ("answer",)),
    ],
)
def test_anthropic_hygiene_strips_what_ends_the_prefill_as_sent(
    blocks: tuple[Text | Thinking, ...], kept: tuple[str, ...]
) -> None:
    # thinking Anthropic is not sent left the text before it last in the payload, its
    # whitespace kept (Anthropic answers 400)
    t = _prefill(*blocks)
    sent = [p for p in t.to("anthropic")["messages"][-1]["content"] if p["type"] == "text"]
    assert [p["text"] for p in sent] == list(kept)
    cleaned, _ = clean(t, "anthropic")
    assert validate(cleaned, "anthropic") == [] and clean(cleaned, "anthropic")[0] is cleaned
    assert render(t, "anthropic", memo=RenderMemo()).payload == t.to("anthropic")
    stripped = kept != tuple(b.text for b in blocks if isinstance(b, Text))
    assert [p.code for p in validate(t, "anthropic")] == (
        ["trailing_whitespace"] if stripped else []
    )


def test_anthropic_hygiene_keeps_the_whitespace_of_an_assistant_message_that_is_not_last() -> None:
    t = Transcript((*_prefill(Text("answer \n")).messages, Message.user("thanks")))
    assert clean(t, "anthropic")[0] is t and validate(t, "anthropic") == []
    assert t.to("anthropic")["messages"][1]["content"][0]["text"] == "answer \n"


def test_anthropic_hygiene_strips_the_prefill_hygiene_itself_leaves_last() -> None:
    # The merged final turn ends with the second message's whitespace; an empty one dropped.
    t = Transcript(
        (
            Message.user("question"),
            Message.assistant("first  "),
            Message.assistant("second \n"),
            Message("assistant", (Thinking("unsigned"),)),
        )
    )
    cleaned, report = clean(t, "anthropic")
    assert [b.text for b in cleaned.messages[-1].blocks] == ["first  ", "second"]  # type: ignore[union-attr]
    assert "stripped_trailing_space" in [c.action for c in report.changes]
    assert validate(cleaned, "anthropic") == []


@pytest.mark.anyio
async def test_the_engine_and_transcript_to_send_the_same_prefill() -> None:
    from ctxengine import Budget, ContextEngine

    engine = ContextEngine("gpt-4o", Budget(total=2000))
    async with engine.session("prefill") as s:
        await s.user_message("question")
        await s.assistant_message("answer \n")
        out = await s.render("anthropic")
    assert out.payload["messages"][-1]["content"][-1]["text"] == "answer"
    assert out.payload["messages"] == s.transcript().to("anthropic")["messages"]


def test_a_warm_render_strips_only_the_prefill_that_is_last() -> None:
    """The warm path reuses the previous render's hygiene: it must not keep a stripped
    message once it is no longer last, nor send an unstripped one that is."""
    memo = RenderMemo()
    messages = [
        Message.system("sys"),
        Message.user("q1"),
        Message.assistant("a1"),
        Message.user("q2"),
    ]
    prefill = Message.assistant("answer \n")
    steps = [messages, [*messages, prefill], [*messages, prefill, Message.user("q3")]]
    sent = []
    for ms in steps:
        t = Transcript(tuple(ms))
        warm = render(t, "anthropic", memo=memo)
        memo.end_render()
        cold = render(t, "anthropic")
        assert json.dumps(warm.payload, sort_keys=True) == json.dumps(cold.payload, sort_keys=True)
        assert warm.report == cold.report
        sent.append(warm.payload["messages"][-1 if ms[-1] is prefill else -2]["content"])
    assert sent[1][-1]["text"] == "answer"  # last: stripped
    assert sent[2][-1]["text"] == "answer \n"  # no longer last: as it was
    assert memo.warm.reused >= 1  # the third render reused the first's work


@pytest.mark.anyio
async def test_a_session_render_strips_the_prefill_before_unsent_thinking() -> None:
    from ctxengine import Budget, ContextEngine

    engine = ContextEngine("claude-sonnet-4-5", Budget(total=10_000))
    async with engine.session("prefill") as s:
        s.extend(_prefill(Text("answer\n"), Thinking("unsigned")).messages)
        for _ in range(2):  # the full path, then a render that may reuse it
            last = (await s.render("anthropic")).payload["messages"][-1]
            assert last["content"] == [{"type": "text", "text": "answer"}]
