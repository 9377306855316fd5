"""Regions on every backend: while_nonzero and if_nonzero over a uint32 flag, nested, around other commands,
with slots and constant slots, in both strategies and dependency modes, and in queue order with other work.

A loop's body decrements its flag with `add` (flag + 0xFFFFFFFF), so a flag of k runs the body k times; `mark`
shows how often a body ran.
"""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.kernels import u32

WORDS = 16


@pytest.fixture
def minus_one(dev):
    return dev.upload(u32([0xFFFFFFFF]))


def decrement(cb, exe, flag, minus_one):
    cb.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_a_loop_runs_while_its_flag_is_non_zero(dev, exe, minus_one, strategy, dependencies):
    out, flag = dev.upload(np.zeros(WORDS, np.uint32)), dev.upload(u32([0]))
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy, dependencies=dependencies)
    with cb:
        cb.dispatch(exe, "mark", (1, 1, 1), (1000,), (out,))  # before the loop
        with cb.while_nonzero(flag):
            cb.dispatch(exe, "mark", (2, 1, 1), (1,), (out,))
            cb.execution_barrier()
            decrement(cb, exe, flag, minus_one)
        cb.dispatch(exe, "xor_copy", (1, 1, 1), (2, 0), (out, hal.ref(out, 32, 8)))  # after it: sees the loop's
    total = 0
    for submissions, k in enumerate((3, 0, 1, 10), start=1):
        flag.write(u32([k]))
        dev.queue_execute(cb)
        total += k
        words = out.read(np.uint32)
        np.testing.assert_array_equal(words[:2], [1000 * submissions + total, total])
        np.testing.assert_array_equal(words[8:10], words[:2])
        assert flag.read(np.uint32)[0] == 0


def test_if_runs_once_or_not_at_all(dev, exe):
    out, flag = dev.upload(np.zeros(WORDS, np.uint32)), dev.upload(u32([7]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        with cb.if_nonzero(flag):
            cb.dispatch(exe, "mark", (3, 1, 1), (1,), (out,))
    dev.queue_execute(cb)
    flag.write(u32([0]))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(out.read(np.uint32)[:4], [1, 1, 1, 0])
    assert flag.read(np.uint32)[0] == 0


def test_nested_regions(dev, exe, minus_one):
    out = dev.upload(np.zeros(WORDS, np.uint32))
    outer, inner, inner_start, enabled = (dev.upload(u32([v])) for v in (3, 0, 4, 1))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        with cb.while_nonzero(outer):
            cb.copy_buffer(inner_start, inner)
            cb.execution_barrier()
            with cb.while_nonzero(inner):
                with cb.if_nonzero(enabled):
                    cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
                decrement(cb, exe, inner, minus_one)
            decrement(cb, exe, outer, minus_one)
    dev.queue_execute(cb)
    assert out.read(np.uint32)[0] == 12
    graph = cb.dependency_graph()
    assert [graph.nodes[n]["kind"] for n in graph] == ["while_nonzero"]
    body = graph.nodes[0]["body"]
    assert [body.nodes[n]["kind"] for n in body] == ["copy", "while_nonzero", "dispatch"]
    assert [body.nodes[1]["body"].nodes[n]["kind"] for n in body.nodes[1]["body"]] == ["if_nonzero", "dispatch"]


def test_condition_and_constants_through_slots(dev, exe, minus_one):
    out = dev.upload(np.zeros(WORDS, np.uint32))
    def flags(k):  # the flag at byte 256, an offset every device's storage alignment allows
        return dev.upload(u32([0] * 64 + [k]))

    first = flags(5)
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2, constant_capacity=1)
    with cb:
        with cb.while_nonzero(hal.slot(0, 256)):
            cb.dispatch(exe, "mark", (1, 1, 1), (hal.constant_slot(0),), (out,))
            cb.execution_barrier()
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (hal.slot(0, 256, 4), hal.slot(1), hal.slot(0, 256, 4)))
    dev.queue_execute(cb, binding_table=(first, minus_one), constants=(10,))  # 5 times 10
    dev.queue_execute(cb, binding_table=(flags(3), minus_one), constants=(100,))  # 3 times 100
    dev.queue_execute(cb, binding_table=(first, minus_one), constants=(7,))  # its flag is 0 now
    assert out.read(np.uint32)[0] == 350


def test_regions_keep_queue_order_and_semaphores(dev, exe, minus_one):
    out, flag = dev.upload(np.zeros(WORDS, np.uint32)), dev.upload(u32([4]))
    loop = dev.create_command_buffer(mode="reusable")
    with loop:
        with loop.while_nonzero(flag):
            loop.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
            loop.execution_barrier()
            decrement(loop, exe, flag, minus_one)
    after = dev.create_command_buffer(mode="reusable")
    with after:
        after.dispatch(exe, "scale", (1, 1, 1), (1, 10), (out,))
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    dev.queue_execute(loop, wait=[(gate, 1)], signal=[(done, 1)])
    dev.queue_execute(after)  # after the loop, though the loop waits for the host
    gate.signal(1)
    done.wait(1, timeout=30)
    dev.synchronize()
    assert out.read(np.uint32)[0] == 40

