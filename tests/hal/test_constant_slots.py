"""Constant slots: hal.constant_slot(), constant_capacity and the record-time checks (the submit-time ones run
on every backend in tests/conformance/test_constant_slots.py)."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.kernels import groups


def test_constant_slot_is_a_checked_value():
    assert hal.constant_slot(3) == hal.constant_slot(np.int64(3)) != hal.constant_slot(2)
    assert hal.constant_slot(3).index == 3 and repr(hal.constant_slot(3)) == "hal.constant_slot(3)"
    assert len({hal.constant_slot(1), hal.constant_slot(1)}) == 1
    for bad in (-1, True, 1.0, "1", None, 1 << 31, 10**30):
        with pytest.raises(hal.ValidationError, match="constant slot index"):
            hal.constant_slot(bad)


@pytest.mark.parametrize("capacity", [-1, 1.5, "2", None, True, 10**30])
def test_constant_capacity_must_be_a_count(host, capacity):
    with pytest.raises(hal.ValidationError, match="constant_capacity"):
        host.create_command_buffer(constant_capacity=capacity)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_slot_beyond_capacity_is_refused_and_the_recording_goes_on(host, exe, strategy):
    x = host.upload(np.arange(64, dtype=np.uint32))
    cb = host.create_command_buffer(mode="reusable", strategy=strategy, constant_capacity=1)
    cb.begin()
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch scale\): constants\[1\] uses constant slot 1, "
                                                  r"but the command buffer's constant_capacity is 1"):
        cb.dispatch(exe, "scale", groups(64), (64, hal.constant_slot(1)), (x,))
    cb.dispatch(exe, "scale", groups(64), (64, hal.constant_slot(0)), (x,))
    cb.end()
    assert len(cb.commands) == 1 and cb.constants_needed == 1
    host.queue_execute(cb, constants=(3,))
    np.testing.assert_array_equal(x.read(np.uint32), np.arange(64, dtype=np.uint32) * 3)


def test_no_capacity_no_constant_slot(host, exe):
    x = host.upload(np.arange(64, dtype=np.uint32))
    with pytest.raises(hal.ValidationError, match="constant_capacity is 0"):
        with host.create_command_buffer() as cb:
            cb.dispatch(exe, "scale", groups(64), (hal.constant_slot(0), 2), (x,))


def test_program_lists_the_readers_of_each_constant_slot(host, exe):
    x = host.upload(np.arange(64, dtype=np.uint32))
    cb = host.create_command_buffer(mode="reusable", constant_capacity=3)
    with cb:
        cb.dispatch(exe, "scale", groups(64), (64, 2), (x,))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(64), (hal.constant_slot(2), hal.constant_slot(2)), (x,))
        cb.execution_barrier()
        cb.fill_buffer(x, np.uint32(1))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(64), (hal.constant_slot(0), hal.constant_slot(2)), (x,))
    assert cb.program.constant_users == {2: (1, 3), 0: (3,)}
    assert cb.constants_needed == cb.program.constants_needed == 3
    cb.reset()
    with cb:
        cb.dispatch(exe, "scale", groups(64), (64, 2), (x,))
    assert cb.program.constant_users == {} and cb.constants_needed == 0


def test_host_kernels_see_slot_values_as_literal_constants(host):
    seen = []
    export = hal.Export("look", bindings=0, constants=3)
    exe = host.load_executable(hal.ExecutableSource.python({"look": lambda ctx: seen.append(ctx.constants)},
                                                           [export]))
    cb = host.create_command_buffer(mode="reusable", constant_capacity=2)
    with cb:
        cb.dispatch(exe, "look", constants=(hal.constant_slot(1), 5, hal.constant_slot(0)))
    host.queue_execute(cb, constants=(0.5, -3))
    host.synchronize()
    assert seen == [(-3, 5, np.float32(0.5))] and type(seen[0][2]) is np.float32
