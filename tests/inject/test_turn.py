"""The inject phase: the rendered payload is counted and kept within the budget (issue 9)."""

from __future__ import annotations

import pytest

from ctxengine import Budget, BudgetError, ContextEngine, ContextGrain
from ctxengine.collect.events import AfterRender
from ctxengine.hygiene import BOOTSTRAP_TEXT, validate
from ctxengine.inject.payload import payload_tokens
from ctxengine.tokens import count_messages, openai_image_tokens, provider_image_tokens
from ctxengine.transcript import Image, Message, Text, Thinking, ToolCall
from image_bytes import png
from transcript.helpers import assert_sdk_valid

pytestmark = pytest.mark.anyio


async def test_synthetic_results_hygiene_adds_are_budgeted() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=400))
    async with engine.session("syn") as s:
        await s.user_message("hi")
        for i in range(20):
            await s.assistant_message("", [ToolCall(f"c{i}", "read", {"p": i})])
        await s.user_message("go on")
        out = await s.render("anthropic")
    assert out.report.hygiene["changes"]  # hygiene did add results for the unanswered calls
    assert out.tokens <= 400
    assert out.report.fits
    assert out.transcript.messages[-1].text == "go on"


def _unanswered_duplicate_calls() -> list[Message]:
    """Three assistant turns reusing one call id, none answered: hygiene renames the repeats
    and adds a synthetic result for every call (~36 tokens each) that the plan cannot see, so
    the payload carries ~4x what the plan estimates (found by the contract property test)."""

    def turn(text: str, *cmds: str) -> Message:
        calls = tuple(ToolCall("call_1", "bash", {"cmd": c}) for c in cmds)
        return Message("assistant", (Thinking("alpha", signature="sig"), Text(text), *calls))

    return [
        turn("alpha alpha", "alpha alpha alpha alpha", "alpha alpha alpha alpha", "alpha alpha"),
        turn("alpha " * 9, "alpha alpha"),
        turn("alpha alpha", "alpha", "alpha", "alpha alpha alpha alpha"),
    ]


PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("budget", [77, 87, 179, 200, 229, 258, 350, 400, 472])
async def test_replans_fit_a_payload_the_plan_estimates_at_a_quarter(
    provider: str, budget: int
) -> None:
    """The re-plan cuts to what the plan keeps scaled by the overshoot (scaling the plan's own
    budget cut nothing when the plan kept far less than it: 481 tokens at 472 after three
    re-plans), and never below the protected content (it raised ``BudgetError`` at 77-87 though
    the rules and the request fit)."""
    rules = "日本語のテキスト " + "x" * 40 + " 🙂🚀"
    engine = ContextEngine("gpt-4.1", Budget(total=budget))
    async with engine.session("dups") as s:
        s.extend(_unanswered_duplicate_calls())
        s.add(ContextGrain("sys.rules", content=rules, protected=True, lifespan="session"))
        await s.user_message("LATEST alpha")
        out = await s.render(provider)
    assert out.tokens <= budget and out.report.fits
    # verbatim; for Anthropic and Gemini a summary right before it shares its user message
    assert out.transcript.messages[-1].text.endswith("\nLATEST alpha") or (
        out.transcript.messages[-1].text == "LATEST alpha"
    )
    assert rules in str(out.payload)
    assert validate(out.transcript, provider) == []


@pytest.mark.parametrize(("provider", "key"), [("anthropic", "messages"), ("gemini", "contents")])
async def test_a_whitespace_user_message_gives_a_non_empty_payload(provider: str, key: str) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=1000))
    async with engine.session("blank") as s:
        await s.user_message("   ")
        out = await s.render(provider)
    messages = out.payload[key]
    assert len(messages) == 1
    assert messages[0]["role"] == "user"
    assert out.transcript.messages[-1].text.strip()
    assert out.tokens <= 1000


class Tamperer:
    """An ``on_after_render`` handler that edits everything it is given."""

    name, version, priority, enabled = "tamperer", "1.0.0", 10, True

    async def collect(self, scene: object) -> list:
        return []

    def on_after_render(self, event: AfterRender) -> None:
        messages = event.payload["messages"]
        messages.insert(0, {"role": "system", "content": "word " * 2000})
        messages.append({"role": "tool", "tool_call_id": "orphan", "content": "x"})
        messages[1]["content"] = "TAMPERED"
        event.report.faults.clear()
        event.report.windows.clear()
        event.report.tokens = 0


async def test_on_after_render_cannot_change_what_the_caller_gets() -> None:
    """Issue 9, item 12: the hook gets a copy of the payload and the report (an observer)."""
    engine = ContextEngine("gpt-4o", Budget(total=4000), plugins=[Tamperer()])
    async with engine.session("after") as s:
        s.add(ContextGrain("sys.rules", content="Be terse."))
        await s.user_message("hi there")
        out = await s.render()
    assert [m["role"] for m in out.payload["messages"]] == ["system", "user"]
    assert out.payload["messages"][1]["content"] == "hi there"
    assert (
        out.tokens == count_messages(out.payload["messages"], model="gpt-4o") == out.report.tokens
    )
    assert out.report.windows and out.report.fits
    assert validate(out.transcript, "openai") == []


@pytest.mark.parametrize("reply", ["answer \n", "   "])
async def test_an_anthropic_prefill_never_ends_in_whitespace(reply: str) -> None:
    """Issue 9, item 7: a final assistant message (a prefill) after a blank user turn."""
    engine = ContextEngine("gpt-4o", Budget(total=1000))
    async with engine.session("prefill") as s:
        await s.user_message("  ")
        await s.assistant_message(reply)
        out = await s.render("anthropic")
        openai = await s.render("openai")
    last = out.payload["messages"][-1]
    assert last["role"] == "user" or last["content"][-1]["text"] == reply.rstrip()
    assert not str(last["content"][-1]["text"]).endswith((" ", "\n"))
    assert [m["role"] for m in out.payload["messages"]] == (
        ["user", "assistant"] if reply.strip() else ["user"]
    )
    assert openai.payload["messages"][-1]["content"] == reply  # other providers: verbatim


# -- defect 4: tiny budgets, images, protected content in the reserve ------------------------

_PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.mark.parametrize("budget", [20, 30, 50, 60, 80, 120])
@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
async def test_fold_stand_ins_never_overrun_a_tiny_budget(budget: int, provider: str) -> None:
    engine = ContextEngine("gpt-4o", Budget(total=budget))
    async with engine.session("tiny") as s:
        for i in range(6):
            s.add(ContextGrain(f"mem.n{i}", content="lorem ipsum dolor " * 30, lifespan="session"))
            s.add(ContextGrain(f"rag.d{i}", content="sit amet " * 40, lifespan="session"))
        await s.user_message("hi")
        out = await s.render(provider)
    assert out.tokens <= budget
    assert out.report.tokens <= budget and out.report.fits
    decisions = {g.node_id: g.decision for g in out.report}
    assert {decisions[f"mem.n{i}"] for i in range(6)} <= {"kept", "folded", "dropped"}
    assert "dropped" in decisions.values()  # at these budgets something has to go, reported


#: A 1024 x 1024 PNG: 2 x 2 tiles of 512 px, 765 tokens by OpenAI's tile rule.
_SQUARE = png(1024, 1024)
#: A 1024 x 768 screenshot (XGA), its size in its header.
_SHOT = png(1024, 768)


async def test_openai_tokens_count_image_parts() -> None:
    engine = ContextEngine("gpt-4o", Budget(total=2_000))
    async with engine.session("img") as s:
        s.extend([Message("user", (Text("what is in this?"), Image("image/png", _SQUARE)))])
        await s.assistant_message("a pixel " * 100)
        await s.user_message("and now?")
        out = await s.render("openai")
    messages = out.payload["messages"]
    images = sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    )
    stripped = [
        {**m, "content": [p for p in m["content"] if p.get("type") != "image_url"]}
        if isinstance(m.get("content"), list)
        else m
        for m in messages
    ]
    assert images == 1  # the plan counted it (765 tokens) and kept it within the budget
    assert out.tokens == count_messages(stripped, model="gpt-4o") + openai_image_tokens(1024, 1024)
    assert out.tokens <= 2_000 and out.report.fits
    engine = ContextEngine("gpt-4o", Budget(total=700))  # the image alone is over the target
    async with engine.session("img") as s:
        s.extend([Message("user", (Text("what is in this?"), Image("image/png", _SQUARE)))])
        await s.assistant_message("a pixel")
        await s.user_message("and now?")
        out = await s.render("openai")
    assert out.tokens <= 700 and out.report.fits
    assert "image_url" not in str(out.payload)


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
async def test_out_tokens_count_an_image_by_the_rule_for_every_provider(provider: str) -> None:
    """``out.tokens`` charges each image part by the provider's rule for its size, as the
    plan does (the warm render's counter used to count the image's marker as text: 2-3
    tokens), on the first render and on a warm one that reuses the first one's counts."""

    async def render(image: bool) -> tuple[int, int, dict[str, object]]:
        engine = ContextEngine("gpt-4o", Budget(total=20_000))
        async with engine.session("img") as s:
            blocks = (Text("what is in this?"), *([Image("image/png", _SHOT)] if image else []))
            s.extend([Message("user", blocks)])
            first = await s.render(provider)
            await s.assistant_message("a red pixel")
            await s.user_message("and now?")
            warm = await s.render(provider)
        for out in (first, warm):
            assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o")
        return first.tokens, warm.tokens, warm.payload

    with_image, warm_with, payload = await render(True)
    without, warm_without, _ = await render(False)
    assert _SHOT in str(payload)
    cost = provider_image_tokens(1024, 768, provider, model="gpt-4o")
    assert with_image - without == cost
    assert warm_with - warm_without == cost


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
async def test_images_stay_within_the_budget_for_every_provider(provider: str) -> None:
    """Ten screenshots at 8,000 tokens: the plan keeps what fits and ``out.tokens``, the
    payload's count, says the same for every provider."""
    engine = ContextEngine("gpt-4o", Budget(total=8_000))
    async with engine.session("shots") as s:
        for i in range(10):
            shot = Message(
                "user", (Text(f"screenshot {i}: what changed?"), Image("image/png", _SHOT))
            )
            s.extend([shot, Message.assistant(f"In screenshot {i} the button moved.")])
        await s.user_message("summarize all the changes")
        out = await s.render(provider)
    images = str(out.payload).count(_SHOT)
    assert 3 <= images < 10  # some fit, not all: the images were counted
    assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o")
    cost = provider_image_tokens(1024, 768, provider, model="gpt-4o")
    assert images * cost < out.tokens <= 8_000 and out.report.fits


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_system_prompt_alone_renders_a_request_every_provider_accepts(
    provider: str,
) -> None:
    """No message yet, only the system prompt and a context grain: Anthropic and Gemini need
    one user turn (an empty ``messages``/``contents`` is rejected), so the bootstrap user turn
    is there; every payload validates against the provider's SDK types and is counted."""
    engine = ContextEngine("gpt-4o", Budget(total=4_000))
    async with engine.session("e") as s:
        s.extend([Message.system("You are a helpful agent.")])
        s.add(
            ContextGrain("rag.docs.1", content="Some retrieved document text.", lifespan="session")
        )
        out = await s.render(provider)
        again = await s.render(provider)  # the same again (the bootstrap turn is not stored)
    assert_sdk_valid(out.payload, provider)
    assert "Some retrieved document text." in str(out.payload)
    if provider in ("anthropic", "gemini"):
        turns = out.payload["messages" if provider == "anthropic" else "contents"]
        assert [t["role"] for t in turns] == ["user"]
        assert BOOTSTRAP_TEXT in str(turns)
        assert out.report.hygiene["counts"] == {"bootstrap_user": 1}
    assert out.tokens == payload_tokens(out.payload, provider, "gpt-4o") <= 4_000
    assert again.payload == out.payload


async def test_responses_instructions_alone_get_an_input_to_answer() -> None:
    """Only a system prompt: it becomes ``instructions``, and the Responses API rejects the
    request when ``input`` is then empty, so the bootstrap user turn is sent and counted."""
    engine = ContextEngine("gpt-4.1", Budget(total=2_000))
    async with engine.session("r") as s:
        s.add(ContextGrain("sys.rules", content="Answer in one line.", lifespan="session"))
        out = await s.render("openai-responses")
    assert out.payload["instructions"] == "Answer in one line."
    assert out.payload["input"] == [{"type": "message", "role": "user", "content": BOOTSTRAP_TEXT}]
    assert out.report.hygiene["counts"] == {"bootstrap_user": 1}
    assert out.tokens == payload_tokens(out.payload, "openai-responses", "gpt-4.1")
    assert_sdk_valid(out.payload, "openai-responses")


async def test_protected_content_may_use_the_reserve_but_not_more() -> None:
    rules = "rule " * 1_700  # about 1,700 tokens: over budget less the 10 % reserve
    engine = ContextEngine("gpt-4o", Budget(total=1_900))
    async with engine.session("rules") as s:
        s.add(ContextGrain("sys.rules", content=rules, protected=True, lifespan="session"))
        s.add(ContextGrain("rag.doc", content="doc " * 50))
        await s.user_message("hi")
        out = await s.render()
        assert out.tokens <= 1_900
        assert rules.strip() in out.payload["messages"][0]["content"]
        assert out.report.get("rag.doc").decision == "dropped"
    engine = ContextEngine("gpt-4o", Budget(total=1_600))
    async with engine.session("rules") as s:
        s.add(ContextGrain("sys.rules", content=rules, protected=True, lifespan="session"))
        await s.user_message("hi")
        with pytest.raises(BudgetError, match=r"sys\.rules \(\d+ tokens\).*|over the budget"):
            await s.render()


async def test_an_empty_assistant_message_does_not_stop_warm_renders_reusing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An aborted turn's empty assistant message in the kept history: hygiene dropped it on
    # every render, and a render whose hygiene changed something is not reused, so every warm
    # render took the full path (4x the work on the pi session). Compose leaves it out now;
    # the report still says it was dropped, and the payload is the cold render's.
    import ctxengine.inject.render as render_module

    calls = []
    full = render_module._clean
    monkeypatch.setattr(render_module, "_clean", lambda *a, **k: calls.append(1) or full(*a, **k))
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("s") as s:
        s.extend([Message.user("start"), Message.assistant(""), Message.user("go on")])
        first = await s.render()
        for i in range(3):
            s.extend([Message.assistant(f"step {i}"), Message.user(f"next {i}")])
            out = await s.render()
        assert len(calls) == 1  # only the first render cleaned in full
    for r in (first, out):
        changes = r.report.hygiene["changes"]
        assert [(c["action"], c["index"]) for c in changes] == [("dropped_empty", 1)]
        assert all(m.get("content") != "" for m in r.payload["messages"])
    async with ContextEngine("gpt-4o", Budget(total=4000)).session("cold") as c:
        c.extend(s.messages)
        assert (await c.render()).payload == out.payload


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_items_hygiene_leaves_out_of_the_payload_are_reported_dropped(provider: str) -> None:
    """The plan keeps every item; hygiene then leaves some out of the payload (an empty
    assistant message, an aborted turn's late result, a duplicate and an orphan result, an
    aborted turn that held only a call). The report says each was dropped by hygiene and
    counts it 0 tokens, so the grains' tokens never exceed the payload's."""
    from ctxengine.transcript import ToolResult

    def result(cid: str, text: str) -> Message:
        return Message("tool", (ToolResult(cid, (Text(text),)),))

    aborted = Message(
        "assistant", (Text("trying"), ToolCall("c1", "bash", {})), stop_reason="aborted"
    )
    lone = Message("assistant", (ToolCall("c3", "bash", {}),), stop_reason="aborted")
    engine = ContextEngine("gpt-4o", Budget(total=4000))
    async with engine.session("s") as s:
        s.extend([Message.user("start"), Message.assistant(""), Message.user("q"), aborted])
        s.extend([result("c1", "late"), Message.user("again")])
        s.extend([Message("assistant", (ToolCall("c2", "bash", {}),)), result("c2", "first")])
        s.extend([result("c2", "second"), result("ghost", "boo"), Message.user("more"), lone])
        s.extend([Message.user("end")])
        out = await s.render(provider)
    columns = out.report.columns()  # what a snapshot stores, built before the grains
    unsent = {"hist.1", "act.tool_result.c1", "act.tool_result.c2-2", "act.tool_result.ghost"}
    unsent.add("hist.11")
    dropped = {d.node_id: d for d in out.report if d.decision == "dropped"}
    assert set(dropped) == unsent
    for d in dropped.values():
        assert (d.status, d.stage, d.tokens_after) == ("dropped", "hygiene", 0)
        assert d.reason.startswith("left out of the payload by hygiene (") and d.tokens_before > 0
    assert all(
        d.decision == "kept" and d.tokens_after > 0 for d in out.report if d.node_id not in unsent
    )
    assert columns == {k: [getattr(d, k) for d in out.report] for k in columns}
    if provider == "openai":  # exact counts (merged turns save framing the plan counted)
        assert sum(d.tokens_after for d in out.report) <= out.tokens
    assert "late" not in str(out.payload) and "boo" not in str(out.payload)


async def test_the_export_runs_with_the_collector_paused_and_resumes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A render's export (compose, hygiene, the provider payload, its count) is one
    synchronous step that makes a few objects per kept message and frees none: the cyclic
    collector is paused through it, runs again once the payload is made, also when the step
    fails, and runs while the render's ``on_after_render`` hooks (which may wait) run."""
    import gc

    from ctxengine.inject import turn as T

    seen: list[str] = []
    compose, fail = T.compose, [False]

    def watched(*args: object) -> object:
        seen.append(f"compose {gc.isenabled()}")
        if fail[0]:
            raise RuntimeError("compose failed")
        return compose(*args)  # type: ignore[arg-type]

    class Hook:
        name, version, priority, enabled = "watch", "1.0.0", 10, True

        async def collect(self, scene: object) -> list:
            return []

        def on_after_render(self, event: AfterRender) -> None:
            seen.append(f"hook {gc.isenabled()}")

    monkeypatch.setattr(T, "compose", watched)
    engine = ContextEngine("gpt-4o", Budget(total=2_000))
    engine.register(Hook())
    assert gc.isenabled()
    async with engine.session("gc") as s:
        await s.user_message("hello")
        out = await s.render()
        assert out.tokens <= 2_000 and gc.isenabled()
        fail[0] = True
        with pytest.raises(RuntimeError, match="compose failed"):
            await s.render()
        assert gc.isenabled()
    assert seen == ["compose False", "hook True", "compose False"]
