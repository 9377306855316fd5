"""Host execution: a program of every command kind against a reference, and the order commands run in."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

import hal
from tests import kernels
from tests.host.host_helpers import logger
from tests.kernels import groups, u32

N = 64  # uint32 elements per program buffer


# A program with every command kind and hazards of every kind across barriers.
def _program_buffers(dev):
    return {
        "a": dev.upload(np.arange(N, dtype=np.uint32)),
        "b": dev.upload(np.arange(N, dtype=np.uint32) * 3 + 1),
        "c": dev.allocate(4 * N),
        "d": dev.allocate(4 * N),
    }


def _record_program(cb, exe, bufs):
    a, b, c, d = bufs["a"], bufs["b"], bufs["c"], bufs["d"]
    cb.update_buffer(hal.ref(a, 0, 16), u32([100, 101, 102, 103]))
    cb.fill_buffer(d, np.uint32(7))
    cb.execution_barrier()
    cb.dispatch(exe, "add", groups(N), constants=(N,), bindings=(a, b, c))  # reads a (RAW on the update)
    cb.dispatch(exe, "scale", groups(N), constants=(N, 3), bindings=(d,))
    cb.execution_barrier()
    cb.dispatch(exe, "xor_copy", groups(N), constants=(N, 0xFF), bindings=(c, b))  # writes b (WAR)
    cb.copy_buffer(hal.ref(d, 0, 64), hal.ref(a, 64, 64))  # writes a (WAR)
    cb.execution_barrier()
    cb.dispatch(exe, "add", groups(N), constants=(N,), bindings=(b, a, d))  # writes d (WAR on the copy)
    cb.fill_buffer(hal.ref(c, 128, 128), np.uint32(0xAAAAAAAA))  # writes c (WAR on xor_copy)


def _program_reference():
    a = np.arange(N, dtype=np.uint32)
    b = np.arange(N, dtype=np.uint32) * 3 + 1
    a[:4] = [100, 101, 102, 103]
    d = np.full(N, 7, np.uint32)
    c = a + b
    d = d * np.uint32(3)
    b = c ^ np.uint32(0xFF)
    a[16:32] = d[:16]
    d = b + a
    c[32:] = 0xAAAAAAAA
    return {"a": a, "b": b, "c": c, "d": d}


def _run_program(dev, strategy, dependencies):
    exe = dev.load_executable(kernels.SOURCE)
    bufs = _program_buffers(dev)
    cb = dev.create_command_buffer(strategy=strategy, dependencies=dependencies)
    with cb:
        _record_program(cb, exe, bufs)
    dev.queue_execute(cb)
    dev.synchronize()
    return {k: v.read(np.uint32) for k, v in bufs.items()}


@pytest.mark.parametrize("strategy, dependencies",
                         list(itertools.product(["deferred", "single_pass"], ["barriers", "hazards"])))
def test_program_matches_reference(host, strategy, dependencies):
    result = _run_program(host, strategy, dependencies)
    expected = _program_reference()
    for name in "abcd":
        np.testing.assert_array_equal(result[name], expected[name], err_msg=name)


def test_single_pass_and_deferred_give_the_same_bytes(host):
    for dependencies in ("barriers", "hazards"):
        deferred = _run_program(host, "deferred", dependencies)
        single = _run_program(host, "single_pass", dependencies)
        for name in "abcd":
            assert deferred[name].tobytes() == single[name].tobytes(), (dependencies, name)


def test_hazards_and_barriers_give_the_same_bytes(host):
    for strategy in ("deferred", "single_pass"):
        barriers = _run_program(host, strategy, "barriers")
        hazards = _run_program(host, strategy, "hazards")
        for name in "abcd":
            assert barriers[name].tobytes() == hazards[name].tobytes(), (strategy, name)


def test_hazards_has_fewer_edges_than_barriers(host):
    exe = host.load_executable(kernels.SOURCE)
    graphs = {}
    for dependencies in ("barriers", "hazards"):
        cb = host.create_command_buffer(dependencies=dependencies)
        with cb:
            _record_program(cb, exe, _program_buffers(host))
        graphs[dependencies] = cb.dependency_graph()
    assert graphs["hazards"].number_of_edges() < graphs["barriers"].number_of_edges()
    # Every hazard edge is an ordering the barriers imply too.
    assert set(graphs["hazards"].edges) <= set(nx.transitive_closure_dag(graphs["barriers"]).edges)


# Execution order.
@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_independent_commands_run_out_of_recording_order(host, strategy):
    log = []
    exe = logger(host, log)
    cb = host.create_command_buffer(strategy=strategy)
    with cb:
        for i in range(3):
            cb.dispatch(exe, "log", (1, 1, 1), constants=(i,))
    host.queue_execute(cb)
    host.synchronize()
    assert log == [2, 1, 0]


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_barriers_order_segments(host, strategy):
    log = []
    exe = logger(host, log)
    cb = host.create_command_buffer(strategy=strategy)
    with cb:
        cb.dispatch(exe, "log", (1, 1, 1), constants=(0,))
        cb.dispatch(exe, "log", (1, 1, 1), constants=(1,))
        cb.execution_barrier()
        cb.execution_barrier()  # an empty segment changes nothing
        cb.dispatch(exe, "log", (1, 1, 1), constants=(2,))
        cb.dispatch(exe, "log", (1, 1, 1), constants=(3,))
        cb.execution_barrier()
        cb.dispatch(exe, "log", (1, 1, 1), constants=(4,))
    host.queue_execute(cb)
    host.synchronize()
    assert log == [1, 0, 3, 2, 4]


def test_hazards_mode_runs_an_independent_later_command_first(host):
    log = []
    exe = logger(host, log, bindings=1)
    a, b = host.allocate(16), host.allocate(16)
    order = {}
    for dependencies in ("barriers", "hazards"):
        log.clear()
        cb = host.create_command_buffer(dependencies=dependencies)
        with cb:
            cb.dispatch(exe, "log", (1, 1, 1), constants=(0,), bindings=(a,))
            cb.execution_barrier()
            cb.dispatch(exe, "log", (1, 1, 1), constants=(1,), bindings=(b,))  # touches nothing of command 0
            cb.execution_barrier()
            cb.dispatch(exe, "log", (1, 1, 1), constants=(2,), bindings=(a,))  # must follow command 0
        host.queue_execute(cb)
        host.synchronize()
        order[dependencies] = list(log)
    assert order["barriers"] == [0, 1, 2]
    assert order["hazards"] == [1, 0, 2]


def test_dependency_graph_of_barriers(host):
    exe = logger(host, [])
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "log", (1, 1, 1), constants=(0,))
        cb.dispatch(exe, "log", (1, 1, 1), constants=(1,))
        cb.execution_barrier()
        cb.dispatch(exe, "log", (1, 1, 1), constants=(2,))
        cb.fill_buffer(host.allocate(4), b"\x01")
    graph = cb.dependency_graph()
    assert sorted(graph.edges) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert graph.nodes[3] == {"kind": "fill", "segment": 1}
    assert graph.nodes[0]["kind"] == "dispatch"
