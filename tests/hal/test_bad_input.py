"""Odd input gets a named hal error, never a raw Python exception or silently wrong bytes."""

import numpy as np
import pytest

import hal
from tests import kernels


def test_read_with_unusable_dtypes(host):
    buf = host.allocate(16)
    for dtype in (object, np.dtype([]), "not a dtype"):
        with pytest.raises(hal.ValidationError):
            buf.read(dtype)


def test_write_accepts_strided_views_and_odd_dtypes_but_not_objects(host):
    buf = host.allocate(8)
    buf.write(memoryview(b"abcdefgh")[::2])
    assert buf.read()[:4].tobytes() == b"aceg"
    buf.write(np.array([1], dtype="datetime64[s]"))
    assert buf.read(np.int64)[0] == 1
    with pytest.raises(hal.ValidationError, match="Python objects"):
        buf.write(np.array([object(), object()]))
    with pytest.raises(hal.ValidationError, match="Python objects"):
        host.upload(np.array([None]))


def test_dispatch_with_an_unhashable_export_name(host):
    exe = host.load_executable(kernels.SOURCE)
    cb = host.create_command_buffer()
    cb.begin()
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch\): no export \['add'\]"):
        cb.dispatch(exe, ["add"])


def test_export_takes_numpy_integers_and_refuses_none():
    assert hal.Export("k", bindings=np.int64(2), workgroup_size=np.int64(64)).workgroup_size == (64, 1, 1)
    with pytest.raises(hal.ValidationError, match="workgroup_size must be a sequence"):
        hal.Export("k", bindings=1, workgroup_size=None)


def test_options_and_imports_must_be_sequences_not_strings():
    export = hal.Export("k", bindings=0)
    with pytest.raises(hal.ValidationError, match="cuda options must be a sequence, not a single str"):
        hal.ExecutableSource.cuda("x", [export], options="-O3")
    with pytest.raises(hal.ValidationError, match="cuda options must be a sequence"):
        hal.ExecutableSource.cuda("x", [export], options=5)
    with pytest.raises(hal.ValidationError, match="ptx imports must be a sequence"):
        hal.ExecutableSource.ptx("x", [export], imports="y")


def test_a_binding_table_or_wait_list_of_arrays(host):
    buf = host.allocate(16)
    cb = host.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.fill_buffer(hal.slot(0), np.uint32(1))
    host.queue_execute(cb, binding_table=(buf,))
    with pytest.raises(hal.ValidationError, match=r"binding_table\[0\] must be a hal.Buffer, got ndarray"):
        host.queue_execute(cb, binding_table=(np.zeros(4),))
    with pytest.raises(hal.ValidationError, match="wait entries must be"):
        host.queue_execute(cb, binding_table=(buf,), wait=np.array([1, 2]))


def test_references_are_read_only_so_a_checked_range_cannot_be_widened(host):
    buf = host.allocate(16)
    r = hal.ref(buf, 0, 8)
    cb = host.create_command_buffer()
    cb.begin()
    cb.fill_buffer(r, np.uint8(1))
    for field in ("offset", "length", "end", "buffer", "slot"):
        with pytest.raises(AttributeError):
            setattr(r, field, 1000)
    assert (r.offset, r.length, r.end, r.buffer, r.slot) == (0, 8, 8, buf, -1)


def test_queued_signals_never_go_backwards(host):
    sem = host.create_semaphore(0)
    gate = host.create_semaphore(0)
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(host.allocate(4), np.uint8(1))
    host.queue_execute(cb, wait=[(gate, 1)], signal=[(sem, 5)])
    with pytest.raises(hal.ValidationError, match="signal value 3 is not above 5"):
        host.queue_execute(cb, signal=[(sem, 3)])
    host.queue_execute(cb, signal=[(sem, 6)])
    gate.signal(1)
    sem.wait(6, timeout=5)
    assert sem.query() == 6


def test_infinite_timeout_waits_like_none(host):
    sem = host.create_semaphore(3)
    sem.wait(3, timeout=float("inf"))
    with pytest.raises(hal.ValidationError, match="timeout"):
        sem.wait(1, timeout=float("nan"))
