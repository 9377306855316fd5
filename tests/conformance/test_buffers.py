"""Buffers on every backend: allocation, host reads and writes, ranges, release."""

from __future__ import annotations

import numpy as np
import pytest

import hal


def u32(values):
    return np.asarray(values, np.uint32)


def test_upload_and_read_round_trip(dev):
    data = np.arange(1000, dtype=np.uint32) * 0x01010101
    buf = dev.upload(data)
    assert buf.size == 4000 and buf.device is dev
    np.testing.assert_array_equal(buf.read(np.uint32), data)
    buf.release()


def test_large_round_trip(dev):
    data = np.random.default_rng(1).integers(0, 2**32, 1 << 20, dtype=np.uint32)
    with dev.upload(data) as buf:
        np.testing.assert_array_equal(buf.read(np.uint32), data)


def test_read_with_dtype_offset_count(dev):
    buf = dev.upload(np.arange(8, dtype=np.uint32))
    np.testing.assert_array_equal(buf.read(np.uint32, offset=8, count=3), u32([2, 3, 4]))
    np.testing.assert_array_equal(buf.read(np.uint16, offset=4, count=2), np.array([1, 0], np.uint16))
    np.testing.assert_array_equal(buf.read(np.uint32, offset=24), u32([6, 7]))
    assert buf.read(np.uint32, offset=32).size == 0
    assert buf.read(offset=5, count=1)[0] == 0 and buf.read(offset=4, count=1)[0] == 1


def test_unaligned_writes_keep_their_neighbours(dev):
    buf = dev.upload(np.full(16, 0xEE, np.uint8))
    buf.write(b"\x01\x02", offset=3)
    buf.write(u32([5]), offset=9)
    buf.write(bytearray(b"\x07"))
    expected = np.full(16, 0xEE, np.uint8)
    expected[[0, 3, 4, 9, 10, 11, 12]] = [7, 1, 2, 5, 0, 0, 0]
    np.testing.assert_array_equal(buf.read(), expected)


def test_read_returns_a_copy(dev):
    buf = dev.upload(u32([1, 2]))
    out = buf.read(np.uint32)
    out[:] = 9
    np.testing.assert_array_equal(buf.read(np.uint32), u32([1, 2]))


@pytest.mark.parametrize("kwargs", [{"offset": 33}, {"offset": 28, "count": 2}, {"count": 9}, {"offset": -4}])
def test_read_beyond_the_buffer_refused(dev, kwargs):
    buf = dev.allocate(32)
    with pytest.raises(hal.ValidationError, match=r"read: |offset must be >= 0"):
        buf.read(np.uint32, **kwargs)


def test_write_beyond_the_buffer_refused_and_changes_nothing(dev):
    buf = dev.upload(u32([1, 2]))
    with pytest.raises(hal.ValidationError, match=r"write: 8 bytes at offset 4 end at 12; the buffer has 8"):
        buf.write(u32([3, 4]), offset=4)
    with pytest.raises(hal.ValidationError, match=r"write: expected bytes-like data"):
        buf.write([1, 2])
    np.testing.assert_array_equal(buf.read(np.uint32), u32([1, 2]))


def test_release_is_idempotent_and_later_use_raises(dev):
    with dev.allocate(16) as buf:
        buf.write(b"\x01")
        assert not buf.released
    assert buf.released
    buf.release()
    with pytest.raises(hal.ValidationError, match=r"read: the buffer was released"):
        buf.read()
    with pytest.raises(hal.ValidationError, match=r"write: the buffer was released"):
        buf.write(b"\x00")


def test_many_small_buffers(dev):
    """Thousands of small buffers must not exhaust a driver's allocation count (pooling)."""
    bufs = [dev.allocate(256) for _ in range(3000)]
    bufs[1234].write(u32([42]))
    assert bufs[1234].read(np.uint32, count=1)[0] == 42
    for b in bufs:
        b.release()


def test_absurd_allocation_is_out_of_memory_and_the_device_survives(dev):
    with pytest.raises(hal.OutOfMemoryError):
        dev.allocate(1 << 50)
    with dev.upload(u32([3])) as buf:
        assert buf.read(np.uint32)[0] == 3


def test_usage_flags_are_kept(dev):
    with dev.allocate(64, usage=hal.BufferUsage.TRANSFER) as buf:
        assert buf.usage == hal.BufferUsage.TRANSFER
        buf.write(u32([9]))
        assert buf.read(np.uint32, count=1)[0] == 9
