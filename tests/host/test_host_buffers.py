"""Host buffers: allocation, upload, read, write, release and out-of-memory."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.kernels import u32


def test_allocate_is_zeroed(host):
    buf = host.allocate(32)
    assert buf.size == 32
    assert buf.usage == hal.BufferUsage.DEFAULT
    assert buf.device is host
    np.testing.assert_array_equal(buf.read(), np.zeros(32, np.uint8))


def test_allocate_keeps_usage(host):
    buf = host.allocate(8, usage=hal.BufferUsage.TRANSFER_SOURCE)
    assert buf.usage == hal.BufferUsage.TRANSFER_SOURCE


@pytest.mark.parametrize("nbytes, usage", [(-1, hal.BufferUsage.DEFAULT), (1.5, hal.BufferUsage.DEFAULT),
                                           (8, 0), (8, 8)])
def test_allocate_bad_arguments(host, nbytes, usage):
    with pytest.raises(hal.ValidationError, match=r"allocate: "):
        host.allocate(nbytes, usage=usage)


def test_upload_round_trip(host):
    data = np.arange(10, dtype=np.uint32) * 0x01010101
    buf = host.upload(data)
    assert buf.size == 40
    np.testing.assert_array_equal(buf.read(np.uint32), data)


def test_upload_non_contiguous_array(host):
    data = np.arange(20, dtype=np.uint32)[::2]
    np.testing.assert_array_equal(host.upload(data).read(np.uint32), data)


def test_read_with_dtype_offset_count(host):
    buf = host.upload(np.arange(8, dtype=np.uint32))
    np.testing.assert_array_equal(buf.read(np.uint32, offset=8, count=3), u32([2, 3, 4]))
    np.testing.assert_array_equal(buf.read(np.uint16, offset=4, count=2), np.array([1, 0], np.uint16))
    np.testing.assert_array_equal(buf.read(np.uint32, offset=24), u32([6, 7]))
    assert buf.read(np.uint32, offset=32).size == 0
    assert buf.read(offset=5, count=1)[0] == 0 and buf.read(offset=4, count=1)[0] == 1


@pytest.mark.parametrize("kwargs", [{"offset": 33}, {"offset": 28, "count": 2}, {"count": 9}, {"offset": -4}])
def test_read_beyond_the_buffer_refused(host, kwargs):
    buf = host.allocate(32)
    with pytest.raises(hal.ValidationError, match=r"read: |offset must be >= 0"):
        buf.read(np.uint32, **kwargs)


def test_read_returns_a_copy(host):
    buf = host.upload(u32([1, 2]))
    out = buf.read(np.uint32)
    out[:] = 9
    np.testing.assert_array_equal(buf.read(np.uint32), u32([1, 2]))


def test_write_bytes_and_ndarray(host):
    buf = host.allocate(16)
    buf.write(b"\x01\x02", offset=3)
    buf.write(u32([5, 6]), offset=8)
    buf.write(bytearray(b"\x07"))
    np.testing.assert_array_equal(buf.read(), np.array([7, 0, 0, 1, 2, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0], np.uint8))


def test_write_beyond_the_buffer_refused(host):
    buf = host.allocate(8)
    with pytest.raises(hal.ValidationError, match=r"write: 8 bytes at offset 4 end at 12; the buffer has 8"):
        buf.write(u32([1, 2]), offset=4)
    with pytest.raises(hal.ValidationError, match=r"write: expected bytes-like data"):
        buf.write([1, 2])
    assert not buf.read().any()


def test_release_and_context_manager(host):
    with host.allocate(16) as buf:
        buf.write(b"\x01")
        assert not buf.released
    assert buf.released
    buf.release()  # idempotent
    assert buf.released


def test_reading_or_writing_a_released_buffer_raises(host):
    buf = host.upload(u32([1, 2]))
    buf.release()
    with pytest.raises(hal.ValidationError, match=r"read: the buffer was released"):
        buf.read()
    with pytest.raises(hal.ValidationError, match=r"write: the buffer was released"):
        buf.write(b"\x00")


def test_absurd_allocation_is_out_of_memory(host):
    with pytest.raises(hal.OutOfMemoryError, match=r"host: cannot allocate"):
        host.allocate(1 << 62)
    assert issubclass(hal.OutOfMemoryError, hal.DeviceError)
    host.allocate(16)  # the device is still fine
