"""Vulkan command buffers: barriers only where dependencies cross, encodings reused per binding table,
state not set twice, and push descriptors and descriptor sets recording the same thing."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip
from tests.kernels import groups

backend_or_skip("vulkan")

from backends.vulkan import command_buffer, descriptors

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
        seen[deps] = cb.emitter.counts["barriers"]
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
    assert cb.emitter.counts["barriers"] == 1
    np.testing.assert_array_equal(out.read(np.uint32), np.full(N, 6 + 35, np.uint32))


def test_reusable_is_encoded_once(vk, exe):
    x = vk.upload(u32([1, 2, 3, 4]))
    cb = vk.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
    for _ in range(10):
        vk.queue_execute(cb)
    assert cb.emitter.encodings == 1
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 1024)


def test_binding_tables_encode_once_each_and_stay_cached(vk, exe):
    cb = vk.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (hal.slot(0),))
    assert cb.emitter.encodings == 0  # nothing can be encoded before the table is known
    tables = [(vk.upload(u32([k, k, k, k])),) for k in range(1, command_buffer.TABLE_CACHE + 3)]
    for table in tables[:3] * 3:
        vk.queue_execute(cb, binding_table=table)
    assert cb.emitter.encodings == 3
    for table in tables:  # more tables than the cache keeps: the oldest are encoded again
        vk.queue_execute(cb, binding_table=table)
    assert cb.emitter.encodings == len(tables)
    for k, (buf,) in enumerate(tables, 1):
        times = 4 if k <= 3 else 1
        np.testing.assert_array_equal(buf.read(np.uint32), u32([k] * 4) * 2**times)


def test_constant_values_encode_once_each_and_stay_cached(vk, exe):
    cb = vk.create_command_buffer(mode="reusable", constant_capacity=2)
    x = vk.upload(u32([1, 1, 1, 1]))
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, hal.constant_slot(1)), (x,))
    assert cb.emitter.encodings == 0  # nothing can be encoded before the values are known
    for k in (2, 3, 2, 3):
        vk.queue_execute(cb, constants=(0, k))
    assert cb.emitter.encodings == 2
    vk.queue_execute(cb, constants=(7, np.uint32(2)))  # slot 0 is read by nothing; the same words for slot 1
    vk.queue_execute(cb, constants=(0, 1.0))  # another word: float32 1.0 is 0x3F800000
    assert cb.emitter.encodings == 3
    assert cb.emitter.token is None  # values come with every submit: never the one-submit path
    np.testing.assert_array_equal(x.read(np.uint32), u32([72] * 4) * np.uint32(0x3F800000))


def test_the_encodings_kept_are_the_most_recently_used(vk, exe):
    cb = vk.create_command_buffer(mode="reusable", constant_capacity=1)
    x = vk.upload(u32([1, 1, 1, 1]))
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, hal.constant_slot(0)), (x,))
    values = range(1, command_buffer.TABLE_CACHE + 1)
    for k in values:
        vk.queue_execute(cb, constants=(k,))
    vk.queue_execute(cb, constants=(1,))  # the oldest, used again: now the most recent
    vk.queue_execute(cb, constants=(99,))  # evicts the least recently used: 2
    assert cb.emitter.encodings == command_buffer.TABLE_CACHE + 1
    vk.queue_execute(cb, constants=(1,))
    assert cb.emitter.encodings == command_buffer.TABLE_CACHE + 1
    vk.queue_execute(cb, constants=(2,))
    assert cb.emitter.encodings == command_buffer.TABLE_CACHE + 2
    expected = u32([1] * 4)
    for k in [*values, 1, 99, 1, 2]:
        expected = expected * np.uint32(k)
    np.testing.assert_array_equal(x.read(np.uint32), expected)


def test_single_pass_with_slots_encodes_at_submit(vk, exe):
    cb = vk.create_command_buffer(mode="reusable", strategy="single_pass", binding_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 5), (hal.slot(0),))
    x = vk.upload(u32([1, 2, 3, 4]))
    vk.queue_execute(cb, binding_table=(x,))
    np.testing.assert_array_equal(x.read(np.uint32), u32([5, 10, 15, 20]))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_state_vulkan_keeps_is_not_set_again(vk, exe, strategy):
    """Both where calls are made at once and where the call stream's worker makes them (single_pass), which decides
    there what to set (backends.vulkan.calls.encode_dispatch)."""
    a, b, c = (vk.allocate(4 * N) for _ in range(3))
    cb = vk.create_command_buffer(strategy=strategy)
    cb.begin()
    cb.dispatch(exe, "scale", groups(N), (N, 3), (a,))
    cb.execution_barrier()
    cb.dispatch(exe, "scale", groups(N), (N, 3), (a,))  # same pipeline, descriptors and constants
    cb.execution_barrier()
    cb.dispatch(exe, "scale", groups(N), (N, 5), (a,))  # new constants only
    cb.execution_barrier()
    cb.dispatch(exe, "add", groups(N), (N,), (a, b, c))  # another layout: everything again
    cb.end()
    # bind, push descriptors, push constants, dispatch | barrier, dispatch | barrier, constants, dispatch |
    # barrier, bind, descriptors, constants, dispatch
    assert cb.emitter.counts == {"barriers": 3, "pipelines": 2, "descriptor_sets": 2, "constant_pushes": 3,
                                 "dispatches": 4}


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_dispatches_with_and_without_c_arguments_share_the_state_they_set(vk, exe, strategy):
    """A dispatch whose record holds its arguments as C data and one whose arguments are resolved as it is encoded
    (a numpy constant) keep one account of what the command buffer holds: neither sets again what the other set."""
    start = np.arange(N, dtype=np.uint32)
    a = vk.upload(start)
    cb = vk.create_command_buffer(strategy=strategy)
    with cb:
        cb.dispatch(exe, "scale", groups(N), (N, 3), (a,))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(N), (N, np.uint32(3)), (a,))  # resolved: nothing new
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(N), (np.uint32(N), np.uint32(5)), (a,))  # resolved: new constants
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(N), (N, 5), (a,))  # C arguments: as set
    assert [c.c_arguments is not None for c in cb.program.commands] == [True, False, False, True]
    vk.queue_execute(cb)
    assert cb.emitter.counts == {"barriers": 3, "pipelines": 1, "descriptor_sets": 1, "constant_pushes": 2,
                                 "dispatches": 4}
    np.testing.assert_array_equal(a.read(np.uint32), start * np.uint32(3 * 3 * 5 * 5))


def test_push_descriptors_and_descriptor_sets_record_the_same(vk, fresh):
    if not vk.capabilities.supports_push_descriptor:
        pytest.skip("push descriptors are off here (no VK_KHR_push_descriptor, or HAL_VULKAN_DISABLE_PUSH_DESCRIPTOR)")
    results = []
    for push_descriptors in (True, False):
        dev = fresh(supports_push_descriptor=push_descriptors)
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
    for got_pushed, got_sets in zip(*results):
        np.testing.assert_array_equal(got_pushed, got_sets)
    updated = np.arange(N, dtype=np.uint32)
    updated[4:8] = [7, 8, 9, 10]
    out = updated + np.uint32(0x01020102)
    final_a = updated.copy()
    final_a[128:144] = updated[:16]
    for got, want in zip(results[0], (final_a, ~out, out)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_more_dispatches_than_a_descriptor_pool_holds_sets(fresh, strategy):
    """With descriptor sets, every dispatch whose bindings change takes a new set; past SETS_PER_POOL the arena opens
    another pool (a driver that enforces maxSets, as NVIDIA's does, refuses a set from a full pool); single_pass
    writes and binds them as it records."""
    dev = fresh(supports_push_descriptor=False)
    assert not dev.push_descriptors
    exe = dev.load_executable(kernels.SOURCE)
    start = np.arange(N, dtype=np.uint32)
    a, b = dev.upload(start), dev.upload(np.zeros(N, np.uint32))
    steps = descriptors.SETS_PER_POOL + 44
    cb = dev.create_command_buffer(strategy=strategy)
    with cb:
        for i in range(steps):  # from a to b, then back: the bindings change at every dispatch
            source, target = (a, b) if i % 2 == 0 else (b, a)
            cb.dispatch(exe, "xor_copy", groups(N), (N, i), (source, target))
            cb.execution_barrier()
    dev.queue_execute(cb)
    assert cb.emitter.counts["descriptor_sets"] == steps
    want = [start, np.zeros(N, np.uint32)]
    for i in range(steps):
        want[(i + 1) % 2] = want[i % 2] ^ np.uint32(i)
    np.testing.assert_array_equal(a.read(np.uint32), want[0])
    np.testing.assert_array_equal(b.read(np.uint32), want[1])


def test_an_unchanged_resubmission_is_one_submit_until_something_is_let_go(fresh):
    """A reusable command buffer submitted again as it was holds the device's resubmit token (one vkQueueSubmit,
    no checks); a release sends the next submission the general way, which frees it, then one submit again."""
    dev = fresh()
    exe = dev.load_executable(kernels.SOURCE)
    x = dev.upload(u32([1, 2, 3, 4]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
    dev.queue_execute(cb)
    assert cb.emitter.token is dev.resubmit_token
    other = dev.create_command_buffer(mode="reusable")
    with other:
        other.dispatch(exe, "scale", (1, 1, 1), (4, 1), (x,))
    dev.queue_execute(other)
    del other
    gc.collect()
    assert dev.lifetime.pending and cb.emitter.token is not dev.resubmit_token
    dev.synchronize()
    dev.queue_execute(cb)
    assert not dev.lifetime.pending and cb.emitter.token is dev.resubmit_token
    worker = threading.Thread(target=dev.queue_execute, args=(cb,))  # another thread takes the same path
    worker.start()
    worker.join()
    assert cb.emitter.encodings == 1
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 8)
    dev.close()
    with pytest.raises(hal.ValidationError, match="closed"):
        dev.queue_execute(cb)


def test_the_same_binding_table_again_is_one_submit_until_a_buffer_is_released(fresh):
    """Submitted again with the very table it was last submitted with, a reusable command buffer with slots holds
    the resubmit token too: one vkQueueSubmit of that table's VkCommandBuffer. Another table takes the general
    path (its own encoding, then the token); a released buffer revokes the token, so the release is reported."""
    dev = fresh()
    exe = dev.load_executable(kernels.SOURCE)
    x, y = dev.upload(u32([1, 2, 3, 4])), dev.upload(u32([5, 6, 7, 8]))
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (hal.slot(0),))
    first, second = (x,), (y,)
    for table in (first, first, second, second, first, first):
        dev.queue_execute(cb, binding_table=table)
        assert cb.emitter.token is dev.resubmit_token
    assert cb.emitter.encodings == 2
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 16)
    np.testing.assert_array_equal(y.read(np.uint32), u32([5, 6, 7, 8]) * 4)
    y.release()
    assert cb.emitter.token is not dev.resubmit_token
    with pytest.raises(hal.ValidationError, match=r"binding_table\[0\] is a released buffer"):
        dev.queue_execute(cb, binding_table=second)
    dev.queue_execute(cb, binding_table=first)
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 32)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_static_indirect_guards_run_first_with_one_barrier(vk, exe, strategy):
    """deferred: the guards of the static dispatch_indirect commands run at the start, one barrier after them all
    (not a guard and a barrier before each); single_pass, which encodes as it records, guards each in place."""
    out = vk.upload(np.zeros(16, np.uint32))
    params = vk.upload(u32([2, 1, 1, 3, 1, 1, 1, 1, 1]))
    cb = vk.create_command_buffer(mode="reusable", strategy=strategy)
    with cb:
        for i in range(3):
            if i:
                cb.execution_barrier()
            cb.dispatch_indirect(exe, "mark", hal.ref(params, 12 * i, 12), constants=(1,), bindings=(out,))
    vk.queue_execute(cb)
    vk.queue_execute(cb)
    expected = np.zeros(16, np.uint32)
    expected[:2] += 2
    expected[:3] += 2
    expected[:1] += 2
    np.testing.assert_array_equal(out.read(np.uint32), expected)
    counts = cb.emitter.counts
    guards = 1 if strategy == "deferred" else 3
    assert counts["barriers"] == 2 + guards + 1  # the chain's, the guards', the fault record's
    assert counts["pipelines"] == (2 if strategy == "deferred" else 6)
