"""`python -m bench` must keep running end to end; its numbers are read from its output, never asserted."""

import json

import pytest

from bench import plots
from bench.__main__ import main


def test_bench_suite_writes_results_report_and_figures(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    (result,) = tmp_path.glob("*.json")
    data = json.loads(result.read_text())
    assert data["meta"]["drivers"] and "host" in data["meta"]["drivers"]
    assert {r["commands"] for r in data["scaling:host"]["rows"]} == {10, 100}
    assert {f["phase"] for f in data["scaling:host"]["fits"]} == {"record", "end", "submit", "run"}
    assert result.with_suffix(".md").read_text().startswith("# hal benchmarks on ")
    expected = ["record", "scaling"] + ["vulkan"] * ("vulkan" in data) + \
        ["cuda-breakdown", "cuda-competitors", "rebind"] * ("cuda" in data)
    if not plots.available():  # the figures need matplotlib; the numbers do not
        expected = []
        assert "none: matplotlib is not installed" in result.with_suffix(".md").read_text()
    figures = sorted(p.name for p in tmp_path.glob("*.png"))
    assert figures == sorted(f"{result.stem}-{name}.png" for name in expected)
    assert all(p.stat().st_size > 10_000 for p in tmp_path.glob("*.png"))
    out = capsys.readouterr().out
    assert "| chain | deferred | 100 |" in out
    assert "## Summary" in out and "| record a dispatch, fan of 100, every check on (host) |" in out


def test_cuda_figures_draw_from_a_result(tmp_path):
    """The CUDA figures are drawn only on a GPU machine: their code is exercised here on a result of the
    same shape, so a GPU run cannot be the first to find a plotting error."""
    pytest.importorskip("matplotlib", reason="the figures need matplotlib (pip install 'hal-command-buffers[bench]')")
    rows = [dict(program=p, kernels=n, competitor=c, record=1.0 + n / 100, end=2.0, first=4.0 + k, submit=3.0 + k,
                 gpu=1.0 + k / 10)
            for p in ("chain", "fan") for n in (10, 100) for k, c in enumerate(("reference", "torch", "hal deferred"))]
    result = {"meta": {}, "cuda": {"meta": {"device": "a GPU", "driver": 1, "date": "today"}, "rows": rows,
                                   "rebind": [dict(changed=k, hal_submit=20.0 + k, reference_submit=15.0 + k)
                                              for k in (1, 10)]}}
    written = plots.write_all(result, tmp_path / "r")
    assert sorted(p.name for p in written) == ["r-cuda-breakdown.png", "r-cuda-competitors.png", "r-rebind.png"]
    assert all(p.stat().st_size > 10_000 for p in written)
