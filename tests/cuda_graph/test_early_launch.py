"""Early launch in the emitted CUDA graph: an edge from a plain dispatch's kernel node into a dispatch of an
early_launch export is programmatic where the device supports it, every other edge plain; a device whose
capabilities are told otherwise keeps them all plain; patches, re-recording, loops and nested command buffers keep
working, with the plain chain's results."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conformance.test_early_launch import N, chain, shifted
from tests.conftest import backend_or_skip, open_device
from tests.kernels import groups

backend_or_skip("cuda")

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def early(gpu):
    return gpu.load_executable(kernels.EARLY_SOURCE)


@pytest.fixture
def start():
    return np.random.default_rng(3).integers(0, 1 << 32, N, dtype=np.uint32)


def programmatic(cb, u, v) -> bool:
    return cb.emitter.emitted_graph().edges[u, v]["programmatic"]


@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_edges_between_early_kernels_are_programmatic_where_the_device_allows(gpu, early, start, dependencies):
    a, b = gpu.upload(start), gpu.allocate(4 * N)
    cb = gpu.create_command_buffer(mode="reusable", dependencies=dependencies)
    with cb:
        chain(cb, early, a, b, [1, 2, 3, 4])
    gpu.queue_execute(cb)
    np.testing.assert_array_equal(a.read(np.uint32), shifted(start, [1, 2, 3, 4]))
    supported = gpu.capabilities.supports_early_launch
    assert [programmatic(cb, i, i + 1) for i in range(3)] == [supported] * 3


def test_a_device_told_it_cannot_keeps_every_edge_plain(start):
    dev = open_device("cuda", capabilities={"supports_early_launch": False})
    try:
        exe = dev.load_executable(kernels.EARLY_SOURCE)
        a, b = dev.upload(start), dev.allocate(4 * N)
        cb = dev.create_command_buffer(mode="reusable")
        with cb:
            chain(cb, exe, a, b, [5, 6])
        dev.queue_execute(cb)
        np.testing.assert_array_equal(a.read(np.uint32), shifted(start, [5, 6]))
        assert not programmatic(cb, 0, 1)
    finally:
        dev.close()


def test_only_kernel_to_early_kernel_edges_are_programmatic(gpu, early, start):
    """A fill before an early kernel, an early kernel before a plain one, and a join (two kernels waiting on two):
    plain; a plain kernel before an early one: programmatic."""
    if not gpu.capabilities.supports_early_launch:
        pytest.skip("this device takes no programmatic edges (compute capability 9.0 and driver 12.3 needed)")
    a, b, c, d = gpu.upload(start), gpu.allocate(4 * N), gpu.allocate(4 * N), gpu.allocate(4 * N)
    cb = gpu.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(c, np.uint32(9))                                       # 0
        cb.execution_barrier()
        cb.dispatch(early, "shift", groups(N), (N, 1), (a, b))                # 1: after a fill
        cb.execution_barrier()
        cb.dispatch(early, "shift_plain", groups(N), (N, 2), (b, a))          # 2: not early
        cb.execution_barrier()
        cb.dispatch(early, "shift", groups(N), (N, 3), (a, b))                # 3: after a plain kernel
        cb.dispatch(early, "shift", groups(N), (N, 4), (c, d))                # 4
        cb.execution_barrier()
        cb.dispatch(early, "shift", groups(N), (N, 5), (b, a))                # 5, 6: after a join of 3 and 4
        cb.dispatch(early, "shift", groups(N), (N, 6), (d, c))
    gpu.queue_execute(cb)
    np.testing.assert_array_equal(a.read(np.uint32), shifted(start, [1, 2, 3, 5]))
    np.testing.assert_array_equal(c.read(np.uint32), shifted(np.full(N, 9, np.uint32), [4, 6]))
    emitted = cb.emitter.emitted_graph()
    assert not emitted.edges[0, 1]["programmatic"] and not emitted.edges[1, 2]["programmatic"]
    assert emitted.edges[2, 3]["programmatic"]
    join = next(n for n in emitted.successors(3) if isinstance(n, tuple))
    assert not any(emitted.edges[e]["programmatic"] for e in ((3, join), (4, join), (join, 5), (join, 6)))


def test_early_kernels_across_patches_re_recording_and_single_pass(gpu, early, start):
    cb = gpu.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        chain(cb, early, hal.slot(0), hal.slot(1), [7, 8])
    for offset in (0, 5):
        a, b = gpu.upload(start + np.uint32(offset)), gpu.allocate(4 * N)
        gpu.queue_execute(cb, binding_table=(a, b))
        np.testing.assert_array_equal(a.read(np.uint32), shifted(start + np.uint32(offset), [7, 8]))
    assert cb.emitter.instantiations == 1 and programmatic(cb, 0, 1) == gpu.capabilities.supports_early_launch
    cb.reset()
    with cb:
        chain(cb, early, hal.slot(0), hal.slot(1), [9, 10])
    gpu.queue_execute(cb, binding_table=(a, b))
    np.testing.assert_array_equal(a.read(np.uint32), shifted(shifted(start + np.uint32(5), [7, 8]), [9, 10]))
    assert cb.emitter.instantiations == 1 and cb.emitter.updates == 1
    single = gpu.create_command_buffer(mode="reusable", strategy="single_pass")
    with single:
        chain(single, early, a, b, [1, 1])
    gpu.queue_execute(single)
    assert programmatic(single, 0, 1) == gpu.capabilities.supports_early_launch


def test_early_kernels_in_a_nested_command_buffer(gpu, early, start):
    a, b = gpu.upload(start), gpu.allocate(4 * N)
    inner = gpu.create_command_buffer(mode="reusable", binding_capacity=2)
    with inner:
        chain(inner, early, hal.slot(0), hal.slot(1), [2, 3])
    outer = gpu.create_command_buffer(mode="reusable")
    with outer:
        outer.execute_commands(inner, binding_table=(a, b))
        outer.execution_barrier()
        outer.execute_commands(inner, binding_table=(a, b))
        outer.execution_barrier()
        outer.dispatch(early, "shift", groups(N), (N, 4), (a, b))  # after a block: its edge plain (no kernel node)
    gpu.queue_execute(outer)
    np.testing.assert_array_equal(b.read(np.uint32), shifted(start, [2, 3, 2, 3, 4]))
    emitted = outer.emitter.emitted_graph()
    (block,) = [n for n in emitted if isinstance(n, tuple) and n[0] == "nested"][:1]
    body = emitted.nodes[block]["body"]
    assert [d["programmatic"] for _, _, d in body.edges(data=True)] == [gpu.capabilities.supports_early_launch]
    assert not any(d["programmatic"] for _, _, d in emitted.edges(data=True))
