"""Byte ranges given through hal.ref(), hal.slot() and BufferRef: refused where made or where used."""

from __future__ import annotations

import re

import pytest

import hal
from tests.hal.validation_helpers import finish_and_check, recording


# A negative offset or length is refused by ref() (see below); a range past the end is accepted by
# ref() and refused when a command uses it.
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
