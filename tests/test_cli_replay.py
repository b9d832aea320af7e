"""`ctxengine demo`, `ctxengine replay` and `ctxengine plugins list` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxengine import count_messages
from ctxengine.cli import main
from offline_tiktoken import TRANSCRIPTS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "plugins"


def test_demo_renders_every_call_within_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--budget", "6000"]) == 0
    out = capsys.readouterr().out
    assert "all within budget: True" in out
    assert "decisions at model call" in out


def test_demo_json_is_the_last_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json", "--budget", "5000"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tokens"] <= 5000 and report["fits"] is True
    assert {g["decision"] for g in report["grains"]} <= {"kept", "folded", "dropped", "shadowed"}
    # The tight budget shows in the last report: earlier turns live on in the compaction summary.
    trimmed = report["counts"].get("dropped", 0) + report["counts"].get("folded", 0)
    assert trimmed > 0 or any(g["node_id"] == "mem.summary" for g in report["grains"])


def test_replay_writes_payload_and_report(tmp_path: Path) -> None:
    source = TRANSCRIPTS / "openhands" / "output.jsonl"
    out, rep = tmp_path / "payload.json", tmp_path / "report.json"
    args = ["replay", str(source), "--budget", "4000", "--out", str(out), "--report", str(rep)]
    assert main([*args, "--model", "gpt-4o"]) == 0
    payload = json.loads(out.read_text())
    assert count_messages(payload["messages"], model="gpt-4o") <= 4000
    assert json.loads(rep.read_text())["budget"] == 4000


def test_replay_for_anthropic_payload(tmp_path: Path) -> None:
    source = TRANSCRIPTS / "claude-code-spotter" / "tool_heavy.jsonl"
    out = tmp_path / "payload.json"
    args = ["replay", str(source), "--provider", "anthropic", "--model", "claude-sonnet-4-5"]
    assert main([*args, "--budget", "3000", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["messages"][0]["role"] == "user"


def test_replay_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "no/such/file.jsonl"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_plugins_list_loads_the_example_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "list", "--plugins", str(EXAMPLES), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    example = next(r for r in rows if r["name"] == "workspace_rules")
    assert example["state"] == "enabled" and example["source"] == "dir"
