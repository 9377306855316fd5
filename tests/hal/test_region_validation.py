"""Region checks: the condition reference, an empty region, a region left open at end(), a rejected command inside
(the region is dropped, the command buffer stays usable), and slot conditions checked at submit."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.hal.validation_helpers import finish_and_check, recording
from tests.kernels import u32


@pytest.fixture
def out(host):
    return host.upload(np.zeros(16, np.uint32))


@pytest.mark.parametrize("offset, length", [(2, 4), (0, 2)])
def test_misaligned_or_short_condition_refused(host, exe, offset, length):
    flag = host.allocate(16)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=rf"command 0 \(while_nonzero\): the condition at offset {offset} "
                                                  rf"with length {length} must be a 4-byte aligned uint32"):
        cb.while_nonzero(hal.ref(flag, offset, length))
    finish_and_check(host, cb)


def test_condition_needs_dispatch_storage_and_a_slot_within_capacity(host, exe):
    cb = recording(host, binding_capacity=1)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(if_nonzero\): the condition lacks "
                                                  r"BufferUsage.DISPATCH_STORAGE"):
        cb.if_nonzero(host.allocate(4, usage=hal.BufferUsage.TRANSFER))
    with pytest.raises(hal.ValidationError, match=r"command 0 \(while_nonzero\): condition uses slot 1, but the "
                                                  r"command buffer's binding_capacity is 1"):
        cb.while_nonzero(hal.slot(1))
    with pytest.raises(hal.ValidationError, match=r"condition must be a hal.Buffer"):
        cb.while_nonzero(np.zeros(1, np.uint32))
    finish_and_check(host, cb, table=(host.allocate(16),))


def test_an_empty_region_is_refused_and_dropped(host, exe, out):
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(while_nonzero\): the region holds no command"):
        with cb.while_nonzero(host.upload(u32([1]))):
            pass
    finish_and_check(host, cb)


def test_a_rejected_command_drops_its_region(host, exe, out):
    cb = recording(host)
    cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
    with pytest.raises(hal.ValidationError, match=r"command 1 \(dispatch mark\): 2 constants given"):
        with cb.while_nonzero(host.upload(u32([1]))):
            cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
            cb.dispatch(exe, "mark", (1, 1, 1), (1, 2), (out,))
    cb.execution_barrier()
    finish_and_check(host, cb)
    assert [c.kind for c in cb.commands] == ["dispatch", "fill"]
    assert out.read(np.uint32)[0] == 1


def test_end_with_a_region_open_is_refused(host, exe, out):
    cb = recording(host)
    scope = cb.if_nonzero(host.upload(u32([1])))
    scope.__enter__()
    cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
    with pytest.raises(hal.ValidationError, match=r"end: 1 region\(s\) still open"):
        cb.end()
    scope.__exit__(None, None, None)
    cb.end()
    host.queue_execute(cb)
    host.synchronize()
    assert out.read(np.uint32)[0] == 1


def test_slot_condition_checked_at_submit(host, exe, out):
    cb = host.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        with cb.if_nonzero(hal.slot(0, 8)):
            cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
    with pytest.raises(hal.ValidationError, match=r"queue_execute: command 0 \(if_nonzero\): the condition = slot 0"):
        host.queue_execute(cb, binding_table=(host.allocate(8),))
    host.queue_execute(cb, binding_table=(host.upload(u32([0, 0, 1])),))
    host.synchronize()
    assert out.read(np.uint32)[0] == 1


def test_a_region_is_one_command_of_its_level(host, exe, out):
    flag = host.upload(u32([1]))
    cb = host.create_command_buffer(dependencies="hazards")
    with cb:
        cb.fill_buffer(flag, np.uint32(1))
        with cb.if_nonzero(flag):
            cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
        cb.dispatch(exe, "mark", (1, 1, 1), (1,), (host.allocate(16),))  # touches nothing the region does
    program = cb.program
    assert program.regions == (1,) and [c.kind for c in program.commands] == ["fill", "if_nonzero", "dispatch"]
    region = program.commands[1]
    assert region.condition.buffer is flag and [c.kind for c in region.body.commands] == ["dispatch"]
    assert list(cb.dependency_graph().edges) == [(0, 1)]  # hazards: the region reads the flag the fill writes


def test_static_counts_inside_a_region_refused(host, exe, out):
    params = host.upload(u32([1, 1, 1]))
    cb = recording(host)
    with cb.if_nonzero(host.upload(u32([1]))):
        with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch_indirect mark\): inside while_nonzero or "
                                                      r"if_nonzero the counts must be dynamic=True"):
            cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,))
        cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,), dynamic=True)
    finish_and_check(host, cb)
    assert out.read(np.uint32)[0] == 1


def test_a_reset_inside_a_region_leaves_nothing_open(host, exe, out):
    cb = host.create_command_buffer()
    cb.begin()
    with cb.while_nonzero(host.upload(u32([0]))):
        cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
        cb.reset()  # leaving the block then closes nothing
    assert cb.state == "initial" and cb.regions_open == 0
    with pytest.raises(hal.ValidationError, match=r"no region is open here"):
        cb._close_region(True)
    cb.begin()
    cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
    cb.end()
    host.queue_execute(cb)
    host.synchronize()
    assert out.read(np.uint32)[0] == 1


def test_slots_bound_to_one_buffer_race_inside_a_region_at_submit(host, exe):
    cb = host.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        with cb.if_nonzero(host.upload(u32([1]))):
            cb.fill_buffer(hal.slot(0, 0, 16), np.uint32(1))
            cb.fill_buffer(hal.slot(1, 0, 16), np.uint32(2))
    a, b = host.allocate(16), host.allocate(16)
    with pytest.raises(hal.ValidationError, match=r"race: command 1 \(fill\) writes .* command 0 \(fill\)"):
        host.queue_execute(cb, binding_table=(a, a))
    host.queue_execute(cb, binding_table=(a, b))
    host.synchronize()
    assert a.read(np.uint32)[0] == 1 and b.read(np.uint32)[0] == 2
