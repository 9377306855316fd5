"""Dependency rediscovery (DESIGN.md, "Dependency rediscovery"), checked on the recorded DAG.

Hand-written programs pin the exact graph for both dependency modes and both recording strategies
(the graph must not depend on the strategy). Generated programs check the properties every graph must
have: hazards ordered, acyclic, edges forward in index and segment, transitively reduced, barrier
semantics, and, for race-free programs without slots, equality with the transitive reduction of the
true hazard relation.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hal
from tests import kernels
from tests.conftest import open_device

MODES = ("barriers", "hazards")
STRATEGIES = ("deferred", "single_pass")
BUF = 1024  # bytes per buffer in the hand-written programs


@pytest.fixture
def exe(host):
    return host.load_executable(kernels.SOURCE)


@pytest.fixture
def bufs(host):
    return [host.allocate(BUF) for _ in range(8)]


def record(dev, build, *, dependencies, strategy, binding_capacity=0, validate=True):
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=binding_capacity, strategy=strategy,
                                   dependencies=dependencies, validate=validate)
    with cb:
        build(cb)
    return cb


def expected_graph(nodes, edges):
    g = nx.DiGraph()
    for i, (kind, segment) in enumerate(nodes):
        g.add_node(i, kind=kind, segment=segment)
    g.add_edges_from(edges)
    return g


def assert_graph(cb, nodes, edges):
    g = cb.dependency_graph()
    exp = expected_graph(nodes, edges)
    assert sorted(g.nodes) == list(range(len(nodes)))
    assert {n: dict(d) for n, d in g.nodes(data=True)} == {n: dict(d) for n, d in exp.nodes(data=True)}
    assert sorted(g.edges) == sorted(exp.edges)
    assert nx.utils.graphs_equal(g, exp)
    return g


def scale(cb, exe, r):
    cb.dispatch(exe, "scale", workgroups=(1, 1, 1), constants=(4, 3), bindings=(r,))


def xor_copy(cb, exe, src, dst):
    cb.dispatch(exe, "xor_copy", workgroups=(1, 1, 1), constants=(4, 5), bindings=(src, dst))


def add(cb, exe, a, b, out):
    cb.dispatch(exe, "add", workgroups=(1, 1, 1), constants=(4,), bindings=(a, b, out))


both = pytest.mark.parametrize("dependencies", MODES)
strategies = pytest.mark.parametrize("strategy", STRATEGIES)


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


# Hazards mode.

hazards = pytest.mark.parametrize("dependencies", ["hazards"])


def _access(cb, exe, what, x, other):
    """Record one access to buffer x: 'r' reads bytes [0, 256) of x, 'w' writes them."""
    if what == "w":
        cb.fill_buffer(hal.ref(x, 0, 256), np.uint32(9))
    else:
        cb.copy_buffer(hal.ref(x, 0, 256), other)


@hazards
@strategies
@pytest.mark.parametrize("first,second,edge", [
    ("w", "r", True),   # read after write
    ("r", "w", True),   # write after read
    ("w", "w", True),   # write after write
    ("r", "r", False),  # read after read
])
def test_hazard_kinds(host, exe, bufs, dependencies, strategy, first, second, edge):
    x = bufs[0]

    def build(cb):
        _access(cb, exe, first, x, hal.ref(bufs[1], 0, 256))
        cb.execution_barrier()
        _access(cb, exe, second, x, hal.ref(bufs[2], 0, 256))

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    kinds = {"w": "fill", "r": "copy"}
    assert_graph(cb, [(kinds[first], 0), (kinds[second], 1)], [(0, 1)] if edge else [])


@hazards
@strategies
@pytest.mark.parametrize("first,second,edge", [
    ((0, 16), (16, 16), False),    # adjacent
    ((0, 16), (512, 64), False),   # far apart
    ((64, 32), (0, 64), False),    # adjacent, before
    ((0, 16), (12, 16), True),     # one word in common
    ((16, 16), (0, 64), True),     # contained
    ((0, 1024), (1008, 16), True),
])
def test_byte_ranges_of_one_buffer(host, bufs, dependencies, strategy, first, second, edge):
    x = bufs[0]

    def build(cb):
        cb.fill_buffer(hal.ref(x, *first), np.uint32(1))
        cb.execution_barrier()
        cb.fill_buffer(hal.ref(x, *second), np.uint32(2))

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("fill", 0), ("fill", 1)], [(0, 1)] if edge else [])


@hazards
@strategies
def test_read_range_split_by_later_writes(host, bufs, dependencies, strategy):
    """Pieces of one buffer keep their own writers: a read waits only for the writers of what it reads."""
    x, y = bufs[0], bufs[1]

    def build(cb):
        cb.fill_buffer(hal.ref(x, 0, 64), np.uint32(1))     # 0
        cb.execution_barrier()
        cb.fill_buffer(hal.ref(x, 16, 16), np.uint32(2))    # 1 (waits for 0)
        cb.fill_buffer(hal.ref(x, 48, 16), np.uint32(3))    # 2 (waits for 0)
        cb.execution_barrier()
        cb.copy_buffer(hal.ref(x, 0, 16), hal.ref(y, 0, 16))    # 3: reads only what 0 wrote
        cb.copy_buffer(hal.ref(x, 32, 32), hal.ref(y, 32, 32))  # 4: 0's bytes 32..48 and 2's
        cb.copy_buffer(hal.ref(x, 16, 16), hal.ref(y, 16, 16))  # 5: only 1's bytes

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("fill", 0), ("fill", 1), ("fill", 1), ("copy", 2), ("copy", 2), ("copy", 2)],
                 [(0, 1), (0, 2), (0, 3), (2, 4), (1, 5)])


@hazards
@strategies
def test_readonly_bindings_are_reads(host, exe, bufs, dependencies, strategy):
    x, y, z, w = bufs[:4]

    def build(cb):
        xor_copy(cb, exe, x, y)          # 0: reads x, writes y
        cb.execution_barrier()
        xor_copy(cb, exe, x, z)          # 1: reads x again: no edge
        add(cb, exe, x, y, w)            # 2: reads x and y (after 0 wrote y), writes w
        cb.execution_barrier()
        add(cb, exe, x, y, z)            # 3: reads y (0 wrote it) and x; writes z (1 wrote it); 2 only reads
        cb.execution_barrier()
        cb.fill_buffer(y, np.uint32(0))  # 4: writes y, which 2 and 3 read (0 is implied)

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("dispatch", 0), ("dispatch", 1), ("dispatch", 1), ("dispatch", 2), ("fill", 3)],
                 [(0, 2), (0, 3), (1, 3), (2, 4), (3, 4)])


@hazards
@strategies
def test_read_write_bindings_are_writes(host, exe, bufs, dependencies, strategy):
    x, y = bufs[0], bufs[1]

    def build(cb):
        scale(cb, exe, x)           # 0: read-write x
        cb.execution_barrier()
        xor_copy(cb, exe, x, y)     # 1: reads x
        cb.execution_barrier()
        xor_copy(cb, exe, x, hal.ref(bufs[2], 0, 256))  # 2: reads x again: waits for 0 only (RAR with 1)
        cb.execution_barrier()
        scale(cb, exe, x)           # 3: writes x: waits for readers 1 and 2

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("dispatch", 0), ("dispatch", 1), ("dispatch", 2), ("dispatch", 3)],
                 [(0, 1), (0, 2), (1, 3), (2, 3)])


@hazards
@strategies
def test_copy_source_is_a_read(host, bufs, dependencies, strategy):
    x, y, z = bufs[:3]

    def build(cb):
        cb.copy_buffer(x, y)             # 0
        cb.execution_barrier()
        cb.copy_buffer(x, z)             # 1: RAR on x, nothing else shared
        cb.execution_barrier()
        cb.fill_buffer(x, np.uint32(1))  # 2: WAR on x with 0 and 1
        cb.execution_barrier()
        cb.copy_buffer(y, z)             # 3: reads y (0 wrote it), writes z (1 wrote it)

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("copy", 0), ("copy", 1), ("fill", 2), ("copy", 3)],
                 [(0, 2), (1, 2), (0, 3), (1, 3)])


@hazards
@strategies
def test_transitive_reduction_hand(host, exe, bufs, dependencies, strategy):
    """A writes X; B reads X, writes Y; C reads X and Y: A->B, B->C, not A->C."""
    x, y, z = bufs[:3]

    def build(cb):
        cb.fill_buffer(x, np.uint32(3))  # A
        cb.execution_barrier()
        xor_copy(cb, exe, x, y)          # B
        cb.execution_barrier()
        add(cb, exe, x, y, z)            # C

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("fill", 0), ("dispatch", 1), ("dispatch", 2)], [(0, 1), (1, 2)])


@hazards
@strategies
def test_transitive_reduction_long_chain(host, bufs, dependencies, strategy):
    """Each fill of x waits for the previous one only; a final read of x waits for the last one only."""
    x, y = bufs[0], bufs[1]
    n = 30

    def build(cb):
        for i in range(n):
            cb.fill_buffer(x, np.uint32(i))
            cb.execution_barrier()
        cb.copy_buffer(x, y)

    cb = record(host, build, dependencies=dependencies, strategy=strategy)
    assert_graph(cb, [("fill", i) for i in range(n)] + [("copy", n)], [(i, i + 1) for i in range(n)])


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


# Slots: unknown buffers alias each other and every buffer.

@hazards
@strategies
@pytest.mark.parametrize("read_slot,read_offset,edge", [
    (1, 0, True),     # another slot, same bytes
    (1, 8, True),     # another slot, overlapping
    (0, 0, True),     # the same slot, same bytes
    (1, 16, False),   # another slot, adjacent bytes
    (0, 32, False),   # the same slot, disjoint bytes
])
def test_slots_alias_each_other(host, bufs, dependencies, strategy, read_slot, read_offset, edge):
    def build(cb):
        cb.update_buffer(hal.slot(0, 0, 16), np.arange(4, dtype=np.uint32))
        cb.execution_barrier()
        cb.copy_buffer(hal.slot(read_slot, read_offset, 8), hal.slot(read_slot, 512, 8))

    cb = record(host, build, dependencies=dependencies, strategy=strategy, binding_capacity=2)
    assert_graph(cb, [("update", 0), ("copy", 1)], [(0, 1)] if edge else [])


@hazards
@strategies
def test_slot_read_after_read_gets_no_edge(host, bufs, dependencies, strategy):
    def build(cb):
        cb.copy_buffer(hal.slot(0, 0, 16), hal.slot(0, 64, 16))
        cb.execution_barrier()
        cb.copy_buffer(hal.slot(1, 0, 16), hal.slot(1, 128, 16))

    cb = record(host, build, dependencies=dependencies, strategy=strategy, binding_capacity=2)
    assert_graph(cb, [("copy", 0), ("copy", 1)], [])


@hazards
@strategies
@pytest.mark.parametrize("slot_first", [False, True])
@pytest.mark.parametrize("offset,edge", [(0, True), (32, False)])
def test_slots_alias_direct_buffers(host, bufs, dependencies, strategy, slot_first, offset, edge):
    """A slot may be bound to any buffer, so it conflicts with a direct reference at overlapping offsets,
    whether the direct access comes before the first slot reference or after it."""
    x = bufs[0]

    def build(cb):
        if slot_first:
            cb.update_buffer(hal.slot(0, offset, 16), np.arange(4, dtype=np.uint32))
            cb.execution_barrier()
            cb.copy_buffer(hal.ref(x, 0, 16), hal.ref(bufs[1], 0, 16))
        else:
            cb.update_buffer(hal.ref(x, 0, 16), np.arange(4, dtype=np.uint32))
            cb.execution_barrier()
            cb.copy_buffer(hal.slot(0, offset, 16), hal.slot(0, 512, 16))

    cb = record(host, build, dependencies=dependencies, strategy=strategy, binding_capacity=1)
    nodes = [("update", 0), ("copy", 1)]
    assert_graph(cb, nodes, [(0, 1)] if edge else [])


@hazards
@strategies
def test_slot_of_unknown_length_covers_every_offset(host, exe, bufs, dependencies, strategy):
    x = bufs[0]

    def build(cb):
        scale(cb, exe, hal.slot(0))                         # 0: read-write all of slot 0
        cb.execution_barrier()
        cb.fill_buffer(hal.ref(x, BUF - 16, 16), np.uint32(1))  # 1: x may be slot 0's buffer
        cb.execution_barrier()
        cb.fill_buffer(hal.slot(1, 4096, 16), np.uint32(1))    # 2: far past x, still within slot 0's range

    cb = record(host, build, dependencies=dependencies, strategy=strategy, binding_capacity=2)
    assert_graph(cb, [("dispatch", 0), ("fill", 1), ("fill", 2)], [(0, 1), (0, 2)])


@pytest.mark.parametrize("dependencies", MODES)
@strategies
def test_slot_aliasing_runs_correctly(host, dependencies, strategy):
    """Two slots bound to one buffer: the read through slot 1 must see the write through slot 0."""
    b = host.allocate(256)
    out = host.allocate(256)
    data = np.arange(64, dtype=np.uint32) * 7 + 1

    def build(cb):
        cb.update_buffer(hal.slot(0, 0, 256), data)
        cb.execution_barrier()
        cb.copy_buffer(hal.slot(1, 0, 256), out)

    cb = record(host, build, dependencies=dependencies, strategy=strategy, binding_capacity=2)
    host.queue_execute(cb, binding_table=(b, b))
    host.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32), data)


@strategies
@pytest.mark.parametrize("variant", ["slot_write", "slot_elsewhere", "no_slot"])
def test_write_does_not_hide_earlier_writers_from_its_own_segment(host, strategy, variant):
    """Segment 0 writes x; segment 1 writes y (or a slot bound to y) and then x again. Nothing orders
    the second write of x after the write of y (same segment, no race), so it must wait for segment 0's
    write of x itself. Once a slot is used, the planner keeps all ranges in one map, where the write of
    y covers segment 0's write of x: that must not hide it from the rest of segment 1."""
    x, y, z = host.allocate(16), host.allocate(16), host.allocate(128)
    x.write(np.zeros(4, np.uint32))

    def build(cb):
        if variant == "slot_elsewhere":
            cb.fill_buffer(hal.slot(0, 64, 16), np.uint32(4))  # a slot somewhere else entirely
        cb.fill_buffer(x, np.uint32(1))
        cb.execution_barrier()
        cb.fill_buffer(hal.slot(0, 0, 16) if variant == "slot_write" else y, np.uint32(2))
        cb.fill_buffer(x, np.uint32(3))  # WAW with the first fill of x, across a barrier

    cb = record(host, build, dependencies="hazards", strategy=strategy, binding_capacity=1)
    g = cb.dependency_graph()
    first, last = (1, 3) if variant == "slot_elsewhere" else (0, 2)
    assert nx.has_path(g, first, last), sorted(g.edges)
    host.queue_execute(cb, binding_table=(y if variant == "slot_write" else z,))
    host.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), [3, 3, 3, 3])


@strategies
def test_unvalidated_same_segment_writes_both_wait_for_the_previous_segment(host, strategy):
    """A race inside segment 1 (validate=False) leaves the order of its two writes open, but both must
    still run after segment 0: x can end as 2 or 3, never as segment 0's 1."""
    x = host.allocate(16)

    def build(cb):
        cb.fill_buffer(x, np.uint32(1))  # 0
        cb.execution_barrier()
        cb.fill_buffer(x, np.uint32(2))  # 1
        cb.fill_buffer(x, np.uint32(3))  # 2

    cb = record(host, build, dependencies="hazards", strategy=strategy, validate=False)
    g = cb.dependency_graph()
    assert nx.has_path(g, 0, 1) and nx.has_path(g, 0, 2), sorted(g.edges)
    host.queue_execute(cb)
    host.synchronize()
    assert x.read(np.uint32)[0] in (2, 3)


@both
def test_graph_needs_end(host, dependencies):
    cb = host.create_command_buffer(dependencies=dependencies)
    cb.begin()
    with pytest.raises(hal.ValidationError):
        cb.dependency_graph()


# Generated programs.

NBUF = 3
NSLOT = 2
SIZE = 256  # bytes per buffer in generated programs


@st.composite
def abstract_programs(draw, validate, use_slots):
    """A list of ops over abstract keys ('b', i) (buffer i) or ('s', i) (slot i). Validated programs get
    a barrier wherever a command would race (as record-time validation sees it) with its segment;
    unvalidated ones keep their races."""
    keys = [("b", i) for i in range(NBUF)] + ([("s", i) for i in range(NSLOT)] if use_slots else [])

    def rng():
        start = draw(st.integers(0, SIZE // 16 - 1)) * 16
        length = draw(st.integers(1, (SIZE - start) // 16)) * 16
        return start, start + length

    ops = []
    open_accesses = []
    for _ in range(draw(st.integers(0, 24))):
        kind = draw(st.sampled_from(["barrier", "fill", "update", "copy", "scale", "xor_copy", "add"]))
        if kind == "barrier":
            ops.append(("barrier",))
            open_accesses = []
            continue
        if kind in ("fill", "update", "scale"):
            acc = [(draw(st.sampled_from(keys)), *rng(), True)]  # scale is read-write
        elif kind in ("copy", "xor_copy"):
            k1, k2 = draw(st.sampled_from(keys)), draw(st.sampled_from(keys))
            s, e = rng()
            n = e - s
            t = draw(st.integers(0, (SIZE - n) // 16)) * 16
            if k1 == k2 and s < t + n and t < e:
                continue  # overlapping copy within one buffer: invalid
            acc = [(k1, s, e, False), (k2, t, t + n, True)]
        else:  # add: two readonly inputs, one output
            acc = [(draw(st.sampled_from(keys)), *rng(), False), (draw(st.sampled_from(keys)), *rng(), False),
                   (draw(st.sampled_from(keys)), *rng(), True)]
        if validate and any(k == k2 and s < e2 and s2 < e and (w or w2)
                            for k, s, e, w in acc for k2, s2, e2, w2 in open_accesses):
            ops.append(("barrier",))
            open_accesses = []
        ops.append((kind, acc))
        open_accesses += acc
        if draw(st.integers(0, 5)) == 0:
            ops.append(("barrier",))
            open_accesses = []
    return {"ops": ops, "validate": validate, "slots": use_slots}


KIND = {"fill": "fill", "update": "update", "copy": "copy", "scale": "dispatch", "xor_copy": "dispatch",
        "add": "dispatch"}


def record_abstract(dev, exe, buffers, program, dependencies, strategy):
    def ref(key, s, e):
        kind, i = key
        return hal.ref(buffers[i], s, e - s) if kind == "b" else hal.slot(i, s, e - s)

    def build(cb):
        for op in program["ops"]:
            kind = op[0]
            if kind == "barrier":
                cb.execution_barrier()
                continue
            refs = [ref(k, s, e) for k, s, e, _ in op[1]]
            if kind == "fill":
                cb.fill_buffer(refs[0], np.uint32(1))
            elif kind == "update":
                cb.update_buffer(refs[0], bytes(op[1][0][2] - op[1][0][1]))
            elif kind == "copy":
                cb.copy_buffer(refs[0], refs[1])
            elif kind == "scale":
                cb.dispatch(exe, "scale", constants=(1, 3), bindings=refs)
            elif kind == "xor_copy":
                cb.dispatch(exe, "xor_copy", constants=(1, 3), bindings=refs)
            else:
                cb.dispatch(exe, "add", constants=(1,), bindings=refs)

    return record(dev, build, dependencies=dependencies, strategy=strategy,
                  binding_capacity=NSLOT if program["slots"] else 0, validate=program["validate"])


def command_table(program):
    """(kind, segment, accesses) per command, with segment = barriers recorded before it."""
    out = []
    barriers = 0
    for op in program["ops"]:
        if op[0] == "barrier":
            barriers += 1
        else:
            out.append((KIND[op[0]], barriers, op[1]))
    return out


def may_alias(k1, k2):
    return k1 == k2 or k1[0] == "s" or k2[0] == "s"


def hazard_pairs(cmds, resolve=None):
    """(u, v), u < v in different segments, with overlapping accesses of which one writes. Without
    `resolve`, slots may alias anything; with it, keys are resolved to concrete buffers first."""
    pairs = set()
    for v, (_, sv, av) in enumerate(cmds):
        for u in range(v):
            _, su, au = cmds[u]
            if su == sv:
                continue
            for k1, s1, e1, w1 in au:
                for k2, s2, e2, w2 in av:
                    alias = may_alias(k1, k2) if resolve is None else resolve(k1) == resolve(k2)
                    if alias and s1 < e2 and s2 < e1 and (w1 or w2):
                        pairs.add((u, v))
    return pairs


def concrete_tables(cmds, race_free_only):
    """Every binding of the slots to program buffers or to outside buffers ('f', j) under which the
    program is valid: no copy between overlapping ranges of one buffer and, if `race_free_only`, no
    race inside a segment. Yields a resolve(key) function per table."""
    options = [("b", i) for i in range(NBUF)] + [("f", j) for j in range(NSLOT)]
    for table in itertools.product(options, repeat=NSLOT):
        def resolve(key, table=table):
            return table[key[1]] if key[0] == "s" else key
        ok = True
        for kind, _seg, acc in cmds:
            if kind == "copy":
                (k1, s1, e1, _), (k2, s2, e2, _) = acc
                if resolve(k1) == resolve(k2) and s1 < e2 and s2 < e1:
                    ok = False
        if ok and race_free_only:
            for v, (_, sv, av) in enumerate(cmds):
                for u in range(v):
                    _, su, au = cmds[u]
                    if su == sv and any(resolve(k1) == resolve(k2) and s1 < e2 and s2 < e1 and (w1 or w2)
                                        for k1, s1, e1, w1 in au for k2, s2, e2, w2 in av):
                        ok = False
        if ok:
            yield table, resolve


def assert_hazards_ordered(g, program, cmds):
    if not program["slots"]:
        for u, v in hazard_pairs(cmds):
            assert nx.has_path(g, u, v), f"hazard {u}->{v} is not ordered"
        return
    for table, resolve in concrete_tables(cmds, race_free_only=program["validate"]):
        for u, v in hazard_pairs(cmds, resolve):
            assert nx.has_path(g, u, v), f"hazard {u}->{v} is not ordered when the slots are bound to {table}"


@pytest.fixture(scope="module")
def gen_env():
    dev = open_device("host")
    exe = dev.load_executable(kernels.SOURCE)
    buffers = [dev.allocate(SIZE) for _ in range(NBUF)]
    yield dev, exe, buffers
    dev.close()


def _check_common(g, cmds):
    n = len(cmds)
    assert sorted(g.nodes) == list(range(n))
    for i, (kind, seg, _) in enumerate(cmds):
        assert g.nodes[i] == {"kind": kind, "segment": seg}
    assert nx.is_directed_acyclic_graph(g)
    for u, v in g.edges:
        assert u < v, (u, v)
        assert cmds[u][1] < cmds[v][1], f"edge {u}->{v} inside or against segment order"
    reduced = nx.transitive_reduction(g)
    assert sorted(reduced.edges) == sorted(g.edges), "the graph is not transitively reduced"


VARIANTS = {
    "race_free": dict(validate=True, use_slots=False),
    "race_free_slots": dict(validate=True, use_slots=True),
    "unvalidated": dict(validate=False, use_slots=False),
    "unvalidated_slots": dict(validate=False, use_slots=True),
}
variants = pytest.mark.parametrize("variant", list(VARIANTS))


@variants
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_hazards(gen_env, variant, data):
    program = data.draw(abstract_programs(**VARIANTS[variant]), label="program")
    dev, exe, buffers = gen_env
    graphs = [record_abstract(dev, exe, buffers, program, "hazards", s).dependency_graph() for s in STRATEGIES]
    assert nx.utils.graphs_equal(graphs[0], graphs[1]), "the graph depends on the strategy"
    g = graphs[0]
    cmds = command_table(program)
    _check_common(g, cmds)
    assert_hazards_ordered(g, program, cmds)
    # Same results with fewer edges: every hazards edge is implied by the barriers graph.
    bg = record_abstract(dev, exe, buffers, program, "barriers", "deferred").dependency_graph()
    closure = nx.transitive_closure_dag(bg)
    assert set(g.edges) <= set(closure.edges)
    if program["validate"] and not program["slots"]:
        # Race-free and exact: the graph is the transitive reduction of the hazard relation.
        h = nx.DiGraph()
        h.add_nodes_from(range(len(cmds)))
        h.add_edges_from(hazard_pairs(cmds))
        assert sorted(g.edges) == sorted(nx.transitive_reduction(h).edges)


@variants
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_barriers(gen_env, variant, data):
    program = data.draw(abstract_programs(**VARIANTS[variant]), label="program")
    dev, exe, buffers = gen_env
    graphs = [record_abstract(dev, exe, buffers, program, "barriers", s) for s in STRATEGIES]
    assert nx.utils.graphs_equal(graphs[0].dependency_graph(), graphs[1].dependency_graph())
    assert graphs[0].program.groups == graphs[1].program.groups
    assert graphs[0].program.group_of == graphs[1].program.group_of
    g = graphs[0].dependency_graph()
    cmds = command_table(program)
    _check_common(g, cmds)
    assert_hazards_ordered(g, program, cmds)
    # Segment k waits for every command of the previous non-empty segment, and only for those.
    segments = sorted({seg for _, seg, _ in cmds})
    members = {s: [i for i, c in enumerate(cmds) if c[1] == s] for s in segments}
    expected = set()
    for prev, cur in zip(segments, segments[1:]):
        for v in members[cur]:
            for u in members[prev]:
                assert nx.has_path(g, u, v)
                expected.add((u, v))
    assert set(g.edges) == expected
    # One predecessor group per barrier step.
    program = graphs[0].program
    assert len(program.groups) == max(0, len(segments) - 1)
    for cur in segments[1:]:
        assert len({program.group_of[v] for v in members[cur]}) == 1


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_weights_read_by_every_step_of_a_long_chain_need_no_edge_past_the_first(host, strategy):
    """A buffer written once and read by every step: each step's wait for the writer is implied by
    the previous step (which read it too), and finding that must not need a walk down the chain."""
    def k(ctx):
        pass
    exe = host.load_executable(hal.ExecutableSource.python({"k": k}, [hal.Export("k", bindings=3, readonly=(0, 1))]))
    weights, a, b = host.allocate(64), host.allocate(64), host.allocate(64)
    cb = host.create_command_buffer(dependencies="hazards", strategy=strategy)
    steps = 600  # more than the search budget: only the pruning by shared reads keeps this exact
    with cb:
        cb.fill_buffer(weights, np.uint8(1))
        cb.execution_barrier()
        for i in range(steps):
            cb.dispatch(exe, "k", 1, (), (weights, (a, b)[i % 2], (b, a)[i % 2]))
            cb.execution_barrier()
    assert sorted(cb.dependency_graph().edges) == [(i, i + 1) for i in range(steps)]


def test_a_search_past_the_budget_keeps_a_redundant_edge_but_never_drops_an_order(host):
    """Steps reading distinct slices of the weights: the writer's redundancy lies deeper than the
    search budget, so the edge stays; the DAG still orders every hazard."""
    from hal.dependencies import SEARCH_BUDGET

    def k(ctx):
        pass
    exe = host.load_executable(hal.ExecutableSource.python({"k": k}, [hal.Export("k", bindings=3, readonly=(0, 1))]))
    steps = SEARCH_BUDGET + 50
    weights, a, b = host.allocate(16 * steps), host.allocate(64), host.allocate(64)
    cb = host.create_command_buffer(dependencies="hazards")
    with cb:
        cb.fill_buffer(weights, np.uint8(1))
        cb.execution_barrier()
        for i in range(steps):
            cb.dispatch(exe, "k", 1, (), (hal.ref(weights, 16 * i, 16), (a, b)[i % 2], (b, a)[i % 2]))
            cb.execution_barrier()
    g = cb.dependency_graph()
    assert all(g.has_edge(i, i + 1) for i in range(steps))
    assert all(nx.has_path(g, 0, i) for i in range(1, steps + 1))
    redundant = [v for u, v in g.edges if u == 0 and v > 1]
    assert redundant and min(redundant) > SEARCH_BUDGET // 2  # exact while the search fits the budget


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_hazards_with_a_range_bound_twice_in_a_row(gen_env, data):
    """add(x, x, out): the planner tracks a range bound twice in a row once; the graph stays exact."""
    program = data.draw(abstract_programs(validate=True, use_slots=False), label="program")
    ops = []
    for op in program["ops"]:
        if op[0] == "add" and data.draw(st.booleans(), label="repeat"):
            op = ("add", [op[1][0], op[1][0], op[1][2]])  # drops a read: still race-free
        ops.append(op)
    program = dict(program, ops=ops)
    dev, exe, buffers = gen_env
    graphs = [record_abstract(dev, exe, buffers, program, "hazards", s).dependency_graph() for s in STRATEGIES]
    assert nx.utils.graphs_equal(graphs[0], graphs[1]), "the graph depends on the strategy"
    cmds = command_table(program)
    _check_common(graphs[0], cmds)
    h = nx.DiGraph()
    h.add_nodes_from(range(len(cmds)))
    h.add_edges_from(hazard_pairs(cmds))
    assert sorted(graphs[0].edges) == sorted(nx.transitive_reduction(h).edges)


def test_buffers_have_distinct_serials(host):
    """Buffer.serial keys the planner's per-buffer maps: no two buffers share one, released or not."""
    first = host.allocate(16)
    first.release()
    serials = [first.serial] + [host.allocate(16).serial for _ in range(3)]
    assert len(set(serials)) == len(serials)
