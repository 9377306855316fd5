"""Hand-written programs: the exact graph of both dependency modes under both strategies, and barrier groups."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import hal
from tests.hal.dependency_helpers import BUF, assert_graph, both, record, scale, strategies, xor_copy


# Structures that both modes must give (every edge is also a data hazard).
@both
@strategies
def test_empty_command_buffer(host, dependencies, strategy):
    cb = record(host, lambda cb: None, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [], [])


@both
@strategies
def test_chain(host, exe, bufs, dependencies, strategy):
    x = bufs[0]

    def build(cb):
        scale(cb, exe, x)
        cb.execution_barrier()
        scale(cb, exe, x)
        cb.execution_barrier()
        scale(cb, exe, x)

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("dispatch", 0), ("dispatch", 1), ("dispatch", 2)], [(0, 1), (1, 2)])


@both
@strategies
@pytest.mark.parametrize("n", [1, 2, 5])
def test_fan_out(host, exe, bufs, dependencies, strategy, n):
    x, outs = bufs[0], bufs[1:1 + n]

    def build(cb):
        cb.update_buffer(x, np.arange(BUF // 4, dtype=np.uint32))
        cb.execution_barrier()
        for y in outs:
            xor_copy(cb, exe, x, y)

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("update", 0)] + [("dispatch", 1)] * n, [(0, i) for i in range(1, n + 1)])


@both
@strategies
@pytest.mark.parametrize("n", [1, 2, 5])
def test_fan_in(host, bufs, dependencies, strategy, n):
    x, y = bufs[0], bufs[1]

    def build(cb):
        for i in range(n):
            cb.fill_buffer(hal.ref(x, 16 * i, 16), np.uint32(i))
        cb.execution_barrier()
        cb.copy_buffer(hal.ref(x, 0, 16 * n), hal.ref(y, 0, 16 * n))

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("fill", 0)] * n + [("copy", 1)], [(i, n) for i in range(n)])


@both
@strategies
@pytest.mark.parametrize("n", [2, 4])
def test_diamond(host, exe, bufs, dependencies, strategy, n):
    """1 -> n -> 1: the last command waits for the n middle ones only, not for the first."""
    x, z = bufs[0], bufs[1]

    def build(cb):
        cb.fill_buffer(x, np.uint32(1))
        cb.execution_barrier()
        for i in range(n):
            xor_copy(cb, exe, hal.ref(x, 0, 256), hal.ref(z, 256 * i, 256))
        cb.execution_barrier()
        cb.copy_buffer(hal.ref(z, 0, 256 * n), hal.ref(bufs[2], 0, 256 * n))

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    nodes = [("fill", 0)] + [("dispatch", 1)] * n + [("copy", 2)]
    edges = [(0, i) for i in range(1, n + 1)] + [(i, n + 1) for i in range(1, n + 1)]
    assert_graph(cb, nodes, edges)


@both
@strategies
@pytest.mark.parametrize("m,n", [(1, 1), (1, 4), (4, 1), (2, 2), (3, 5), (40, 40)])
def test_m_by_n(host, bufs, dependencies, strategy, m, n):
    """m writers then n readers of everything: m*n edges in the graph, but one shared predecessor group."""
    x, y = host.allocate(16 * m), host.allocate(16 * m * n)

    def build(cb):
        for i in range(m):
            cb.fill_buffer(hal.ref(x, 16 * i, 16), np.uint32(i))
        cb.execution_barrier()
        for j in range(n):
            cb.copy_buffer(x, hal.ref(y, 16 * m * j, 16 * m))

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    g = assert_graph(cb, [("fill", 0)] * m + [("copy", 1)] * n,
                     [(i, m + j) for i in range(m) for j in range(n)])
    assert g.number_of_edges() == m * n
    program = cb.program
    second = [program.group_of[m + j] for j in range(n)]
    assert len(set(second)) == 1, "every command of the second segment must share one predecessor group"
    assert program.groups[second[0]] == tuple(range(m))
    assert all(program.group_of[i] < 0 or program.groups[program.group_of[i]] == () for i in range(m))
    if dependencies == "barriers":
        assert len(program.groups) == 1
        assert program.groups == (tuple(range(m)),)


@strategies
def test_barriers_groups_one_per_step(host, bufs, strategy):
    """A chain of m-to-n steps stores one group per barrier step (what backends turn into join nodes)."""
    x = bufs[0]
    sizes = [3, 1, 4, 2]

    def build(cb):
        for k, s in enumerate(sizes):
            if k:
                cb.execution_barrier()
            for i in range(s):
                cb.fill_buffer(hal.ref(x, 16 * i, 16), np.uint32(k))

    cb = record(host, build, dependencies="barriers", strategy=strategy)
    program = cb.program
    assert len(program.groups) == len(sizes) - 1
    starts = list(itertools.accumulate([0] + sizes))
    for k in range(1, len(sizes)):
        gs = {program.group_of[i] for i in range(starts[k], starts[k + 1])}
        assert len(gs) == 1
        assert program.groups[gs.pop()] == tuple(range(starts[k - 1], starts[k]))


@both
@strategies
def test_empty_segments_and_barriers_at_start_and_end(host, bufs, dependencies, strategy):
    x, y = bufs[0], bufs[1]

    def build(cb):
        cb.execution_barrier()
        cb.fill_buffer(x, np.uint32(7))
        cb.execution_barrier()
        cb.execution_barrier()
        cb.copy_buffer(x, y)
        cb.execution_barrier()

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("fill", 1), ("copy", 3)], [(0, 1)])


@both
@strategies
def test_only_barriers(host, dependencies, strategy):
    def build(cb):
        for _ in range(3):
            cb.execution_barrier()

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [], [])


@both
@strategies
@pytest.mark.parametrize("count", [1, 2, 4])
def test_consecutive_barriers_act_as_one(host, bufs, dependencies, strategy, count):
    x, y, z = bufs[0], bufs[1], bufs[2]

    def build(cb):
        cb.fill_buffer(x, np.uint32(1))
        cb.fill_buffer(y, np.uint32(2))
        for _ in range(count):
            cb.execution_barrier()
        cb.copy_buffer(x, z)
        for _ in range(count):
            cb.execution_barrier()
        cb.fill_buffer(x, np.uint32(3))

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    nodes = [("fill", 0), ("fill", 0), ("copy", count), ("fill", 2 * count)]
    if dependencies == "barriers":
        edges = [(0, 2), (1, 2), (2, 3)]
    else:
        edges = [(0, 2), (2, 3)]  # y is independent; the last fill of x waits (WAR) for the copy only
    assert_graph(cb, nodes, edges)


@strategies
def test_barriers_mode_ignores_data(host, bufs, strategy):
    """Barriers mode orders independent buffers across a barrier; hazards mode does not."""
    x, y = bufs[0], bufs[1]

    def build(cb):
        cb.fill_buffer(x, np.uint32(1))
        cb.execution_barrier()
        cb.fill_buffer(y, np.uint32(2))

    assert_graph(record(host, build, dependencies="barriers", strategy=strategy),
                 [("fill", 0), ("fill", 1)], [(0, 1)])
    assert_graph(record(host, build, dependencies="hazards", strategy=strategy),
                 [("fill", 0), ("fill", 1)], [])


# Segments and races.
@both
@strategies
def test_no_edges_within_a_segment(host, exe, bufs, dependencies, strategy):
    x, y, z = bufs[:3]

    def build(cb):
        cb.fill_buffer(hal.ref(x, 0, 256), np.uint32(1))
        cb.fill_buffer(hal.ref(x, 256, 256), np.uint32(2))
        cb.copy_buffer(y, z)
        xor_copy(cb, exe, y, hal.ref(x, 512, 256))

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("fill", 0), ("fill", 0), ("copy", 0), ("dispatch", 0)], [])


@both
@strategies
def test_unvalidated_race_inside_a_segment_gets_no_edge(host, bufs, dependencies, strategy):
    """Without validation a same-segment race is recorded as is: no edge between the two, and a later
    command still waits for both writers."""
    x, y = bufs[0], bufs[1]

    def build(cb):
        cb.fill_buffer(x, np.uint32(1))
        cb.fill_buffer(x, np.uint32(2))
        cb.copy_buffer(x, y)
        cb.execution_barrier()
        cb.copy_buffer(x, hal.ref(bufs[2], 0, BUF))

    cb = record(host, build, dependencies=dependencies, strategy=strategy, validate=False)
    assert_graph(cb, [("fill", 0), ("fill", 0), ("copy", 0), ("copy", 1)],
                 [(0, 3), (1, 3)] if dependencies == "hazards" else [(0, 3), (1, 3), (2, 3)])


def test_validated_race_inside_a_segment_is_refused(host, bufs):
    x = bufs[0]
    cb = host.create_command_buffer(dependencies="hazards")
    cb.begin()
    cb.fill_buffer(x, np.uint32(1))
    with pytest.raises(hal.ValidationError):
        cb.copy_buffer(x, bufs[1])


@both
def test_graph_needs_end(host, dependencies):
    cb = host.create_command_buffer(dependencies=dependencies)
    cb.begin()
    with pytest.raises(hal.ValidationError):
        cb.dependency_graph()
