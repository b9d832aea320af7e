"""Tell a provider's "context too long" error from every other failure (DESIGN.md §7).

:func:`classify_provider_error` reads an exception object (OpenAI, Anthropic, Google GenAI,
botocore/Bedrock, Mistral, Ollama SDK errors, ``httpx.HTTPStatusError``, wrappers whose
``__cause__`` is one of those), an error body, an OpenAI Responses stream event or response
(``response.failed``, ``error``: read through its ``error`` only), or an error string, and
returns a :class:`ProviderErrorInfo`: the kind, the HTTP status and provider code when there
are any, and the token numbers the message carries. :func:`is_context_overflow` is the yes/no
question the recovery ladder asks.

Kinds, checked in this order (the first match wins, so a rate limit that talks about tokens is
never an overflow):

=====================  ============================================================
``rate_limit``         429, TPM/TPD/RPM limits, throttling, ``RESOURCE_EXHAUSTED``
``billing``            credit balance, ``insufficient_quota``, payment required (402)
``auth``               401/403, invalid API key, permission denied
``not_found``          404, unknown model ("model not found", "try pulling it first")
``too_many_images``    more images in the request than the provider takes (below)
``window_too_small``   the model's window is below what the client needs
``upload_too_large``   a file or image over an upload size limit
``compaction_overflow``  an overflow raised while compacting (do not compact again)
``context_overflow``   the request is over the model's context window or request size
``server``             5xx and "overloaded" errors
``other``              anything else, including text that merely mentions an overflow
=====================  ============================================================

A plain string counts only if it looks like an error (an HTTP status, an ``Error``/exception
prefix, a JSON error body, a provider code, or the token numbers of an overflow message):
chat text that merely mentions "maximum context length" is ``other``.

``too_many_images`` (added after the others; before it these errors were ``other``): the
request holds more images than the provider takes per request. It is not an overflow
(``is_overflow`` is False, :func:`is_context_overflow` says no): compacting or truncating
text does not take an image out, and a summary of the turns holding them loses far more than
their images. What fixes it is a render with fewer images, the newest kept
(:meth:`ctxengine.Session.run` does that; a render sends at most the provider's documented
number, ``max_images``, so the error comes from a gateway or model that takes fewer). Its
``limit`` is the most images the message says the request may hold and ``requested`` how
many it counted (documents or their pages included, as Anthropic counts them), when it says.
The texts, as reported:

- Anthropic: "too many images and documents: 120 + 0 > 100" (anthropics/claude-code issue
  24541), "Too much media: 0 document pages + 102 images > 100" (issue 19822, also raised
  while compacting: issue 3397), and "messages.19.content.27.image.source.base64.data: At least
  one of the image dimensions exceed max allowed size for many-image requests: 2000 pixels"
  (issue 24630): over 20 images, every image must be within 2000 x 2000 px (vision docs,
  "General limits"), so 20 images (its ``limit``) or fewer are accepted.
- OpenAI-compatible servers and gateways: "Too many images in request. Max is 10."
  (the-open-agent/openagent issue 874, from Azure OpenAI), vLLM "At most 5 image(s) may be
  provided in one request." (vllm-project/vllm issue 17092), "Image count 5 exceeds limit 4 per
  request." (vLLM through LiteLLM, AgnesAI-Labs/AgnesCode issue 50), "request contains 52
  images, exceeding the maximum of 50 allowed per request" (anomalyco/opencode issue 47721).
- Gemini through gateways: "Too many images in request: 11 images provided, but the model
  supports a maximum of 10 images." (GitHub Copilot, microsoft/vscode issue 306919), "too many
  images in the message, max allowed is 16" (a 500 of QuantumNous/new-api, issue 1233).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = (
    "ProviderErrorInfo",
    "ProviderErrorKind",
    "classify_provider_error",
    "is_context_overflow",
)

ProviderErrorKind = Literal[
    "context_overflow",
    "compaction_overflow",
    "rate_limit",
    "billing",
    "auth",
    "not_found",
    "window_too_small",
    "upload_too_large",
    "server",
    "other",
    "too_many_images",
]


@dataclass(frozen=True, slots=True)
class ProviderErrorInfo:
    """What :func:`classify_provider_error` found.

    Attributes:
        kind: See the module docstring.
        message: The error text that was classified.
        status: The HTTP status, when known.
        code: The provider's error code or type (``context_length_exceeded``,
            ``request_too_large``, ``ThrottlingException``...), when known.
        tokens: Input tokens of the rejected request, when the message says.
        limit: The model's limit (context window or maximum), when the message says; for
            ``too_many_images``, the most images a request may hold.
        requested: Total tokens requested (input + output reserve), when the message says;
            for ``too_many_images``, the images (and documents) the request held.
        excess: Tokens over the limit, when the message says only that (Ollama's "exceeded
            max context length by 1254 tokens").
    """

    kind: ProviderErrorKind
    message: str
    status: int | None = None
    code: str | None = None
    tokens: int | None = None
    limit: int | None = None
    requested: int | None = None
    excess: int | None = None

    @property
    def is_overflow(self) -> bool:
        """True for ``context_overflow`` and ``compaction_overflow``."""
        return self.kind in ("context_overflow", "compaction_overflow")

    @property
    def over_by(self) -> int | None:
        """How many tokens too many: both sides' difference, else what the message says."""
        used = self.requested if self.requested is not None else self.tokens
        if used is None or self.limit is None:
            return self.excess
        return used - self.limit


def _rx(*patterns: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE | re.DOTALL)


_RATE: Final = _rx(
    r"rate[ _-]?limit",
    r"too many requests",
    r"tokens per (?:min|minute|day)",
    r"requests per (?:min|minute|day)",
    r"\((?:TPM|TPD|RPM|RPD)\)",
    r"\b(?:TPM|TPD|RPM|RPD)\b.{0,40}\blimit",
    r"throttl",
    r"please wait before trying again",
    r"resource[_ ]exhausted",
    r"resource has been exhausted",
    r"quota exceeded for metric",
    r"PerMinute|PerDay",
)
_BILLING: Final = _rx(
    r"credit balance",
    r"insufficient[_ ]quota",
    r"exceeded your current quota",
    r"billing",
    r"payment required",
    r"purchase credits",
    r"spend(?:ing)? limit",
    r"insufficient (?:account )?balance",  # DeepSeek 402
    r"reached your specified (?:api )?usage limits?",  # Anthropic's monthly spend limit
    r"requires more credits",  # OpenRouter 402
    r"key with a higher (?:monthly |weekly |daily )?limit",  # an OpenRouter key's spend limit
)
_AUTH: Final = _rx(
    r"invalid[_ ]api[_ ]key",
    r"incorrect api key",
    r"invalid x-api-key",
    r"authentication[_ ]error",
    r"unauthorized",
    r"permission[_ ]denied",
    r"api key not valid",
)
_NOT_FOUND: Final = _rx(
    r"model\b.{0,80}\b(?:was )?not found",
    r"not_found_error",
    r"model_not_found",
    r"try pulling it first",
    r"does not exist or you do not have access",
    r"unknown model",
)
#: More images than the provider takes per request (the texts: the module docstring).
_IMAGES: Final = _rx(
    r"too many images",
    r"too much media:",
    r"exceed max allowed size for many-image requests",
    r"at most \d+ image\(s\) may be provided",
    r"image count \d+ exceeds limit",
    r"contains \d[\d,]* images?, exceeding the maximum",
)
_WINDOW_SMALL: Final = _rx(
    r"context window (?:is )?too small",
    r"context (?:window|length) .{0,40}below (?:the )?minimum",
    r"minimum (?:context|window) (?:is|of)",
)
_UPLOAD: Final = _rx(
    r"\bfile\b.{0,60}\b(?:too large|exceeds|over the)",
    r"(?:file|upload) size .{0,40}(?:exceed|limit|maximum)",
    r"maximum (?:file|upload) size",
    r"image .{0,40}(?:exceeds|too large|larger than)",
    r"\bimages?\b.{0,30}\d+(?:\.\d+)? ?[KMG]B\b.{0,20}(?:maximum|limit)",
)
_OVERFLOW: Final = _rx(
    r"prompt is too long",
    r"request_too_large",
    r"request exceeds the maximum size",
    r"input is too long for (?:the )?requested model",
    r"exceeds? the context window",
    r"maximum context length",
    r"context[ _-]length[ _-]exceeded",
    r"context_window_exceeded",
    r"input token count.{0,40}exceeds the maximum",
    r"input token count is \d[\d,]* but (?:the )?model only supports up to",
    r"too many tokens:.{0,80}(?:cannot exceed|size limit exceeded)",
    r"exceeds? (?:the )?(?:available )?context (?:size|limit|window|length)",
    r"exceed context limit",
    r"too large for model with \d+ maximum context length",
    r"prompt too long; exceeded",
    r"maximum prompt length is \d+",
    r"reduce the length of the (?:messages|prompt|input)",
    r"longer than the model'?s context length",
    r"exceeds? (?:the )?maximum allowed input length",
    r"input length.{0,40}exceeds (?:the )?maximum allowed length",
    r"requested tokens \(\d+\) exceed context window",
    r"greater than the context length",
    r"(?:exceeded )?model token limit",
    r"request entity too large",
    r"payload too large",
    r"maximum request body size",
    r"conversation too long",
    r"exceed_context_size_error",
    r"request payload size exceeds the limit",  # Gemini, 400 INVALID_ARGUMENT
    r"input tokens exceed the configured limit",
    r"contextwindowexceedederror",  # LiteLLM's class, named in its messages
    r"current length is \d[\d,]* while limit is \d",  # Cerebras
    r"`?inputs`? tokens \+ `?max_new_tokens`? must be",  # Hugging Face TGI
    r"`?inputs`? must have less than \d+ tokens",  # Hugging Face TGI
    r"malformed input request: expected maxLength: \d+, actual: \d+",  # Bedrock InvokeModel
    r"length of prompt_tokens \(\d+\) must be less than max_seq_len",
    r"model'?s maximum context limit",
    r"string too long\. expected a string with maximum length",  # see _field_too_long
)
_SERVER: Final = _rx(
    r"overloaded",
    r"internal server error",
    r"service unavailable",
    r"bad gateway",
    r"gateway timeout",
)
#: An overflow of the compaction itself ("Error during compaction: ... Conversation too long").
#: Not any "compact": Claude Code ends an overflow of the conversation with "Run /compact to
#: compact & continue", which is a plain overflow.
_COMPACTION: Final = _rx(
    r"\bcompaction\b", r"\bcompacting\b", r"auto-compact", r"summari[sz]ation failed"
)

#: Provider codes that decide alone.
_CODES: Final[Mapping[str, ProviderErrorKind]] = {
    "context_length_exceeded": "context_overflow",
    "request_too_large": "context_overflow",
    "exceed_context_size_error": "context_overflow",
    "model_context_window_exceeded": "context_overflow",
    "string_above_max_length": "context_overflow",  # unless the field is not content
    "contextwindowexceedederror": "context_overflow",  # LiteLLM's exception class
    "servicequotaexceededexception": "rate_limit",  # Bedrock: "resubmit your request later"
    "rate_limit_exceeded": "rate_limit",
    "rate_limit_error": "rate_limit",
    "throttlingexception": "rate_limit",
    "resource_exhausted": "rate_limit",
    "tokens": "rate_limit",  # OpenAI's type of TPM errors ("Request too large ... (TPM)")
    "insufficient_quota": "billing",
    "billing_error": "billing",
    "authentication_error": "auth",
    "permission_error": "auth",
    "invalid_api_key": "auth",
    "not_found_error": "not_found",
    "model_not_found": "not_found",
    "overloaded_error": "server",
}

# A string is an error (not chat text) when it carries one of these.
_ERROR_SHAPE: Final = _rx(
    r"^\s*(?:\[?api error|error\b|[\w.]*(?:error|exception)\b|\d{3}\b|\{|\[\{)",
    r"error code:? ?\d{3}",
    r"\bfailed\b[^.:]{0,30}:",
    r"\"type\"\s*:\s*\"error\"|'type'\s*:\s*'error'",
    r"invalid_request_error|badrequesterror|validationexception",
    r"status(?:[ _]code)?\s*[=:]?\s*[45]\d\d",
    r"\b[45]\d\d\b\s+(?:bad request|request entity|payload|too many|status code)",
    r"\d[\d,]* tokens?\s*>\s*\d",
    r"maximum context length (?:is|of) \d+",
    r"\(\d+\)\s+exceeds",
    r"^\s*[a-z]+(?:_[a-z]+)+\s*$",  # a bare provider code: request_too_large
)

_NUM = r"(\d[\d,]*)"


def _int(s: str | None) -> int | None:
    return int(s.replace(",", "")) if s else None


# (pattern, group names in order) for the token numbers of overflow messages.
_NUMBERS: Final = [
    (
        re.compile(rf"exceed context limit:?\s*{_NUM}\s*\+\s*{_NUM}\s*>\s*{_NUM}", re.I),
        ("tokens", "output", "limit"),
    ),
    (  # vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 16000. This model's
        # maximum context length is 32768 tokens and your request has 20000 input tokens"
        re.compile(
            rf"is too large:\s*{_NUM}\.?\s*this model'?s maximum context length is {_NUM} "
            rf"tokens and your request has {_NUM} input tokens",
            re.I,
        ),
        ("output", "limit", "tokens"),
    ),
    (  # Hugging Face TGI
        re.compile(
            rf"must be <=\s*{_NUM}\.?\s*given:\s*{_NUM}\s*`?inputs`? tokens and {_NUM}", re.I
        ),
        ("limit", "tokens", "output"),
    ),
    (re.compile(rf"current length is {_NUM} while limit is {_NUM}", re.I), ("requested", "limit")),
    (
        re.compile(rf"must have less than {_NUM} tokens\.?\s*given:\s*{_NUM}", re.I),
        ("limit", "tokens"),
    ),
    (
        re.compile(rf"prompt_tokens\s*\({_NUM}\)\s*must be less than max_seq_len\s*\({_NUM}", re.I),
        ("tokens", "limit"),
    ),
    (re.compile(rf"{_NUM} tokens?\s*>\s*{_NUM}", re.I), ("tokens", "limit")),
    (
        re.compile(rf"input token count\s*\(?{_NUM}\)?.{{0,40}}allowed\s*\(?{_NUM}", re.I),
        ("tokens", "limit"),
    ),
    (
        re.compile(rf"prompt contains {_NUM} tokens.{{0,60}}?with {_NUM} maximum", re.I),
        ("tokens", "limit"),
    ),
    (
        re.compile(rf"input length\s*\(?{_NUM}\)?.{{0,40}}context length\s*\(?{_NUM}", re.I),
        ("tokens", "limit"),
    ),
    (
        re.compile(
            rf"input length\s*\({_NUM} tokens\)\s*exceeds the maximum allowed length\s*"
            rf"\({_NUM}",
            re.I,
        ),
        ("tokens", "limit"),
    ),
    (re.compile(rf"maximum context length (?:is|of) {_NUM}", re.I), ("limit",)),
    (re.compile(rf"maximum number of tokens allowed\s*\(?{_NUM}", re.I), ("limit",)),
    (re.compile(rf"your request has {_NUM} input tokens", re.I), ("tokens",)),
    (re.compile(rf"in the messages, {_NUM} in the completion", re.I), ("output",)),
    (re.compile(rf"you requested {_NUM} output tokens", re.I), ("output",)),
    (re.compile(rf"exceed the configured limit of {_NUM}", re.I), ("limit",)),
    (re.compile(rf"requested a total of {_NUM}", re.I), ("requested",)),
    (
        re.compile(rf"(?:messages resulted in|you requested(?: about)?) {_NUM} tokens", re.I),
        ("requested",),
    ),
    (re.compile(rf"\({_NUM} (?:in the messages|in your prompt|of text input)", re.I), ("tokens",)),
    (re.compile(rf"prompt contains at least {_NUM} input tokens", re.I), ("tokens",)),
    (re.compile(rf"for a total of at least {_NUM}", re.I), ("requested",)),
    (re.compile(rf"\"n_prompt_tokens\"\s*:\s*{_NUM}", re.I), ("tokens",)),
    (re.compile(rf"\"n_ctx\"\s*:\s*{_NUM}", re.I), ("limit",)),
    (
        re.compile(rf"requested tokens\s*\({_NUM}\)\s*exceed context window of {_NUM}", re.I),
        ("tokens", "limit"),
    ),
    (
        re.compile(rf"maximum prompt length is {_NUM} but the request contains {_NUM}", re.I),
        ("limit", "tokens"),
    ),
    (re.compile(rf"exceeded max context length by {_NUM}", re.I), ("excess",)),
    (
        re.compile(
            rf"input token count is {_NUM} but (?:the )?model only supports up to {_NUM}", re.I
        ),
        ("tokens", "limit"),
    ),
    (re.compile(rf"cannot exceed {_NUM} - received {_NUM}", re.I), ("limit", "tokens")),
]


#: (pattern, names of its numbers) of the images a request held and the most it may hold.
_IMAGE_NUMBERS: Final = [
    (  # Anthropic: "too many images and documents: 120 + 0 > 100"
        re.compile(rf"images and documents:\s*{_NUM}\s*\+\s*{_NUM}\s*>\s*{_NUM}", re.I),
        ("requested", "requested", "limit"),
    ),
    (  # Anthropic: "Too much media: 0 document pages + 102 images > 100"
        re.compile(rf"{_NUM} document pages?\s*\+\s*{_NUM} images?\s*>\s*{_NUM}", re.I),
        ("requested", "requested", "limit"),
    ),
    (
        re.compile(
            rf"{_NUM} images?(?: were)? provided, but the model supports a maximum of {_NUM}",
            re.I,
        ),
        ("requested", "limit"),
    ),
    (
        re.compile(rf"contains {_NUM} images?, exceeding the maximum of {_NUM}", re.I),
        ("requested", "limit"),
    ),
    (re.compile(rf"image count {_NUM} exceeds limit {_NUM}", re.I), ("requested", "limit")),
    (re.compile(rf"at most {_NUM} image\(s\)", re.I), ("limit",)),
    (re.compile(rf"\bmax(?:imum)? (?:is|allowed is) {_NUM}", re.I), ("limit",)),
]
#: Anthropic's many-image request: more than this many images (each then within 2000 px).
MANY_IMAGES: Final = 20


def _image_numbers(text: str) -> dict[str, int]:
    """``requested`` (images, documents included) and ``limit`` of a ``too_many_images``
    message; the many-image dimension error's limit is :data:`MANY_IMAGES`."""
    if re.search(r"many-image requests", text, re.I):
        return {"limit": MANY_IMAGES}
    for pattern, names in _IMAGE_NUMBERS:
        m = pattern.search(text)
        if not m:
            continue
        found: dict[str, int] = {}
        for name, value in zip(names, m.groups(), strict=True):
            found[name] = found.get(name, 0) + (_int(value) or 0)
        return found
    return {}


def _numbers(text: str) -> dict[str, int]:
    """``tokens``, ``limit``, ``requested``, ``output`` (the output reserve) and ``excess``."""
    found: dict[str, int] = {}
    for pattern, names in _NUMBERS:
        m = pattern.search(text)
        if not m:
            continue
        for name, value in zip(names, m.groups(), strict=True):
            n = _int(value)
            if n is not None:
                found.setdefault(name, n)
    if "requested" not in found and "tokens" in found and "output" in found:
        found["requested"] = found["tokens"] + found["output"]
    return found


def _walk(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it wraps, at most 8.

    ``__cause__`` (``raise ... from``) always; ``__context__`` (raised while another was being
    handled) only from an exception without an HTTP status of its own: a generic wrapper
    raised in an ``except`` block stands for the error it handles, but a provider error is a
    new failure (an overflow on the retry of a rate-limited call is an overflow).
    """
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        if current.__cause__ is not None:
            current = current.__cause__
        elif _status_of(current) is None:
            current = current.__context__
        else:
            current = None
    return chain


def _status_of(exc: BaseException) -> int | None:
    for attr in ("status_code", "status", "code", "http_status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status
    if isinstance(response, Mapping):  # botocore ClientError
        meta = response.get("ResponseMetadata") or {}
        value = meta.get("HTTPStatusCode")
        if isinstance(value, int):
            return value
    return None


def _codes_in(value: Any) -> list[str]:
    """Error ``type``/``code``/``status`` strings found in a body or error object."""
    out: list[str] = []
    if isinstance(value, Mapping):
        for key in ("type", "code", "status", "Code", "reason", "__type"):
            v = value.get(key)
            if isinstance(v, str) and v:
                out.append(v)
        for key in ("error", "Error"):
            if key in value:
                out += _codes_in(value[key])
    elif isinstance(value, list):
        for item in value[:3]:
            out += _codes_in(item)
    return out


def _texts_of(exc: BaseException) -> tuple[list[str], list[str]]:
    texts = [str(exc)]
    codes: list[str] = []
    for attr in ("message", "error", "body", "response", "details", "text"):
        value = getattr(exc, attr, None)
        if value is None or callable(value):
            continue
        if isinstance(value, (Mapping, list)):
            codes += _codes_in(value)
            texts.append(json.dumps(value, default=str, ensure_ascii=False))
        elif isinstance(value, str):
            texts.append(value)
        elif attr == "response":
            body = getattr(value, "text", None)
            if isinstance(body, str):
                texts.append(body[:4000])
    for attr in ("code", "type", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, str) and value:
            codes.append(value)
    codes.append(type(exc).__name__)
    return texts, codes


def _as_data(error: object) -> object:
    """An SDK model object (the openai/anthropic pydantic types) as its dict; else ``error``."""
    dump = getattr(error, "model_dump", None)
    if isinstance(error, (BaseException, Mapping, str)) or not callable(dump):
        return error
    try:
        data = dump()
    except Exception:  # not a model after all: classify its text
        return error
    return data if isinstance(data, Mapping) else error


def _error_part(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The part of a body that is the error.

    A Responses stream event (``response.failed``/``response.incomplete``, as the OpenAI SDK
    yields them) carries the response; a response speaks only through its ``error`` (None
    when it has none): its output and instructions are model and user text, never an error.
    """
    inner = data.get("response")
    if isinstance(inner, Mapping) and (
        "error" in inner or str(data.get("type", "")).startswith("response.")
    ):
        data = inner
    if data.get("object") == "response" or "output" in data:
        error = data.get("error")
        return {"error": error} if isinstance(error, Mapping) else None
    return data


# "Error code: 402 - {...}" (str() of an OpenAI SDK error), "API Error: 400 {...}", "402 Insuf..."
_TEXT_STATUS: Final = re.compile(
    r"(?:error(?: code)?|status(?:[ _]code)?|http(?:/\d(?:\.\d)?)?)\s*[:=(]?\s*([1-5]\d\d)\b"
    r"|^\s*\W{0,3}\s*([1-5]\d\d)\b",
    re.IGNORECASE,
)


def _status_in(text: str) -> int | None:
    m = _TEXT_STATUS.search(text[:300])
    return int(m.group(1) or m.group(2)) if m else None


def _gather(error: object) -> tuple[str, int | None, list[str], bool]:
    """(text, status, codes, is_exception) for anything classifiable."""
    error = _as_data(error)
    if isinstance(error, BaseException):
        texts: list[str] = []
        codes: list[str] = []
        status = None
        for exc in _walk(error):
            t, c = _texts_of(exc)
            texts += t
            codes += c
            status = status or _status_of(exc)
        return "\n".join(dict.fromkeys(t for t in texts if t)), status, codes, True
    if isinstance(error, Mapping):
        if "role" in error:  # a chat message is not an error
            return "", None, [], False
        part = _error_part(error)
        if part is None:  # a response without an error
            return "", None, [], False
        text = json.dumps(part, default=str, ensure_ascii=False)
        status = part.get("status_code") or part.get("status")
        return text, status if isinstance(status, int) else None, _codes_in(part), True
    text = str(error)
    return text, _status_in(text), [], False


# OpenAI's ``string_above_max_length``: "Invalid 'messages[2].content': string too long. ..."
_TOO_LONG: Final = re.compile(r"invalid '([^']+)'\s*:\s*string too long", re.IGNORECASE)
_CONTENT_FIELDS: Final = frozenset(
    {"content", "text", "output", "arguments", "input", "instructions", "prompt", "messages"}
)


def _field_too_long(text: str) -> bool | None:
    """For a "string too long" error: True when the string is content of the conversation
    (a message's ``content``, a tool output), False when it is an id, a name, a tool's
    description, ``user``... (shortening the conversation cannot fix those), None when the
    text names no field."""
    m = _TOO_LONG.search(text)
    if not m:
        return None
    field = re.sub(r"\[\d+\]", "", m.group(1)).rsplit(".", 1)[-1]
    return field.lower() in _CONTENT_FIELDS


def classify_provider_error(error: object, *, stage: str | None = None) -> ProviderErrorInfo:
    """Classify a provider error (see the module docstring).

    Args:
        error: An exception (the SDK's, or one wrapping it), an error body dict, or a string.
        stage: ``"compaction"`` when the failing call was the compaction's own summarizer
            call: an overflow there is ``compaction_overflow``.
    """
    text, status, codes, is_exc = _gather(error)
    lowered = [c.lower() for c in codes]
    code = next((c for c, low in zip(codes, lowered, strict=True) if low in _CODES), None)
    code = code or next((c for c in codes if "_" in c or c.endswith("Exception")), None)
    kind = _kind(text, status, lowered, is_exc)
    if kind == "too_many_images":
        nums = _image_numbers(text)
    elif kind == "context_overflow":
        nums = _numbers(text)
    else:
        nums = {}
    output, limit = nums.get("output"), nums.get("limit")
    if output is not None and limit is not None and output >= limit:
        # the output reserve (max_tokens) alone fills the window: no shorter input fits
        kind, nums = "other", {}
    if kind == "context_overflow" and (stage == "compaction" or _COMPACTION.search(text)):
        kind = "compaction_overflow"
    return ProviderErrorInfo(
        kind,
        text[:2000],
        status,
        code,
        nums.get("tokens"),
        nums.get("limit"),
        nums.get("requested"),
        nums.get("excess"),
    )


def _kind(text: str, status: int | None, codes: list[str], is_exc: bool) -> ProviderErrorKind:
    if not text and status is None:
        return "other"
    if not is_exc and not _ERROR_SHAPE.search(text):
        return "other"  # chat text, not an error
    by_code = [_CODES[c] for c in codes if c in _CODES]
    rate = status == 429 or "rate_limit" in by_code or bool(_RATE.search(text))
    if "billing" in by_code or status == 402 or _BILLING.search(text):
        per_window = re.search(r"resource[_ ]exhausted|per ?minute|retry in|\bTP[MD]\b", text, re.I)
        if not (rate and per_window):
            return "billing"
    if rate:
        return "rate_limit"
    if status in (401, 403) or "auth" in by_code or _AUTH.search(text):
        return "auth"
    if _IMAGES.search(text):
        return "too_many_images"
    if _WINDOW_SMALL.search(text):
        return "window_too_small"
    if _UPLOAD.search(text):
        return "upload_too_large"
    too_long = _field_too_long(text)
    if too_long is False:  # an over-long id, name or description: not the conversation
        by_code = [k for k in by_code if k != "context_overflow"]
    overflow = "context_overflow" in by_code or bool(_OVERFLOW.search(text)) or status == 413
    if overflow and too_long is not False:
        return "context_overflow"
    if status == 404 or "not_found" in by_code or _NOT_FOUND.search(text):
        return "not_found"
    if (status is not None and status >= 500) or "server" in by_code or _SERVER.search(text):
        return "server"
    return "other"


def is_context_overflow(error: object) -> bool:
    """True when ``error`` says the request was over the model's context (or request size).

    Rate limits (even "Request too large ... tokens per min"), billing, auth, unknown models,
    "context window too small" and upload size limits are not overflows. Includes
    ``compaction_overflow``: check :func:`classify_provider_error` to tell it apart.
    """
    return classify_provider_error(error).is_overflow
