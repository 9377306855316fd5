"""Queue transfers on every backend: queue_fill, queue_update (any size) and queue_copy, ordered by wait and
signal like queue_execute, never blocking the caller, checked like the commands they run."""

from __future__ import annotations

import time

import numpy as np
import pytest

import hal

NOT_BLOCKING_S = 0.5  # generous: a transfer waiting on a semaphore must return long before it could run


def test_fill_update_copy_in_queue_order(dev):
    a, b = dev.allocate(1024), dev.allocate(1024)
    dev.queue_fill(a, np.uint32(7))
    dev.queue_update(hal.ref(a, 256, 256), np.arange(64, dtype=np.uint32))
    dev.queue_copy(a, b)
    dev.queue_fill(hal.ref(a, 0, 16), np.uint16(0xABCD))
    expected = np.full(256, 7, np.uint32)
    expected[64:128] = np.arange(64)
    np.testing.assert_array_equal(b.read(np.uint32), expected)
    expected[:4] = 0xABCDABCD
    np.testing.assert_array_equal(a.read(np.uint32), expected)


def test_update_of_any_size_copies_its_data_when_called(dev):
    n = 3 * 65536 // 4 + 100  # several pieces of at most 64 KiB, the last one partial
    data = np.arange(n, dtype=np.uint32) * 2654435761
    target = dev.allocate(4 * n + 64)
    gate = dev.create_semaphore(0)
    dev.queue_update(hal.ref(target, 64, 4 * n), data, wait=[(gate, 1)])
    expected = data.copy()
    data[:] = 0  # the transfer took its own copy
    gate.signal(1)
    np.testing.assert_array_equal(target.read(np.uint32, offset=64), expected)


def test_waits_and_signals_order_transfers_without_blocking(dev):
    src, dst = dev.upload(np.arange(256, dtype=np.uint32)), dev.allocate(1024)
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    start = time.perf_counter()
    dev.queue_copy(src, dst, wait=[(gate, 1)], signal=[(done, 1)])
    assert time.perf_counter() - start < NOT_BLOCKING_S
    assert done.query() == 0
    gate.signal(1)
    done.wait(1, timeout=30)
    np.testing.assert_array_equal(dst.read(np.uint32), np.arange(256, dtype=np.uint32))


def test_bad_transfers_are_refused_and_queue_nothing(dev):
    a = dev.upload(np.full(64, 5, np.uint32))
    cases = [
        (lambda: dev.queue_update(a, np.zeros(65, np.uint32)), "queue_update: 260 bytes of data; the target range"),
        (lambda: dev.queue_update(a, b""), "queue_update: 0 bytes"),
        (lambda: dev.queue_update(hal.slot(0), b"1234"), "queue_update: target must be"),
        (lambda: dev.queue_update(a, object()), "queue_update: data"),
        (lambda: dev.queue_fill(a, b"123"), "queue_fill: pattern has 3 bytes"),
        (lambda: dev.queue_copy(hal.ref(a, 0, 128), hal.ref(a, 64, 128)), "queue_copy: source \\[0, 128\\) and target"),
        (lambda: dev.queue_copy(hal.ref(a, 0, 64), hal.ref(a, 64, 64), signal=[(1, 1)]), "queue_copy: signal"),
    ]
    for call, message in cases:
        with pytest.raises(hal.ValidationError, match=message):
            call()
    np.testing.assert_array_equal(a.read(np.uint32), np.full(64, 5, np.uint32))
    released = dev.allocate(64)
    released.release()
    with pytest.raises(hal.ValidationError, match="queue_fill: .*released"):
        dev.queue_fill(released, np.uint32(1))
