"""cb.alloca on every backend: transients live for one execution, share memory where their lifetimes cannot
overlap (transient_bytes), and compute the same results in every strategy and dependency mode."""

from __future__ import annotations

import numpy as np
import pytest

import hal

N = 64
MODES = [("deferred", "barriers"), ("deferred", "hazards"), ("single_pass", "barriers"), ("single_pass", "hazards")]


def doubling_chain(cb, exe, source, target, steps: int):
    """source -> t1 = 2 source -> t2 = 2 t1 -> ... -> target: each transient dies two commands after it is made."""
    previous = source
    for _ in range(steps):
        t = cb.alloca(4 * N)
        cb.dispatch(exe, "add", (1, 1, 1), (N,), (previous, previous, t))
        cb.execution_barrier()
        previous = t
    cb.copy_buffer(previous, target)


@pytest.mark.parametrize("strategy,dependencies", MODES)
def test_a_chain_of_transients_computes_and_shares(dev, exe, strategy, dependencies):
    source, target = dev.upload(np.arange(N, dtype=np.uint32)), dev.allocate(4 * N)
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy, dependencies=dependencies)
    with cb:
        doubling_chain(cb, exe, source, target, 6)
    for _ in range(3):  # every execution starts over; the arena is reused
        dev.queue_execute(cb)
        np.testing.assert_array_equal(target.read(np.uint32), np.arange(N, dtype=np.uint32) << 6)
    if strategy == "deferred":
        assert cb.transient_bytes == 2 * 4 * N  # a transient is read by the command that makes the next only
    else:
        assert cb.transient_bytes == 6 * 4 * N  # single_pass: each its own memory


def test_transients_live_at_once_do_not_share(dev, exe):
    source, target = dev.upload(np.arange(N, dtype=np.uint32)), dev.allocate(4 * N)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        parts = [cb.alloca(4 * N) for _ in range(4)]
        for part in parts:  # one segment: all four are written at once
            cb.dispatch(exe, "add", (1, 1, 1), (N,), (source, source, part))
        cb.execution_barrier()
        cb.dispatch(exe, "add", (1, 1, 1), (N,), (parts[0], parts[1], parts[2]))
        cb.dispatch(exe, "add", (1, 1, 1), (N,), (parts[3], source, target))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(target.read(np.uint32), 3 * np.arange(N, dtype=np.uint32))
    assert cb.transient_bytes == 4 * 4 * N


def test_transients_in_a_loop_and_a_nested_command_buffer(dev, exe):
    source, target = dev.upload(np.arange(N, dtype=np.uint32)), dev.allocate(4 * N)
    flag = dev.upload(np.array([3], np.uint32), usage=hal.BufferUsage.DEFAULT | hal.BufferUsage.DISPATCH_STORAGE)
    piece = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with piece:  # target += 2 * target, through a transient of the piece
        scratch = piece.alloca(4 * N)
        piece.dispatch(exe, "add", (1, 1, 1), (N,), (hal.slot(0), hal.slot(0), scratch))
        piece.execution_barrier()
        piece.dispatch(exe, "add", (1, 1, 1), (N,), (scratch, hal.slot(0), hal.slot(0)))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.copy_buffer(source, target)
        cb.execution_barrier()
        with cb.while_nonzero(flag):
            t = cb.alloca(4 * N)
            cb.dispatch(exe, "add", (1, 1, 1), (N,), (target, target, t))
            cb.execution_barrier()
            cb.copy_buffer(t, target)
            cb.execution_barrier()
            cb.dispatch(exe, "scale", (1, 1, 1), (1, 0), (hal.ref(flag, 0, 4),))  # flag *= 0... then stop
        cb.execution_barrier()
        cb.execute_commands(piece, (target,))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(target.read(np.uint32), 3 * (np.arange(N, dtype=np.uint32) << 1))


def test_transients_are_refused_outside_their_command_buffer(dev, exe):
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    other = dev.create_command_buffer()
    with pytest.raises(hal.ValidationError, match=r"\(alloca\): the command buffer is initial"):
        cb.alloca(64)
    cb.begin()
    for bad, message in [(-4, "alloca: nbytes"), ("64", "alloca: nbytes"), (1 << 62, "alloca: nbytes")]:
        with pytest.raises(hal.ValidationError, match=message):
            cb.alloca(bad)
    t = cb.alloca(64)
    cb.fill_buffer(t, np.uint32(1))
    cb.fill_buffer(hal.slot(0), np.uint32(2))
    with pytest.raises(hal.ValidationError, match="transient_bytes: the command buffer is recording"):
        cb.transient_bytes  # noqa: B018
    cb.end()
    other.begin()
    with pytest.raises(hal.ValidationError, match=r"command 0 \(fill_buffer\): target is a transient \(cb.alloca\)"):
        other.fill_buffer(t, np.uint32(1))
    with pytest.raises(hal.ValidationError, match=r"binding_table\[0\] is a transient"):
        dev.queue_execute(cb, binding_table=(t.buffer,))
    with pytest.raises(hal.ValidationError, match="queue_fill: .*transient"):
        dev.queue_fill(t, np.uint32(1))
    for call in (t.buffer.read, lambda: t.buffer.write(b"1234"), t.buffer.release):
        with pytest.raises(hal.ValidationError, match="transient"):
            call()
    assert cb.transient_bytes == 64


def test_reset_and_one_shot_give_the_arena_back(dev, exe):
    dev.synchronize()
    before = dev.memory_stats()["used_bytes"]
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(cb.alloca(1 << 20), np.uint32(1))
    arena = cb.program.transients.arena
    assert arena.size == 1 << 20 and not arena.released
    dev.queue_execute(cb)
    cb.reset()
    assert arena.released
    once = dev.create_command_buffer()
    with once:
        once.fill_buffer(once.alloca(1 << 20), np.uint32(1))
    arena = once.program.transients.arena
    dev.queue_execute(once)
    assert arena.released  # after its one run
    dev.synchronize()
    assert dev.memory_stats()["used_bytes"] <= before  # (CUDA may free more: buffers of earlier tests)


def test_a_transient_bound_into_a_nested_command_buffer(dev, exe):
    piece = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with piece:
        piece.fill_buffer(hal.slot(0), np.uint32(5))
    target = dev.allocate(4 * N)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        t = cb.alloca(4 * N)
        cb.execute_commands(piece, (t,))
        cb.execution_barrier()
        cb.copy_buffer(t, target)
    dev.queue_execute(cb)
    np.testing.assert_array_equal(target.read(np.uint32), np.full(N, 5, np.uint32))
