"""execute_commands: what is refused, and that a refusal leaves the outer command buffer as it was."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels


@pytest.fixture
def exe(host):
    return host.load_executable(kernels.SOURCE)


def _inner(dev, **kwargs):
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=1, **kwargs)
    with cb:
        cb.fill_buffer(hal.slot(0, 0, 64), np.uint32(7))
    return cb


def test_refusals(host):
    inner = _inner(host)
    outer = host.create_command_buffer(binding_capacity=1)
    with pytest.raises(hal.ValidationError, match="not recording; call begin"):
        outer.execute_commands(inner, (host.allocate(64),))
    outer.begin()
    buf = host.allocate(64)
    with pytest.raises(hal.ValidationError, match="cannot execute itself"):
        outer.execute_commands(outer, (buf,))
    with pytest.raises(hal.ValidationError, match="expected a hal.CommandBuffer"):
        outer.execute_commands("cb", (buf,))
    recording = host.create_command_buffer(mode="reusable")
    recording.begin()
    with pytest.raises(hal.ValidationError, match="is recording; end\\(\\) it first"):
        outer.execute_commands(recording, ())
    one_shot = host.create_command_buffer()
    with one_shot:
        one_shot.fill_buffer(buf, np.uint8(1))
    with pytest.raises(hal.ValidationError, match="one_shot command buffer cannot be nested"):
        outer.execute_commands(one_shot, ())
    with pytest.raises(hal.ValidationError, match="uses slots 0..0; the binding_table has 0 entries"):
        outer.execute_commands(inner, ())
    with pytest.raises(hal.ValidationError, match="binding_table\\[0\\] must be a hal.Buffer"):
        outer.execute_commands(inner, (3,))
    with pytest.raises(hal.ValidationError, match="beyond the 32 bytes of binding_table\\[0\\]"):
        outer.execute_commands(inner, (hal.ref(buf, 32),))
    with pytest.raises(hal.ValidationError, match="uses slot 5, but the command buffer's binding_capacity is 1"):
        outer.execute_commands(inner, (hal.slot(5),))
    other = hal.create_device("host")
    try:
        with pytest.raises(hal.ValidationError, match="another device"):
            outer.execute_commands(_inner(other), (buf,))
    finally:
        other.close()
    assert outer.state == "recording"
    outer.end()
    assert outer.commands == ()


def test_a_refused_command_inside_leaves_the_outer_as_it_was(host, exe):
    inner = host.create_command_buffer(mode="reusable", binding_capacity=2)
    with inner:
        inner.fill_buffer(hal.slot(0, 0, 64), np.uint32(1))
        inner.execution_barrier()
        inner.copy_buffer(hal.slot(0, 0, 64), hal.slot(1, 0, 64))
    a = host.allocate(64)
    outer = host.create_command_buffer()
    outer.begin()
    outer.fill_buffer(a, np.uint32(2))
    small = host.allocate(32)
    with pytest.raises(hal.ValidationError, match="nested command buffer, its slot 1 is used at bytes \\[0, 64\\), "
                                                  "beyond the 32 bytes of binding_table\\[1\\]"):
        outer.execute_commands(inner, (a, small))
    with pytest.raises(hal.ValidationError, match="in the nested command buffer, command 1 \\(copy_buffer\\): source"):
        outer.execute_commands(inner, (a, a))  # a copy onto itself
    outer.end()
    assert [c.kind for c in outer.commands] == ["fill"]


def test_the_nested_commands_are_a_snapshot(host):
    inner = _inner(host)
    out = host.allocate(64)
    outer = host.create_command_buffer(mode="reusable")
    with outer:
        outer.execute_commands(inner, (out,))
    inner.reset()
    with inner:
        inner.fill_buffer(hal.slot(0, 0, 64), np.uint32(9))
    host.queue_execute(outer)
    host.synchronize()
    assert (out.read(np.uint32) == 7).all()


def test_released_buffers_and_regions(host, exe):
    buf = host.allocate(64)
    inner = host.create_command_buffer(mode="reusable")
    with inner:
        inner.fill_buffer(buf, np.uint32(1))
    outer = host.create_command_buffer()
    outer.begin()
    buf.release()
    with pytest.raises(hal.ValidationError, match="released buffer"):
        outer.execute_commands(inner)
    params = host.upload(kernels.u32([1, 1, 1]))
    static = host.create_command_buffer(mode="reusable")
    with static:
        static.dispatch_indirect(exe, "mark", params, (1,), (host.allocate(64),))
    flag = host.upload(kernels.u32([1]))
    with pytest.raises(hal.ValidationError, match="inside a region the nested command buffer may not hold static"):
        with outer.if_nonzero(flag):
            outer.execute_commands(static)
    assert outer.regions_open == 0
    outer.execute_commands(static)  # at the top level: fine
    outer.end()
    assert [c.kind for c in outer.commands] == ["dispatch"]


def test_static_counts_written_by_the_outer_command_buffer(host, exe):
    """The scratch sees only the nested commands: static counts written earlier in the outer one are refused too,
    before anything is recorded."""
    params, out = host.upload(kernels.u32([1, 1, 1])), host.allocate(64)
    inner = host.create_command_buffer(mode="reusable", binding_capacity=1)
    with inner:
        inner.update_buffer(out, kernels.u32([42]))
        inner.execution_barrier()
        inner.dispatch_indirect(exe, "mark", hal.slot(0, 0, 12), (1,), (out,))
    outer = host.create_command_buffer(binding_capacity=1)
    outer.begin()
    outer.update_buffer(params, kernels.u32([2, 1, 1]))
    with pytest.raises(hal.ValidationError, match="in the nested command buffer, command 1 \\(dispatch_indirect mark\\)"
                                                  ": its parameters .* are written by command 0"):
        outer.execute_commands(inner, (params,))
    outer.update_buffer(out, kernels.u32([7]))
    outer.end()
    assert [c.kind for c in outer.commands] == ["update", "update"]
    host.queue_execute(outer)
    host.synchronize()
    assert out.read(np.uint32)[0] == 7
