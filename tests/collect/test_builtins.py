"""Built-in plugins (except knowledge_retriever, see test_knowledge.py): real behaviour."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import pytest

from ctxengine.builtins import (
    BUILTINS,
    EnvInfoProvider,
    LegacyPromptProvider,
    RedactionProvider,
    Redactor,
    SessionArchiveProvider,
    ToolResultCompressor,
    UsageAuditProvider,
    compare_node_order,
)
from ctxengine.errors import PluginError
from ctxengine.events import (
    AfterRender,
    BeforeRender,
    SessionClose,
    SessionStart,
    ToolResult,
    UserMessage,
)
from ctxengine.grain import ContextGrain
from ctxengine.plugins import SessionDispatcher
from ctxengine.registry import Registry
from ctxengine.scene import ContextScene
from ctxengine.transcript import Message, ToolCall

FIXED = datetime(2025, 3, 7, 14, 5, 59, tzinfo=ZoneInfo("Asia/Shanghai"))
SCENE = ContextScene(session_id="s1", turn=3, user_message="hello")


def session(*providers: Any, consent: Any = False, sid: str = "s1") -> SessionDispatcher:
    reg = Registry(allow_dangerous=consent)
    for p in providers:
        reg.register(p)
    return SessionDispatcher(reg, sid, timeout=5)


def test_builtin_catalog_validates() -> None:
    assert set(BUILTINS) == {
        "env_info",
        "knowledge_retriever",
        "tool_result_compressor",
        "redaction",
        "usage_audit",
        "session_archive",
        "legacy",
        "memory",
    }
    assert all(cls.__module__.startswith("ctxengine.builtins.") for cls in BUILTINS.values())


# -- env_info ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_env_info_grain() -> None:
    env = EnvInfoProvider(timezone="Asia/Shanghai", clock=lambda tz: FIXED.astimezone(tz))
    out = await session(env).collect(SCENE)
    [grain] = out.grains
    assert (grain.node_id, grain.origin, grain.priority) == ("sys.env", "env_info", 5)
    assert "Current time: 2025-03-07 14:05 (Friday)" in grain.text
    assert "Timezone: Asia/Shanghai (UTC+08:00)" in grain.text
    assert "Platform: " in grain.text and "Python 3." in grain.text
    assert Registry().register(EnvInfoProvider()).version == "1.0.0"


def test_env_info_options() -> None:
    env = EnvInfoProvider(
        timezone="America/New_York",
        resolution="day",
        include_platform=False,
        clock=lambda tz: FIXED.astimezone(tz),
    )
    assert (
        env.describe()
        == "Current time: 2025-03-07 (Friday)\nTimezone: America/New_York (UTC-05:00)"
    )
    with pytest.raises(PluginError, match="unknown timezone"):
        EnvInfoProvider(timezone="Mars/Olympus")
    with pytest.raises(PluginError, match="resolution"):
        EnvInfoProvider(resolution="week")  # type: ignore[arg-type]


# -- tool_result_compressor ------------------------------------------------------------------


def test_compressor_leaves_small_outputs() -> None:
    assert ToolResultCompressor().on_tool_result(ToolResult("s", "c1", "ls", "a\nb")) is None


@pytest.mark.anyio
async def test_compressor_keeps_head_tail_and_error_line() -> None:
    lines = [f"row {i}: " + "data " * 10 for i in range(2000)] + ["Traceback: ValueError at end"]
    event = ToolResult("s1", "call/ab 12", "query_db", "\n".join(lines), is_error=True)
    out = await session(ToolResultCompressor()).fire(event)
    [grain] = out.grains
    assert grain.node_id == "act.tool_result.call_ab_12" and grain.lifespan == "session"
    text = grain.text
    assert text.startswith("[tool result: query_db (error): 2,001 lines,")
    assert "row 0:" in text and "Traceback: ValueError at end" in text and "row 1000:" not in text
    assert "omitted" in text and len(text) < 3000
    assert (
        grain.meta["original_chars"] == len("\n".join(lines))
        and grain.meta["call_id"] == "call/ab 12"
    )


def test_compressor_summarizes_json() -> None:
    data = [{"id": i, "title": f"result {i}"} for i in range(500)]
    [grain] = ToolResultCompressor().on_tool_result(ToolResult("s", "c2", "search", data)) or []
    assert "JSON array of 500 items" in grain.text
    with pytest.raises(PluginError, match="head_chars"):
        ToolResultCompressor(threshold_chars=100, head_chars=80, tail_chars=30)


# -- redaction ---------------------------------------------------------------------------------

SECRETS = {
    "api_key": "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_" + "a1B2" * 9,
    "slack_token": "xoxb-123456789012-abcdefABCDEF",
    "email": "jane.doe@example.co.uk",
}
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nabc==\n-----END RSA PRIVATE KEY-----"


def test_redactor_kinds() -> None:
    redactor = Redactor()
    for kind, secret in SECRETS.items():
        text, counts = redactor.redact_text(f"value: {secret} end")
        assert text == f"value: [REDACTED:{kind}] end" and counts == {kind: 1}, kind
    text, counts = redactor.redact_text(f"key:\n{PEM}\nafter")
    assert text == "key:\n[REDACTED:private_key]\nafter"
    text, _ = redactor.redact_text("Authorization: Bearer eyJhbGciOi.J9abc-def_ghi")
    assert text == "Authorization: Bearer [REDACTED:bearer_token]"
    clean = "task-based sky-high plan, email me later, ask-me-anything AKIA"
    assert redactor.redact_text(clean) == (clean, {})


def test_redactor_extra_patterns_and_errors() -> None:
    redactor = Redactor({"employee_id": r"\bEMP-\d{6}\b"})
    assert redactor.redact_text("EMP-123456 x")[0] == "[REDACTED:employee_id] x"
    nested = redactor.redact({"a": ["mail bob@corp.io"], "n": 3})
    assert nested == {"a": ["mail [REDACTED:email]"], "n": 3}
    with pytest.raises(PluginError, match="does not compile"):
        Redactor({"bad": "("})
    with pytest.raises(PluginError, match="lowercase identifier"):
        Redactor({"Bad Kind": "x"})


def test_redaction_requires_consent() -> None:
    with pytest.raises(PluginError, match="dangerous") as info:
        Registry().register(RedactionProvider())
    assert info.value.plugin == "redaction"


@pytest.mark.anyio
async def test_redaction_redacts_every_grain_in_tree() -> None:
    tree = [
        ContextGrain(
            "sys.instructions", origin="core", content="deploy with sk-abcdefghijklmnopqrstuvwx"
        ),
        ContextGrain("act.tool_result.c1", origin="tools", content={"out": ["mail a@b.io"]}),
        ContextGrain("hist.turn.1", origin="core", content="nothing secret"),
    ]
    d = session(RedactionProvider(), consent={"redaction"})
    out = await d.fire(BeforeRender(tree))
    assert out.faults == []
    assert tree[0].content == "deploy with [REDACTED:api_key]"
    assert tree[1].content == {"out": ["mail [REDACTED:email]"]}
    assert tree[0].meta == {"redactions": {"api_key": 1}, "modified_by": ["redaction"]}
    assert tree[2].meta == {}


# -- usage_audit -------------------------------------------------------------------------------


@dataclass
class Entry:
    node_id: str
    origin: str
    window: str
    decision: str
    tokens_after: int


@pytest.mark.anyio
async def test_usage_audit_writes_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "audit" / "usage.jsonl"
    clock = lambda: datetime(2025, 3, 7, 6, 0, tzinfo=timezone.utc)  # noqa: E731
    d = session(UsageAuditProvider(path, clock=clock), sid="sess-9")
    report = [
        {
            "node_id": "sys.env",
            "origin": "env_info",
            "window": "instruction",
            "decision": "kept",
            "tokens_after": 30,
        },
        {
            "node_id": "hist.turn.1",
            "origin": "core",
            "window": "history",
            "decision": "folded",
            "tokens_after": 12,
        },
        {
            "node_id": "rag.doc.0",
            "origin": "knowledge_retriever",
            "window": "tool",
            "decision": "dropped",
            "tokens_after": 0,
            "tokens": 400,
        },
    ]
    await d.fire(AfterRender({"messages": []}, 42, report))
    await d.fire(AfterRender({}, None, {"entries": [Entry("x.y", "p", "tool", "kept", 5)]}))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {
        "ts": "2025-03-07T06:00:00+00:00",
        "session_id": "sess-9",
        "tokens": 42,
        "windows": {"history": 12, "instruction": 30},
        "origins": {"core": 12, "env_info": 30},
        "decisions": {"dropped": 1, "folded": 1, "kept": 1},
    }
    assert lines[1]["tokens"] == 5 and lines[1]["origins"] == {"p": 5}


# -- session_archive ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_session_archive_writes_key_facts(tmp_path: Path) -> None:
    archive = SessionArchiveProvider(tmp_path / "memory", clock=lambda: FIXED)
    d = session(archive, sid="s1")
    other = SessionDispatcher(d.registry, "s2", timeout=5)
    await d.fire(SessionStart("s1"))
    await other.fire(SessionStart("s2"))
    await d.fire(UserMessage("s1", 0, "Fix the failing test in app.py"))
    await other.fire(UserMessage("s2", 0, "secret other session ask"))
    output = "collecting\nexit code 1: `pytest` failed\nsummary: 3 passed"
    await d.fire(ToolResult("s1", "c9", "bash", output, True))
    transcript = [
        Message.user("Fix the failing test in app.py"),
        Message.assistant("", [ToolCall("c1", "read_file", {"path": "src/app.py"})]),
        Message.tool("c1", "..."),
        Message.assistant("", [ToolCall("c2", "edit_file", '{"file_path": "src/app.py"}')]),
        Message.tool("c2", "ok"),
        Message.assistant("", [ToolCall("c3", "read", {"paths": ["README.md"]})]),
        Message.tool("c3", "ok"),
        Message.assistant("Fixed.\n- [ ] add a regression test for the parser"),
        Message.user("Now also update the changelog; token sk-abcdefghijklmnopqrstuvwxyz"),
    ]
    await d.collect(ContextScene(session_id="s1", turn=1, transcript=transcript))
    await d.fire(SessionClose("s1"))
    text = (tmp_path / "memory" / "2025-03-07.md").read_text()
    assert "## Session `s1` closed 14:05:59 +0800" in text
    assert "- `README.md` (read)" in text and "- `src/app.py` (modified)" in text
    assert "- `bash (c9): exit code 1: 'pytest' failed`" in text
    assert "- `Now also update the changelog; token [REDACTED:api_key]`" in text
    assert "sk-abc" not in text
    assert "- `add a regression test for the parser`" in text
    assert "secret other session" not in text
    await other.fire(SessionClose("s2"))
    text = (tmp_path / "memory" / "2025-03-07.md").read_text()
    assert "## Session `s2`" in text and "### Last request\n- `secret other session ask`" in text


@pytest.mark.anyio
async def test_session_archive_skips_empty_sessions(tmp_path: Path) -> None:
    d = session(SessionArchiveProvider(tmp_path / "memory", clock=lambda: FIXED))
    await d.fire(SessionStart("s1"))
    await d.fire(SessionClose("s1"))
    assert not (tmp_path / "memory").exists()


# -- legacy ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_legacy_wraps_sync_and_async_builders() -> None:
    def build_system_prompt() -> str:
        return "You are the old assistant."

    async def build_with_scene(scene: ContextScene) -> str:
        return f"turn {scene.turn}: {scene.user_message}"

    out = await session(
        LegacyPromptProvider(build_system_prompt),
        LegacyPromptProvider(build_with_scene, name="legacy2", node_id="legacy.scene"),
    ).collect(SCENE)
    assert [(g.node_id, g.origin, g.content, g.window) for g in out.grains] == [
        ("legacy.context", "legacy", "You are the old assistant.", "instruction"),
        ("legacy.scene", "legacy2", "turn 3: hello", "instruction"),
    ]


@pytest.mark.anyio
async def test_legacy_bad_return_is_a_fault() -> None:
    out = await session(LegacyPromptProvider(lambda: 42)).collect(SCENE)
    assert out.grains == [] and "returned int, expected str" in out.faults[0].message
    with pytest.raises(PluginError):
        LegacyPromptProvider("not callable")  # type: ignore[arg-type]


# -- compare_node_order ------------------------------------------------------------------------


def test_compare_node_order_ids() -> None:
    a = ["sys.a", "sys.b", "mem.c", "hist.d", "act.e"]
    assert compare_node_order(a, list(a)).same
    diff = compare_node_order(a, ["sys.a", "mem.c", "sys.b", "hist.d", "rag.f"])
    assert diff.added == ("rag.f",) and diff.removed == ("act.e",)
    assert len(diff.moved) == 1 and diff.moved[0][0] in ("sys.b", "mem.c")
    assert not diff.same and "+ rag.f" in diff.format()
    assert json.loads(json.dumps(diff.to_dict()))["same"] is False


def test_compare_node_order_minimal_moves() -> None:
    diff = compare_node_order(list("abcdef"), list("bcdefa"))
    assert diff.moved == (("a", 0, 5),)


def test_compare_node_order_reports_and_trees() -> None:
    report = [
        {"node_id": "sys.a", "decision": "kept"},
        {"node_id": "rag.x", "decision": "dropped"},
        {"node_id": "hist.1", "decision": "folded"},
    ]

    class Rendered:
        tree: ClassVar = [ContextGrain("sys.a"), ContextGrain("hist.1")]

    assert compare_node_order(report, Rendered()).same
    assert compare_node_order({"nodes": ["sys.a"]}, ["sys.a"]).same
    with pytest.raises(PluginError):
        compare_node_order(42, [])
