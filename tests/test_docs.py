"""Every page's runnable example prints exactly the output the page shows."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "engine.md",
    ROOT / "docs" / "plugins.md",
    ROOT / "docs" / "transcripts.md",
    ROOT / "docs" / "store.md",
]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_example_prints_what_the_page_says(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    expected = re.search(r"(?:prints|Output:)\n\n```(?:text)?\n(.*?)```", text, re.S)
    assert code is not None and expected is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), str(page), "exec"), {"__name__": "docs_example"})
    assert out.getvalue() == expected.group(1)
