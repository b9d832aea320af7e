"""The error tree: bad-argument errors are ValueErrors too, and name the bad value."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import ctxengine
import ctxengine.errors as errors
from ctxengine import ContextEngine
from ctxengine.transcript import ToolCall

BAD_ARGUMENT = (
    "EncodingError",
    "GrainError",
    "BudgetError",
    "FoldError",
    "AdapterError",
    "TranscriptError",
    "SessionIdError",
    "ConfigError",
    "ConfigTypeError",
)
NOT_ARGUMENT = (
    "PluginError",
    "StoreError",
    "StoreConflictError",
    "ContextOverflowError",
    "SummarizerError",
    "EmbedderError",
)


def test_every_bad_argument_error_is_a_value_error_and_the_others_are_not() -> None:
    assert set(BAD_ARGUMENT) | set(NOT_ARGUMENT) | {"CtxEngineError"} == set(errors.__all__)
    for name in BAD_ARGUMENT:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.CtxEngineError) and issubclass(cls, ValueError), name
    for name in NOT_ARGUMENT:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.CtxEngineError) and not issubclass(cls, ValueError), name


def test_user_message_none_names_the_argument() -> None:
    async def main() -> None:
        async with ContextEngine("gpt-4o", 4000).session("s") as s:
            with pytest.raises(errors.TranscriptError, match=r"user_message\(text\).*NoneType"):
                await s.user_message(None)  # type: ignore[arg-type]
            assert s.messages == []

    anyio.run(main)


_BAD_MESSAGES: list[tuple[str, Callable[[Any], Any], str]] = [
    ("assistant text int", lambda s: s.assistant_message(5), r"assistant_message\(text\).*int 5"),
    (
        "tool calls a dict",
        lambda s: s.assistant_message("", {"id": "c1"}),
        r"assistant_message\(tool_calls\) must be a sequence of ToolCall; got dict",
    ),
    (
        "tool call id int",
        lambda s: s.assistant_message("", [ToolCall(5, "read", {})]),  # type: ignore[arg-type]
        r"tool_calls\)\[0\]\.id must be a str; got int 5",
    ),
    ("result id int", lambda s: s.tool_result(5, "x"), r"tool_result\(call_id\).*int 5"),
    ("result output int", lambda s: s.tool_result("c1", 5), r"tool_result\(output\).*int 5"),
    ("result name int", lambda s: s.tool_result("c1", "x", name=5), r"tool_result\(name\).*5"),
    (
        "result is_error str",
        lambda s: s.tool_result("c1", "x", is_error="no"),
        r"tool_result\(is_error\) must be a bool; got str 'no'",
    ),
]


@pytest.mark.parametrize(
    ("case", "call", "pattern"), _BAD_MESSAGES, ids=[c for c, _, _ in _BAD_MESSAGES]
)
def test_a_message_of_the_wrong_type_is_refused_before_it_is_recorded(
    tmp_path: Path, case: str, call: Callable[[Any], Any], pattern: str
) -> None:
    """These raised AttributeError or TypeError from deep inside the engine, some (a call id
    or a result name of the wrong type, an ``is_error`` of ``"no"``) only after the message
    was appended, so the store kept a message the caller was told had failed."""

    async def main() -> None:
        engine = ContextEngine("gpt-4o", 4000, store=ctxengine.FileStore(tmp_path))
        async with engine.session("s") as s:
            await s.user_message("hi")
            with pytest.raises(errors.TranscriptError, match=pattern):
                await call(s)
            assert [m.role for m in s.messages] == ["user"]
        engine.close()
        reopened = ContextEngine("gpt-4o", 4000, store=ctxengine.FileStore(tmp_path))
        loaded = await reopened.load("s")
        assert loaded is not None and [m.role for m in loaded.messages] == ["user"]

    anyio.run(main)


def test_an_unknown_render_option_lists_the_valid_ones() -> None:
    async def main() -> None:
        async with ContextEngine("gpt-4o", 4000).session("s") as s:
            await s.user_message("hi")
            with pytest.raises(ValueError, match=r"cache_breakpoint.*hygiene") as info:
                await s.render("anthropic", cache_breakpoint=2)
            assert isinstance(info.value, errors.AdapterError)
            assert (await s.render("anthropic", cache_breakpoints=2)).tokens > 0

    anyio.run(main)


def _bad_settings() -> list[tuple[str, Callable[[], Any]]]:
    from ctxengine.assemble.guard import PruneSettings, max_tool_result_chars
    from ctxengine.compaction import CompactionConfig, ExtractiveSummarizer, plan_cut
    from ctxengine.memory.store import HashingEmbedder
    from ctxengine.splitter import TextSplitter

    return [
        ("PruneSettings(soft_trim_ratio=1.5)", lambda: PruneSettings(soft_trim_ratio=1.5)),
        ("CompactionConfig(render_low_water=0)", lambda: CompactionConfig(render_low_water=0)),
        ("plan_cut(low_water=1.5)", lambda: plan_cut([], [], budget=100, low_water=1.5)),
        ("ExtractiveSummarizer(max_items=0)", lambda: ExtractiveSummarizer(max_items=0)),
        ("TextSplitter(max_chars=0)", lambda: TextSplitter(max_chars=0)),
        ("HashingEmbedder(dim=4)", lambda: HashingEmbedder(dim=4)),
        ("max_tool_result_chars(0)", lambda: max_tool_result_chars(0)),
    ]


@pytest.mark.parametrize(("call", "make"), _bad_settings(), ids=[c for c, _ in _bad_settings()])
def test_a_setting_out_of_range_is_a_config_error_naming_the_value(
    call: str, make: Callable[[], Any]
) -> None:
    with pytest.raises(ctxengine.ConfigError) as info:
        make()
    assert isinstance(info.value, ctxengine.CtxEngineError) and isinstance(info.value, ValueError)
    value = re.search(r"[(=]([-\d.]+)\)$", call)
    assert value is not None and value.group(1) in str(info.value), (call, str(info.value))
    assert "expected" in str(info.value) or "must" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"window_tokens": "128k"}, "window_tokens is str '128k'"),
        ({"timeout": None}, "timeout is NoneType None"),
        ({"low_water": "0.5"}, "low_water is str '0.5'"),
        ({"tail_ratio": "x"}, "tail_ratio is str 'x'"),
        ({"keep_assistant_turns": 1.5}, "keep_assistant_turns is float 1.5"),
        ({"max_identifiers": "40"}, "max_identifiers is str '40'"),
        ({"rules_sections": "Red Lines"}, "rules_sections is str 'Red Lines'"),
        ({"instructions": None}, "instructions is NoneType None"),
        ({"fallback_note": "no"}, "fallback_note is str 'no'"),
    ],
)
def test_a_compaction_setting_of_the_wrong_kind_is_a_config_type_error(
    kwargs: dict[str, Any], named: str
) -> None:
    """Each was taken: a str or None where a number goes failed with a bare TypeError, some
    only inside a render that compacted (``max_identifiers="40"``); ``tail_ratio="x"`` and
    ``fallback_note="no"`` (true) were used as they were; headings given as one str were read
    one per character."""
    from ctxengine.compaction import CompactionConfig

    with pytest.raises(errors.ConfigTypeError, match=re.escape(named)) as info:
        CompactionConfig(**kwargs)
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("kwargs", [{"tail_ratio": -1}, {"tail_ratio": 5}, {"max_identifiers": -3}])
def test_a_compaction_setting_out_of_its_range_is_a_config_error(kwargs: dict[str, Any]) -> None:
    from ctxengine.compaction import CompactionConfig

    ((name, value),) = kwargs.items()
    with pytest.raises(ctxengine.ConfigError, match=f"{name}={value}; expected"):
        CompactionConfig(**kwargs)


def test_a_summarizer_without_summarize_is_a_config_type_error() -> None:
    from ctxengine.compaction.protocol import call_summarizer

    with pytest.raises(errors.ConfigTypeError, match="object has no summarize") as info:
        anyio.run(lambda: call_summarizer(object(), [], instructions="", max_tokens=10))
    assert isinstance(info.value, TypeError) and isinstance(info.value, ctxengine.CtxEngineError)


def test_the_library_raises_no_bare_value_or_type_error() -> None:
    # One tree: a bad argument is a CtxEngineError that is also a ValueError (or TypeError).
    root = Path(ctxengine.__file__).parent
    bare = [
        f"{path.relative_to(root)}:{n}"
        for path in root.rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"raise (ValueError|TypeError)\(", line) and "# internal" not in line
    ]
    assert not bare, bare


def test_a_compaction_config_takes_numpy_numbers_and_iterators_as_plain_values() -> None:
    """numpy counts and ratios, and headings given as a generator, were taken before the
    config checked its kinds; they are stored as plain values (and the config hashes)."""
    import numpy as np

    from ctxengine.compaction import CompactionConfig

    config = CompactionConfig(
        window_tokens=np.int64(100_000),
        tail_ratio=np.float32(0.5),
        rules_sections=(h for h in ["Red Lines"]),
    )
    assert type(config.window_tokens) is int and config.window_tokens == 100_000
    assert type(config.tail_ratio) is float and config.tail_ratio == 0.5
    assert config.rules_sections == ("Red Lines",)
    assert hash(config.rules_sections)


def test_a_budget_takes_numpy_numbers_as_plain_values() -> None:
    """As the settings do: ``Budget(total=np.int64(32000))`` (a budget read from an array)
    was refused as "not a positive int"."""
    import numpy as np

    from ctxengine import Budget
    from ctxengine.errors import BudgetError

    b = Budget(
        total=np.int64(32_000), output_reserve=np.int32(1_000), pretrim_ratio=np.float64(0.5)
    )
    assert (type(b.total), type(b.output_reserve), type(b.pretrim_ratio)) == (int, int, float)
    assert (b.total, b.output_reserve, b.pretrim_ratio) == (32_000, 1_000, 0.5)
    for bad in (np.bool_(True), np.float64(3.5), True):
        with pytest.raises(BudgetError, match="total must be a positive int"):
            Budget(total=bad)  # type: ignore[arg-type]
