"""Agent logs read as their writers read them, on the real shapes of their files: an entry
whose parent is missing (pi, Claude Code), an OpenHands V1 Responses reasoning item, aider's
in-chat commands and empty sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from ctxengine.engine import ContextEngine
from ctxengine.replay import replay
from ctxengine.transcript import Thinking, Transcript, first_session, load, load_all

from .helpers import AIDER, CC, PI
from .test_variants import engine_payloads_valid

CC_MAIN = CC / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _pi_v3(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A version 1 pi session as pi migrates it to the tree format (``migrateV1ToV2`` in
    badlogic/pi-mono ``packages/coding-agent/src/core/session-manager.ts``): every entry gets
    an id and the previous entry as its parent, the header ``version`` 3."""
    out = [{**rows[0], "version": 3}]
    prev: str | None = None
    for i, row in enumerate(rows[1:]):
        eid = f"e{i:04d}"
        out.append({**row, "id": eid, "parentId": prev})
        prev = eid
    return out


def test_pi_entry_whose_parent_is_missing_is_the_root_of_the_branch(tmp_path: Path) -> None:
    """pi walks from the leaf through ``parentId`` and stops where ``byId`` has no such entry
    (``buildSessionContext`` in badlogic/pi-mono ``session-manager.ts``; its ``getTree``
    returns such "orphaned entries (broken parent chain)" as roots): a session with a lost
    line resumes from the entry after it. It was a TranscriptError; it loads as pi reads it,
    the orphan's line in ``meta["orphan_line"]``, as a torn line is in ``torn_line``."""
    rows = [json.loads(line) for line in PI.read_text(encoding="utf-8").splitlines()]
    tree = _pi_v3(rows)
    whole = load(_write_jsonl(tmp_path / "whole.jsonl", tree))
    assert "orphan_line" not in whole.meta
    cut = next(i for i in range(len(tree) // 2, len(tree)) if tree[i]["type"] == "message")
    lost = [*tree[:cut], *tree[cut + 1 :]]  # the line of entry `cut` lost
    t = load(_write_jsonl(tmp_path / "lost.jsonl", lost))
    assert t.meta["orphan_line"] == cut + 1  # 1-based: the entry after the lost one
    root = {**tree[cut + 1], "parentId": None}
    after = load(_write_jsonl(tmp_path / "after.jsonl", [tree[0], root, *tree[cut + 2 :]]))
    assert t.messages == after.messages  # what pi sends: the branch from the orphan on
    assert 0 < len(t.messages) < len(whole.messages)


def test_claude_code_record_whose_parent_is_missing_is_recorded(tmp_path: Path) -> None:
    """Claude Code rebuilds a session by walking ``parentUuid`` back from the last message
    and stops at a parent the file does not hold (anthropics/claude-code #46603: a compaction
    wrote messages whose ``parentUuid`` was never written, and ``--resume`` shows only what
    is reachable): the record after the break is the root. It read so already, but silently:
    the loss is recorded in ``meta["orphan_line"]``, as a torn line is in ``torn_line``."""
    path = CC / "tool_heavy.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    whole = load(_write_jsonl(tmp_path / "whole.jsonl", rows))
    assert "orphan_line" not in whole.meta
    parents = {r.get("parentUuid") for r in rows}
    cut = next(
        i
        for i in range(len(rows) // 2, len(rows))
        if rows[i].get("type") == "user" and rows[i].get("uuid") in parents
    )
    child = next(i for i, r in enumerate(rows) if r.get("parentUuid") == rows[cut]["uuid"])
    lost = [*rows[:cut], *rows[cut + 1 :]]
    t = load(_write_jsonl(tmp_path / "lost.jsonl", lost))
    assert t.meta["orphan_line"] == child  # 1-based line of the child, one line up
    assert len(t.messages) < len(whole.messages)
    assert whole.messages[-1] == t.messages[-1]


def _v1_action(eid: str, call_id: str, command: str, **kw: Any) -> dict[str, Any]:
    """An ``ActionEvent`` as the OpenHands software-agent SDK saves it for a Responses-API
    model (fields of ``ActionEvent`` in OpenHands/software-agent-sdk
    ``openhands-sdk/openhands/sdk/event/llm_convertible/action.py``; the call as
    ``MessageToolCall.from_responses_function_call`` keeps it)."""
    args = json.dumps({"command": command})
    return {
        "kind": "ActionEvent",
        "id": eid,
        "timestamp": "2025-11-01T10:00:00",
        "source": "agent",
        "thought": kw.pop("thought", []),
        "reasoning_content": None,
        "thinking_blocks": [],
        "responses_reasoning_item": kw.pop("reasoning", None),
        "action": {"kind": "TerminalAction", "command": command},
        "tool_name": "terminal",
        "tool_call_id": call_id,
        "tool_call": {
            "id": call_id,
            "responses_item_id": f"fc_{call_id}",
            "name": "terminal",
            "arguments": args,
            "origin": "responses",
        },
        "llm_response_id": "resp_1",
        "security_risk": "LOW",
    }


def _v1_observation(eid: str, call_id: str, action_id: str, body: str) -> dict[str, Any]:
    observation = {"kind": "TerminalObservation", "content": [{"type": "text", "text": body}]}
    return {
        "kind": "ObservationEvent",
        "id": eid,
        "timestamp": "2025-11-01T10:00:01",
        "source": "environment",
        "tool_name": "terminal",
        "tool_call_id": call_id,
        "action_id": action_id,
        "observation": observation,
    }


def test_openhands_v1_responses_reasoning_item_is_the_turns_thinking() -> None:
    """The SDK keeps an OpenAI Responses model's reasoning as ``responses_reasoning_item``
    (a ``ReasoningItemModel``) on the first action of a response, sends it back with the
    turn's calls (``ActionEvent.to_llm_message``; ``_combine_action_events`` in
    ``openhands/sdk/event/base.py`` takes the first action's) as a ``reasoning`` input item
    built by ``_build_reasoning_item`` (``openhands/sdk/llm/utils/responses_serialization.py``).
    It was dropped; it is the turn's Thinking, its item kept whole in the signature, as the
    Responses importer keeps a reasoning item, and the turn is marked as the Responses API's."""
    reasoning = {
        "id": "rs_1",
        "summary": ["Check the tree first.", "Then the tests."],
        "content": None,
        "encrypted_content": "gAAAAB-opaque",
        "status": None,
    }
    user = {"role": "user", "content": [{"type": "text", "text": "Fix the tests"}]}
    events = [
        {
            "kind": "MessageEvent",
            "id": "u1",
            "timestamp": "2025-11-01T09:59:59",
            "source": "user",
            "llm_message": user,
        },
        _v1_action("a1", "call_1", "ls", reasoning=reasoning),
        _v1_action("a2", "call_2", "pytest -q"),
        _v1_observation("o1", "call_1", "a1", "src tests"),
        _v1_observation("o2", "call_2", "a2", "1 failed"),
    ]
    t = load(events)
    turn = t[1]
    thinking = [b for b in turn.blocks if isinstance(b, Thinking)]
    assert [b.text for b in thinking] == ["Check the tree first.\n\nThen the tests."]
    assert json.loads(thinking[0].signature or "") == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [
            {"type": "summary_text", "text": "Check the tree first."},
            {"type": "summary_text", "text": "Then the tests."},
        ],
        "encrypted_content": "gAAAAB-opaque",
    }
    assert [c.id for c in turn.tool_calls] == ["call_1", "call_2"]
    assert turn.meta["provider_family"] == "openai-responses"
    items = t.to("openai-responses")["input"]
    assert [i["type"] for i in items][:4] == [
        "message",
        "reasoning",
        "function_call",
        "function_call",
    ]
    assert items[1]["id"] == "rs_1" and items[1]["encrypted_content"] == "gAAAAB-opaque"
    # each call with the item id the SDK echoes (``MessageToolCall.to_responses_dict``): the
    # API pairs the reasoning item with the item after it by id
    assert [(i["id"], i["call_id"]) for i in items[2:4]] == [
        ("fc_call_1", "call_1"),
        ("fc_call_2", "call_2"),
    ]
    assert "reasoning" not in json.dumps(t.to("openai")), "Chat Completions takes no reasoning"
    engine_payloads_valid(t)


def test_openhands_v1_call_saved_without_item_id_goes_out_as_the_sdk_sends_it() -> None:
    """A ``tool_call`` saved by an SDK version before ``responses_item_id`` has none; the SDK
    sends such a call with the item id ``MessageToolCall.to_responses_dict`` makes (in
    OpenHands/software-agent-sdk ``openhands-sdk/openhands/sdk/llm/message.py``): the call id
    itself when it starts with ``fc``, else ``fc_`` + the call id. It went out with no id
    after the reasoning item, which the API pairs with the item after it by id."""
    reasoning = {"id": "rs_1", "summary": ["plan"], "encrypted_content": "gAAAAB-opaque"}
    old_a1 = _v1_action("a1", "call_1", "ls", reasoning=reasoning)
    old_a2 = _v1_action("a2", "fc_2", "pytest -q")
    for event in (old_a1, old_a2):
        del event["tool_call"]["responses_item_id"]
    user = {"role": "user", "content": [{"type": "text", "text": "Fix the tests"}]}
    events = [
        {"kind": "MessageEvent", "id": "u1", "source": "user", "llm_message": user},
        old_a1,
        old_a2,
        _v1_observation("o1", "call_1", "a1", "src tests"),
        _v1_observation("o2", "fc_2", "a2", "1 failed"),
    ]
    items = load(events).to("openai-responses")["input"]
    assert [(i["type"], i.get("id"), i.get("call_id")) for i in items[1:4]] == [
        ("reasoning", "rs_1", None),
        ("function_call", "fc_call_1", "call_1"),
        ("function_call", "fc_2", "fc_2"),
    ]
    assert [i["call_id"] for i in items[4:]] == ["call_1", "fc_2"]


def _aider_input(text: str) -> str:
    """An input as aider logs it (``InputOutput.user_input`` in Aider-AI/aider
    ``aider/io.py``): a blank line, then each line after ``#### ``, ended by two spaces."""
    return "\n" + "  \n".join(f"#### {line}" for line in text.splitlines()) + "  \n"


def _aider_tool(*lines: str) -> str:
    """Tool output as aider logs it (``tool_output``): a ``> `` blockquote line, two spaces."""
    return "".join(f"> {line}  \n" for line in lines)


def _load_aider_log(folder: Path, log: str) -> Transcript:
    """``log`` written as aider's chat history file in ``folder``, loaded."""
    path = folder / ".aider.chat.history.md"
    path.write_text(log, encoding="utf-8")
    return load(path)


_AIDER_BANNER = (
    "> Aider v0.86.2  \n> Model: gpt-4o with diff edit format  \n"
    "> Git repo: .git with 735 files  \n> Repo-map: using 1024 tokens, auto refresh  \n"
)


def test_aider_commands_are_run_not_sent_and_prompt_commands_send_their_prompt(
    tmp_path: Path,
) -> None:
    """aider runs an input starting with ``/`` or ``!`` as a command (``Commands.is_command``
    and ``Commands.run`` in Aider-AI/aider ``aider/commands.py``; ``!x`` is ``/run x``, an
    abbreviation resolves as ``matching_commands`` does) and sends the model nothing of it;
    ``/ask``, ``/code``, ``/architect``, ``/context`` send their argument as the user's
    message (``_generic_chat_command``: ``coder.run(args)``). Each command was a user
    message, sent again on replay as if the user had typed ``/add src/app.py`` to the model;
    the summary's requests came from those texts. Commands are in ``meta["commands"]``; a
    prompt command's prompt is the user message, marked with its command."""
    log = (
        "\n# aider chat started at 2026-04-22 22:40:12\n\n"
        + _AIDER_BANNER
        + _aider_input("/add src/app.py")
        + _aider_tool("Added src/app.py to the chat")
        + _aider_input("/ask why is the import slow?")
        + "\nIt reads every file twice.\n\n"
        + _aider_tool("Tokens: 1.8k sent, 653 received.")
        + _aider_input("!ls src")
        + _aider_tool("Add 0.0k tokens of command output to the chat? (Y)es/(N)o [Yes]: n")
        + _aider_input("/a src/b.py")  # ambiguous: /add, /architect, /ask
        + _aider_tool("Ambiguous command: /add, /architect, /ask")
        + _aider_input("/dr src/app.py")
        + _aider_tool("Removed src/app.py from the chat")
        + _aider_input("make it read each file once\nand keep the cache")
        + "\nDone.\n\n"
        + _aider_tool("Tokens: 2.1k sent, 40 received.")
        + _aider_input("/ok add a test")
        + "\nAdded.\n\n"
        + _aider_tool("Tokens: 2.3k sent, 30 received.")
    )
    t = _load_aider_log(tmp_path, log)
    users = [(m.text, m.meta.get("command")) for m in t if m.role == "user"]
    assert users == [
        ("why is the import slow?", "/ask"),
        ("make it read each file once\nand keep the cache", None),
        ("Ok, please go ahead and make those changes. add a test", "/ok"),
    ]
    assert [m.role for m in t] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert t.meta["commands"] == ["/add src/app.py", "!ls src", "/a src/b.py", "/dr src/app.py"]


def test_aider_load_gives_the_first_session_holding_messages(tmp_path: Path) -> None:
    """A launch of aider quit before any input logs a header and its banner only (the
    ``# aider chat started at`` line is written by ``InputOutput.__init__``). ``load()`` gave
    that empty session, which nothing can replay; it gives the first session with messages,
    and ``load_all`` still numbers every launch."""
    empty = (
        "\n# aider chat started at 2026-04-22 22:39:58\n\n"
        + _AIDER_BANNER
        + _aider_tool("^C KeyboardInterrupt")
    )
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(empty + AIDER.read_text(encoding="utf-8"), encoding="utf-8")
    sessions = load_all(path)
    assert len(sessions) == 4 and len(sessions[0]) == 0
    t = load(path)
    assert t.messages == sessions[1].messages == load(AIDER).messages
    assert len(load(path, session=0)) == 0  # named, it is still given


def _cleared_then_launched(path: Path) -> None:
    """An aider log of two launches, the first ending with ``/clear``."""
    path.write_text(
        "\n# aider chat started at 2026-04-22 22:40:12\n\n"
        + _AIDER_BANNER
        + _aider_input("explain module a")
        + "\nModule a parses the config.\n\n"
        + _aider_tool("Tokens: 1k sent, 5 received.")
        + _aider_input("/clear")
        + _aider_tool("All chat history cleared.")
        + "\n# aider chat started at 2026-04-23 09:00:00\n\n"
        + _AIDER_BANNER
        + _aider_input("write a haiku")
        + "\nAn old silent pond.\n\n"
        + _aider_tool("Tokens: 0.5k sent, 9 received."),
        encoding="utf-8",
    )


def test_aider_both_views_give_the_same_launch_when_none_is_named(tmp_path: Path) -> None:
    """A launch that ends with ``/clear`` holds no message in the model view: ``load(path,
    view="model")`` took the next launch while ``load(path)`` took this one, two views of one
    file naming different sessions. The full view chooses; the model view of that launch is
    empty, and given as such (``load`` gives an empty transcript wherever nothing is held)."""
    path = tmp_path / ".aider.chat.history.md"
    _cleared_then_launched(path)
    full, model = load(path), load(path, view="model")
    assert full.meta["started_at"] == model.meta["started_at"] == "2026-04-22 22:40:12"
    assert len(full) == 2 and len(model) == 0
    assert [len(t) for t in load_all(path, view="model")] == [0, 2]  # every launch still there
    assert load(path, view="model", session=1).meta["started_at"] == "2026-04-23 09:00:00"
    assert first_session(load_all(path)) == 0


def test_aider_clear_indexes_count_the_transcript_they_sit_on(tmp_path: Path) -> None:
    """``meta["clears"][i]["index"]`` counted the messages of the full view, also in the model
    view, which holds only what follows the last clear: an index past its end. It counts the
    messages of the transcript it is attached to: in the model view, 0 for every clear."""
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(
        "\n# aider chat started at 2026-04-22 22:40:12\n\n"
        + _AIDER_BANNER
        + _aider_input("explain module a")
        + "\nModule a parses the config.\n\n"
        + _aider_tool("Tokens: 1k sent, 5 received.")
        + _aider_input("/clear")
        + _aider_tool("All chat history cleared.")
        + _aider_input("explain module b")
        + "\nModule b writes the log.\n\n"
        + _aider_tool("Tokens: 1k sent, 5 received.")
        + _aider_input("/reset")
        + _aider_tool("All files dropped and chat history cleared.")
        + _aider_input("write a haiku")
        + "\nAn old silent pond.\n\n"
        + _aider_tool("Tokens: 0.5k sent, 9 received."),
        encoding="utf-8",
    )
    full, model = load(path), load(path, view="model")
    assert [c["index"] for c in full.meta["clears"]] == [2, 4]
    assert [m.meta.get("after_clear") for m in full] == [None, None, "/clear", None, "/reset", None]
    assert [(c["command"], c["index"]) for c in model.meta["clears"]] == [
        ("/clear", 0),
        ("/reset", 0),
    ]
    assert [c["line"] for c in model.meta["clears"]] == [c["line"] for c in full.meta["clears"]]
    for t in (full, model):  # each index is where what follows the clear starts
        for clear in t.meta["clears"]:
            assert 0 <= clear["index"] <= len(t)
        assert t.messages[t.meta["clears"][-1]["index"] :] == model.messages
    assert [m.text for m in model] == ["write a haiku", "An old silent pond."]


def test_the_aider_command_lists_and_first_session_are_public() -> None:
    """``compaction/requests.py`` imports ``COMMANDS`` and ``REQUEST_COMMANDS`` from the aider
    importer, and the command line ``first_session`` from the loader: each is in the
    ``__all__`` of the module that exports it (the package's, for ``first_session``)."""
    import ctxengine.transcript as package
    from ctxengine.transcript import loader
    from ctxengine.transcript.importers import aider

    assert {"COMMANDS", "REQUEST_COMMANDS"} <= set(aider.__all__)
    assert set(loader.__all__) <= set(package.__all__)
    assert package.first_session is loader.first_session


def test_claude_code_sub_agent_file_root_is_no_orphan() -> None:
    """A sub-agent's own file (every record ``isSidechain``) starts with a record whose
    ``parentUuid`` is the main session's record that started it: the file is whole, no line
    was lost, and nothing is recorded."""
    sub = CC / "ae4a77f8-aedd-4bc1-888f-c94edc91af04" / "subagents" / "agent-acompact-946d2b.jsonl"
    first = json.loads(sub.read_text(encoding="utf-8").splitlines()[0])
    main = CC / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
    assert first["isSidechain"] and first["parentUuid"] in main.read_text(encoding="utf-8")
    t = load(sub)
    assert len(t) == 2 and "orphan_line" not in t.meta


def test_claude_code_file_starting_at_a_compaction_is_whole(tmp_path: Path) -> None:
    """A session file that starts at a compaction (the real boundary of this log, the file
    cut there): its first record is the ``compact_boundary``, ``parentUuid`` null (a root),
    ``logicalParentUuid`` naming the pre-compaction record of an earlier file, the shape of
    anthropics/claude-code #40027 (a compacted session whose parent file is gone resumes "using
    the compact summary already present in the session file"). The full view followed that
    link and reported the boundary as an orphan, and dropped the summary as it does where the
    history it stands for is in the file: here it is all the file holds of that history. No
    orphan, and both views hold the summary and what follows it."""
    rows = CC_MAIN.read_text(encoding="utf-8").splitlines()
    b = next(i for i, line in enumerate(rows) if '"compact_boundary"' in line)
    boundary = json.loads(rows[b])
    uuids = {json.loads(line).get("uuid") for line in rows[b:]}
    assert boundary["parentUuid"] is None and boundary["logicalParentUuid"] not in uuids
    path = tmp_path / "continued.jsonl"
    path.write_text("\n".join(rows[b:]) + "\n", encoding="utf-8")
    full, model = load(path), load(path, view="model")
    assert "orphan_line" not in full.meta and "orphan_line" not in model.meta
    assert full.messages == model.messages
    assert full[0].meta.get("compact_summary") and len(full.meta["compactions"]) == 1
    whole = load(CC_MAIN)  # the history in the file: its summary is not a message
    assert not any(m.meta.get("compact_summary") for m in whole)
    assert whole.messages[-len(full) + 1 :] == full.messages[1:]


def test_aider_reply_a_command_caused_follows_the_user_turn_it_sent(tmp_path: Path) -> None:
    """aider sends what a command's handler returns (``Coder.preproc_user_input`` returns
    ``self.commands.run(inp)``; ``run_one`` sends it while there is a message, unlogged), and
    the coder a command runs logs what it sends as an input (``Coder.run`` calls
    ``io.user_input``), in Aider-AI/aider ``aider/coders/base_coder.py`` and
    ``aider/commands.py``: a failing ``/test`` returns ``prompts.run_output`` (``cmd_run(args,
    True)``; its output goes to the terminal, only ``Added 12 lines of output to the chat.``
    to the log), ``/undo`` ``prompts.undo_command_reply``, ``/paste`` the clipboard text it
    also logs as tool output; ``/ask`` and ``/help`` run a coder on the prompt (``Help.ask``
    makes ``# Question: ...`` of it), ``/lint`` one on each file's errors once the fix is
    confirmed. The model's replies to the first three followed the previous reply with no
    user turn, and ``/ask``'s prompt was two user turns (the command's and its coder's log)."""
    log = (
        "\n# aider chat started at 2026-04-22 22:40:12\n\n"
        + _AIDER_BANNER
        + _aider_input("make the parser strict")
        + "\nDone: parser is strict.\n\n"
        + _aider_tool("Tokens: 2.1k sent, 40 received.")
        + _aider_input("/test")
        + _aider_tool("Added 12 lines of output to the chat.")
        + "\nStrict mode rejects trailing commas; fixing.\n\n"
        + _aider_tool("Tokens: 2.9k sent, 60 received.")
        + _aider_input("/undo")
        + _aider_tool("Removed: 1a2b3c4 feat: strict parser", "HEAD is: 9f8e7d6 init")
        + "\nUnderstood, I will wait.\n\n"
        + _aider_tool("Tokens: 3.0k sent, 8 received.")
        + _aider_input("/paste")
        + "> Traceback (most recent call last):  \n"
        + '  File "app.py", line 3, in <module>\n'
        + "KeyError: 'config'\n"
        + "\nThe config file is missing.\n\n"
        + _aider_tool("Tokens: 3.2k sent, 20 received.")
        + _aider_input("/ask can we make the terminal automatically scroll down?")
        + _aider_input("can we make the terminal automatically scroll down?")
        + "\nYes, after each send.\n\n"
        + _aider_tool("Tokens: 3.4k sent, 9 received.")
        + _aider_input("/help how do I add files?")
        + _aider_input("# Question: how do I add files?\n\n# Relevant docs:\n\nUse /add.")
        + "\nRun /add with the file names.\n\n"
        + _aider_tool("Tokens: 1.1k sent, 9 received.")
        + _aider_input("/lint")
        + _aider_tool(
            "src/a.py:3:1: F401 'os' imported but unused",
            "Fix lint errors in /repo/src/a.py? (Y)es/(N)o [Yes]: y",
        )
        + _aider_input("## Running: flake8 src/a.py\n\nsrc/a.py:3:1: F401 'os' imported but unused")
        + "\nRemoved the import.\n\n"
        + _aider_tool("Tokens: 0.9k sent, 12 received.")
        + _aider_input("thanks")
        + "\nYou're welcome.\n\n"
        + _aider_tool("Tokens: 3.5k sent, 4 received.")
    )
    t = _load_aider_log(tmp_path, log)
    assert [m.role for m in t] == ["user", "assistant"] * 8
    users = [m for m in t if m.role == "user"]
    assert [m.meta.get("command") for m in users] == [
        None, "/test", "/undo", "/paste", "/ask", "/help", "/lint", None,
    ]  # fmt: skip
    assert users[1].text == (
        "I ran this command:\n\n[the test command, not in the log]\n\n"
        "And got this output:\n\n[12 lines of output, not in the log]\n"
    )
    assert users[1].meta["reconstructed"] and users[1].meta["kind"] == "observation"
    assert users[2].text.startswith("I did `git reset --hard HEAD~1` to discard the last edits.")
    assert "reconstructed" not in users[2].meta
    assert users[3].text == (
        'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\n'
        "KeyError: 'config'"
    )
    assert "kind" not in users[3].meta and "kind" not in users[4].meta  # the user's own text
    assert users[4].text == "can we make the terminal automatically scroll down?"
    assert users[5].text.startswith("# Question: how do I add files?")
    assert users[6].text.startswith("## Running: flake8") and users[6].meta["kind"]
    assert t.meta["commands"] == ["/test", "/undo", "/paste", "/help how do I add files?", "/lint"]
    engine_payloads_valid(t)


def test_aider_clear_empties_the_history_later_requests_hold(tmp_path: Path) -> None:
    """``/clear`` and ``/reset`` empty aider's chat history (``_clear_chat_history`` in
    Aider-AI/aider ``aider/commands.py`` sets ``done_messages`` and ``cur_messages`` to ``[]``):
    the requests after one hold none of the turns before it. The transcript kept them as the
    next request's history. They stay in the full view, the clear recorded in
    ``meta["clears"]`` and on the next message (``after_clear``); the model view holds what
    the last request held, and a replay starts over there."""
    log = (
        "\n# aider chat started at 2026-04-22 22:40:12\n\n"
        + _AIDER_BANNER
        + _aider_input("explain module a")
        + "\nModule a parses the config.\n\n"
        + _aider_tool("Tokens: 1k sent, 5 received.")
        + _aider_input("/clear")
        + _aider_tool("All chat history cleared.")
        + _aider_input("write a haiku")
        + "\nAn old silent pond.\n\n"
        + _aider_tool("Tokens: 0.5k sent, 9 received.")
    )
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log, encoding="utf-8")
    t = load(path)
    assert [m.text for m in t] == [
        "explain module a",
        "Module a parses the config.",
        "write a haiku",
        "An old silent pond.",
    ]
    assert t.meta["clears"] == [{"command": "/clear", "line": 15, "index": 2}]
    assert t[2].meta["after_clear"] == "/clear" and "after_clear" not in t[3].meta
    assert load(path, view="model").messages == t.messages[2:]

    async def calls() -> list[tuple[int, int, bool]]:
        engine = ContextEngine(budget=4_000)
        return [(s.messages, s.position, s.after_clear) async for s in replay(t, engine)]

    # each request holds only what follows the clear; the position in the transcript goes on
    assert anyio.run(calls) == [(1, 1, False), (1, 3, True), (2, 4, False)]
