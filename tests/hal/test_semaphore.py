"""Timeline semaphores on the host device: host query/signal/wait, and submissions that wait and signal."""

from __future__ import annotations

import builtins
import threading
import time

import numpy as np
import pytest

import hal
from tests import kernels

# Longest a call that must not block may take; generous, so a loaded machine does not flake.
NOT_BLOCKING_S = 2.0


def fill_cb(dev, buf, value):
    cb = dev.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, np.uint32(value))
    return cb


def in_thread(fn, *args):
    """Run fn(*args) in a thread; returns (thread, outcome dict with 'result' or 'error')."""
    outcome = {}

    def run():
        try:
            outcome["result"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            outcome["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, outcome


# Host operations.
def test_initial_value(host):
    assert host.create_semaphore().query() == 0
    assert host.create_semaphore(5).query() == 5
    assert host.create_semaphore((1 << 64) - 1).query() == (1 << 64) - 1


def test_signal_raises_the_value(host):
    sem = host.create_semaphore(0)
    sem.signal(1)
    assert sem.query() == 1
    sem.signal(10)
    assert sem.query() == 10


@pytest.mark.parametrize("value", [3, 2, 0])
def test_signal_not_above_current_refused(host, value):
    sem = host.create_semaphore(3)
    with pytest.raises(hal.ValidationError, match=rf"signal: {value} is not above the current value 3"):
        sem.signal(value)
    assert sem.query() == 3


def test_wait_times_out(host):
    sem = host.create_semaphore(0)
    start = time.monotonic()
    with pytest.raises(hal.TimeoutError, match=r"the value is 0, still below 1") as info:
        sem.wait(1, timeout=0.2)
    elapsed = time.monotonic() - start
    assert isinstance(info.value, builtins.TimeoutError)
    assert isinstance(info.value, hal.HalError)
    assert 0.15 <= elapsed < NOT_BLOCKING_S


def test_wait_timeout_zero_polls(host):
    sem = host.create_semaphore(2)
    start = time.monotonic()
    with pytest.raises(hal.TimeoutError):
        sem.wait(3, timeout=0)
    sem.wait(2, timeout=0)
    sem.wait(1, timeout=0)
    assert time.monotonic() - start < NOT_BLOCKING_S


def test_wait_returns_when_another_thread_signals(host):
    sem = host.create_semaphore(0)
    t, outcome = in_thread(sem.wait, 1, 5.0)
    time.sleep(0.1)
    assert t.is_alive() and not outcome  # still waiting
    sem.signal(1)
    t.join(NOT_BLOCKING_S)
    assert not t.is_alive()
    assert outcome == {"result": None}


def test_signal_skipping_values_satisfies_lower_waits(host):
    sem = host.create_semaphore(0)
    sem.signal(10)
    for value in (1, 5, 10):
        sem.wait(value, timeout=0)
    with pytest.raises(hal.TimeoutError):
        sem.wait(11, timeout=0)


@pytest.mark.parametrize("value", [-1, True, False, 1 << 64, 1.0, "1", None])
def test_invalid_values_refused(host, value):
    with pytest.raises(hal.ValidationError,
                       match=r"create_semaphore: a semaphore value must be (an integer|in \[0, \d+\])"):
        host.create_semaphore(value)
    sem = host.create_semaphore(0)
    with pytest.raises(hal.ValidationError, match=r"signal: a semaphore value must be"):
        sem.signal(value)
    with pytest.raises(hal.ValidationError, match=r"wait: a semaphore value must be"):
        sem.wait(value, timeout=0)
    assert sem.query() == 0


@pytest.mark.parametrize("timeout", [-1, True, "1", float("nan")])
def test_invalid_timeout_refused(host, timeout):
    sem = host.create_semaphore(0)
    with pytest.raises(hal.ValidationError, match=r"wait: timeout must be None or seconds >= 0"):
        sem.wait(1, timeout=timeout)


# Submissions.
def test_submission_waiting_on_unsignalled_value_does_not_block(host):
    gate, done = host.create_semaphore(0), host.create_semaphore(0)
    buf = host.allocate(16)
    cb = fill_cb(host, buf, 7)
    start = time.monotonic()
    host.queue_execute(cb, wait=[(gate, 1)], signal=[(done, 1)])
    assert time.monotonic() - start < NOT_BLOCKING_S
    time.sleep(0.1)
    assert done.query() == 0  # has not run
    gate.signal(1)
    done.wait(1, timeout=5)
    assert done.query() == 1
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 7, np.uint32))


def test_submission_runs_only_after_the_wait_value(host):
    gate, done = host.create_semaphore(0), host.create_semaphore(0)
    buf = host.allocate(16)
    host.queue_execute(fill_cb(host, buf, 7), wait=[(gate, 2)], signal=[(done, 1)])
    gate.signal(1)  # below the wait value
    with pytest.raises(hal.TimeoutError):
        done.wait(1, timeout=0.2)
    gate.signal(2)
    done.wait(1, timeout=5)
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 7, np.uint32))


def test_two_submissions_chained_through_semaphores(host):
    exe = host.load_executable(kernels.SOURCE)
    gate, sem = host.create_semaphore(0), host.create_semaphore(0)
    x = host.allocate(16)
    first = fill_cb(host, x, 3)
    second = host.create_command_buffer()
    with second:
        second.dispatch(exe, "scale", (1, 1, 1), constants=(4, 5), bindings=(x,))
    host.queue_execute(first, wait=[(gate, 1)], signal=[(sem, 1)])
    host.queue_execute(second, wait=[(sem, 1)], signal=[(sem, 2)])
    time.sleep(0.05)
    assert sem.query() == 0
    gate.signal(1)
    sem.wait(2, timeout=5)
    assert sem.query() == 2
    np.testing.assert_array_equal(x.read(np.uint32), np.full(4, 15, np.uint32))


def test_submission_signal_value_not_above_current_refused(host):
    sem = host.create_semaphore(4)
    buf = host.allocate(16)
    cb = fill_cb(host, buf, 1)
    with pytest.raises(hal.ValidationError, match=r"queue_execute: signal value 4 is not above 4, the semaphore's "
                                                  r"current or already promised value"):
        host.queue_execute(cb, signal=[(sem, 4)])
    host.queue_execute(cb, signal=[(sem, 5)])  # the refused submission did not use up the one_shot buffer
    sem.wait(5, timeout=5)
    np.testing.assert_array_equal(buf.read(np.uint32), np.ones(4, np.uint32))


@pytest.mark.parametrize("what", ["wait", "signal"])
def test_semaphore_of_another_device_refused(host, what):
    other = hal.create_device("host")
    try:
        foreign = other.create_semaphore(0)
        buf = host.allocate(16)
        cb = fill_cb(host, buf, 2)
        with pytest.raises(hal.ValidationError, match=rf"queue_execute: a {what} semaphore belongs to another device"):
            host.queue_execute(cb, **{what: [(foreign, 1)]})
        host.queue_execute(cb)
        host.synchronize()
        np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 2, np.uint32))
        assert foreign.query() == 0
    finally:
        other.close()


@pytest.mark.parametrize("pairs", [[(None, 1)], [(1, 1)], 5, [("sem", 1, 2)]], ids=["none", "int", "scalar", "triple"])
def test_malformed_semaphore_pairs_refused(host, pairs):
    cb = fill_cb(host, host.allocate(16), 1)
    with pytest.raises(hal.ValidationError, match=r"queue_execute: wait"):
        host.queue_execute(cb, wait=pairs)


def _failing_cb(dev):
    def boom(ctx):
        raise RuntimeError("kernel exploded")

    exe = dev.load_executable(hal.ExecutableSource.python({"boom": boom}, [hal.Export("boom", bindings=0)]))
    cb = dev.create_command_buffer()
    with cb:
        cb.dispatch(exe, "boom", (1, 1, 1))
    return cb


def test_failing_kernel_fails_its_signal_semaphore(host):
    gate, done = host.create_semaphore(0), host.create_semaphore(0)
    host.queue_execute(_failing_cb(host), wait=[(gate, 1)], signal=[(done, 1)])
    t, outcome = in_thread(done.wait, 1, 5.0)  # a waiter already blocked when the failure happens
    time.sleep(0.05)
    gate.signal(1)
    t.join(NOT_BLOCKING_S + 5)
    assert not t.is_alive()
    assert isinstance(outcome.get("error"), hal.DeviceError), outcome
    assert "kernel exploded" in str(outcome["error"])
    with pytest.raises(hal.DeviceError):
        done.wait(1, timeout=1)
    with pytest.raises(hal.DeviceError):
        done.query()
    host.synchronize()  # the semaphore's wait reported the failure: not again


def test_failure_surfaces_once_then_device_is_usable(host):
    host.queue_execute(_failing_cb(host))
    with pytest.raises(hal.DeviceError):
        host.synchronize()
    host.synchronize()  # reported once
    buf = host.allocate(16)
    host.queue_execute(fill_cb(host, buf, 9))
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 9, np.uint32))


def test_submission_waiting_on_a_failed_semaphore_fails_too(host):
    mid, done = host.create_semaphore(0), host.create_semaphore(0)
    buf = host.allocate(16)
    host.queue_execute(_failing_cb(host), signal=[(mid, 1)])
    host.queue_execute(fill_cb(host, buf, 4), wait=[(mid, 1)], signal=[(done, 1)])
    with pytest.raises(hal.DeviceError):
        done.wait(1, timeout=5)
    host.synchronize()  # done's wait reported the failure (mid's and done's are one): not again
    assert not buf.read().any()  # the dependent work did not run


def _close_with_waiting_submission():
    dev = hal.create_device("host")
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    dev.queue_execute(fill_cb(dev, dev.allocate(16), 1), wait=[(gate, 1)], signal=[(done, 1)])
    t, outcome = in_thread(dev.close)
    t.join(NOT_BLOCKING_S + 3)
    assert not t.is_alive(), "close() hung on a submission that waits for a semaphore"
    assert outcome == {"result": None}
    return gate, done


def test_close_drops_a_waiting_submission_and_fails_its_signal():
    gate, done = _close_with_waiting_submission()
    with pytest.raises(hal.DeviceError, match=r"closed before this submission's waits were reached"):
        done.wait(1, timeout=NOT_BLOCKING_S)
    with pytest.raises(hal.ValidationError, match=r"is closed"):
        gate.signal(1)


def test_close_fails_the_signal_semaphore_with_device_lost():
    _, done = _close_with_waiting_submission()
    with pytest.raises(hal.DeviceLostError):
        done.wait(1, timeout=NOT_BLOCKING_S)
    with pytest.raises(hal.DeviceLostError):
        done.query()


def test_close_runs_work_that_can_still_run():
    dev = hal.create_device("host")
    sem = dev.create_semaphore(0)
    buf = dev.allocate(16)
    dev.queue_execute(fill_cb(dev, buf, 1), signal=[(sem, 1)])
    dev.close()
    assert sem.query() == 1
