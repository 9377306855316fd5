"""queue_host_call and queue_read on every backend: in queue order, after their waits, never blocking the caller;
a function that raises fails its signals and the work that waits on them, and the device stays usable."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import hal
from tests.conftest import open_device

NOT_BLOCKING_S = 0.5  # generous: a queue operation waiting on a semaphore must return long before it could run
TIMEOUT_S = 30


def test_calls_run_in_queue_order_after_their_waits(dev):
    calls = []
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    start = time.perf_counter()
    dev.queue_host_call(lambda: calls.append("first"), wait=[(gate, 1)])
    dev.queue_host_call(lambda: calls.append("second"), signal=[(done, 1)])
    assert time.perf_counter() - start < NOT_BLOCKING_S
    time.sleep(0.05)
    assert calls == [] and done.query() == 0
    gate.signal(1)
    done.wait(1, timeout=TIMEOUT_S)
    assert calls == ["first", "second"]


def test_work_queued_after_a_call_waits_for_its_return(dev):
    release, signalled = threading.Event(), []
    target, done = dev.allocate(64), dev.create_semaphore(0)
    dev.queue_host_call(lambda: release.wait(TIMEOUT_S))
    dev.queue_fill(target, np.uint32(9), signal=[(done, 1)])
    dev.queue_host_call(lambda: signalled.append(done.query()))
    time.sleep(0.05)
    assert done.query() == 0  # the fill waits behind the running function
    release.set()
    dev.synchronize()
    assert done.query() == 1 and signalled == [1]
    np.testing.assert_array_equal(target.read(np.uint32), np.full(16, 9, np.uint32))


def test_signals_follow_the_return(dev):
    finished = []
    done = dev.create_semaphore(0)

    def slow():
        time.sleep(0.05)
        finished.append(True)

    dev.queue_host_call(slow, signal=[(done, 1)])
    done.wait(1, timeout=TIMEOUT_S)
    assert finished == [True]


def test_a_call_may_queue_work_and_use_hal(dev):
    target, done = dev.allocate(64), dev.create_semaphore(0)
    dev.queue_host_call(lambda: dev.queue_fill(target, np.uint32(3), signal=[(done, 1)]))
    done.wait(1, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(target.read(np.uint32), np.full(16, 3, np.uint32))


def test_a_raising_call_fails_its_signals_and_the_work_waiting_on_them(dev):
    release = threading.Event()
    failed, downstream, independent = dev.create_semaphore(0), dev.create_semaphore(0), dev.create_semaphore(0)
    untouched = dev.upload(np.full(16, 5, np.uint32))

    def boom():
        release.wait(TIMEOUT_S)
        raise ValueError("boom")

    dev.queue_host_call(boom, signal=[(failed, 1)])
    dev.queue_host_call(lambda: None, wait=[(failed, 1)], signal=[(downstream, 1)])  # queued before the failure
    release.set()
    with pytest.raises(hal.DeviceError, match=r"queue_host_call: .*boom.* raised ValueError\('boom'\)"):
        failed.wait(1, timeout=TIMEOUT_S)
    with pytest.raises(hal.DeviceError, match="boom"):
        downstream.wait(1, timeout=TIMEOUT_S)
    later = dev.create_semaphore(0)
    dev.queue_fill(untouched, np.uint32(1), wait=[(failed, 1)], signal=[(later, 1)])  # queued after: never runs
    with pytest.raises(hal.DeviceError, match="boom"):
        later.query()
    dev.queue_host_call(lambda: None, signal=[(independent, 1)])
    independent.wait(1, timeout=TIMEOUT_S)
    dev.synchronize()  # the semaphores' waits reported the failure: not again; the device stays usable
    np.testing.assert_array_equal(untouched.read(np.uint32), np.full(16, 5, np.uint32))
    with pytest.raises(hal.DeviceError, match="boom"):
        failed.signal(2)


def test_a_call_cannot_wait_for_its_own_queue(dev):
    buffer, done = dev.allocate(16), dev.create_semaphore(0)
    dev.queue_host_call(lambda: buffer.read(), signal=[(done, 1)])
    with pytest.raises(hal.DeviceError, match="its own queue"):
        done.wait(1, timeout=TIMEOUT_S)
    dev.synchronize()  # done's wait reported the failure
    again = dev.create_semaphore(0)
    dev.queue_host_call(dev.synchronize, signal=[(again, 1)])
    with pytest.raises(hal.DeviceError, match="its own queue"):
        again.wait(1, timeout=TIMEOUT_S)
    dev.synchronize()
    dev.queue_host_call(lambda: buffer.read())  # no signal: nothing else reports it
    with pytest.raises(hal.DeviceError, match="its own queue"):
        dev.synchronize()


def test_bad_host_calls_are_refused_and_queue_nothing(dev):
    sem = dev.create_semaphore(0)
    cases = [
        (lambda: dev.queue_host_call(42), "queue_host_call: fn must be callable"),
        (lambda: dev.queue_host_call(print, wait=[(1, 1)]), "queue_host_call: wait entries"),
        (lambda: dev.queue_host_call(print, signal=[(sem, -1)]), "queue_host_call signal"),
        (lambda: dev.queue_host_call(print, signal=5), "queue_host_call: signal must be a list"),
    ]
    for call, message in cases:
        with pytest.raises(hal.ValidationError, match=message):
            call()
    assert sem.promised == 0
    dev.synchronize()


def test_queue_read_copies_once_the_waits_are_met(dev):
    source = dev.upload(np.arange(64, dtype=np.uint32))
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    out = np.zeros(16, np.uint32)
    start = time.perf_counter()
    dev.queue_fill(hal.ref(source, 0, 64), np.uint32(7), wait=[(gate, 1)])
    dev.queue_read(hal.ref(source, 32, 128), out, signal=[(done, 1)])
    assert time.perf_counter() - start < NOT_BLOCKING_S
    time.sleep(0.05)
    assert done.query() == 0 and not out.any()
    gate.signal(1)
    done.wait(1, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(out, [7] * 8 + list(range(16, 24)))


def test_queue_read_of_every_shape(dev):
    data = np.arange(300, dtype=np.float32)
    source = dev.upload(data)
    done = dev.create_semaphore(0)
    whole, first, empty = np.empty(300, np.float32), np.empty((2, 5), np.float32), np.empty(0, np.uint8)
    dev.queue_read(source, whole)
    dev.queue_read(source, first)
    dev.queue_read(source, empty, signal=[(done, 1)])
    done.wait(1, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(whole, data)
    np.testing.assert_array_equal(first, data[:10].reshape(2, 5))


def test_queue_read_after_a_failed_wait_leaves_out_alone(dev):
    failed, done = dev.create_semaphore(0), dev.create_semaphore(0)
    source = dev.upload(np.zeros(4, np.uint32))  # (an upload's write would report the failure: see below)
    dev.queue_host_call(_raise, signal=[(failed, 1)])
    out = np.full(4, 3, np.uint32)
    dev.queue_read(source, out, wait=[(failed, 1)], signal=[(done, 1)])
    with pytest.raises(hal.DeviceError, match="RuntimeError"):
        done.wait(1, timeout=TIMEOUT_S)
    dev.synchronize()  # done's wait reported the failure
    np.testing.assert_array_equal(out, [3, 3, 3, 3])
    again = np.zeros(4, np.uint32)  # later reads are unaffected
    dev.queue_read(dev.upload(np.arange(4, dtype=np.uint32)), again)
    dev.synchronize()
    np.testing.assert_array_equal(again, np.arange(4))


def test_bad_reads_are_refused(dev):
    source = dev.allocate(64)
    sem = dev.create_semaphore(0)
    cases = [
        (lambda: dev.queue_read(source, np.zeros(17, np.uint32)), "queue_read: out holds 68 bytes; the source"),
        (lambda: dev.queue_read(source, np.zeros((4, 4), np.uint32).T), "out must be a writable C-contiguous"),
        (lambda: dev.queue_read(source, np.zeros(4, np.uint8).setflags(write=False) or b"1234"), "out must be"),
        (lambda: dev.queue_read(hal.slot(0), np.zeros(4, np.uint8)), "queue_read: source must be"),
        (lambda: dev.queue_read(source, np.zeros(4, np.uint8), signal=[(sem, 0)]), "queue_read: signal value 0"),
    ]
    for call, message in cases:
        with pytest.raises(hal.ValidationError, match=message):
            call()
    frozen = np.zeros(4, np.uint8)
    frozen.setflags(write=False)
    with pytest.raises(hal.ValidationError, match="writable"):
        dev.queue_read(source, frozen)
    assert sem.promised == 0


def test_close_ends_calls_the_queue_never_reached(dev):
    device = open_device(dev.driver)
    never, calls = device.create_semaphore(0), []
    device.queue_host_call(lambda: calls.append(1), wait=[(never, 1)])
    device.close()
    assert calls == []


def _raise():
    raise RuntimeError("no data")


def test_a_read_after_failed_work_reports_the_failure_once(dev):
    """A read that waits for nothing that failed still reports a failure of earlier work that nothing has observed
    (its signal fails with it, `out` untouched); once reported, later reads deliver."""
    source = dev.upload(np.arange(16, dtype=np.uint32))
    failed, first, second, third = (dev.create_semaphore(0) for _ in range(4))
    release = threading.Event()

    def boom():
        release.wait(TIMEOUT_S)
        raise ValueError("boom")

    dev.queue_host_call(boom, signal=[(failed, 1)])
    out1, out2, out3 = np.zeros(16, np.uint32), np.zeros(16, np.uint32), np.zeros(16, np.uint32)
    dev.queue_read(source, out1, wait=[(failed, 1)], signal=[(first, 1)])
    dev.queue_read(source, out2, signal=[(second, 1)])  # waits for nothing that failed
    release.set()
    with pytest.raises(hal.DeviceError, match="boom"):
        second.wait(1, timeout=TIMEOUT_S)
    with pytest.raises(hal.DeviceError, match="boom"):
        first.wait(1, timeout=TIMEOUT_S)  # a semaphore the failure reached raises it whenever asked
    assert not out1.any() and not out2.any()
    dev.synchronize()  # reported: not again
    dev.queue_read(source, out3, signal=[(third, 1)])
    third.wait(1, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(out3, np.arange(16))


def test_work_queued_before_a_skipped_submission_still_gets_its_values(dev):
    """A submission skipped for a failed wait still signals its values in queue order (its semaphores stay
    failed), so work queued after it that waits on them is not stuck."""
    failed, skipped_signal, after = dev.create_semaphore(0), dev.create_semaphore(0), dev.create_semaphore(0)
    dev.queue_host_call(_raise, signal=[(failed, 1)])
    with pytest.raises(hal.DeviceError):
        failed.wait(1, timeout=TIMEOUT_S)
    target = dev.allocate(64)
    dev.queue_fill(target, np.uint32(1), wait=[(failed, 1)], signal=[(skipped_signal, 1)])  # skipped
    dev.queue_host_call(lambda: None, signal=[(after, 1)])
    after.wait(1, timeout=TIMEOUT_S)
    with pytest.raises(hal.DeviceError):
        skipped_signal.wait(1, timeout=TIMEOUT_S)
    dev.synchronize()  # failed's wait reported the failure


def test_semaphore_lists_may_be_iterators(dev):
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    source = dev.upload(np.arange(16, dtype=np.uint32))
    out = np.zeros(16, np.uint32)
    dev.queue_read(source, out, wait=iter([(gate, 1)]), signal=iter([(done, 1)]))
    transient = dev.queue_alloca(64, wait=(p for p in [(gate, 1)]), signal=iter([(done, 2)]))
    dev.queue_dealloca(transient, signal=iter([(done, 3)]))
    time.sleep(0.05)
    assert not out.any() and done.query() == 0  # the wait held the copy
    gate.signal(1)
    done.wait(3, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(out, np.arange(16))


def test_a_call_queuing_a_call_while_the_host_reads(dev):
    """fn1 queues fn2, which queues fn3, while another thread reads a buffer (its copy waits behind them)."""
    source, log, done = dev.upload(np.arange(16, dtype=np.uint32)), [], []

    def fn2():
        time.sleep(0.2)
        dev.queue_host_call(lambda: log.append("fn3"))

    dev.queue_host_call(lambda: (time.sleep(0.1), dev.queue_host_call(fn2)))
    reader = threading.Thread(target=lambda: done.append(source.read(np.uint32)), daemon=True)
    reader.start()
    reader.join(TIMEOUT_S)
    assert done and not reader.is_alive()
    dev.synchronize()
    assert log == ["fn3"]
