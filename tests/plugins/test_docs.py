"""docs/plugins.md: the runnable example runs and prints what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def test_runnable_example_output_matches() -> None:
    text = DOC.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    output = re.search(r"Output:\n\n```\n(.*?)```", text, re.S)
    assert code is not None and output is not None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code.group(1), str(DOC), "exec"), {"__name__": "docs_example"})
    assert buf.getvalue() == output.group(1)
