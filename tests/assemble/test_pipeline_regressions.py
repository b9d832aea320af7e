"""Regression tests for engine-path bugs found in review (state across renders and sessions)."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest

from ctxengine import Budget, BudgetError, ContextEngine, ContextGrain
from ctxengine.assemble.guard import SPLIT_CHARS
from ctxengine.builtins import ToolResultCompressor
from ctxengine.compaction import CompactionConfig
from ctxengine.transcript import Message, Text, Thinking, ToolCall

pytestmark = pytest.mark.anyio


def system_text(payload: dict) -> str:
    first = payload["messages"][0]
    return first["content"] if first["role"] == "system" else ""


def history_head(payload: dict) -> str:
    """The first history message: where the compaction summary goes (user role)."""
    head = next(m for m in payload["messages"] if m["role"] != "system")
    return head["content"] if head["role"] == "user" else ""


async def _steps(s: object, tag: str, n: int, *, lines: int = 40) -> None:
    for i in range(n):
        await s.user_message(  # type: ignore[attr-defined]
            f"request {tag}-{i}: look at module_{tag}_{i}.py and explain it carefully in depth"
        )
        call = ToolCall(f"c{tag}_{i}", "read_file", {"path": f"m{tag}_{i}.py"})
        await s.assistant_message("", [call])  # type: ignore[attr-defined]
        await s.tool_result(  # type: ignore[attr-defined]
            f"c{tag}_{i}", f"RESULT-{tag}-{i} " + "content line\n" * lines
        )
        await s.assistant_message(f"done {tag}-{i}")  # type: ignore[attr-defined]


async def test_a_later_compaction_renders_the_new_summary_not_the_stored_one() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3000))
    async with engine.session("sum") as s:
        await _steps(s, "a", 30)
        rounds = 0
        for r in range(16):
            out = await s.render()
            if any(c["ok"] for c in out.report.compactions):
                rounds += 1
                assert s.state.summary is not None
                summary = next(g for g in out.tree if g.node_id == "mem.summary")
                assert summary is s.state.summary
                if out.report.get("mem.summary").decision == "kept":
                    assert s.state.summary.text == history_head(out.payload)
                    assert s.state.summary.text not in system_text(out.payload)
            await _steps(s, str(r), 15)
    assert rounds >= 2  # the second compaction found a stored summary in the context


async def test_a_grain_whose_content_changes_in_place_is_recounted() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=2000))
    notes = ContextGrain("rag.notes", content=["start"], lifespan="session")
    async with engine.session("mut") as s:
        s.add(notes)
        await s.user_message("hi")
        first = await s.render()
        assert first.report.get("rag.notes").decision == "kept"
        notes.content.extend(f"note {i}: " + "lorem ipsum dolor sit amet " * 6 for i in range(80))
        out = await s.render()
    assert out.tokens <= 2000
    assert out.report.get("rag.notes").decision == "folded"


async def test_an_override_grain_does_not_collect_a_shadow_entry_per_render() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=50_000), plugins=[ToolResultCompressor()])
    async with engine.session("ov") as s:
        await s.user_message("list rows")
        await s.assistant_message("", [ToolCall("call_9", "query", {"sql": "select"})])
        await s.tool_result("call_9", "".join(f"row {i}\n" for i in range(3000)), name="query")
        for _ in range(5):
            out = await s.render()
        grain = s.state.stored["act.tool_result.call_9"].grain
    assert out.report.get("act.tool_result.call_9").origin == grain.origin
    rendered = s.state.overrides["act.tool_result.call_9"]
    assert rendered.meta["shadowed"] == [
        {"node_id": "act.tool_result.call_9", "origin": "transcript", "priority": 100}
    ]
    assert "shadowed" not in grain.meta  # each render writes to its own copy


async def test_a_compacted_tool_result_does_not_come_back_as_a_context_grain() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[ToolResultCompressor()])
    compacted: set[str] = set()
    async with engine.session("cmp") as s:
        for r in range(8):
            await _steps(s, str(r), 12, lines=400)
            out = await s.render()
            compacted |= {
                g.node_id
                for g in out.report
                if g.stage == "compaction" and g.node_id.startswith("act.")
            }
            back = [g.node_id for g in out.tree if g.node_id in compacted]
            assert back == [], f"render {r}: compacted results back in the tree: {back[:3]}"
            seen = [
                (g.node_id, g.decision)
                for g in out.report
                if g.node_id in compacted and g.decision in {"kept", "folded"}
            ]
            assert seen == [], f"render {r}: compacted results still planned: {seen[:3]}"
    assert compacted


class _SlowSetup:
    name, version, priority, enabled = "slow_setup", "1.0.0", 10, True

    def __init__(self) -> None:
        self.ready = False
        self.setups = 0

    async def setup(self, engine: object) -> None:
        self.setups += 1
        await anyio.sleep(0.05)
        self.ready = True

    async def collect(self, scene: object) -> list[ContextGrain]:
        if not self.ready:
            raise RuntimeError("collect before setup finished")
        return [ContextGrain("rag.ready", content="READY")]


async def test_a_plugin_registered_after_the_first_session_is_set_up() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("one") as s:
        await s.user_message("hi")
        await s.render()
    late = _SlowSetup()
    engine.register(late)
    async with engine.session("two") as s:
        await s.user_message("hi")
        out = await s.render()
    assert late.setups == 1
    assert out.report.faults == []
    assert "READY" in system_text(out.payload)


async def test_concurrent_sessions_wait_for_plugin_setup() -> None:
    plugin = _SlowSetup()
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[plugin])
    texts: dict[str, str] = {}
    faults: dict[str, list] = {}

    async def run(session_id: str) -> None:
        async with engine.session(session_id) as s:
            await s.user_message("hi")
            out = await s.render()
        texts[session_id] = system_text(out.payload)
        faults[session_id] = out.report.faults

    async with anyio.create_task_group() as tg:
        for sid in ("a", "b", "c"):
            tg.start_soon(run, sid)
    assert plugin.setups == 1
    assert all("READY" in t for t in texts.values()), faults


async def test_a_split_grain_changed_in_place_is_split_again() -> None:
    engine = ContextEngine("gpt-4.1", Budget(total=200_000))
    pages = [f"page {i}: " + "alpha beta gamma delta " * 40 for i in range(100)]
    big = ContextGrain("rag.manual", content=pages, lifespan="session")
    async with engine.session("split") as s:
        s.add(big)
        await s.user_message("hi")
        first = await s.render()
        assert "page 0: alpha" in system_text(first.payload)
        pages[0] = "page 0: CHANGED " + "omega " * 100
        out = await s.render()
    text = system_text(out.payload)
    assert "page 0: CHANGED" in text and "page 0: alpha" not in text


async def test_repeated_compactions_keep_a_summary_the_model_can_read() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=3000))
    async with engine.session("grow") as s:
        await _steps(s, "a", 30)
        compactions = 0
        for r in range(16):
            out = await s.render()
            compactions += sum(c["ok"] for c in out.report.compactions)
            if s.state.summary is not None:
                assert out.report.get("mem.summary").decision == "kept", f"render {r}"
                assert s.state.summary.text == history_head(out.payload)
            await _steps(s, str(r), 15)
    assert compactions >= 3  # fewer than one a render: each goes down to the low-water mark
    assert out.tokens <= 3000


async def test_an_invalid_grain_is_reported_once_when_over_budget_fires() -> None:
    fired: list[object] = []

    class Sloppy:
        name, version, priority, enabled = "sloppy", "1.0.0", 10, True

        async def collect(self, scene: object) -> list[ContextGrain]:
            return [ContextGrain("rag.bad", content="x", window="nowhere")]

        def on_over_budget(self, event: object) -> None:
            fired.append(event)

    engine = ContextEngine("gpt-4o", Budget(total=2000), plugins=[Sloppy()])
    async with engine.session("once") as s:
        await _steps(s, "x", 20)
        out = await s.render()
    assert len(fired) == 1  # over budget: the ladder (or the high-water compaction) ran
    faults = [(f["plugin"], f["kind"]) for f in out.report.faults]
    assert faults == [("sloppy", "invalid")]


async def test_a_shadowed_grain_with_a_bad_window_does_not_break_the_turn() -> None:
    class Sloppy:
        name, version, priority, enabled = "sloppy", "1.0.0", 10, True

        async def collect(self, scene: object) -> list[ContextGrain]:
            return [
                ContextGrain("rag.doc", content="GOOD", priority=10),
                ContextGrain("rag.doc", content="lost", priority=90, window="nowhere"),
                ContextGrain("hist.0", content="over", priority=200, window="nowhere"),
            ]

    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[Sloppy()])
    async with engine.session("bad") as s:
        await s.user_message("hi")
        out = await s.render()
    assert "GOOD" in system_text(out.payload)
    assert [g.decision for g in out.report if g.node_id == "rag.doc"] == ["kept", "shadowed"]
    # hist.* is the engine's: the plugin's grain is refused (a fault and a dropped decision).
    assert {g.decision for g in out.report if g.node_id == "hist.0"} == {"kept", "dropped"}
    assert [(f["plugin"], f["kind"], f["node_id"]) for f in out.report.faults] == [
        ("sloppy", "denied", "hist.0")
    ]


# -- the budget contract: many small grains, backfill (issue 9, defects 2 and 5) -------------


class _ManyGrains:
    """Returns ``n`` small grains; its over-budget handler adds ``extra`` more to the tree."""

    name, version, priority, enabled = "many", "1.0.0", 10, True

    def __init__(self, n: int, extra: int = 0) -> None:
        self.n, self.extra = n, extra

    async def collect(self, scene: object) -> list[ContextGrain]:
        return [ContextGrain(f"rag.d.{i}", content=f"doc {i}") for i in range(self.n)]

    def on_over_budget(self, event: object) -> None:
        tree = event.tree  # type: ignore[attr-defined]
        tree += [ContextGrain(f"rag.x.{i}", content=f"extra {i}") for i in range(self.extra)]


@pytest.mark.parametrize(("n", "extra"), [(2_000, 0), (2_000, 50_000)])
async def test_many_small_grains_fit_and_every_drop_is_reported(n: int, extra: int) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=1_500), plugins=[_ManyGrains(n, extra)])
    async with engine.session("many") as s:
        await s.user_message("hi")
        out = await s.render()
    assert out.tokens <= 1_500
    assert out.report.fits
    decisions = {g.node_id: g for g in out.report if g.node_id.startswith("rag.")}
    assert len(decisions) == n + extra  # no silent loss: every grain has a decision
    dropped = [g for g in decisions.values() if g.decision == "dropped"]
    assert len(dropped) > n // 2
    assert all(g.stage == "fold" and g.reason.startswith("dropped: ") for g in dropped)
    kept = [g for g in decisions.values() if g.decision == "kept"]
    assert len(kept) > 100  # the room is used, not left empty
    text = system_text(out.payload)
    assert all(g.node_id not in text for g in dropped)
    # one priority for all: the earliest emitted stay, the latest go first
    assert decisions["rag.d.0"].decision == "kept"
    assert out.transcript.messages[-1].text == "hi"


async def test_cuts_stop_at_the_target_and_backfill_the_room() -> None:
    """Renders the ladder cut fill ≥ 95 % of the target; compaction waits until the payload
    has used ≥ 95 % of it (the high-water mark), then leaves room to grow (the low-water mark)."""
    engine = ContextEngine("gpt-4o", Budget(total=16_000))
    async with engine.session("fill") as s:
        await _steps(s, "f", 60, lines=60)
        uses: list[float] = []
        peaks: list[float] = []  # the render before each compaction
        previous = 0.0
        compactions = 0
        for i in range(24):
            out = await s.render()
            assert out.tokens <= 16_000
            share = out.tokens / out.report.target
            if out.report.compactions:
                compactions += 1
                if i:
                    peaks.append(previous)
                assert share >= 0.5  # the low-water mark, not an empty window
            elif any(g.status != "kept" for g in out.report):
                uses.append(share)
            previous = share
            await _steps(s, f"g{i}", 2, lines=60)
    assert compactions >= 2 and peaks
    assert min(peaks) >= 0.95, peaks
    assert not uses or min(uses) >= 0.95, uses


LATEST = (
    "LATEST 👩‍💻 alpha alpha مرحبا بالعالم alpha alpha alpha "
    + "x" * 40
    + " alpha 🙂🚀 alpha alpha alpha"
)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_summary_never_makes_the_protected_content_overflow(provider: str) -> None:
    """Found by the contract property test: compacting at 94 tokens wrote a 39-token protected
    summary, and the rules, the system message and the request (44 tokens, which fit) with it
    raised ``BudgetError``. The summary is shortened to the room they leave it."""
    engine = ContextEngine("gpt-4.1", Budget(total=94))
    calls = tuple(ToolCall("call_1", "bash", {"cmd": c}) for c in ("alpha", "alpha", "alpha alpha"))
    async with engine.session("tiny") as s:
        s.extend(
            [
                Message("assistant", (Thinking("alpha", signature="sig"),)),
                Message("assistant", (Thinking("alpha", signature="sig"), *calls)),
                Message("assistant", (Thinking("alpha", signature="sig"), Text("alpha"), *calls)),
                Message.system("alpha"),
                Message("assistant", (Thinking("alpha", signature="sig"),)),
            ]
        )
        s.add(
            ContextGrain(
                "sys.rules", content="alpha alpha alpha beta", protected=True, lifespan="session"
            )
        )
        await s.user_message(LATEST)
        out = await s.render(provider)
    assert out.tokens <= 94
    assert out.transcript.messages[-1].text.endswith(LATEST)
    assert "alpha alpha alpha beta" in str(out.payload)
    fitted = [d for d in out.report if d.node_id == "mem.summary" and d.stage == "compaction"]
    assert fitted and fitted[0].tokens_after < fitted[0].tokens_before, fitted


async def _summarized(budget: int) -> tuple[Any, Any]:
    """A session at ``budget`` whose earlier turns are in a compaction summary of ~65 tokens."""
    engine = ContextEngine("gpt-4.1", Budget(total=budget))
    cm = engine.session("fit")
    s = await cm.__aenter__()
    for i in range(8):
        await s.user_message(f"request {i}: read file_{i}.py and explain what it does in detail")
        await s.assistant_message(f"file_{i}.py defines a parser for format {i}; " * 6)
    first = await s.render()
    assert [d.decision for d in first.report if d.node_id == "mem.summary"] == ["kept"]
    return cm, s


def _summary_decisions(out: Any) -> list[Any]:
    return [d for d in out.report if d.node_id == "mem.summary"]


async def test_a_summary_is_shortened_to_the_room_left_then_sent_whole_again() -> None:
    cm, s = await _summarized(300)
    whole = history_head((await s.render()).payload)
    await s.user_message("LATEST " + "word " * 250)  # leaves the summary ~30 tokens
    out = await s.render()
    await s.user_message("thanks")
    later = await s.render()
    await cm.__aexit__(None, None, None)
    assert out.tokens <= 300
    # one decision for the summary, the one that says what was sent
    (fitted,) = _summary_decisions(out)
    assert fitted.decision == "folded" and "shortened" in fitted.reason
    assert fitted.tokens_after < fitted.tokens_before
    columns = out.report.columns()  # the snapshot's form says the same
    assert columns["node_id"].count("mem.summary") == 1
    assert columns["decision"][columns["node_id"].index("mem.summary")] == "folded"
    head = history_head(out.payload)
    assert head and whole.startswith(head) and len(head) < len(whole)
    # The session kept the whole summary: a render with room sends it uncut, here a newer
    # one that also summarizes the long request (before, that compaction failed over its cap
    # and the request was dropped unsummarized)
    again = history_head(later.payload)
    assert [d.decision for d in _summary_decisions(later)] == ["kept"]
    assert again.startswith("[Summary of the earlier conversation: 17 messages]")
    assert "(latest) LATEST word" in again and "request 7" in again and again != head


@pytest.mark.parametrize("words", [275, 283])
async def test_a_summary_with_no_room_left_is_cut_with_a_decision(words: int) -> None:
    """At 283 words the request alone needs 289 of the 292 tokens framing leaves: it fits
    (the summary's own framing is not charged once the summary is cut)."""
    cm, s = await _summarized(300)
    await s.user_message("LATEST " + "word " * words)
    out = await s.render()
    await cm.__aexit__(None, None, None)
    assert out.tokens <= 300
    (cut,) = _summary_decisions(out)
    assert cut.decision == "dropped" and cut.tokens_after == 0 and "was cut" in cut.reason
    assert "Summary of the earlier conversation" not in str(out.payload)
    assert out.transcript.messages[-1].text.startswith("LATEST word")


async def test_a_summary_larger_than_the_split_size_is_sent_whole_by_every_later_render() -> None:
    """Found by the sweep of the shared transcripts (aider, 32k budget): a compaction summary
    of 80,000 characters (one 116,000-character answer summarized with its excerpts) was split
    by the guard into ``mem.summary.<i>`` chunks on the next render, which compose never sends:
    the payload lost it (2,685 tokens of a 25,590 target). The summary is never split."""
    answer = "\n".join(  # lines in a row differ by a word: no run of lines alike
        f"Step {n}: checked the {('key-up', 'key-down')[n % 2]} handler of hotkey {n}; it is fine."
        for n in range(2500)
    )
    engine = ContextEngine("gpt-4.1", Budget(total=40_000))
    async with engine.session("big") as s:
        await s.user_message("Find why the hotkey sticks.")
        await s.assistant_message(answer)
        await s.user_message("So what is the cause?")
        first = await s.render("openai")
        assert any(c["ok"] for c in first.report.compactions)
        summary = s.state.summary
        assert summary is not None and len(summary.text) > SPLIT_CHARS
        for provider in ("openai", "openai-responses", "anthropic", "gemini"):
            out = await s.render(provider)
            assert out.tokens <= 40_000
            assert out.tokens >= 0.9 * out.report.target, (provider, out.tokens)
            assert "Summary of the earlier conversation" in str(out.payload)
            assert not any(d.stage == "guard" for d in out.report if d.node_id == "mem.summary")


async def _sweep_render(
    name: str, session: int, budget: int, at: int, high_water: float | None = None
) -> Any:
    """The OpenAI render before message ``at`` of a shared transcript, replayed as the
    contract sweep does (every provider rendered before each assistant turn, a render refused
    for protected content alone passed over); with
    ``high_water``, the engine's ``render_high_water``."""
    from ctxengine.replay import _feed
    from ctxengine.transcript import load_all
    from transcript.helpers import all_files

    path = next(p for p in all_files() if p.name == name)
    messages = list(load_all(path)[session])
    points = {
        i
        for i, m in enumerate(messages)
        if m.role == "assistant" and i > 0 and messages[i - 1].role != "assistant"
    }
    compaction = (
        CompactionConfig() if high_water is None else CompactionConfig(render_high_water=high_water)
    )
    engine = ContextEngine("gpt-4.1", Budget(total=budget), compaction=compaction)
    async with engine.session("sweep") as s:
        for i in range(at):
            if i in points and s.messages:
                for provider in ("openai", "openai-responses", "anthropic", "gemini"):
                    try:
                        await s.render(provider)
                    except BudgetError as exc:  # only when protected content alone is over
                        assert "protected items alone need" in str(exc), exc
            await _feed(s, messages[i])
        return await s.render("openai")


async def test_a_fill_short_of_distinct_lines_still_takes_the_room() -> None:
    """SWE-agent pydicom-1458 at 8,000 tokens, the render before message 11: the landing
    fills the room its summarized turns leave with excerpts, and the summarized messages
    hold too few distinct lines: written once each, they left the render at 0.868 of its
    target. The fill then writes every copy and the render uses its room. (Without a
    high-water mark above the target, as when it was found: with one, this render is held.)"""
    out = await _sweep_render("pydicom__pydicom-1458.traj", 0, 8_000, 11, high_water=1.0)
    assert out.report.compactions and out.report.compactions[-1]["ok"]
    assert out.tokens <= 8_000
    assert out.tokens >= 0.9 * out.report.target


async def test_a_small_summarized_turn_comes_back_when_the_fill_leaves_room() -> None:
    """aider's second session at 300 tokens, the render before message 14: after the landing
    kept two small turns (keeping 96 tokens free at a tiny budget) and filled, the render sat
    at 0.874 of its target with an 18-token summarized turn fitting in what was left. That
    turn now comes back verbatim."""
    out = await _sweep_render("mozgoslav.aider.chat.history.md", 1, 300, 14)
    assert out.report.compactions and out.report.compactions[-1]["ok"]
    assert out.tokens <= 300
    assert out.tokens >= 0.9 * out.report.target


async def test_a_render_the_landing_left_between_its_mark_and_target_is_not_compacted_again() -> (
    None
):
    """The shared Claude Code session at 8,000 tokens, the render before message 426: the
    ladder's compaction landed at 0.985 of the target, measured as the ladder leaves the
    protected tail (a 2,480-token tool result there is trimmed whatever is summarized), and
    kept a turn verbatim up to the target; the plan, uncut, was still past the high-water
    mark, so the render compacted again for that one turn and landed at 0.931. What the
    ladder cuts in the tail anyway leaves the rest within the target: no second compaction."""
    out = await _sweep_render("ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl", 0, 8_000, 426)
    assert [c["ok"] for c in out.report.compactions] == [True]
    assert out.tokens <= 8_000
    assert out.tokens >= 0.95 * out.report.target


async def test_a_small_turn_comes_back_past_a_tail_turn_the_ladder_could_not_keep() -> None:
    """A Claude Code subagent at 300 tokens, the render before message 29: the compaction
    summarized a 10-token turn right before the kept history with a 759-token turn of the
    protected tail, newer than the kept history's start; the fill could not write one line
    in the 24 tokens left, and the small turn, which the ladder had sent to compaction too,
    was not given back: 0.917 of the target. The tail turn after the kept history's start
    no longer stops the turns before it from coming back."""
    out = await _sweep_render("subagent.jsonl", 0, 300, 29)
    assert out.report.compactions and out.report.compactions[-1]["ok"]
    assert out.tokens <= 300
    assert out.tokens >= 0.95 * out.report.target


def _many_requests(n_requests: int) -> list[Message]:
    """A session of ``n_requests`` asks, each read a file, got its result and an answer."""
    messages: list[Message] = []
    for i in range(n_requests):
        messages.append(Message.user(f"request {i}: check module_{i}.py for the bug"))
        call = ToolCall(f"c{i}", "read", {"path": f"module_{i}.py"})
        messages.append(Message.assistant(f"looking at module_{i}", [call]))
        messages.append(Message.tool(f"c{i}", f"def f_{i}():\n    return {i}\n" * 5))
        messages.append(Message.assistant(f"module_{i} is fine"))
    return messages


async def test_thousands_of_requests_leave_the_newest_turns_verbatim() -> None:
    """2,500 requests (10,000 messages) into 32,000 tokens, one cold render. The summary kept
    every request it could as an excerpt, taking the room up to the target: it grew to 25,509
    tokens, a second compaction summarized the protected tail too, and the payload was that
    summary and the question alone. Earlier requests now take at most half the target and the
    newest 200 are listed (the rest counted): the newest turns stay verbatim, and the summary
    keeps its goal and files."""
    engine = ContextEngine("gpt-4o", Budget(total=32_000))
    async with engine.session("many") as s:
        messages = _many_requests(2_500)
        s.extend(messages)
        await s.user_message("What is the status of the task?")
        out = await s.render()
    assert out.tokens <= out.report.target
    sent = out.payload["messages"]
    summary = sent[0]["content"]
    assert summary.startswith("[Summary of the earlier conversation")
    summary_tokens = out.report.compactions[-1]["summary_tokens"]
    assert summary_tokens <= out.report.target // 2
    texts = [m.get("content") for m in sent[1:]]
    for m in [m for m in messages if m.role == "assistant"][-3:]:  # the protected tail
        assert m.text in texts
    assert len(sent) > 100
    assert "## Goal\nrequest 0: check module_0.py" in summary
    newest = re.search(r"\(latest\) request (\d+):", summary)
    assert newest is not None  # the newest summarized request, and the file it had read
    files = summary.split("## Files", 1)[1].split("\n## ", 1)[0]
    assert f"module_{newest.group(1)}.py" in files
    assert "earlier requests omitted)" in summary


def test_a_summary_lists_the_newest_requests_and_files_read() -> None:
    """A summary's parts list the newest :data:`MAX_REQUESTS` earlier requests and
    :data:`MAX_READ` files read; the others are counted, not listed."""
    from ctxengine.compaction.facts import KeyFacts
    from ctxengine.compaction.sections import MAX_READ, MAX_REQUESTS, build_parts

    n = MAX_REQUESTS + 50
    facts = KeyFacts(
        requests=[f"ask {i}" for i in range(n)],
        files_read=[f"src/f{i}.py" for i in range(MAX_READ + 30)],
    )
    parts = build_parts(facts, "", 4 * n)
    assert parts.latest == f"ask {n - 1}"
    assert parts.requests == [f"ask {i}" for i in range(49, n - 1)]
    assert parts.requests_more == 49
    assert parts.read == [f"src/f{i}.py" for i in range(30, MAX_READ + 30)]
    assert parts.read_more == 30
    text = parts.render()
    assert "(49 earlier requests omitted)" in text and "30 more" in text
