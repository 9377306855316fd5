"""The record benchmark must keep running; its numbers are read from its output, never asserted."""

from bench.record import main


def test_record_benchmark_runs_and_reports_ratios(capsys):
    assert main(["--sizes", "10,20"]) == 0
    out = capsys.readouterr().out
    assert "| chain | 20 | single_pass | off | hazards |" in out
    assert "every pair" in out
