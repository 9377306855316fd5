"""Constant slots on every backend: a dispatch constant given at each queue_execute (hal.constant_slot), with
binding tables, in both strategies, one-shot and reusable, from several threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hal
from tests.kernels import groups, reference

N = 200


def start(n=N):
    return np.arange(n, dtype=np.uint32) * 7 + 1


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_values_change_between_submissions(dev, exe, strategy):
    x = dev.upload(start())
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy, constant_capacity=2)
    with cb:
        cb.dispatch(exe, "scale", groups(N), (hal.constant_slot(0), hal.constant_slot(1)), (x,))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(N), (N, hal.constant_slot(1)), (x,))
    expected = start()
    for n, k in [(N, 3), (N, 3), (50, 5), (N, 0xFFFFFFFF), (1, 2)]:
        dev.queue_execute(cb, constants=(n, k))
        reference("scale", (n, k), [expected])
        reference("scale", (N, k), [expected])
    np.testing.assert_array_equal(x.read(np.uint32), expected)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_values_and_binding_tables_together(dev, exe, strategy):
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy, binding_capacity=2, constant_capacity=1)
    with cb:
        cb.dispatch(exe, "xor_copy", groups(N), (N, hal.constant_slot(0)), (hal.slot(0), hal.slot(1)))
    source = dev.upload(start())
    outs = [dev.allocate(4 * N) for _ in range(3)]
    runs = [(outs[0], 1), (outs[1], 1), (outs[1], 0xF0F0), (outs[2], -1), (outs[0], 77)]
    for out, k in runs:
        dev.queue_execute(cb, binding_table=(source, out), constants=(k,))
    dev.synchronize()
    last = {id(out): k for out, k in runs}
    for out in outs:
        np.testing.assert_array_equal(out.read(np.uint32), start() ^ np.uint32(last[id(out)] & 0xFFFFFFFF))


def test_float_and_numpy_values_pass_their_bits(dev, exe):
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=2)
    x, out = dev.upload(start()), dev.allocate(4 * N)
    with cb:
        cb.dispatch(exe, "xor_copy", groups(N), (hal.constant_slot(0), hal.constant_slot(1)), (x, out))
    for n, k in [(np.int32(N), 1.5), (np.uint32(N), np.float32(-2.25)), (N, np.int32(-7))]:
        dev.queue_execute(cb, constants=(n, k))
        bits = np.array([k], np.float32 if isinstance(k, float) else np.asarray(k).dtype).view(np.uint32)[0]
        np.testing.assert_array_equal(out.read(np.uint32), start() ^ bits)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_one_shot_takes_its_values(dev, exe, strategy):
    x = dev.upload(start())
    cb = dev.create_command_buffer(strategy=strategy, constant_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", groups(N), (N, hal.constant_slot(0)), (x,))
    dev.queue_execute(cb, constants=[9])
    np.testing.assert_array_equal(x.read(np.uint32), start() * np.uint32(9))


def test_unused_capacity_and_extra_values(dev, exe):
    x = dev.upload(start())
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=4)
    with cb:
        cb.dispatch(exe, "scale", groups(N), (N, hal.constant_slot(1)), (x,))
    assert cb.constants_needed == 2 and cb.program.constant_users == {1: (0,)}
    dev.queue_execute(cb, constants=(123, 2, 5, 6))  # slot 0 is read by nothing
    dev.queue_execute(cb, constants=(0, 3))
    np.testing.assert_array_equal(x.read(np.uint32), start() * np.uint32(6))


def test_bad_values_submit_nothing(dev, exe):
    x = dev.upload(start())
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=2)
    with cb:
        cb.dispatch(exe, "scale", groups(N), (N, hal.constant_slot(1)), (x,))
    for bad in [(), (1,), (1, 2, 3), (1, 1 << 32), (1, -(1 << 31) - 1), (1, "2"), (1, None), (1, np.float64(2)), 5,
                "12", {0: 1, 1: 2}, {1, 2}, np.ones((1, 2), np.uint32)]:
        with pytest.raises(hal.ValidationError, match="queue_execute"):
            dev.queue_execute(cb, constants=bad)
    dev.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), start())
    dev.queue_execute(cb, constants=(0, 2))  # still usable
    np.testing.assert_array_equal(x.read(np.uint32), start() * np.uint32(2))


def test_constants_for_a_command_buffer_without_constant_slots(dev, exe):
    x = dev.upload(start())
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", groups(N), (N, 2), (x,))
    with pytest.raises(hal.ValidationError, match="constant_capacity 0"):
        dev.queue_execute(cb, constants=(1,))
    dev.queue_execute(cb, constants=[])  # checked (not the default), and empty is right
    np.testing.assert_array_equal(x.read(np.uint32), start() * np.uint32(2))


def test_submissions_from_several_threads_keep_their_values(dev, exe):
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2, constant_capacity=1)
    with cb:
        cb.dispatch(exe, "xor_copy", groups(N), (N, hal.constant_slot(0)), (hal.slot(0), hal.slot(1)))
    source = dev.upload(start())
    outs = [dev.allocate(4 * N) for _ in range(4)]
    errors = []

    def submit(i):
        try:
            for k in range(10):
                dev.queue_execute(cb, binding_table=(source, outs[i]), constants=(1000 * i + k,))
                if k % 3 == 0:  # each submission reads its own values, whatever the other threads submit between
                    np.testing.assert_array_equal(outs[i].read(np.uint32), start() ^ np.uint32(1000 * i + k))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(outs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    dev.synchronize()
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out.read(np.uint32), start() ^ np.uint32(1000 * i + 9))
