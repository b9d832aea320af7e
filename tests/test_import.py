"""``import ctxengine`` is cheap: the heavy submodules load on first use of a name, not before."""

from __future__ import annotations

import json
import subprocess
import sys

import ctxengine

#: Imported by none of ``import ctxengine``: the render pipeline and the heavy third parties.
HEAVY = (
    "ctxengine.engine",
    "ctxengine.collect",
    "ctxengine.inject",
    "ctxengine.compaction",
    "ctxengine.store",
    "anyio",
    "rich",
    "numpy",
)


def _run(code: str) -> object:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def test_import_loads_none_of_the_heavy_modules() -> None:
    loaded = _run(
        "import json, sys, ctxengine\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))"
    )
    assert loaded == []


def test_import_sets_the_null_handler() -> None:
    handlers = _run(
        "import json, logging, ctxengine\n"
        "print(json.dumps([type(h).__name__ for h in logging.getLogger('ctxengine').handlers]))"
    )
    assert handlers == ["NullHandler"]


def test_every_public_name_resolves_in_a_fresh_process() -> None:
    missing = _run(
        "import json, ctxengine\n"
        "print(json.dumps([n for n in ctxengine.__all__ if getattr(ctxengine, n, None) is None]))"
    )
    assert missing == []


def test_first_access_imports_the_submodule() -> None:
    loaded = _run(
        "import json, sys, ctxengine\n"
        "before = 'ctxengine.engine' in sys.modules\n"
        "engine = ctxengine.ContextEngine\n"
        "print(json.dumps([before, 'ctxengine.engine' in sys.modules, engine.__module__]))"
    )
    assert loaded == [False, True, "ctxengine.engine"]


def test_names_are_the_submodules_objects() -> None:
    from ctxengine.engine import ContextEngine
    from ctxengine.store import InMemoryStore
    from ctxengine.tokens import count_tokens

    assert ctxengine.ContextEngine is ContextEngine
    assert ctxengine.InMemoryStore is InMemoryStore
    assert ctxengine.count_tokens is count_tokens


def test_dir_lists_every_public_name() -> None:
    assert set(ctxengine.__all__) <= set(dir(ctxengine))
    assert {"SessionDispatcher", "Outcome", "PluginFault"} <= set(dir(ctxengine))


def test_unknown_name_raises_attribute_error_naming_it() -> None:
    try:
        ctxengine.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("ctxengine.NoSuchThing did not raise")


def test_transcript_to_renders_after_a_bare_import() -> None:
    # the render layer is not imported by ``import ctxengine``: .to() loads it on first use
    out = _run(
        "import json, sys, ctxengine\n"
        "from ctxengine.transcript import load\n"
        "before = 'ctxengine.inject' in sys.modules\n"
        "payload = load([{'role': 'user', 'content': 'hi'}]).to('openai')\n"
        "print(json.dumps([before, payload]))"
    )
    assert out == [False, {"messages": [{"role": "user", "content": "hi"}]}]
