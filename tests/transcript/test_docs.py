"""The example in docs/transcripts.md runs and prints what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "transcripts.md"


def test_docs_example_output_matches() -> None:
    text = DOC.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    expected = re.search(r"Output:\n\n```text\n(.*?)```", text, re.S)
    assert code is not None and expected is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), str(DOC), "exec"), {})
    assert out.getvalue() == expected.group(1)


def test_docstring_examples() -> None:
    import doctest

    import ctxengine.transcript

    result = doctest.testmod(ctxengine.transcript)
    assert result.attempted >= 1 and result.failed == 0
