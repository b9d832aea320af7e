"""Plugin folders: ``manifest.json`` validation and safe loading of the entry file.

Every check that can be made without running plugin code is made first: JSON syntax, field
names and types, version, dependencies, entry syntax, entry file location (no ``../``, no
absolute path, no symlink out of the folder), and that the entry file defines the class (by
parsing it with :mod:`ast`, without executing it). Only a manifest that passes all of them has
its entry file imported.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import re
import stat
import sys
import types
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Final

from packaging.version import InvalidVersion, Version

from ..errors import PluginError
from . import folders

__all__ = ("MANIFEST_FILE", "Manifest", "check_dependencies", "import_entry", "read_manifest")

MANIFEST_FILE: Final = "manifest.json"
MAX_MANIFEST_BYTES: Final = 64 * 1024
IMPORT_TIMEOUT: Final = 10.0  # seconds an entry file may take to import
_ENTRY = re.compile(r"(?P<file>.+\.py):(?P<cls>[A-Za-z_][A-Za-z0-9_]*)")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_FIELDS: Final[dict[str, tuple[type, ...]]] = {
    "name": (str,),
    "version": (str,),
    "entry": (str,),
    "priority": (int,),
    "enabled": (bool,),
    "dependencies": (list,),
    "dangerous": (bool,),
    "description": (str,),
}
_REQUIRED: Final = ("name", "version", "entry")


@dataclass(frozen=True, slots=True)
class Manifest:
    """A validated ``manifest.json``.

    Attributes:
        name: Plugin name (must equal the class's ``name`` when it defines one).
        version: PEP 440 version string.
        entry: ``"file.py:ClassName"`` as written.
        entry_file: Resolved path of the entry file, inside ``folder``.
        class_name: Class (or factory) to instantiate with no arguments.
        priority: Overrides the class's priority when given.
        enabled: Overrides the class's ``enabled`` when given.
        dependencies: Requirement strings, all satisfied by installed distributions.
        dangerous: Asks for privileged abilities (needs the engine's consent too).
        description: Free text.
        folder: The plugin folder.
    """

    name: str
    version: str
    entry: str
    entry_file: Path
    class_name: str
    priority: int | None
    enabled: bool | None
    dependencies: tuple[str, ...]
    dangerous: bool
    description: str
    folder: Path


def _fail(name: str | None, folder: Path, message: str) -> PluginError:
    return PluginError(f"plugin {name or folder.name!r} ({folder}) refused: {message}", plugin=name)


def read_manifest(folder: Path) -> Manifest:
    """Read and validate ``folder/manifest.json`` without executing anything.

    Raises:
        PluginError: malformed JSON, a missing, unknown or mistyped field, an invalid version,
            an ``entry`` not of the form ``file.py:Class``, an entry file outside the folder
            (``../``, absolute, symlink out) or missing, an unparsable or unmet dependency, or an
            entry file that does not define the class. ``.plugin`` is the manifest's name when
            it could be read.
    """
    raw = _read_capped(folder)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _fail(None, folder, f"{MANIFEST_FILE} is not UTF-8: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise _fail(
            None,
            folder,
            f"malformed JSON in {MANIFEST_FILE}: {exc.msg} (line {exc.lineno}, column {exc.colno})",
        ) from exc
    if not isinstance(data, dict):
        raise _fail(
            None, folder, f"{MANIFEST_FILE} must hold a JSON object, not {type(data).__name__}"
        )
    name = data.get("name") if isinstance(data.get("name"), str) else None
    _check_fields(data, name, folder)
    assert name is not None  # _check_fields guarantees it
    if not _NAME.fullmatch(name):
        raise _fail(name, folder, "'name' must be 1-64 chars of letters, digits, '_', '-', '.'")
    try:
        Version(data["version"])
    except InvalidVersion:
        raise _fail(
            name, folder, f"'version' {data['version']!r} is not a valid PEP 440 version"
        ) from None
    entry_file, class_name = _resolve_entry(data["entry"], name, folder)
    deps = tuple(data.get("dependencies", ()))
    check_dependencies(deps, name, folder)
    _check_defines(entry_file, class_name, name, folder)
    return Manifest(
        name=name,
        version=data["version"],
        entry=data["entry"],
        entry_file=entry_file,
        class_name=class_name,
        priority=data.get("priority"),
        enabled=data.get("enabled"),
        dependencies=deps,
        dangerous=data.get("dangerous", False),
        description=data.get("description", ""),
        folder=folder,
    )


def _read_capped(folder: Path) -> bytes:
    """The manifest's bytes: size checked before reading, never more than the cap read."""
    path = folder / MANIFEST_FILE
    too_big = f"{MANIFEST_FILE} is larger than {MAX_MANIFEST_BYTES:,} bytes"
    try:
        if not path.resolve().is_relative_to(folder.resolve()):
            raise _fail(None, folder, f"{MANIFEST_FILE} resolves outside the plugin folder")
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise _fail(None, folder, f"{MANIFEST_FILE} is not a regular file")
        if info.st_size > MAX_MANIFEST_BYTES:
            raise _fail(None, folder, f"{too_big} ({info.st_size:,})")
        with path.open("rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)  # it may have grown since the stat
    except OSError as exc:
        raise _fail(None, folder, f"cannot read {MANIFEST_FILE}: {exc}") from exc
    if len(raw) > MAX_MANIFEST_BYTES:
        raise _fail(None, folder, too_big)
    return raw


def _check_fields(data: dict[str, Any], name: str | None, folder: Path) -> None:
    for key in data:
        if key not in _FIELDS:
            close = difflib.get_close_matches(key, list(_FIELDS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _fail(name, folder, f"unknown field {key!r}{hint}; allowed: {', '.join(_FIELDS)}")
    for key in _REQUIRED:
        if key not in data:
            raise _fail(name, folder, f"missing required field {key!r}")
    for key, value in data.items():
        types_ = _FIELDS[key]
        wrong_bool = isinstance(value, bool) and bool not in types_
        if wrong_bool or not isinstance(value, types_):
            want = " or ".join(t.__name__ for t in types_)
            raise _fail(name, folder, f"field {key!r} must be {want}; got {json.dumps(value)}")
    deps = data.get("dependencies", [])
    bad = [d for d in deps if not isinstance(d, str)]
    if bad:
        raise _fail(
            name, folder, f"'dependencies' must be a list of strings; got {json.dumps(bad[0])}"
        )


def _resolve_entry(entry: str, name: str, folder: Path) -> tuple[Path, str]:
    match = _ENTRY.fullmatch(entry)
    if match is None:
        raise _fail(name, folder, f"'entry' must look like 'plugin.py:ClassName'; got {entry!r}")
    rel = match["file"]
    if (
        PurePosixPath(rel).is_absolute()
        or PureWindowsPath(rel).is_absolute()
        or PureWindowsPath(rel).drive
        or rel.startswith(("/", "\\"))
    ):
        raise _fail(
            name, folder, f"entry file {rel!r} must be a relative path inside the plugin folder"
        )
    if ".." in PureWindowsPath(rel).parts or ".." in PurePosixPath(rel).parts:
        raise _fail(name, folder, f"entry file {rel!r} must not contain '..'")
    root = folder.resolve()
    target = (folder / rel).resolve()
    if not target.is_relative_to(root):
        raise _fail(
            name, folder, f"entry file {rel!r} resolves outside the plugin folder ({target})"
        )
    if not target.is_file():
        raise _fail(name, folder, f"entry file {rel!r} does not exist")
    return target, match["cls"]


def _installed_version(dist: str) -> str | None:
    import importlib.metadata  # imported on use: it costs ~20 ms at ``import ctxengine``

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        if dist.lower().replace("_", "-") == "ctxengine":
            # A source checkout on PYTHONPATH has no dist-info; its version is the package's.
            pkg = sys.modules.get("ctxengine")
            version = getattr(pkg, "__version__", None)
            return version if isinstance(version, str) else None
        return None


def check_dependencies(deps: tuple[str, ...] | list[str], name: str | None, folder: Path) -> None:
    """Check requirement strings against installed distributions.

    Raises:
        PluginError: a requirement cannot be parsed, or is not satisfied.
    """
    from packaging.requirements import InvalidRequirement, Requirement  # imported on use

    for dep in deps:
        try:
            req = Requirement(dep)
        except InvalidRequirement as exc:
            raise _fail(name, folder, f"dependency {dep!r} cannot be parsed: {exc}") from None
        if req.marker is not None and not req.marker.evaluate():
            continue
        installed = _installed_version(req.name)
        if installed is None:
            raise _fail(name, folder, f"dependency {dep!r} is not met: {req.name} is not installed")
        if req.specifier and not req.specifier.contains(installed, prereleases=True):
            raise _fail(
                name, folder, f"dependency {dep!r} is not met: {req.name} {installed} is installed"
            )


def _defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _check_defines(entry_file: Path, class_name: str, name: str, folder: Path) -> None:
    try:
        source = entry_file.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(entry_file))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise _fail(name, folder, f"entry file {entry_file.name} cannot be parsed: {exc}") from exc
    if class_name not in _defined_names(tree):
        raise _fail(name, folder, f"class {class_name!r} is not defined in {entry_file.name}")


def _module_name(manifest: Manifest) -> str:
    return folders.module_name(manifest.name)


def import_entry(manifest: Manifest, *, timeout: float | None = IMPORT_TIMEOUT) -> Any:
    """Import the entry file as ``ctxengine_plugin_<name>.<stem>`` and return the class.

    The plugin folder becomes a package, so the entry file can import its siblings relatively
    (``from . import helpers``), but only files that lie inside the folder
    (see :mod:`ctxengine.collect.folders`). The import runs under ``timeout`` seconds.

    Raises:
        PluginError: the module raises on import (any exception, ``SystemExit`` included),
            does not finish within ``timeout``, or does not define the class after all.
    """
    pkg_name = _module_name(manifest)
    package = types.ModuleType(pkg_name)
    package.__path__ = []  # submodules come from folders.FINDER only: nothing from outside
    package.__package__ = pkg_name
    folders.FINDER.add(pkg_name, manifest.folder.resolve())
    folders.install()
    mod_name = f"{pkg_name}.{manifest.entry_file.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, manifest.entry_file)
    if spec is None or spec.loader is None:
        raise _fail(manifest.name, manifest.folder, f"cannot load {manifest.entry_file.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[pkg_name] = package
    sys.modules[mod_name] = module
    try:
        exc = folders.exec_module(spec.loader, module, timeout)
    except TimeoutError:
        forget_entry(manifest)
        raise _fail(
            manifest.name,
            manifest.folder,
            f"importing {manifest.entry_file.name} did not finish within {timeout:g} s (a loop "
            "at import time?); its thread keeps running until the process exits",
        ) from None
    if exc is not None:
        forget_entry(manifest)
        raise _fail(
            manifest.name,
            manifest.folder,
            f"importing {manifest.entry_file.name} raised {type(exc).__name__}: {exc}",
        ) from exc
    cls = getattr(module, manifest.class_name, None)
    if cls is None:
        forget_entry(manifest)
        raise _fail(
            manifest.name,
            manifest.folder,
            f"class {manifest.class_name!r} is not defined in {manifest.entry_file.name}",
        )
    return cls


def forget_entry(manifest: Manifest) -> None:
    """Remove the plugin's modules from :data:`sys.modules` (after a refusal)."""
    prefix = _module_name(manifest)
    folders.FINDER.remove(prefix)
    for mod in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[mod]
