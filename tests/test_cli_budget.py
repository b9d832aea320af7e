"""The command line refuses a budget the model cannot take: one error line, exit status 2."""

from __future__ import annotations

import pytest

from ctxengine.cli import main


def test_demo_budget_above_the_model_window_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--model", "gpt-4", "--budget", "50000"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "50,000" in lines[0] and "8,192" in lines[0] and "gpt-4" in lines[0]
    assert "within budget" not in captured.out
