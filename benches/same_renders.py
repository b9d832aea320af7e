"""Check that two builds of ctxengine render byte-for-byte the same: payloads, reports (without
their timings), session states (``SessionState.to_json``, what a snapshot keeps) and summaries.

    python benches/same_renders.py OLD=path/to/old/python NEW=path/to/new/python [--quick]

Each side runs in its own process (``PYTHONPATH`` set to its ``python/`` folder) and prints a
fingerprint (a hash of each part) of every render of a fixed set: each shared transcript
rendered cold (whole, then one more exchange) at 1,500, 8,000 and 32,000 tokens, and replayed
message by message with renders before every assistant turn (every fourth one in a long
transcript; ``--quick``: every fourth everywhere) at 1,500 (OpenAI), 8,000 (Anthropic) and
32,000 (OpenAI) tokens; the synthetic sessions of the scaling benchmarks (1k and 10k grains)
cold at 8,000 and 32,000. For a change meant to make renders faster, not different; it exits
1 and names the first renders that differ.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _worker(quick: bool) -> None:  # pragma: no cover - runs in the child processes
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benches")]
    from ctxengine import Budget, BudgetError, ContextEngine, clear_cache
    from ctxengine.replay import _feed
    from ctxengine.transcript import Message, load_all
    from test_bench_engine import _synthetic
    from transcript.helpers import all_files

    held: list[Any] = []  # the sessions' context managers: a dropped one closes its session

    async def _entered(cm: Any) -> Any:
        held.append(cm)
        return await cm.__aenter__()

    def digest(x: Any) -> str:
        text = json.dumps(x, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def fingerprint(session: Any, out: Any) -> dict[str, Any]:
        report = out.report.to_dict()
        report.pop("timings", None)
        state = session._state
        summary = state.summary.text if state.summary is not None else None
        return {
            "payload": digest(out.payload),
            "tokens": out.tokens,
            "report": digest(report),
            "state": digest(state.to_json()),
            "summary": digest(summary),
        }

    async def render(session: Any, provider: str) -> Any:
        try:
            return fingerprint(session, await session.render(provider))
        except BudgetError as exc:
            return f"BudgetError {str(exc)[:80]}"

    async def cold(name: str, messages: list[Message], budget: int) -> list[Any]:
        clear_cache()
        engine = ContextEngine("gpt-4o", Budget(total=budget))
        session = await _entered(engine.session("same"))
        session.extend(messages)
        await session.user_message("What is the status of the task?")
        rows = []
        for label in ("cold", "warm"):
            rows.append([name, budget, label, await render(session, "openai")])
            session.extend([Message.assistant("ok"), Message.user("one more question")])
        return rows

    async def replay(name: str, messages: list[Message], budget: int, provider: str) -> list[Any]:
        clear_cache()
        engine = ContextEngine("gpt-4.1", Budget(total=budget))
        session = await _entered(engine.session("same"))
        turns = [
            i
            for i, m in enumerate(messages)
            if m.role == "assistant" and i > 0 and messages[i - 1].role != "assistant"
        ]
        every = 4 if quick or len(messages) >= 200 else 1
        points = set(turns[::every])
        rows = []
        for i, m in enumerate(messages):
            if i in points:
                rows.append([name, budget, provider, i, await render(session, provider)])
            await _feed(session, m)
        rows.append([name, budget, provider, len(messages), await render(session, provider)])
        return rows

    async def main() -> None:
        for path in all_files():
            for n, t in enumerate(load_all(path)):
                if len(t) < 2:
                    continue
                messages = list(t.messages)
                name = f"{path.parent.name}/{path.name[:30]}#{n}"
                rows = []
                for budget in (1_500, 8_000, 32_000):
                    rows += await cold(name, messages, budget)
                for budget, provider in (
                    (1_500, "openai"),
                    (8_000, "anthropic"),
                    (32_000, "openai"),
                ):
                    rows += await replay(name, messages, budget, provider)
                for row in rows:
                    print(json.dumps(row), flush=True)
        for size in (1_000, 10_000):
            for budget in (8_000, 32_000):
                for row in await cold(f"synthetic {size}", _synthetic(size), budget):
                    print(json.dumps(row), flush=True)

    asyncio.run(main())


def _run(python_path: str, quick: bool) -> list[str]:
    env = dict(os.environ, PYTHONPATH=python_path, PYTHONDONTWRITEBYTECODE="1")
    args = [sys.executable, __file__, "--worker"] + (["--quick"] if quick else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the side at {python_path} failed:\n{done.stderr[-2000:]}")
    return done.stdout.splitlines()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="NAME=PYTHONPATH of the reference build")
    parser.add_argument("new", help="NAME=PYTHONPATH of the build checked against it")
    parser.add_argument("--quick", action="store_true", help="every fourth render point only")
    args = parser.parse_args(argv)
    (a, old), (b, new) = (s.split("=", 1) for s in (args.old, args.new))
    before, after = _run(old, args.quick), _run(new, args.quick)
    differ = [(x, y) for x, y in zip(before, after, strict=False) if x != y]
    if len(before) != len(after):
        print(f"{a}: {len(before)} renders, {b}: {len(after)}")
    for x, y in differ[:5]:
        print(f"{a}: {x}\n{b}: {y}\n")
    same = not differ and len(before) == len(after)
    print(f"{len(before)} renders: " + ("the same" if same else f"{len(differ)} differ"))
    if differ:  # which parts: a change meant for reports alone leaves payloads the same
        parts: dict[str, int] = {}
        for x, y in differ:
            old_parts, new_parts = json.loads(x)[-1], json.loads(y)[-1]
            for part in old_parts:
                if old_parts[part] != new_parts.get(part):
                    parts[part] = parts.get(part, 0) + 1
        print("differing: " + ", ".join(f"{part} {n}" for part, n in parts.items()))
    return 0 if same else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker("--quick" in sys.argv)
    else:
        raise SystemExit(main())
