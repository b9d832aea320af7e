"""Anthropic Messages: import (``tool_use``/``tool_result``/``thinking``) and export.

A user turn holding ``tool_result`` blocks becomes a neutral ``tool`` message (all its results)
followed by a ``user`` message for any other blocks; the exporter merges them back, so the
round trip is lossless.

Blocks the neutral model has no type for are kept as what the model read: a ``document`` is
media (``Image`` with its media type, e.g. ``application/pdf``) or, with a text source, text;
a ``search_result`` is its text; a ``tool_reference`` (tool search) names the tool. Server
tools run inside the assistant turn (``server_tool_use`` and its ``*_tool_result``, e.g.
``web_search``): both become assistant text, since no other provider can replay them.

A ``compaction`` block (beta ``compact_20260112``: the summary the API wrote of everything
before it, which it drops from then on) becomes an assistant message of its own holding a
:class:`~ctxengine.transcript.model.Compaction`: the summary as text, under
:data:`COMPACTION_HEAD`, and the block kept whole to be sent back verbatim.

A block of a type this reader does not know (a newer API or Claude Code version) is left out
and counted in ``Transcript.meta["skipped_blocks"]`` (by type); a known block with a missing
or wrong field, or a block without a type, is an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..model import Block, Compaction, Image, Message, Text, Thinking, ToolResult, copy_data
from .common import Loc, redacted_thinking, skip_block, tool_call

__all__ = (
    "COMPACTION_HEAD",
    "document_block",
    "image_block",
    "load_anthropic",
    "system_messages",
)

#: What the text of an Anthropic compaction opens with: a render for another provider sends
#: that text, read there as the summary of the earlier conversation (it opens as the summaries
#: compaction writes do, :func:`ctxengine.compaction.facts.is_summary`).
COMPACTION_HEAD = "[Summary of the earlier conversation, compacted by Anthropic]\n\n"


def image_block(block: Mapping[str, Any], loc: Loc) -> Image:
    """An ``image`` block (a base64 or url ``source``); also read in LangChain content."""
    source = loc.need(block, "source", Mapping)
    kind = source.get("type")
    if kind == "base64":
        media = loc.at("source").need(source, "media_type", str)
        return Image(media, data=loc.at("source").need(source, "data", str))
    if kind == "url":
        url = loc.at("source").need(source, "url", str)
        return Image(str(source.get("media_type") or "image/jpeg"), url=url)
    return loc.at("source").fail("image source type", kind, "'base64' or 'url'")


def document_block(block: Mapping[str, Any], loc: Loc) -> Text | Image:
    """A ``document`` block: text for a text (or content) source, media otherwise (also read
    in LangChain content)."""
    source = loc.need(block, "source", Mapping)
    kind = source.get("type")
    title = block.get("title")
    head = f"[document: {title}]\n" if isinstance(title, str) and title else ""
    if kind == "text":
        return Text(head + loc.at("source").need(source, "data", str))
    if kind == "content":
        body = _media(source.get("content"), loc.at("source.content"))
        return Text(head + "\n".join(b.text for b in body if isinstance(b, Text)))
    name = title if isinstance(title, str) and title else None
    if kind == "base64":
        media = str(source.get("media_type") or "application/pdf")
        return Image(media, data=loc.at("source").need(source, "data", str), name=name)
    if kind == "url":
        url = loc.at("source").need(source, "url", str)
        return Image(str(source.get("media_type") or "application/pdf"), url=url, name=name)
    return loc.at("source").fail(
        "document source type", kind, "'base64', 'url', 'text' or 'content'"
    )


def _search_result(block: Mapping[str, Any], loc: Loc) -> Text:
    parts = [str(block.get(k)) for k in ("title", "source") if isinstance(block.get(k), str)]
    body = _media(block.get("content"), loc.at("content"))
    texts = [b.text for b in body if isinstance(b, Text)]
    return Text("\n".join([f"[search result: {' - '.join(parts)}]", *texts]))


_MEDIA_TYPES = "'text', 'image', 'document', 'search_result' or 'tool_reference'"


def _media_block(block: Mapping[str, Any], loc: Loc) -> Text | Image | None:
    """One block of user content, a tool result or a system prompt; None when its type is
    unknown (skipped and counted)."""
    kind = block.get("type")
    if kind == "text":
        return Text(loc.need(block, "text", str))
    if kind == "image":
        return image_block(block, loc)
    if kind == "document":
        return document_block(block, loc)
    if kind == "search_result":
        return _search_result(block, loc)
    if kind == "tool_reference":  # tool search: the tool whose definition was loaded
        return Text(f"[tool reference: {loc.need(block, 'tool_name', str)}]")
    skip_block(kind, loc.at("type"), "block type", _MEDIA_TYPES)
    return None


def _server_tool_text(block: Mapping[str, Any]) -> Text:
    """A server tool call or its result (both inside an assistant turn) as text."""
    kind = str(block.get("type"))
    if kind == "server_tool_use":
        args = json.dumps(block.get("input") or {}, ensure_ascii=False)
        return Text(f"[server tool call {block.get('name')}: {args}]")
    content = block.get("content")
    lines = [f"[{kind.removesuffix('_tool_result')} result]"]
    items = content if isinstance(content, list) else [content]
    for item in items:
        if not isinstance(item, Mapping):
            if isinstance(item, str):
                lines.append(item)
            continue
        if item.get("type", "").endswith("_error") or "error_code" in item:
            lines.append(f"error: {item.get('error_code')}")
            continue
        title, url = item.get("title"), item.get("url")
        if isinstance(url, str):
            lines.append(f"- {title}: {url}" if isinstance(title, str) else f"- {url}")
        for key in ("stdout", "stderr", "text"):
            if isinstance(item.get(key), str) and item[key]:
                lines.append(item[key])
    return Text("\n".join(lines))


def _media(content: object, loc: Loc) -> tuple[Text | Image, ...]:
    """Content of a tool_result (or a system prompt): a string or text/image blocks."""
    if isinstance(content, str):
        return (Text(content),)
    if content is None:
        return ()
    blocks = (_media_block(loc.at(i).obj(b), loc.at(i)) for i, b in enumerate(loc.items(content)))
    return tuple(b for b in blocks if b is not None)


def _user_turn(content: object, loc: Loc) -> list[Message]:
    if isinstance(content, str):
        return [Message("user", (Text(content),))]
    results: list[Block] = []
    other: list[Block] = []
    for i, raw in enumerate(loc.items(content)):
        at = loc.at(i)
        block = at.obj(raw)
        kind = block.get("type")
        if kind == "tool_result":
            call_id = at.need(block, "tool_use_id", str)
            body = _media(block.get("content"), at.at("content"))
            results.append(ToolResult(call_id, body, bool(block.get("is_error", False))))
        elif kind in ("text", "image", "document", "search_result", "tool_reference"):
            media = _media_block(block, at)
            if media is not None:
                other.append(media)
        else:
            skip_block(
                kind,
                at.at("type"),
                "user block type",
                "'text', 'image', 'document', 'search_result' or 'tool_result'",
            )
    out = [Message("tool", tuple(results))] if results else []
    if other or not results:
        out.append(Message("user", tuple(other)))
    return out


def assistant_blocks(content: object, loc: Loc) -> list[Block]:
    """Neutral blocks from Anthropic assistant content (also used by the Claude Code importer)."""
    if isinstance(content, str):
        return [Text(content)] if content else []
    out: list[Block] = []
    for i, raw in enumerate(loc.items(content)):
        at = loc.at(i)
        block = at.obj(raw)
        kind = block.get("type")
        if kind == "text":
            out.append(Text(at.need(block, "text", str)))
        elif kind == "thinking":
            sig = block.get("signature")
            out.append(
                Thinking(at.need(block, "thinking", str), sig if isinstance(sig, str) else None)
            )
        elif kind == "redacted_thinking":
            out.append(redacted_thinking(block, at))
        elif kind == "tool_use":
            out.append(tool_call(block.get("id"), block.get("name"), block.get("input"), at))
        elif kind == "image":
            out.append(image_block(block, at))
        elif kind == "document":
            out.append(document_block(block, at))
        elif kind == "compaction":
            out.append(compaction_block(block, at))
        elif isinstance(kind, str) and (kind == "server_tool_use" or kind.endswith("_tool_result")):
            out.append(_server_tool_text(block))
        else:
            skip_block(
                kind,
                at.at("type"),
                "assistant block type",
                "'text', 'thinking', 'redacted_thinking', 'tool_use', 'compaction', "
                "'server_tool_use' or a server tool's '*_tool_result'",
            )
    return out


def compaction_block(block: Mapping[str, Any], loc: Loc) -> Compaction:
    """A ``compaction`` block (``BetaCompactionBlockParam``): ``content`` is the summary, or
    null for a compaction that failed (the API takes it back as a no-op; no other provider is
    sent anything of it).

    Raises:
        TranscriptError: ``content`` is neither a string nor null.
    """
    content = block.get("content")
    if content is not None and not isinstance(content, str):
        loc.at("content").fail("value", content, "a string (the summary) or null")
    text = COMPACTION_HEAD + content if content else ""
    return Compaction(text, "anthropic", copy_data(dict(block)))


def _split_compactions(blocks: list[Block]) -> list[list[Block]]:
    """``blocks`` of one assistant message as the messages they load to: each compaction
    alone, the blocks before and after it in messages of their own."""
    groups: list[list[Block]] = [[]]
    for b in blocks:
        if type(b) is Compaction:
            groups += [[b], []]
        else:
            groups[-1].append(b)
    return [g for g in groups if g] or [[]]


def system_messages(system: object, loc: Loc) -> list[Message]:
    """The top-level ``system`` (string or text blocks) as one system message (or none)."""
    if system is None:
        return []
    blocks = [b for b in _media(system, loc) if isinstance(b, Text)]
    return [Message("system", tuple(blocks))] if blocks else []


def load_anthropic(items: list[Any], loc: Loc) -> list[Message]:
    """Neutral messages from an Anthropic ``messages`` list.

    Raises:
        TranscriptError: an entry has an unknown role or block type, or a missing field.
    """
    out: list[Message] = []
    for i, raw in enumerate(items):
        at = loc.at(i)
        m = at.obj(raw)
        role = at.need(m, "role", str)
        if role == "user":
            out.extend(_user_turn(m.get("content"), at.at("content")))
        elif role == "assistant":
            blocks = assistant_blocks(m.get("content"), at.at("content"))
            for group in _split_compactions(blocks):
                out.append(
                    Message("assistant", tuple(group), meta={"provider_family": "anthropic"})
                )
        else:
            at.at("role").fail("role", role, "'user' or 'assistant'")
    return out
