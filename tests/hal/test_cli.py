import subprocess
import sys

import hal.__main__
from hal.__main__ import main


def test_demo_runs_checks_and_compares(capsys):
    assert main(["demo", "--device", "host", "--iterations", "5"]) == 0
    out = capsys.readouterr().out
    assert "device: host" in out
    barriers, hazards = out.split("dependency graph (hazards)")
    assert "dependency graph (barriers): 10 commands, 11 edges" in barriers
    assert "dispatch sum3          waits for: #4 #5 #6" in barriers
    assert "#9  segment 5  copy                   waits for: #7" in barriers
    assert "#9  segment 5  copy                   waits for: #1" in hazards
    assert "result: matches numpy" in out
    assert "reuse is" in out


def test_info_lists_host_and_its_capabilities(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "host: 1 device(s)" in out
    assert "max_push_constants_size = 256" in out


def test_info_shows_the_disk_cache_and_cache_clear_empties_it(capsys, tmp_path, monkeypatch):
    from hal.disk_cache import DiskCache
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path))
    DiskCache("glsl").put("a", b"x" * 100)
    assert main(["info"]) == 0
    assert f"disk cache: {tmp_path}, 1 entries, 144 bytes" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert f"removed 1 entries from {tmp_path}" in capsys.readouterr().out
    assert main(["info"]) == 0
    assert f"disk cache: {tmp_path}, 0 entries, 0 bytes" in capsys.readouterr().out
    monkeypatch.setenv("HAL_CACHE_DIR", "")
    assert main(["info"]) == 0
    assert "disk cache: off (HAL_CACHE_DIR is empty)" in capsys.readouterr().out


def test_module_entry_point_reports_bad_devices():
    proc = subprocess.run([sys.executable, "-m", "hal", "demo", "--device", "nonsense"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "no driver named 'nonsense'" in proc.stderr


def test_demo_decode_checks_its_tokens(capsys):
    assert main(["demo", "decode", "--device", "host", "--tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "k tokens per submission:" in out and "one submission per token:" in out
    assert out.count("8 tokens match numpy") == 2


def test_demo_decode_split_over_ranks_checks_every_rank_s_tokens(capsys):
    assert main(["demo", "decode", "--device", "host", "--tokens", "4", "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    assert "x 2 ranks" in out and out.count("4 tokens match numpy") == 2
    assert main(["demo", "decode", "--device", "vulkan", "--ranks", "2"]) == 2
    assert "splits over host or CUDA devices" in capsys.readouterr().err


def test_trace_writes_a_trace_and_a_picture(capsys, tmp_path):
    assert main(["trace", "--device", "host", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "trace-demo-host.json").stat().st_size > 0
    assert "over 10 commands" in out and "host: record" in out
    assert (tmp_path / "graph-demo.png").exists() or "graph: not drawn" in out


def test_trace_of_the_decode_demo_gives_each_kernel_s_bytes(capsys, tmp_path):
    assert main(["trace", "decode", "--device", "host", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "trace-decode-step-host.json").stat().st_size > 0
    assert "| #21 logits_argmax |" in out and "4213 KB" in out


def test_demos_are_found_from_a_source_tree_without_entry_points(capsys, monkeypatch):
    """As drivers are: `python -m hal demo decode` with PYTHONPATH=. and nothing installed (a GPU machine's run)."""
    monkeypatch.setattr(hal.__main__, "entry_points", lambda group: [])
    assert main(["demo", "decode", "--device", "host", "--tokens", "2"]) == 0
    assert capsys.readouterr().out.count("2 tokens match numpy") == 2
