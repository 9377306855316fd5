"""Command buffer lifecycle: begin, end, submit, one_shot and reusable modes, reset, creation arguments."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.hal.validation_helpers import finish_and_check, recording
from tests.kernels import u32

RECORDERS = {
    "fill_buffer": lambda cb, buf, exe: cb.fill_buffer(buf, b"\x01"),
    "update_buffer": lambda cb, buf, exe: cb.update_buffer(buf, b"\x01\x02\x03\x04"),
    "copy_buffer": lambda cb, buf, exe: cb.copy_buffer(hal.ref(buf, 0, 8), hal.ref(buf, 8, 8)),
    "execution_barrier": lambda cb, buf, exe: cb.execution_barrier(),
    "dispatch": lambda cb, buf, exe: cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (buf,)),
}


@pytest.mark.parametrize("what", list(RECORDERS))
def test_recording_before_begin(host, exe, what):
    buf = host.allocate(16)
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError,
                       match=rf"command 0 \({what}\): the command buffer is initial, not recording; "
                             r"call begin\(\) first"):
        RECORDERS[what](cb, buf, exe)
    cb.begin()
    finish_and_check(host, cb, untouched=[buf])


@pytest.mark.parametrize("what", list(RECORDERS))
def test_recording_after_end(host, exe, what):
    buf, first = host.allocate(16), host.allocate(16)
    cb = recording(host)
    cb.fill_buffer(first, np.uint32(5))
    cb.end()
    with pytest.raises(hal.ValidationError,
                       match=rf"command 1 \({what}\): the command buffer is ended, not recording; call reset\(\)"):
        RECORDERS[what](cb, buf, exe)
    assert len(cb.commands) == 1
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(first.read(np.uint32), np.full(4, 5, np.uint32))
    assert not buf.read().any()


def test_begin_twice(host):
    cb = recording(host)
    with pytest.raises(hal.ValidationError, match=r"begin: the command buffer is recording; call reset\(\)"):
        cb.begin()
    finish_and_check(host, cb)


def test_begin_after_end(host):
    cb = recording(host)
    cb.end()
    with pytest.raises(hal.ValidationError, match=r"begin: the command buffer is ended; call reset\(\)"):
        cb.begin()


def test_end_twice(host):
    buf = host.allocate(16)
    cb = recording(host)
    cb.fill_buffer(buf, np.uint32(6))
    cb.end()
    with pytest.raises(hal.ValidationError, match=r"end: the command buffer is ended, not recording"):
        cb.end()
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 6, np.uint32))


def test_end_before_begin(host):
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError, match=r"end: the command buffer is initial, not recording"):
        cb.end()
    cb.begin()
    finish_and_check(host, cb)


def test_submit_before_end(host):
    buf = host.allocate(16)
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: the command buffer is initial; call end\(\) before submitting"):
        host.queue_execute(cb)
    cb.begin()
    cb.fill_buffer(buf, np.uint32(1))
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: the command buffer is recording; call end\(\) before submitting"):
        host.queue_execute(cb)
    host.synchronize()
    assert not buf.read().any()
    finish_and_check(host, cb)  # the one_shot buffer still has its one submission
    np.testing.assert_array_equal(buf.read(np.uint32), np.ones(4, np.uint32))


def test_one_shot_submitted_twice(host):
    buf = host.allocate(16)
    cb = host.create_command_buffer(mode="one_shot")
    with cb:
        cb.fill_buffer(buf, np.uint32(1))
    host.queue_execute(cb)
    with pytest.raises(hal.ValidationError, match=r"queue_execute: a one_shot command buffer runs once"):
        host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.ones(4, np.uint32))


def test_reusable_submitted_many_times(host, exe):
    x = host.upload(u32([1, 2, 3, 4]))
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(4, 2), bindings=(x,))
    for _ in range(3):
        host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), u32([8, 16, 24, 32]))


def test_queue_execute_command_buffer_of_another_device(host, make_device):
    other = make_device()
    cb = other.create_command_buffer()
    with cb:
        pass
    with pytest.raises(hal.ValidationError,
                       match=r"queue_execute: expected a command buffer created by this device"):
        host.queue_execute(cb)


@pytest.mark.parametrize("kwargs, shown", [
    ({"mode": "twice"}, "mode must be"), ({"strategy": "eager"}, "strategy must be"),
    ({"dependencies": "none"}, "dependencies must be"), ({"binding_capacity": -1}, "binding_capacity must be"),
    ({"binding_capacity": 1.5}, "binding_capacity must be"), ({"validate": 1}, "validate must be"),
])
def test_create_command_buffer_bad_arguments(host, kwargs, shown):
    with pytest.raises(hal.ValidationError, match=shown):
        host.create_command_buffer(**kwargs)


# Dependency graph, reset.
def test_dependency_graph_before_end(host):
    cb = host.create_command_buffer()
    with pytest.raises(hal.ValidationError,
                       match=r"dependency_graph: the command buffer is initial; call end\(\) first"):
        cb.dependency_graph()
    cb.begin()
    cb.fill_buffer(host.allocate(16), b"\x01")
    with pytest.raises(hal.ValidationError,
                       match=r"dependency_graph: the command buffer is recording; call end\(\) first"):
        cb.dependency_graph()
    cb.end()
    assert list(cb.dependency_graph().nodes) == [0]


def test_reset_then_rerecord(host):
    first, second = host.allocate(16), host.allocate(16)
    cb = host.create_command_buffer(mode="one_shot")
    with cb:
        cb.fill_buffer(first, np.uint32(1))
    host.queue_execute(cb)
    host.synchronize()  # resetting a pending command buffer is another test
    cb.reset()
    assert cb.state == "initial"
    with cb:
        cb.fill_buffer(second, np.uint32(2))
    host.queue_execute(cb)  # a reset one_shot buffer may run once more
    host.synchronize()
    np.testing.assert_array_equal(first.read(np.uint32), np.full(4, 1, np.uint32))
    np.testing.assert_array_equal(second.read(np.uint32), np.full(4, 2, np.uint32))
    assert len(cb.commands) == 1


def test_reset_while_recording(host):
    buf = host.allocate(16)
    cb = recording(host)
    cb.fill_buffer(buf, np.uint32(1))
    cb.reset()
    cb.begin()
    finish_and_check(host, cb, untouched=[buf])


def test_reset_of_a_pending_command_buffer_does_not_change_the_pending_work(host):
    """Vulkan forbids resetting a pending command buffer; hal must refuse it (ValidationError) or let the
    pending submission run what was recorded when it was submitted."""
    gate = host.create_semaphore(0)
    buf = host.allocate(16)
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(buf, np.uint32(1))
    host.queue_execute(cb, wait=[(gate, 1)])
    try:
        cb.reset()
    except hal.ValidationError:
        pass
    else:
        with cb:
            cb.fill_buffer(buf, np.uint32(2))
    gate.signal(1)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 1, np.uint32))
