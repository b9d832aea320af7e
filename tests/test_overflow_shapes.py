"""The provider-error classifier on error shapes beyond a plain status error.

Each row's text is the one a user reported (issue named next to it) or the one the server's
source writes; exceptions and stream events are built the way each SDK builds them from the
wire (``_make_status_error_from_response``, ``construct_type`` for stream events).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
from agents.models._response_terminal import response_terminal_failure_error
from botocore.exceptions import ClientError
from openai._models import construct_type
from openai.types.responses import Response, ResponseStreamEvent

from ctxengine.overflow import classify_provider_error, is_context_overflow

OVERFLOW = "context_overflow"


def openai_error(status: int, body: dict[str, Any], url: str) -> openai.APIStatusError:
    """As the OpenAI client raises it from an HTTP response carrying ``body``."""
    response = httpx.Response(status, json=body, request=httpx.Request("POST", url))
    client = openai.OpenAI(api_key="test", base_url=url.rsplit("/v1/", 1)[0] + "/v1")
    err = client._make_status_error_from_response(response)
    assert isinstance(err, openai.APIStatusError)
    return err


def anthropic_error(status: int, etype: str, message: str) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": etype, "message": message}}
    request = httpx.Request("POST", "https://api.anthropic.com/v1/messages")
    client = anthropic.Anthropic(api_key="test")
    err = client._make_status_error_from_response(
        httpx.Response(status, json=body, request=request)
    )
    assert isinstance(err, anthropic.APIStatusError)
    return err


def bedrock_error(code: str, message: str, operation: str = "Converse") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}},
        operation,
    )


def check(error: Any, kind: str, numbers: dict[str, int | None]) -> None:
    info = classify_provider_error(error)
    assert info.kind == kind, info
    assert is_context_overflow(error) is (kind in (OVERFLOW, "compaction_overflow"))
    for field, value in numbers.items():
        assert getattr(info, field) == value, f"{field} of {info}"


# -- OpenAI Responses streams --------------------------------------------------------------------

# The raw ``response.failed`` event of an overflow, as openai/codex PR 4675 records it (codex
# treats ``error.code == "context_length_exceeded"`` there as its context-window error).
FAILED_EVENT: dict[str, Any] = {
    "type": "response.failed",
    "sequence_number": 3,
    "response": {
        "id": "resp_context_window",
        "object": "response",
        "created_at": 1759510079,
        "status": "failed",
        "background": False,
        "error": {
            "code": "context_length_exceeded",
            "message": "Your input exceeds the context window of this model. Please adjust your "
            "input and try again.",
        },
        "usage": None,
        "user": None,
        "metadata": {},
    },
}


def test_a_failed_responses_stream_event_is_an_overflow() -> None:
    """A streamed Responses call does not raise: the SDK yields the ``response.failed`` event
    (``construct_type``, as ``openai._streaming.Stream`` does), and users pass it on."""
    event = construct_type(type_=ResponseStreamEvent, value=FAILED_EVENT)
    assert type(event).__name__ == "ResponseFailedEvent"
    check(event, OVERFLOW, {})
    assert classify_provider_error(event).code == "context_length_exceeded"
    check(event.response, OVERFLOW, {})  # the failed Response itself
    check(FAILED_EVENT, OVERFLOW, {})  # the event as parsed JSON
    assert classify_provider_error(FAILED_EVENT).code == "context_length_exceeded"


def test_a_responses_error_event_is_read_through_its_code() -> None:
    """The stream's ``error`` event (openai ``ResponseErrorEvent``: code, message, param)."""
    event = construct_type(
        type_=ResponseStreamEvent,
        value={
            "type": "error",
            "sequence_number": 1,
            "code": "context_length_exceeded",
            "message": FAILED_EVENT["response"]["error"]["message"],
            "param": "input",
        },
    )
    assert type(event).__name__ == "ResponseErrorEvent"
    check(event, OVERFLOW, {})


def test_a_response_speaks_only_through_its_error() -> None:
    """A completed or incomplete response is no error, even when its output quotes one."""
    quoted = "Anthropic answers: prompt is too long: 208423 tokens > 200000 maximum"
    completed = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1759510079,
        "status": "completed",
        "error": None,
        "model": "gpt-5",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": quoted, "annotations": []}],
            }
        ],
    }
    check(completed, "other", {})
    check(construct_type(type_=Response, value=completed), "other", {})
    incomplete = {
        "type": "response.incomplete",
        "sequence_number": 9,
        "response": {
            **completed,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
        },
    }
    check(construct_type(type_=ResponseStreamEvent, value=incomplete), "other", {})


def test_the_agents_sdk_terminal_failure_is_an_overflow() -> None:
    """openai-agents raises ModelBehaviorError for a ``response.failed`` (its own formatter)."""
    event = construct_type(type_=ResponseStreamEvent, value=FAILED_EVENT)
    err = response_terminal_failure_error("response.failed", event.response)
    check(err, OVERFLOW, {})


# -- look-alikes that shortening the conversation cannot fix ---------------------------------------

URL = "https://api.openai.com/v1/chat/completions"
VLLM = "http://127.0.0.1:8000/v1/chat/completions"

TOO_LONG_ROWS: list[tuple[str, Any, str]] = [
    (  # home-assistant/core issue 121325: a tool's name
        "tool name",
        openai_error(
            400,
            {
                "error": {
                    "message": "Invalid 'tools[11].function.name': string too long. Expected a "
                    "string with maximum length 64, but got a string with length 74 instead.",
                    "type": "invalid_request_error",
                    "param": "tools[11].function.name",
                    "code": "string_above_max_length",
                }
            },
            URL,
        ),
        "other",
    ),
    (  # AnswerDotAI/fastllm issue 45: a tool call's id replayed from another provider
        "call id",
        openai_error(
            400,
            {
                "error": {
                    "message": "Invalid 'input[95].call_id': string too long. Expected a string "
                    "with maximum length 64, but got a string with length 116 instead.",
                    "type": "invalid_request_error",
                    "param": "input[95].call_id",
                    "code": "string_above_max_length",
                }
            },
            "https://api.openai.com/v1/responses",
        ),
        "other",
    ),
    (  # the same error read as the SDK's str() (home-assistant/core issue 121325)
        "tool name as text",
        "Error code: 400 - {'error': {'message': \"Invalid 'tools[11].function.name': string "
        "too long. Expected a string with maximum length 64, but got a string with length 74 "
        "instead.\", 'type': 'invalid_request_error', 'param': 'tools[11].function.name', "
        "'code': 'string_above_max_length'}}",
        "other",
    ),
    (  # VectorlyApp/bluebox issue 31: a message's content over 10 MB is an overflow
        "message content",
        openai_error(
            400,
            {
                "error": {
                    "message": "Invalid 'input[0].content': string too long. Expected a string "
                    "with maximum length 10485760, but got a string with length 62114761 "
                    "instead.",
                    "type": "invalid_request_error",
                    "param": "input[0].content",
                    "code": "string_above_max_length",
                }
            },
            "https://api.openai.com/v1/responses",
        ),
        OVERFLOW,
    ),
    (  # FlowiseAI/Flowise issue 5085, as the text the user saw
        "message content as text",
        "400 Invalid 'messages[7].content': string too long. Expected a string with maximum "
        "length 10485760, but got a string with length 10624990 instead.",
        OVERFLOW,
    ),
]


@pytest.mark.parametrize(
    ("name", "error", "kind"), TOO_LONG_ROWS, ids=[r[0] for r in TOO_LONG_ROWS]
)
def test_a_string_too_long_is_an_overflow_only_for_content(
    name: str, error: Any, kind: str
) -> None:
    check(error, kind, {})


def vllm_max_tokens(max_tokens: int, window: int, prompt: int) -> openai.APIStatusError:
    """vLLM's check of ``max_tokens`` against the window (serving_engine ``_validate_input``),
    with the text users quote, e.g. "'max_tokens' or 'max_completion_tokens' is too large:
    8000. This model's maximum context length is 4096 tokens and your request has 2778 input
    tokens (8000 > 4096 - 2778)."."""
    message = (
        f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
        f"maximum context length is {window} tokens and your request has {prompt} input tokens "
        f"({max_tokens} > {window} - {prompt})."
    )
    body = {"object": "error", "message": message, "type": "BadRequestError", "param": None}
    return openai_error(400, {**body, "code": 400}, VLLM)


def test_max_tokens_alone_over_the_window_is_not_an_overflow() -> None:
    # reported: max_tokens 8000 against a 4096 window with 2778 input tokens
    check(vllm_max_tokens(8000, 4096, 2778), "other", {"tokens": None, "limit": None})
    # Ice-Hazymoon/openai-scf-proxy issue 25: a large completion that still leaves room for
    # a shorter input is an overflow
    check(
        openai_error(
            400,
            {
                "error": {
                    "code": "context_length_exceeded",
                    "message": "This model's maximum context length is 4096 tokens. However, you "
                    "requested 4112 tokens (112 in the messages, 4000 in the completion). Please "
                    "reduce the length of the messages or completion.",
                    "param": "messages",
                    "type": "invalid_request_error",
                }
            },
            URL,
        ),
        OVERFLOW,
        {"limit": 4096, "requested": 4112, "tokens": 112},
    )


def test_max_tokens_plus_a_long_input_is_an_overflow_with_its_numbers() -> None:
    # reported: 16384 output tokens on a 65536 window with 52189 input tokens
    err = vllm_max_tokens(16384, 65536, 52189)
    check(err, OVERFLOW, {"tokens": 52189, "limit": 65536, "requested": 52189 + 16384})
    assert classify_provider_error(err).over_by == 52189 + 16384 - 65536


def test_other_output_limits_are_not_overflows() -> None:
    # vercel/ai issue 2772: Bedrock's output cap
    check(
        bedrock_error(
            "ValidationException",
            "The maximum tokens you requested exceeds the model limit of 4096. Try again with a "
            "maximum tokens value that is lower than 4096.",
            "ConverseStream",
        ),
        "other",
        {},
    )
    # Hugging Face TGI's router (validation.rs ``MaxNewTokens``)
    check(
        "huggingface_hub.errors.ValidationError: Input validation error: `max_new_tokens` must "
        "be <= 4096. Given: 8000",
        "other",
        {},
    )


# -- overflow texts of servers and wrappers, and the numbers they carry ---------------------------


class ContextWindowExceededError(openai.BadRequestError):
    """LiteLLM's class (litellm/exceptions.py): an ``openai.BadRequestError`` whose message
    starts "litellm.ContextWindowExceededError: "; LiteLLM raises it for provider texts of its
    own list (exception_mapping_utils.py: Replicate's "input is too long", among others)."""

    def __init__(self, message: str) -> None:
        response = httpx.Response(400, request=httpx.Request("POST", "https://api.openai.com/v1"))
        super().__init__(
            f"litellm.ContextWindowExceededError: {message}", response=response, body=None
        )


NUMBER_ROWS: list[tuple[str, Any, str, dict[str, int | None]]] = [
    (
        "litellm class",
        ContextWindowExceededError("ReplicateException - input is too long"),
        OVERFLOW,
        {},
    ),
    (  # cline/cline issue 5140 (Cerebras)
        "cerebras",
        "400 Please reduce the length of the messages or completion. Current length is 42328 "
        "while limit is 40000",
        OVERFLOW,
        {"requested": 42328, "limit": 40000, "over_by": 2328},
    ),
    (  # text-generation-inference router/src/validation.rs ``MaxTotalTokens``, raised by
        # huggingface_hub (barun-saha/slide-deck-ai issue 44)
        "tgi total",
        "huggingface_hub.errors.ValidationError: Input validation error: `inputs` tokens + "
        "`max_new_tokens` must be <= 32768. Given: 32000 `inputs` tokens and 1024 "
        "`max_new_tokens`",
        OVERFLOW,
        {"tokens": 32000, "limit": 32768, "requested": 33024},
    ),
    (  # text-generation-inference router/src/validation.rs ``InputLength``
        "tgi input",
        "huggingface_hub.errors.ValidationError: Input validation error: `inputs` must have "
        "less than 4096 tokens. Given: 5000",
        OVERFLOW,
        {"tokens": 5000, "limit": 4096},
    ),
    (  # sjzar/chatlog issue 30
        "max_seq_len",
        "400 length of prompt_tokens (163280) must be less than max_seq_len (32768).",
        OVERFLOW,
        {"tokens": 163280, "limit": 32768},
    ),
    (  # arkavo-org/arkavo-edge issue 371: Gemini without the count
        "gemini limit only",
        'Gemini streaming error: API error: HTTP 400 Bad Request: {"error": {"code": 400, '
        '"message": "The input token count exceeds the maximum number of tokens allowed '
        '(1048576).", "status": "INVALID_ARGUMENT"}}',
        OVERFLOW,
        {"limit": 1048576},
    ),
    (  # ryanadoty/Amazon-Bedrock-Amazon-RDS-POC issue 9
        "bedrock input maxLength",
        bedrock_error(
            "ValidationException",
            "Malformed input request: expected maxLength: 42000, actual: 46735, please "
            "reformat your input and try again.",
            "InvokeModel",
        ),
        OVERFLOW,
        {},
    ),
    (  # vLLM's renderer (entrypoints/renderer.py ``_create_tokens_prompt``) when the prompt
        # alone fills the window; newer servers add "(parameter=..., value=...)"
        "vllm input tokens",
        openai_error(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 32768 tokens. However, "
                    "your request has 40000 input tokens. Please reduce the length of the input "
                    "messages. (parameter=input_tokens, value=40000)",
                    "type": "BadRequestError",
                    "param": "input_tokens",
                    "code": 400,
                }
            },
            VLLM,
        ),
        OVERFLOW,
        {"tokens": 40000, "limit": 32768, "over_by": 7232},
    ),
    (  # Ollama with truncate false (ollama/ollama PR 17944 documents the error)
        "ollama excess",
        httpx.HTTPStatusError(
            "Client error '400 Bad Request'",
            request=httpx.Request("POST", "http://127.0.0.1:11434/api/chat"),
            response=httpx.Response(
                400,
                text='{"error":"prompt too long; exceeded max context length by 1254 tokens"}',
                request=httpx.Request("POST", "http://127.0.0.1:11434/api/chat"),
            ),
        ),
        OVERFLOW,
        {"over_by": 1254, "excess": 1254},
    ),
]


@pytest.mark.parametrize(
    ("name", "error", "kind", "numbers"), NUMBER_ROWS, ids=[r[0] for r in NUMBER_ROWS]
)
def test_overflow_texts_and_numbers(
    name: str, error: Any, kind: str, numbers: dict[str, int | None]
) -> None:
    check(error, kind, numbers)


# -- billing, quotas and statuses read from text --------------------------------------------------

NOT_OVERFLOW_ROWS: list[tuple[str, Any, str, int | None]] = [
    # continuedev/continue issue 9942 (DeepSeek)
    ("deepseek balance", "402 Insufficient Balance", "billing", 402),
    (  # Gitlawb/openclaude issue 1125 (OpenRouter)
        "openrouter credits",
        'API Error: 402 {"error":{"message":"This request requires more credits, or fewer '
        "max_tokens. You requested up to 32000 tokens, but can only afford 27342. To increase, "
        'visit https://openrouter.ai/settings/credits and upgrade to a paid account","code":402,'
        '"metadata":{"provider_name":null}}}',
        "billing",
        402,
    ),
    (  # anthropics/claude-code issue 2127: the organization's spend limit, a 400
        "anthropic usage limits",
        anthropic_error(
            400,
            "invalid_request_error",
            "You have reached your specified API usage limits. You will regain access on "
            "2025-07-01 at 00:00 UTC.",
        ),
        "billing",
        400,
    ),
    (  # botocore: BedrockRuntime ServiceQuotaExceededException, "resubmit your request later"
        "bedrock service quota",
        bedrock_error(
            "ServiceQuotaExceededException",
            "Your request exceeds the service quota for your account. You can view your quotas "
            "at Viewing service quotas. You can resubmit your request later.",
        ),
        "rate_limit",
        400,
    ),
    (  # anthropics/claude-code issue 1440 (Vertex AI)
        "vertex quota",
        'API Error (429 {"error":{"code":429,"message":"Quota exceeded for '
        "aiplatform.googleapis.com/online_prediction_input_tokens_per_minute_per_base_model "
        "with base model: anthropic-claude-opus-4. Please submit a quota increase request. "
        'https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.","status":'
        '"RESOURCE_EXHAUSTED"}})',
        "rate_limit",
        429,
    ),
]


@pytest.mark.parametrize(
    ("name", "error", "kind", "status"), NOT_OVERFLOW_ROWS, ids=[r[0] for r in NOT_OVERFLOW_ROWS]
)
def test_billing_and_quota_limits(name: str, error: Any, kind: str, status: int) -> None:
    check(error, kind, {"status": status})


# -- chained exceptions ---------------------------------------------------------------------------

RATE_LIMITED: dict[str, Any] = {
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-uOtiSEwvUnroadaOnJJquBEC on "
        "tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
TOO_LONG: dict[str, Any] = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 202868 tokens (202767 in the messages, 101 in the functions). Please reduce "
        "the length of the messages or functions.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def raised_while_handling(first: BaseException, second: BaseException) -> BaseException:
    """``second`` raised inside ``except`` of ``first``: Python sets ``second.__context__``
    (implicit chaining, "During handling of the above exception, another exception
    occurred"), as a retry written in an ``except`` block does."""
    try:
        try:
            raise first
        except type(first):
            raise second  # noqa: B904 - the implicit chaining is the point
    except BaseException as exc:
        return exc
    raise AssertionError("unreachable")


def test_an_overflow_on_the_retry_of_a_rate_limited_call_is_an_overflow() -> None:
    rate = openai_error(429, RATE_LIMITED, URL)
    over = openai_error(400, TOO_LONG, URL)
    err = raised_while_handling(rate, over)
    assert err.__context__ is rate
    check(err, OVERFLOW, {"limit": 128000, "requested": 202868, "tokens": 202767})
    # and the other way round: the last failure is the rate limit
    err = raised_while_handling(
        openai_error(400, TOO_LONG, URL), openai_error(429, RATE_LIMITED, URL)
    )
    check(err, "rate_limit", {"status": 429})


def test_a_wrapper_raised_while_handling_an_overflow_still_finds_it() -> None:
    """A framework raising its own error in ``except`` (no ``from``) has no status: the error
    it was handling speaks for it."""
    err = raised_while_handling(openai_error(400, TOO_LONG, URL), RuntimeError("agent step failed"))
    check(err, OVERFLOW, {"limit": 128000, "status": 400})


def test_an_overflow_that_suggests_compacting_is_not_a_compaction_overflow() -> None:
    """Claude Code ends an overflow of the conversation with its command hint ("Run /compact
    to compact & continue"); any "compact" in the text made it an overflow of the compaction
    itself, whose ladder skips the compaction retries the conversation needs."""
    text = (
        'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":'
        '"prompt is too long: 210000 tokens > 200000 maximum"}} · Run /compact to compact & '
        "continue"
    )
    info = classify_provider_error(text)
    assert info.kind == OVERFLOW and (info.tokens, info.limit) == (210000, 200000)
    during = "Error: Error during compaction: Error: Conversation too long."
    assert classify_provider_error(during).kind == "compaction_overflow"
    assert classify_provider_error(text, stage="compaction").kind == "compaction_overflow"


def test_an_openrouter_keys_spend_limit_is_billing_not_other() -> None:
    """OpenRouter refuses a prompt that the key's remaining monthly limit cannot pay for, in
    tokens ("Prompt tokens limit exceeded: N > M. To increase, visit .../settings/keys and
    create a key with a higher monthly limit", anomalyco/opencode issue 12219): a matter of
    money, which neither a retry nor a compaction settles for good."""
    text = (
        "Error code: 402 - Prompt tokens limit exceeded: 230799 > 91442. To increase, visit "
        "https://openrouter.ai/settings/keys and create a key with a higher monthly limit"
    )
    assert classify_provider_error(text).kind == "billing"
    assert classify_provider_error(text.replace("402", "400")).kind == "billing"
