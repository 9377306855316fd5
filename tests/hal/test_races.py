"""Races inside a segment, refused at record time; barriers, disjoint ranges and validate=False."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.hal.validation_helpers import finish_and_check, recording
from tests.kernels import u32


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
