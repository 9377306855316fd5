"""Slots and binding tables: binding_capacity when recording; the table, what it binds and its races, at submit."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.hal.validation_helpers import finish_and_check, recording


# Slots at record time.
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


# The binding table at submit.
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


# Races made by the binding table.
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
