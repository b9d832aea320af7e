"""The PEP 517 build backend of ctxengine: maturin, with two defaults ``pip install .`` needs.

1. **No Rust, no silent download.** Where ``cargo`` is not on ``PATH``, maturin's backend asks
   pip for ``puccinialin`` and downloads a whole Rust toolchain (about 900 MB) into the user's
   cache. This backend stops instead with a message saying how to get Rust; set
   ``CTXENGINE_INSTALL_RUST=1`` to let maturin download it after all.
2. **No build tree left in the checkout.** Cargo writes its build (about 1.4 GB with LTO) to
   ``target/`` beside ``Cargo.toml``, which for ``pip install .`` is the user's checkout. Unless
   ``CARGO_TARGET_DIR`` is set, the build goes to a temporary folder that is removed when the
   wheel is built. Set ``CARGO_TARGET_DIR`` to keep a build cache (faster rebuilds).

Everything else is maturin's backend, unchanged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import maturin

__all__ = (
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
)

NO_RUST = """\
ctxengine has a Rust core: building it from source needs Rust (cargo and rustc 1.85 or newer),
and `cargo` is not on PATH. Install Rust with your system's package manager or from
https://rustup.rs, then run the install again. (To let the build download a private Rust
toolchain of about 900 MB instead, set CTXENGINE_INSTALL_RUST=1.)
"""


def _check_rust() -> None:
    if shutil.which("cargo") is None and os.environ.get("CTXENGINE_INSTALL_RUST") != "1":
        sys.stderr.write(NO_RUST)
        sys.exit(1)


@contextlib.contextmanager
def _target_dir() -> Iterator[None]:
    """A temporary ``CARGO_TARGET_DIR`` for one build, removed after it (unless one is set)."""
    if os.environ.get("CARGO_TARGET_DIR"):
        yield
        return
    path = tempfile.mkdtemp(prefix="ctxengine-build-")
    os.environ["CARGO_TARGET_DIR"] = path
    try:
        yield
    finally:
        del os.environ["CARGO_TARGET_DIR"]
        shutil.rmtree(path, ignore_errors=True)


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _check_rust()
    return list(maturin.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(
    config_settings: Mapping[str, Any] | None = None,
) -> list[str]:
    _check_rust()
    return list(maturin.get_requires_for_build_editable(config_settings))


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    _check_rust()
    return str(maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    _check_rust()
    return str(maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings))


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _check_rust()
    with _target_dir():
        return str(maturin.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _check_rust()
    with _target_dir():
        return str(maturin.build_editable(wheel_directory, config_settings, metadata_directory))


def get_requires_for_build_sdist(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _check_rust()  # maturin reads the crate with cargo for an sdist too
    return list(maturin.get_requires_for_build_sdist(config_settings))


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    _check_rust()
    return str(maturin.build_sdist(sdist_directory, config_settings))
