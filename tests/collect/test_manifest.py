"""Plugin folders: one test per validation rule, and proof that refused code is never imported."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from plugin_helpers import MARKER, Simple

from ctxengine.errors import PluginError
from ctxengine.registry import Registry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plugins"
MakePlugin = Callable[..., Path]


def refused(folder: Path, registry: Registry | None = None) -> PluginError:
    """Load ``folder``'s parent strictly; assert it raised and nothing was imported."""
    reg = Registry() if registry is None else registry
    with pytest.raises(PluginError) as info:
        reg.load_plugins(folder.parent)
    assert not (folder / MARKER).exists(), "refused plugin code was executed"
    return info.value


def test_valid_folder_loads(make_plugin: MakePlugin, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ctxengine.plugins")
    folder = make_plugin("good", priority=7)
    reg = Registry()
    loaded = reg.load_plugins(folder.parent)
    assert [e.name for e in loaded] == ["good"]
    entry = reg.entry("good")
    assert (entry.source, entry.priority, entry.description) == ("dir", 7, "test plugin good")
    assert (folder / MARKER).exists()
    assert "plugin registered: good@1.0.0, priority=7" in caplog.messages


def test_malformed_json(make_plugin: MakePlugin) -> None:
    folder = make_plugin("broken", manifest='{"name": "broken", "version": ')
    err = refused(folder)
    assert "malformed JSON" in str(err) and "line 1" in str(err)


def test_not_an_object(make_plugin: MakePlugin) -> None:
    assert "JSON object" in str(refused(make_plugin("arr", manifest="[1, 2]")))


@pytest.mark.parametrize("field", ["name", "version", "entry"])
def test_missing_field(make_plugin: MakePlugin, field: str) -> None:
    folder = make_plugin("missing", **{field: ...})
    err = refused(folder)
    assert f"missing required field {field!r}" in str(err)
    assert err.plugin == (None if field == "name" else "missing")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", 3),
        ("version", 1.0),
        ("entry", ["plugin.py:Plugin"]),
        ("priority", "5"),
        ("priority", True),
        ("enabled", "yes"),
        ("dependencies", "ctxengine"),
        ("dependencies", [1]),
        ("dangerous", 1),
        ("description", None),
    ],
)
def test_wrong_field_type(make_plugin: MakePlugin, field: str, value: Any) -> None:
    err = refused(make_plugin("typed", **{field: value}))
    assert repr(field) in str(err) and "must be" in str(err)


def test_unknown_field_suggests(make_plugin: MakePlugin) -> None:
    err = refused(make_plugin("typo", priorty=5))
    assert "unknown field 'priorty'" in str(err) and "did you mean 'priority'" in str(err)


@pytest.mark.parametrize("entry", ["plugin.py", "plugin:Plugin", "plugin.py:", "plugin.py:1Bad"])
def test_entry_syntax(make_plugin: MakePlugin, entry: str) -> None:
    err = refused(make_plugin("entry", entry=entry))
    assert "'entry' must look like 'plugin.py:ClassName'" in str(err)


def test_entry_with_dotdot(make_plugin: MakePlugin) -> None:
    folder = make_plugin("escape", entry="../outside.py:Plugin")
    (folder.parent / "outside.py").write_text("raise SystemExit('executed')\n")
    assert "must not contain '..'" in str(refused(folder))


@pytest.mark.parametrize("entry", ["/etc/passwd.py:Plugin", "C:\\x\\plugin.py:Plugin"])
def test_entry_absolute(make_plugin: MakePlugin, entry: str) -> None:
    assert "relative path inside the plugin folder" in str(refused(make_plugin("abs", entry=entry)))


def test_entry_symlink_out(make_plugin: MakePlugin, tmp_path: Path) -> None:
    outside = tmp_path / "evil.py"
    outside.write_text(f"open({str(tmp_path / 'PWNED')!r}, 'w').write('x')\nclass Plugin: pass\n")
    folder = make_plugin("link", entry="link.py:Plugin")
    (folder / "link.py").symlink_to(outside)
    assert "resolves outside the plugin folder" in str(refused(folder))
    assert not (tmp_path / "PWNED").exists()


def test_entry_file_missing(make_plugin: MakePlugin) -> None:
    assert "does not exist" in str(refused(make_plugin("nofile", entry="other.py:Plugin")))


def test_class_not_there(make_plugin: MakePlugin) -> None:
    err = refused(make_plugin("noclass", entry="plugin.py:Missing"))
    assert "class 'Missing' is not defined in plugin.py" in str(err)


def test_syntax_error_in_entry(make_plugin: MakePlugin) -> None:
    folder = make_plugin("syntax", code="open('x','w')\ndef broken(:\n")
    assert "cannot be parsed" in str(refused(folder))


@pytest.mark.parametrize("version", ["latest", "1.0.0.beta.x", ""])
def test_invalid_version(make_plugin: MakePlugin, version: str) -> None:
    assert "not a valid PEP 440 version" in str(refused(make_plugin("ver", version=version)))


def test_unmet_dependency_version(make_plugin: MakePlugin) -> None:
    err = refused(make_plugin("deps", dependencies=["packaging>=9999"]))
    assert "dependency 'packaging>=9999' is not met" in str(err) and "is installed" in str(err)


def test_unmet_dependency_missing(make_plugin: MakePlugin) -> None:
    err = refused(make_plugin("deps", dependencies=["no-such-dist-ctxengine-test>=1"]))
    assert "is not installed" in str(err)


def test_unparsable_dependency(make_plugin: MakePlugin) -> None:
    err = refused(make_plugin("deps", dependencies=["requests >>= 2"]))
    assert "cannot be parsed" in str(err) and err.plugin == "deps"


def test_marker_excluded_dependency_is_ignored(make_plugin: MakePlugin) -> None:
    folder = make_plugin("marker", dependencies=['nothing-here>=1; python_version < "3.0"'])
    assert [e.name for e in Registry().load_plugins(folder.parent)] == ["marker"]


def test_duplicate_name_across_folders(make_plugin: MakePlugin) -> None:
    make_plugin("twin", folder="a_twin")
    second = make_plugin("twin", folder="b_twin")
    err = refused(second)
    assert "duplicate name" in str(err) and err.plugin == "twin"
    assert not (second.parent / "a_twin" / MARKER).exists()


def test_duplicate_of_registered_plugin(make_plugin: MakePlugin) -> None:
    reg = Registry()
    reg.register(Simple("taken"))
    assert "already registered" in str(refused(make_plugin("taken"), reg))


def test_dangerous_manifest_without_consent(make_plugin: MakePlugin) -> None:
    folder = make_plugin("risky", dangerous=True)
    err = refused(folder)
    assert "dangerous" in str(err) and err.plugin == "risky"
    reg = Registry(allow_dangerous={"risky"})
    reg.load_plugins(folder.parent)
    assert reg.entry("risky").dangerous and reg.is_privileged("risky")


def test_blocked_folder_not_imported(make_plugin: MakePlugin) -> None:
    reg = Registry()
    reg.block("blocked")
    assert "blocked" in str(refused(make_plugin("blocked"), reg))


def test_strict_refusal_imports_nothing_at_all(make_plugin: MakePlugin) -> None:
    good = make_plugin("a_good")
    make_plugin("b_bad", version="nope")
    refused(good)
    assert not (good / MARKER).exists()


def test_non_strict_records_refusals(make_plugin: MakePlugin) -> None:
    good = make_plugin("good")
    bad = make_plugin("bad", manifest="{oops")
    reg = Registry()
    loaded = reg.load_plugins(good.parent, strict=False)
    assert [e.name for e in loaded] == ["good"]
    [entry] = reg.refused
    assert entry.state == "refused" and entry.location == str(bad)
    assert "malformed JSON" in entry.reason and not (bad / MARKER).exists()


def test_import_error_is_refusal_and_rolls_back(make_plugin: MakePlugin) -> None:
    root = make_plugin("a_first").parent
    make_plugin("b_raises", code="raise RuntimeError('boom at import')\nclass Plugin: pass\n")
    reg = Registry()
    with pytest.raises(PluginError, match="raised RuntimeError: boom at import") as info:
        reg.load_plugins(root)
    assert info.value.plugin == "b_raises"
    assert "a_first" not in reg  # strict mode rolled back the earlier registration
    assert not any(m.startswith("ctxengine_plugin_b_raises") for m in sys.modules)


def test_manifest_and_class_name_must_agree(make_plugin: MakePlugin) -> None:
    folder = make_plugin("declared", code=_code_with_name("different"))
    with pytest.raises(PluginError, match="manifest name 'declared' differs"):
        Registry().load_plugins(folder.parent)


def test_manifest_fills_and_overrides(make_plugin: MakePlugin) -> None:
    code = (
        "from ctxengine.grain import ContextGrain\n"
        "class Plugin:\n"
        "    priority = 99\n"
        "    enabled = True\n"
        "    async def collect(self, scene):\n        return []\n"
    )
    folder = make_plugin("filled", code=code, priority=3, enabled=False)
    reg = Registry()
    reg.load_plugins(folder.parent)
    provider = reg.get("filled")
    assert (provider.name, provider.version, provider.priority) == ("filled", "1.0.0", 3)
    assert reg.entry("filled").state == "disabled"


def test_relative_import_of_sibling(make_plugin: MakePlugin) -> None:
    code = (
        "from .helpers import TEXT\n"
        "class Plugin:\n"
        "    name = 'sib'\n    version = '1.0.0'\n    priority = 1\n    enabled = True\n"
        "    async def collect(self, scene):\n        return [TEXT]\n"
    )
    folder = make_plugin("sib", code=code)
    (folder / "helpers.py").write_text("TEXT = 'from helper'\n")
    reg = Registry()
    reg.load_plugins(folder.parent)
    assert reg.get("sib").name == "sib"


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="does not exist or is not a folder"):
        Registry().load_plugins(tmp_path / "nope")


def test_example_folder_loads() -> None:
    reg = Registry()
    loaded = reg.load_plugins(EXAMPLES)
    assert "workspace_rules" in [e.name for e in loaded]
    entry = reg.entry("workspace_rules")
    assert entry.priority == 20 and "collect" in entry.hooks and "on_user_msg" in entry.hooks
    manifest = json.loads((EXAMPLES / "workspace_rules" / "manifest.json").read_text())
    assert "ctxengine>=0.1" in manifest["dependencies"]


def _code_with_name(name: str) -> str:
    return (
        "class Plugin:\n"
        f"    name = {name!r}\n    version = '1.0.0'\n    priority = 1\n    enabled = True\n"
        "    async def collect(self, scene):\n        return []\n"
    )


def test_hidden_folders_are_skipped(make_plugin: MakePlugin) -> None:
    hidden = make_plugin("hidden", folder=".hidden")
    assert Registry().load_plugins(hidden.parent) == []
    assert not (hidden / MARKER).exists()
