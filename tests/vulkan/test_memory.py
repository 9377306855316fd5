"""Vulkan memory: pooled sub-allocation, staging for host access, out-of-memory, and no leaks."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip

backend_or_skip("vulkan")

from backends.vulkan import memory
from backends.vulkan.recording import KEEP

pytestmark = pytest.mark.vulkan


def test_small_buffers_share_a_few_allocations(fresh):
    dev = fresh()
    probe = dev.allocate(4)
    probe.read()  # the staging buffer exists from here on
    start = dev.memory_stats()
    bufs = [dev.allocate(256) for _ in range(3000)]
    stats = dev.memory_stats()
    assert stats["allocations"] - start["allocations"] <= 1, stats
    assert stats["used_bytes"] - start["used_bytes"] >= 3000 * 256
    for i, b in enumerate(bufs[:50]):  # each is its own memory
        b.write(np.full(64, i, np.uint32))
    for i, b in enumerate(bufs[:50]):
        np.testing.assert_array_equal(b.read(np.uint32), np.full(64, i, np.uint32))
    for b in bufs:
        b.release()
    dev.synchronize()
    assert dev.memory_stats()["used_bytes"] == start["used_bytes"]


def test_large_buffers_get_an_allocation_of_their_own(fresh):
    dev = fresh()
    start = dev.memory_stats()["allocations"]
    big = dev.allocate(memory.BLOCK_SIZE // 2)
    assert dev.memory_stats()["allocations"] == start + 1
    big.release()
    dev.synchronize()
    assert dev.memory_stats()["allocations"] == start


def test_block_allocator_reuses_and_coalesces_holes():
    block = memory.Block(None, 1024)
    a, b, c = block.take(100, 64), block.take(100, 64), block.take(100, 64)
    assert (a, b, c) == (0, 128, 256)
    block.give(b, 100)
    assert block.take(60, 16) == 112  # first fit: the hole is [100, 256), padding and all
    block.give(112, 60)
    block.give(a, 100)
    block.give(c, 100)
    assert block.used == 0 and block.starts == [0] and block.sizes == [1024]
    assert block.take(2048, 1) is None


def test_host_access_larger_than_the_staging_buffer(vk):
    n = (40 << 20) // 4 + 3  # more than one staging piece, and not a whole number of them
    data = np.random.default_rng(1).integers(0, 2**32, n, dtype=np.uint32)
    buf = vk.upload(data)
    np.testing.assert_array_equal(buf.read(np.uint32), data)
    np.testing.assert_array_equal(buf.read(np.uint32, offset=4 * (n - 5)), data[-5:])
    buf.write(np.arange(7, dtype=np.uint32), offset=4 * (n - 7))
    np.testing.assert_array_equal(buf.read(np.uint32)[-7:], np.arange(7, dtype=np.uint32))
    buf.release()


def test_empty_buffers(vk):
    buf = vk.allocate(0)
    assert buf.read().size == 0
    buf.write(b"")
    buf.release()


def test_out_of_memory_is_a_hal_error_and_the_device_goes_on(vk):
    heap = max(int(vk.memory.props.memoryHeaps[i].size) for i in range(vk.memory.props.memoryHeapCount))
    for size in (heap + 4096, 1 << 46):
        with pytest.raises(hal.OutOfMemoryError, match=rf"{size} bytes"):
            vk.allocate(size)
    buf = vk.upload(np.arange(4, dtype=np.uint32))
    np.testing.assert_array_equal(buf.read(np.uint32), np.arange(4, dtype=np.uint32))


def test_dedicated_allocations_can_be_turned_off(fresh, monkeypatch):
    assert fresh().memory.dedicated_allowed
    monkeypatch.setenv("HAL_VULKAN_DISABLE_DEDICATED_ALLOCATION", "1")
    dev = fresh()
    assert not dev.memory.dedicated_allowed
    buf = dev.upload(np.arange(16, dtype=np.uint32))
    np.testing.assert_array_equal(buf.read(np.uint32), np.arange(16, dtype=np.uint32))


def counts(dev):
    dev.synchronize()
    gc.collect()
    dev.lifetime.collect()
    return dev.live_objects(), dev.memory_stats()


def test_no_leaks_after_1000_buffers_command_buffers_and_executables(fresh):
    dev = fresh()
    exe = dev.load_executable(kernels.SOURCE)
    a, b = dev.upload(np.arange(256, dtype=np.uint32)), dev.upload(np.ones(256, np.uint32))
    warm = dev.allocate(64)  # leaves the pool's spare block in place, as it will be at the end
    warm.release()
    start = counts(dev)
    for i in range(1000):
        out = dev.allocate(1024)
        cb = dev.create_command_buffer(mode="reusable" if i % 2 else "one_shot", binding_capacity=i % 2)
        with cb:
            cb.fill_buffer(out, np.uint32(i))
            cb.execution_barrier()
            cb.dispatch(exe, "add", (4, 1, 1), (256,), (a, b, hal.slot(0) if i % 2 else out))
        dev.queue_execute(cb, binding_table=(out,) if i % 2 else ())
        if i % 100 == 0:
            dev.synchronize()
            np.testing.assert_array_equal(out.read(np.uint32), np.arange(256, dtype=np.uint32) + 1)
        out.release()
        del cb
    assert counts(dev) == start
    assert dev.command_pools.cached <= KEEP  # pools kept for reuse, reset: a bounded cache, not a leak
    source = hal.ExecutableSource.glsl({"scale": kernels.GLSL["scale"]}, [kernels.EXPORTS[1]])
    for _ in range(1000):
        dev.load_executable(source).release()
    assert counts(dev) == start
