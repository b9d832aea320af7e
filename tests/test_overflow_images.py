"""``too_many_images``: the errors of a request holding more images than the provider takes.

Every text below was reported by users (issue trackers of agents and SDKs), numbers as
reported; SDK errors are real exception objects built the way each SDK builds them from an
``httpx.Response``. Before this kind they were all ``other``: nothing recovered from them, and
the session was stuck (every later request carries the same images).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from ctxengine.overflow import classify_provider_error, is_context_overflow


def anthropic_error(message: str) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    request = httpx.Request("POST", "https://api.anthropic.com/v1/messages")
    client = anthropic.Anthropic(api_key="test")
    err = client._make_status_error_from_response(httpx.Response(400, json=body, request=request))
    assert isinstance(err, anthropic.BadRequestError)
    return err


def compat_error(status: int, body: dict[str, Any]) -> openai.APIStatusError:
    """An OpenAI-compatible server (vLLM, a gateway) answering through the OpenAI SDK."""
    url = "http://127.0.0.1:8000/v1/chat/completions"
    response = httpx.Response(status, json=body, request=httpx.Request("POST", url))
    client = openai.OpenAI(api_key="test", base_url="http://127.0.0.1:8000/v1")
    err = client._make_status_error_from_response(response)
    assert isinstance(err, openai.APIStatusError)
    return err


ROWS: list[tuple[str, Any, dict[str, int | None]]] = [
    (  # anthropics/claude-code issue 24541
        "anthropic images and documents",
        anthropic_error("too many images and documents: 120 + 0 > 100"),
        {"status": 400, "limit": 100, "requested": 120},
    ),
    (  # anthropics/claude-code issue 23392: a PDF counts too
        "anthropic images and a document",
        'Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"too '
        'many images and documents: 104 + 1 > 100"}}',
        {"status": 400, "limit": 100, "requested": 105},
    ),
    (  # anthropics/claude-code issue 19822
        "anthropic too much media",
        anthropic_error("Too much media: 0 document pages + 102 images > 100"),
        {"status": 400, "limit": 100, "requested": 102},
    ),
    (  # anthropics/claude-code issue 3397: raised while compacting, still the images
        "anthropic too much media while compacting",
        'Error: Error during compaction: Error: API Error: 400 {"type":"error","error":{"type":'
        '"invalid_request_error","message":"Too much media: 0 document pages + 103 images > '
        '100"}}',
        {"status": 400, "limit": 100, "requested": 103},
    ),
    (  # anthropics/claude-code issue 24630: over 20 images, each must be within 2000 px
        "anthropic many-image dimensions",
        anthropic_error(
            "messages.19.content.27.image.source.base64.data: At least one of the image "
            "dimensions exceed max allowed size for many-image requests: 2000 pixels"
        ),
        {"status": 400, "limit": 20, "requested": None},
    ),
    (  # the-open-agent/openagent issue 874 (Azure OpenAI)
        "azure openai max is",
        "error, status code: 400, message: Too many images in request. Max is 10.",
        {"status": 400, "limit": 10},
    ),
    (  # vllm-project/vllm issue 17092
        "vllm at most",
        compat_error(
            400,
            {
                "object": "error",
                "message": "At most 5 image(s) may be provided in one request.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        ),
        {"status": 400, "limit": 5},
    ),
    (  # AgnesAI-Labs/AgnesCode issue 50 (vLLM through LiteLLM)
        "litellm image count",
        "Request failed: Bad request (400): litellm.BadRequestError: OpenAIException - "
        '{"object":"error","message":"Image count 5 exceeds limit 4 per request.",'
        '"type":"BadRequestError","param":null,"code":400}.',
        {"limit": 4, "requested": 5},
    ),
    (  # anomalyco/opencode issue 47721
        "gateway exceeding the maximum",
        compat_error(
            400,
            {
                "error": {
                    "message": "request contains 52 images, exceeding the maximum of 50 "
                    "allowed per request",
                    "type": "invalid_request_error",
                }
            },
        ),
        {"status": 400, "limit": 50, "requested": 52},
    ),
    (  # CommandCodeAI/desktop issue 64
        "gateway string",
        "Error: 400 request contains 54 images, exceeding the maximum of 50 allowed per request",
        {"status": 400, "limit": 50, "requested": 54},
    ),
    (  # microsoft/vscode issue 306919 (Copilot in front of Gemini)
        "copilot gemini",
        "Error: 400 Too many images in request: 11 images provided, but the model supports a "
        "maximum of 10 images.",
        {"status": 400, "limit": 10, "requested": 11},
    ),
    (  # QuantumNous/new-api issue 1233: a 500 of the gateway in front of Gemini
        "new-api gemini",
        "500 too many images in the message, max allowed is 16",
        {"status": 500, "limit": 16},
    ),
]


@pytest.mark.parametrize(("name", "error", "numbers"), ROWS, ids=[r[0] for r in ROWS])
def test_too_many_images_is_its_own_kind_with_its_numbers(
    name: str, error: Any, numbers: dict[str, int | None]
) -> None:
    info = classify_provider_error(error)
    assert info.kind == "too_many_images", f"{name}: {info}"
    assert not info.is_overflow and not is_context_overflow(error)  # compacting cannot fix it
    assert info.tokens is None
    for field, value in numbers.items():
        assert getattr(info, field) == value, f"{name}: {field} of {info}"


def test_the_excess_is_what_the_provider_counted_over_its_limit() -> None:
    info = classify_provider_error(ROWS[1][1])
    assert info.over_by == 5  # 104 images and a document over 100


def test_the_stage_of_the_call_does_not_make_it_an_overflow() -> None:
    info = classify_provider_error(ROWS[2][1], stage="compaction")
    assert info.kind == "too_many_images"


def test_it_is_told_apart_from_other_image_and_length_errors() -> None:
    kinds = {
        text: classify_provider_error(text).kind
        for text in (
            "Error: 400 too many images and documents: 120 + 0 > 100",
            "I took too many images of the cat yesterday.",  # chat text, no error shape
            "Error: 400 image exceeds 5 MB maximum: 6291456 bytes > 5242880 bytes",
            "Error: 400 prompt is too long: 208423 tokens > 200000 maximum",
        )
    }
    assert list(kinds.values()) == [
        "too_many_images",
        "other",
        "upload_too_large",
        "context_overflow",
    ]
