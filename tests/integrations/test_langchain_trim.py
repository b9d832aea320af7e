"""LangChain's own ``trim_messages`` unit tests, re-created against ours.

Ported from langchain-ai/langchain ``libs/core/tests/unit_tests/messages/test_utils.py`` (every
``test_trim_messages_*`` case, including the tool-group ones of its issue 29637). Where one of
our two documented differences applies, the test says so and asserts our behaviour:

- ``tool_group_atomic``: a tool call is never separated from its results;
- ``exact_counts``: a model/encoding name or tiktoken ``Encoding`` counts exactly.

Each case also runs LangChain's installed ``trim_messages`` when its result is defined the same
way there (``same_as_langchain``), so a drift of either side shows up.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest
from langchain_core.language_models.fake_chat_models import FakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.messages import trim_messages as lc_trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.tools import BaseTool

from ctxengine.integrations._lc_trim import is_type
from ctxengine.integrations.langchain import trim_messages
from ctxengine.tokens import count_messages, pdf_page_tokens
from ctxengine.transcript import load
from offline_tiktoken import TRANSCRIPTS, encoding


def dummy_token_counter(messages: list[BaseMessage]) -> int:
    """3 + 4 + 3 = 10 tokens per string message; 3 + 4 per block + 3 for list content."""
    count = 0
    for msg in messages:
        if isinstance(msg.content, str):
            count += 3 + 4 + 3
        if isinstance(msg.content, list):
            count += 3 + len(msg.content) * 4 + 3
    return count


MESSAGES_TO_TRIM: list[BaseMessage] = [
    SystemMessage("This is a 4 token text."),
    HumanMessage("This is a 4 token text.", id="first"),
    AIMessage(
        [
            {"type": "text", "text": "This is the FIRST 4 token block."},
            {"type": "text", "text": "This is the SECOND 4 token block."},
        ],
        id="second",
    ),
    HumanMessage("This is a 4 token text.", id="third"),
    AIMessage("This is a 4 token text.", id="fourth"),
]
MESSAGES_TO_TRIM_COPY = [m.model_copy(deep=True) for m in MESSAGES_TO_TRIM]


def same_as_langchain(messages: Sequence[Any], **kwargs: Any) -> list[BaseMessage]:
    """Ours, asserted equal to LangChain's installed version on the same input."""
    ours = trim_messages(list(messages), **kwargs)
    assert ours == lc_trim_messages(list(messages), **kwargs)
    return ours  # type: ignore[no-any-return]


def test_trim_messages_first_30() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM, max_tokens=30, token_counter=dummy_token_counter, strategy="first"
    )
    assert actual == [
        SystemMessage("This is a 4 token text."),
        HumanMessage("This is a 4 token text.", id="first"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def test_trim_messages_first_30_allow_partial() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM,
        max_tokens=30,
        token_counter=dummy_token_counter,
        strategy="first",
        allow_partial=True,
    )
    assert actual == [
        SystemMessage("This is a 4 token text."),
        HumanMessage("This is a 4 token text.", id="first"),
        AIMessage([{"type": "text", "text": "This is the FIRST 4 token block."}], id="second"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def test_trim_messages_first_30_allow_partial_end_on_human() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM,
        max_tokens=30,
        token_counter=dummy_token_counter,
        strategy="first",
        allow_partial=True,
        end_on="human",
    )
    assert actual == [
        SystemMessage("This is a 4 token text."),
        HumanMessage("This is a 4 token text.", id="first"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def test_trim_messages_last_30_include_system() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM,
        max_tokens=30,
        include_system=True,
        token_counter=dummy_token_counter,
        strategy="last",
    )
    assert actual == [
        SystemMessage("This is a 4 token text."),
        HumanMessage("This is a 4 token text.", id="third"),
        AIMessage("This is a 4 token text.", id="fourth"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def test_trim_messages_last_40_include_system_allow_partial() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM,
        max_tokens=40,
        token_counter=dummy_token_counter,
        strategy="last",
        allow_partial=True,
        include_system=True,
    )
    assert actual == [
        SystemMessage("This is a 4 token text."),
        AIMessage([{"type": "text", "text": "This is the SECOND 4 token block."}], id="second"),
        HumanMessage("This is a 4 token text.", id="third"),
        AIMessage("This is a 4 token text.", id="fourth"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def test_trim_messages_last_30_include_system_allow_partial_end_on_human() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM,
        max_tokens=30,
        token_counter=dummy_token_counter,
        strategy="last",
        allow_partial=True,
        include_system=True,
        end_on="human",
    )
    assert actual == [
        SystemMessage("This is a 4 token text."),
        AIMessage([{"type": "text", "text": "This is the SECOND 4 token block."}], id="second"),
        HumanMessage("This is a 4 token text.", id="third"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def test_trim_messages_last_40_include_system_allow_partial_start_on_human() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM,
        max_tokens=30,
        token_counter=dummy_token_counter,
        strategy="last",
        allow_partial=True,
        include_system=True,
        start_on="human",
    )
    assert actual == [
        SystemMessage("This is a 4 token text."),
        HumanMessage("This is a 4 token text.", id="third"),
        AIMessage("This is a 4 token text.", id="fourth"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def _char_count(messages: list[BaseMessage]) -> int:
    return sum(len(m.content) for m in messages)


def test_trim_messages_allow_partial_one_message() -> None:
    actual = same_as_langchain(
        [HumanMessage("This is a funky text.", id="third")],
        max_tokens=2,
        token_counter=_char_count,
        text_splitter=list,
        strategy="first",
        allow_partial=True,
    )
    assert actual == [HumanMessage("Th", id="third")]


def test_trim_messages_last_allow_partial_one_message() -> None:
    actual = same_as_langchain(
        [HumanMessage("This is a funky text.", id="third")],
        max_tokens=2,
        token_counter=_char_count,
        text_splitter=list,
        strategy="last",
        allow_partial=True,
    )
    assert actual == [HumanMessage("t.", id="third")]


def test_trim_messages_allow_partial_text_splitter() -> None:
    def count_words(msgs: list[BaseMessage]) -> int:
        count = 0
        for msg in msgs:
            if isinstance(msg.content, str):
                count += len(msg.content.split(" "))
            else:
                text = " ".join(block["text"] for block in msg.content)  # type: ignore[index]
                count += len(text.split(" "))
        return count

    def split_on_space(text: str) -> list[str]:
        splits = text.split(" ")
        return [s + " " for s in splits[:-1]] + splits[-1:]

    actual = same_as_langchain(
        MESSAGES_TO_TRIM,
        max_tokens=10,
        token_counter=count_words,
        strategy="last",
        allow_partial=True,
        text_splitter=split_on_space,
    )
    assert actual == [
        HumanMessage("a 4 token text.", id="third"),
        AIMessage("This is a 4 token text.", id="fourth"),
    ]
    assert MESSAGES_TO_TRIM == MESSAGES_TO_TRIM_COPY


def test_trim_messages_include_system_strategy_last_empty_messages() -> None:
    trimmer = trim_messages(
        max_tokens=10, token_counter=dummy_token_counter, strategy="last", include_system=True
    )
    assert trimmer.invoke([]) == []


def test_trim_messages_invoke() -> None:
    actual = trim_messages(max_tokens=10, token_counter=dummy_token_counter).invoke(
        MESSAGES_TO_TRIM
    )
    expected = trim_messages(MESSAGES_TO_TRIM, max_tokens=10, token_counter=dummy_token_counter)
    assert actual == expected == [AIMessage("This is a 4 token text.", id="fourth")]


class FakeTokenCountingModel(FakeChatModel):
    def get_num_tokens_from_messages(
        self,
        messages: list[BaseMessage],
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool] | None = None,
    ) -> int:
        return dummy_token_counter(messages)


def test_trim_messages_bound_model_token_counter() -> None:
    trimmer = trim_messages(max_tokens=10, token_counter=FakeTokenCountingModel().bind(foo="bar"))
    assert trimmer.invoke([HumanMessage("foobar")]) == [HumanMessage("foobar")]


def test_trim_messages_model_token_counter() -> None:
    actual = same_as_langchain(
        MESSAGES_TO_TRIM, max_tokens=30, token_counter=FakeTokenCountingModel()
    )
    assert [m.id for m in actual] == ["third", "fourth"]


def test_trim_messages_bad_token_counter() -> None:
    trimmer = trim_messages(max_tokens=10, token_counter={})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "'token_counter' expected to be a model that implements "
            "'get_num_tokens_from_messages()' or a function. "
            "Received object of type <class 'dict'>."
        ),
    ):
        trimmer.invoke([HumanMessage("foobar")])


def test_trim_messages_partial_text_splitting() -> None:
    messages = [HumanMessage(content="This is a long message that needs trimming")]
    messages_copy = [m.model_copy(deep=True) for m in messages]

    def count_characters(msgs: list[BaseMessage]) -> int:
        return sum(len(m.content) if isinstance(m.content, str) else 0 for m in msgs)

    result = same_as_langchain(
        messages,
        max_tokens=10,
        token_counter=count_characters,
        strategy="first",
        allow_partial=True,
        text_splitter=list,
    )
    assert len(result) == 1
    assert result[0].content == "This is a "
    assert messages == messages_copy


def test_trim_messages_mixed_content_with_partial() -> None:
    messages = [
        AIMessage(
            content=[
                {"type": "text", "text": "First part of text."},
                {"type": "text", "text": "Second part that should be trimmed."},
            ]
        )
    ]
    messages_copy = [m.model_copy(deep=True) for m in messages]

    def count_text_length(msgs: list[BaseMessage]) -> int:
        total = 0
        for msg in msgs:
            if isinstance(msg.content, list):
                for block in msg.content:
                    if isinstance(block, dict) and block.get("type") == "text":
                        total += len(block["text"])
            elif isinstance(msg.content, str):
                total += len(msg.content)
        return total

    result = same_as_langchain(
        messages,
        max_tokens=20,
        token_counter=count_text_length,
        strategy="first",
        allow_partial=True,
    )
    assert len(result) == 1
    assert len(result[0].content) == 1
    content = result[0].content[0]
    assert isinstance(content, dict)
    assert content["text"] == "First part of text."
    assert messages == messages_copy


def test_trim_messages_exact_token_boundary() -> None:
    messages = [
        SystemMessage(content="10 tokens exactly."),
        HumanMessage(content="Another 10 tokens."),
    ]
    result1 = same_as_langchain(
        messages, max_tokens=10, token_counter=dummy_token_counter, strategy="first"
    )
    assert len(result1) == 1
    assert result1[0].content == "10 tokens exactly."
    result2 = same_as_langchain(
        messages, max_tokens=20, token_counter=dummy_token_counter, strategy="first"
    )
    assert result2 == messages


def test_trim_messages_start_on_with_allow_partial() -> None:
    messages = [
        HumanMessage(content="First human message"),
        AIMessage(content="AI response"),
        HumanMessage(content="Second human message"),
    ]
    messages_copy = [m.model_copy(deep=True) for m in messages]
    result = same_as_langchain(
        messages,
        max_tokens=20,
        token_counter=dummy_token_counter,
        strategy="last",
        allow_partial=True,
        start_on="human",
    )
    assert len(result) == 1
    assert result[0].content == "Second human message"
    assert messages == messages_copy


def test_trim_messages_token_counter_shortcut_approximate() -> None:
    messages = [
        SystemMessage("This is a test message"),
        HumanMessage("Another test message", id="first"),
        AIMessage("AI response here", id="second"),
    ]
    messages_copy = [m.model_copy(deep=True) for m in messages]
    result_shortcut = same_as_langchain(
        messages, max_tokens=50, token_counter="approximate", strategy="last"
    )
    result_direct = same_as_langchain(
        messages, max_tokens=50, token_counter=count_tokens_approximately, strategy="last"
    )
    assert result_shortcut == result_direct
    assert messages == messages_copy


def test_trim_messages_token_counter_shortcut_invalid() -> None:
    messages = [SystemMessage("This is a test message"), HumanMessage("Another test message")]
    with pytest.raises(ValueError, match="Invalid token_counter shortcut 'invalid'"):
        trim_messages(messages, max_tokens=50, token_counter="invalid", strategy="last")


def test_trim_messages_token_counter_shortcut_with_options() -> None:
    messages = [
        SystemMessage("System instructions"),
        HumanMessage("First human message", id="first"),
        AIMessage("First AI response", id="ai1"),
        HumanMessage("Second human message", id="second"),
        AIMessage("Second AI response", id="ai2"),
    ]
    messages_copy = [m.model_copy(deep=True) for m in messages]
    result = same_as_langchain(
        messages,
        max_tokens=100,
        token_counter="approximate",
        strategy="last",
        include_system=True,
        start_on="human",
    )
    assert len(result) >= 2
    assert isinstance(result[0], SystemMessage)
    assert any(isinstance(msg, HumanMessage) for msg in result[1:])
    assert messages == messages_copy


def test_trim_messages_strategy_first_rejects_start_on_and_include_system() -> None:
    with pytest.raises(ValueError, match="start_on parameter is only valid"):
        trim_messages(
            MESSAGES_TO_TRIM, max_tokens=5, token_counter=len, strategy="first", start_on="human"
        )
    with pytest.raises(ValueError, match="include_system parameter is only valid"):
        trim_messages(
            MESSAGES_TO_TRIM, max_tokens=5, token_counter=len, strategy="first", include_system=True
        )


def test_trim_messages_len_counter_counts_messages() -> None:
    actual = same_as_langchain(MESSAGES_TO_TRIM, max_tokens=2, token_counter=len)
    assert [m.id for m in actual] == ["third", "fourth"]


def test_trim_messages_per_message_counter() -> None:
    def per_message(message: BaseMessage) -> int:
        return dummy_token_counter([message])

    per_message.__annotations__["message"] = BaseMessage  # as without postponed annotations

    actual = same_as_langchain(MESSAGES_TO_TRIM, max_tokens=24, token_counter=per_message)
    assert [m.id for m in actual] == ["third", "fourth"]


# -- tool-call groups (LangChain's issue 29637 tests; our difference tool_group_atomic) --------

TOOL_CALL_MESSAGES: list[BaseMessage] = [
    HumanMessage("hi"),
    AIMessage("hello"),
    HumanMessage("what's the weather in florida?"),
    AIMessage(
        [
            {"type": "text", "text": "let's check the weather in florida"},
            {
                "type": "tool_use",
                "id": "abc123",
                "name": "get_weather",
                "input": {"location": "florida"},
            },
        ],
        tool_calls=[
            {
                "name": "get_weather",
                "args": {"location": "florida"},
                "id": "abc123",
                "type": "tool_call",
            }
        ],
    ),
    ToolMessage("It's sunny.", name="get_weather", tool_call_id="abc123"),
]


def test_trim_messages_tool_group_never_split_first() -> None:
    # 3 messages = 30 tokens; the AIMessage(tool_calls) alone would fit 35 in LangChain 1.8's
    # message-wise search only without its result; the group (24) does not fit after 30.
    result = trim_messages(
        TOOL_CALL_MESSAGES, max_tokens=35, token_counter=dummy_token_counter, strategy="first"
    )
    assert result == TOOL_CALL_MESSAGES[:3]


def test_trim_messages_tool_group_never_split_last() -> None:
    # Difference tool_group_atomic: only the ToolMessage (10) fits in 15; LangChain 1.8 returns
    # that orphan (its issue 33245), we return nothing rather than split the group.
    lc = lc_trim_messages(
        TOOL_CALL_MESSAGES, max_tokens=15, token_counter=dummy_token_counter, strategy="last"
    )
    assert [type(m) for m in lc] == [ToolMessage]
    result = trim_messages(
        TOOL_CALL_MESSAGES, max_tokens=15, token_counter=dummy_token_counter, strategy="last"
    )
    assert result == []


def test_trim_messages_tool_group_included_together_last() -> None:
    result = trim_messages(
        TOOL_CALL_MESSAGES, max_tokens=25, token_counter=dummy_token_counter, strategy="last"
    )
    assert result == TOOL_CALL_MESSAGES[3:]


def test_trim_messages_tool_group_included_together_first() -> None:
    result = same_as_langchain(
        TOOL_CALL_MESSAGES, max_tokens=55, token_counter=dummy_token_counter, strategy="first"
    )
    assert result == TOOL_CALL_MESSAGES


def test_trim_messages_no_reversed_messages_sent_to_counter() -> None:
    call_log: list[list[BaseMessage]] = []

    def tracking_counter(messages: list[BaseMessage]) -> int:
        call_log.append(list(messages))
        return len(messages) * 10

    trim_messages(TOOL_CALL_MESSAGES, max_tokens=30, token_counter=tracking_counter)
    assert call_log
    for call_msgs in call_log:
        for i, msg in enumerate(call_msgs):
            if isinstance(msg, ToolMessage):
                assert i > 0
                prev = call_msgs[i - 1]
                assert isinstance(prev, AIMessage) and prev.tool_calls


def test_trim_messages_tool_group_with_include_system() -> None:
    messages = [SystemMessage("You are a helpful assistant."), *TOOL_CALL_MESSAGES]
    result = trim_messages(
        messages,
        max_tokens=35,
        token_counter=dummy_token_counter,
        strategy="last",
        include_system=True,
    )
    assert result == [messages[0], *TOOL_CALL_MESSAGES[3:]]


def test_trim_messages_tool_group_start_on_human() -> None:
    result = trim_messages(
        TOOL_CALL_MESSAGES,
        max_tokens=25,
        token_counter=dummy_token_counter,
        strategy="last",
        start_on="human",
    )
    assert result == []


def test_trim_messages_multiple_tool_groups() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("query 1"),
        AIMessage("calling tool A", tool_calls=[{"name": "A", "args": {}, "id": "a1"}]),
        ToolMessage("result A", tool_call_id="a1"),
        HumanMessage("query 2"),
        AIMessage("calling tool B", tool_calls=[{"name": "B", "args": {}, "id": "b1"}]),
        ToolMessage("result B", tool_call_id="b1"),
    ]
    result = same_as_langchain(
        messages, max_tokens=35, token_counter=dummy_token_counter, strategy="last"
    )
    assert result == messages[3:]


def test_trim_messages_tool_group_boundary_exact_fit() -> None:
    result = same_as_langchain(
        TOOL_CALL_MESSAGES, max_tokens=24, token_counter=dummy_token_counter, strategy="last"
    )
    assert result == TOOL_CALL_MESSAGES[3:]


def test_get_message_group_boundaries() -> None:
    from ctxengine.integrations._lc_trim import group_bounds

    assert group_bounds(TOOL_CALL_MESSAGES) == [0, 1, 2, 3, 5]
    assert group_bounds([]) == [0]
    assert group_bounds([HumanMessage("a"), AIMessage("b"), HumanMessage("c")]) == [0, 1, 2, 3]


def test_trim_messages_tool_forward_bound_tools() -> None:
    received: dict[str, Any] = {}

    class MockLLM:
        kwargs: dict[str, Any] = {"tools": ["tool_a", "tool_b"]}  # noqa: RUF012

        def get_num_tokens_from_messages(
            self, messages: list[BaseMessage], tools: list[str] | None = None
        ) -> int:
            received["tools"] = tools
            return len(messages) * 10

    trim_messages([HumanMessage("hi")], max_tokens=100, token_counter=MockLLM())
    assert received["tools"] == ["tool_a", "tool_b"]


def test_trim_messages_partial_never_cuts_a_tool_group() -> None:
    # tool_group_atomic with allow_partial: LangChain may cut into the AIMessage(tool_calls)
    # before the ToolMessage; we keep the group whole or not at all.
    result = trim_messages(
        TOOL_CALL_MESSAGES,
        max_tokens=20,
        token_counter=dummy_token_counter,
        strategy="last",
        allow_partial=True,
    )
    assert result == []


# -- exact counts (our difference exact_counts) -------------------------------------------------


@pytest.mark.parametrize("counter", ["gpt-4o", "o200k_base", "tiktoken"])
def test_exact_counter_keeps_the_longest_suffix_within_budget(counter: str) -> None:
    token_counter: Any = encoding("o200k_base") if counter == "tiktoken" else counter
    messages: list[BaseMessage] = [
        SystemMessage("You are a careful assistant."),
        *[HumanMessage(f"question {i}: what is {i} squared?") for i in range(20)],
    ]
    kept = trim_messages(messages, max_tokens=120, token_counter=token_counter, include_system=True)

    def openai(ms: list[BaseMessage]) -> int:
        roles = {"system": "system", "human": "user"}
        return count_messages(
            [{"role": roles[m.type], "content": m.content} for m in ms], model="gpt-4o"
        )

    assert openai(kept) <= 120
    dropped = messages[len(messages) - len(kept)]
    assert openai([kept[0], dropped, *kept[1:]]) > 120  # one more would not fit
    assert kept[0] is messages[0]


_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
    "rkJggg=="
)
#: Every LangChain content shape of an image, a PDF or audio the LangChain importer takes.
MEDIA_BLOCKS: dict[str, dict[str, Any]] = {
    "image_url": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_PNG}"}},
    "image_url str": {"type": "image_url", "image_url": "https://example.com/a.png"},
    "v1 image url": {"type": "image", "url": "https://example.com/a.png"},
    "v1 image base64": {"type": "image", "base64": _PNG, "mime_type": "image/png"},
    "v0 image base64": {
        "type": "image",
        "source_type": "base64",
        "data": _PNG,
        "mime_type": "image/png",
    },
    "anthropic image": {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": _PNG},
    },
    "v1 file pdf": {
        "type": "file",
        "base64": "JVBERi0xLjQK",
        "mime_type": "application/pdf",
        "filename": "a.pdf",
    },
    "openai file": {
        "type": "file",
        "file": {"file_data": "data:application/pdf;base64,JVBERi0xLjQK", "filename": "a.pdf"},
    },
    "v1 audio": {"type": "audio", "base64": "A" * 5_336, "mime_type": "audio/mpeg"},
    "input_audio": {"type": "input_audio", "input_audio": {"data": "A" * 5_336, "format": "mp3"}},
}


@pytest.mark.filterwarnings("ignore:OpenAI may require a filename")
@pytest.mark.parametrize("shape", sorted(MEDIA_BLOCKS))
def test_exact_counter_charges_media_as_count_messages_does(shape: str) -> None:
    # the exact counter charged an image or a PDF 0 tokens (count_messages: 765 each)
    from langchain_core.messages.utils import convert_to_openai_messages

    from ctxengine.integrations._lc_trim import resolve_counter

    block = MEDIA_BLOCKS[shape]
    messages: list[BaseMessage] = [
        SystemMessage("You read screenshots."),
        HumanMessage([{"type": "text", "text": "what is this?"}, block, block]),
        AIMessage("A chart."),
        ToolMessage([block], tool_call_id="call_1"),
    ]
    expected = count_messages(convert_to_openai_messages(messages), model="gpt-4o")
    assert resolve_counter("gpt-4o").total(messages) == expected
    text_only = [*messages[:3], ToolMessage([], tool_call_id="call_1")]
    text_only[1] = HumanMessage([{"type": "text", "text": "what is this?"}])
    assert expected >= resolve_counter("gpt-4o").total(text_only) + 3 * 64  # media charged


def test_exact_counter_keeps_screenshots_within_the_budget() -> None:
    from langchain_core.messages.utils import convert_to_openai_messages

    from image_bytes import png

    # a 1024 x 1024 screenshot: 765 tokens by OpenAI's tile rule
    shot = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png(1024, 1024)}"}}
    history: list[BaseMessage] = [SystemMessage("You operate a browser.")]
    for i in range(10):
        history += [
            HumanMessage([{"type": "text", "text": f"screenshot {i}"}, shot]),
            AIMessage(f"I see page {i}."),
        ]
    kept = trim_messages(history, max_tokens=2_000, token_counter="gpt-4o", include_system=True)
    assert kept == [history[0], *history[-5:]]  # two screenshots fit, a third would not
    assert count_messages(convert_to_openai_messages(kept), model="gpt-4o") <= 2_000


# -- the count cache sees edits in place ------------------------------------------------------


def _fresh(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [m.model_copy(deep=True) for m in messages]


@pytest.mark.parametrize("counter", ["approximate", "gpt-4o"])
@pytest.mark.parametrize("edit", ["append block", "edit block text", "rename"])
def test_a_message_edited_in_place_is_counted_again(counter: str, edit: str) -> None:
    # the cache was keyed on the message and its content object: an edit that kept both
    # objects returned the old count, and the trim kept a message that no longer fits
    msgs: list[BaseMessage] = [
        SystemMessage("sys"),
        HumanMessage([{"type": "text", "text": "short question"}]),
        AIMessage("ok"),
    ]
    kw: dict[str, Any] = {"max_tokens": 60, "token_counter": counter, "include_system": True}
    assert trim_messages(msgs, **kw) == msgs  # counted (and cached) before the edit
    content = cast("list[dict[str, Any]]", msgs[1].content)
    if edit == "append block":
        content.append({"type": "text", "text": "pasted log line\n" * 400})
    elif edit == "edit block text":
        content[0]["text"] = "pasted log line\n" * 400
    else:
        msgs[1].name = "a-name-of-many-tokens " * 100
    kept = trim_messages(msgs, **kw)
    assert kept == trim_messages(_fresh(msgs), **kw) == [msgs[0], msgs[2]]
    if counter == "approximate":
        assert kept == lc_trim_messages(msgs, **kw)


@pytest.mark.parametrize("counter", ["approximate", "gpt-4o"])
def test_tool_call_arguments_edited_in_place_are_counted_again(counter: str) -> None:
    call = {"name": "write", "args": {"path": "a.txt", "lines": ["small"]}, "id": "c1"}
    msgs: list[BaseMessage] = [HumanMessage("q"), AIMessage("", tool_calls=[call])]
    kw: dict[str, Any] = {"max_tokens": 60, "token_counter": counter}
    assert trim_messages(msgs, **kw) == msgs
    ai = cast("AIMessage", msgs[1])
    ai.tool_calls[0]["args"]["lines"].append("big " * 2000)  # nested, in place
    assert trim_messages(msgs, **kw) == trim_messages(_fresh(msgs), **kw) == []
    ai.tool_calls[0]["args"]["lines"].pop()
    assert trim_messages(msgs, **kw) == msgs  # and back


def test_only_the_message_edited_in_place_is_counted_again() -> None:
    from ctxengine.integrations import _lc_trim

    seen: list[BaseMessage] = []
    counter = _lc_trim.resolve_counter("gpt-4o")
    one = counter.one
    assert one is not None and counter.cache is not None

    def spy(m: BaseMessage) -> int:
        seen.append(m)
        return one(m)

    call = {"name": "f", "args": {"x": [1, {"y": "z"}]}, "id": "c1"}
    msgs: list[BaseMessage] = [
        HumanMessage([{"type": "text", "text": "look"}, MEDIA_BLOCKS["image_url"]], name="bob"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("done", tool_call_id="c1"),
    ]
    first = counter.cache.counts(msgs, spy)
    assert seen == msgs
    cast("AIMessage", msgs[1]).tool_calls[0]["args"]["x"][1]["y"] = "z" * 500
    second = counter.cache.counts(msgs, spy)
    assert seen == [*msgs, msgs[1]] and second[1] > first[1]
    assert counter.cache.counts(msgs, spy) == second
    assert len(seen) == 4  # unchanged since: nothing counted again


def test_same_result_as_langchain_on_real_sessions_without_tool_groups_cut() -> None:
    """On 1,000 messages of two real sessions (approximate counts, the last 16k tokens from a
    human turn), both keep the same messages: same semantics where no tool group is cut."""
    out: list[dict[str, Any]] = []
    for path in (
        TRANSCRIPTS / "pi-openclaw-session" / "large-session.jsonl",
        TRANSCRIPTS / "claude-code-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    ):
        out += [m for m in load(path).to("openai")["messages"] if m["role"] != "system"]
    messages = convert_to_messages(out[:1_000])
    kw: Any = {"max_tokens": 16_000, "include_system": True, "start_on": "human"}
    ours = trim_messages(messages, token_counter=count_tokens_approximately, **kw)
    theirs = lc_trim_messages(messages, token_counter=count_tokens_approximately, **kw)
    assert 0 < len(ours) < len(messages)
    assert ours == theirs


def _interleaved() -> list[Any]:
    """A call of two tools, its first result, a human turn, then its second result."""

    calls = [{"id": "c1", "name": "f", "args": {}}, {"id": "c2", "name": "g", "args": {}}]
    return [
        HumanMessage("h"),
        AIMessage("", tool_calls=calls),
        ToolMessage("r1", tool_call_id="c1"),
        HumanMessage("interrupt"),
        ToolMessage("r2", tool_call_id="c2"),
    ]


@pytest.mark.parametrize("strategy", ["last", "first"])
def test_a_result_apart_from_its_call_is_never_kept_without_it(strategy: str) -> None:
    # a human turn between a call and its second result: the result was a group of its own,
    # kept while its call was cut

    msgs = _interleaved()
    for budget in range(0, 120, 3):
        out = trim_messages(
            msgs, max_tokens=budget, token_counter=count_tokens_approximately, strategy=strategy
        )
        made = {c["id"] for m in out if isinstance(m, AIMessage) for c in m.tool_calls}
        assert all(m.tool_call_id in made for m in out if isinstance(m, ToolMessage)), (budget, out)
    whole = trim_messages(
        msgs, max_tokens=1000, token_counter=count_tokens_approximately, strategy=strategy
    )
    assert whole == msgs  # nothing cut: nothing left out


def test_leaving_out_an_orphan_keeps_end_on_and_an_orphan_given_stays() -> None:

    msgs = _interleaved()
    for budget in range(0, 120, 3):
        out = trim_messages(
            msgs, max_tokens=budget, token_counter=count_tokens_approximately, end_on="tool"
        )
        assert not out or isinstance(out[-1], ToolMessage), (budget, out)
    given = [HumanMessage("h"), ToolMessage("old", tool_call_id="gone"), AIMessage("a")]
    same = trim_messages(given, max_tokens=1000, token_counter=count_tokens_approximately)
    assert same == given  # a result whose call was never given is not the trim's to drop


def _unpaired(given: list[Any], out: list[BaseMessage]) -> tuple[set[Any], set[Any]]:
    """Calls of ``out`` that ``given`` answers and ``out`` does not, and results of ``out``
    whose call (made in ``given``) no earlier message of ``out`` made."""
    made = {c["id"] for m in given if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in given if isinstance(m, ToolMessage)}
    kept_results = {m.tool_call_id for m in out if isinstance(m, ToolMessage)}
    calls: set[Any] = set()
    orphans: set[Any] = set()
    for m in out:
        if isinstance(m, AIMessage):
            calls.update(c["id"] for c in m.tool_calls)
        elif isinstance(m, ToolMessage) and m.tool_call_id in made - calls:
            orphans.add(m.tool_call_id)
    return (calls & answered) - kept_results, orphans


def test_a_call_whose_result_is_cut_is_left_out_with_it() -> None:
    # a human turn between a call and its result: "first" kept the call and cut the result
    msgs: list[BaseMessage] = [
        HumanMessage("run the tests"),
        AIMessage("", tool_calls=[{"name": "bash", "args": {"cmd": "pytest"}, "id": "c1"}]),
        HumanMessage("and be quick"),
        ToolMessage("3 passed", tool_call_id="c1"),
        AIMessage("All 3 tests pass."),
        HumanMessage("thanks"),
    ]
    out = trim_messages(msgs, max_tokens=3, token_counter=len, strategy="first")
    assert out == [msgs[0], msgs[2]]
    # end_on cuts the result off the end: the call goes with it
    out = trim_messages(msgs[:4], max_tokens=100, token_counter=len, end_on="human")
    assert out == [msgs[0], msgs[2]]
    # a call the given messages never answered (the agent's pending call) stays
    pending = trim_messages(msgs[:2], max_tokens=100, token_counter=len, strategy="first")
    assert pending == msgs[:2]


def test_start_on_holds_after_an_orphan_is_left_out() -> None:
    msgs: list[BaseMessage] = [
        AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]),
        HumanMessage("hurry"),
        ToolMessage("result", tool_call_id="c1"),
        HumanMessage("next question"),
        AIMessage("answer"),
    ]
    kw: dict[str, Any] = {"max_tokens": 3, "token_counter": len, "strategy": "last"}
    assert trim_messages(msgs, start_on="tool", **kw) == []
    with_system = [SystemMessage("sys"), *msgs]
    out = trim_messages(
        with_system, start_on="tool", include_system=True, max_tokens=4, token_counter=len
    )
    assert out == [with_system[0]]


def _interleaved_histories() -> list[list[BaseMessage]]:
    def call(*ids: str) -> AIMessage:
        return AIMessage("calling", tool_calls=[{"name": "f", "args": {}, "id": i} for i in ids])

    def result(i: str) -> ToolMessage:
        return ToolMessage(f"result {i}", tool_call_id=i)

    return [
        [
            SystemMessage("sys"),
            HumanMessage("a"),
            call("c1", "c2"),
            result("c1"),
            HumanMessage("interrupt"),
            result("c2"),
            AIMessage("done"),
            HumanMessage("b"),
            call("c3"),
            HumanMessage("wait"),
            result("c3"),
        ],
        [
            call("c1"),
            HumanMessage("h1"),
            result("c1"),
            call("c2"),
            result("c2"),
            HumanMessage("h2"),
            call("c3", "c4"),
            result("c4"),
            AIMessage("thinking"),
            result("c3"),
            HumanMessage("h3"),
            AIMessage("end"),
        ],
    ]


SWEEP_OPTIONS: list[dict[str, Any]] = [
    {"strategy": "first"},
    {"strategy": "first", "end_on": "human"},
    {"strategy": "first", "end_on": ["ai", "tool"]},
    {"strategy": "last"},
    {"strategy": "last", "include_system": True},
    {"strategy": "last", "start_on": "human"},
    {"strategy": "last", "start_on": "tool", "include_system": True},
    {"strategy": "last", "start_on": "ai", "end_on": "human", "include_system": True},
    {"strategy": "last", "end_on": "tool"},
]


@pytest.mark.parametrize("history", range(2))
def test_no_budget_separates_a_call_from_its_result(history: int) -> None:
    msgs = _interleaved_histories()[history]
    for options, budget in itertools.product(SWEEP_OPTIONS, range(len(msgs) + 1)):
        out = trim_messages(msgs, max_tokens=budget, token_counter=len, **options)
        where = (options, budget, out)
        assert _unpaired(msgs, out) == (set(), set()), where
        system = bool(options.get("include_system")) and out[:1] == [msgs[0]] == msgs[:1]
        system = system and isinstance(msgs[0], SystemMessage)
        assert len(out) <= budget or out == [msgs[0]]  # include_system keeps the system message
        body = out[1:] if system else out
        if options.get("start_on") and body:
            assert is_type(body[0], options["start_on"]), where
        if options.get("end_on") and body:
            assert is_type(body[-1], options["end_on"]), where
        it = iter(msgs)
        assert all(any(m is g for g in it) for m in out)  # the caller's objects, in order


def test_a_text_document_is_counted_by_its_text_as_the_engine_reads_it() -> None:
    """An Anthropic document with a text source was charged a flat 765 tokens (as a PDF),
    while the importer reads it as text: a 36,000-token document passed a 2,000-token trim."""

    big = "the quick brown fox jumps over the lazy dog " * 4000
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": big},
    }
    messages = [
        HumanMessage(content=[{"type": "text", "text": "summarize"}, document]),
        AIMessage("ok"),
        HumanMessage("and?"),
    ]
    kept = trim_messages(messages, max_tokens=2000, token_counter="gpt-4o", strategy="last")
    assert kept == messages[1:]
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
    }
    small = [HumanMessage(content=[{"type": "text", "text": "read"}, pdf]), AIMessage("ok")]
    room = 2000 + pdf_page_tokens("openai", "gpt-4o")  # a PDF of one page, as media
    assert trim_messages(small, max_tokens=room, token_counter="gpt-4o", strategy="last") == small


#: A call whose arguments did not parse, as LangChain's parsers keep it (``invalid_tool_calls``,
#: the raw text in ``args``), and the error result ``create_agent`` adds for it
#: (``langchain/agents/factory.py``: ``_patch_invalid_tool_calls``). ChatOpenAI sends the call
#: in ``tool_calls`` (langchain_openai ``_convert_message_to_dict``,
#: ``_lc_invalid_tool_call_to_openai_tool_call``), so a result kept without it is an orphan the
#: API rejects.
_INVALID = {
    "type": "invalid_tool_call",
    "name": "read",
    "args": '{"path": "a.py"',
    "id": "bad1",
    "error": "Expecting ',' delimiter",
}


def _invalid_history() -> list[BaseMessage]:
    return [
        HumanMessage("read a.py " * 30),
        AIMessage("I will read it. " * 10, invalid_tool_calls=[dict(_INVALID)]),
        ToolMessage(
            "Tool call read with id bad1 could not be executed - arguments were malformed",
            tool_call_id="bad1",
            status="error",
        ),
        HumanMessage("try again"),
    ]


@pytest.mark.parametrize("counter", ["gpt-4o", "approximate"])
@pytest.mark.parametrize("strategy", ["last", "first"])
def test_an_invalid_call_and_its_error_result_are_kept_or_cut_together(
    counter: str, strategy: str
) -> None:
    # "last" kept ['tool', 'human'] at 30 to 80 tokens: the error result without its call
    msgs = _invalid_history()
    seen = set()
    for budget in range(0, 200, 5):
        out = trim_messages(msgs, max_tokens=budget, token_counter=counter, strategy=strategy)
        kinds = [m.type for m in out]
        seen.add(tuple(kinds))
        assert ("tool" in kinds) == ("ai" in kinds), (budget, kinds)
        assert not _unpaired_invalid(msgs, out), (budget, kinds)
    assert len(seen) > 2  # the budgets cover cuts on both sides of the pair


def _unpaired_invalid(given: list[BaseMessage], out: list[BaseMessage]) -> bool:
    calls = {c["id"] for m in out if isinstance(m, AIMessage) for c in m.invalid_tool_calls}
    results = {m.tool_call_id for m in out if isinstance(m, ToolMessage)}
    return calls != results


def test_an_invalid_call_answered_after_a_human_turn_is_left_out_with_its_result() -> None:
    msgs: list[BaseMessage] = [
        HumanMessage("read a.py"),
        AIMessage("", invalid_tool_calls=[dict(_INVALID)]),
        HumanMessage("and be quick"),
        ToolMessage("could not be executed", tool_call_id="bad1", status="error"),
        AIMessage("Retrying."),
    ]
    first = trim_messages(msgs, max_tokens=3, token_counter=len, strategy="first")
    assert first == [msgs[0], msgs[2]]  # the call kept, its result cut: the call goes too
    last = trim_messages(msgs, max_tokens=2, token_counter=len)
    assert last == [msgs[4]]  # the result kept, its call cut: the result goes too


def test_exact_counter_counts_an_invalid_call_as_chat_openai_sends_it() -> None:
    from ctxengine.integrations._lc_trim import resolve_counter

    msgs = _invalid_history()[1:3]
    sent = [
        {
            "role": "assistant",
            "content": "I will read it. " * 10,
            "tool_calls": [
                {
                    "type": "function",
                    "id": "bad1",
                    "function": {"name": "read", "arguments": '{"path": "a.py"'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "bad1", "content": msgs[1].content},
    ]
    counter = resolve_counter("gpt-4o")
    assert counter.total(msgs) == count_messages(sent, model="gpt-4o")
    # the cached count follows an edit of the raw arguments in place
    cast("AIMessage", msgs[0]).invalid_tool_calls[0]["args"] = '{"path": "' + "b" * 300
    sent[0]["tool_calls"][0]["function"]["arguments"] = '{"path": "' + "b" * 300
    assert counter.total(msgs) == count_messages(sent, model="gpt-4o")
