"""Claude Code session JSONL.

Each ``user``/``assistant`` record holds one Anthropic message, and one API response is split
over several records (one content block each) sharing ``message.id``; they are merged back.
Records are linked by ``uuid``/``parentUuid``. The active branch is the path from the last
message record back to the root (a record whose parent names no record is that root, as
Claude Code reads it; its line is in ``meta["orphan_line"]``); parallel tool calls put sibling
records off that path, so the branch also takes every record of an API message on the path and
every tool result answering one of its calls. Records are emitted in file order; a record
written again under the same ``uuid`` (a copy, as some versions append) is read once, at its
first line. Sub-agent records (``isSidechain``), which older versions write into the main file,
are left out unless the file holds nothing else (a sub-agent's own file). ``progress``, ``system``,
``file-history-snapshot``, ``queue-operation`` and ``summary`` lines are not model context.

A ``/compact`` starts a new root (``compact_boundary`` with ``logicalParentUuid``).
``view="full"`` follows it back and keeps the whole conversation (summaries go to
``Transcript.meta["compactions"]``); ``view="model"`` stops there and starts from the summary,
which is what the model saw. A file that starts at a compaction (the boundary's
``logicalParentUuid`` names a record of an earlier file) is whole, no orphan; its full view
keeps that summary, all the file holds of the history before it. Content blocks read as for
Anthropic: a block of a type this reader does not know (a newer version's) is skipped and
counted in ``meta["skipped_blocks"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..model import Block, Message
from .anthropic import assistant_blocks, load_anthropic
from .common import Loc, read_jsonl

__all__ = ("load_claude_code",)

_MESSAGE_TYPES = ("user", "assistant")
Record = dict[str, Any]


def _path_uuids(
    records: list[tuple[int, Record]], leaf: tuple[int, Record], *, full: bool
) -> tuple[set[str], int | None, str | None]:
    """The uuids on the path from ``leaf`` back to its root, the line of the record read
    as the root because its parent names no record (None when the chain is whole), and the
    uuid of a compaction boundary reached whose ``logicalParentUuid`` names no record.

    Claude Code rebuilds a conversation by walking ``parentUuid`` back from the last message
    and stops where a parent is not in the file (a uuid the writer never wrote, e.g. after a
    compaction: anthropics/claude-code issues #46603, #22107): that record is the root of what
    it resumes, and so it is here.

    A ``compact_boundary`` has no parent (``parentUuid`` null): it is a root, and none is
    lost there. Its ``logicalParentUuid`` (followed for ``full``) may name a record of an
    earlier file, as when a session file starts at a compaction: then that history is not in
    this file, which is whole all the same.
    """
    by_uuid = {r["uuid"]: (n, r) for n, r in records if isinstance(r.get("uuid"), str)}
    seen: set[str] = set()
    orphan: int | None = None
    cut: str | None = None
    cur: tuple[int, Record] | None = leaf
    while cur is not None and cur[1].get("uuid") not in seen:
        n, r = cur
        seen.add(str(r.get("uuid")))
        parent = r.get("parentUuid")
        logical = parent is None and full
        if logical:
            parent = r.get("logicalParentUuid")
        cur = by_uuid.get(parent) if isinstance(parent, str) else None
        if isinstance(parent, str) and cur is None:
            if logical:
                cut = str(r.get("uuid"))
            else:
                orphan = n
    return seen, orphan, cut


def _check(n: int, r: Record, loc: Loc) -> None:
    """Check the fields of message record ``r`` (line ``n``) that the branch walk hashes and
    compares: of the wrong kind, they would surface as a bare TypeError or AttributeError
    from deep in the walk instead of an error naming the line and the field.

    Raises:
        TranscriptError: ``message`` is not an object, ``uuid``/``parentUuid``/``message.id``
            is neither a string nor null, or a ``tool_result``'s ``tool_use_id`` is not a
            string.
    """
    at = loc.at(f" line {n}")
    for key in ("uuid", "parentUuid"):
        if r.get(key) is not None and not isinstance(r[key], str):
            at.at(key).fail(key, r[key], "a string or null")
    message = at.need(r, "message", Mapping)
    if message.get("id") is not None and not isinstance(message["id"], str):
        at.at("message.id").fail("message id", message["id"], "a string or null")
    content = message.get("content")
    if r["type"] == "user" and isinstance(content, list):
        for i, block in enumerate(content):
            if not isinstance(block, Mapping) or block.get("type") != "tool_result":
                continue
            # compared with the call ids of the branch (a missing one matches none: a record
            # off the active branch may lack it, and one on it is read as it always was)
            cid = block.get("tool_use_id")
            if cid is not None and not isinstance(cid, str):
                at.at("message.content").at(i).at("tool_use_id").fail("value", cid, "a string")


def _first_copies(messages: list[tuple[int, Record]]) -> list[tuple[int, Record]]:
    """The message records with each ``uuid`` once, at its first line.

    Claude Code reads a session into a map by ``uuid``, so a record written again under the
    same uuid is one record to it. Versions 2.1.237 to 2.1.260 write such copies: a second
    ``/compact`` in one process appends again every message held since the history began,
    keeping their ``uuid``, ``parentUuid`` and ``timestamp`` (anthropics/claude-code issue
    #92089). Read as records of their own, every copied turn came twice, and an assistant
    message merged with its copy held each call twice.
    """
    seen: set[str] = set()
    out = []
    for n, r in messages:
        uuid = r.get("uuid")
        if isinstance(uuid, str):
            if uuid in seen:
                continue
            seen.add(uuid)
        out.append((n, r))
    return out


def _select(
    records: list[tuple[int, Record]], loc: Loc, *, full: bool
) -> tuple[list[tuple[int, Record]], int | None, str | None]:
    """The message records of the active branch, in file order, the line of the record
    read as its root because its parent names no record, and the uuid of a compaction
    boundary whose history is in an earlier file (see :func:`_path_uuids`).

    Raises:
        TranscriptError: a message record is malformed (see :func:`_check`).
    """
    messages = [(n, r) for n, r in records if r.get("type") in _MESSAGE_TYPES]
    for n, r in messages:
        _check(n, r, loc)
    messages = _first_copies(messages)
    if any(not r.get("isSidechain") for _, r in messages):
        # older versions log sub-agent (Task) conversations inline, marked isSidechain: they
        # are not the main model's context, and the last line may be one of them
        messages = [(n, r) for n, r in messages if not r.get("isSidechain")]
    if not messages:
        return [], None, None
    on_path, orphan, cut = _path_uuids(records, messages[-1], full=full)
    if orphan == messages[0][0] and all(r.get("isSidechain") for _, r in messages):
        orphan = None  # a sub-agent's own file: its first record's parent is in the main one
    picked = [(n, r) for n, r in messages if r.get("uuid") in on_path]
    api_ids = {r["message"].get("id") for _, r in picked if r["type"] == "assistant"}
    call_ids: set[str] = set()
    chosen: set[int] = set()
    for n, r in messages:
        if r.get("uuid") in on_path or (
            r["type"] == "assistant" and r["message"].get("id") in api_ids
        ):
            chosen.add(n)
            if r["type"] == "assistant":
                content = r["message"].get("content")
                if isinstance(content, list):
                    call_ids.update(
                        str(b.get("id"))
                        for b in content
                        if isinstance(b, dict) and b.get("type") == "tool_use"
                    )
    for n, r in messages:
        content = r["message"].get("content")
        if (
            r["type"] == "user"
            and isinstance(content, list)
            and any(isinstance(b, dict) and b.get("tool_use_id") in call_ids for b in content)
        ):
            chosen.add(n)
    return [(n, r) for n, r in messages if n in chosen], orphan, cut


def _assistant(group: list[tuple[int, Record]], loc: Loc) -> Message:
    blocks: list[Block] = []
    first = group[0][1]
    for n, r in group:
        msg = r["message"]  # an object: checked by _select
        blocks.extend(
            assistant_blocks(msg.get("content"), loc.at(f" line {n}").at("message.content"))
        )
    message = first["message"]
    error = any(r.get("isApiErrorMessage") for _, r in group)
    meta = {
        "provider_family": "anthropic",
        "model": message.get("model"),
        "uuid": first.get("uuid"),
        "timestamp": first.get("timestamp"),
    }
    return Message("assistant", tuple(blocks), message.get("id"), "error" if error else None, meta)


def _convert(selected: list[tuple[int, Record]], loc: Loc) -> tuple[list[Message], list[Any]]:
    out: list[Message] = []
    compactions: list[Any] = []
    groups: dict[str, list[tuple[int, Record]]] = {}
    order: list[tuple[str, Any]] = []
    for n, r in selected:
        message = r["message"]  # an object: checked by _select
        if r["type"] == "assistant":
            key = message.get("id") or r.get("uuid") or f"line{n}"
            if key not in groups:
                groups[key] = []
                order.append(("assistant", key))
            groups[key].append((n, r))
        else:
            order.append(("user", (n, r)))
    for kind, item in order:
        if kind == "assistant":
            out.append(_assistant(groups[item], loc))
            continue
        n, r = item
        if r.get("isCompactSummary"):
            compactions.append({"summary": r["message"].get("content"), "line": n})
        user = {"role": "user", "content": r["message"].get("content")}
        for m in load_anthropic([user], loc.at(f" line {n}").at("message")):
            meta = {"uuid": r.get("uuid"), "timestamp": r.get("timestamp")}
            if r.get("isMeta"):
                meta["is_meta"] = True
            if r.get("isCompactSummary"):
                meta["compact_summary"] = True
            out.append(Message(m.role, m.blocks, r.get("uuid"), None, meta))
    return out, compactions


def load_claude_code(path: Path, *, view: str = "full") -> tuple[list[Message], dict[str, Any]]:
    """Messages and metadata of a Claude Code session file.

    Raises:
        TranscriptError: a line is not JSON or a message record is malformed (the message
            names the line, the field and what was expected).
    """
    loc = Loc(str(path))
    torn: list[int] = []  # a session still being written ends in a torn line: skipped
    records = list(read_jsonl(path, torn))
    full = view != "model"
    selected, orphan, cut = _select(records, loc, full=full)
    messages, compactions = _convert(selected, loc)
    if full:
        # the summary stands in for the history before its compaction, which the full view
        # holds: kept only where that history is in an earlier file (the file starts there)
        alone = {r.get("uuid") for _, r in selected if cut and r.get("parentUuid") == cut}
        messages = [
            m for m in messages if not m.meta.get("compact_summary") or m.meta["uuid"] in alone
        ]
    session = next((r.get("sessionId") for _, r in records if r.get("sessionId")), None)
    skipped = len(records) - len(selected)
    meta = {"session_id": session, "compactions": compactions, "skipped_records": skipped}
    if torn:
        meta["torn_line"] = torn[0]
    if orphan is not None:  # the root, as Claude Code reads it: the lines before are lost
        meta["orphan_line"] = orphan
    return messages, meta
