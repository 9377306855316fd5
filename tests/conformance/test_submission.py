"""Submission on every backend: binding tables, reuse, one-shot rules, timeline semaphores, ordering of
host access after submitted work."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import hal
from tests.kernels import groups

NOT_BLOCKING_S = 0.5  # generous: queue_execute must return long before a waiting submission could run


def u32(values):
    return np.asarray(values, np.uint32)


def fill_cb(dev, buf, value):
    cb = dev.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, np.uint32(value))
    return cb


# Binding tables and reuse.
def test_one_recording_against_many_binding_tables(dev, exe):
    n = 300
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=3)
    with cb:
        cb.dispatch(exe, "add", groups(n), (n,), (hal.slot(0), hal.slot(1), hal.slot(2)))
    tables = []
    for k in range(4):
        a = dev.upload(np.arange(n, dtype=np.uint32) * (k + 1))
        b = dev.upload(np.full(n, 100 * k, np.uint32))
        tables.append((a, b, dev.allocate(4 * n)))
    for table in tables + tables[:2]:
        dev.queue_execute(cb, binding_table=table)
    dev.synchronize()
    for k, (_, _, out) in enumerate(tables):
        np.testing.assert_array_equal(out.read(np.uint32), np.arange(n, dtype=np.uint32) * (k + 1) + 100 * k)
    a, _, out = tables[0]
    a.write(np.ones(n, np.uint32))  # the same table again sees the new contents
    dev.queue_execute(cb, binding_table=list(tables[0]))
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32), np.full(n, 1, np.uint32))


def test_slots_mixed_with_direct_references_and_sub_ranges(dev, exe):
    n = 64
    align = max(256, dev.capabilities.storage_buffer_offset_alignment)
    fixed = dev.upload(np.full(n, 1000, np.uint32))
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.dispatch(exe, "add", groups(n), (n,), (hal.slot(0, align, 4 * n), fixed, hal.slot(1)))
        cb.execution_barrier()
        cb.copy_buffer(hal.slot(1, 0, 16), hal.slot(0, 0, 16))
    for k in range(2):
        src = dev.upload(np.arange(align // 4 + n, dtype=np.uint32) * (k + 1))
        out = dev.allocate(4 * n)
        dev.queue_execute(cb, binding_table=(src, out))
        dev.synchronize()
        want = np.arange(align // 4, align // 4 + n, dtype=np.uint32) * (k + 1) + 1000
        np.testing.assert_array_equal(out.read(np.uint32), want)
        np.testing.assert_array_equal(src.read(np.uint32, count=4), want[:4])


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_reusable_resubmitted_accumulates(dev, exe, strategy):
    x = dev.upload(u32([1, 2, 3, 0xFFFFFFFF]))
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (x,))
    for _ in range(5):
        dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 0xFFFFFFFF]) * np.uint32(243))


def test_reset_and_record_again(dev, exe):
    x = dev.upload(u32([1, 2, 3, 4]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (x,))
    dev.queue_execute(cb)
    cb.reset()
    with cb:  # same topology, other constants
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 5), (x,))
    dev.queue_execute(cb)
    cb.reset()
    with cb:  # another topology
        cb.fill_buffer(x, np.uint32(2))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", (1, 1, 1), (2, 7), (x,))
    dev.queue_execute(cb)
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), u32([14, 14, 2, 2]))


def test_one_shot_runs_once(dev):
    buf = dev.allocate(16)
    cb = fill_cb(dev, buf, 1)
    dev.queue_execute(cb)
    with pytest.raises(hal.ValidationError, match=r"one_shot command buffer runs once"):
        dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.ones(4, np.uint32))


def test_submitting_before_end_refused(dev):
    cb = dev.create_command_buffer()
    cb.begin()
    with pytest.raises(hal.ValidationError, match=r"call end\(\) before submitting"):
        dev.queue_execute(cb)
    cb.end()
    dev.queue_execute(cb)


def test_binding_table_problems_refused(dev, exe):
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (hal.slot(1),))
    small = dev.allocate(16)
    with pytest.raises(hal.ValidationError, match=r"uses slots up to 1"):
        dev.queue_execute(cb, binding_table=(small,))
    with pytest.raises(hal.ValidationError, match=r"more than the command buffer's binding_capacity 2"):
        dev.queue_execute(cb, binding_table=(small, small, small))
    gone = dev.allocate(16)
    gone.release()
    with pytest.raises(hal.ValidationError, match=r"binding_table\[1\] is a released buffer"):
        dev.queue_execute(cb, binding_table=(small, gone))
    x = dev.upload(u32([1, 2, 3, 4]))
    dev.queue_execute(cb, binding_table=(small, x))
    dev.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), u32([3, 6, 9, 12]))


# Ordering of host access.
def test_read_waits_for_submitted_work(dev, exe):
    n = 1 << 18
    x = dev.upload(np.ones(n, np.uint32))
    cb = dev.create_command_buffer()
    with cb:
        for _ in range(20):
            cb.dispatch(exe, "scale", groups(n), (n, 3), (x,))
            cb.execution_barrier()
    dev.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), np.full(n, 3**20, np.uint32))


def test_write_waits_for_submitted_work(dev):
    n = 1 << 18
    x = dev.allocate(4 * n)
    dev.queue_execute(fill_cb(dev, x, 5))
    x.write(u32([9]))  # must land after the fill, not be overwritten by it
    got = x.read(np.uint32)
    assert got[0] == 9 and np.all(got[1:] == 5)


# Timeline semaphores.
def test_semaphore_host_signal_query_wait(dev):
    sem = dev.create_semaphore(3)
    assert sem.query() == 3
    sem.signal(10)
    assert sem.query() == 10
    sem.wait(7, timeout=0)
    with pytest.raises(hal.TimeoutError):
        sem.wait(11, timeout=0.05)
    with pytest.raises(hal.ValidationError, match=r"not above the current value 10"):
        sem.signal(10)


def test_semaphore_wait_returns_when_another_thread_signals(dev):
    sem = dev.create_semaphore(0)
    threading.Timer(0.05, sem.signal, (2,)).start()
    sem.wait(2, timeout=5)
    assert sem.query() == 2


def test_submission_waiting_on_an_unsignalled_value_does_not_block(dev):
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    buf = dev.allocate(16)
    cb = fill_cb(dev, buf, 7)
    start = time.monotonic()
    dev.queue_execute(cb, wait=[(gate, 2)], signal=[(done, 1)])
    assert time.monotonic() - start < NOT_BLOCKING_S
    gate.signal(1)  # below the wait value: still waiting
    with pytest.raises(hal.TimeoutError):
        done.wait(1, timeout=0.2)
    assert done.query() == 0
    gate.signal(2)
    done.wait(1, timeout=10)
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 7, np.uint32))


def test_submissions_chained_through_semaphores(dev, exe):
    gate, sem = dev.create_semaphore(0), dev.create_semaphore(0)
    x = dev.allocate(16)
    second = dev.create_command_buffer()
    with second:
        second.dispatch(exe, "scale", (1, 1, 1), (4, 5), (x,))
    dev.queue_execute(fill_cb(dev, x, 3), wait=[(gate, 1)], signal=[(sem, 1)])
    dev.queue_execute(second, wait=[(sem, 1)], signal=[(sem, 2)])
    time.sleep(0.05)
    assert sem.query() == 0
    gate.signal(1)
    sem.wait(2, timeout=10)
    assert sem.query() == 2
    np.testing.assert_array_equal(x.read(np.uint32), np.full(4, 15, np.uint32))


def test_signal_value_must_grow(dev):
    sem = dev.create_semaphore(4)
    buf = dev.allocate(16)
    cb = fill_cb(dev, buf, 1)
    with pytest.raises(hal.ValidationError, match=r"signal value 4 is not above 4"):
        dev.queue_execute(cb, signal=[(sem, 4)])
    dev.queue_execute(cb, signal=[(sem, 5)])  # the refused submission did not use up the one-shot buffer
    sem.wait(5, timeout=10)
    np.testing.assert_array_equal(buf.read(np.uint32), np.ones(4, np.uint32))


def test_many_submissions_signal_in_order(dev):
    sem = dev.create_semaphore(0)
    buf = dev.allocate(16)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(buf, np.uint32(1))
    for v in range(1, 101):
        dev.queue_execute(cb, signal=[(sem, v)])
    sem.wait(100, timeout=30)
    assert sem.query() == 100


def test_many_semaphores_in_one_submission(dev):
    sems = [dev.create_semaphore(0) for _ in range(12)]
    buf = dev.allocate(16)
    cb = dev.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, np.uint32(4))
    dev.queue_execute(cb, wait=[(s, 0) for s in sems], signal=[(s, 1) for s in sems])
    for s in sems:
        s.wait(1, timeout=10)
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 4, np.uint32))


def test_closing_with_a_chain_of_waiting_submissions(dev):
    """The second waits for what the first signals; only the first's wait needs a signal to drain."""
    fresh = hal.create_device(dev.driver)
    sem, buf = fresh.create_semaphore(0), fresh.allocate(16)
    for k in (1, 2):
        cb = fresh.create_command_buffer()
        with cb:
            cb.fill_buffer(buf, np.uint32(k))
        fresh.queue_execute(cb, wait=[(sem, k)], signal=[(sem, k + 1)])
    start = time.monotonic()
    fresh.close()
    assert time.monotonic() - start < 10
