"""dispatch checks: argument types, constants, workgroups, bindings, exports and executables."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.hal.validation_helpers import finish_and_check, probe, recording
from tests.kernels import u32


# Wrong types.
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


# Constants.
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


# Workgroups.
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


# Bindings.
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


# Exports and executables.
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
