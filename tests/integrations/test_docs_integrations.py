"""The integration pages' examples print exactly what the pages show."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations"


@pytest.mark.parametrize("name", ["langchain.md", "openai_agents.md"])
def test_example_prints_what_the_page_says(name: str) -> None:
    text = (DOCS / name).read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    expected = re.search(r"prints\n\n```text\n(.*?)```", text, re.S)
    assert code is not None and expected is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), name, "exec"), {"__name__": "docs_example"})
    assert out.getvalue() == expected.group(1)
