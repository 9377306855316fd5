"""The host queue worker survives whatever a kernel does and never keeps a dropped device alive."""

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import hal
from backends.host import device as host_device


def _one_kernel_program(dev, kernel, buf=None):
    exe = dev.load_executable(hal.ExecutableSource.python({"k": kernel}, [hal.Export("k", bindings=1)]))
    cb = dev.create_command_buffer()
    with cb:
        cb.dispatch(exe, "k", 1, (), (buf or dev.allocate(4),))
    return cb


def test_a_kernel_raising_systemexit_fails_its_submission_not_the_worker(host):
    def leave(ctx):
        raise SystemExit(3)
    sem = host.create_semaphore(0)
    host.queue_execute(_one_kernel_program(host, leave), signal=[(sem, 1)])
    with pytest.raises(hal.DeviceError, match="SystemExit"):
        host.synchronize()
    with pytest.raises(hal.DeviceError):
        sem.wait(1, timeout=5)
    buf = host.allocate(4)
    cb = host.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, np.uint8(9))
    host.queue_execute(cb)
    host.synchronize()
    assert buf.read().tolist() == [9, 9, 9, 9]


def test_a_kernel_waiting_on_its_own_queue_is_an_error_not_a_deadlock(host):
    other = host.allocate(4)

    def reads(ctx):
        other.read()
    host.queue_execute(_one_kernel_program(host, reads))
    with pytest.raises(hal.DeviceError, match="cannot wait for its own queue"):
        host.synchronize()


def test_buffer_access_reports_an_earlier_failure_once(host):
    def fails(ctx):
        raise ValueError("boom")
    b = host.allocate(4)
    host.queue_execute(_one_kernel_program(host, fails))
    with pytest.raises(hal.DeviceError, match="write: work queued before it failed: .*boom"):
        b.write(np.arange(4, dtype=np.uint8))
    b.write(np.arange(4, dtype=np.uint8))  # reported once: the next write goes through
    assert b.read().tolist() == [0, 1, 2, 3]
    host.synchronize()


def test_waiting_on_a_closed_device_raises_device_lost():
    dev = hal.create_device("host")
    sem = dev.create_semaphore(0)
    waiter_error = []

    def wait():
        try:
            sem.wait(1)
        except hal.HalError as e:
            waiter_error.append(e)
    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    dev.close()
    t.join(timeout=5)
    assert not t.is_alive()
    assert isinstance(waiter_error[0], hal.DeviceLostError)


def test_an_idle_worker_exits_so_a_dropped_device_is_collected(monkeypatch):
    monkeypatch.setattr(host_device, "IDLE_EXIT_S", 0.05)
    dev = hal.create_device("host")
    cb = dev.create_command_buffer()
    with cb:
        cb.fill_buffer(dev.allocate(4), np.uint8(1))
    dev.queue_execute(cb)
    dev.synchronize()
    worker = dev._worker
    alive = weakref.ref(dev)
    del dev, cb
    worker.join(timeout=5)
    gc.collect()
    assert not worker.is_alive()
    assert alive() is None


def test_the_worker_restarts_after_idling(host, monkeypatch):
    monkeypatch.setattr(host_device, "IDLE_EXIT_S", 0.01)
    buf = host.allocate(4)
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(buf, np.uint8(5))
    for _ in range(3):
        host.queue_execute(cb)
        host.synchronize()
        time.sleep(0.05)
    assert host._worker is None
    assert buf.read().tolist() == [5, 5, 5, 5]


def test_reading_while_the_queue_waits_for_a_host_signal_is_refused_not_a_hang(host):
    sem = host.create_semaphore(0)
    buf = host.allocate(4)
    cb = host.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, np.uint8(7))
    host.queue_execute(cb, wait=[(sem, 1)])
    for access in (buf.read, lambda: buf.write(b"\0\0\0\0"), host.synchronize):
        with pytest.raises(hal.ValidationError, match=r"no other thread can signal it.*sem.signal\(1\)"):
            access()
    sem.signal(1)
    assert buf.read().tolist() == [7, 7, 7, 7]


def test_reading_waits_when_another_thread_will_signal(host):
    sem = host.create_semaphore(0)
    buf = host.allocate(4)
    cb = host.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, np.uint8(3))
    host.queue_execute(cb, wait=[(sem, 1)])
    signaller = threading.Timer(0.1, sem.signal, args=(1,))
    signaller.start()
    assert buf.read().tolist() == [3, 3, 3, 3]
    signaller.join()
