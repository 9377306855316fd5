"""Nested command buffers on CUDA: each execute_commands becomes one child graph node holding the nested commands'
nodes; a new table or new constants patch it (cuGraphExecChildGraphNodeSetParams) without instantiating again.
Blocks the child graph cannot hold (regions, dispatch_indirect) stay inline."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import hal
from tests.conftest import backend_or_skip
from tests.kernels import groups, u32

backend_or_skip("cuda")

pytestmark = pytest.mark.cuda

N = 64


def piece(gpu, exe, width=1):
    """A reusable piece through slots 0 (x) and 1 (y): `width` scalings of x by constant slot 0, a barrier,
    y <- x + y."""
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=2, constant_capacity=1)
    with cb:
        for i in range(width):
            cb.dispatch(exe, "scale", groups(N // width), (N // width, hal.constant_slot(0)),
                        (hal.slot(0, 4 * N // width * i, 4 * N // width),))
        cb.execution_barrier()
        cb.dispatch(exe, "add", groups(N), (N,), (hal.slot(0, 0, 4 * N), hal.slot(1, 0, 4 * N), hal.slot(1, 0, 4 * N)))
    return cb


@pytest.mark.parametrize("deps", ["barriers", "hazards"])
@pytest.mark.parametrize("width", [1, 4])
def test_a_nested_command_buffer_is_one_child_graph_node(gpu, exe, deps, width):
    inner = piece(gpu, exe, width)
    x, y = gpu.upload(np.ones(N, np.uint32)), gpu.upload(np.zeros(N, np.uint32))
    cb = gpu.create_command_buffer(mode="reusable", dependencies=deps, constant_capacity=1)
    with cb:
        cb.fill_buffer(y, np.uint32(1))
        cb.execution_barrier()
        cb.execute_commands(inner, (x, y))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(N), (N, 2), (y,))
    assert cb.program.nested == ((1, width + 2),)
    gpu.queue_execute(cb, constants=(3,))
    emitted = cb.emitter.emitted_graph()
    assert set(emitted) == {0, ("nested", 0), width + 2}
    assert set(emitted.edges) == {(0, ("nested", 0)), (("nested", 0), width + 2)}
    assert emitted.nodes[("nested", 0)]["type"] == "CU_GRAPH_NODE_TYPE_GRAPH"
    body = emitted.nodes[("nested", 0)]["body"]
    assert {n for n in body if not isinstance(n, tuple)} == set(range(1, width + 2))
    assert nx.is_directed_acyclic_graph(body)
    np.testing.assert_array_equal(y.read(np.uint32), u32([(3 + 1) * 2] * N))


def test_a_new_table_or_new_constants_patch_the_child_graph(gpu, exe):
    inner = piece(gpu, exe, 2)
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=2, constant_capacity=1)
    with cb:
        cb.execute_commands(inner, (hal.slot(0), hal.slot(1)))
    buffers = [gpu.allocate(4 * N) for _ in range(4)]
    for k, (x, y) in zip((2, 3, 3, 3), ((0, 1), (0, 1), (2, 3), (2, 1))):
        buffers[x].write(np.ones(N, np.uint32))
        buffers[y].write(np.full(N, 7, np.uint32))
        gpu.queue_execute(cb, binding_table=(buffers[x], buffers[y]), constants=(k,))
        np.testing.assert_array_equal(buffers[x].read(np.uint32), u32([k] * N))
        np.testing.assert_array_equal(buffers[y].read(np.uint32), u32([k + 7] * N))
    assert cb.emitter.instantiations == 1
    assert cb.emitter.patched == 1  # the last step moved only y: the add's node
    assert cb.emitter.emitted_graph().nodes[("nested", 0)]["type"] == "CU_GRAPH_NODE_TYPE_GRAPH"


def test_two_nested_blocks_and_a_re_recording_that_updates_the_exec(gpu, exe):
    inner = piece(gpu, exe)
    x, y = gpu.upload(np.ones(N, np.uint32)), gpu.upload(np.zeros(N, np.uint32))
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=1, constant_capacity=1)
    for k in (2, 3):
        cb.reset()
        with cb:
            cb.execute_commands(inner, (x, hal.slot(0)))
            cb.execute_commands(inner, (x, hal.slot(0)))
        y.write(np.zeros(N, np.uint32))
        x.write(np.ones(N, np.uint32))
        gpu.queue_execute(cb, binding_table=(y,), constants=(k,))
        np.testing.assert_array_equal(y.read(np.uint32), u32([k + k * k] * N))
    assert (cb.emitter.instantiations, cb.emitter.updates) == (1, 1)
    emitted = cb.emitter.emitted_graph()
    assert set(emitted.edges) == {(("nested", 0), ("nested", 1))}
    other = gpu.upload(np.zeros(N, np.uint32))
    x.write(np.ones(N, np.uint32))
    gpu.queue_execute(cb, binding_table=(other,), constants=(3,))  # patches after the exec update
    np.testing.assert_array_equal(other.read(np.uint32), u32([3 + 9] * N))


def test_a_nested_block_with_a_region_or_an_indirect_dispatch_stays_inline(gpu, exe):
    flag, counts = gpu.upload(u32([0])), gpu.upload(u32([1, 1, 1]))
    out = gpu.upload(np.zeros(N, np.uint32))
    inner = gpu.create_command_buffer(mode="reusable")
    with inner:
        with inner.if_nonzero(flag):
            inner.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
        inner.dispatch_indirect(exe, "mark", counts, (2,), (out,))
    cb = gpu.create_command_buffer(mode="reusable")
    with cb:
        cb.execute_commands(inner)
    gpu.queue_execute(cb)
    assert not [n for n in cb.emitter.emitted_graph() if isinstance(n, tuple) and n[0] == "nested"]
    np.testing.assert_array_equal(out.read(np.uint32)[:2], [2, 0])


def test_a_command_sharing_a_join_with_a_nested_block_does_not_wait_for_the_block(gpu, exe):
    """Hazards mode: the nested add and the add after it both wait for the two fills only, through one join node;
    the join stays in the outer graph, so the later add does not wait for the child graph."""
    a, b, first, second = (gpu.allocate(4 * N) for _ in range(4))
    inner = gpu.create_command_buffer(mode="reusable", binding_capacity=3)
    with inner:
        inner.dispatch(exe, "add", groups(N), (N,), (hal.slot(0), hal.slot(1), hal.slot(2)))
    cb = gpu.create_command_buffer(mode="reusable", dependencies="hazards")
    with cb:
        cb.fill_buffer(a, np.uint32(1))
        cb.fill_buffer(b, np.uint32(2))
        cb.execution_barrier()
        cb.execute_commands(inner, (a, b, first))
        cb.dispatch(exe, "add", groups(N), (N,), (a, b, second))
    assert set(cb.dependency_graph().edges) == {(0, 2), (1, 2), (0, 3), (1, 3)}
    gpu.queue_execute(cb)
    emitted = cb.emitter.emitted_graph()
    assert ("nested", 0) in emitted and ("nested", 0) not in nx.ancestors(emitted, 3)
    assert {0, 1} <= nx.ancestors(emitted, 3) and {0, 1} <= nx.ancestors(emitted, ("nested", 0))
    for out in (first, second):
        np.testing.assert_array_equal(out.read(np.uint32), u32([3] * N))
