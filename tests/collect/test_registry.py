"""Registry: validation on register, order, enable/disable, blocking, consent, entry points."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from plugin_helpers import Simple

import ctxengine.collect.registry as registry_module
from ctxengine.errors import PluginError
from ctxengine.plugins import AbstractContextProvider
from ctxengine.registry import Registry


def refusal(provider: Any, registry: Registry | None = None) -> PluginError:
    with pytest.raises(PluginError) as info:
        (Registry() if registry is None else registry).register(provider)
    return info.value


@pytest.mark.parametrize("attr", ["name", "version", "priority", "enabled", "collect"])
def test_missing_required_attribute_is_named(attr: str) -> None:
    attrs: dict[str, Any] = {"name": "p", "version": "1.0", "priority": 1, "enabled": True}

    async def collect(self: Any, scene: Any) -> list[Any]:
        return []

    attrs["collect"] = collect
    del attrs[attr]
    provider = type("P", (), attrs)()
    err = refusal(provider)
    assert f"missing required attribute {attr!r}" in str(err)
    assert err.plugin == (None if attr == "name" else "p")


@pytest.mark.parametrize(
    ("attr", "value", "fragment"),
    [
        ("name", "", "'name' must be"),
        ("name", "bad name!", "'name' must be"),
        ("version", 1, "'version' must be a str"),
        ("version", "not-a-version", "not a valid PEP 440 version"),
        ("priority", "5", "'priority' must be an int"),
        ("priority", True, "'priority' must be an int"),
        ("enabled", 1, "'enabled' must be a bool"),
        ("dangerous", "yes", "'dangerous' must be a bool"),
        ("on_user_msg", "not callable", "handler 'on_user_msg' is not callable"),
        ("subscriptions", ["x"], "'subscriptions' must be a mapping"),
        ("subscriptions", {"kw.found": "missing_method"}, "is not a callable handler"),
    ],
)
def test_mistyped_attribute_refused(attr: str, value: Any, fragment: str) -> None:
    provider = Simple("typed")
    setattr(provider, attr, value)
    err = refusal(provider)
    assert fragment in str(err)


def test_sync_collect_and_setup_refused() -> None:
    class SyncCollect(Simple):
        def collect(self, scene: Any) -> list[Any]:  # type: ignore[override]
            return []

    assert "'collect' must be an async method" in str(refusal(SyncCollect()))

    class SyncSetup(Simple):
        def setup(self, engine: Any) -> None:
            pass

    assert "'setup' must be an async method" in str(refusal(SyncSetup()))


def test_class_instead_of_instance_refused() -> None:
    assert "register an instance" in str(refusal(Simple))


def test_protocol_is_structural() -> None:
    assert isinstance(Simple(), AbstractContextProvider)
    assert not isinstance(object(), AbstractContextProvider)


def test_duplicate_name_and_object_refused() -> None:
    reg = Registry()
    first = reg.register(Simple("dup"))
    err = refusal(Simple("dup"), reg)
    assert "already registered" in str(err) and err.plugin == "dup"
    reg.unregister("dup")
    reg.register(first)
    assert "already registered" in str(refusal(first, reg))


def test_registration_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ctxengine.plugins")
    p = Simple("env_info", priority=5)
    Registry().register(p)
    assert "plugin registered: env_info@1.0.0, priority=5" in caplog.messages


def test_unknown_on_handler_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    class Old(Simple):
        def on_user_message(self, event: Any) -> None:
            pass

    caplog.set_level(logging.WARNING, logger="ctxengine.plugins")
    Registry().register(Old("old"))
    assert any("did you mean 'on_user_msg'" in m for m in caplog.messages)


def test_order_is_priority_then_registration() -> None:
    reg = Registry()
    for name, prio in [("c", 20), ("a", 10), ("b", 20), ("d", 5)]:
        reg.register(Simple(name, priority=prio))
    assert [p.name for p in reg.providers()] == ["d", "a", "c", "b"]
    assert [e.index for e in reg.entries()] == [3, 1, 0, 2]


def test_enable_disable_at_runtime() -> None:
    reg = Registry()
    p = reg.register(Simple("toggle"))
    reg.disable("toggle")
    assert p.enabled is False and not reg.is_enabled("toggle")
    assert reg.entry("toggle").state == "disabled"
    assert reg.providers() == []
    reg.enable("toggle")
    assert p.enabled is True and reg.providers() == [p]
    p.enabled = False  # the plugin's own switch is honoured too
    assert not reg.is_enabled("toggle")
    with pytest.raises(PluginError, match="no plugin named 'nope'"):
        reg.enable("nope")


def test_block_by_name() -> None:
    reg = Registry()
    reg.register(Simple("bad"))
    reg.block("bad")
    assert "bad" not in reg
    err = refusal(Simple("bad"), reg)
    assert "blocked" in str(err) and err.plugin == "bad"
    reg.unblock("bad")
    reg.register(Simple("bad"))
    assert "bad" in reg


def test_dangerous_needs_consent() -> None:
    class Danger(Simple):
        dangerous = True

    err = refusal(Danger("danger"))
    assert "dangerous" in str(err) and "allow_dangerous" in str(err)
    assert Registry(allow_dangerous=True).register(Danger("danger"))
    named = Registry(allow_dangerous={"danger"})
    named.register(Danger("danger"))
    assert named.is_privileged("danger")
    assert "dangerous" in str(refusal(Danger("other"), named))


def test_check_privilege() -> None:
    class Danger(Simple):
        dangerous = True

    reg = Registry(allow_dangerous=True)
    reg.register(Danger("danger"))
    reg.register(Simple("plain"))
    reg.check_privilege("danger", "read another session's memory")
    with pytest.raises(PluginError, match="may not read another session's memory") as info:
        reg.check_privilege("plain", "read another session's memory")
    assert info.value.plugin == "plain"


def test_include_copies_in_order() -> None:
    base = Registry()
    base.register(Simple("one"))
    base.register(Simple("two"))
    reg = Registry()
    reg.include(base)
    assert [e.name for e in reg.entries()] == ["one", "two"]


def test_module_level_register(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = Registry()
    monkeypatch.setattr(registry_module, "default_registry", fresh)
    p = Simple("module_level")
    assert registry_module.register(p) is p
    assert fresh.get("module_level") is p


def _fake_distribution(root: Path, entry_points: str) -> None:
    info = root / "ctxengine_fake_plugins-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ctxengine-fake-plugins\nVersion: 0.3\n"
    )
    (info / "entry_points.txt").write_text(entry_points)


def test_entry_points_discovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fake_ep_plugins.py"
    pkg.write_text(
        "from ctxengine.grain import ContextGrain\n"
        "class EpPlugin:\n"
        "    name = 'ep_plugin'\n    version = '0.3'\n    priority = 7\n    enabled = True\n"
        "    async def collect(self, scene):\n        return []\n"
        "BROKEN = 1\n"
    )
    _fake_distribution(
        tmp_path,
        "[ctxengine.plugins]\nep_plugin = fake_ep_plugins:EpPlugin\n"
        "broken = fake_ep_plugins:BROKEN\nblocked_one = fake_ep_plugins:EpPlugin\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry()
    reg.block("blocked_one")
    loaded = reg.load_entry_points()
    assert [e.name for e in loaded] == ["ep_plugin"]
    entry = reg.entry("ep_plugin")
    assert entry.source == "entry-point" and "ctxengine-fake-plugins" in entry.location
    assert [r.name for r in reg.refused] == ["broken"]
    assert "missing required attribute" in reg.refused[0].reason
    with pytest.raises(PluginError):
        Registry().load_entry_points(strict=True)
    sys.modules.pop("fake_ep_plugins", None)
