"""Foreign work in command buffers (issue 50, items 1 and 3; hal.calls), on every backend: a call's function gets the
backend's own context (host: numpy views; Vulkan: the VkCommandBuffer and the VkBuffers, here recording
vkCmdCopyBuffer as a library would; CUDA: a stream being captured and device addresses, here cuMemcpyDtoDAsync),
runs in order between hal's commands, through binding tables, nested command buffers and regions; its bindings race
and depend like a dispatch's; bad arguments are refused and leave the command buffer usable; a function that raises
fails where the backend called it."""

from __future__ import annotations

import numpy as np
import pytest

import hal

WORDS = 16


def copier(dev: hal.Device):
    """A call's function copying binding 0 to binding 1 with the backend's own means."""
    if dev.driver == "host":
        def copy(ctx):
            ctx.binding(1, np.uint32)[:] = ctx.binding(0, np.uint32)
        return copy
    if dev.driver == "cuda":
        from cuda.bindings import driver

        def enqueue(ctx):  # as a CUDA library would: its own driver calls on the stream hal captures
            result, = driver.cuMemcpyDtoDAsync(ctx.pointer(1), ctx.pointer(0), ctx.size(0), driver.CUstream(ctx.stream))
            assert result == driver.CUresult.CUDA_SUCCESS, result
        return enqueue
    import vulkan as vk

    def record(ctx):  # as a Vulkan library would: its own vkCmd* calls into hal's VkCommandBuffer
        (source, source_offset, size), (target, target_offset, _) = ctx.buffer(0), ctx.buffer(1)
        region = vk.ffi.new("VkBufferCopy*", {"srcOffset": source_offset, "dstOffset": target_offset, "size": size})
        vk.lib.vkCmdCopyBuffer(vk.ffi.cast("VkCommandBuffer", ctx.command_buffer), vk.ffi.cast("VkBuffer", source),
                               vk.ffi.cast("VkBuffer", target), 1, region)
    return record


@pytest.fixture
def calls(dev):
    if not dev.capabilities.supports_foreign_calls:
        cb = dev.create_command_buffer()
        cb.begin()
        with pytest.raises(hal.UnsupportedError, match="records no foreign calls"):
            cb.call(lambda ctx: None, ())
        pytest.skip(f"the {dev.driver} device records no foreign calls yet (refused when recorded: checked)")
    return copier(dev)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_a_call_runs_in_order_between_dispatches(dev, exe, calls, dependencies, strategy):
    x = dev.upload(np.arange(WORDS, dtype=np.uint32))
    y = dev.allocate(4 * WORDS)
    cb = dev.create_command_buffer(mode="reusable", dependencies=dependencies, strategy=strategy)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (WORDS, 3), (x,))
        cb.execution_barrier()
        cb.call(calls, (x, y), reads=(0,))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", (1, 1, 1), (WORDS, 2), (y,))
    for _ in range(2):
        dev.queue_execute(cb)
    np.testing.assert_array_equal(y.read(np.uint32), np.arange(WORDS) * 9 * 2)
    assert [c.kind for c in cb.commands] == ["dispatch", "call", "dispatch"]
    assert sorted(cb.dependency_graph().edges) == [(0, 1), (1, 2)]


def test_slots_bind_a_call_s_buffers_at_each_submit(dev, calls):
    sources = [dev.upload(np.arange(WORDS, dtype=np.uint32) + k) for k in range(2)]
    targets = [dev.allocate(4 * WORDS) for _ in range(2)]
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.call(calls, (hal.slot(0), hal.slot(1)), reads=(0,))
    for k in (0, 1, 0):
        dev.queue_execute(cb, binding_table=(sources[k], targets[k]))
    for k in range(2):
        np.testing.assert_array_equal(targets[k].read(np.uint32), np.arange(WORDS) + k)


def test_a_call_in_a_nested_command_buffer_and_in_a_loop(dev, exe, calls):
    flag, minus_one = dev.upload(np.array([3], np.uint32)), dev.upload(np.array([0xFFFFFFFF], np.uint32))
    x = dev.upload(np.arange(WORDS, dtype=np.uint32))
    y = dev.allocate(4 * WORDS)
    inner = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with inner:
        inner.call(calls, (x, hal.slot(0)), reads=(0,))
    outer = dev.create_command_buffer(mode="reusable")
    with outer:
        with outer.while_nonzero(flag):
            outer.dispatch(exe, "scale", (1, 1, 1), (WORDS, 2), (x,))
            outer.execution_barrier()
            outer.execute_commands(inner, (y,))
            outer.execution_barrier()
            outer.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))
    dev.queue_execute(outer)
    np.testing.assert_array_equal(y.read(np.uint32), np.arange(WORDS) * 8)


def test_a_call_races_a_command_of_its_segment(dev, exe, calls):
    x, y = dev.upload(np.arange(WORDS, dtype=np.uint32)), dev.allocate(4 * WORDS)
    cb = dev.create_command_buffer()
    cb.begin()
    cb.dispatch(exe, "scale", (1, 1, 1), (WORDS, 3), (x,))
    with pytest.raises(hal.ValidationError, match=r"command 1 \(call\) reads .* command 0 \(dispatch\) writes"):
        cb.call(calls, (x, y), reads=(0,))
    cb.call(calls, (y, dev.allocate(4 * WORDS)), reads=(0,))  # no race: recorded
    cb.end()


@pytest.mark.parametrize("arguments, message", [
    (dict(fn=42), "fn must be callable"),
    (dict(bindings="x"), "bindings must be a sequence"),
    (dict(bindings=(np.zeros(4),)), r"bindings\[0\] must be a hal.Buffer"),
    (dict(reads=(2,)), r"reads holds 2, not an index of its 2 bindings"),
    (dict(reads=(0,), writes=(0, 1)), "each binding is in reads or in writes, once"),
    (dict(reads=(), writes=(1,)), "each binding is in reads or in writes, once"),
])
def test_bad_calls_are_refused_and_the_command_buffer_stays_usable(dev, calls, arguments, message):
    x, y = dev.upload(np.arange(WORDS, dtype=np.uint32)), dev.allocate(4 * WORDS)
    given = dict(fn=calls, bindings=(x, y))
    given.update(arguments)
    cb = dev.create_command_buffer()
    with cb:
        with pytest.raises(hal.ValidationError, match=message):
            cb.call(given.pop("fn"), given.pop("bindings"), **given)
        cb.call(calls, (x, y), reads=(0,))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(y.read(np.uint32), np.arange(WORDS))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_function_that_raises_fails_where_the_backend_calls_it(dev, calls, strategy):
    x = dev.upload(np.arange(WORDS, dtype=np.uint32))

    def broken(ctx):
        raise RuntimeError("the library refused")

    cb = dev.create_command_buffer(mode="reusable", strategy=strategy)  # (single_pass: a call is taken at end())
    cb.begin()
    cb.call(broken, (x,))
    with pytest.raises(hal.DeviceError, match=r"command 0 \(call\).*the library refused"):
        cb.end()  # Vulkan encodes at end(), CUDA captures there
        dev.queue_execute(cb)
        dev.synchronize()  # the host runs it
    cb.reset()
    with cb:
        cb.fill_buffer(x, np.uint32(7))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), np.full(WORDS, 7))


def test_constant_slots_reach_the_function_as_the_submission_s_values(dev, calls):
    seen = []
    x = dev.upload(np.arange(WORDS, dtype=np.uint32))
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=1)
    with cb:
        cb.call(lambda ctx: seen.append(ctx.constants), (x,), reads=(0,), constants=(7, hal.constant_slot(0)))
    for value in (1.5, 2, 2):
        dev.queue_execute(cb, constants=(value,))
    dev.synchronize()
    assert seen[-1] == (7, 2) and (7, 1.5) in seen  # (Vulkan and CUDA call it once for each new value)
    with pytest.raises(hal.ValidationError, match="constant slot 3, but the command buffer's constant_capacity is 1"):
        with dev.create_command_buffer(constant_capacity=1) as bad:
            bad.call(calls, (x, dev.allocate(4 * WORDS)), reads=(0,), constants=(hal.constant_slot(3),))
