"""Collectives recorded into command buffers, on every backend that has them, against numpy.

Each case runs a group of ranks in this process: host devices (1, 2 and 4 ranks), one GPU (NCCL with one
rank) and every GPU of the machine (marked multi_gpu: skipped with fewer than two). Each rank records its
own command buffer; all are submitted, then synchronized.
"""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import open_communicator, open_ranks

GROUPS = [
    pytest.param(("host", 1), id="host-1"),
    pytest.param(("host", 2), id="host-2"),
    pytest.param(("host", 4), id="host-4"),
    pytest.param(("cuda", 1), id="cuda-1", marks=pytest.mark.cuda),
    pytest.param(("cuda", 0), id="cuda-all", marks=[pytest.mark.cuda, pytest.mark.multi_gpu]),
]
PAIRS = [g for g in GROUPS if g.values[0][1] != 1]  # point-to-point needs two ranks
N = 96  # elements per rank


@pytest.fixture(scope="module", params=GROUPS)
def group(request):
    devices = open_ranks(*request.param)
    comm = open_communicator(devices)
    yield devices, comm
    comm.close()
    for d in devices:
        d.close()


def _run(devices, record, mode="one_shot", dependencies="barriers", submits=1):
    """Record `record(rank, device, cb)` on every rank, submit every rank `submits` times, synchronize."""
    cbs = []
    for rank, d in enumerate(devices):
        cb = d.create_command_buffer(mode=mode, dependencies=dependencies)
        with cb:
            record(rank, d, cb)
        cbs.append(cb)
    for _ in range(submits):
        for d, cb in zip(devices, cbs):
            d.queue_execute(cb)
    for d in devices:
        d.synchronize()
    return cbs


def _inputs(size, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-20, 20, N).astype(dtype) if np.dtype(dtype).kind != "u" else
            rng.integers(0, 40, N).astype(dtype) for _ in range(size)]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.uint8, np.int64, np.float16])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_all_reduce(group, dtype, op):
    devices, comm = group
    data = _inputs(len(devices), dtype)
    if op == "prod":  # small factors keep the product exact
        data = [np.where(x % 3 == 0, 1, 2).astype(dtype) for x in data]
    sources = [d.upload(x) for d, x in zip(devices, data)]
    targets = [d.allocate(sources[0].size) for d in devices]
    _run(devices, lambda r, d, cb: cb.all_reduce(comm, sources[r], targets[r], dtype, op))
    expected = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op](np.stack(data), axis=0).astype(dtype)
    for t in targets:
        np.testing.assert_array_equal(t.read(dtype), expected)


def test_all_reduce_in_place_and_avg(group):
    devices, comm = group
    data = [np.full(N, 2.0 * (r + 1), np.float32) for r in range(len(devices))]
    buffers = [d.upload(x) for d, x in zip(devices, data)]
    _run(devices, lambda r, d, cb: cb.all_reduce(comm, buffers[r], buffers[r], np.float32, "avg"))
    for b in buffers:
        np.testing.assert_allclose(b.read(np.float32), np.mean(data, axis=0))


def test_all_gather_reduce_scatter_broadcast(group):
    devices, comm = group
    size = len(devices)
    data = _inputs(size, np.int32, seed=1)
    sources = [d.upload(x) for d, x in zip(devices, data)]
    gathered = [d.allocate(N * 4 * size) for d in devices]
    scattered = [d.allocate(N * 4 // size if N % size == 0 else 4) for d in devices]
    cast = [d.allocate(N * 4) for d in devices]
    root = size - 1

    def record(r, d, cb):
        cb.all_gather(comm, sources[r], gathered[r], np.int32)
        cb.execution_barrier()
        cb.reduce_scatter(comm, hal.ref(gathered[r], 0, scattered[r].size * size), scattered[r], np.int32)
        cb.execution_barrier()
        cb.broadcast(comm, sources[r] if r == root else None, cast[r], root)

    _run(devices, record)
    part = scattered[0].size // 4
    total = np.sum([np.concatenate(data)[:part * size] for _ in range(size)], axis=0)
    for r in range(size):
        np.testing.assert_array_equal(gathered[r].read(np.int32), np.concatenate(data))
        np.testing.assert_array_equal(scattered[r].read(np.int32), total[r * part:(r + 1) * part])
        np.testing.assert_array_equal(cast[r].read(np.int32), data[root])


@pytest.mark.parametrize("group", PAIRS, indirect=True)
def test_send_recv_and_ring_shift(group):
    devices, comm = group
    size = len(devices)
    data = _inputs(size, np.uint32, seed=2)
    sources = [d.upload(x) for d, x in zip(devices, data)]
    pairs = [d.allocate(N * 4) for d in devices]
    shifted = [d.allocate(N * 4) for d in devices]

    def record(r, d, cb):
        partner = r ^ 1
        if partner < size:  # even ranks send to the odd one after them, which receives
            if r % 2 == 0:
                cb.send(comm, sources[r], partner)
            else:
                cb.recv(comm, pairs[r], partner)
            cb.execution_barrier()
        cb.send_recv(comm, sources[r], (r + 1) % size, shifted[r], (r - 1) % size)

    _run(devices, record)
    for r in range(size):
        if r % 2 and r ^ 1 < size:
            np.testing.assert_array_equal(pairs[r].read(np.uint32), data[r ^ 1])
        np.testing.assert_array_equal(shifted[r].read(np.uint32), data[(r - 1) % size])


@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_kernels_around_a_collective_resubmitted(group, dependencies):
    """A data-parallel step: a kernel makes each rank's part, all_reduce sums them, a kernel uses the sum;
    one reusable command buffer per rank, submitted three times."""
    devices, comm = group
    size = len(devices)
    exes = [d.load_executable(kernels.SOURCE) for d in devices]
    xs = [d.upload(np.arange(N, dtype=np.uint32) + r) for r, d in enumerate(devices)]
    grads = [d.allocate(N * 4) for d in devices]
    outs = [d.allocate(N * 4) for d in devices]

    def record(r, d, cb):
        cb.dispatch(exes[r], "xor_copy", workgroups=(2, 1, 1), constants=(N, 0), bindings=(xs[r], grads[r]))
        cb.execution_barrier()
        cb.dispatch(exes[r], "scale", workgroups=(2, 1, 1), constants=(N, 3), bindings=(grads[r],))
        cb.execution_barrier()
        cb.all_reduce(comm, grads[r], grads[r], np.uint32)
        cb.execution_barrier()
        cb.dispatch(exes[r], "xor_copy", workgroups=(2, 1, 1), constants=(N, 5), bindings=(grads[r], outs[r]))

    cbs = _run(devices, record, mode="reusable", dependencies=dependencies, submits=3)
    expected = (np.sum([(np.arange(N, dtype=np.uint32) + r) * 3 for r in range(size)], axis=0) ^ 5).astype(np.uint32)
    for o in outs:
        np.testing.assert_array_equal(o.read(np.uint32), expected)
    assert [c.kind for c in cbs[0].commands] == ["dispatch", "dispatch", "all_reduce", "dispatch"]
    assert list(cbs[0].dependency_graph().edges) == [(0, 1), (1, 2), (2, 3)]


def test_collectives_in_a_loop_and_a_branch_on_the_device(group):
    """The step of a tensor-parallel decode in miniature: a while loop whose body makes each rank's part, sums the
    parts with all_reduce and counts down a flag every rank computes alike, and an if_nonzero around another
    all_reduce; every rank runs the same iterations, so their collectives meet (issue 48)."""
    devices, comm = group
    size = len(devices)
    exes = [d.load_executable(kernels.SOURCE) for d in devices]
    xs = [d.upload(np.full(N, r + 1, np.uint32)) for r, d in enumerate(devices)]
    flags = [d.upload(np.array([3], np.uint32)) for d in devices]
    minus_one = [d.upload(np.array([0xFFFFFFFF], np.uint32)) for d in devices]
    yes = [d.upload(np.array([1], np.uint32)) for d in devices]

    def record(r, d, cb):
        with cb.while_nonzero(flags[r]):
            cb.dispatch(exes[r], "scale", workgroups=(2, 1, 1), constants=(N, 2), bindings=(xs[r],))
            cb.execution_barrier()
            cb.all_reduce(comm, xs[r], xs[r], np.uint32)
            cb.execution_barrier()
            cb.dispatch(exes[r], "add", workgroups=(1, 1, 1), constants=(1,), bindings=(flags[r], minus_one[r],
                                                                                          flags[r]))
        with cb.if_nonzero(yes[r]):
            cb.all_reduce(comm, xs[r], xs[r], np.uint32)

    _run(devices, record, mode="reusable")
    # The first iteration sums the ranks' doubled values, 2 x (1 + .. + size); each later one doubles that and sums
    # `size` equal values; the if_nonzero's all_reduce sums `size` again.
    expected = 2 * sum(range(1, size + 1)) * (2 * size) ** 2 * size
    for x in xs:
        np.testing.assert_array_equal(x.read(np.uint32), np.full(N, expected, np.uint32))


def test_slots_rebound(group):
    """Collectives through binding-table slots: each submit may bind other buffers."""
    devices, comm = group
    size = len(devices)
    cbs = []
    for d in devices:
        cb = d.create_command_buffer(mode="reusable", binding_capacity=2)
        with cb:
            cb.all_reduce(comm, hal.slot(0, 0, N * 4), hal.slot(1, 0, N * 4), np.int32)
        cbs.append(cb)
    for step in range(2):
        data = _inputs(size, np.int32, seed=10 + step)
        tables = [(d.upload(x), d.allocate(N * 4)) for d, x in zip(devices, data)]
        for d, cb, table in zip(devices, cbs, tables):
            d.queue_execute(cb, binding_table=table)
        for d in devices:
            d.synchronize()
        for _, target in tables:
            np.testing.assert_array_equal(target.read(np.int32), np.sum(data, axis=0))
