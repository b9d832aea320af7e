"""docs/compaction.md: its example prints exactly what the page shows."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "compaction.md"


def test_the_compaction_page_example_prints_what_it_says() -> None:
    text = PAGE.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    expected = re.search(r"prints\n\n```text\n(.*?)\n```\n", text, re.S)
    assert code is not None and expected is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), str(PAGE), "exec"), {"__name__": "docs_example"})
    assert out.getvalue() == expected.group(1) + "\n"
