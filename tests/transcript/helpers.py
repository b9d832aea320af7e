"""Shared helpers for the transcript tests: data paths, README numbers, SDK validation."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ctxengine.transcript import Transcript, load_all

SHARED = Path(os.environ.get("CTXENGINE_SHARED", Path(__file__).resolve().parents[3] / "shared"))
DATA = SHARED / "data" / "transcripts"
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini")

CC = DATA / "claude-code-spotter"
CC_MAIN = CC / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
PI = DATA / "pi-openclaw-session" / "large-session.jsonl"
OPENHANDS = DATA / "openhands" / "output.jsonl"
AIDER = DATA / "aider" / "mozgoslav.aider.chat.history.md"
SWE = DATA / "swe-agent"
SWE_FC_REPLACE = (
    SWE / "trajectories/demonstrations/replay__marshmallow-code__marshmallow-1867__function_calling"
    "_replace_from_source/marshmallow-code__marshmallow-1867.traj"
)
SWE_FC = (
    SWE / "trajectories/demonstrations/replay__marshmallow-code__marshmallow-1867__function_calling"
    "__install-1/marshmallow-code__marshmallow-1867.traj"
)
SWE_PYDICOM = (
    SWE
    / "tests/test_data/trajectories/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95"
    "__c-3.00__install-1/pydicom__pydicom-1458.traj"
)
SWE_CTF = SWE / "trajectories/demonstrations/ctf/web/i_got_id_demo.traj"


def all_files() -> list[Path]:
    """Every transcript file of the shared data set (READMEs left out)."""
    return sorted(p for p in DATA.rglob("*") if p.is_file() and p.name != "README.md")


def named_transcripts() -> list[tuple[str, Transcript]]:
    """Every session of the shared data set holding two messages or more, each with its name
    (``folder/file#n``, the file name cut at 40 characters): the cases of the whole-data tests."""
    out = []
    for path in all_files():
        for n, t in enumerate(load_all(path)):
            if len(t) >= 2:
                out.append((f"{path.parent.name}/{path.name[:40]}#{n}", t))
    return out


def _plain(x: Any) -> Any:
    """Validated SDK output as plain data: lazy iterators consumed, models dumped as given."""
    if isinstance(x, BaseModel):
        return _plain(x.model_dump(exclude_unset=True))
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (str, bytes, int, float, bool, type(None))):
        return x
    return [_plain(v) for v in x]


@cache
def _adapters() -> dict[str, TypeAdapter[Any]]:
    from anthropic.types import MessageParam, TextBlockParam
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.responses import ResponseInputItemParam

    return {
        "openai": TypeAdapter(list[ChatCompletionMessageParam]),
        "openai-responses": TypeAdapter(list[ResponseInputItemParam]),
        "anthropic": TypeAdapter(list[MessageParam]),
        "anthropic-system": TypeAdapter(list[TextBlockParam]),
    }


def _exact(adapter: TypeAdapter[Any], data: list[Any]) -> None:
    """Validate and check nothing was dropped or coerced (TypedDicts ignore unknown keys)."""
    assert _plain(adapter.validate_python(data)) == data


def assert_sdk_valid(payload: dict[str, Any], provider: str) -> None:
    """The payload validates against the official SDK types of ``provider``, key for key."""
    from google.genai import types

    ad = _adapters()
    if provider == "openai":
        assert set(payload) == {"messages"}
        _exact(ad["openai"], payload["messages"])
    elif provider == "openai-responses":
        assert set(payload) <= {"input", "instructions"}
        _exact(ad["openai-responses"], payload["input"])
        assert isinstance(payload.get("instructions", ""), str)
    elif provider == "anthropic":
        assert set(payload) <= {"messages", "system"}
        _exact(ad["anthropic"], payload["messages"])
        _exact(ad["anthropic-system"], payload.get("system", []))
        marks = [b for m in payload["messages"] for b in m["content"] if "cache_control" in b]
        marks += [b for b in payload.get("system", []) if "cache_control" in b]
        assert len(marks) <= 4
    else:
        assert set(payload) <= {"contents", "system_instruction"}
        contents = [*payload["contents"], payload.get("system_instruction", {"parts": []})]
        for c in contents:
            model = types.Content.model_validate(c)
            assert model.model_dump(mode="json", exclude_none=True, by_alias=True) == c
