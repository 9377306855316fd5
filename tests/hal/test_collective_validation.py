"""Collectives: what is refused when recorded, created or submitted, and what a rank sees when the group
breaks (host devices; the same checks run before any backend sees a command)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hal


@pytest.fixture
def ranks():
    devices = [hal.create_device("host") for _ in range(2)]
    comm = hal.create_communicator(devices)
    yield devices, comm
    comm.close()
    for d in devices:
        d.close()


def _recording(dev, **kwargs):
    cb = dev.create_command_buffer(**kwargs)
    cb.begin()
    return cb


def test_create_communicator_refusals():
    a, b = hal.create_device("host"), hal.create_device("host")
    with pytest.raises(hal.ValidationError, match="at least one device"):
        hal.create_communicator([])
    with pytest.raises(hal.ValidationError, match="appears twice"):
        hal.create_communicator([a, a])
    with pytest.raises(hal.ValidationError, match="not a hal.Device"):
        hal.create_communicator([a, "cuda:1"])
    with pytest.raises(hal.ValidationError, match="together"):
        hal.create_communicator([a], rank=0)
    with pytest.raises(hal.ValidationError, match="rank 2 is not below world 2"):
        hal.create_communicator([a], rank=2, world=2, rendezvous="/tmp/x")
    with pytest.raises(hal.ValidationError, match="this process's one device"):
        hal.create_communicator([a, b], rank=0, world=2, rendezvous="/tmp/x")
    with pytest.raises(hal.UnsupportedError, match="host devices of one process"):
        hal.create_communicator([a], rank=0, world=2, rendezvous="/tmp/x")
    b.close()
    with pytest.raises(hal.ValidationError, match="closed"):
        hal.create_communicator([a, b])
    a.close()


@pytest.mark.vulkan
def test_vulkan_has_no_collectives():
    from tests.conftest import open_device
    dev = open_device("vulkan")
    try:
        with pytest.raises(hal.UnsupportedError, match="no collectives"):
            hal.create_communicator([dev])
    finally:
        dev.close()


@pytest.mark.parametrize("call, message", [
    (lambda cb, c, x, y: cb.all_reduce("comm", x, y, np.float32), "hal.create_communicator"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, y, np.complex64), "dtype complex64 is not one of"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, y, "nonsense"), "not a numpy dtype"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, y, np.float32, "xor"), "op must be one of"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, y, np.int32, "avg"), "'avg' needs a floating dtype"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, hal.ref(y, 0, 32), np.float32), "target must hold 16 x float32"),
    (lambda cb, c, x, y: cb.all_reduce(c, hal.ref(x, 0, 6), hal.ref(y, 0, 6), np.float32), "whole number"),
    (lambda cb, c, x, y: cb.all_gather(c, x, y, np.float32), "target must hold 32 x float32"),
    (lambda cb, c, x, y: cb.reduce_scatter(c, x, hal.ref(y, 0, 48), np.float32), "source must hold 24"),
    (lambda cb, c, x, y: cb.all_reduce(c, hal.ref(x, 0, 32), hal.ref(x, 16, 32), np.float32), "overlap"),
    (lambda cb, c, x, y: cb.all_gather(c, hal.ref(x, 0, 32), hal.ref(x, 0, 32), np.float32), "target must hold"),
    (lambda cb, c, x, y: cb.all_reduce(c, hal.slot(0), y, np.float32), "slot of unknown length"),
    (lambda cb, c, x, y: cb.send(c, x, 2), "peer must be a rank in 0..1"),
    (lambda cb, c, x, y: cb.send(c, x, True), "peer must be a rank"),
    (lambda cb, c, x, y: cb.recv(c, y, 0), "cannot exchange with itself"),
    (lambda cb, c, x, y: cb.send_recv(c, x, 1, hal.ref(y, 0, 32), 1), "source must hold|target must hold"),
    (lambda cb, c, x, y: cb.broadcast(c, None, y, 0), "rank 0 is the root: give the source"),
    (lambda cb, c, x, y: cb.broadcast(c, x, y, 5), "root must be a rank in 0..1"),
    (lambda cb, c, x, y: cb.broadcast(c, x, y, None), "root must be a rank"),
    (lambda cb, c, x, y: cb.send(c, x, None), "peer must be a rank"),
    (lambda cb, c, x, y: cb.send_recv(c, x, 1, y, None), "source_peer must be a rank"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, None, np.float32), "give the target"),
    (lambda cb, c, x, y: cb.reduce_scatter(c, None, y, np.float32), "give the source"),
    (lambda cb, c, x, y: cb.send(c, None, 1), "give the source"),
    (lambda cb, c, x, y: cb.recv(c, None, 1), "give the target"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, y, None), "give the dtype"),
    (lambda cb, c, x, y: cb.all_reduce(c, x, 7, np.float32), "must be a hal.Buffer"),
])
def test_bad_collectives_are_refused_and_leave_the_command_buffer_usable(ranks, call, message):
    (dev, other), comm = ranks
    x, y = dev.upload(np.arange(16, dtype=np.float32)), dev.allocate(64)
    cb = _recording(dev, binding_capacity=1)
    with pytest.raises(hal.ValidationError, match=message):
        call(cb, comm, x, y)
    assert cb.state == "recording"
    cb.fill_buffer(y, np.float32(1))
    cb.end()
    dev.queue_execute(cb)
    dev.synchronize()
    assert (y.read(np.float32) == 1).all()
    assert [c.kind for c in cb.commands] == ["fill"]


def test_device_outside_the_communicator(ranks):
    (dev, _), comm = ranks
    stranger = hal.create_device("host")
    try:
        x = stranger.allocate(64)
        cb = _recording(stranger)
        with pytest.raises(hal.ValidationError, match="is not a device of"):
            cb.all_reduce(comm, x, x, np.float32)
    finally:
        stranger.close()


def test_two_collectives_of_one_communicator_in_a_segment(ranks):
    (dev, _), comm = ranks
    x, y = dev.allocate(64), dev.allocate(64)
    for validate in (True, False):
        cb = _recording(dev, validate=validate)
        cb.all_reduce(comm, x, x, np.float32)
        with pytest.raises(hal.ValidationError, match="command 0 \\(all_reduce\\) uses the same communicator"):
            cb.all_reduce(comm, y, y, np.float32)
        cb.execution_barrier()
        cb.all_reduce(comm, y, y, np.float32)  # after a barrier: fine
        assert cb.state == "recording"


def test_collective_races_with_a_command_of_its_segment(ranks):
    (dev, _), comm = ranks
    x = dev.allocate(64)
    cb = _recording(dev)
    cb.fill_buffer(x, np.float32(0))
    with pytest.raises(hal.ValidationError, match="race"):
        cb.all_reduce(comm, x, x, np.float32)


def test_a_collective_in_a_region_races_and_is_checked_as_outside(ranks):
    (dev, _), comm = ranks
    x, flag = dev.allocate(64), dev.upload(np.zeros(1, np.uint32))
    cb = _recording(dev)
    with pytest.raises(hal.ValidationError, match="race"):
        with cb.while_nonzero(flag):
            cb.fill_buffer(x, np.float32(0))
            cb.all_reduce(comm, x, x, np.float32)
    assert cb.regions_open == 0
    with cb.while_nonzero(flag):
        cb.all_reduce(comm, x, x, np.float32)
    cb.end()
    comm.close()
    with pytest.raises(hal.ValidationError, match=r"command 0 \(all_reduce\) uses a communicator that was closed"):
        dev.queue_execute(cb)


def test_hazards_mode_orders_one_communicators_collectives(ranks):
    (dev, _), comm = ranks
    x, y = dev.allocate(64), dev.allocate(64)
    cb = _recording(dev, dependencies="hazards")
    cb.all_reduce(comm, x, x, np.float32)
    cb.execution_barrier()
    cb.fill_buffer(dev.allocate(4), np.uint32(1))
    cb.all_reduce(comm, y, y, np.float32)  # disjoint buffers, still after command 0
    cb.end()
    assert (0, 2) in cb.dependency_graph().edges
    assert cb.program.collectives == (0, 2)


def test_closed_communicator(ranks):
    (dev, other), _ = ranks
    comm = hal.create_communicator([dev, other])
    x = dev.allocate(64)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.all_reduce(comm, x, x, np.float32)
    comm.close()
    comm.close()  # idempotent
    with pytest.raises(hal.ValidationError, match="communicator that was closed"):
        dev.queue_execute(cb)
    cb2 = _recording(dev)
    with pytest.raises(hal.ValidationError, match="is closed"):
        cb2.all_reduce(comm, x, x, np.float32)


def test_ranks_that_disagree_fail_instead_of_hanging(ranks):
    (a, b), comm = ranks
    xa, xb = a.allocate(64), b.allocate(64)
    cba, cbb = a.create_command_buffer(), b.create_command_buffer()
    with cba:
        cba.all_reduce(comm, xa, xa, np.float32)
    with cbb:
        cbb.all_reduce(comm, xb, xb, np.float32, "max")
    a.queue_execute(cba)
    b.queue_execute(cbb)
    for d in (a, b):
        with pytest.raises(hal.DeviceError, match="collective 0 differs between ranks: all_reduce of 16 x float32"):
            d.synchronize()


def test_a_rank_waiting_for_a_closed_one_fails(ranks):
    (a, b), comm = ranks
    x = a.allocate(64)
    cb = a.create_command_buffer()
    with cb:
        cb.all_reduce(comm, x, x, np.float32)
    a.queue_execute(cb)  # rank 1 never comes
    closer = threading.Timer(0.2, b.close)
    closer.start()
    with pytest.raises(hal.DeviceError, match="waited for the other ranks at collective 0, but .* was closed"):
        a.synchronize()
    closer.join()


def test_send_recv_size_mismatch(ranks):
    (a, b), comm = ranks
    cba, cbb = a.create_command_buffer(), b.create_command_buffer()
    with cba:
        cba.send(comm, a.allocate(64), 1)
    with cbb:
        cbb.recv(comm, b.allocate(32), 0)
    a.queue_execute(cba)
    b.queue_execute(cbb)
    a.synchronize()
    with pytest.raises(hal.DeviceError, match="rank 0 sent 64 bytes, it receives 32"):
        b.synchronize()


def test_communicator_facts(ranks):
    (a, b), comm = ranks
    assert comm.size == 2 and comm.rank(a) == 0 and comm.rank(b) == 1 and comm.devices == (a, b)
    assert repr(comm) == "<HostCommunicator ranks 0..1 of 2>"
    cb = a.create_command_buffer()
    with cb:
        cb.all_gather(comm, hal.ref(a.allocate(64), 0, 32), a.allocate(64), np.int32)
    (c,) = cb.commands
    assert (c.kind, c.rank, c.count, c.dtype, c.communicator) == ("all_gather", 0, 8, np.dtype(np.int32), comm)
    assert [w for _, w in c.accesses()] == [False, True, True]


def test_in_place_is_the_same_range_however_it_is_named(ranks):
    (dev, _), comm = ranks
    b = dev.allocate(64)
    cb = _recording(dev, binding_capacity=1)
    cb.all_reduce(comm, b, hal.ref(b), np.float32)
    cb.execution_barrier()
    cb.all_reduce(comm, hal.ref(b, 0, 64), hal.ref(b, 0, 64), np.float32)
    cb.execution_barrier()
    cb.broadcast(comm, hal.slot(0, 0, 64), hal.slot(0, 0, 64), 0)
    cb.end()
    assert [c.kind for c in cb.commands] == ["all_reduce", "all_reduce", "broadcast"]


def test_slots_bound_to_one_buffer_are_checked_like_references(ranks):
    (dev, _), comm = ranks
    storage = dev.allocate(64, hal.BufferUsage.DISPATCH_STORAGE)  # no transfer usage: collectives need none
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.all_gather(comm, hal.slot(0, 0, 16), hal.slot(1, 0, 32), np.float32)
    with pytest.raises(hal.ValidationError, match="source and target ranges overlap"):
        dev.queue_execute(cb, binding_table=(storage, storage))
    other = hal.create_device("host")  # a lone rank: a communicator of its own
    try:
        alone = hal.create_communicator([other])
        cb1 = other.create_command_buffer(mode="reusable", binding_capacity=2)
        with cb1:
            cb1.all_gather(alone, hal.slot(0, 0, 16), hal.slot(1, 0, 16), np.float32)
        x = other.upload(np.arange(4, dtype=np.float32), hal.BufferUsage.DISPATCH_STORAGE)
        y = other.allocate(16, hal.BufferUsage.DISPATCH_STORAGE)
        other.queue_execute(cb1, binding_table=(x, y))
        other.synchronize()
        np.testing.assert_array_equal(y.read(np.float32), np.arange(4, dtype=np.float32))
        alone.close()
    finally:
        other.close()


def test_close_lets_submitted_collectives_finish(ranks):
    devices, _ = ranks
    comm = hal.create_communicator(devices)
    buffers = [d.upload(np.full(8, r + 1, np.int32)) for r, d in enumerate(devices)]
    for d, b in zip(devices, buffers):
        cb = d.create_command_buffer()
        with cb:
            cb.all_reduce(comm, b, b, np.int32)
        d.queue_execute(cb)
    comm.close()
    for d, b in zip(devices, buffers):
        d.synchronize()
        np.testing.assert_array_equal(b.read(np.int32), np.full(8, 3, np.int32))


def test_a_closed_rank_is_refused_at_record(ranks):
    (a, b), comm = ranks
    x = a.allocate(64)
    b.close()
    cb = _recording(a)
    with pytest.raises(hal.ValidationError, match="a rank of .* is closed"):
        cb.all_reduce(comm, x, x, np.float32)
