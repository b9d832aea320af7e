"""The PEP 517 backend (python/ctxengine_build.py): maturin without a silent Rust download and
without a build tree left in the checkout. The real build runs in .ci/run (`pip install .`)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

BUILDSYS = Path(__file__).resolve().parents[1] / "python"


def _backend() -> Any:
    """The backend module, loaded from its file: putting ``python/`` on ``sys.path`` would make
    every later child process (multiprocessing's spawn copies the path) import the source tree's
    ``ctxengine``, which has no built extension when the package is installed."""
    path = BUILDSYS / "ctxengine_build.py"
    spec = importlib.util.spec_from_file_location("ctxengine_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ctxengine_build"] = module
    spec.loader.exec_module(module)
    return module


ctxengine_build = _backend()


def test_no_cargo_stops_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no cargo there
    monkeypatch.delenv("CTXENGINE_INSTALL_RUST", raising=False)
    for hook in (
        ctxengine_build.get_requires_for_build_wheel,
        ctxengine_build.get_requires_for_build_sdist,
    ):
        with pytest.raises(SystemExit) as exit_info:
            hook()
        assert exit_info.value.code == 1
        err = capsys.readouterr().err
        assert "`cargo` is not on PATH" in err and "https://rustup.rs" in err
        assert "CTXENGINE_INSTALL_RUST=1" in err


def test_opting_in_lets_maturin_fetch_rust(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CTXENGINE_INSTALL_RUST", "1")
    monkeypatch.delenv("MATURIN_NO_INSTALL_RUST", raising=False)
    monkeypatch.chdir(BUILDSYS.parent)
    assert "puccinialin" in ctxengine_build.get_requires_for_build_wheel()


def _fake_build(seen: dict[str, Any]) -> Any:
    def build(wheel_directory: str, *args: Any) -> str:
        target = Path(os.environ["CARGO_TARGET_DIR"])
        (target / "release").mkdir(parents=True, exist_ok=True)
        (target / "release" / "lib_core.so").write_bytes(b"\0" * 1024)
        seen["target"] = target
        return "ctxengine-0.1.0-cp311-cp311-linux_x86_64.whl"

    return build


def test_the_build_tree_goes_to_a_temporary_folder_and_is_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.delenv("CARGO_TARGET_DIR", raising=False)
    monkeypatch.setattr(ctxengine_build.maturin, "build_wheel", _fake_build(seen))
    monkeypatch.chdir(tmp_path)
    name = ctxengine_build.build_wheel(str(tmp_path))
    assert name.endswith(".whl")
    assert not seen["target"].is_relative_to(tmp_path)  # not in the checkout
    assert not seen["target"].exists()  # and gone after the build
    assert "CARGO_TARGET_DIR" not in os.environ


def test_a_chosen_target_dir_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ctxengine_build.maturin, "build_wheel", _fake_build(seen))
    ctxengine_build.build_wheel(str(tmp_path))
    assert seen["target"] == tmp_path / "cache"
    assert (tmp_path / "cache" / "release" / "lib_core.so").is_file()
