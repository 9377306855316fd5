"""Vulkan recordings' lifecycle: a VkCommandBuffer never submitted gives its pool back when it is let go (with
descriptor sets, at the next collect()), whatever the queue is doing; one submitted waits for the queue (the device's
lifetime)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip

backend_or_skip("vulkan")

from backends.vulkan.recording import KEEP

pytestmark = pytest.mark.vulkan


def ended(dev, exe, out, **options):
    cb = dev.create_command_buffer(mode="reusable", **options)
    with cb:
        cb.fill_buffer(out, np.uint32(1))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", (1, 1, 1), (1, 3), (out,))
    return cb


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_recording_never_submitted_gives_its_pool_back_while_the_queue_is_busy(fresh, strategy):
    dev = fresh()
    exe, out = dev.load_executable(kernels.SOURCE), dev.allocate(1024)
    gate = threading.Event()
    dev.queue_host_call(lambda: gate.wait(20))  # the queue stops here until the gate opens
    try:
        held = dev.command_pools.in_use
        cb = ended(dev, exe, out, strategy=strategy)
        assert dev.command_pools.in_use == held + 1
        del cb
        gc.collect()
        dev.lifetime.collect()
        assert dev.command_pools.in_use == held  # no mark of the queue to wait for
        cb = ended(dev, exe, out, strategy=strategy)
        dev.queue_execute(cb)  # queued behind the gate
        del cb
        gc.collect()
        dev.lifetime.collect()
        assert dev.command_pools.in_use == held + 1 and dev.lifetime.pending  # waits for the queue
    finally:
        gate.set()
    dev.synchronize()
    dev.lifetime.collect()
    assert dev.command_pools.in_use == held
    np.testing.assert_array_equal(out.read(np.uint32)[:1], [3])


def test_a_reset_gives_a_recording_never_submitted_back_and_one_submitted_after_the_queue(fresh):
    dev = fresh()
    exe, out = dev.load_executable(kernels.SOURCE), dev.allocate(1024)
    cb = ended(dev, exe, out)
    held = dev.command_pools.in_use
    cb.reset()  # (collects)
    assert dev.command_pools.in_use == held - 1
    cb = ended(dev, exe, out)
    dev.queue_execute(cb)
    held = dev.command_pools.in_use
    del cb
    gc.collect()
    assert dev.lifetime.pending  # let go, waiting for the work submitted before
    assert dev.command_pools.in_use == held
    dev.synchronize()
    dev.lifetime.collect()
    assert dev.command_pools.in_use == held - 1
    np.testing.assert_array_equal(out.read(np.uint32)[:1], [3])


def test_recordings_encoded_for_binding_tables_wait_for_the_queue(fresh):
    dev = fresh()
    a, b = dev.allocate(1024), dev.allocate(1024)
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.fill_buffer(hal.slot(0), np.uint32(2))
    held = dev.command_pools.in_use
    dev.queue_execute(cb, binding_table=(a,))  # encoded now, for this table
    dev.queue_execute(cb, binding_table=(b,))
    dev.synchronize()
    assert dev.command_pools.in_use == held + 2
    del cb
    gc.collect()
    assert dev.command_pools.in_use == held + 2 and dev.lifetime.pending
    dev.lifetime.collect()
    assert dev.command_pools.in_use == held
    np.testing.assert_array_equal(b.read(np.uint32)[:1], [2])


def test_dropping_an_unsubmitted_command_buffer_after_its_device_closed(fresh):
    dev = fresh()
    exe, out = dev.load_executable(kernels.SOURCE), dev.allocate(1024)
    cb = ended(dev, exe, out)
    dev.close()  # destroys the pool the recording holds
    del cb  # gives nothing back a second time
    gc.collect()
    assert dev.command_pools.in_use == 0


@pytest.mark.parametrize("let_go", ["reset", "drop"])
def test_a_command_buffer_let_go_while_recording_leaves_a_pool_the_next_one_can_begin(fresh, let_go):
    """single_pass encodes as it records: let go before end(), its VkCommandBuffer is still recording when its pool
    goes back (the validation layer fails the next vkBeginCommandBuffer on it unless the pool was reset)."""
    dev = fresh()
    exe, out = dev.load_executable(kernels.SOURCE), dev.allocate(1024)
    cb = dev.create_command_buffer(mode="reusable", strategy="single_pass")
    cb.begin()
    cb.fill_buffer(out, np.uint32(5))
    if let_go == "reset":
        cb.reset()
    else:
        del cb
        gc.collect()
    dev.lifetime.collect()
    cached = dev.command_pools.cached
    cb = ended(dev, exe, out, strategy="single_pass")  # takes the pool given back
    assert dev.command_pools.cached == cached - 1
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32)[:1], [3])


def test_a_recording_never_submitted_gives_its_pool_back_when_let_go(fresh):
    dev = fresh()
    exe, out = dev.load_executable(kernels.SOURCE), dev.allocate(1024)
    held, cached = dev.command_pools.in_use, dev.command_pools.cached
    cb = ended(dev, exe, out)
    assert dev.command_pools.in_use == held + 1
    del cb  # no collection, no collect(): back at once
    if not dev.push_descriptors:  # its descriptor sets are destroyed at the next collect()
        dev.lifetime.collect()
    assert (dev.command_pools.in_use, dev.command_pools.cached) == (held, max(cached, 1))


def test_recordings_let_go_by_the_garbage_collector_in_several_threads_all_come_back(fresh):
    """Command buffers in reference cycles, ended and dropped unsubmitted by four threads at once: the collector
    gives their pools back in whichever thread it runs, often inside another recording's taking of a pool."""
    dev = fresh()
    exe, out = dev.load_executable(kernels.SOURCE), dev.allocate(1024)
    held = dev.command_pools.in_use
    errors = []

    def work():
        try:
            for _ in range(100):
                cycle = [ended(dev, exe, out)]
                cycle.append(cycle)  # only the collector frees it
        except Exception as e:  # reported below: a thread's exception would not fail the test
            errors.append(e)

    threshold = gc.get_threshold()
    gc.set_threshold(50)  # collections come often, in every thread
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.set_threshold(*threshold)
    gc.collect()
    dev.lifetime.collect()
    assert errors == []
    assert dev.command_pools.in_use == held
    cb = ended(dev, exe, out)
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32)[:1], [3])


def test_pools_the_collector_gives_back_beyond_keep_go_at_the_next_take(fresh):
    """The collector gives pools back without a driver call (it may run inside one: the validation layer's message
    callback), so beyond KEEP they wait; the next recording's take destroys them."""
    dev = fresh()
    exe, out = dev.load_executable(kernels.SOURCE), dev.allocate(1024)
    cycle = [ended(dev, exe, out) for _ in range(KEEP + 4)]
    cycle.append(cycle)  # only the collector frees them
    del cycle
    gc.collect()
    dev.lifetime.collect()  # (with descriptor sets they go back here, KEEP at most)
    assert dev.command_pools.in_use == 0
    if dev.push_descriptors:
        assert dev.command_pools.cached == KEEP + 4
    cb = ended(dev, exe, out)
    assert dev.command_pools.cached == KEEP - 1
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32)[:1], [3])
