"""The package layout holds: no import cycles, no reading another module's private state."""

from __future__ import annotations

import ast
from pathlib import Path

import ctxengine

ROOT = Path(ctxengine.__file__).parent
PACKAGE = "ctxengine"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _native(module: str) -> bool:
    *package, last = module.split(".")
    folder = ROOT.parent.joinpath(*package)
    return any(p.suffix in {".so", ".pyd"} for p in folder.glob(f"{last}.*"))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every ctxengine module ``name`` imports, wherever the import sits (functions and
    ``TYPE_CHECKING`` blocks included); ``from pkg import mod`` counts as ``pkg.mod``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, path.name == "__init__.py", node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub not in known and _native(sub):
                    continue  # the compiled ctxengine._core: no Python imports in it
                out.add(sub if sub in known else base)
    return {t for t in out if t in known and t != name}


def import_graph() -> dict[str, set[str]]:
    """The import graph of the package, from the source."""
    known = _modules()
    return {name: _targets(name, path, known) for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_graph_sees_imports_in_functions_and_type_checking_blocks() -> None:
    graph = import_graph()
    assert "ctxengine.inject.render" in graph["ctxengine.transcript"]  # inside __getattr__
    assert "ctxengine.state" in graph["ctxengine.assemble.sync"]  # under TYPE_CHECKING
    assert "ctxengine.collect.registry" in graph["ctxengine.collect.dispatch"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_pipeline_packages_depend_one_way() -> None:
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("ctxengine.transcript"):
            above = {
                t for t in targets if t.startswith(("ctxengine.assemble", "ctxengine.collect"))
            }
            assert not above, f"{name} imports {sorted(above)}"
        if name.startswith(("ctxengine.collect", "ctxengine.assemble")):
            engine = {t for t in targets if t == "ctxengine.engine"}
            assert not engine, f"{name} imports the engine"


def _private_uses(path: Path) -> list[str]:
    """``x._name`` on anything but ``self``/``cls``, and ``from m import _name``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if node.attr.startswith("__") or node.attr in {"_core", "_replace", "_asdict"}:
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in {"self", "cls"}:
                continue
            out.append(f"{path.name}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            out += [
                f"{path.name}:{node.lineno}: import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__") and a.name != "_core"
            ]
    return out


def test_no_module_reads_another_modules_private_state() -> None:
    found = {}
    for name, path in _modules().items():
        if name == "ctxengine.engine":
            continue  # the one module that owns Session's private fields
        uses = _private_uses(path)
        if uses:
            found[name] = uses
    assert found == {}


def test_the_private_scan_finds_session_and_state_access(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from x import _call\ndef f(session, state):\n    session._items\n    state._x\n"
    )
    assert _private_uses(bad) == ["bad.py:1: import _call", "bad.py:3: ._items", "bad.py:4: ._x"]
