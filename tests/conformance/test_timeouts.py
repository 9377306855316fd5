"""Waits with a timeout (issue 49, item 3), on every backend: work that does not end in time (a host call that
blocks, standing for a kernel that does not finish) makes synchronize(timeout=...) raise hal.TimeoutError naming
what still runs and loses nothing: once it ends, a later synchronize() returns and the device runs new work; a
semaphore wait that times out says whether queued work will still signal it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hal

WORDS = 16


def test_synchronize_times_out_naming_what_runs_and_the_device_goes_on(dev, exe):
    release = threading.Event()
    x = dev.upload(np.arange(WORDS, dtype=np.uint32))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (WORDS, 3), (x,))
    dev.queue_host_call(lambda: release.wait(30))
    dev.queue_execute(cb)  # queued behind the call
    with pytest.raises(hal.TimeoutError, match=r"synchronize\(timeout=0.2\): .* still running after 0.2 s; the "
                                               r"device is not lost"):
        dev.synchronize(timeout=0.2)
    release.set()
    dev.synchronize(timeout=30)
    np.testing.assert_array_equal(x.read(np.uint32), np.arange(WORDS) * 3)
    dev.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), np.arange(WORDS) * 9)


@pytest.mark.parametrize("bad", [-1, "1", True])
def test_a_bad_timeout_is_refused(dev, bad):
    with pytest.raises(hal.ValidationError, match="synchronize: timeout must be None or seconds >= 0"):
        dev.synchronize(timeout=bad)


def test_a_semaphore_wait_that_times_out_says_what_would_move_it_on(dev):
    sem, gate = dev.create_semaphore(0), dev.create_semaphore(0)
    with pytest.raises(hal.TimeoutError, match="still below 1 after 0.05 s; no queued submission signals it"):
        sem.wait(1, timeout=0.05)
    cb = dev.create_command_buffer()
    with cb:
        pass
    dev.queue_execute(cb, wait=[(gate, 1)], signal=[(sem, 1)])
    with pytest.raises(hal.TimeoutError, match=r"queued work that signals it \(next 1\) is still waiting or running"):
        sem.wait(1, timeout=0.05)
    gate.signal(1)
    sem.wait(1, timeout=30)
