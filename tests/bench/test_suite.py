"""`python -m bench` must keep running end to end; its numbers are read from its output, never asserted."""

import json

from bench.__main__ import main


def test_bench_suite_writes_results_report_and_figures(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    (result,) = tmp_path.glob("*.json")
    data = json.loads(result.read_text())
    assert data["meta"]["drivers"] and "host" in data["meta"]["drivers"]
    assert {r["commands"] for r in data["scaling:host"]["rows"]} == {10, 100}
    assert {f["phase"] for f in data["scaling:host"]["fits"]} == {"record", "end", "submit", "run"}
    assert result.with_suffix(".md").read_text().startswith("# hal benchmarks on ")
    figures = sorted(p.name for p in tmp_path.glob("*.png"))
    assert figures == [result.stem + "-record.png", result.stem + "-scaling.png"]
    assert all(p.stat().st_size > 10_000 for p in tmp_path.glob("*.png"))
    assert "| chain | deferred | 100 |" in capsys.readouterr().out
