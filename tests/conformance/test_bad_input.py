"""Bad input on every backend gets a named hal error, and the device goes on working."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import open_device


def test_buffer_of_another_device_refused(dev, exe):
    other = open_device("host")
    try:
        foreign = other.allocate(64)
        cb = dev.create_command_buffer()
        cb.begin()
        with pytest.raises(hal.ValidationError, match=r"buffer of another device"):
            cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (foreign,))
        with pytest.raises(hal.ValidationError, match=r"buffer of another device"):
            cb.fill_buffer(foreign, np.uint32(1))
        cb.end()
    finally:
        other.close()


def test_executable_of_another_device_refused(dev):
    other = open_device("host")
    try:
        foreign = other.load_executable(kernels.SOURCE)
        x = dev.allocate(16)
        cb = dev.create_command_buffer()
        cb.begin()
        with pytest.raises(hal.ValidationError, match=r"executable must be a hal.Executable loaded on this device"):
            cb.dispatch(foreign, "scale", (1, 1, 1), (4, 3), (x,))
        cb.end()
    finally:
        other.close()


def test_wrong_counts_refused_and_the_buffer_stays_usable(dev, exe):
    x = dev.upload(np.ones(4, np.uint32))
    cb = dev.create_command_buffer()
    cb.begin()
    with pytest.raises(hal.ValidationError, match=r"1 constants given, the export takes 2"):
        cb.dispatch(exe, "scale", (1, 1, 1), (4,), (x,))
    with pytest.raises(hal.ValidationError, match=r"2 bindings given, the export takes 1"):
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (x, x))
    with pytest.raises(hal.ValidationError, match=r"no export 'nope'"):
        cb.dispatch(exe, "nope", (1, 1, 1), (), ())
    with pytest.raises(hal.ValidationError, match=r"workgroups\[0\] = 0"):
        cb.dispatch(exe, "scale", (0, 1, 1), (4, 3), (x,))
    with pytest.raises(hal.ValidationError, match=r"outside the buffer's 16 bytes"):
        cb.fill_buffer(hal.ref(x, 8, 16), np.uint32(0))
    cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (x,))
    cb.end()
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), np.full(4, 3, np.uint32))


def test_race_inside_a_segment_refused(dev, exe):
    x = dev.allocate(64)
    cb = dev.create_command_buffer()
    cb.begin()
    cb.fill_buffer(x, np.uint32(1))
    with pytest.raises(hal.ValidationError, match=r"race: command 1 \(dispatch\) writes .* command 0 \(fill\)"):
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (x,))
    cb.execution_barrier()
    cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (x,))
    cb.end()
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32)[:5], [3, 3, 3, 3, 1])


def test_a_source_the_device_cannot_run_is_unsupported(dev):
    export = hal.Export("f", bindings=0)
    only_host = hal.ExecutableSource.multi(host=hal.ExecutableSource.python({"f": lambda ctx: None}, [export]))
    if dev.driver == "host":
        only_gpu = hal.ExecutableSource.glsl("#version 450\nvoid main() {}", [export])
        with pytest.raises(hal.UnsupportedError):
            dev.load_executable(only_gpu)
    else:
        with pytest.raises(hal.UnsupportedError, match=r"no part for the"):
            dev.load_executable(only_host)


def test_closed_device_refuses_work(dev):
    fresh = hal.create_device(dev.driver)
    buf = fresh.allocate(16)
    fresh.close()
    fresh.close()
    with pytest.raises(hal.ValidationError, match=r"is closed"):
        fresh.allocate(16)
    with pytest.raises(hal.ValidationError, match=r"is closed"):
        buf.read()
    with pytest.raises(hal.ValidationError, match=r"is closed"):
        fresh.create_command_buffer()
