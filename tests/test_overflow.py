"""The provider-error classifier on real error texts, positive and negative.

Every text below was reported by users of these providers (issue trackers of the SDKs and of
agents built on them); numbers and ids are as reported. SDK errors are real exception objects
built the way each SDK builds them from an ``httpx.Response``.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from botocore.exceptions import ClientError
from google.genai import errors as genai_errors

from ctxengine.overflow import ProviderErrorInfo, classify_provider_error, is_context_overflow


def _response(status: int, body: Any, url: str) -> httpx.Response:
    return httpx.Response(status, json=body, request=httpx.Request("POST", url))


def openai_error(status: int, body: dict[str, Any]) -> openai.APIStatusError:
    """As the OpenAI client raises it: ``body`` is the ``error`` object of the response."""
    response = _response(status, {"error": body}, "https://api.openai.com/v1/chat/completions")
    client = openai.OpenAI(api_key="test", base_url="https://api.openai.com/v1")
    err = client._make_status_error_from_response(response)  # the SDK's own constructor path
    assert isinstance(err, openai.APIStatusError)
    return err


def compat_error(status: int, body: dict[str, Any]) -> openai.APIStatusError:
    """An OpenAI-compatible server (vLLM, llama.cpp) answering through the OpenAI SDK."""
    response = _response(status, body, "http://127.0.0.1:8000/v1/chat/completions")
    client = openai.OpenAI(api_key="test", base_url="http://127.0.0.1:8000/v1")
    err = client._make_status_error_from_response(response)
    assert isinstance(err, openai.APIStatusError)
    return err


def anthropic_error(status: int, etype: str, message: str) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": etype, "message": message}}
    response = _response(status, body, "https://api.anthropic.com/v1/messages")
    client = anthropic.Anthropic(api_key="test")
    err = client._make_status_error_from_response(response)
    assert isinstance(err, anthropic.APIStatusError)
    return err


def gemini_error(code: int, message: str, status: str) -> genai_errors.APIError:
    body = {"error": {"code": code, "message": message, "status": status}}
    return genai_errors.ClientError(code, body)


def bedrock_error(code: str, message: str, status: int, operation: str = "Converse") -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        operation,
    )


def http_error(status: int, text: str, url: str) -> httpx.HTTPStatusError:
    """A raw HTTP error (Ollama, Mistral or another server called with httpx)."""
    request = httpx.Request("POST", url)
    response = httpx.Response(status, text=text, request=request)
    return httpx.HTTPStatusError(
        f"Server error '{status}' for url '{url}'", request=request, response=response
    )


OVERFLOW = "context_overflow"
ROWS: list[tuple[str, Any, str, dict[str, int]]] = [
    # -- positives -----------------------------------------------------------------------------
    (
        "anthropic prompt too long",
        anthropic_error(
            400, "invalid_request_error", "prompt is too long: 208423 tokens > 200000 maximum"
        ),
        OVERFLOW,
        {"tokens": 208423, "limit": 200000},
    ),
    (
        "anthropic string",
        "prompt is too long: 208423 tokens > 200000 maximum",
        OVERFLOW,
        {"tokens": 208423, "limit": 200000},
    ),
    (
        "anthropic max_tokens",
        anthropic_error(
            400,
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: "
            "156321 + 48384 > 200000, decrease input length or `max_tokens` and try again",
        ),
        OVERFLOW,
        {"tokens": 156321, "requested": 204705, "limit": 200000},
    ),
    (
        "anthropic 413",
        anthropic_error(413, "request_too_large", "Request exceeds the maximum size"),
        OVERFLOW,
        {},
    ),
    ("anthropic code alone", "request_too_large", OVERFLOW, {}),
    (
        "anthropic via gateway",
        "LLM request failed: status 413 Request Entity Too Large "
        '(url=http://169.254.169.254/gateway/llm/_/gateway/anthropic/v1/messages): {"error": '
        '{"type": "request_too_large", "message": "Request exceeds the maximum size"}}',
        OVERFLOW,
        {},
    ),
    (
        "openai context_length_exceeded",
        openai_error(
            400,
            {
                "message": "This model's maximum context length is 128000 tokens. However, your "
                "messages resulted in 202868 tokens (202767 in the messages, 101 in the functions). "
                "Please reduce the length of the messages or functions.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            },
        ),
        OVERFLOW,
        {"limit": 128000, "requested": 202868, "tokens": 202767},
    ),
    (
        "openai legacy string",
        "openai.error.InvalidRequestError: This model's maximum context "
        "length is 4097 tokens. However, you requested 4268 tokens (4012 in the messages, 256 in "
        "the completion). Please reduce the length of the messages or completion.",
        OVERFLOW,
        {"limit": 4097, "requested": 4268, "tokens": 4012},
    ),
    (
        "openai responses",
        openai_error(
            400,
            {
                "message": "Your input exceeds the context window of this model. Please adjust your "
                "input and try again.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            },
        ),
        OVERFLOW,
        {},
    ),
    (
        "openrouter",
        "Error: 400 This endpoint's maximum context length is 32768 tokens. However, "
        "you requested about 42832 tokens (42832 of text input). Please reduce the length of either "
        'one, or use the "middle-out" transform to compress your prompt automatically.',
        OVERFLOW,
        {"limit": 32768, "requested": 42832, "tokens": 42832},
    ),
    ("413 plain", "413 Request Entity Too Large", OVERFLOW, {}),
    (
        "gemini input token count",
        gemini_error(
            400,
            "The input token count (1054016) exceeds the maximum number of tokens allowed "
            "(1048576).",
            "INVALID_ARGUMENT",
        ),
        OVERFLOW,
        {"tokens": 1054016, "limit": 1048576},
    ),
    (
        "vertex ai input token count",  # gemini-cli issue 19727, as google.genai words it
        gemini_error(
            400,
            "Unable to submit request because the input token count is 1251952 but model only "
            "supports up to 1048576. Reduce the input token count and try again. You can also "
            "use the CountTokens API to calculate prompt token count and billable characters.",
            "INVALID_ARGUMENT",
        ),
        OVERFLOW,
        {"tokens": 1251952, "limit": 1048576},
    ),
    (
        "cohere too many tokens",
        "status_code: 400, body: {'message': 'too many tokens: total number of tokens in the "
        "prompt cannot exceed 4081 - received 4500. Try using a shorter prompt, or enabling "
        "prompt truncating. See https://docs.cohere.com/reference/chat for more details.'}",
        OVERFLOW,
        {"tokens": 4500, "limit": 4081},
    ),
    (
        "gemini request body",
        gemini_error(
            413,
            "Maximum request body size 1048576 exceeded, actual body size 1056562",
            "Request Entity Too Large",
        ),
        OVERFLOW,
        {},
    ),
    (
        "gemini request payload size",
        gemini_error(
            400,
            "Request payload size exceeds the limit: 20971520 bytes.",
            "INVALID_ARGUMENT",
        ),
        OVERFLOW,
        {},
    ),
    (
        "vllm total requested",
        "This model's maximum context length of 131072 tokens. However, you requested a total "
        "of 140000 tokens. Please reduce the length of the input messages.",
        OVERFLOW,
        {"limit": 131072, "requested": 140000},
    ),
    (
        "openai configured limit",
        openai_error(
            400,
            {
                "message": "Input tokens exceed the configured limit of 272000 tokens. Your "
                "messages resulted in 301450 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            },
        ),
        OVERFLOW,
        {"limit": 272000, "requested": 301450},
    ),
    (
        "bedrock input too long",
        bedrock_error(
            "ValidationException",
            "Input is too long for requested model.",
            400,
            "InvokeModelWithResponseStream",
        ),
        OVERFLOW,
        {},
    ),
    (
        "bedrock claude",
        bedrock_error(
            "ValidationException",
            "The model returned the following errors: prompt is too long: "
            "200049 tokens > 200000 maximum",
            400,
        ),
        OVERFLOW,
        {"tokens": 200049, "limit": 200000},
    ),
    (
        "mistral",
        http_error(
            400,
            json.dumps(
                {
                    "object": "error",
                    "message": "Prompt contains 40153 tokens and 0 draft tokens, too "
                    "large for model with 32768 maximum context length",
                    "type": "invalid_request_error",
                    "code": 3051,
                }
            ),
            "https://api.mistral.ai/v1/chat/completions",
        ),
        OVERFLOW,
        {"tokens": 40153, "limit": 32768},
    ),
    (
        "ollama",
        http_error(
            400,
            '{"error":"prompt too long; exceeded max context length by 1254 tokens"}',
            "http://127.0.0.1:11434/api/chat",
        ),
        OVERFLOW,
        {},
    ),
    (
        "vllm",
        compat_error(
            400,
            {
                "object": "error",
                "message": "This model's maximum context length is 16384 tokens. "
                "However, you requested 122946 tokens (112946 in the messages, 10000 in the completion). "
                "Please reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        ),
        OVERFLOW,
        {"limit": 16384, "requested": 122946, "tokens": 112946},
    ),
    (
        "vllm v0.8+",
        "This model's maximum context length is 131072 tokens. However, you requested "
        "128000 output tokens and your prompt contains at least 3073 input tokens, for a total of "
        "at least 131073 tokens.",
        OVERFLOW,
        {"limit": 131072, "tokens": 3073, "requested": 131073},
    ),
    (
        "llama.cpp server",
        compat_error(
            400,
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size. try increasing "
                    "the context size or enable context shift",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 14429,
                    "n_ctx": 8192,
                }
            },
        ),
        OVERFLOW,
        {"tokens": 14429, "limit": 8192},
    ),
    (
        "llama-cpp-python",
        "Exception: Requested tokens (2285) exceed context window of 2048",
        OVERFLOW,
        {"tokens": 2285, "limit": 2048},
    ),
    (
        "sglang",
        "Error: Input length (160062 tokens) exceeds the maximum allowed length (59862 tokens).",
        OVERFLOW,
        {"tokens": 160062, "limit": 59862},
    ),
    (
        "compaction overflow",
        "Error: Error during compaction: Error: Conversation too long. "
        "Press esc twice to go up a few messages and try again.",
        "compaction_overflow",
        {},
    ),
    # -- negatives -----------------------------------------------------------------------------
    ("429 plain", "429 Too Many Requests", "rate_limit", {}),
    (
        "openai TPM",
        openai_error(
            429,
            {
                "message": "Rate limit reached for gpt-4o in organization org-uOtiSEwvUnroadaOnJJquBEC on "
                "tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            },
        ),
        "rate_limit",
        {},
    ),
    (
        "openai request too large for TPM",
        openai_error(
            429,
            {
                "message": "Request too large for gpt-4o in organization org-78asdf87asdf9aaa8976 on "
                "tokens per min (TPM): Limit 30000, Requested 31538. The input or output tokens must be "
                "reduced in order to run successfully.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            },
        ),
        "rate_limit",
        {},
    ),
    (
        "bedrock tokens per day",
        bedrock_error(
            "ThrottlingException", "Too many tokens per day, please wait before trying again.", 429
        ),
        "rate_limit",
        {},
    ),
    (
        "bedrock too many tokens",
        "ThrottlingException: Too many tokens, please wait before trying again.",
        "rate_limit",
        {},
    ),
    (
        "anthropic input TPM",
        anthropic_error(
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization "
            "of 20,000 input tokens per minute. Please reduce the prompt length or the maximum tokens "
            "requested, or try again later.",
        ),
        "rate_limit",
        {},
    ),
    (
        "gemini quota",
        gemini_error(
            429,
            "You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, head to: https://ai.google.dev/gemini-api/docs/"
            "rate-limits.",
            "RESOURCE_EXHAUSTED",
        ),
        "rate_limit",
        {},
    ),
    (
        "anthropic billing",
        anthropic_error(
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic "
            "API. Please go to Plans & Billing to upgrade or purchase credits.",
        ),
        "billing",
        {},
    ),
    (
        "openai insufficient quota",
        openai_error(
            429,
            {
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            },
        ),
        "billing",
        {},
    ),
    (
        "ollama model not found",
        http_error(
            404,
            '{"error":"model \'llama3\' not found, try pulling it first"}',
            "http://127.0.0.1:11434/api/chat",
        ),
        "not_found",
        {},
    ),
    (
        "openai model not found",
        openai_error(
            404,
            {
                "message": "The model `gpt-5-turbo` does not exist or you do not have access to it.",
                "type": "invalid_request_error",
                "param": None,
                "code": "model_not_found",
            },
        ),
        "not_found",
        {},
    ),
    (
        "window too small",
        "Error: context window too small (minimum is 128k tokens)",
        "window_too_small",
        {},
    ),
    (
        "openclaw window too small",
        "Agent failed before reply: Model context window too small "
        "(4096 tokens). Minimum is 16000.",
        "window_too_small",
        {},
    ),
    (
        "anthropic image upload",
        anthropic_error(
            400,
            "invalid_request_error",
            "messages.0.content.1.image.source.base64: image exceeds "
            "5 MB maximum: 6291456 bytes > 5242880 bytes",
        ),
        "upload_too_large",
        {},
    ),
    (
        "openai file upload",
        openai_error(
            400,
            {
                "message": "File is too large. The maximum file size is 512 MB.",
                "type": "invalid_request_error",
                "param": "file",
                "code": None,
            },
        ),
        "upload_too_large",
        {},
    ),
    ("auth", anthropic_error(401, "authentication_error", "invalid x-api-key"), "auth", {}),
    ("overloaded", anthropic_error(529, "overloaded_error", "Overloaded"), "server", {}),
    (
        "chat text mentioning an overflow",
        "Yesterday my agent hit the maximum context length and "
        "said the prompt is too long; how do people avoid that?",
        "other",
        {},
    ),
    (
        "assistant message dict",
        {
            "role": "assistant",
            "content": "prompt is too long: 208423 "
            "tokens > 200000 maximum is what Anthropic returns",
        },
        "other",
        {},
    ),
]


@pytest.mark.parametrize(("name", "error", "kind", "numbers"), ROWS, ids=[r[0] for r in ROWS])
def test_classifier_table(name: str, error: Any, kind: str, numbers: dict[str, int]) -> None:
    info = classify_provider_error(error)
    assert isinstance(info, ProviderErrorInfo)
    assert info.kind == kind, f"{name}: {info}"
    assert is_context_overflow(error) is (kind in (OVERFLOW, "compaction_overflow"))
    for field, value in numbers.items():
        assert getattr(info, field) == value, f"{name}: {field} of {info}"


def test_the_table_is_large_and_balanced() -> None:
    positives = [r for r in ROWS if r[2] in (OVERFLOW, "compaction_overflow")]
    assert len(ROWS) >= 30 and len(positives) >= 15 and len(ROWS) - len(positives) >= 15


def test_sdk_status_and_code_are_reported() -> None:
    err = anthropic_error(413, "request_too_large", "Request exceeds the maximum size")
    info = classify_provider_error(err)
    assert (info.status, info.code) == (413, "request_too_large")
    oa = classify_provider_error(ROWS[6][1])
    assert oa.status == 400 and oa.code == "context_length_exceeded" and oa.over_by == 74868


def test_a_wrapped_sdk_error_is_found_through_its_cause() -> None:
    sdk = anthropic_error(
        400, "invalid_request_error", "prompt is too long: 208656 tokens > 200000 maximum"
    )
    try:
        try:
            raise sdk
        except anthropic.BadRequestError as exc:
            raise RuntimeError("agent step failed") from exc
    except RuntimeError as wrapped:
        info = classify_provider_error(wrapped)
    assert info.kind == OVERFLOW and info.tokens == 208656 and info.status == 400


def test_an_overflow_during_compaction_is_its_own_kind() -> None:
    err = anthropic_error(
        400, "invalid_request_error", "prompt is too long: 209683 tokens > 200000 maximum"
    )
    assert classify_provider_error(err).kind == OVERFLOW
    info = classify_provider_error(err, stage="compaction")
    assert info.kind == "compaction_overflow" and info.is_overflow and info.tokens == 209683
