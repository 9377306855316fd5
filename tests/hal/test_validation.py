"""Record-time and submit-time validation.

Every rejection is a hal.ValidationError whose message names the command index and the argument or
limit, and a rejected command leaves the command buffer as it was: the tests record a valid command
afterwards, end, submit and check the bytes (see `finish_and_check`).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import hal
from tests import kernels

MARK = 0xC0FFEE11


# Helpers.
@pytest.fixture
def make_device():
    """Host devices with capability overrides; closed at teardown."""
    made = []

    def make(**capabilities):
        dev = hal.create_device("host", capabilities=capabilities or None)
        made.append(dev)
        return dev

    yield make
    for dev in made:
        dev.close()


@pytest.fixture
def exe(host):
    return host.load_executable(kernels.SOURCE)


def recording(dev, **kwargs):
    cb = dev.create_command_buffer(**kwargs)
    cb.begin()
    return cb


def u32(values):
    return np.asarray(values, np.uint32)


def probe(dev, seen, constants=2, bindings=0):
    """An executable whose kernel appends the constants it sees to `seen`."""
    def kernel(ctx):
        seen.append(tuple(ctx.constants))
    source = hal.ExecutableSource.python({"probe": kernel},
                                         [hal.Export("probe", bindings=bindings, constants=constants)])
    return dev.load_executable(source)


def finish_and_check(dev, cb, table=(), untouched=()):
    """After a rejection: record a valid fill, end, submit and check its bytes. The rejected command must
    not have taken a command index, and the buffers in `untouched` must still be all zeros."""
    out = dev.allocate(16)
    cb.fill_buffer(out, np.uint32(MARK))
    cb.end()
    assert [c.index for c in cb.commands] == list(range(len(cb.commands)))
    dev.queue_execute(cb, binding_table=table)
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32), np.full(4, MARK, np.uint32))
    for b in untouched:
        assert not b.read().any(), f"a rejected command wrote {b!r}"


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


def test_dispatch_str_constant_refused(host, exe):
    x = host.upload(u32(range(4)))
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch scale\): constants\[1\] = '3'"):
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(4, "3"), bindings=(x,))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32(range(4)))


def test_dispatch_constants_given_as_a_string_refused(host, exe):
    x = host.upload(u32(range(4)))
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch scale\): constants must be a sequence, got str"):
        cb.dispatch(exe, "scale", (1, 1, 1), constants="ab", bindings=(x,))
    finish_and_check(host, cb)


@pytest.mark.parametrize("wrong", [np.zeros(16, np.uint8), 0, None, b"\x00" * 16],
                         ids=["ndarray", "int", "None", "bytes"])
def test_dispatch_bindings_of_wrong_things_refused(host, exe, wrong):
    out = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(dispatch\): bindings\[0\] must be a hal\.Buffer "
                             rf".*got {type(wrong).__name__}"):
        cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=[wrong, wrong, out])
    finish_and_check(host, cb, untouched=[out])


# Ranges through hal.ref: a negative offset or length is refused by ref() (see below); a range past the
# end is accepted by ref() and refused when a command uses it.
@pytest.mark.parametrize("offset, length, shown", [(0, 128, r"\[0, 128\)"), (60, 8, r"\[60, 68\)")])
def test_fill_ref_out_of_range(host, offset, length, shown):
    buf = host.allocate(64)
    r = hal.ref(buf, offset, length)  # not checked yet
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(fill_buffer\): target range {shown} is empty or outside "
                             r"the buffer's 64 bytes"):
        cb.fill_buffer(r, b"\x01")
    finish_and_check(host, cb, untouched=[buf])


def test_copy_source_ref_out_of_range_names_source(host):
    src, dst = host.allocate(32), host.allocate(64)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): source range \[16, 48\) is empty or outside "
                             r"the buffer's 32 bytes"):
        cb.copy_buffer(hal.ref(src, 16, 32), dst)
    finish_and_check(host, cb, untouched=[dst])


def test_dispatch_binding_ref_out_of_range_names_binding(host, exe):
    a, b, out = host.allocate(16), host.allocate(16), host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch\): bindings\[1\] range \[8, 24\) is empty or outside "
                             r"the buffer's 16 bytes"):
        cb.dispatch(exe, "add", (1, 1, 1), constants=(2,), bindings=(a, hal.ref(b, 8, 16), out))
    finish_and_check(host, cb, untouched=[out])


def test_zero_length_ref_refused(host):
    buf = host.allocate(64)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(fill_buffer\): target range \[16, 16\) is empty"):
        cb.fill_buffer(hal.ref(buf, 16, 0), b"\x01")
    finish_and_check(host, cb, untouched=[buf])


def test_zero_length_slot_refused(host):
    buf = host.allocate(64)
    cb = recording(host, binding_capacity=1)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target has offset 0 and length 0"):
        cb.fill_buffer(hal.slot(0, 0, 0), b"\x01")
    finish_and_check(host, cb, table=(buf,), untouched=[buf])


@pytest.mark.parametrize("make, message", [
    (lambda buf: hal.slot(0, -4, 8), "slot offset must be >= 0, got -4"),
    (lambda buf: hal.slot(0, 0, -8), "slot length must be >= 0, got -8"),
    (lambda buf: hal.slot(-1), "slot index must be >= 0, got -1"),
    (lambda buf: hal.ref(buf, -4, 8), "ref offset must be >= 0, got -4"),
    (lambda buf: hal.ref(buf, 0, -8), "ref length must be >= 0, got -8"),
    (lambda buf: hal.ref(buf, 65), "ref offset 65 is past the end of the 64-byte buffer"),
])
def test_negative_offsets_and_lengths_refused_where_the_reference_is_made(host, make, message):
    buf = host.allocate(64)
    with pytest.raises(hal.ValidationError, match=re.escape(message)):
        make(buf)


def test_a_reference_built_by_hand_is_checked_as_ref_and_slot_check():
    """BufferRef is public: building one directly refuses what hal.ref() and hal.slot() refuse."""
    with pytest.raises(hal.ValidationError, match="reference offset must be >= 0, got -4"):
        hal.BufferRef(None, 0, -4, 8)
    with pytest.raises(hal.ValidationError, match="reference length must be >= 0, got -8"):
        hal.BufferRef(None, 0, 0, -8)
    with pytest.raises(hal.ValidationError, match="slot index must be >= 0, got -2"):
        hal.BufferRef(None, -2, 0, 8)


def test_zero_size_buffer_as_target_refused(host):
    empty = host.allocate(0)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(fill_buffer\): target range \[0, 0\) is empty"):
        cb.fill_buffer(empty, b"\x01")
    finish_and_check(host, cb)


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


# Dispatch: constants.
@pytest.mark.parametrize("constants", [(4,), (4, 2, 1)])
def test_dispatch_wrong_constant_count(host, exe, constants):
    x = host.upload(u32(range(4)))
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(dispatch scale\): {len(constants)} constants given, the export takes 2"):
        cb.dispatch(exe, "scale", (1, 1, 1), constants=constants, bindings=(x,))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32(range(4)))


@pytest.mark.parametrize("value", [1 << 32, -(1 << 31) - 1, 1 << 70])
def test_dispatch_constant_out_of_32_bit_range(host, value):
    seen = []
    exe = probe(host, seen)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(dispatch probe\): constants\[1\] = {value}: .*does not fit in 32 bits"):
        cb.dispatch(exe, "probe", (1, 1, 1), constants=(0, value))
    finish_and_check(host, cb)
    assert seen == []


def test_dispatch_constant_range_bounds_accepted(host):
    seen = []
    exe = probe(host, seen)
    cb = recording(host)
    cb.dispatch(exe, "probe", (1, 1, 1), constants=((1 << 32) - 1, -(1 << 31)))
    finish_and_check(host, cb)
    assert seen == [((1 << 32) - 1, -(1 << 31))]


@pytest.mark.parametrize("value", [np.float64(1.5), np.int64(1), np.uint16(1), np.bool_(True)],
                         ids=["float64", "int64", "uint16", "bool_"])
def test_dispatch_non_32_bit_numpy_constant_refused(host, value):
    seen = []
    exe = probe(host, seen)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(dispatch probe\): constants\[0\] = .*numpy {value.dtype} is not a 32-bit"):
        cb.dispatch(exe, "probe", (1, 1, 1), constants=(value, 0))
    finish_and_check(host, cb)
    assert seen == []


def test_dispatch_32_bit_numpy_constants_accepted(host):
    seen = []
    exe = probe(host, seen, constants=3)
    cb = recording(host)
    cb.dispatch(exe, "probe", (1, 1, 1), constants=(np.float32(1.5), np.int32(-7), np.uint32(0xFFFFFFFF)))
    finish_and_check(host, cb)
    assert seen == [(np.float32(1.5), np.int32(-7), np.uint32(0xFFFFFFFF))]


def test_dispatch_constant_bytes_beyond_max_push_constants_size(make_device):
    dev = make_device(max_push_constants_size=4)
    x = dev.upload(u32(range(4)))
    exe = dev.load_executable(kernels.SOURCE)
    cb = recording(dev)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch scale\): 8 bytes of constants exceed the device's "
                             r"max_push_constants_size 4"):
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(4, 3), bindings=(x,))
    finish_and_check(dev, cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32(range(4)))


# Dispatch: workgroups.
@pytest.mark.parametrize("workgroups, axis", [((0, 1, 1), 0), ((1, 0, 1), 1), ((1, 1, -2), 2)])
def test_dispatch_workgroups_not_positive(host, exe, workgroups, axis):
    x = host.upload(u32(range(4)))
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(dispatch scale\): workgroups\[{axis}\] = {workgroups[axis]} must be an "
                             r"integer from 1 to the device's max_workgroup_count"):
        cb.dispatch(exe, "scale", workgroups, constants=(4, 3), bindings=(x,))
    finish_and_check(host, cb)


def test_dispatch_workgroups_beyond_default_limit(host, exe):
    x = host.upload(u32(range(4)))
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch scale\): workgroups\[1\] = 65536 .*max_workgroup_count 65535"):
        cb.dispatch(exe, "scale", (1, 65536, 1), constants=(4, 3), bindings=(x,))
    finish_and_check(host, cb)


@pytest.mark.parametrize("workgroups, axis, limit", [((9, 1, 1), 0, 8), ((1, 5, 1), 1, 4), ((1, 1, 3), 2, 2)])
def test_dispatch_workgroups_beyond_overridden_limit(make_device, workgroups, axis, limit):
    dev = make_device(max_workgroup_count=(8, 4, 2))
    seen = []
    exe = probe(dev, seen)
    cb = recording(dev)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(dispatch probe\): workgroups\[{axis}\] = {workgroups[axis]} .*"
                             rf"max_workgroup_count {limit}"):
        cb.dispatch(exe, "probe", workgroups, constants=(0, 0))
    cb.dispatch(exe, "probe", (8, 4, 2), constants=(1, 1))  # at the limit is fine
    finish_and_check(dev, cb)
    assert seen == [(1, 1)]


def test_workgroups_and_constants_checked_once_are_checked_again_elsewhere(host, make_device):
    """A command buffer skips the checks of the workgroups and constants tuples it checked last; the
    same tuples still meet another device's limits and another export's constant count."""
    workgroups, constants = (9, 1, 1), (4, 3)
    seen = []
    exe = probe(host, seen)
    cb = recording(host)
    cb.dispatch(exe, "probe", workgroups, constants)
    cb.dispatch(exe, "probe", workgroups, constants)
    with pytest.raises(hal.ValidationError,
                       match=r"command 2 \(dispatch probe\): 2 constants given, the export takes 3"):
        cb.dispatch(probe(host, seen, constants=3), "probe", workgroups, constants)
    small = make_device(max_workgroup_count=(8, 4, 2), max_push_constants_size=4)
    other = recording(small)
    with pytest.raises(hal.ValidationError, match=r"workgroups\[0\] = 9 .*max_workgroup_count 8"):
        other.dispatch(probe(small, []), "probe", workgroups, constants)
    with pytest.raises(hal.ValidationError,
                       match=r"8 bytes of constants exceed the device's max_push_constants_size 4"):
        other.dispatch(probe(small, []), "probe", (1, 1, 1), constants)
    finish_and_check(host, cb)
    assert seen == [(4, 3), (4, 3)]


def test_dispatch_workgroups_as_numpy_integers_accepted(host):
    """_workgroups() converts numpy integers, so a tuple of them must be accepted like a list of them."""
    seen = []
    exe = probe(host, seen)
    cb = recording(host)
    cb.dispatch(exe, "probe", [np.int64(2), np.int32(1), 1], constants=(1, 0))
    cb.dispatch(exe, "probe", (np.int64(2), np.int32(1), 1), constants=(2, 0))
    finish_and_check(host, cb)
    assert sorted(seen) == [(1, 0), (2, 0)]


# Dispatch: bindings.
@pytest.mark.parametrize("bindings", [1, 4])
def test_dispatch_wrong_binding_count(host, exe, bindings):
    bufs = [host.allocate(16) for _ in range(bindings)]
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \(dispatch add\): {bindings} bindings given, the export takes 3"):
        cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=bufs)
    finish_and_check(host, cb, untouched=bufs)


def test_dispatch_binding_offset_alignment_override(make_device):
    dev = make_device(storage_buffer_offset_alignment=256)
    x = dev.upload(np.arange(128, dtype=np.uint32))  # 512 bytes
    exe = dev.load_executable(kernels.SOURCE)
    cb = recording(dev)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch[^)]*\): bindings\[0\] offset 4 is not a multiple of the "
                             r"device's storage_buffer_offset_alignment 256"):
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(2, 10), bindings=(hal.ref(x, 4),))
    cb.dispatch(exe, "scale", (1, 1, 1), constants=(2, 10), bindings=(hal.ref(x, 256),))
    finish_and_check(dev, cb)
    expected = np.arange(128, dtype=np.uint32)
    expected[64:66] *= 10
    np.testing.assert_array_equal(x.read(np.uint32), expected)


def test_dispatch_binding_range_beyond_max_storage_buffer_range(make_device):
    dev = make_device(max_storage_buffer_range=64)
    x = dev.upload(np.arange(32, dtype=np.uint32))  # 128 bytes
    exe = dev.load_executable(kernels.SOURCE)
    cb = recording(dev)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch[^)]*\): bindings\[0\] spans 128 bytes, more than the "
                             r"device's max_storage_buffer_range 64"):
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(2, 10), bindings=(x,))
    cb.dispatch(exe, "scale", (1, 1, 1), constants=(2, 10), bindings=(hal.ref(x, 0, 64),))
    finish_and_check(dev, cb)
    np.testing.assert_array_equal(x.read(np.uint32)[:3], u32([0, 10, 2]))


def test_dispatch_slot_range_beyond_max_storage_buffer_range_at_submit(make_device):
    dev = make_device(max_storage_buffer_range=64)
    exe = dev.load_executable(kernels.SOURCE)
    big, small = dev.upload(np.ones(32, np.uint32)), dev.upload(np.ones(16, np.uint32))
    cb = recording(dev, binding_capacity=1)
    cb.dispatch(exe, "scale", (1, 1, 1), constants=(2, 5), bindings=(hal.slot(0),))
    cb.end()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 \(dispatch\): bindings\[0\] = slot 0 \(binding_table\[0\]\) "
                             r"spans 128 bytes, more than the device's max_storage_buffer_range 64"):
        dev.queue_execute(cb, binding_table=(big,))
    dev.queue_execute(cb, binding_table=(small,))
    dev.synchronize()
    np.testing.assert_array_equal(small.read(np.uint32)[:3], u32([5, 5, 1]))
    np.testing.assert_array_equal(big.read(np.uint32), np.ones(32, np.uint32))


def test_dispatch_unknown_export(host, exe):
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch\): no export 'nope'"):
        cb.dispatch(exe, "nope", (1, 1, 1))
    finish_and_check(host, cb)


def test_dispatch_executable_of_another_device(host, make_device):
    other = make_device()
    foreign = other.load_executable(kernels.SOURCE)
    x = host.upload(u32(range(4)))
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(dispatch\): executable must be a hal\.Executable loaded on this device"):
        cb.dispatch(foreign, "scale", (1, 1, 1), constants=(4, 3), bindings=(x,))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32(range(4)))


def test_dispatch_executable_not_an_executable(host):
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch\): executable must be a hal\.Executable"):
        cb.dispatch(kernels.SOURCE, "scale", (1, 1, 1))
    finish_and_check(host, cb)


# Buffers: other device, released, usage.
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


# Command buffer state.
RECORDERS = {
    "fill_buffer": lambda cb, buf, exe: cb.fill_buffer(buf, b"\x01"),
    "update_buffer": lambda cb, buf, exe: cb.update_buffer(buf, b"\x01\x02\x03\x04"),
    "copy_buffer": lambda cb, buf, exe: cb.copy_buffer(hal.ref(buf, 0, 8), hal.ref(buf, 8, 8)),
    "execution_barrier": lambda cb, buf, exe: cb.execution_barrier(),
    "dispatch": lambda cb, buf, exe: cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (buf,)),
}


@pytest.mark.parametrize("what", list(RECORDERS))
def test_recording_before_begin(host, exe, what):
    buf = host.allocate(16)
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \({what}\): the command buffer is initial, not recording; "
                             r"call begin\(\) first"):
        RECORDERS[what](cb, buf, exe)
    cb.begin()
    finish_and_check(host, cb, untouched=[buf])


@pytest.mark.parametrize("what", list(RECORDERS))
def test_recording_after_end(host, exe, what):
    buf, first = host.allocate(16), host.allocate(16)
    cb = recording(host)
    cb.fill_buffer(first, np.uint32(5))
    cb.end()
    with pytest.raises(hal.ValidationError,
                       match=rf"command 1 \({what}\): the command buffer is ended, not recording; call reset\(\)"):
        RECORDERS[what](cb, buf, exe)
    assert len(cb.commands) == 1
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(first.read(np.uint32), np.full(4, 5, np.uint32))
    assert not buf.read().any()


def test_begin_twice(host):
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"begin: the command buffer is recording; call reset\(\)"):
        cb.begin()
    finish_and_check(host, cb)


def test_begin_after_end(host):
    cb = recording(host)
    cb.end()
    with pytest.raises(hal.ValidationError, match=r"begin: the command buffer is ended; call reset\(\)"):
        cb.begin()


def test_end_twice(host):
    buf = host.allocate(16)
    cb = recording(host)
    cb.fill_buffer(buf, np.uint32(6))
    cb.end()
    with pytest.raises(hal.ValidationError, match=r"end: the command buffer is ended, not recording"):
        cb.end()
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 6, np.uint32))


def test_end_before_begin(host):
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError, match=r"end: the command buffer is initial, not recording"):
        cb.end()
    cb.begin()
    finish_and_check(host, cb)


def test_submit_before_end(host):
    buf = host.allocate(16)
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: the command buffer is initial; call end\(\) before submitting"):
        host.queue_execute(cb)
    cb.begin()
    cb.fill_buffer(buf, np.uint32(1))
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: the command buffer is recording; call end\(\) before submitting"):
        host.queue_execute(cb)
    host.synchronize()
    assert not buf.read().any()
    finish_and_check(host, cb)  # the one_shot buffer still has its one submission
    np.testing.assert_array_equal(buf.read(np.uint32), np.ones(4, np.uint32))


def test_one_shot_submitted_twice(host):
    buf = host.allocate(16)
    cb = host.create_command_buffer(mode="one_shot")
    with cb:
        cb.fill_buffer(buf, np.uint32(1))
    host.queue_execute(cb)
    with pytest.raises(hal.ValidationError, match=r"queue_execute: a one_shot command buffer runs once"):
        host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.ones(4, np.uint32))


def test_reusable_submitted_many_times(host, exe):
    x = host.upload(u32([1, 2, 3, 4]))
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(4, 2), bindings=(x,))
    for _ in range(3):
        host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), u32([8, 16, 24, 32]))


def test_queue_execute_command_buffer_of_another_device(host, make_device):
    other = make_device()
    cb = other.create_command_buffer()
    with cb:
        pass
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: expected a command buffer created by this device"):
        host.queue_execute(cb)


@pytest.mark.parametrize("kwargs, shown", [
    ({"mode": "twice"}, "mode must be"), ({"strategy": "eager"}, "strategy must be"),
    ({"dependencies": "none"}, "dependencies must be"), ({"binding_capacity": -1}, "binding_capacity must be"),
    ({"binding_capacity": 1.5}, "binding_capacity must be"), ({"validate": 1}, "validate must be"),
])
def test_create_command_buffer_bad_arguments(host, kwargs, shown):
    with pytest.raises(hal.ValidationError, match=shown):
        host.create_command_buffer(**kwargs)


# Slots and binding tables.
def test_slot_beyond_binding_capacity(host):
    cb = recording(host, binding_capacity=1)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(fill_buffer\): target uses slot 1, but the command buffer's "
                             r"binding_capacity is 1"):
        cb.fill_buffer(hal.slot(1), b"\x01")
    finish_and_check(host, cb, table=(host.allocate(4),))


def test_slot_without_binding_capacity(host):
    src = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError,
                       match=r"command 0 \(copy_buffer\): target uses slot 0, but the command buffer's "
                             r"binding_capacity is 0"):
        cb.copy_buffer(src, hal.slot(0))
    finish_and_check(host, cb)


def _slot_fill_cb(host, capacity=2):
    cb = recording(host, binding_capacity=capacity)
    cb.fill_buffer(hal.slot(0), np.uint32(7))
    cb.fill_buffer(hal.slot(1), np.uint32(8))
    cb.end()
    return cb


def _check_slot_fill(host, cb, *extra):
    a, b = host.allocate(16), host.allocate(16)
    host.queue_execute(cb, binding_table=(a, b) + extra)
    host.synchronize()
    np.testing.assert_array_equal(a.read(np.uint32), np.full(4, 7, np.uint32))
    np.testing.assert_array_equal(b.read(np.uint32), np.full(4, 8, np.uint32))


def test_missing_binding_table(host):
    cb = _slot_fill_cb(host)
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: the binding table has 0 entries; the command buffer uses slots up to 1"):
        host.queue_execute(cb)
    _check_slot_fill(host, cb)


def test_short_binding_table(host):
    a = host.allocate(16)
    cb = _slot_fill_cb(host)
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: the binding table has 1 entries; the command buffer uses slots up to 1"):
        host.queue_execute(cb, binding_table=[a])
    host.synchronize()
    assert not a.read().any()
    _check_slot_fill(host, cb)


def test_binding_table_longer_than_capacity(host):
    cb = _slot_fill_cb(host)
    bufs = tuple(host.allocate(16) for _ in range(3))
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: the binding table has 3 entries, more than the command buffer's "
                             r"binding_capacity 2"):
        host.queue_execute(cb, binding_table=bufs)
    _check_slot_fill(host, cb)


def test_binding_table_entry_not_a_buffer(host):
    cb = _slot_fill_cb(host)
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: binding_table\[1\] must be a hal\.Buffer, got ndarray"):
        host.queue_execute(cb, binding_table=(host.allocate(16), np.zeros(16, np.uint8)))
    _check_slot_fill(host, cb)


def test_binding_table_a_single_buffer(host):
    cb = _slot_fill_cb(host, capacity=1 + 1)
    with pytest.raises(hal.ValidationError, match=r"queue_execute: binding_table must be a sequence of buffers"):
        host.queue_execute(cb, binding_table=host.allocate(16))
    _check_slot_fill(host, cb)


def test_binding_table_entry_of_another_device(host, make_device):
    cb = _slot_fill_cb(host)
    foreign = make_device().allocate(16)
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: binding_table\[0\] is a buffer of another device"):
        host.queue_execute(cb, binding_table=(foreign, host.allocate(16)))
    _check_slot_fill(host, cb)


def test_binding_table_entry_released(host):
    cb = _slot_fill_cb(host)
    gone = host.allocate(16)
    gone.release()
    with pytest.raises(hal.ValidationError, match=r"queue_execute: binding_table\[0\] is a released buffer"):
        host.queue_execute(cb, binding_table=(gone, host.allocate(16)))
    _check_slot_fill(host, cb)


def test_binding_table_entry_released_between_submissions(host):
    cb = host.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.fill_buffer(hal.slot(0), np.uint32(3))
    buf = host.allocate(16)
    host.queue_execute(cb, binding_table=(buf,))
    host.synchronize()
    buf.release()
    with pytest.raises(hal.ValidationError, match=r"queue_execute: binding_table\[0\] is a released buffer"):
        host.queue_execute(cb, binding_table=(buf,))


def test_slot_range_beyond_bound_buffer(host):
    cb = recording(host, binding_capacity=1)
    cb.fill_buffer(hal.slot(0, 0, 64), np.uint32(9))
    cb.end()
    small = host.allocate(32)
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 \(fill\): slot 0 \(binding_table\[0\]\) range \[0, 64\) is "
                             r"empty or outside the buffer's 32 bytes"):
        host.queue_execute(cb, binding_table=(small,))
    host.synchronize()
    assert not small.read().any()
    big = host.allocate(64)
    host.queue_execute(cb, binding_table=(big,))
    host.synchronize()
    np.testing.assert_array_equal(big.read(np.uint32), np.full(16, 9, np.uint32))


def test_slot_offset_beyond_bound_buffer(host):
    cb = recording(host, binding_capacity=1)
    cb.fill_buffer(hal.slot(0, 32), np.uint32(9))
    cb.end()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 \(fill\): slot 0 \(binding_table\[0\]\) range \[32, 16\) is "
                             r"empty or outside the buffer's 16 bytes"):
        host.queue_execute(cb, binding_table=(host.allocate(16),))


def test_slot_fill_length_unaligned_at_submit(host):
    cb = recording(host, binding_capacity=1)
    cb.fill_buffer(hal.slot(0), np.uint32(9))
    cb.end()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 \(fill_buffer\) fills 6 bytes of slot 0, not a multiple"):
        host.queue_execute(cb, binding_table=(host.allocate(6),))


def test_copy_between_slots_bound_to_overlapping_ranges_at_submit(host):
    cb = recording(host, binding_capacity=2)
    cb.copy_buffer(hal.slot(0, 0, 32), hal.slot(1, 16, 32))
    cb.end()
    buf = host.upload(np.arange(16, dtype=np.uint32))
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: command 0 \(copy_buffer\) copies between overlapping ranges"):
        host.queue_execute(cb, binding_table=(buf, buf))
    other = host.allocate(64)
    host.queue_execute(cb, binding_table=(buf, other))
    host.synchronize()
    np.testing.assert_array_equal(other.read(np.uint32)[4:12], np.arange(8, dtype=np.uint32))


# Races inside a segment.
def test_race_write_write(host):
    buf = host.allocate(32)
    cb = recording(host)
    cb.fill_buffer(hal.ref(buf, 0, 16), np.uint32(1))
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 1 \(fill\) writes bytes \[8, 24\) of one buffer that command 0 \(fill\) "
                             r"writes \(\[0, 16\)\) in the same segment"):
        cb.fill_buffer(hal.ref(buf, 8, 16), np.uint32(2))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(buf.read(np.uint32), u32([1, 1, 1, 1, 0, 0, 0, 0]))


def test_race_read_then_write(host):
    buf, dst = host.upload(u32(range(8))), host.allocate(16)
    cb = recording(host)
    cb.copy_buffer(hal.ref(buf, 0, 16), dst)
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 1 \(fill\) writes bytes \[8, 24\) of one buffer that command 0 \(copy\) "
                             r"reads"):
        cb.fill_buffer(hal.ref(buf, 8, 16), np.uint32(2))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(dst.read(np.uint32), u32(range(4)))
    np.testing.assert_array_equal(buf.read(np.uint32), u32(range(8)))


def test_race_write_then_read(host):
    buf, dst = host.allocate(16), host.allocate(16)
    cb = recording(host)
    cb.fill_buffer(buf, np.uint32(4))
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 1 \(copy\) reads bytes \[0, 16\) of one buffer that command 0 \(fill\) "
                             r"writes"):
        cb.copy_buffer(buf, dst)
    finish_and_check(host, cb, untouched=[dst])


def test_race_between_dispatches(host, exe):
    a, b, c = host.upload(u32(range(4))), host.allocate(16), host.allocate(16)
    cb = recording(host)
    cb.dispatch(exe, "xor_copy", (1, 1, 1), constants=(4, 1), bindings=(a, b))
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 1 \(dispatch\) reads bytes \[0, 16\) of one buffer that command 0 "
                             r"\(dispatch\) writes"):
        cb.dispatch(exe, "xor_copy", (1, 1, 1), constants=(4, 1), bindings=(b, c))
    finish_and_check(host, cb, untouched=[c])
    np.testing.assert_array_equal(b.read(np.uint32), u32([1, 0, 3, 2]))


def test_read_read_is_not_a_race(host, exe):
    a, b, c, d = host.upload(u32(range(4))), host.upload(u32([10] * 4)), host.allocate(16), host.allocate(16)
    cb = recording(host)
    cb.copy_buffer(a, c)
    cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, b, d))  # a, b readonly
    finish_and_check(host, cb)
    np.testing.assert_array_equal(c.read(np.uint32), u32(range(4)))
    np.testing.assert_array_equal(d.read(np.uint32), u32([10, 11, 12, 13]))


def test_one_dispatch_reading_and_writing_one_buffer_is_not_a_race(host, exe):
    a = host.upload(u32([1, 2, 3, 4]))
    cb = recording(host)
    cb.dispatch(exe, "add", (1, 1, 1), constants=(4,), bindings=(a, a, a))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(a.read(np.uint32), u32([2, 4, 6, 8]))


def test_rejected_copy_leaves_no_ranges_behind(host):
    """The copy's source read is seen before its target races; once rejected, writing the source is legal."""
    src, dst = host.upload(u32(range(4))), host.allocate(32)
    cb = recording(host)
    cb.fill_buffer(hal.ref(dst, 0, 16), np.uint32(1))
    with pytest.raises(hal.ValidationError, match=r"race: command 1 \(copy\) writes .* command 0 \(fill\) writes"):
        cb.copy_buffer(src, hal.ref(dst, 8, 16))
    cb.fill_buffer(src, np.uint32(5))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(src.read(np.uint32), np.full(4, 5, np.uint32))
    np.testing.assert_array_equal(dst.read(np.uint32), u32([1, 1, 1, 1, 0, 0, 0, 0]))


def test_race_with_a_dispatch_that_reads_what_it_writes(host):
    """A dispatch may read what it writes (here the write comes first); another read of it is a race."""
    def bump(ctx):
        ctx.binding(0, np.uint32)[:] += 1
    source = hal.ExecutableSource.python({"bump": bump, "peek": lambda ctx: None},
                                         [hal.Export("bump", bindings=2, readonly=(1,)),
                                          hal.Export("peek", bindings=1, readonly=(0,))])
    exe = host.load_executable(source)
    a = host.allocate(16)
    cb = recording(host)
    cb.dispatch(exe, "bump", bindings=(a, a))
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 1 \(dispatch\) reads bytes \[0, 16\) of one buffer that command 0 "
                             r"\(dispatch\) writes"):
        cb.dispatch(exe, "peek", bindings=(a,))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(a.read(np.uint32), u32([1] * 4))


def test_reads_settled_once_still_race_with_a_later_write(host):
    """A reference read again with nothing written to its buffer since is settled by one lookup; a later
    write that overlaps it, even after writes elsewhere in that buffer, is still a race."""
    src, dst = host.upload(u32(range(8))), host.allocate(64)
    head = hal.ref(src, 0, 16)
    cb = recording(host)
    cb.copy_buffer(head, hal.ref(dst, 0, 16))
    cb.copy_buffer(head, hal.ref(dst, 16, 16))
    cb.fill_buffer(hal.ref(src, 16, 16), np.uint32(9))
    cb.copy_buffer(head, hal.ref(dst, 32, 16))
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 4 \(fill\) writes bytes \[8, 16\) of one buffer that command 0 "
                             r"\(copy\) reads"):
        cb.fill_buffer(hal.ref(src, 8, 8), np.uint32(7))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(dst.read(np.uint32)[:12], np.tile(np.arange(4, dtype=np.uint32), 3))
    np.testing.assert_array_equal(src.read(np.uint32), u32([0, 1, 2, 3, 9, 9, 9, 9]))


def test_a_dispatch_writing_what_it_read_unsettles_the_read(host, exe):
    """The dispatch reads `head` (settled: nothing of the segment writes it yet), then writes it itself,
    which is legal; reading `head` again is a race with that write, so it must be checked again."""
    src, dst = host.upload(u32(range(12))), host.allocate(16)
    head = hal.ref(src, 0, 16)
    cb = recording(host)
    cb.fill_buffer(hal.ref(src, 32, 16), np.uint32(9))
    cb.dispatch(exe, "xor_copy", (1, 1, 1), constants=(4, 1), bindings=(head, head))
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 2 \(copy\) reads bytes \[0, 16\) of one buffer that command 1 "
                             r"\(dispatch\) writes"):
        cb.copy_buffer(head, dst)
    finish_and_check(host, cb, untouched=[dst])
    np.testing.assert_array_equal(src.read(np.uint32), u32([1, 0, 3, 2, 4, 5, 6, 7, 9, 9, 9, 9]))


def test_barrier_between_overlapping_writes_is_legal(host):
    buf = host.allocate(32)
    cb = recording(host)
    cb.fill_buffer(hal.ref(buf, 0, 16), np.uint32(1))
    cb.execution_barrier()
    cb.fill_buffer(hal.ref(buf, 8, 16), np.uint32(2))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(buf.read(np.uint32), u32([1, 1, 2, 2, 2, 2, 0, 0]))


def test_disjoint_ranges_are_legal(host):
    buf = host.allocate(32)
    cb = recording(host)
    cb.fill_buffer(hal.ref(buf, 0, 16), np.uint32(1))
    cb.fill_buffer(hal.ref(buf, 16, 16), np.uint32(2))
    finish_and_check(host, cb)
    np.testing.assert_array_equal(buf.read(np.uint32), u32([1, 1, 1, 1, 2, 2, 2, 2]))


def test_validate_false_records_races(host):
    buf = host.allocate(32)
    cb = recording(host, validate=False)
    cb.fill_buffer(hal.ref(buf, 0, 16), np.uint32(1))
    cb.fill_buffer(hal.ref(buf, 8, 16), np.uint32(2))
    finish_and_check(host, cb)
    assert [c.kind for c in cb.commands] == ["fill", "fill", "fill"]


def test_race_through_two_slots_bound_to_one_buffer(host):
    cb = _slot_fill_cb(host)  # records fine: the slots may be bound to different buffers
    shared = host.allocate(16)
    with pytest.raises(hal.ValidationError,
                       match=r"race: command 1 \(fill\) writes bytes \[0, 16\) of one buffer that command 0 \(fill\) "
                             r"writes"):
        host.queue_execute(cb, binding_table=(shared, shared))
    host.synchronize()
    assert not shared.read().any()
    _check_slot_fill(host, cb)


def test_race_between_slot_and_direct_buffer_at_submit(host):
    direct = host.allocate(16)
    cb = recording(host, binding_capacity=1)
    cb.fill_buffer(direct, np.uint32(1))
    cb.fill_buffer(hal.slot(0), np.uint32(2))
    cb.end()
    with pytest.raises(hal.ValidationError, match=r"race: command 1 \(fill\) .* command 0 \(fill\) writes"):
        host.queue_execute(cb, binding_table=(direct,))
    other = host.allocate(16)
    host.queue_execute(cb, binding_table=(other,))
    host.synchronize()
    np.testing.assert_array_equal(direct.read(np.uint32), np.full(4, 1, np.uint32))
    np.testing.assert_array_equal(other.read(np.uint32), np.full(4, 2, np.uint32))


def test_slot_race_not_checked_without_validation(host):
    cb = recording(host, binding_capacity=2, validate=False)
    cb.fill_buffer(hal.slot(0), np.uint32(7))
    cb.fill_buffer(hal.slot(1), np.uint32(8))
    cb.end()
    shared = host.allocate(16)
    host.queue_execute(cb, binding_table=(shared, shared))
    host.synchronize()
    assert set(shared.read(np.uint32)) <= {7, 8}


# Graph, reset.
def test_dependency_graph_before_end(host):
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError,
                       match=r"dependency_graph: the command buffer is initial; call end\(\) first"):
        cb.dependency_graph()
    cb.begin()
    cb.fill_buffer(host.allocate(16), b"\x01")
    with pytest.raises(hal.ValidationError,
                       match=r"dependency_graph: the command buffer is recording; call end\(\) first"):
        cb.dependency_graph()
    cb.end()
    assert list(cb.dependency_graph().nodes) == [0]


def test_reset_then_rerecord(host):
    first, second = host.allocate(16), host.allocate(16)
    cb = host.create_command_buffer(mode="one_shot")
    with cb:
        cb.fill_buffer(first, np.uint32(1))
    host.queue_execute(cb)
    host.synchronize()  # resetting a pending command buffer is another test
    cb.reset()
    assert cb.state == "initial"
    with cb:
        cb.fill_buffer(second, np.uint32(2))
    host.queue_execute(cb)  # a reset one_shot buffer may run once more
    host.synchronize()
    np.testing.assert_array_equal(first.read(np.uint32), np.full(4, 1, np.uint32))
    np.testing.assert_array_equal(second.read(np.uint32), np.full(4, 2, np.uint32))
    assert len(cb.commands) == 1


def test_reset_while_recording(host):
    buf = host.allocate(16)
    cb = recording(host)
    cb.fill_buffer(buf, np.uint32(1))
    cb.reset()
    cb.begin()
    finish_and_check(host, cb, untouched=[buf])


def test_reset_of_a_pending_command_buffer_does_not_change_the_pending_work(host):
    """Vulkan forbids resetting a pending command buffer; hal must refuse it (ValidationError) or let the
    pending submission run what was recorded when it was submitted."""
    gate = host.create_semaphore(0)
    buf = host.allocate(16)
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(buf, np.uint32(1))
    host.queue_execute(cb, wait=[(gate, 1)])
    try:
        cb.reset()
    except hal.ValidationError:
        pass
    else:
        with cb:
            cb.fill_buffer(buf, np.uint32(2))
    gate.signal(1)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 1, np.uint32))


# Closed devices.
USES = {
    "allocate": lambda dev, buf, ended, fresh, sem: dev.allocate(16),
    "upload": lambda dev, buf, ended, fresh, sem: dev.upload(np.zeros(4, np.uint32)),
    "load_executable": lambda dev, buf, ended, fresh, sem: dev.load_executable(kernels.SOURCE),
    "create_command_buffer": lambda dev, buf, ended, fresh, sem: dev.create_command_buffer(),
    "create_semaphore": lambda dev, buf, ended, fresh, sem: dev.create_semaphore(0),
    "synchronize": lambda dev, buf, ended, fresh, sem: dev.synchronize(),
    "queue_execute": lambda dev, buf, ended, fresh, sem: dev.queue_execute(ended),
    "begin": lambda dev, buf, ended, fresh, sem: fresh.begin(),
    "read": lambda dev, buf, ended, fresh, sem: buf.read(),
    "write": lambda dev, buf, ended, fresh, sem: buf.write(b"\x01"),
    "signal": lambda dev, buf, ended, fresh, sem: sem.signal(1),
}


@pytest.mark.parametrize("use", list(USES))
def test_closed_device_refuses_use(use):
    dev = hal.create_device("host")
    buf = dev.allocate(16)
    sem = dev.create_semaphore(0)
    ended = dev.create_command_buffer()
    with ended:
        ended.fill_buffer(buf, b"\x01")
    fresh = dev.create_command_buffer()
    dev.close()
    dev.close()  # idempotent
    with pytest.raises(hal.ValidationError, match=r"the host device .* is closed; create a new one"):
        USES[use](dev, buf, ended, fresh, sem)


def test_device_context_manager_closes(host):
    with hal.create_device("host") as dev:
        dev.allocate(4)
    with pytest.raises(hal.ValidationError, match="is closed"):
        dev.allocate(4)


# Export and ExecutableSource constructors.
@pytest.mark.parametrize("name", ["", 5, None, b"add"])
def test_export_bad_name(name):
    with pytest.raises(hal.ValidationError, match=r"Export name must be a non-empty string"):
        hal.Export(name, bindings=1)


@pytest.mark.parametrize("kwargs, shown", [
    ({"bindings": -1}, r"bindings must be >= 0, got -1"),
    ({"bindings": 1, "constants": 1.0}, r"constants must be an integer, got float 1.0"),
    ({"bindings": True}, r"bindings must be an integer, got bool True"),
    ({"bindings": 1, "workgroup_size": (0, 1, 1)}, r"workgroup_size must be >= 1, got 0"),
    ({"bindings": 1, "workgroup_size": (1, 1, 1, 1)}, r"workgroup_size must be 1 to 3 positive integers"),
])
def test_export_bad_counts(kwargs, shown):
    with pytest.raises(hal.ValidationError, match=rf"Export 'k': {shown}"):
        hal.Export("k", **kwargs)


@pytest.mark.parametrize("readonly, shown", [
    ((3,), r"must be in \[0, 2\], got 3"), ((-1,), r"must be in \[0, 2\], got -1"),
    ((0, 1.0), "must be an integer, got float 1.0")])
def test_export_readonly_out_of_range(readonly, shown):
    with pytest.raises(hal.ValidationError, match=rf"Export 'k': readonly index {shown}"):
        hal.Export("k", bindings=3, readonly=readonly)


def test_export_readonly_of_mixed_types_is_a_validation_error():
    with pytest.raises(hal.ValidationError, match=r"Export 'k': readonly index"):
        hal.Export("k", bindings=3, readonly=(0, "1"))


def test_duplicate_export_names():
    e = hal.Export("a", bindings=1)
    with pytest.raises(hal.ValidationError, match=r"export names must be unique, got \['a', 'a'\]"):
        hal.ExecutableSource.python({"a": lambda ctx: None}, [e, hal.Export("a", bindings=2)])


def test_no_exports():
    with pytest.raises(hal.ValidationError, match=r"an executable needs at least one Export"):
        hal.ExecutableSource.python({}, [])


def test_glsl_string_for_two_exports():
    exports = [hal.Export("a", bindings=1), hal.Export("b", bindings=1)]
    with pytest.raises(hal.ValidationError,
                       match=r"glsl: one source string serves one export; give \{export: code\} for 2 exports"):
        hal.ExecutableSource.glsl("#version 450\nvoid main() {}", exports)


def test_python_mapping_missing_an_export():
    exports = [hal.Export("a", bindings=1), hal.Export("b", bindings=1)]
    with pytest.raises(hal.ValidationError,
                       match=r"python: code given for \['a'\] but the exports are \['a', 'b'\]"):
        hal.ExecutableSource.python({"a": lambda ctx: None}, exports)


def test_python_kernel_not_callable():
    with pytest.raises(hal.ValidationError, match=r"python: the code for export 'a' has the wrong type str"):
        hal.ExecutableSource.python({"a": "def a(ctx): pass"}, [hal.Export("a", bindings=1)])


def test_multi_with_no_parts():
    with pytest.raises(hal.ValidationError, match=r"multi: give at least one of cuda=, vulkan=, host="):
        hal.ExecutableSource.multi()


def test_multi_with_a_multi_part():
    with pytest.raises(hal.ValidationError, match=r"multi: host= must be a single-format ExecutableSource"):
        hal.ExecutableSource.multi(host=kernels.SOURCE)


def test_multi_with_disagreeing_exports():
    cuda = hal.ExecutableSource.cuda("extern \"C\" __global__ void a() {}", [hal.Export("a", bindings=0)])
    host = hal.ExecutableSource.python({"b": lambda ctx: None}, [hal.Export("b", bindings=0)])
    with pytest.raises(hal.ValidationError, match=r"multi: the exports of host= differ"):
        hal.ExecutableSource.multi(cuda=cuda, host=host)


@pytest.mark.parametrize("make, shown", [
    (lambda e: hal.ExecutableSource.cuda("   ", e), r"cuda: expected non-empty source text"),
    (lambda e: hal.ExecutableSource.spirv(b"", e), r"spirv: expected non-empty bytes"),
    (lambda e: hal.ExecutableSource.spirv(b"\x03\x02\x23", e), r"spirv: a SPIR-V module is a whole number of"),
    (lambda e: hal.ExecutableSource.cuda("x", e, options=(1,)), r"cuda options must be strings"),
])
def test_bad_source_payloads(make, shown):
    with pytest.raises(hal.ValidationError, match=shown):
        make([hal.Export("a", bindings=1)])


def test_host_refuses_cuda_source(host):
    source = hal.ExecutableSource.cuda('extern "C" __global__ void a(int *x) {}', [hal.Export("a", bindings=1)])
    with pytest.raises(hal.UnsupportedError, match=r"the host device runs Python kernels only, not 'cuda' code"):
        host.load_executable(source)


def test_host_refuses_spirv_source(host):
    source = hal.ExecutableSource.spirv(b"\x03\x02\x23\x07" + b"\x00" * 16, [hal.Export("a", bindings=1)])
    with pytest.raises(hal.UnsupportedError, match=r"the host device runs Python kernels only, not 'spirv' code"):
        host.load_executable(source)


def test_host_refuses_multi_without_host_part(host):
    cuda = hal.ExecutableSource.cuda('extern "C" __global__ void a(int *x) {}', [hal.Export("a", bindings=1)])
    with pytest.raises(hal.UnsupportedError, match=r"this multi source has no part for the host driver"):
        host.load_executable(hal.ExecutableSource.multi(cuda=cuda))


def test_load_executable_of_a_non_source(host):
    with pytest.raises(hal.ValidationError, match=r"load_executable: expected a hal\.ExecutableSource, got dict"):
        host.load_executable({"a": lambda ctx: None})


def test_export_workgroup_size_beyond_device_limit(make_device):
    dev = make_device(max_workgroup_invocations=32)
    with pytest.raises(hal.ValidationError,
                       match=r"export 'add': workgroup_size \(64, 1, 1\) exceeds .*max_workgroup_invocations 32"):
        dev.load_executable(kernels.SOURCE)


# Capability overrides.
@pytest.mark.parametrize("name", ["update_buffer_alignment", "copy_buffer_alignment",
                                  "storage_buffer_offset_alignment"])
def test_zero_alignment_override_is_refused_or_harmless(name):
    """An alignment of 0 makes no sense; it must be refused when the device is created, or else recording
    must still work (not die with ZeroDivisionError)."""
    try:
        dev = hal.create_device("host", capabilities={name: 0})
    except hal.ValidationError:
        return
    try:
        buf = dev.allocate(16)
        cb = recording(dev)
        cb.update_buffer(hal.ref(buf, 0, 8), b"\x01" * 8)
        cb.execution_barrier()
        cb.copy_buffer(hal.ref(buf, 0, 8), hal.ref(buf, 8, 8))
        cb.execution_barrier()
        cb.dispatch(dev.load_executable(kernels.SOURCE), "scale", (1, 1, 1), (4, 1), (buf,))
        cb.end()
    finally:
        dev.close()


@pytest.mark.parametrize("overrides, shown", [
    ({"nope": 1}, r"unknown capability 'nope'"),
    ({"max_push_constants_size": -1}, r"capability max_push_constants_size must be >= 0, got -1"),
    ({"supports_float64": 1}, r"capability supports_float64 takes True or False"),
    ({"max_workgroup_count": (1, 2)}, r"capability max_workgroup_count takes three positive integers"),
])
def test_bad_capability_overrides(overrides, shown):
    with pytest.raises(hal.ValidationError, match=shown):
        hal.create_device("host", capabilities=overrides)


def test_a_new_table_is_checked_where_its_answers_can_differ(host):
    """Only the slots whose buffer changed are checked again, and not at all when nothing a check reads
    changed; but a smaller buffer, new aliasing between slots, or a slot now bound to a buffer the
    command buffer uses directly is checked again."""
    direct = host.allocate(64)
    cb = host.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.fill_buffer(hal.slot(0), np.uint32(1))
        cb.fill_buffer(hal.slot(1), np.uint32(2))
        cb.fill_buffer(direct, np.uint32(3))
    a, b, c = (host.allocate(64) for _ in range(3))
    host.queue_execute(cb, binding_table=(a, b))
    host.queue_execute(cb, binding_table=(c, b))  # same size, no aliasing: nothing to check again
    with pytest.raises(hal.ValidationError, match=r"race"):
        host.queue_execute(cb, binding_table=(a, a))  # now the two slots alias
    with pytest.raises(hal.ValidationError, match=r"race"):
        host.queue_execute(cb, binding_table=(a, direct))  # a slot bound to a buffer used directly
    small = host.allocate(2)
    with pytest.raises(hal.ValidationError, match=r"fills 2 bytes of slot 1"):
        host.queue_execute(cb, binding_table=(a, small))
    host.queue_execute(cb, binding_table=(b, c))
    host.synchronize()
    np.testing.assert_array_equal(c.read(np.uint32), np.full(16, 2, np.uint32))
