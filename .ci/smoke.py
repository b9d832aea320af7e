"""Smoke test of an installed ctxengine (run from outside the checkout, in a fresh venv).

Imports every public module of the installed package once, then runs ``ctxengine demo --json``
and checks that every model call stayed within budget and that it compacted at least once.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import ctxengine


def public_modules() -> list[str]:
    names = ["ctxengine"]
    for info in pkgutil.walk_packages(ctxengine.__path__, "ctxengine."):
        parts = info.name.split(".")
        if not any(p.startswith("_") for p in parts[1:]):
            names.append(info.name)
    return names


def main() -> int:
    checkout = Path(__file__).resolve().parents[1]
    where = Path(ctxengine.__file__).resolve()
    assert checkout not in where.parents, f"imported from the checkout: {where}"
    modules = public_modules()
    optional = {"langchain_core", "langchain", "agents", "redis", "openai", "anthropic"}  # extras
    skipped = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] not in optional:
                raise
            skipped.append(f"{name} (needs {exc.name})")
    exe = shutil.which("ctxengine")
    assert exe is not None, "the ctxengine script is not on PATH"
    out = subprocess.run([exe, "demo", "--json"], capture_output=True, text=True, check=True)
    run = json.loads(out.stdout)
    summary = run["summary"]
    assert summary["within_budget"] and all(c["within_budget"] for c in run["calls"]), summary
    assert summary["compactions"] >= 1, summary
    print(
        f"python {sys.version.split()[0]}: {ctxengine.__version__} from {where.parent}; "
        f"imported {len(modules) - len(skipped)} public modules"
        + (f" (extras not installed: {', '.join(skipped)})" if skipped else "")
        + f"; demo: {summary['calls']} calls, peak {summary['peak_tokens']:,} tokens, "
        f"{summary['compactions']} compactions, within budget"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
