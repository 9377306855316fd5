"""Host transfer commands, binding tables and reusable command buffers."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.kernels import groups, u32


# Transfer commands.
@pytest.mark.parametrize("pattern, expected", [
    (b"\xab", [0xABABABAB] * 4),
    (np.uint16(0x1234), [0x12341234] * 4),
    (np.uint32(0xDEADBEEF), [0xDEADBEEF] * 4),
    (np.float32(1.0), [0x3F800000] * 4),
])
def test_fill_patterns(host, pattern, expected):
    buf = host.allocate(16)
    cb = host.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, pattern)
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), u32(expected))


def test_update_data_is_copied_at_record_time(host):
    buf = host.allocate(16)
    data = u32([1, 2, 3, 4])
    cb = host.create_command_buffer()
    with cb:
        cb.update_buffer(hal.ref(buf, 4), data[:3])
    data[:] = 99
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), u32([0, 1, 2, 3]))


def test_copy_ranges(host):
    src, dst = host.upload(u32(range(8))), host.allocate(32)
    cb = host.create_command_buffer()
    with cb:
        cb.copy_buffer(hal.ref(src, 8, 12), hal.ref(dst, 16))
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(dst.read(np.uint32), u32([0, 0, 0, 0, 2, 3, 4, 0]))


# Binding tables and reuse.
def test_one_recording_against_two_binding_tables(host):
    exe = host.load_executable(kernels.SOURCE)
    n = 16
    cb = host.create_command_buffer(mode="reusable", binding_capacity=3)
    with cb:
        cb.dispatch(exe, "add", groups(n), constants=(n,), bindings=(hal.slot(0), hal.slot(1), hal.slot(2)))
    a, b, out1 = host.upload(u32(range(n))), host.upload(u32([100] * n)), host.allocate(4 * n)
    c, d, out2 = host.upload(u32(range(0, 2 * n, 2))), host.upload(u32([7] * n)), host.allocate(4 * n)
    host.queue_execute(cb, binding_table=(a, b, out1))
    host.queue_execute(cb, binding_table=[c, d, out2])
    host.synchronize()
    np.testing.assert_array_equal(out1.read(np.uint32), u32(range(n)) + 100)
    np.testing.assert_array_equal(out2.read(np.uint32), u32(range(0, 2 * n, 2)) + 7)
    a.write(u32([1] * n))  # same table again sees the new contents
    host.queue_execute(cb, binding_table=(a, b, out1))
    host.synchronize()
    np.testing.assert_array_equal(out1.read(np.uint32), u32([101] * n))


def test_slot_with_offset_and_length(host):
    cb = host.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.copy_buffer(hal.slot(0, 4, 8), hal.slot(1, 8))
    src, dst = host.upload(u32(range(4))), host.allocate(16)
    host.queue_execute(cb, binding_table=(src, dst))
    host.synchronize()
    np.testing.assert_array_equal(dst.read(np.uint32), u32([0, 0, 1, 2]))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_reusable_resubmitted_accumulates(host, strategy):
    exe = host.load_executable(kernels.SOURCE)
    x = host.upload(u32([1, 2, 3, 0xFFFFFFFF]))
    cb = host.create_command_buffer(mode="reusable", strategy=strategy)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(4, 3), bindings=(x,))
    for _ in range(5):
        host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 0xFFFFFFFF]) * np.uint32(243))
