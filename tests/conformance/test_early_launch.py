"""Exports marked early_launch on every backend: the plain kernels' results, in both strategies and dependency
modes, inside a while loop and through a binding table. (CUDA gives the edges into them programmatic dependent
launch where the device supports it: tests/cuda_graph/test_early_launch.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.kernels import groups, u32

N = 4096
STEPS = 12


def shifted(x: np.ndarray, ks: list[int]) -> np.ndarray:
    """x after shifts by ks, each y = x * 3 + k in uint32."""
    for k in ks:
        x = x * np.uint32(3) + np.uint32(k)
    return x


def chain(cb, exe, a, b, ks, name="shift") -> None:
    """Shifts by ks between a and b, back and forth, a barrier before each but the first (the result in a when
    len(ks) is even)."""
    for i, k in enumerate(ks):
        if i:
            cb.execution_barrier()
        source, target = (a, b) if i % 2 == 0 else (b, a)
        cb.dispatch(exe, name, groups(N), (N, k), (source, target))


@pytest.fixture
def early(dev):
    return dev.load_executable(kernels.EARLY_SOURCE)


@pytest.fixture
def start():
    return np.random.default_rng(7).integers(0, 1 << 32, N, dtype=np.uint32)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_a_chain_of_early_kernels_gives_the_plain_chain_s_result(dev, early, start, strategy, dependencies):
    ks = list(range(1, STEPS + 1))
    for name in ("shift", "shift_plain"):
        a, b = dev.upload(start), dev.allocate(4 * N)
        cb = dev.create_command_buffer(mode="reusable", strategy=strategy, dependencies=dependencies)
        with cb:
            chain(cb, early, a, b, ks, name)
        dev.queue_execute(cb)
        np.testing.assert_array_equal(a.read(np.uint32), shifted(start, ks), err_msg=name)


def test_early_kernels_in_a_while_loop(dev, early, exe, start):
    a, b = dev.upload(start), dev.allocate(4 * N)
    flag, minus_one = dev.upload(u32([5])), dev.upload(u32([0xFFFFFFFF]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        with cb.while_nonzero(flag):
            chain(cb, early, a, b, [2, 7])
            cb.execution_barrier()
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(a.read(np.uint32), shifted(start, [2, 7] * 5))


def test_early_kernels_through_binding_tables(dev, early, start):
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        chain(cb, early, hal.slot(0), hal.slot(1), [4, 5, 6, 8])
    for offset in (0, 11):
        a, b = dev.upload(start + np.uint32(offset)), dev.allocate(4 * N)
        dev.queue_execute(cb, binding_table=(a, b))
        np.testing.assert_array_equal(a.read(np.uint32), shifted(start + np.uint32(offset), [4, 5, 6, 8]))


def test_early_launch_takes_true_or_false():
    with pytest.raises(hal.ValidationError, match="early_launch takes True or False"):
        hal.Export("f", bindings=1, early_launch=1)
    assert not hal.Export("f", bindings=1).early_launch
