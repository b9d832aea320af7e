"""Plugin-folder security (issue 9, item 14): symlinks out, module names, manifest size, slow
imports. Every refusal is a PluginError and no code from outside the plugins dir runs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from plugin_helpers import MARKER, PLUGIN_CODE, manifest_for

from ctxengine.collect.folders import module_name
from ctxengine.collect.registry import Registry
from ctxengine.errors import PluginError

MakePlugin = Callable[..., Path]


def write_plugin(folder: Path, name: str, code: str | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(manifest_for(name)), encoding="utf-8")
    body = code if code is not None else PLUGIN_CODE.format(name=name, slug=name)
    (folder / "plugin.py").write_text(body, encoding="utf-8")
    return folder


def test_a_plugin_folder_symlinked_outside_the_plugins_dir_is_refused(tmp_path: Path) -> None:
    outside = write_plugin(tmp_path / "elsewhere" / "evil", "evil")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "evil").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PluginError, match=r"symlink to .*outside the plugins directory"):
        Registry().load_plugins(plugins)
    reg = Registry()
    assert reg.load_plugins(plugins, strict=False) == []
    assert [r.location for r in reg.refused] == [str(plugins / "evil")]
    assert not (outside / MARKER).exists(), "code outside the plugins dir was imported"


def test_a_symlink_to_a_folder_inside_the_plugins_dir_still_loads(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins / ".v2", "current")  # hidden: only reachable through the link
    (plugins / "current").symlink_to(plugins / ".v2", target_is_directory=True)
    assert [e.name for e in Registry().load_plugins(plugins)] == ["current"]


def test_a_sibling_module_symlinked_outside_cannot_be_imported_relatively(
    make_plugin: MakePlugin, tmp_path: Path
) -> None:
    evil = tmp_path / "evil_helpers.py"
    evil.write_text(f"open({str(tmp_path / 'PWNED')!r}, 'w').write('x')\n", encoding="utf-8")
    code = PLUGIN_CODE.format(name="rel", slug="rel") + "\nfrom . import helpers\n"
    folder = make_plugin("rel", code=code)
    (folder / "helpers.py").symlink_to(evil)
    with pytest.raises(PluginError, match=r"helpers.*resolves outside the plugin folder"):
        Registry().load_plugins(folder.parent)
    assert not (tmp_path / "PWNED").exists()
    assert not any(m.startswith(module_name("rel")) for m in sys.modules)


def test_siblings_and_subpackages_inside_the_folder_import_relatively(
    make_plugin: MakePlugin,
) -> None:
    code = PLUGIN_CODE.format(name="pkg", slug="pkg") + (
        "\nfrom . import helpers\nfrom .sub import deep\nWORD = helpers.WORD + deep.WORD\n"
    )
    folder = make_plugin("pkg", code=code)
    (folder / "helpers.py").write_text("WORD = 'in'\n", encoding="utf-8")
    (folder / "sub").mkdir()
    (folder / "sub" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "sub" / "deep.py").write_text("WORD = 'side'\n", encoding="utf-8")
    reg = Registry()
    reg.load_plugins(folder.parent)
    module = sys.modules[type(reg.get("pkg")).__module__]
    assert module.WORD == "inside"


def test_plugins_a_dot_b_and_a_underscore_b_get_distinct_modules(make_plugin: MakePlugin) -> None:
    make_plugin("a.b")
    make_plugin("a_b", folder="a_b_folder")
    reg = Registry()
    reg.load_plugins(make_plugin("zz").parent)
    modules = {name: type(reg.get(name)).__module__ for name in ("a.b", "a_b")}
    assert modules["a.b"] != modules["a_b"]
    assert all(sys.modules[m].__name__ == m for m in modules.values())
    assert reg.get("a.b").name == "a.b" and reg.get("a_b").name == "a_b"
    assert len({module_name(n) for n in ("a.b", "a_b", "a-b", "a__b", "a_b__x")}) == 5


def test_manifest_size_is_checked_before_reading(make_plugin: MakePlugin) -> None:
    folder = make_plugin("huge")
    manifest = folder / "manifest.json"
    with manifest.open("r+b") as handle:  # sparse: 2 GiB on paper, nothing on disk
        handle.truncate(2**31)
    with pytest.raises(PluginError, match=r"larger than 65,536 bytes \(2,147,483,648\)"):
        Registry().load_plugins(folder.parent)


def test_a_module_looping_at_import_is_refused_after_the_time_limit(
    make_plugin: MakePlugin, tmp_path: Path
) -> None:
    release = tmp_path / "RELEASE"
    loop = f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists():\n"
    code = loop + "    time.sleep(0.01)\n" + PLUGIN_CODE.format(name="loops", slug="loops")
    folder = make_plugin("loops", code=code)
    reg = Registry()
    try:
        with pytest.raises(PluginError, match=r"did not finish within 0\.2 s"):
            reg.load_plugins(folder.parent, import_timeout=0.2)
        assert "loops" not in reg
        assert not any(m.startswith(module_name("loops")) for m in sys.modules)
    finally:
        release.touch()  # let the abandoned import thread end


def test_system_exit_at_import_refuses_the_plugin(make_plugin: MakePlugin) -> None:
    code = "raise SystemExit('bye')\n" + PLUGIN_CODE.format(name="quits", slug="quits")
    folder = make_plugin("quits", code=code)
    with pytest.raises(PluginError, match="raised SystemExit: bye"):
        Registry().load_plugins(folder.parent)
