"""LangChain ``BaseMessage`` objects (``HumanMessage``, ``AIMessage``, ``ToolMessage``...) import.

Recognized by duck typing (a class named ``BaseMessage`` from ``langchain_core`` in the MRO), so
importing this module never imports LangChain.

Media in ``content``, in every shape LangChain passes on to a provider: images as OpenAI's
``image_url``, LangChain's standard ``image`` (url or base64) or Anthropic's ``image`` (a
``source``); files (PDFs) as LangChain's standard ``file`` (base64 or url) or OpenAI's ``file``
part; Anthropic's ``document`` (media, or text for a text source). A block only an upload id
names holds nothing the model can be sent again: it is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult
from .anthropic import document_block, image_block
from .common import PDF, Loc, file_from_data, image_from_url, redacted_thinking, tool_call

__all__ = ("is_langchain_message", "load_langchain")

_ROLES: Final = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
}
#: Content blocks that repeat what ``AIMessage.tool_calls`` already carries.
_CALL_BLOCKS: Final = frozenset({"tool_use", "tool_call", "function_call", "server_tool_call"})


def is_langchain_message(value: object) -> bool:
    """Whether ``value`` is a LangChain ``BaseMessage`` (checked without importing LangChain)."""
    for cls in type(value).__mro__:
        if cls.__name__ == "BaseMessage" and cls.__module__.startswith("langchain_core"):
            return True
    return False


def _image(block: Mapping[str, Any], loc: Loc) -> Image:
    """An image block: OpenAI's ``image_url``, LangChain's standard ``image`` (url or base64,
    v1 or v0 with ``source_type``) or Anthropic's ``image`` with a ``source``."""
    if isinstance(block.get("source"), Mapping):
        return image_block(block, loc)
    url = block.get("image_url", block.get("url"))
    detail = url.get("detail") if isinstance(url, Mapping) else block.get("detail")
    url = url.get("url") if isinstance(url, Mapping) else url
    if isinstance(url, str):
        return image_from_url(url, detail=detail)
    data = block.get("base64", block.get("data"))
    if isinstance(data, str):
        return Image(str(block.get("mime_type") or "image/png"), data=data)
    loc.fail("image block", block, "an image with a url, base64 data or an Anthropic source")


def _filename(block: Mapping[str, Any]) -> str | None:
    """The file name a file block gives: its own ``filename``, or one in ``extras`` (v1) or
    ``metadata`` (v0)."""
    for where in (block, block.get("extras"), block.get("metadata")):
        if isinstance(where, Mapping):
            name = where.get("filename", where.get("name"))
            if isinstance(name, str) and name:
                return name
    return None


def _file(block: Mapping[str, Any], loc: Loc) -> Image:
    """A file block (a PDF, mostly): LangChain's standard ``file`` (base64 or url, v1 or v0
    with ``source_type``) or OpenAI's ``file`` part (``file.file_data``)."""
    name = _filename(block)
    media = block.get("mime_type")
    part = block.get("file")
    if isinstance(part, Mapping) and isinstance(part.get("file_data"), str):
        return file_from_data(part["file_data"], part.get("filename"))
    data = block.get("base64", block.get("data"))
    if isinstance(data, str):
        if isinstance(media, str) and media:
            return Image(media, data=data, name=name)
        return file_from_data(data, name)
    url = block.get("url")
    if isinstance(url, str):
        image = image_from_url(url, default=PDF, name=name)
        if isinstance(media, str) and media and image.data is None:
            return Image(media, url=url, name=name)
        return image
    loc.fail("file block", block, "a file with base64 data or a url (not an uploaded file id)")


def _blocks(content: object, loc: Loc, *, role: str) -> list[Block]:
    """Neutral blocks of a LangChain ``content`` (a string or a list of blocks)."""
    if isinstance(content, str):
        return [Text(content)] if content or role != "assistant" else []
    if not isinstance(content, list):
        loc.fail("content", content, "a string or a list of content blocks")
    out: list[Block] = []
    for i, block in enumerate(content):
        if isinstance(block, str):
            out.append(Text(block))
            continue
        if not isinstance(block, Mapping):
            loc.at(i).fail("content block", block, "a string or a dict")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            out.append(Text(block["text"]))
        elif kind in ("image", "image_url") and role != "system":
            out.append(_image(block, loc.at(i)))
        elif kind == "file" and role != "system":
            out.append(_file(block, loc.at(i)))
        elif kind == "document" and role != "system":
            out.append(document_block(block, loc.at(i)))
        elif kind in ("thinking", "reasoning") and role == "assistant":
            text = block.get("thinking", block.get("reasoning", ""))
            out.append(Thinking(str(text or ""), _signature(block)))
        elif kind == "redacted_thinking" and role == "assistant":
            out.append(redacted_thinking(block, loc.at(i)))
        elif kind == "non_standard" and role == "assistant" and _redacted(block.get("value")):
            out.append(Thinking("", block["value"]["data"], redacted=True))
        elif kind in _CALL_BLOCKS and role == "assistant":
            continue  # carried by tool_calls
        else:
            loc.at(i).fail("content block type", kind, f"a block a {role} message can hold")
    return out


def _signature(block: Mapping[str, Any]) -> str | None:
    """The signature of a thinking block: its own ``signature`` (ChatAnthropic's and
    ChatGoogleGenerativeAI's ``thinking`` blocks), or the one a v1 ``reasoning`` block keeps in
    its ``extras`` (langchain_core ``block_translators``; langchain_anthropic ``_compat`` sends
    it back from there)."""
    sig = block.get("signature")
    if isinstance(sig, str):
        return sig
    extras = block.get("extras")
    sig = extras.get("signature") if isinstance(extras, Mapping) else None
    return sig if isinstance(sig, str) else None


def _redacted(value: object) -> bool:
    """Whether a v1 ``non_standard`` block's ``value`` is an Anthropic ``redacted_thinking``
    block (how ChatAnthropic's v1 output carries one, and sends it back as it is)."""
    return (
        isinstance(value, Mapping)
        and value.get("type") == "redacted_thinking"
        and isinstance(value.get("data"), str)
    )


#: A word of a model name -> the provider whose signatures that model's thinking carries (a
#: Claude model's, wherever it is served: Anthropic, Vertex AI, Bedrock).
_MODEL_SIGNERS: Final = (("claude", "anthropic"), ("gemini", "gemini"))
#: ``response_metadata["model_provider"]`` -> that provider, for a message that names no model:
#: only integrations serving one family (Vertex AI serves Claude too).
_SIGNERS: Final = {"anthropic": "anthropic", "google_genai": "gemini"}


def _thinking_family(message: Any) -> dict[str, Any]:
    """``provider_family`` of an ``AIMessage`` holding thinking: the provider that signed it,
    read from its ``response_metadata`` (ChatAnthropic and ChatGoogleGenerativeAI both write a
    ``thinking`` block with a ``signature``: only the metadata tells them apart), by the model
    it names (``model_name``, or the API's ``model`` that older releases keep), else by its
    ``model_provider``. Empty when it names neither, as before."""
    meta = getattr(message, "response_metadata", None)
    if not isinstance(meta, Mapping):
        return {}
    for key in ("model_name", "model"):
        name = meta.get(key)
        if isinstance(name, str):
            low = name.lower()
            for word, family in _MODEL_SIGNERS:
                if word in low:
                    return {"provider_family": family}
    provider = meta.get("model_provider")
    signer = _SIGNERS.get(provider) if isinstance(provider, str) else None
    return {"provider_family": signer} if signer else {}


#: Where ChatGoogleGenerativeAI (langchain-google-genai 4) keeps the thought signature of each
#: function call of an ``AIMessage``: ``additional_kwargs[KEY]``, call id -> base64 signature;
#: it sends each back on its ``functionCall`` part, which Gemini 3 requires of the calls of
#: the current turn.
GEMINI_CALL_SIGNATURES: Final = "__gemini_function_call_thought_signatures__"


def _call_signatures(message: Any) -> dict[str, str]:
    """The thought signature of each tool call of ``message`` (call id -> signature)."""
    extra = getattr(message, "additional_kwargs", None)
    found = extra.get(GEMINI_CALL_SIGNATURES) if isinstance(extra, Mapping) else None
    if not isinstance(found, Mapping):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str) and v}


def _with_call_signatures(blocks: list[Block], signed: Mapping[str, str]) -> list[Block]:
    """``blocks`` with each signed call led by an empty thinking block holding its signature:
    how the Gemini importer reads a signed ``functionCall`` part, and what the Gemini exporter
    puts back on the part that follows it."""
    out: list[Block] = []
    for b in blocks:
        if isinstance(b, ToolCall) and b.id in signed:
            out.append(Thinking("", signed[b.id]))
        out.append(b)
    return out


def _tool(message: Any, loc: Loc) -> Message:
    parts = _blocks(message.content, loc.at("content"), role="user")
    content = tuple(p for p in parts if isinstance(p, (Text, Image)))
    call_id = getattr(message, "tool_call_id", None)
    if not isinstance(call_id, str) or not call_id:
        loc.fail("tool_call_id", call_id, "a non-empty string")
    is_error = getattr(message, "status", "success") == "error"
    result = ToolResult(call_id, content, is_error, getattr(message, "name", None))
    return Message("tool", (result,), getattr(message, "id", None))


def _invalid_calls(message: Any, loc: Loc) -> list[Block]:
    """The ``invalid_tool_calls`` of an ``AIMessage`` (calls whose arguments did not parse) as
    tool calls with their raw argument text, after the valid ones: what ChatOpenAI sends
    (langchain_openai ``_convert_message_to_dict`` adds them to ``tool_calls`` through
    ``_lc_invalid_tool_call_to_openai_tool_call``, ``arguments`` the raw ``args`` string), and
    what the error ``ToolMessage`` LangChain's ``create_agent`` adds for each answers
    (``langchain/agents/factory.py``, ``_patch_invalid_tool_calls``). One without an id is
    left out (no result can answer it; the agent adds none); one without a name is named
    ``"unknown"``, as that ``ToolMessage`` names it."""
    out: list[Block] = []
    for j, call in enumerate(getattr(message, "invalid_tool_calls", None) or ()):
        at = loc.at(j)
        if not isinstance(call, Mapping):
            at.fail("invalid tool call", call, "a dict (a LangChain InvalidToolCall)")
        if call.get("id") is None:
            continue
        out.append(tool_call(call.get("id"), call.get("name") or "unknown", call.get("args"), at))
    return out


def _one(message: Any, loc: Loc) -> Message:
    kind = getattr(message, "type", None)
    if kind == "chat":
        kind = getattr(message, "role", None)
    role = _ROLES.get(kind) if isinstance(kind, str) else None
    if role is None:
        loc.fail("message type", kind, f"one of {sorted(_ROLES)} (or a ChatMessage with those)")
    if role == "tool":
        return _tool(message, loc)
    blocks = _blocks(message.content, loc.at("content"), role=role)
    if role == "assistant":
        for j, call in enumerate(getattr(message, "tool_calls", None) or ()):
            at = loc.at("tool_calls").at(j)
            blocks.append(tool_call(call.get("id"), call.get("name"), call.get("args"), at))
        blocks += _invalid_calls(message, loc.at("invalid_tool_calls"))
        signed = _call_signatures(message)
        if signed:
            blocks = _with_call_signatures(blocks, signed)
        if any(isinstance(b, Thinking) for b in blocks):
            # a signature goes back to the provider that made it only: Gemini was sent
            # ChatAnthropic's (and Anthropic ChatGoogleGenerativeAI's) as its own
            meta = _thinking_family(message) or ({"provider_family": "gemini"} if signed else {})
            return Message("assistant", tuple(blocks), getattr(message, "id", None), meta=meta)
    return Message(role, tuple(blocks), getattr(message, "id", None))  # type: ignore[arg-type]


def load_langchain(messages: Sequence[Any], loc: Loc) -> list[Message]:
    """Neutral messages from LangChain ``BaseMessage`` objects.

    Raises:
        TranscriptError: an item is not a LangChain message or holds a block its role cannot
            (the message names the index and the value).
    """
    out: list[Message] = []
    for i, message in enumerate(messages):
        if not is_langchain_message(message):
            loc.at(i).fail("item", message, "a LangChain BaseMessage")
        out.append(_one(message, loc.at(i)))
    return out
