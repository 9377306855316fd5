"""bench.calls's report is drawn only on a GPU machine: its code is exercised here on results of the same shape."""

from bench import calls as bench_calls

META = dict(device="a GPU", date="2026-11-29", torch="2.11",
            floors=dict(node_us=0.5, copy_gb_per_s=4000.0, loop_iteration_us=15.0))
GPU = dict(n=512, calls=8, hal_gpu_us=10.2, torch_gpu_us=10.0, ratio=1.02, max_difference=1e-4)
HOST = dict(n=64, calls=8, with_calls_us=2.2, with_kernels_us=2.0, ratio=1.1, rebind_us=9.0, first_capture_us=900.0,
            captures=16, instantiations=1)
STEP = dict(rank=0, hal_step_us=385.0, hal_cublas_step_us=200.0, torch_graph_us=221.0, torch_eager_us=400.0,
            relative_error=1e-6)


def test_the_report_gives_each_ratio_its_target():
    text = bench_calls.report(dict(meta=META, gpu=GPU, host=HOST, data_parallel=[STEP]))
    assert "| 10.20 | 10.00 | 1.020 | <= 1.05: met |" in text
    assert "| 2.20 | 2.00 | 1.100 | <= 1.05: MISSED |" in text
    assert "captured 16 times (8 calls x 2 tables) and was instantiated 1 time(s)" in text
    assert "1.10x PyTorch's CUDA graph's speed (target >= 1.0: met)" in text
    assert "takes 0.50 µs of GPU time; a 512x512 matmul reads and writes at least 3.1 MB, 0.79 µs" in text


def test_a_step_that_could_not_run_says_why():
    text = bench_calls.report(dict(meta=META, gpu=GPU, host=HOST, data_parallel="not run: no nccl4py"))
    assert text.endswith("Data-parallel step: not run: no nccl4py")
