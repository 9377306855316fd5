"""bench.triton's report is drawn only on a GPU machine: its code is exercised here on a result of the same shape."""

from bench import triton as bench_triton


def test_the_report_gives_each_row_its_ratio_and_the_target():
    rows = [dict(kernels=k, submissions=times, competitor=name, host_us=host / k, gpu_us=1.0 + 10 / k)
            for k, times in bench_triton.CASES
            for name, host in (("Triton's launcher", 20.0 * k), ("Triton in a torch CUDA graph", 12.0),
                               ("hal, one command buffer", 5.0))]
    meta = dict(device="a GPU", triton="3.6.0", torch="2.11", block=256, hal_first_s=0.04, triton_first_s=1.3,
                results_equal=True, floors=dict(node_us=0.5))
    text = bench_triton.report(dict(meta=meta, rows=rows))
    assert "| 1 | once, GPU idle | 20.00 | 11.00 | 12.00 | 11.00 | 5.00 | 11.00 | 0.250 (MISSED <= 0.1) |" in text
    assert "| 1 | 100 times in a row | 20.00 | 11.00 |" in text
    assert "| 100 | once, GPU idle | 20.00 | 1.10 | 0.12 | 1.10 | 0.05 | 1.10 | 0.003 (met <= 0.1) |" in text
    assert "0.50 µs of GPU time" in text
    rows += [dict(kernels=k, submissions=times, competitor=bench_triton.DRIVER, host_us=4.0, gpu_us=11.0)
             for k, times in bench_triton.CASES]
    assert "| 11.00 | 0.250 (MISSED <= 0.1) | 0.200 |" in bench_triton.report(dict(meta=meta, rows=rows))
    assert "over 65536 float32 (256 programs of 256)" in text
