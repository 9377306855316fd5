"""The peer kernel for all_reduces up to its limit between this process's GPUs (backends.cuda_graph.peer_all_reduce):
every type and operation it serves against numpy, in place at an unaligned offset across many submissions (its two
halves and its count of calls), parts of one block and of many, ranks arriving late, the ranks' results equal bit for
bit; larger ones, and all with the switch off, go to NCCL.
(tests/conformance/test_collectives.py's multi-GPU cases, its loops and branches on the device among them, run
through it too.)"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from tests.conftest import backend_or_skip

backend_or_skip("cuda")

import hal
from backends.cuda_graph.peer_all_reduce import BLOCK_WORDS, SWITCH, THREADS
from tests.conftest import open_communicator, open_ranks

pytestmark = [pytest.mark.cuda, pytest.mark.multi_gpu]
N = 1000


@pytest.fixture(scope="module")
def group():
    devices = open_ranks("cuda", 0)
    comm = open_communicator(devices)
    if comm.peer is None:
        reason = comm.peer_unavailable
        comm.close()
        for d in devices:
            d.close()
        pytest.skip(f"no peer kernel on these GPUs: {reason}")
    yield devices, comm
    comm.close()
    for d in devices:
        d.close()


def _recorded(ranks, record, mode="reusable"):
    """Each rank's command buffer, record(rank, device, cb) inside."""
    cbs = []
    for r, d in enumerate(ranks):
        cb = d.create_command_buffer(mode=mode)
        with cb:
            record(r, d, cb)
        cbs.append(cb)
    return cbs


def _submit(devices, cbs, times):
    for _ in range(times):
        for d, cb in zip(devices, cbs):  # the ranks in turn
            d.queue_execute(cb)
    for d in devices:
        d.synchronize()


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_each_type_and_operation(group, dtype, op):
    ranks, comm = group
    emitted = comm.peer.emitted
    rng = np.random.default_rng(7)
    data = [rng.integers(0 if op == "prod" else -50, 3 if op == "prod" else 50, N).astype(dtype) for _ in ranks]
    sources = [d.upload(x) for d, x in zip(ranks, data)]
    targets = [d.allocate(sources[0].size) for d in ranks]
    cbs = _recorded(ranks, lambda r, d, cb: cb.all_reduce(comm, sources[r], targets[r], dtype, op))
    _submit(ranks, cbs, 3)
    expected = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op](np.stack(data), axis=0)
    for t in targets:
        np.testing.assert_array_equal(t.read(dtype), expected.astype(dtype))
    assert comm.peer.emitted == emitted + len(ranks)


def test_in_place_at_an_unaligned_offset_many_times(group):
    ranks, comm = group
    world = len(ranks)
    data = [np.arange(N, dtype=np.float64) * (r + 1) for r in range(world)]
    buffers = [d.allocate(8 * N + 8) for d in ranks]
    views = [hal.ref(b, 4, 8 * N) for b in buffers]  # 4 bytes in: float64s the kernel copies a byte at a time
    for b, x in zip(buffers, data):
        raw = np.zeros(8 * N + 8, np.uint8)
        raw[4:4 + 8 * N] = x.view(np.uint8)
        b.write(raw)
    cbs = _recorded(ranks, lambda r, d, cb: cb.all_reduce(comm, views[r], views[r], np.float64))
    submissions = 7  # both halves of the staging buffers, several times each
    _submit(ranks, cbs, submissions)
    expected = np.sum(data, axis=0) * float(world) ** (submissions - 1)
    results = [b.read(np.uint8)[4:4 + 8 * N].view(np.float64) for b in buffers]
    for result in results:
        np.testing.assert_array_equal(result, expected)


def test_parts_of_many_blocks_between_parts_of_one(group):
    """Parts of one block and of many in turn, up to the limit, float64 at an unaligned offset too, over several
    submissions: each block counts only the calls it takes part in, so the first block's count runs ahead of the
    others', and every part still comes out whole."""
    ranks, comm = group
    world, submissions = len(ranks), 5
    parts = [(np.float32, N), (np.float32, comm.peer.limit // 4), (np.float32, 3), (np.float64, 2 * BLOCK_WORDS + 5),
             (np.float32, 5 * BLOCK_WORDS + 17), (np.float64, 1)]
    rng = np.random.default_rng(11)
    data = [[rng.integers(-50, 50, count).astype(dtype) for _ in ranks] for dtype, count in parts]
    buffers = []  # per part, per rank: (buffer, the part's reference: float64s 4 bytes in)
    for (dtype, _), values in zip(parts, data):
        offset = 4 if dtype is np.float64 else 0
        row = []
        for d, x in zip(ranks, values):
            raw = np.zeros(offset + x.nbytes, np.uint8)
            raw[offset:] = x.view(np.uint8)
            b = d.upload(raw)
            row.append((b, hal.ref(b, offset, x.nbytes)))
        buffers.append(row)
    emitted = comm.peer.emitted

    def record(r, d, cb):
        for i, (dtype, _) in enumerate(parts):
            if i:
                cb.execution_barrier()
            cb.all_reduce(comm, buffers[i][r][1], buffers[i][r][1], dtype)

    cbs = _recorded(ranks, record)
    _submit(ranks, cbs, submissions)
    assert comm.peer.emitted == emitted + len(parts) * world
    for (dtype, _), values, row in zip(parts, data, buffers):
        expected = np.sum(values, axis=0) * dtype(world) ** (submissions - 1)  # (integers: exact in float32 too)
        offset = 4 if dtype is np.float64 else 0
        for b, _ in row:
            np.testing.assert_array_equal(b.read(np.uint8)[offset:].view(dtype), expected)


SPIN = hal.ExecutableSource.cuda(r"""
extern "C" __global__ void spin(unsigned* sink, unsigned cycles) {
    long long start = clock64();
    while (clock64() - start < (long long)cycles) {
    }
    sink[0] = cycles;
}
""", [hal.Export("spin", bindings=1, constants=("uint32",), workgroup_size=1)])


@pytest.mark.parametrize("count", [N, 3 * THREADS + 5], ids=["one_block", "many_blocks"])
def test_a_chain_whose_ranks_arrive_late_in_turn(group, count):
    """The decode's pattern: many all_reduces one after the other in one graph, in place; before each, one rank
    or the other kept busy a while, so each side waits for the other's part in its turn (int64: a block takes
    THREADS elements)."""
    ranks, comm = group
    world, chain = len(ranks), 16
    data = [np.arange(count, dtype=np.int64) + 100 * r for r in range(world)]
    buffers = [d.upload(x) for d, x in zip(ranks, data)]

    def record(r, d, cb):
        exe, sink = d.load_executable(SPIN), d.allocate(4)
        for i in range(chain):
            if i:
                cb.execution_barrier()
            cb.dispatch(exe, "spin", (1, 1, 1), (200_000 * ((i + r) % 2),), (sink,))  # ~0.1 ms when late
            cb.execution_barrier()
            cb.all_reduce(comm, buffers[r], buffers[r], np.int64)

    cbs = _recorded(ranks, record)
    _submit(ranks, cbs, 2)
    expected = np.sum(data, axis=0)
    for _ in range(2 * chain - 1):  # int64 wraps as the GPU's sums do (8 GPUs pass 2^63)
        expected = expected * np.int64(world)
    for b in buffers:
        np.testing.assert_array_equal(b.read(np.int64), expected)


EARLY = hal.ExecutableSource.cuda(r"""
extern "C" __global__ void twice(float* x, unsigned count) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) x[i] *= 2.0f;
}
""", [hal.Export("twice", bindings=1, constants=("uint32",), workgroup_size=256, early_launch=True)])


@pytest.mark.parametrize("looped", [False, True], ids=["straight", "in_a_while_loop"])
def test_between_early_launch_kernels(group, looped):
    """The peer kernel's node between dispatches marked early_launch: its edges from and to them programmatic where
    the device has early launch, each side waiting for the other's writes (in a while loop too, as the decode's)."""
    ranks, comm = group
    world, chain, rounds = len(ranks), 8, 3 if looped else 1
    data = [np.arange(N, dtype=np.float32) / N + r for r in range(world)]
    buffers = [d.upload(x) for d, x in zip(ranks, data)]
    counters = [d.upload(np.array([rounds], np.uint32)) for d in ranks]
    decrement = hal.ExecutableSource.cuda(r"""
extern "C" __global__ void decrement(unsigned* n) { n[0] -= 1u; }
""", [hal.Export("decrement", bindings=1, workgroup_size=1)])

    def steps(cb, exe, buffer):
        for i in range(chain):
            if i:
                cb.execution_barrier()
            cb.dispatch(exe, "twice", (4, 1, 1), (N,), (buffer,))
            cb.execution_barrier()
            cb.all_reduce(comm, buffer, buffer, np.float32)

    def record(r, d, cb):
        exe = d.load_executable(EARLY)
        if not looped:
            steps(cb, exe, buffers[r])
            return
        with cb.while_nonzero(hal.ref(counters[r], 0, 4)):
            steps(cb, exe, buffers[r])
            cb.execution_barrier()
            cb.dispatch(d.load_executable(decrement), "decrement", (1, 1, 1), (), (counters[r],))

    cbs = _recorded(ranks, record)
    _submit(ranks, cbs, 1)
    if not looped:  # the emitted graph: a chain of kernel nodes, every edge programmatic where the device allows
        emitted = cbs[0].emitter.emitted_graph()
        assert {t for _, t in emitted.nodes(data="type")} == {"CU_GRAPH_NODE_TYPE_KERNEL"}
        assert nx.dag_longest_path_length(emitted) == 2 * chain - 1  # one after the other, all 2 * chain
        assert [p for _, _, p in emitted.edges(data="programmatic")] == \
            [ranks[0].capabilities.supports_early_launch] * emitted.number_of_edges()
    expected = np.sum(data, axis=0, dtype=np.float64)
    for _ in range(chain * rounds):
        expected = expected * 2
        expected = expected * world
    expected = np.float32(expected / world)  # (the first sum was of the ranks' own values)
    for b in buffers:
        np.testing.assert_allclose(b.read(np.float32), expected, rtol=1e-5)


def test_float_sums_equal_on_every_rank_bit_for_bit(group):
    ranks, comm = group
    rng = np.random.default_rng(3)
    data = [rng.standard_normal(N).astype(np.float32) for _ in ranks]
    buffers = [d.upload(x) for d, x in zip(ranks, data)]
    cbs = _recorded(ranks, lambda r, d, cb: cb.all_reduce(comm, buffers[r], buffers[r], np.float32), "one_shot")
    _submit(ranks, cbs, 1)
    results = [b.read(np.float32) for b in buffers]
    for result in results[1:]:
        assert result.tobytes() == results[0].tobytes()
    np.testing.assert_allclose(results[0], np.sum(data, axis=0), rtol=1e-5, atol=1e-5)


def test_larger_ones_and_the_switch_off_go_to_nccl(group, monkeypatch):
    ranks, comm = group
    emitted = comm.peer.emitted
    count = comm.peer.limit // 4 + 1
    buffers = [d.upload(np.full(count, r + 1, np.int32)) for r, d in enumerate(ranks)]
    cbs = _recorded(ranks, lambda r, d, cb: cb.all_reduce(comm, buffers[r], buffers[r], np.int32))
    _submit(ranks, cbs, 1)
    total = sum(range(1, len(ranks) + 1))
    for b in buffers:
        np.testing.assert_array_equal(b.read(np.int32), np.full(count, total, np.int32))
    assert comm.peer.emitted == emitted
    monkeypatch.setenv(SWITCH, "0")
    with hal.create_communicator(ranks) as nccl_only:
        assert nccl_only.peer is None and SWITCH in nccl_only.peer_unavailable
