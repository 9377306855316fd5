"""fill_buffer, update_buffer and copy_buffer: argument types, sizes, alignment and fit."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.hal.validation_helpers import finish_and_check, recording
from tests.kernels import u32


# Wrong types.
def test_fill_target_not_a_buffer(host):
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target must be a hal\.Buffer .*got ndarray"):
        cb.fill_buffer(np.zeros(16, np.uint8), b"\x01")
    finish_and_check(host, cb)


def test_fill_pattern_str_refused(host):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(fill_buffer\): pattern must be bytes .*got str"):
        cb.fill_buffer(buf, "ab")
    finish_and_check(host, cb, untouched=[buf])


def test_fill_pattern_python_int_refused(host):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(fill_buffer\): pattern must be bytes .*got int"):
        cb.fill_buffer(buf, 7)
    finish_and_check(host, cb, untouched=[buf])


@pytest.mark.parametrize("pattern, size", [(b"", 0), (b"abc", 3), (b"abcdefgh", 8), (np.uint64(1), 8)])
def test_fill_pattern_length_not_1_2_or_4(host, pattern, size):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(fill_buffer\): pattern has {size} bytes; "
                             r"it must have 1, 2 or 4"):
        cb.fill_buffer(buf, pattern)
    finish_and_check(host, cb, untouched=[buf])


def test_update_data_list_refused(host):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(update_buffer\): data: expected bytes-like data .*got list"):
        cb.update_buffer(buf, [1, 2, 3, 4])
    finish_and_check(host, cb, untouched=[buf])


# Fill alignment.
def test_fill_two_byte_pattern_at_odd_offset(host):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target offset 1 and length 4 must be multiples of 2"):
        cb.fill_buffer(hal.ref(buf, 1, 4), np.uint16(0xABCD))
    finish_and_check(host, cb, untouched=[buf])


def test_fill_two_byte_pattern_odd_length(host):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target offset 2 and length 3 must be multiples of 2"):
        cb.fill_buffer(hal.ref(buf, 2, 3), b"\x01\x02")
    finish_and_check(host, cb, untouched=[buf])


def test_fill_four_byte_pattern_unaligned(host):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target offset 4 and length 6 must be multiples of 4"):
        cb.fill_buffer(hal.ref(buf, 4, 6), np.uint32(1))
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target offset 2 and length 4 must be multiples of 4"):
        cb.fill_buffer(hal.ref(buf, 2, 4), np.float32(1.0))
    finish_and_check(host, cb, untouched=[buf])


def test_fill_buffer_alignment_override(make_device, host):
    dev = make_device(fill_buffer_alignment=4)
    assert dev.capabilities.fill_buffer_alignment == 4
    buf = dev.allocate(16)
    cb = recording(dev)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target offset 2 and length 4 must be multiples of 4 "
                             r"\(the 1-byte pattern and the device's fill_buffer_alignment 4\)"):
        cb.fill_buffer(hal.ref(buf, 2, 4), b"\x01")
    finish_and_check(dev, cb, untouched=[buf])
    # The same command is fine on a device without the override.
    other = recording(host)
    other.fill_buffer(hal.ref(host.allocate(16), 2, 4), b"\x01")


# update_buffer.
def test_update_over_64_kib(host):
    buf = host.allocate(70000)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(update_buffer\): data has 65540 bytes; it must hold 1 to 65536"):
        cb.update_buffer(buf, np.zeros(65540, np.uint8))
    cb.update_buffer(buf, np.full(65536, 9, np.uint8))  # exactly 64 KiB is fine
    finish_and_check(host, cb)
    data = buf.read()
    assert (data[:65536] == 9).all() and not data[65536:].any()


def test_update_empty(host):
    buf = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(update_buffer\): data has 0 bytes"):
        cb.update_buffer(buf, b"")
    finish_and_check(host, cb, untouched=[buf])


def test_update_not_fitting(host):
    buf = host.allocate(64)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(update_buffer\): 32 bytes of data do not fit the target range of "
                             r"16 bytes at offset 48"):
        cb.update_buffer(hal.ref(buf, 48), np.zeros(8, np.uint32) + 1)
    finish_and_check(host, cb, untouched=[buf])


@pytest.mark.parametrize("offset, size", [(2, 4), (0, 6)])
def test_update_alignment_override(make_device, offset, size):
    dev = make_device(update_buffer_alignment=4)
    buf = dev.allocate(16)
    cb = recording(dev)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(update_buffer\): target offset {offset} and data size {size} must be "
                             r"multiples of the device's update_buffer_alignment 4"):
        cb.update_buffer(hal.ref(buf, offset), b"\x01" * size)
    finish_and_check(dev, cb, untouched=[buf])


# copy_buffer.
def test_copy_overlapping_within_one_buffer(host):
    buf = host.upload(u32(range(16)))
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): source \[0, 32\) and target \[16, 48\) "
                             r"overlap in one buffer"):
        cb.copy_buffer(hal.ref(buf, 0, 32), hal.ref(buf, 16, 32))
    cb.copy_buffer(hal.ref(buf, 0, 16), hal.ref(buf, 32, 16))  # disjoint ranges of one buffer are fine
    finish_and_check(host, cb)
    np.testing.assert_array_equal(buf.read(np.uint32), u32([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15]))


def test_copy_overlapping_within_one_slot(host):
    cb = recording(host, binding_capacity=1)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): source \[0, 32\) and target \[16, 48\) "
                             r"overlap in one buffer"):
        cb.copy_buffer(hal.slot(0, 0, 32), hal.slot(0, 16, 32))
    finish_and_check(host, cb, table=(host.allocate(64),))


def test_copy_not_fitting_target(host):
    src, dst = host.upload(u32(range(16))), host.allocate(32)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): 64 source bytes do not fit the target range of 32 bytes "
                             r"at offset 0"):
        cb.copy_buffer(src, dst)
    finish_and_check(host, cb, untouched=[dst])


def test_copy_between_two_lengthless_slots(host):
    cb = recording(host, binding_capacity=2)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): both ranges are slots of unknown length"):
        cb.copy_buffer(hal.slot(0), hal.slot(1))
    finish_and_check(host, cb, table=(host.allocate(16), host.allocate(16)))


def test_copy_alignment_override(make_device):
    dev = make_device(copy_buffer_alignment=4)
    src, dst = dev.allocate(16), dev.allocate(16)
    cb = recording(dev)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): offsets 2, 0 and length 4 must be multiples of the "
                             r"device's copy_buffer_alignment 4"):
        cb.copy_buffer(hal.ref(src, 2, 4), hal.ref(dst, 0, 4))
    finish_and_check(dev, cb, untouched=[dst])
