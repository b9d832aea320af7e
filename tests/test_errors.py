"""The error tree: bad-argument errors are ValueErrors too, and name the bad value."""

from __future__ import annotations

import anyio
import pytest

import ctxengine.errors as errors
from ctxengine import ContextEngine

BAD_ARGUMENT = (
    "EncodingError",
    "GrainError",
    "BudgetError",
    "FoldError",
    "AdapterError",
    "TranscriptError",
    "SessionIdError",
)
NOT_ARGUMENT = ("PluginError", "StoreError", "ContextOverflowError", "SummarizerError")


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


def test_an_unknown_render_option_lists_the_valid_ones() -> None:
    async def main() -> None:
        async with ContextEngine("gpt-4o", 4000).session("s") as s:
            await s.user_message("hi")
            with pytest.raises(ValueError, match=r"cache_breakpoint.*hygiene") as info:
                await s.render("anthropic", cache_breakpoint=2)
            assert isinstance(info.value, errors.AdapterError)
            assert (await s.render("anthropic", cache_breakpoints=2)).tokens > 0

    anyio.run(main)
