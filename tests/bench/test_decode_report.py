"""bench.decode counts the kernels that set the CUDA loops' conditions in one submission (CUPTI misses kernels inside
conditional nodes): its count must follow the loops runner.Decoder records."""

from bench.decode import condition_kernels
from examples.decode import kernels


def checks_run(steps: int) -> int:
    """Each while loop checks its flag once on entry and once after every iteration (the flags as the kernels set
    them: at least LONG_LOOP, at least SHORT_LOOP, at least one step left)."""
    checks, left = 0, steps
    for per_iteration in (kernels.LONG_LOOP, kernels.SHORT_LOOP, 1):
        checks += 1
        while left >= per_iteration:
            left -= per_iteration
            checks += 1
    assert left == 0
    return checks


def test_condition_kernels_follow_the_three_loops():
    assert [condition_kernels(k) for k in (1, 4, 16, 259)] == [4, 4, 7, 14]
    assert all(condition_kernels(k) == checks_run(k) for k in range(1, 300))


def _row(tokens_per_s, gpu_us, host_us=1.0, kernels_per_token=21):
    return dict(tokens_per_s=tokens_per_s, host_us=host_us, gpu_us=gpu_us, kernels=kernels_per_token, match=True,
                first_use_s=None, note="")


def test_the_report_prints_every_floor_and_each_target_s_ratio():
    from bench.decode import report
    floors = dict(node_us=0.5, dependent_node_us=0.92, dependent_after_wait_node_us=1.01, dependent_early_launch=True,
                  loop_iteration_us=14.7, copy_gb_per_s=4000.0, bytes_per_token=22.0e6, launch_us=10.5,
                  bandwidth_us=5.5)
    result = dict(meta=dict(device="a GPU", date="2026-11-29", steps=259, tokens=256, runs=5, config="Config()"),
                  rows={"hal cuda one submission": _row(40000.0, 25.0, host_us=0.13),
                        "torch.compile, CUDA graph per token": _row(12000.0, 84.0, kernels_per_token=53),
                        "PyTorch eager": dict(error="no torch")},
                  hal=dict(cuda=dict(floors=floors, dispatches=21, build_s=0.05, first_run_s=0.01, kernels=[])))
    text = report(result)
    assert "takes 0.92 µs with early launch, the next kernel let launch at its entry (21 of them 19.3 µs), 1.01 " \
           "after its wait, as most of the step's kernels do (21.2 µs)" in text
    assert "- tokens/s 3.33x the fastest PyTorch row (torch.compile, CUDA graph per token): >= 2.0 met" in text
    assert "- GPU µs/token 25.0 against 1.5 x the launch floor + the bandwidth floor = 21.2 (1.18x): MISSED" in text
    assert "| PyTorch eager | - | - | - | - | - | did not run: no torch |" in text
