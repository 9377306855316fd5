"""Nested command buffers on every backend: `execute_commands` gives what the same commands recorded flat give,
with the nested slots bound to buffers, ranges or the outer command buffer's own slots, around regions, and
with constant slots passed through."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.kernels import u32

WORDS = 16


def record_step(cb, exe, x, y, tmp, k):
    """x <- x * k; tmp <- x ^ 1; y <- x + tmp (three segments)."""
    cb.dispatch(exe, "scale", (1, 1, 1), (WORDS, k), (x,))
    cb.execution_barrier()
    cb.dispatch(exe, "xor_copy", (1, 1, 1), (WORDS, 1), (x, tmp))
    cb.execution_barrier()
    cb.dispatch(exe, "add", (1, 1, 1), (WORDS,), (x, tmp, y))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_nested_gives_what_flat_gives(dev, exe, strategy, dependencies):
    inner = dev.create_command_buffer(mode="reusable", binding_capacity=3, constant_capacity=1)
    with inner:
        record_step(inner, exe, hal.slot(0, 0, 4 * WORDS), hal.slot(1, 0, 4 * WORDS), hal.slot(2), hal.constant_slot(0))
    results = []
    for nested in (True, False):
        x = dev.upload(np.arange(WORDS, dtype=np.uint32))
        both = dev.allocate(8 * WORDS)  # y in its first half, tmp in its second
        outer = dev.create_command_buffer(mode="reusable", binding_capacity=1, constant_capacity=1,
                                          strategy=strategy, dependencies=dependencies)
        with outer:
            outer.fill_buffer(both, np.uint32(0))
            outer.execution_barrier()
            if nested:
                outer.execute_commands(inner, (x, hal.slot(0), hal.ref(both, 4 * WORDS)))
            else:
                record_step(outer, exe, x, hal.slot(0, 0, 4 * WORDS), hal.ref(both, 4 * WORDS),
                            hal.constant_slot(0))
            outer.execution_barrier()
            outer.dispatch(exe, "scale", (1, 1, 1), (WORDS, 2), (hal.ref(both, 0, 4 * WORDS),))
        for k in (3, 5):
            dev.queue_execute(outer, binding_table=(both,), constants=(k,))
        results.append((x.read(np.uint32), both.read(np.uint32)))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    x = np.arange(WORDS, dtype=np.uint32) * 15
    np.testing.assert_array_equal(results[0][1][:WORDS], (x + (x ^ 1)) * 2)


def test_a_nested_loop(dev, exe):
    flag, minus_one = dev.upload(u32([0])), dev.upload(u32([0xFFFFFFFF]))
    out = dev.upload(np.zeros(WORDS, np.uint32))
    inner = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with inner:
        with inner.while_nonzero(hal.slot(0, 0, 4)):
            inner.dispatch(exe, "mark", (2, 1, 1), (1,), (out,))
            inner.execution_barrier()
            inner.dispatch(exe, "add", (1, 1, 1), (1,), (hal.slot(0, 0, 4), minus_one, hal.slot(0, 0, 4)))
    outer = dev.create_command_buffer(mode="reusable")
    with outer:
        outer.execute_commands(inner, (flag,))
    flag.write(u32([4]))
    dev.queue_execute(outer)
    np.testing.assert_array_equal(out.read(np.uint32)[:3], [4, 4, 0])
    assert [c.kind for c in outer.commands] == ["while_nonzero"]
