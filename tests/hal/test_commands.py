import math
import struct

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import hal
from hal.commands import Copy, Dispatch, Fill, Update, constant_word, pack_constants


@pytest.mark.parametrize("value, word", [
    (0, 0), (1, 1), (-1, 0xFFFFFFFF), (2**31 - 1, 0x7FFFFFFF), (-(2**31), 0x80000000), (2**32 - 1, 0xFFFFFFFF),
    (1.0, 0x3F800000), (-2.5, struct.unpack("<I", struct.pack("<f", -2.5))[0]),
    (np.float32(1.0), 0x3F800000), (np.int32(-1), 0xFFFFFFFF), (np.uint32(7), 7),
])
def test_constant_words(value, word):
    assert constant_word(value) == word


@pytest.mark.parametrize("value, error", [
    (2**32, OverflowError), (-(2**31) - 1, OverflowError), (np.float64(1.0), TypeError), (np.int64(1), TypeError),
    (np.int16(1), TypeError), ("1", TypeError), (None, TypeError), (1e40, OverflowError),
])
def test_values_that_are_not_32_bit_constants(value, error):
    with pytest.raises(error):
        constant_word(value)


@given(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
       | st.sampled_from([3.4028235e38, 3.4028235677973366e38, 3.402823669209385e38, -3.4028236e38, 1e-46, 2.0**-149,
                          2.0**-150, 2.0**-150 * 1.0000001, 1.0 + 2.0**-24, 1.0 + 3 * 2.0**-24]))
@example(-math.nan)
@example(struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0])  # a signaling NaN
@example(struct.unpack("<d", struct.pack("<Q", 0xFFF8000020000000))[0])  # a negative NaN with a payload
def test_float_constants_are_the_float32_struct_packs(value):
    """A Python float becomes the float32 bits struct.pack("<f") gives (rounded to nearest, ties to even), or the
    same OverflowError where it does; a NaN becomes what a C cast makes of it (sign and payload's top kept, quiet),
    as numpy's cast does (struct's answer for a signaling NaN changed in Python 3.14)."""
    if math.isnan(value):
        with np.errstate(invalid="ignore"):
            expected = int(np.array([value], np.float64).astype(np.float32).view(np.uint32)[0])
        assert constant_word(value) == expected
        return
    try:
        expected = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:
        with pytest.raises(OverflowError):
            constant_word(value)
        return
    assert constant_word(value) == expected


@given(st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.int32, np.uint32]))
@example(0x7F800001, np.float32)  # signaling NaNs
@example(0xFF800001, np.float32)
@example(0x7FBFFFFF, np.float32)
@example(0xFFFFFFFF, np.float32)  # a quiet NaN, every bit set
def test_32_bit_numpy_constants_keep_their_bits(bits, dtype):
    """A 32-bit numpy scalar's word is its four bytes as they are: a NaN's payload, a signaling NaN's too."""
    value = np.array([bits], np.uint32).view(dtype)[0]
    assert type(value) is dtype
    assert constant_word(value) == bits


def test_pack_constants_is_little_endian_words():
    assert pack_constants((1, -1, 1.0)) == bytes.fromhex("01000000" "ffffffff" "0000803f")
    assert pack_constants(()) == b""


def test_records_land_in_a_linked_list_of_segments(host):
    a, b = host.allocate(64), host.allocate(64)
    exe = host.load_executable(hal.ExecutableSource.python(
        {"k": lambda ctx: None}, [hal.Export("k", bindings=2, constants=1, readonly=(0,))]))
    cb = host.create_command_buffer()
    with cb:
        cb.execution_barrier()  # a barrier before any command opens no segment
        cb.fill_buffer(a, b"\x01")
        cb.update_buffer(hal.ref(b, 8, 8), np.arange(2, dtype=np.uint32))
        cb.execution_barrier()
        cb.execution_barrier()
        cb.copy_buffer(hal.ref(a, 0, 16), hal.ref(b, 32, 16))
        cb.execution_barrier()
        cb.dispatch(exe, "k", 1, (np.float32(0.5),), (a, b))
    segments = list(cb.segments())
    assert [s.index for s in segments] == [1, 3, 4]
    assert [[type(c) for c in s.commands] for s in segments] == [[Fill, Update], [Copy], [Dispatch]]
    assert segments[0].next is segments[1] and segments[-1].next is None
    assert [c.index for c in cb.commands] == [0, 1, 2, 3]
    update, copy, dispatch = cb.commands[1:]
    assert (update.target.offset, update.target.length, update.data) == (8, 8, np.arange(2, dtype=np.uint32).tobytes())
    assert (copy.source.length, copy.target.offset, copy.target.length) == (16, 32, 16)
    assert [(r.buffer, w) for r, w in dispatch.accesses()] == [(a, False), (b, True)]
    assert dispatch.constants == (np.float32(0.5),)


def test_update_data_is_copied_at_record_time(host):
    buf = host.allocate(16)
    data = np.arange(4, dtype=np.uint32)
    cb = host.create_command_buffer()
    with cb:
        cb.update_buffer(buf, data)
    data[:] = 99
    host.queue_execute(cb)
    assert buf.read(np.uint32).tolist() == [0, 1, 2, 3]
