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
    assert [condition_kernels(k) for k in (1, 4, 16, 259)] == [4, 4, 4, 22]
    assert all(condition_kernels(k) == checks_run(k) for k in range(1, 300))
