"""Buffers a command may not use: another device's, released ones (at record, end and submit), missing usage."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.hal.validation_helpers import finish_and_check, recording
from tests.kernels import u32


# Another device's buffers; released buffers and executables.
def test_buffer_of_another_device(host, make_device):
    foreign = make_device().allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target is a buffer of another device"):
        cb.fill_buffer(foreign, b"\x01")
    finish_and_check(host, cb, untouched=[foreign])


def test_released_buffer_at_record(host, exe):
    a, b, out = host.allocate(16), host.allocate(16), host.allocate(16)
    b.release()
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(fill_buffer\): target is a released buffer"):
        cb.fill_buffer(b, b"\x01")
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch\): bindings\[1\] is a released buffer"):
        cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, b, out))
    finish_and_check(host, cb, untouched=[out])


def test_checked_ref_reused_after_its_buffer_is_released(host):
    """A reference validated once must still be refused once its buffer is released."""
    buf = host.allocate(16)
    r = hal.ref(buf, 0, 16)
    first = recording(host)
    first.fill_buffer(r, b"\x01")
    first.end()
    buf.release()
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(fill_buffer\): target is a released buffer"):
        cb.fill_buffer(r, b"\x02")
    finish_and_check(host, cb)


def test_checked_binding_checked_again_after_a_release(host, exe):
    """A binding that passed its checks is trusted without them only until a buffer of its device is
    released: then the released one is refused, and the others pass again."""
    a, b = host.upload(u32(range(4))), host.upload(u32([10] * 4))
    keep, gone = host.allocate(16), host.allocate(16)
    kept, lost = hal.ref(keep, 0, 16), hal.ref(gone, 0, 16)
    first = recording(host)
    first.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, b, kept))
    first.execution_barrier()
    first.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, b, lost))
    first.execution_barrier()
    first.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, gone, keep))
    first.end()
    gone.release()
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch\): bindings\[2\] is a released buffer"):
        cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, b, lost))
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch\): bindings\[1\] is a released buffer"):
        cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, gone, keep))
    cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, b, kept))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(keep.read(np.uint32), u32([10, 11, 12, 13]))


def test_binding_checked_on_another_device_refused(host, make_device):
    other = make_device()
    x = other.upload(u32(range(4)))
    elsewhere = recording(other)
    elsewhere.dispatch(other.load_executable(kernels.SOURCE), "scale", (1, 1, 1), constants=(4, 3), bindings=(x,))
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch\): bindings\[0\] is a buffer of another device"):
        cb.dispatch(host.load_executable(kernels.SOURCE), "scale", (1, 1, 1), constants=(4, 3), bindings=(x,))
    finish_and_check(host, cb)


def test_buffer_released_after_recording_refused_at_queue_execute(host):
    keep, doomed = host.allocate(16), host.allocate(16)
    cb = host.create_command_buffer()
    with cb:
        cb.fill_buffer(keep, np.uint32(1))
        cb.fill_buffer(doomed, np.uint32(2))
    doomed.release()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 1 uses a buffer that was released after recording"):
        host.queue_execute(cb)
    host.synchronize()
    assert not keep.read().any()  # nothing of the refused submission ran
    cb.reset()
    cb.begin()
    cb.fill_buffer(keep, np.uint32(3))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(keep.read(np.uint32), np.full(4, 3, np.uint32))


def test_buffer_or_executable_released_before_end_refused_at_end(host):
    """end() would hand the backend a released buffer or executable to encode: refused, still recording."""
    keep, doomed = host.allocate(16), host.allocate(16)
    cb = host.create_command_buffer()
    cb.begin()
    cb.fill_buffer(doomed, np.uint32(2))
    doomed.release()
    with pytest.raises(hal.ValidationError, match=r"end: command 0 uses a buffer that was released after recording"):
        cb.end()
    assert cb.state == "recording"
    exe = host.load_executable(kernels.SOURCE)
    other = host.create_command_buffer()
    other.begin()
    other.dispatch(exe, "scale", (1, 1, 1), (4, 3), (keep,))
    exe.release()
    with pytest.raises(hal.ValidationError, match=r"end: command 0 dispatches an executable that was released"):
        other.end()


def test_buffer_released_after_a_reusable_submission(host):
    buf = host.allocate(16)
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(buf, np.uint32(1))
    host.queue_execute(cb)
    host.synchronize()
    buf.release()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 uses a buffer that was released after recording"):
        host.queue_execute(cb)


def test_a_release_elsewhere_checks_the_recording_once(host):
    """Any release on the device makes the next submit check the recording's buffers and executables: an
    unrelated release lets it run, and a later release of a buffer it uses is still refused."""
    used, unrelated = host.allocate(16), host.allocate(16)
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(used, np.uint32(5))
    unrelated.release()
    host.queue_execute(cb)
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(used.read(np.uint32), np.full(4, 5, np.uint32))
    used.release()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 uses a buffer that was released after recording"):
        host.queue_execute(cb)


# Usage flags.
def test_fill_target_lacking_transfer_target_usage(host):
    buf = host.allocate(16, usage=hal.BufferUsage.TRANSFER_SOURCE)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target lacks BufferUsage\.TRANSFER_TARGET"):
        cb.fill_buffer(buf, b"\x01")
    finish_and_check(host, cb, untouched=[buf])


def test_copy_source_lacking_transfer_source_usage(host):
    src = host.allocate(16, usage=hal.BufferUsage.TRANSFER_TARGET | hal.BufferUsage.DISPATCH_STORAGE)
    dst = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): source lacks BufferUsage\.TRANSFER_SOURCE"):
        cb.copy_buffer(src, dst)
    finish_and_check(host, cb, untouched=[dst])


def test_dispatch_binding_lacking_storage_usage(host, exe):
    x = host.upload(u32(range(4)), usage=hal.BufferUsage.TRANSFER)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch\): bindings\[0\] lacks BufferUsage\.DISPATCH_STORAGE"):
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(4, 3), bindings=(x,))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32(range(4)))


def test_binding_table_entry_lacking_usage_at_submit(host):
    read_only = host.allocate(16, usage=hal.BufferUsage.TRANSFER_SOURCE)
    cb = recording(host, binding_capacity=1)
    cb.fill_buffer(hal.slot(0), np.uint32(4))
    cb.end()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 \(fill\): slot 0 \(binding_table\[0\]\) lacks "
                             r"BufferUsage\.TRANSFER_TARGET"):
        host.queue_execute(cb, binding_table=(read_only,))
    good = host.allocate(16)
    host.queue_execute(cb, binding_table=(good,))
    host.synchronize()
    np.testing.assert_array_equal(good.read(np.uint32), np.full(4, 4, np.uint32))
    assert not read_only.read().any()
