"""`ctxengine plugins list`: table and JSON, example folder, refused plugins."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from ctxengine.plugins.cli import plugins_list

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plugins"


def run(plugins_dir: str | None, as_json: bool) -> tuple[int, str]:
    buf = io.StringIO()
    console = Console(file=buf, width=240, color_system=None, force_terminal=False)
    code = plugins_list(plugins_dir, as_json, console)
    return code, buf.getvalue()


def test_json_lists_builtins_and_example_folder() -> None:
    code, out = run(str(EXAMPLES), True)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0
    example = rows["workspace_rules"]
    assert (example["source"], example["state"], example["version"], example["priority"]) == (
        "dir",
        "enabled",
        "1.0.0",
        20,
    )
    assert example["hooks"] == ["collect", "on_user_msg"]
    assert rows["redaction"]["dangerous"] and rows["redaction"]["source"] == "builtin"
    assert rows["tool_result_compressor"]["hooks"] == ["collect", "on_tool_result"]
    assert rows["env_info"]["priority"] == 5


def test_table_shows_refused_with_reason(make_plugin: Callable[..., Path]) -> None:
    good = make_plugin("fine")
    make_plugin("broken", version="latest")
    code, out = run(str(good.parent), False)
    assert code == 1
    assert "fine" in out and "enabled" in out
    assert "refused" in out and "not a valid PEP 440 version" in out
    assert "env_info" in out and "available" in out


def test_missing_dir_is_an_error(tmp_path: Path) -> None:
    code, out = run(str(tmp_path / "nope"), False)
    assert code == 1 and "does not exist" in out
