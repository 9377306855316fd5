"""queue_alloca and queue_dealloca on every backend: transient buffers in queue order, refused after they are given
back, never freed under work queued before; 10k cycles leave the device's memory where it was."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hal

TIMEOUT_S = 30
SOAK_CYCLES = 10_000


def test_alloca_and_dealloca_in_queue_order(dev):
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    transient = dev.queue_alloca(4096, wait=[(gate, 1)], signal=[(done, 1)])
    assert transient.size == 4096
    dev.queue_fill(transient, np.uint32(3))
    out = np.zeros(1024, np.uint32)
    dev.queue_read(transient, out, signal=[(done, 2)])
    dev.queue_dealloca(transient, signal=[(done, 3)])
    assert done.query() == 0
    gate.signal(1)
    done.wait(3, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(out, np.full(1024, 3, np.uint32))


def test_a_deallocated_buffer_is_refused_everywhere(dev, exe):
    transient = dev.queue_alloca(256)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(transient, np.uint32(1))
    dev.queue_execute(cb)
    dev.queue_dealloca(transient)
    with pytest.raises(hal.ValidationError, match="released"):
        dev.queue_execute(cb)
    with pytest.raises(hal.ValidationError, match="released"):
        dev.queue_fill(transient, np.uint32(2))
    with pytest.raises(hal.ValidationError, match="released"):
        transient.read()
    table = dev.create_command_buffer(binding_capacity=1)
    with table:
        table.fill_buffer(hal.slot(0), np.uint32(1))
    with pytest.raises(hal.ValidationError, match="released"):
        dev.queue_execute(table, binding_table=(transient,))
    with pytest.raises(hal.ValidationError, match="already deallocated"):
        dev.queue_dealloca(transient)
    dev.synchronize()


def test_bad_allocas_and_deallocas_are_refused(dev):
    sem = dev.create_semaphore(0)
    plain = dev.allocate(64)
    cases = [
        (lambda: dev.queue_alloca(-1), "queue_alloca: nbytes"),
        (lambda: dev.queue_alloca(64, signal=[(sem, 0)]), "queue_alloca: signal value 0"),
        (lambda: dev.queue_alloca(64, wait=[(1, 1)]), "queue_alloca: wait entries"),
        (lambda: dev.queue_dealloca(plain), "was not made by this device's queue_alloca"),
        (lambda: dev.queue_dealloca("buffer"), "was not made by this device's queue_alloca"),
    ]
    for call, message in cases:
        with pytest.raises(hal.ValidationError, match=message):
            call()
    assert sem.promised == 0 and not plain.released


def test_dealloca_never_frees_under_work_queued_before(dev):
    release = threading.Event()
    transient = dev.queue_alloca(1 << 16)
    dev.queue_host_call(lambda: release.wait(TIMEOUT_S))  # holds the queue until the reuse below is queued
    dev.queue_fill(transient, np.uint32(5))
    out = np.zeros(1 << 14, np.uint32)
    dev.queue_read(transient, out)
    dev.queue_dealloca(transient)
    reuse = dev.queue_alloca(1 << 16)  # may take the same memory, in queue order
    dev.queue_fill(reuse, np.uint32(9))
    release.set()
    dev.synchronize()
    np.testing.assert_array_equal(out, np.full(1 << 14, 5, np.uint32))
    np.testing.assert_array_equal(reuse.read(np.uint32), np.full(1 << 14, 9, np.uint32))
    dev.queue_dealloca(reuse)


def test_soak_alloca_execute_dealloca_keeps_memory_flat(dev, exe):
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.dispatch(exe, "add", (1, 1, 1), (64,), (hal.slot(0), hal.slot(0), hal.slot(1)))
    source = dev.upload(np.arange(64, dtype=np.uint32))
    dev.synchronize()
    before = dev.memory_stats()["used_bytes"]
    done = dev.create_semaphore(0)
    for i in range(SOAK_CYCLES):
        transient = dev.queue_alloca(256)
        dev.queue_execute(cb, binding_table=(source, transient))
        if i == SOAK_CYCLES - 1:
            last = np.zeros(64, np.uint32)
            dev.queue_read(transient, last)
        dev.queue_dealloca(transient, signal=[(done, i + 1)])
    done.wait(SOAK_CYCLES, timeout=300)
    dev.synchronize()
    np.testing.assert_array_equal(last, 2 * np.arange(64, dtype=np.uint32))
    assert dev.memory_stats()["used_bytes"] <= before + (1 << 20)  # what queue_read keeps for reuse, at most
