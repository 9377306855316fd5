"""dispatch_indirect checks: the parameters reference (alignment, length, usage, slots), static counts that an
earlier command writes, races on the counts, and the recording left usable after a rejection."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.hal.validation_helpers import finish_and_check, recording
from tests.kernels import u32


@pytest.fixture
def out(host):
    return host.upload(np.zeros(16, np.uint32))


@pytest.mark.parametrize("offset, length", [(2, 12), (0, 8), (4, 11)])
def test_misaligned_or_short_parameters_refused(host, exe, out, offset, length):
    params = host.allocate(32)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=rf"command 0 \(dispatch_indirect mark\): parameters at offset "
                                                  rf"{offset} with length {length} must be 4-byte aligned and hold "
                                                  rf"at least 12 bytes"):
        cb.dispatch_indirect(exe, "mark", hal.ref(params, offset, length), constants=(1,), bindings=(out,))
    finish_and_check(host, cb)


def test_parameters_beyond_their_buffer_refused(host, exe, out):
    params = host.allocate(8)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch_indirect mark\): parameters at offset 0 "
                                                  r"with length 8"):
        cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,))
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch_indirect\): parameters range \[8, 20\)"):
        cb.dispatch_indirect(exe, "mark", hal.ref(host.allocate(16), 8, 12), constants=(1,), bindings=(out,))
    finish_and_check(host, cb)


def test_parameters_need_dispatch_storage_usage(host, exe, out):
    params = host.allocate(12, usage=hal.BufferUsage.TRANSFER)
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch_indirect mark\): parameters lack "
                                                  r"BufferUsage.DISPATCH_STORAGE"):
        cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,))
    finish_and_check(host, cb)


@pytest.mark.parametrize("wrong", [None, 3, np.zeros(3, np.uint32)], ids=["None", "int", "ndarray"])
def test_parameters_of_wrong_things_refused(host, exe, out, wrong):
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch_indirect\): parameters must be a hal.Buffer"):
        cb.dispatch_indirect(exe, "mark", wrong, constants=(1,), bindings=(out,))
    finish_and_check(host, cb)


def test_slot_beyond_capacity_and_dynamic_not_bool_refused(host, exe, out):
    cb = recording(host, binding_capacity=1)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch_indirect\): parameters uses slot 1, but the "
                                                  r"command buffer's binding_capacity is 1"):
        cb.dispatch_indirect(exe, "mark", hal.slot(1), constants=(1,), bindings=(out,))
    with pytest.raises(hal.ValidationError, match=r"dynamic must be True or False, got 1"):
        cb.dispatch_indirect(exe, "mark", hal.slot(0), constants=(1,), bindings=(out,), dynamic=1)
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch_indirect mark\): 0 constants given"):
        cb.dispatch_indirect(exe, "mark", hal.slot(0), bindings=(out,))
    finish_and_check(host, cb, table=(host.allocate(16),))


def test_static_counts_written_by_an_earlier_command_refused(host, exe, out):
    params = host.upload(u32([1, 1, 1, 1]))
    cb = recording(host, binding_capacity=1)
    cb.update_buffer(hal.ref(params, 4, 4), u32([2]))
    cb.execution_barrier()
    with pytest.raises(hal.ValidationError, match=r"command 1 \(dispatch_indirect mark\): its parameters \[0, 12\) "
                                                  r"are written by command 0 \(update\).*dynamic=True"):
        cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,))
    cb.fill_buffer(hal.slot(0, 0, 4), np.uint32(3))
    with pytest.raises(hal.ValidationError, match=r"written by command 1 \(fill\)"):
        cb.dispatch_indirect(exe, "mark", hal.slot(0, 0), constants=(1,), bindings=(out,))
    cb.dispatch_indirect(exe, "mark", hal.slot(0, 4), constants=(1,), bindings=(out,))  # bytes [4, 16): unwritten
    cb.execution_barrier()
    cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,), dynamic=True)
    cb.execution_barrier()
    finish_and_check(host, cb, table=(host.upload(u32([0, 1, 1, 1])),))


def test_a_later_writer_in_the_same_segment_races_with_the_counts(host, exe, out):
    params = host.upload(u32([1, 1, 1]))
    cb = recording(host)
    cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,))
    with pytest.raises(hal.ValidationError, match=r"race: command 1 \(update\) writes .* command 0 \(dispatch\) "
                                                  r"reads"):
        cb.update_buffer(params, u32([2, 2, 2]))
    finish_and_check(host, cb)


def test_slot_parameters_checked_at_submit(host, exe, out):
    cb = host.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.dispatch_indirect(exe, "mark", hal.slot(0, 4), constants=(1,), bindings=(out,))
    with pytest.raises(hal.ValidationError, match=r"queue_execute: command 0 \(dispatch\): parameters = slot 0 "
                                                  r"\(binding_table\[0\]\) range \[4, 16\)"):
        host.queue_execute(cb, binding_table=(host.allocate(12),))
    with pytest.raises(hal.ValidationError, match=r"parameters = slot 0 .*lacks BufferUsage.DISPATCH_STORAGE"):
        host.queue_execute(cb, binding_table=(host.allocate(16, usage=hal.BufferUsage.TRANSFER),))
    host.queue_execute(cb, binding_table=(host.upload(u32([0, 2, 1, 1])),))
    host.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32)[:3], [1, 1, 0])


def test_the_program_names_its_indirect_dispatches(host, exe, out):
    params = host.upload(u32([1, 1, 1]))
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "mark", (1, 1, 1), constants=(1,), bindings=(out,))
        cb.execution_barrier()
        cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(out,), dynamic=True)
    program = cb.program
    assert program.indirect == (1,)
    indirect = program.commands[1]
    assert indirect.parameters.buffer is params and indirect.parameters.length == 12 and indirect.dynamic
    assert indirect.accesses()[-1] == (indirect.parameters, False)
    assert program.commands[0].parameters is None and program.commands[0].accesses()[-1][1]
