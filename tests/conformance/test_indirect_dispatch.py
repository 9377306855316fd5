"""dispatch_indirect on every backend: workgroup counts read from a buffer (static: as the submission starts;
dynamic: as written by earlier commands), zero counts, counts above the device's limit, slots and constants.

The `mark` kernel adds k to one word per workgroup of its grid, so the buffer shows the grid that ran.
"""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.kernels import u32

WORDS = 64


def marks(*grids_and_ks) -> np.ndarray:
    """The words after `mark` ran over each (x, y, z), k in turn, from zeros."""
    expected = np.zeros(WORDS, np.uint32)
    for (x, y, z), k in grids_and_ks:
        expected[:x * y * z] += np.uint32(k)
    return expected


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_static_counts_are_read_at_each_submission(dev, exe, strategy):
    out = dev.upload(np.zeros(WORDS, np.uint32))
    params = dev.upload(u32([99, 3, 2, 1]))
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy)
    with cb:
        cb.dispatch_indirect(exe, "mark", hal.ref(params, 4, 12), constants=(1,), bindings=(out,))
    runs = [(3, 2, 1), (0, 2, 1), (2, 2, 2), (1, 1, 1), (5, 0, 3), (4, 4, 2)]
    for grid in runs:
        params.write(u32(grid), offset=4)  # host writes made before queue_execute count
        dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32), marks(*[(g, 1) for g in runs if all(g)]))


def test_one_shot_and_constant_slots(dev, exe):
    out = dev.upload(np.zeros(WORDS, np.uint32))
    params = dev.upload(u32([2, 3, 1]))
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=1)
    with cb:
        cb.dispatch_indirect(exe, "mark", params, constants=(hal.constant_slot(0),), bindings=(out,))
    for k in (5, 7):
        dev.queue_execute(cb, constants=(k,))
    once = dev.create_command_buffer()
    with once:
        once.dispatch_indirect(exe, "mark", params, constants=(100,), bindings=(out,))
    dev.queue_execute(once)
    np.testing.assert_array_equal(out.read(np.uint32), marks(((2, 3, 1), 112)))


def test_counts_in_a_slot_follow_the_binding_table(dev, exe):
    out = dev.upload(np.zeros(WORDS, np.uint32))
    tables = [dev.upload(u32([0, 0, 0, 4, 1, 1])), dev.upload(u32([0, 0, 0, 2, 3, 1]))]
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.dispatch_indirect(exe, "mark", hal.slot(1, 12), constants=(1,), bindings=(hal.slot(0),))
    for params in (tables[0], tables[1], tables[1], tables[0]):
        dev.queue_execute(cb, binding_table=(out, params))
    np.testing.assert_array_equal(out.read(np.uint32), marks(((4, 1, 1), 2), ((2, 3, 1), 2)))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_dynamic_counts_written_by_earlier_commands(dev, exe, strategy):
    out = dev.upload(np.zeros(WORDS, np.uint32))
    params = dev.upload(u32([1, 1, 1]))
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy)
    with cb:
        cb.update_buffer(params, u32([3, 1, 2]))
        cb.execution_barrier()
        cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,), dynamic=True)
        cb.execution_barrier()
        cb.fill_buffer(hal.ref(params, 4, 4), np.uint32(0))  # the next dispatch runs nothing
        cb.execution_barrier()
        cb.dispatch_indirect(exe, "mark", params, constants=(10,), bindings=(out,), dynamic=True)
    dev.queue_execute(cb)
    np.testing.assert_array_equal(out.read(np.uint32), marks(((3, 1, 2), 1)))
    np.testing.assert_array_equal(params.read(np.uint32), [3, 0, 2])


def test_dynamic_counts_order_their_writer_in_hazards_mode(dev, exe):
    out, other = dev.upload(np.zeros(WORDS, np.uint32)), dev.upload(np.zeros(WORDS, np.uint32))
    params = dev.upload(u32([1, 1, 1]))
    cb = dev.create_command_buffer(mode="reusable", dependencies="hazards")
    with cb:
        cb.update_buffer(params, u32([2, 2, 1]))
        cb.dispatch(exe, "mark", (4, 1, 1), constants=(1,), bindings=(other,))
        cb.execution_barrier()
        cb.dispatch_indirect(exe, "mark", params, constants=(3,), bindings=(out,), dynamic=True)
    assert list(cb.dependency_graph().edges) == [(0, 2)]  # the counts are a read; the other buffer is not
    dev.queue_execute(cb)
    np.testing.assert_array_equal(out.read(np.uint32), marks(((2, 2, 1), 3)))


def test_counts_above_the_limit_run_nothing_and_fail(dev, exe):
    out = dev.upload(np.zeros(WORDS, np.uint32))
    limit = dev.capabilities.max_workgroup_count
    params = dev.upload(u32([1, limit[1] + 1, 1]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "mark", (1, 1, 1), constants=(1,), bindings=(out,))
        cb.execution_barrier()
        cb.dispatch_indirect(exe, "mark", params, constants=(5,), bindings=(out,))
    dev.queue_execute(cb)
    with pytest.raises(hal.DeviceError, match=r"command 1.*max_workgroup_count"):
        dev.synchronize()
    params.write(u32([2, 1, 1]))  # the device stays usable
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32)[:2], [1 + 1 + 5, 5])
