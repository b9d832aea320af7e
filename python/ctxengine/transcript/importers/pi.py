"""pi / OpenClaw session JSONL.

Entries carry ``type``; messages are ``{"type": "message", "message": {...}}`` with roles
``user``, ``assistant``, ``toolResult`` (one per call), plus ``bashExecution`` and ``custom``
(sent to the model as user text: a command as pi shows it, with its exit code or
cancellation), and ``branchSummary``/``compactionSummary`` (user text with the summary prefix
pi sends). ``branch_summary`` and ``custom_message`` entries are user text too; like those
roles they are marked with ``meta["kind"]`` (the harness wrote them, not the user). Current
files (``"version": 3`` header) link entries by ``id``/``parentId``: the active branch is the
path from the last entry back to the root (an entry whose ``parentId`` names no entry is
that root, as pi reads it; its line is in ``meta["orphan_line"]``). Older files have no ids
and are read in order; their compactions name the first kept entry by its index in the file
(``firstKeptEntryIndex``) instead of its id. Entries that are not model context
(``model_change``, ``thinking_level_change``, ``custom``, ``label``, ``session_info`` and
types this reader does not know) are skipped and counted in ``meta["skipped_entries"]``.
Content blocks of a type it does not know are skipped and counted in ``meta["skipped_blocks"]``.

``view="full"`` keeps every message on the branch and records compactions in
``Transcript.meta["compactions"]``; ``view="model"`` starts from the latest compaction summary,
as pi itself rebuilds the context: then the kept messages (those a newer compaction copies into
its ``retainedTail``, else the branch's from its first kept entry) and what follows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult
from ..providers import api_family
from .common import Loc, read_jsonl, skip_block, tool_call
from .responses import ITEMS_KEY

__all__ = ("load_pi",)

_SUMMARY_PREFIX = "The conversation history before this point was compacted into this summary:\n\n"
_BRANCH_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n"


def _content(content: object, loc: Loc) -> list[Text | Image]:
    if isinstance(content, str):
        return [Text(content)]
    out: list[Text | Image] = []
    for i, raw in enumerate(loc.items(content or [])):
        block = loc.at(i).obj(raw)
        kind = block.get("type")
        if kind == "text":
            out.append(Text(loc.at(i).need(block, "text", str)))
        elif kind == "image":
            media = str(block.get("mimeType") or "image/png")
            out.append(Image(media, data=loc.at(i).need(block, "data", str)))
        else:
            skip_block(kind, loc.at(i).at("type"), "block type", "'text' or 'image'")
    return out


def _assistant(m: Mapping[str, Any], loc: Loc, renamed: dict[str, str]) -> Message:
    """An assistant message. For the Responses API pi keeps each call's output item id in its
    id (``<call_id>|<item id>``) and a text's in ``textSignature``: the call gets its call id
    (``renamed`` maps the stored id to it, for the results) and the item ids are kept in
    ``meta`` (the API pairs a reasoning item with the item after it by id). For Gemini a
    call's ``thoughtSignature`` becomes ``Thinking("", signature)`` right before it, as the
    Gemini importer keeps it (Gemini 3 rejects a current turn's call sent without it)."""
    family = api_family(m.get("api"))  # pi's api names, as providers.py maps them
    responses, google = family == "openai-responses", family == "gemini"
    blocks: list[Block] = []
    items: list[str | None] = []  # the Responses output item each block came from
    for i, raw in enumerate(loc.at("content").items(m.get("content") or [])):
        at = loc.at("content").at(i)
        block = at.obj(raw)
        kind = block.get("type")
        item: str | None = None
        if kind == "text":
            text = at.need(block, "text", str)
            if responses and not text:  # an empty output message: nothing to send
                continue
            blocks.append(Text(text))
            item = _text_item(block.get("textSignature")) if responses else None
        elif kind == "thinking":
            sig = block.get("thinkingSignature")
            text = at.need(block, "thinking", str)
            redacted = bool(block.get("redacted", False))
            blocks.append(Thinking(text, sig if isinstance(sig, str) else None, redacted))
        elif kind == "toolCall":
            call = tool_call(block.get("id"), block.get("name"), block.get("arguments"), at)
            sig = block.get("thoughtSignature")
            if google and isinstance(sig, str) and sig:  # Gemini's, sent back on the call
                blocks.append(Thinking("", sig))
            if responses and "|" in call.id:  # pi stores "<call_id>|<output item id>"
                call_id, _, item = call.id.partition("|")
                if call_id:
                    renamed[call.id] = call_id
                    call = ToolCall(call_id, call.name, call.arguments)
                item = item or None
            blocks.append(call)
        elif kind == "image":
            blocks.extend(_content([block], loc.at("content")))
        else:
            expected = "'text', 'thinking' or 'toolCall'"
            skip_block(kind, at.at("type"), "assistant block type", expected)
        items.extend([item] * (len(blocks) - len(items)))
    reason = m.get("stopReason")
    meta: dict[str, Any] = {"stop_reason_raw": reason}
    for key in ("api", "provider", "model", "errorMessage", "timestamp"):
        if key in m:
            meta[key] = m[key]
    if isinstance(m.get("api"), str):
        meta["provider_family"] = m["api"]
    if any(items):  # sent again with the ids the API pairs reasoning items by
        meta[ITEMS_KEY] = [[item, 1] for item in items]
    stop = reason if reason in ("error", "aborted") else None
    return Message("assistant", tuple(blocks), stop_reason=stop, meta=meta)


def _text_item(signature: object) -> str | None:
    """The output message id pi keeps in a Responses text block's ``textSignature``: the id
    itself, or (newer pi) a JSON object holding it under ``id``."""
    if not isinstance(signature, str) or not signature:
        return None
    if signature.startswith("{"):
        try:
            value = json.loads(signature)
        except ValueError:
            return None
        found = value.get("id") if isinstance(value, dict) else None
        return found if isinstance(found, str) and found else None
    return signature


def _bash_text(m: Mapping[str, Any], loc: Loc) -> str:
    """A shell command run from pi's prompt as pi sends it to the model: the command, its
    output (or ``(no output)``), then whether it was cancelled or its non-zero exit code and
    where a truncated output was saved."""
    command = loc.need(m, "command", str)
    output = m.get("output")
    text = f"Ran `{command}`\n" + (
        f"```\n{output}\n```" if isinstance(output, str) and output else "(no output)"
    )
    code = m.get("exitCode")
    if m.get("cancelled") is True:
        text += "\n\n(command cancelled)"
    elif isinstance(code, int) and not isinstance(code, bool) and code != 0:
        text += f"\n\nCommand exited with code {code}"
    full = m.get("fullOutputPath")
    if m.get("truncated") is True and isinstance(full, str) and full:
        text += f"\n\n[Output truncated. Full output: {full}]"
    return text


def _message(
    m: Mapping[str, Any], msg_id: str | None, loc: Loc, renamed: dict[str, str]
) -> Message:
    role = loc.need(m, "role", str)
    if role == "user":
        return Message("user", tuple(_content(m.get("content"), loc.at("content"))), msg_id)
    if role == "assistant":
        msg = _assistant(m, loc, renamed)
        return Message(msg.role, msg.blocks, msg_id, msg.stop_reason, msg.meta)
    if role == "toolResult":
        call_id = loc.need(m, "toolCallId", str)
        call_id = renamed.get(call_id, call_id)
        content = tuple(_content(m.get("content"), loc.at("content")))
        name = m.get("toolName") if isinstance(m.get("toolName"), str) else None
        result = ToolResult(call_id, content, bool(m.get("isError", False)), name)
        return Message("tool", (result,), msg_id)
    if role == "bashExecution":
        text = _bash_text(m, loc)
        return Message("user", (Text(text),), msg_id, meta={"kind": "bashExecution"})
    if role in ("branchSummary", "compactionSummary"):  # summaries stored as messages
        prefix = _BRANCH_PREFIX if role == "branchSummary" else _SUMMARY_PREFIX
        text = prefix + loc.need(m, "summary", str)
        return Message("user", (Text(text),), msg_id, meta={"kind": role})
    if role in ("custom", "hookMessage"):
        content = tuple(_content(m.get("content"), loc.at("content")))
        return Message("user", content, msg_id, meta={"kind": role})
    return loc.at("role").fail(
        "role",
        role,
        "'user', 'assistant', 'toolResult', 'bashExecution', 'custom', 'branchSummary' or "
        "'compactionSummary'",
    )


def _branch(
    entries: list[tuple[int, dict[str, Any]]], loc: Loc
) -> tuple[list[tuple[int, dict[str, Any]]], int | None]:
    """The entries on the active branch, root first (all entries for files without ids), and
    the line of the entry read as its root because its ``parentId`` names no entry (None when
    the chain is whole).

    pi walks from the leaf through ``parentId`` until a parent is not found
    (``buildSessionContext`` in ``session-manager.ts``; ``getTree`` calls such an entry an
    orphan "treated as root"): an entry whose parent is missing (lost lines, a file cut and
    pasted) starts the branch, the entries before it are off the branch.

    Raises:
        TranscriptError: an entry on the branch has no string id, a ``parentId`` that is
            neither a string nor null, or the chain loops (pi itself would never end).
    """
    body = [(n, e) for n, e in entries if e.get("type") != "session"]
    if not any("id" in e for _, e in body):
        return body, None
    by_id = {e["id"]: (n, e) for n, e in body if isinstance(e.get("id"), str)}
    path: list[tuple[int, dict[str, Any]]] = []
    orphan: int | None = None
    cur: tuple[int, dict[str, Any]] | None = body[-1] if body else None
    seen: set[str] = set()
    while cur is not None:
        n, e = cur
        entry_id = e.get("id")
        if not isinstance(entry_id, str):
            loc.at(f" line {n}").fail("id", entry_id, "a string (the entry's id in the tree)")
        if entry_id in seen:
            loc.at(f" line {n}").fail("parentId chain", entry_id, "no cycles")
        seen.add(entry_id)
        path.append(cur)
        parent = e.get("parentId")
        if parent is not None and not isinstance(parent, str):
            loc.at(f" line {n}").fail("parentId", parent, "the id of an entry (a string) or null")
        cur = by_id.get(parent) if parent is not None else None
        if parent is not None and cur is None:
            orphan = n  # its parent names no entry: the root of the branch, as pi reads it
    path.reverse()
    return path, orphan


def _latest_compaction(path: list[tuple[int, dict[str, Any]]]) -> int | None:
    for i in range(len(path) - 1, -1, -1):
        if path[i][1].get("type") == "compaction":
            return i
    return None


def _first_kept(
    entries: list[tuple[int, dict[str, Any]]], branch: list[tuple[int, dict[str, Any]]], ci: int
) -> int:
    """Where the kept messages of the compaction at ``branch[ci]`` start in ``branch``.

    Current files name the entry (``firstKeptEntryId``); version 1 files, which have no ids,
    give its index among the file's entries, the header counted (``firstKeptEntryIndex``).
    Without either (or naming no entry of the branch), the messages after the compaction.
    """
    comp = branch[ci][1]
    kept = comp.get("firstKeptEntryId")
    if isinstance(kept, str):
        ids = [e.get("id") for _, e in branch[:ci]]
        return ids.index(kept) if kept in ids else ci + 1
    index = comp.get("firstKeptEntryIndex")
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(entries):
        line = entries[index][0]
        lines = [n for n, _ in branch[:ci]]
        return lines.index(line) if line in lines else ci + 1
    return ci + 1


def load_pi(path: Path, *, view: str = "full") -> tuple[list[Message], dict[str, Any]]:
    """Messages and metadata of a pi/OpenClaw session file.

    Raises:
        TranscriptError: a line is not JSON, an entry is malformed, or the id chain loops.
    """
    loc = Loc(str(path))
    torn: list[int] = []  # a session still being written ends in a torn line: skipped
    entries = list(read_jsonl(path, torn))
    if not entries:
        loc.fail("file", "empty", "a pi session (JSONL)")
    header = entries[0][1] if entries[0][1].get("type") == "session" else {}
    branch, orphan = _branch(entries, loc)
    compactions = [
        {
            "summary": e.get("summary"),
            "first_kept": e.get("firstKeptEntryId", e.get("firstKeptEntryIndex")),
            "line": n,
            **(
                {"retained": len(e["retainedTail"])}
                if isinstance(e.get("retainedTail"), list)
                else {}
            ),
        }
        for n, e in branch
        if e.get("type") == "compaction"
    ]
    out: list[Message] = []
    renamed: dict[str, str] = {}  # a Responses call's stored id -> its call id
    start = 0
    if view == "model" and (ci := _latest_compaction(branch)) is not None:
        n, comp = branch[ci]
        text = _SUMMARY_PREFIX + str(comp.get("summary", ""))
        out.append(Message("user", (Text(text),), meta={"kind": "compactionSummary"}))
        tail = comp.get("retainedTail")
        if tail is None:
            start = _first_kept(entries, branch, ci)
        else:  # the kept messages, copied into the compaction (newer pi)
            at = loc.at(f" line {n}").at("retainedTail")
            out.extend(
                _message(at.at(i).obj(m), None, at.at(i), renamed)
                for i, m in enumerate(at.items(tail))
            )
            start = ci + 1
    skipped = 0
    for n, e in branch[start:]:
        at = loc.at(f" line {n}")
        kind = e.get("type")
        if kind == "message":
            msg_id = e.get("id") if isinstance(e.get("id"), str) else None
            raw = at.need(e, "message", Mapping)
            if raw.get("excludeFromContext"):  # e.g. a `!!` bash run kept out of the context
                skipped += 1
                continue
            out.append(_message(raw, msg_id, at.at("message"), renamed))
        elif kind == "branch_summary" and e.get("summary"):  # pi sends no empty summary
            text = _BRANCH_PREFIX + str(e["summary"])
            out.append(Message("user", (Text(text),), meta={"kind": "branchSummary"}))
        elif kind == "custom_message":  # an extension's message, sent as user content
            content = tuple(_content(e.get("content"), at.at("content")))
            out.append(Message("user", content, meta={"kind": "custom"}))
        else:
            skipped += 1
    meta = {"session": header, "compactions": compactions, "skipped_entries": skipped}
    if torn:
        meta["torn_line"] = torn[0]
    if orphan is not None:  # read as the root, as pi reads it: the lines before are lost
        meta["orphan_line"] = orphan
    return out, meta
