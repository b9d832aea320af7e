"""Importing a plugin folder safely: its own module name, no file from outside, a time limit.

- **Module names.** A plugin is imported as the package ``ctxengine_plugin_<slug>``. The slug is
  the name itself when it is a plain identifier (``workspace_rules``); any other name gets a
  hash suffix (``a.b`` → ``a_b__<12 hex>``), so ``a.b`` and ``a_b`` never share a module.
- **Confinement.** The package's submodules are found only by :class:`FolderFinder`, which
  resolves each candidate file and refuses one that lies outside the plugin folder (a symlink
  out): ``from . import helpers`` cannot pull in code from elsewhere. Only ``.py`` sources and
  sub-packages with an ``__init__.py`` are importable relatively (no compiled extensions).
- **Time limit.** The entry file runs in a daemon thread; if it has not finished within the
  limit, the plugin is refused and its modules are forgotten. Python cannot stop a thread, so
  a module that loops for ever keeps its thread (and, if it spins, a share of a CPU) until the
  process exits. That is the price of running the import in-process, once, with its real side
  effects; a subprocess pre-check would run every plugin's import twice and cost an
  interpreter start per plugin.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
import threading
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ("FolderFinder", "exec_module", "module_name")

_PLAIN: Final = re.compile(r"[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*")
PREFIX: Final = "ctxengine_plugin_"


def module_name(plugin: str) -> str:
    """The package name plugin ``plugin`` is imported under (distinct for distinct names)."""
    if _PLAIN.fullmatch(plugin):
        return PREFIX + plugin
    slug = re.sub(r"[^A-Za-z0-9_]", "_", plugin)
    digest = hashlib.sha256(plugin.encode("utf-8")).hexdigest()[:12]
    return f"{PREFIX}{slug}__{digest}"


class FolderFinder(importlib.abc.MetaPathFinder):
    """Finds the submodules of plugin packages, inside their folders only."""

    def __init__(self) -> None:
        self._roots: dict[str, Path] = {}
        self._lock = threading.Lock()

    def add(self, package: str, root: Path) -> None:
        """Serve ``package.*`` from ``root`` (a resolved folder)."""
        with self._lock:
            self._roots[package] = root

    def remove(self, package: str) -> None:
        """Stop serving ``package``."""
        with self._lock:
            self._roots.pop(package, None)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, rest = fullname.partition(".")
        root = self._roots.get(package)
        if root is None or not rest:
            return None
        base = root.joinpath(*rest.split("."))
        for candidate, is_package in (
            (base / "__init__.py", True),
            (base.with_suffix(".py"), False),
        ):
            if not candidate.is_file():
                continue
            resolved = candidate.resolve()
            if not resolved.is_relative_to(root):
                raise ImportError(
                    f"{fullname!r} refused: {candidate} resolves outside the plugin folder "
                    f"{root} (to {resolved})",
                    name=fullname,
                )
            locations = [str(resolved.parent)] if is_package else None
            return importlib.util.spec_from_file_location(
                fullname, resolved, submodule_search_locations=locations
            )
        return None


FINDER: Final = FolderFinder()


def install() -> None:
    """Put :data:`FINDER` first on :data:`sys.meta_path` (once)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)


def exec_module(
    loader: importlib.abc.Loader, module: types.ModuleType, timeout: float | None
) -> BaseException | None:
    """Run ``module``'s code in a daemon thread for at most ``timeout`` seconds.

    Returns what it raised (any ``BaseException``), or ``None``.

    Raises:
        TimeoutError: it did not finish in time (its thread keeps running).
    """
    done = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            loader.exec_module(module)
        except BaseException as exc:  # SystemExit at import refuses the plugin, nothing more
            raised.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, name=f"ctxengine import {module.__name__}", daemon=True)
    thread.start()
    if not done.wait(timeout):
        raise TimeoutError(module.__name__)
    return raised[0] if raised else None
