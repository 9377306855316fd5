"""Failures are reported once, at the first place that observes them (issue 44, item 3; DESIGN.md, "Trust"): a
semaphore the failure reached raises it when waited on or queried; synchronize(), a buffer's read() and write() and a
wait on queue_read's signal raise a failure of earlier work that nothing has raised yet, once. A read never returns
bytes silently after earlier work failed."""

from __future__ import annotations

import numpy as np
import pytest

import hal

TIMEOUT_S = 10.0


def _boom():
    raise ValueError("boom")


def _fail_once(dev):
    """Queue a failing host call and wait until the queue is past it, observing nothing."""
    passed = dev.create_semaphore(0)
    dev.queue_host_call(_boom)
    dev.queue_host_call(lambda: None, signal=[(passed, 1)])  # no wait on the failure: it stays unobserved
    passed.wait(1, timeout=TIMEOUT_S)


def test_a_read_after_failed_work_raises_it_once_then_returns_the_bytes(dev):
    buf = dev.upload(np.arange(4, dtype=np.uint32))
    _fail_once(dev)
    with pytest.raises(hal.DeviceError, match=r"read: work queued before it failed: .*boom"):
        buf.read(np.uint32)
    np.testing.assert_array_equal(buf.read(np.uint32), np.arange(4))  # reported: the next read delivers
    dev.synchronize()  # and synchronize does not raise it again


def test_a_write_after_failed_work_raises_it_and_writes_nothing(dev):
    buf = dev.upload(np.zeros(4, np.uint32))
    _fail_once(dev)
    with pytest.raises(hal.DeviceError, match=r"write: work queued before it failed: .*boom"):
        buf.write(np.ones(4, np.uint32))
    np.testing.assert_array_equal(buf.read(np.uint32), np.zeros(4))


def test_synchronize_raises_it_once_and_reads_do_not_again(dev):
    buf = dev.upload(np.arange(4, dtype=np.uint32))
    _fail_once(dev)
    with pytest.raises(hal.DeviceError, match="a submission failed: .*boom"):
        dev.synchronize()
    dev.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.arange(4))


def test_a_failure_a_semaphore_raised_is_not_raised_again(dev):
    failed = dev.create_semaphore(0)
    buf = dev.upload(np.arange(4, dtype=np.uint32))
    dev.queue_host_call(_boom, signal=[(failed, 1)])
    with pytest.raises(hal.DeviceError, match="boom"):
        failed.wait(1, timeout=TIMEOUT_S)
    dev.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.arange(4))
    with pytest.raises(hal.DeviceError, match="boom"):
        failed.query()  # the semaphore itself stays failed


def test_a_failure_passed_on_by_a_wait_is_not_raised_again(dev):
    """The failure reaches `passed`'s waiter while the work that waits on it is still queued (behind `gate`); that
    work's turn, and work submitted after the failure was raised, pass it on without reporting it a second time."""
    failed, gate, passed, later = (dev.create_semaphore(0) for _ in range(4))
    dev.queue_host_call(_boom, signal=[(failed, 1)])
    dev.queue_host_call(lambda: None, wait=[(failed, 1), (gate, 1)], signal=[(passed, 1)])
    with pytest.raises(hal.DeviceError, match="boom"):
        passed.wait(1, timeout=TIMEOUT_S)
    gate.signal(1)  # the waiting call's turn comes after its failure was raised
    dev.queue_host_call(lambda: None, wait=[(failed, 1)], signal=[(later, 1)])  # refused at submit: failed already
    with pytest.raises(hal.DeviceError, match="boom"):
        later.wait(1, timeout=TIMEOUT_S)
    dev.synchronize()


def test_several_failures_are_reported_together_once(dev):
    for _ in range(3):
        dev.queue_host_call(_boom)
    with pytest.raises(hal.DeviceError, match=r"boom.*\(and 2 later failure\(s\) of queued work\)"):
        dev.synchronize()
    dev.synchronize()


def test_queue_read_reports_earlier_failures_through_its_signal(dev):
    source = dev.upload(np.arange(4, dtype=np.uint32))
    _fail_once(dev)
    done, out = dev.create_semaphore(0), np.full(4, 7, np.uint32)
    dev.queue_read(source, out, signal=[(done, 1)])
    with pytest.raises(hal.DeviceError, match="boom"):
        done.wait(1, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(out, np.full(4, 7))  # never bytes after a failure
    dev.synchronize()
    again = dev.create_semaphore(0)
    dev.queue_read(source, out, signal=[(again, 1)])
    again.wait(1, timeout=TIMEOUT_S)
    np.testing.assert_array_equal(out, np.arange(4))
