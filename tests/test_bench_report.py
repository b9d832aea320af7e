"""benches/report.py: a pytest-benchmark JSON run to the README table and PNG plots."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))
import report  # noqa: E402

RUN = ROOT / "tests" / "data" / "bench-run.json"


@pytest.fixture
def run() -> report.Report:
    return report.load(json.loads(RUN.read_text(encoding="utf-8")))


def test_counting_is_mb_per_second_of_each_side(run: report.Report) -> None:
    by_corpus = {(c.corpus, c.encoding): c for c in run.counting}
    assert set(by_corpus) == {("transcripts", "o200k_base"), ("code", "cl100k_base")}
    code = by_corpus["code", "cl100k_base"]
    assert code.ctxengine_mbps == pytest.approx(4 / 0.05)
    assert code.mbps("tiktoken") == pytest.approx(4 / 0.16)
    assert code.mbps("toktok") == pytest.approx(4 / 0.052)
    assert code.strongest == "toktok"  # the fastest peer of the run, whatever its name
    assert by_corpus["transcripts", "o200k_base"].strongest == "tiktoken"


def test_batch_and_quality_rows(run: report.Report) -> None:
    [batch] = run.batch
    assert (batch.texts, batch.many_s, batch.loop_s, batch.toktok) == (
        977,
        0.03,
        0.054,
        (0.06, 0.05),
    )
    assert run.synthetic == {("cold", 10_000): (0.9, 0.45), ("warm", 1000): (0.0018, 0.0011)}
    assert [(q.budget, q.provider, q.breaks, q.last_n_breaks) for q in run.quality] == [
        (16000, "openai", 69, 89),
        (64000, "anthropic", 14, 39),
    ]


def test_first_count_rows(run: report.Report) -> None:
    assert run.first_count == {
        "o200k_base": {"ctxengine": 0.36, "toktok-rs": 0.61, "tiktoken": 0.49}
    }
    assert (
        "| first count in a new process (start, import, the vocabulary's build), `o200k_base` "
        "| 360 ms | tiktoken: 490 ms; toktok-rs: 610 ms | 1.4× faster than tiktoken |"
        in report.markdown(run).splitlines()
    )


def test_render_and_scaling_pairs(run: report.Report) -> None:
    assert [(r.kind, r.ctxengine_s, r.langchain_s) for r in run.render] == [
        ("cold", 0.02, 0.09),
        ("warm", 0.001, 0.002),  # the strongest LangChain member: the memoized one
    ]
    assert run.scaling["cold"] == {1000: 0.03, 10000: 0.3, 100000: 3.0}
    assert list(run.scaling["warm"]) == [1000, 10000, 100000]
    assert run.missing() == []


def test_markdown_table(run: report.Report) -> None:
    table = report.markdown(run)
    lines = table.splitlines()
    assert lines[0] == "| what | ctxengine | peer | ratio |"
    assert (
        "| count 4.0 MB of code, one thread, `cl100k_base` | 80.0 MB/s | toktok-rs: 76.9 MB/s; "
        "quicktok: 40.0 MB/s; tiktoken: 25.0 MB/s | 1.04× the speed of toktok-rs |" in lines
    )
    cold = next(line for line in lines if line.startswith("| cold render, 914-message"))
    assert cold.endswith("| 20 ms | LangChain `trim_messages`: 90 ms | 4.5× faster |")
    warm = next(line for line in lines if line.startswith("| warm render (one new"))
    assert warm.endswith(
        "| LangChain `trim_messages` (exact counts memoized): 2 ms | 2.0× faster |"
    )
    assert any(line.endswith("| 1.80× our one thread |") for line in lines)
    assert (
        "| warm render, synthetic session of 1,000 grains into 32k | 1.8 ms | LangChain "
        "`trim_messages` (memoized, exact), same messages: 1.1 ms | 1.6× slower |" in lines
    )
    assert (
        "| prefix breaks, replayed real session (218 calls), 16k, openai | 69 (69 compactions) "
        "| sliding last-N window: 89 | 1.29× fewer |" in lines
    )
    scaling = "| cold render, synthetic sessions of 1k / 10k / 100k grains"
    assert f"{scaling} | 30 ms / 300 ms / 3,000 ms | | |" in lines
    assert lines[-1] == "Medians of one pytest-benchmark run on Test CPU, Python 3.11.7."


def test_plots_are_png_files(run: report.Report, tmp_path: Path) -> None:
    paths = report.plot(run, tmp_path)
    assert [p.name for p in paths] == ["counting.png", "render.png", "scaling.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5_000


def test_main_writes_the_table_and_strict_catches_a_missing_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report.main([str(RUN), "--out", str(tmp_path / "out"), "--no-plots", "--strict"]) == 0
    assert (tmp_path / "out" / "report.md").read_text() == capsys.readouterr().out
    partial = json.loads(RUN.read_text())
    partial["benchmarks"] = [b for b in partial["benchmarks"] if "scaling" not in b["group"]]
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(partial))
    assert report.main([str(path), "--out", str(tmp_path / "p"), "--no-plots", "--strict"]) == 1
    assert "no data for scaling cold (render-cold-scaling" in capsys.readouterr().err
    partial = json.loads(RUN.read_text())
    partial["benchmarks"] = [b for b in partial["benchmarks"] if b["group"] != report.QUALITY_GROUP]
    path.write_text(json.dumps(partial))
    assert report.main([str(path), "--out", str(tmp_path / "r"), "--no-plots", "--strict"]) == 1
    assert "no data for quality (replay-prefix-and-use)" in capsys.readouterr().err
    path.write_text("[1, 2]")
    assert report.main([str(path), "--out", str(tmp_path / "q")]) == 2
