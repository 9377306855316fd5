"""Vulkan command buffers: barriers only where dependencies cross, encodings reused per binding table,
state not set twice, and the native and Python encoders recording the same thing."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip
from tests.kernels import groups

backend_or_skip("vulkan")

from backends.vulkan import command_buffer, encoder
from backends.vulkan import native as native_module

pytestmark = pytest.mark.vulkan

N = 256


@pytest.fixture(scope="module")
def exe(vk):
    return vk.load_executable(kernels.SOURCE)


def u32(values):
    return np.asarray(values, np.uint32)


def record_independent_steps(cb, exe, bufs, steps):
    """Each step scales its own buffer: in hazards mode nothing depends on anything."""
    for i in range(steps):
        cb.dispatch(exe, "scale", groups(N), (N, 3), (bufs[i],))
        cb.execution_barrier()


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_barriers_only_where_a_dependency_crosses(vk, exe, strategy):
    bufs = [vk.upload(np.full(N, i + 1, np.uint32)) for i in range(6)]
    seen = {}
    for deps in ("barriers", "hazards"):
        cb = vk.create_command_buffer(strategy=strategy, dependencies=deps)
        with cb:
            record_independent_steps(cb, exe, bufs, 6)
        seen[deps] = cb.barriers
        vk.queue_execute(cb)
    assert seen == {"barriers": 5, "hazards": 0}
    for i, b in enumerate(bufs):
        np.testing.assert_array_equal(b.read(np.uint32), np.full(N, (i + 1) * 9, np.uint32))


def test_hazards_barrier_covers_earlier_segments(vk, exe):
    """a -> (b independent) -> reads a: one barrier (before the reader) orders the reader after both."""
    a, b, out = (vk.upload(np.full(N, v, np.uint32)) for v in (2, 5, 0))
    cb = vk.create_command_buffer(dependencies="hazards")
    with cb:
        cb.dispatch(exe, "scale", groups(N), (N, 3), (a,))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(N), (N, 7), (b,))
        cb.execution_barrier()
        cb.dispatch(exe, "add", groups(N), (N,), (a, b, out))
    vk.queue_execute(cb)
    assert cb.barriers == 1
    np.testing.assert_array_equal(out.read(np.uint32), np.full(N, 6 + 35, np.uint32))


def test_reusable_is_encoded_once(vk, exe):
    x = vk.upload(u32([1, 2, 3, 4]))
    cb = vk.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
    for _ in range(10):
        vk.queue_execute(cb)
    assert cb.encodings == 1
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 1024)


def test_binding_tables_encode_once_each_and_stay_cached(vk, exe):
    cb = vk.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (hal.slot(0),))
    assert cb.encodings == 0  # nothing can be encoded before the table is known
    tables = [(vk.upload(u32([k, k, k, k])),) for k in range(1, command_buffer.TABLE_CACHE + 3)]
    for table in tables[:3] * 3:
        vk.queue_execute(cb, binding_table=table)
    assert cb.encodings == 3
    for table in tables:  # more tables than the cache keeps: the oldest are encoded again
        vk.queue_execute(cb, binding_table=table)
    assert cb.encodings == len(tables)
    for k, (buf,) in enumerate(tables, 1):
        times = 4 if k <= 3 else 1
        np.testing.assert_array_equal(buf.read(np.uint32), u32([k] * 4) * 2**times)


def test_single_pass_with_slots_encodes_at_submit(vk, exe):
    cb = vk.create_command_buffer(mode="reusable", strategy="single_pass", binding_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 5), (hal.slot(0),))
    x = vk.upload(u32([1, 2, 3, 4]))
    vk.queue_execute(cb, binding_table=(x,))
    np.testing.assert_array_equal(x.read(np.uint32), u32([5, 10, 15, 20]))


def opcodes(stream):
    """The opcodes of an encoder stream, skipping their operands."""
    sizes = {encoder.OP_BIND_PIPELINE: 1, encoder.OP_BIND_SET: 2, encoder.OP_DISPATCH: 3, encoder.OP_FILL: 4,
             encoder.OP_UPDATE: 4, encoder.OP_COPY: 5, encoder.OP_BARRIER: 0}
    ops, i = [], 0
    while i < len(stream):
        op = stream[i]
        ops.append(op)
        if op == encoder.OP_PUSH_DESCRIPTORS:
            i += 3 + 3 * stream[i + 2]
        elif op == encoder.OP_PUSH_CONSTANTS:
            i += 3 + stream[i + 2]
        else:
            i += 1 + sizes[op]
    return ops


def test_state_vulkan_keeps_is_not_set_again(vk, exe):
    a, b, c = (vk.allocate(4 * N) for _ in range(3))
    cb = vk.create_command_buffer()
    cb.begin()
    cb.dispatch(exe, "scale", groups(N), (N, 3), (a,))
    cb.execution_barrier()
    cb.dispatch(exe, "scale", groups(N), (N, 3), (a,))  # same pipeline, descriptors and constants
    cb.execution_barrier()
    cb.dispatch(exe, "scale", groups(N), (N, 5), (a,))  # new constants only
    cb.execution_barrier()
    cb.dispatch(exe, "add", groups(N), (N,), (a, b, c))  # another layout: everything again
    cb.end()
    rec = command_buffer.Recording(vk)
    enc = encoder.Encoder(vk, rec.vkcb, cb._tracker, (), None)
    enc.segments(cb._head)
    P, D, C, X, B = (encoder.OP_BIND_PIPELINE, encoder.OP_PUSH_DESCRIPTORS, encoder.OP_PUSH_CONSTANTS,
                     encoder.OP_DISPATCH, encoder.OP_BARRIER)
    assert opcodes(enc.stream) == [P, D, C, X, B, X, B, C, X, B, P, D, C, X]
    rec.finalizer()


@pytest.mark.parametrize("push_descriptors", [True, False])
def test_python_encoder_records_what_the_native_one_does(vk, fresh, push_descriptors, monkeypatch, request):
    if push_descriptors and not vk.capabilities.supports_push_descriptor:
        pytest.skip("push descriptors are off here (no VK_KHR_push_descriptor, or HAL_VULKAN_DISABLE_PUSH_DESCRIPTOR)")
    monkeypatch.delenv("HAL_VULKAN_DISABLE_NATIVE_ENCODER", raising=False)  # this test wants both
    native_module.load.cache_clear()
    request.addfinalizer(native_module.load.cache_clear)  # later devices follow the environment again
    results = []
    for native in (True, False):
        dev = fresh(supports_push_descriptor=push_descriptors)
        if native:
            assert dev.native is not None, "the native encoder did not build here (is a C compiler installed?)"
        else:
            dev.native = None
        exe = dev.load_executable(kernels.SOURCE)
        a = dev.upload(np.arange(N, dtype=np.uint32))
        b, out = dev.allocate(4 * N), dev.allocate(4 * N)
        cb = dev.create_command_buffer()
        with cb:
            cb.fill_buffer(b, np.uint16(0x0102))
            cb.update_buffer(hal.ref(a, 16, 16), u32([7, 8, 9, 10]))
            cb.execution_barrier()
            cb.dispatch(exe, "add", groups(N), (N,), (a, b, out))
            cb.execution_barrier()
            cb.dispatch(exe, "xor_copy", groups(N), (N, -1), (out, b))
            cb.copy_buffer(hal.ref(a, 0, 64), hal.ref(a, 512, 64))
        dev.queue_execute(cb)
        results.append([buf.read(np.uint32) for buf in (a, b, out)])
    for got_native, got_python in zip(*results):
        np.testing.assert_array_equal(got_native, got_python)
    updated = np.arange(N, dtype=np.uint32)
    updated[4:8] = [7, 8, 9, 10]
    out = updated + np.uint32(0x01020102)
    final_a = updated.copy()
    final_a[128:144] = updated[:16]
    for got, want in zip(results[0], (final_a, ~out, out)):
        np.testing.assert_array_equal(got, want)
