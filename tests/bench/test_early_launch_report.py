"""bench.early_launch's report is drawn only on a GPU machine: its code is exercised here on a result of the same
shape."""

from bench import early_launch


def test_the_report_gives_each_kernel_its_table_and_each_row_the_target():
    us = {"early launch": 0.9, "plain edges": 1.3, "unmarked kernel": 1.2}
    rows = [dict(kernel=kernel, kernels=k, competitor=name, gpu_us=us[name] * (1.5 if kernel == "shift" else 1.0))
            for kernel in early_launch.KERNELS for k in early_launch.LENGTHS for name in us]
    text = early_launch.report(dict(meta=dict(device="a GPU", supported=True, node_us=0.48), rows=rows))
    assert "a dependent node of a chain of empty kernels in a graph: 0.48 µs" in text
    assert "`matvec`: a 1024 x 256 float32 matrix times the vector before, 128 workgroups of 256" in text
    assert "| 1000 | 0.90 | 1.30 | 1.20 | 0.69 (met <= 0.7) |" in text
    assert "| 10 | 1.35 | 1.95 | 1.80 | 0.69 (met <= 0.7) |" in text
