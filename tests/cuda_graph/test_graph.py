"""The emitted CUDA graph: its nodes and edges are the rediscovered DAG (plus join nodes); instantiated
once; re-recording updates the exec; a new binding table patches only the nodes it changes."""

from __future__ import annotations

import gc
import threading

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import hal
from tests import kernels
from tests.conftest import backend_or_skip, open_device
from tests.differential.test_programs import check_program, programs
from tests.kernels import groups

backend_or_skip("cuda")

from cuda.bindings import driver

from backends.cuda_graph.api import call

pytestmark = pytest.mark.cuda

N = 256


def u32(values):
    return np.asarray(values, np.uint32)


def errors_in_another_thread(work) -> list[Exception]:
    """Run `work()` in a new thread and return what it raised (a thread's exception would not fail the test)."""
    errors = []

    def run():
        try:
            work()
        except Exception as e:  # noqa: BLE001 - returned
            errors.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    return errors


def contract_joins(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph with each join node replaced by edges from its predecessors to its successors."""
    out = graph.copy()
    for node in [n for n in graph if isinstance(n, tuple)]:
        for u in out.predecessors(node):
            for v in out.successors(node):
                out.add_edge(u, v)
        out.remove_node(node)
    return out


def joins(graph: nx.DiGraph) -> int:
    return sum(isinstance(n, tuple) for n in graph)


def record_wide(cb, exe, bufs, m, n):
    """m producers, a barrier, n consumers, a barrier, one reducer."""
    for i in range(m):
        cb.dispatch(exe, "scale", groups(N), (N, 3), (bufs[i],))
    cb.execution_barrier()
    for j in range(n):
        cb.dispatch(exe, "add", groups(N), (N,), (bufs[j % m], bufs[(j + 1) % m], bufs[m + j]))
    cb.execution_barrier()
    cb.fill_buffer(bufs[0], np.uint32(7))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("deps", ["barriers", "hazards"])
@pytest.mark.parametrize("m, n", [(1, 4), (3, 1), (3, 4)])
def test_emitted_graph_is_the_dependency_graph_plus_joins(gpu, exe, strategy, deps, m, n):
    bufs = [gpu.upload(np.full(N, i + 1, np.uint32)) for i in range(m + n)]
    cb = gpu.create_command_buffer(mode="reusable", strategy=strategy, dependencies=deps)
    with cb:
        record_wide(cb, exe, bufs, m, n)
    emitted = cb.emitter.emitted_graph()
    expected = cb.dependency_graph()
    assert set(contract_joins(emitted).edges) == set(expected.edges)
    assert set(contract_joins(emitted).nodes) == set(expected.nodes)
    if deps == "barriers":
        # m -> n goes through one join when m > 1 and n > 1 (single_pass joins whenever m > 1); n -> 1 never
        # needs one in deferred mode.
        want = int(m > 1 and (n > 1 or strategy == "single_pass")) + int(strategy == "single_pass" and n > 1)
        assert joins(emitted) == want
    gpu.queue_execute(cb)
    gpu.synchronize()
    assert cb.emitter.instantiations == 1


def width(graph: nx.DiGraph, nodes: list) -> int:
    """The most of `nodes` that the graph leaves mutually unordered: by Dilworth's theorem, the fewest chains
    covering them, from a maximum matching of the comparability relation."""
    closure = nx.transitive_closure_dag(graph)
    pairs = nx.Graph()
    pairs.add_nodes_from(nodes)
    pairs.add_nodes_from(("after", v) for v in nodes)
    pairs.add_edges_from((u, ("after", v)) for u, v in closure.edges if u in nodes and v in nodes)
    return len(nodes) - len(nx.bipartite.hopcroft_karp_matching(pairs, top_nodes=nodes)) // 2


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("deps", ["barriers", "hazards"])
def test_wide_segments_run_in_lanes(gpu, exe, strategy, deps, monkeypatch):
    """A segment wider than device.graph_lanes runs in that many chains (deferred, seeing it whole, in the
    fewest that are as deep); every ordering the dependency graph asks for is kept, and the work gives
    what the full-width graph gives."""
    m, n, lanes = 7, 8, 5
    results = {}
    for width_limit in (0, lanes):
        monkeypatch.setattr(gpu, "graph_lanes", width_limit)
        bufs = [gpu.upload(np.full(N, i + 1, np.uint32)) for i in range(m + n)]
        cb = gpu.create_command_buffer(mode="reusable", strategy=strategy, dependencies=deps)
        with cb:
            record_wide(cb, exe, bufs, m, n)
        emitted = contract_joins(cb.emitter.emitted_graph())
        expected = cb.dependency_graph()
        if width_limit:
            assert set(nx.transitive_closure_dag(expected).edges) <= set(nx.transitive_closure_dag(emitted).edges)
            for members in (list(range(m)), list(range(m, m + n))):  # 7 and 8 commands: 2 deep in 5 lanes or 4
                depth = -(-len(members) // lanes)
                assert width(emitted, members) == (-(-len(members) // depth) if strategy == "deferred" else lanes)
                assert nx.dag_longest_path_length(emitted.subgraph(members)) + 1 == depth
            assert emitted.in_degree(m + n) <= lanes  # the reducer waits for the lanes' last nodes
        else:
            assert set(emitted.edges) == set(expected.edges)
        gpu.queue_execute(cb)
        results[width_limit] = [b.read(np.uint32) for b in bufs]
    for full, laned in zip(results[0], results[lanes]):
        np.testing.assert_array_equal(full, laned)


def test_graph_lanes_come_from_the_environment(monkeypatch):
    from backends.cuda_graph.device import GRAPH_LANES, graph_lanes

    monkeypatch.delenv("HAL_CUDA_GRAPH_LANES", raising=False)
    assert graph_lanes() == GRAPH_LANES
    monkeypatch.setenv("HAL_CUDA_GRAPH_LANES", "0")
    assert graph_lanes() == 0
    monkeypatch.setenv("HAL_CUDA_GRAPH_LANES", "many")
    with pytest.raises(hal.ValidationError, match="HAL_CUDA_GRAPH_LANES"):
        graph_lanes()


def test_graph_lanes_must_be_a_whole_number(gpu):
    for bad in (-1, 2.5, "4"):
        with pytest.raises(hal.ValidationError, match="graph_lanes"):
            gpu.graph_lanes = bad
    assert gpu.graph_lanes >= 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs())
def test_generated_programs_in_two_lanes(gpu, program):
    """The differential test with segments cut into two lanes: every strategy, dependency mode and
    binding path still matches the sequential reference."""
    lanes, gpu.graph_lanes = gpu.graph_lanes, 2
    try:
        check_program(gpu, program)
    finally:
        gpu.graph_lanes = lanes


def test_resubmitting_an_unchanged_command_buffer_instantiates_once(gpu, exe):
    x = gpu.upload(u32([1, 2, 3, 4]))
    cb = gpu.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
    for _ in range(10):
        gpu.queue_execute(cb)
    assert cb.emitter.instantiations == 1 and cb.emitter.patched == 0
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 1024)


def test_a_resubmission_from_another_thread_or_to_a_closed_device():
    """The one-launch resubmission path holds only where the general path would launch alone: a thread whose
    context is not current yet, or a closed device, goes the general way."""
    dev = open_device("cuda")
    mine = dev.load_executable(kernels.SOURCE)
    x = dev.upload(u32([1, 2, 3, 4]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(mine, "scale", (1, 1, 1), (4, 2), (x,))
    dev.queue_execute(cb)
    assert not errors_in_another_thread(lambda: dev.queue_execute(cb))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 8)
    dev.close()
    with pytest.raises(hal.ValidationError, match="closed"):
        dev.queue_execute(cb)


def test_a_resubmission_from_a_thread_where_another_context_is_current(gpu, exe):
    """The one-launch path asks nobody which context is current: with another context current, the launch is the
    driver's to refuse (the general path then launches in the device's context) or to run in the stream's own."""
    x = gpu.upload(u32([1, 2, 3, 4]))
    cb = gpu.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
    gpu.queue_execute(cb)

    def resubmit():
        other = call(driver.cuCtxCreate, None, 0, gpu.cu_device)  # current in this thread from now
        try:
            gpu.queue_execute(cb)
            gpu.queue_execute(cb)
            gpu.synchronize()
        finally:
            call(driver.cuCtxDestroy, other)

    assert not errors_in_another_thread(resubmit)
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 8)


def test_a_resubmission_frees_what_was_let_go_since(gpu, exe):
    """A resubmission is one launch only while the device has nothing to free: a command buffer collected
    meanwhile sends the next one the general way, which frees its graph and exec; then one launch again."""
    x = gpu.upload(u32([1, 2, 3, 4]))
    cb = gpu.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
    gpu.queue_execute(cb)
    assert cb.emitter.token is gpu.resubmit_token
    other = gpu.create_command_buffer(mode="reusable")
    with other:
        other.dispatch(exe, "scale", (1, 1, 1), (4, 1), (x,))
    gpu.queue_execute(other)
    del other
    gc.collect()
    assert gpu.lifetime.pending and cb.emitter.token is not gpu.resubmit_token
    gpu.queue_execute(cb)
    assert not gpu.lifetime.pending and cb.emitter.token is gpu.resubmit_token
    gpu.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 8)
    cb.reset()
    assert cb.emitter.token is None


def test_re_recording_the_same_topology_updates_the_exec(gpu, exe):
    x = gpu.upload(u32([1, 2, 3, 4]))
    cb = gpu.create_command_buffer(mode="reusable")
    for k in (3, 5, 7):
        cb.reset()
        with cb:
            cb.dispatch(exe, "scale", (1, 1, 1), (4, k), (x,))
        gpu.queue_execute(cb)
    assert cb.emitter.instantiations == 1 and cb.emitter.updates == 2
    cb.reset()
    with cb:  # another topology: instantiated anew
        cb.fill_buffer(x, np.uint32(1))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
    gpu.queue_execute(cb)
    assert cb.emitter.instantiations == 2
    np.testing.assert_array_equal(x.read(np.uint32), u32([2, 2, 2, 2]))


def test_a_new_binding_table_patches_only_the_nodes_it_changes(gpu, exe):
    n = 64
    fixed = gpu.upload(np.full(n, 1000, np.uint32))
    others = [gpu.allocate(4 * n) for _ in range(5)]
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        for other in others:  # five nodes that no table changes
            cb.dispatch(exe, "scale", groups(n), (n, 1), (other,))
        cb.execution_barrier()
        cb.dispatch(exe, "add", groups(n), (n,), (hal.slot(0), fixed, hal.slot(1)))
        cb.execution_barrier()
        for _ in range(3):
            cb.dispatch(exe, "scale", groups(n), (n, 2), (hal.slot(1),))
            cb.execution_barrier()
    a1, a2 = gpu.upload(np.arange(n, dtype=np.uint32)), gpu.upload(np.arange(n, dtype=np.uint32) * 10)
    o1, o2 = gpu.allocate(4 * n), gpu.allocate(4 * n)
    gpu.queue_execute(cb, binding_table=(a1, o1))
    assert cb.emitter.instantiations == 1
    gpu.queue_execute(cb, binding_table=(a1, o1))
    assert cb.emitter.patched == 0
    gpu.queue_execute(cb, binding_table=(a2, o1))
    assert cb.emitter.patched == 1  # only the node reading slot 0
    gpu.queue_execute(cb, binding_table=(a2, o2))
    assert cb.emitter.patched == 4  # the nodes using slot 1
    assert cb.emitter.instantiations == 1
    np.testing.assert_array_equal(o1.read(np.uint32), (np.arange(n, dtype=np.uint32) * 10 + 1000) * 8)
    np.testing.assert_array_equal(o2.read(np.uint32), (np.arange(n, dtype=np.uint32) * 10 + 1000) * 8)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_new_constants_patch_only_their_readers_and_never_instantiate(gpu, exe, strategy):
    n = 64
    x = gpu.upload(np.ones(n, np.uint32))
    cb = gpu.create_command_buffer(mode="reusable", strategy=strategy, constant_capacity=2)
    with cb:
        for _ in range(5):  # five nodes that no value changes
            cb.dispatch(exe, "scale", groups(n), (n, 1), (x,))
            cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(n), (n, hal.constant_slot(0)), (x,))
        cb.execution_barrier()
        for _ in range(3):
            cb.dispatch(exe, "scale", groups(n), (hal.constant_slot(1), hal.constant_slot(0)), (x,))
            cb.execution_barrier()
    gpu.queue_execute(cb, constants=(2, n))
    assert cb.emitter.instantiations == 1 and cb.emitter.token is None  # values come with every submit
    gpu.queue_execute(cb, constants=(2, n))
    assert cb.emitter.patched == 0
    gpu.queue_execute(cb, constants=(2, n // 2))
    assert cb.emitter.patched == 3  # the nodes reading slot 1
    gpu.queue_execute(cb, constants=(np.uint32(3), n // 2))
    assert cb.emitter.patched == 4  # the nodes reading slot 0
    gpu.queue_execute(cb, constants=(5, n))
    assert cb.emitter.patched == 4 and cb.emitter.instantiations == 1
    expected = np.ones(n, np.uint32) * 256 * 5 ** 4
    expected[:n // 2] *= 16 * 81
    expected[n // 2:] *= 2 * 3
    np.testing.assert_array_equal(x.read(np.uint32), expected)
    types = nx.get_node_attributes(cb.emitter.emitted_graph(), "type")
    assert set(types.values()) == {"CU_GRAPH_NODE_TYPE_KERNEL"}  # no host nodes for the values


def test_patches_after_an_exec_update_name_the_nodes_of_the_instantiating_graph(gpu, exe):
    """CUDA identifies an exec's node by the node of the graph it was instantiated from, also after
    cuGraphExecUpdate took a re-recording's graph: a rebind after a re-recording patches those nodes."""
    n = 64
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=1)

    def record():
        with cb:
            cb.fill_buffer(hal.slot(0), np.uint32(3))
            cb.execution_barrier()
            cb.dispatch(exe, "scale", groups(n), (n, 5), (hal.slot(0),))

    first, second = gpu.allocate(4 * n), gpu.allocate(4 * n)
    record()
    gpu.queue_execute(cb, binding_table=(first,))
    cb.reset()
    record()
    gpu.queue_execute(cb, binding_table=(first,))  # built again, the exec updated in place
    gpu.queue_execute(cb, binding_table=(second,))  # both nodes patched
    assert (cb.emitter.instantiations, cb.emitter.updates, cb.emitter.patched) == (1, 1, 2)
    np.testing.assert_array_equal(first.read(np.uint32), u32([15] * n))
    np.testing.assert_array_equal(second.read(np.uint32), u32([15] * n))


def emitters_of(gpu, monkeypatch, emitter_class):
    """Command buffers created on `gpu` from now on get emitters of `emitter_class` (a CudaEmitter subclass
    that stages a failure)."""
    monkeypatch.setattr(gpu, "_create_emitter", lambda cb: emitter_class(gpu, cb.mode, cb.strategy,
                                                                        cb.binding_capacity, cb.constant_capacity))


def test_a_node_update_the_driver_refuses_rebuilds_the_graph(gpu, exe, monkeypatch):
    """CUDA may refuse a memset or memcpy node a new address (another kind of allocation, say): the
    command buffer then builds its graph again for the new table and updates the exec with it. The
    refusal is staged here; the rebuild, the exec update and the launch run on the GPU."""
    from backends.cuda_graph.command_buffer import CudaEmitter
    from hal.errors import DeviceError

    refusing = [True]

    class Refusing(CudaEmitter):
        def set_node(self, index, params):
            if refusing[0]:
                raise DeviceError(f"cuGraphExecMemsetNodeSetParams (command {index}) failed: CUDA_ERROR_INVALID_VALUE")
            super().set_node(index, params)

    emitters_of(gpu, monkeypatch, Refusing)
    n = 64
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.fill_buffer(hal.slot(0), np.uint32(3))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(n), (n, 5), (hal.slot(0),))
    first, second = gpu.allocate(4 * n), gpu.allocate(4 * n)
    gpu.queue_execute(cb, binding_table=(first,))
    gpu.queue_execute(cb, binding_table=(second,))
    assert (cb.emitter.instantiations, cb.emitter.updates, cb.emitter.patched) == (1, 1, 0)  # the exec was updated
    np.testing.assert_array_equal(first.read(np.uint32), u32([15] * n))
    np.testing.assert_array_equal(second.read(np.uint32), u32([15] * n))
    refusing[0] = False
    gpu.queue_execute(cb, binding_table=(first,))  # the rebuilt graph patches as before
    assert cb.emitter.patched == 2
    np.testing.assert_array_equal(first.read(np.uint32), u32([15] * n))


def test_a_refused_constants_patch_builds_with_the_new_values(gpu, exe, monkeypatch):
    """The same for new constant values: a refused patch builds the graph again with them."""
    from backends.cuda_graph.command_buffer import CudaEmitter
    from hal.errors import DeviceError

    refusing = [True]

    class Refusing(CudaEmitter):
        def set_node(self, index, params):
            if refusing[0]:
                raise DeviceError(f"cuGraphExecKernelNodeSetParams (command {index}) failed: CUDA_ERROR_INVALID_VALUE")
            super().set_node(index, params)

    emitters_of(gpu, monkeypatch, Refusing)
    n = 64
    x = gpu.upload(np.ones(n, np.uint32))
    cb = gpu.create_command_buffer(mode="reusable", constant_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", groups(n), (n, hal.constant_slot(0)), (x,))
    gpu.queue_execute(cb, constants=(3,))
    gpu.queue_execute(cb, constants=(5,))  # refused: built again with 5
    assert (cb.emitter.instantiations, cb.emitter.updates, cb.emitter.patched) == (1, 1, 0)
    refusing[0] = False
    gpu.queue_execute(cb, constants=(7,))
    assert cb.emitter.patched == 1
    np.testing.assert_array_equal(x.read(np.uint32), u32([3 * 5 * 7] * n))


def test_constant_slots_after_a_re_recording(gpu, exe):
    """reset() and the same topology again: the exec is updated in place, and new values patch its nodes."""
    n = 64
    x = gpu.upload(np.ones(n, np.uint32))
    cb = gpu.create_command_buffer(mode="reusable", constant_capacity=2)
    for _ in range(2):
        cb.reset()
        with cb:
            cb.dispatch(exe, "scale", groups(n), (n, hal.constant_slot(0)), (x,))
            cb.execution_barrier()
            cb.dispatch(exe, "scale", groups(n), (hal.constant_slot(1), 2), (x,))
        gpu.queue_execute(cb, constants=(3, n))
    gpu.queue_execute(cb, constants=(5, n))
    assert (cb.emitter.instantiations, cb.emitter.updates, cb.emitter.patched) == (1, 1, 1)
    gpu.queue_execute(cb, constants=(5, n // 2))
    assert cb.emitter.patched == 1
    expected = np.full(n, 6 * 6 * 10 * 5, np.uint32)
    expected[:n // 2] *= 2
    np.testing.assert_array_equal(x.read(np.uint32), expected)


def test_the_same_binding_table_again_is_one_launch_until_a_buffer_is_released(gpu, exe):
    """Submitted again with the very table it was last submitted with, a reusable command buffer with slots holds
    the resubmission token too: one cuGraphLaunch of the exec as that table left it. Another table takes the
    general path (a patch, then the token); a released buffer revokes the token, so the release is reported."""
    gpu.synchronize()  # what earlier tests let go is freed: nothing keeps the token from the general path
    x, y = gpu.upload(u32([1, 2, 3, 4])), gpu.upload(u32([5, 6, 7, 8]))
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (hal.slot(0),))
    first, second = (x,), (y,)
    for table in (first, first, second, second, first, first):
        gpu.queue_execute(cb, binding_table=table)
        assert cb.emitter.token is gpu.resubmit_token
    assert cb.emitter.instantiations == 1
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 16)
    np.testing.assert_array_equal(y.read(np.uint32), u32([5, 6, 7, 8]) * 4)
    y.release()
    assert cb.emitter.token is not gpu.resubmit_token
    with pytest.raises(hal.ValidationError, match=r"binding_table\[0\] is a released buffer"):
        gpu.queue_execute(cb, binding_table=second)
    gpu.queue_execute(cb, binding_table=first)
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 32)


def test_capacity_alone_keeps_the_one_launch_resubmission(gpu, exe):
    """What a recording uses decides, not the capacities: reading no slot, it resubmits as one launch."""
    x = gpu.upload(u32([1, 2, 3, 4]))
    for strategy in ("deferred", "single_pass"):
        cb = gpu.create_command_buffer(mode="reusable", strategy=strategy, binding_capacity=2, constant_capacity=2)
        with cb:
            cb.dispatch(exe, "scale", (1, 1, 1), (4, 2), (x,))
        gpu.queue_execute(cb)
        assert cb.emitter.token is gpu.resubmit_token and cb.emitter.instantiations == 1
        gpu.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 4]) * 16)


@pytest.mark.parametrize("deps", ["barriers", "hazards"])
def test_end_after_a_failed_build_builds_from_the_start(gpu, exe, deps, monkeypatch):
    """A build that fails once its nodes are in (out of memory, say, staged here) leaves no graph or
    node bookkeeping behind: end() again builds the same graph and the work runs as recorded."""
    from backends.cuda_graph.command_buffer import CudaEmitter

    failures = []

    class FailingOnce(CudaEmitter):
        def instantiate(self):
            if not failures:
                failures.append(1)
                raise hal.OutOfMemoryError("cuGraphInstantiate failed: CUDA_ERROR_OUT_OF_MEMORY")
            super().instantiate()

    emitters_of(gpu, monkeypatch, FailingOnce)
    m, n = 3, 4
    bufs = [gpu.upload(np.full(N, i + 1, np.uint32)) for i in range(m + n)]
    expected = [b.read(np.uint32) for b in bufs]
    cb = gpu.create_command_buffer(mode="reusable", dependencies=deps)
    cb.begin()
    record_wide(cb, exe, bufs, m, n)
    with pytest.raises(hal.OutOfMemoryError):
        cb.end()
    cb.end()
    assert set(contract_joins(cb.emitter.emitted_graph()).edges) == set(cb.dependency_graph().edges)
    gpu.queue_execute(cb)
    for i in range(m):
        expected[i] *= 3
    for j in range(n):
        expected[m + j] = expected[j % m] + expected[(j + 1) % m]
    expected[0][:] = 7
    for b, want in zip(bufs, expected):
        np.testing.assert_array_equal(b.read(np.uint32), want)


def test_one_shot_deferred_launches_on_the_stream(gpu, exe):
    x = gpu.upload(u32([1, 2, 3, 4]))
    cb = gpu.create_command_buffer()
    with cb:
        cb.update_buffer(hal.ref(x, 4, 8), u32([10, 20]))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (x,))
    with pytest.raises(ValueError, match=r"launch on the stream"):
        cb.emitter.emitted_graph()
    gpu.queue_execute(cb)
    assert cb.emitter.instantiations == 0
    np.testing.assert_array_equal(x.read(np.uint32), u32([3, 30, 60, 12]))


def test_update_data_is_staged_in_pinned_memory_for_every_path(gpu, exe):
    for mode, strategy in (("reusable", "deferred"), ("reusable", "single_pass"), ("one_shot", "single_pass")):
        x = gpu.allocate(4 * 4096)
        data = np.random.default_rng(5).integers(0, 2**32, 4096, dtype=np.uint32)
        cb = gpu.create_command_buffer(mode=mode, strategy=strategy)
        with cb:
            cb.update_buffer(x, data)
        gpu.queue_execute(cb)
        np.testing.assert_array_equal(x.read(np.uint32), data)


@pytest.mark.parametrize("mode, slots", [("reusable", False), ("one_shot", False), ("reusable", True)])
def test_one_export_of_two_executables_runs_each_ones_kernel(gpu, exe, mode, slots):
    """Two executables built from one export list share the Export objects: each dispatch must still run
    its own executable's kernel (the second one's `scale` adds 1 after scaling)."""
    other = gpu.load_executable(hal.ExecutableSource.cuda(
        kernels.CUDA_CODE.replace("x[i] = x[i] * k;", "x[i] = x[i] * k + 1;"), kernels.EXPORTS))
    x, y = gpu.upload(u32(range(N))), gpu.upload(u32(range(N)))
    wg, constants = groups(N), (N, 3)  # one tuple object each, as a literal in a loop gives
    cb = gpu.create_command_buffer(mode=mode, binding_capacity=2 if slots else 0)
    with cb:
        for i, e in enumerate((exe, other, exe, other)):
            buffer = (hal.slot(i % 2) if slots else (x, y)[i % 2])
            cb.dispatch(e, "scale", wg, constants, (buffer,))
            if i % 2:
                cb.execution_barrier()
    gpu.queue_execute(cb, (x, y) if slots else ())
    np.testing.assert_array_equal(x.read(np.uint32), u32(range(N)) * 9)
    np.testing.assert_array_equal(y.read(np.uint32), (u32(range(N)) * 3 + 1) * 3 + 1)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_dispatch_indirect_is_a_setter_node_before_a_device_updatable_kernel_node(gpu, exe, strategy):
    out = gpu.upload(np.zeros(64, np.uint32))
    params = gpu.upload(kernels.u32([2, 2, 1, 3, 1, 1]))
    cb = gpu.create_command_buffer(mode="reusable", strategy=strategy)
    with cb:
        cb.fill_buffer(hal.ref(params, 12, 4), np.uint32(3))
        cb.dispatch(exe, "mark", (1, 1, 1), constants=(100,), bindings=(gpu.upload(np.zeros(4, np.uint32)),))
        cb.execution_barrier()
        cb.dispatch_indirect(exe, "mark", hal.ref(params, 0, 12), constants=(1,), bindings=(out,))
        cb.execution_barrier()
        cb.dispatch_indirect(exe, "mark", hal.ref(params, 12, 12), constants=(10,), bindings=(out,), dynamic=True)
    emitted = cb.emitter.emitted_graph()
    types = nx.get_node_attributes(emitted, "type")
    assert set(types.values()) <= {"CU_GRAPH_NODE_TYPE_KERNEL", "CU_GRAPH_NODE_TYPE_MEMSET", "CU_GRAPH_NODE_TYPE_EMPTY"}
    assert types[("indirect", 2)] == types[("indirect", 3)] == "CU_GRAPH_NODE_TYPE_KERNEL"
    assert list(emitted.predecessors(("indirect", 2))) == []  # static: the first of a chain from the start
    assert set(emitted.predecessors(("indirect", 3))) == set(emitted.predecessors(3)) - {("indirect", 3)}
    assert ("indirect", 2) in emitted.predecessors(2) and ("indirect", 3) in emitted.predecessors(3)
    for _ in range(3):
        gpu.queue_execute(cb)
    expected = np.zeros(64, np.uint32)
    expected[:4] += 3
    expected[:3] += 30
    np.testing.assert_array_equal(out.read(np.uint32), expected)
    assert cb.emitter.instantiations == 1


def test_indirect_counts_in_a_slot_patch_the_setter_and_re_recording_instantiates_anew(gpu, exe):
    out = gpu.upload(np.zeros(64, np.uint32))
    tables = [gpu.upload(kernels.u32([4, 1, 1])), gpu.upload(kernels.u32([1, 2, 3]))]
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=1, constant_capacity=1)

    def record():
        with cb:
            cb.dispatch_indirect(exe, "mark", hal.slot(0), constants=(hal.constant_slot(0),), bindings=(out,))

    record()
    for params, k in [(tables[0], 1), (tables[1], 1), (tables[1], 2), (tables[0], 4)]:
        gpu.queue_execute(cb, binding_table=(params,), constants=(k,))
    expected = np.zeros(64, np.uint32)
    expected[:4] += 1 + 4
    expected[:6] += 1 + 2
    np.testing.assert_array_equal(out.read(np.uint32), expected)
    assert cb.emitter.instantiations == 1
    cb.reset()
    record()  # the same topology, but CUDA refuses cuGraphExecUpdate to device-updatable nodes
    gpu.queue_execute(cb, binding_table=(tables[0],), constants=(8,))
    expected[:4] += 8
    np.testing.assert_array_equal(out.read(np.uint32), expected)
    assert (cb.emitter.instantiations, cb.emitter.updates) == (2, 0)


def test_one_shot_indirect_work_runs_as_a_graph(gpu, exe):
    out = gpu.upload(np.zeros(64, np.uint32))
    cb = gpu.create_command_buffer()
    with cb:
        cb.dispatch_indirect(exe, "mark", gpu.upload(kernels.u32([5, 1, 1])), constants=(2,), bindings=(out,))
    gpu.queue_execute(cb)
    assert cb.emitter.instantiations == 1
    np.testing.assert_array_equal(out.read(np.uint32)[:6], [2, 2, 2, 2, 2, 0])


def test_regions_are_conditional_nodes_with_their_condition_set_on_the_gpu(gpu, exe):
    out, flag, minus_one = (gpu.upload(kernels.u32(v)) for v in ([0] * 16, [5], [0xFFFFFFFF]))
    enabled = gpu.upload(kernels.u32([1]))
    cb = gpu.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "mark", (1, 1, 1), (100,), (out,))
        with cb.while_nonzero(flag):
            with cb.if_nonzero(enabled):
                cb.dispatch(exe, "mark", (2, 1, 1), (1,), (out,))
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))
    emitted = cb.emitter.emitted_graph()
    types = nx.get_node_attributes(emitted, "type")
    assert types[1] == "CU_GRAPH_NODE_TYPE_CONDITIONAL" and types[("condition", 1)] == "CU_GRAPH_NODE_TYPE_KERNEL"
    assert "CU_GRAPH_NODE_TYPE_HOST" not in types.values()
    assert set(emitted.predecessors(("condition", 1))) == {0} and set(emitted.predecessors(1)) == {("condition", 1)}
    for k in (5, 0, 2):
        flag.write(kernels.u32([k]))
        gpu.queue_execute(cb)  # one launch per submission, whatever k
    np.testing.assert_array_equal(out.read(np.uint32)[:3], [300 + 7, 7, 0])
    assert cb.emitter.instantiations == 1


def test_values_outside_regions_patch_and_values_inside_build_anew(gpu, exe):
    """A command buffer with regions patches the nodes outside them for new values (one instantiation); a value a
    region's body reads builds the graph anew."""
    out, flag, minus_one = (gpu.upload(kernels.u32(v)) for v in ([0] * 16, [0], [0xFFFFFFFF]))
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=1, constant_capacity=2)
    with cb:
        cb.dispatch(exe, "mark", (1, 1, 1), (hal.constant_slot(0),), (hal.slot(0),))
        with cb.while_nonzero(flag):
            cb.dispatch(exe, "mark", (2, 1, 1), (hal.constant_slot(1),), (out,))
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))
    total = gpu.upload(kernels.u32([0] * 4))
    for first, inside, loops in ((1, 10, 2), (2, 10, 1), (3, 10, 0)):
        flag.write(kernels.u32([loops]))
        gpu.queue_execute(cb, binding_table=(total,), constants=(first, inside))
    assert (cb.emitter.instantiations, cb.emitter.patched) == (1, 1)
    flag.write(kernels.u32([1]))
    gpu.queue_execute(cb, binding_table=(total,), constants=(3, 100))
    assert cb.emitter.instantiations == 2
    np.testing.assert_array_equal(total.read(np.uint32)[:2], [1 + 2 + 3 + 3, 0])
    np.testing.assert_array_equal(out.read(np.uint32)[:3], [30 + 100, 30 + 100, 0])
