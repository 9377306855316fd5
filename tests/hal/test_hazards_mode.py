"""Hazards mode on hand-written programs: hazard kinds, byte ranges, bindings, transitive reduction, search budget."""

from __future__ import annotations

import gc

import networkx as nx
import numpy as np
import pytest

import hal
from tests.hal.dependency_helpers import add, assert_graph, hazards, record, scale, strategies, xor_copy


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


# Long chains and the search budget.
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


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_command_off_a_chain_finds_what_the_chain_wrote(host, strategy):
    """A chain's commands each wait for the one before, found without the access maps; a command that does not
    touch the last step must still find, through the maps, the early step it conflicts with, and what the
    chain read and wrote after it."""
    x, y, z, w = (host.allocate(64) for _ in range(4))
    cb = host.create_command_buffer(dependencies="hazards", strategy=strategy)
    with cb:
        cb.fill_buffer(x, np.uint32(1))  # 0
        cb.execution_barrier()
        cb.copy_buffer(x, y)  # 1: after 0
        cb.execution_barrier()
        cb.copy_buffer(y, z)  # 2: after 1
        cb.execution_barrier()
        cb.copy_buffer(x, w)  # 3: after 0 only (no conflict with 2)
        cb.execution_barrier()
        cb.fill_buffer(y, np.uint32(2))  # 4: after 2 (it read y) and 1 (it wrote y): 2 reaches 1
        cb.execution_barrier()
        cb.copy_buffer(w, x)  # 5: after 3 (it wrote w, read x) and 1 (it read x), which 3 does not reach
    assert sorted(cb.dependency_graph().edges) == [(0, 1), (0, 3), (1, 2), (1, 5), (2, 4), (3, 5)]


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_slot_after_a_chain_sees_every_step(host, strategy):
    """The first slot reference merges the access maps into one; the chain before it, answered without the maps,
    must be in them first: a write through a slot after the chain waits for its last step."""
    x, y = host.allocate(64), host.allocate(64)
    cb = host.create_command_buffer(dependencies="hazards", strategy=strategy, binding_capacity=1)
    with cb:
        cb.fill_buffer(x, np.uint32(1))  # 0
        cb.execution_barrier()
        cb.copy_buffer(x, y)  # 1
        cb.execution_barrier()
        cb.fill_buffer(hal.slot(0, 0, 64), np.uint32(2))  # 2: may be x or y
    assert sorted(cb.dependency_graph().edges) == [(0, 1), (1, 2)]


def _slice_reader(host, bindings=3):
    """A kernel doing nothing that reads every binding but the last, which it writes."""
    def k(ctx):
        pass
    export = hal.Export("k", bindings=bindings, readonly=tuple(range(bindings - 1)))
    return host.load_executable(hal.ExecutableSource.python({"k": k}, [export]))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_chain_reaches_what_is_below_it_however_deep(host, strategy):
    """Steps reading distinct slices of the weights: the weights' writer is a candidate of every step, and
    the step before reaches everything below it (a chain), so no edge from the writer stays, past any search
    budget."""
    from hal.hazards import SEARCH_BUDGET

    exe = _slice_reader(host)
    steps = SEARCH_BUDGET + 50
    weights, a, b = host.allocate(16 * steps), host.allocate(64), host.allocate(64)
    cb = host.create_command_buffer(dependencies="hazards", strategy=strategy)
    with cb:
        cb.fill_buffer(weights, np.uint8(1))
        cb.execution_barrier()
        for i in range(steps):
            cb.dispatch(exe, "k", 1, (), (hal.ref(weights, 16 * i, 16), (a, b)[i % 2], (b, a)[i % 2]))
            cb.execution_barrier()
    assert sorted(cb.dependency_graph().edges) == [(i, i + 1) for i in range(steps)]


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_ladder_reaches_what_is_below_it_however_deep(host, strategy):
    """Segments of two steps, each reading both outputs of the segment before and its own slice of the weights:
    a step waits for the two before it, which together reach everything below, so no edge from the weights'
    writer stays past the first segment, past any search budget."""
    from hal.hazards import SEARCH_BUDGET

    exe = _slice_reader(host, bindings=4)
    segments = SEARCH_BUDGET + 50
    weights = host.allocate(32 * segments)
    outputs = [(host.allocate(64), host.allocate(64)) for _ in range(2)]
    cb = host.create_command_buffer(dependencies="hazards", strategy=strategy)
    with cb:
        cb.fill_buffer(weights, np.uint8(1))
        cb.execution_barrier()
        for s in range(segments):
            (a, b), out = outputs[(s + 1) % 2], outputs[s % 2]
            for lane in range(2):
                cb.dispatch(exe, "k", 1, (), (hal.ref(weights, 32 * s + 16 * lane, 16), a, b, out[lane]))
            cb.execution_barrier()
    expected = [(0, 1), (0, 2)] + [(2 * s + 1 + i, 2 * s + 3 + j) for s in range(segments - 1)
                                   for i in range(2) for j in range(2)]
    assert sorted(cb.dependency_graph().edges) == sorted(expected)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_reader_within_the_reach_still_shows_the_writer_it_waited_for(host, strategy):
    """A reader of the weights (command 2) lies within the latest candidate's reach, which drops it; it still
    shows that the weights' writer (command 0, far below that reach) is waited for: no edge from the writer
    stays, though a search would run out of budget down the chain before finding it."""
    from hal.hazards import SEARCH_BUDGET

    exe = _slice_reader(host)
    weights, gap, d, a, b, x, z = (host.allocate(64) for _ in range(7))  # z is never written
    steps = SEARCH_BUDGET + 50
    cb = host.create_command_buffer(dependencies="hazards", strategy=strategy)
    with cb:
        cb.fill_buffer(weights, np.uint8(1))
        cb.fill_buffer(gap, np.uint8(1))  # a command below the reach
        cb.execution_barrier()
        cb.dispatch(exe, "k", 1, (), (weights, z, d))  # 2: reads the weights
        cb.execution_barrier()
        cb.fill_buffer(a, np.uint8(1))  # 3: a chain starts
        cb.execution_barrier()
        for i in range(steps):
            cb.dispatch(exe, "k", 1, (), ((a, b)[i % 2], z, (b, a)[i % 2]))
            cb.execution_barrier()
        cb.dispatch(exe, "k", 1, (), (d, (a, b)[steps % 2], x))  # waits for 2 and the chain's end
        cb.execution_barrier()
        cb.dispatch(exe, "k", 1, (), (x, z, weights))  # candidates: 0 (overwritten), 2 (read it), the one before
    g = cb.dependency_graph()
    last = max(g.nodes)
    assert list(g.predecessors(last)) == [last - 1]


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_search_past_the_budget_keeps_a_redundant_edge_but_never_drops_an_order(host, strategy):
    """Two chains taking turns, each step reading its own slice of the weights: a step reaches the weights'
    writer only down its own chain (it waits for no run of consecutive commands), so the writer's redundancy
    lies deeper than the search budget and the edge stays; the DAG still orders every hazard."""
    from hal.hazards import SEARCH_BUDGET

    exe = _slice_reader(host)
    steps = 2 * (SEARCH_BUDGET + 50)
    weights = host.allocate(16 * steps)
    chains = [(host.allocate(64), host.allocate(64)) for _ in range(2)]
    cb = host.create_command_buffer(dependencies="hazards", strategy=strategy)
    with cb:
        cb.fill_buffer(weights, np.uint8(1))
        cb.execution_barrier()
        for i in range(steps):
            x, y = chains[i % 2]
            j = i // 2
            cb.dispatch(exe, "k", 1, (), (hal.ref(weights, 16 * i, 16), (x, y)[j % 2], (y, x)[j % 2]))
            cb.execution_barrier()
    g = cb.dependency_graph()
    assert all(g.has_edge(i, i + 2) for i in range(1, steps - 1))  # step i is command i + 1
    assert all(nx.has_path(g, 0, i) for i in range(1, steps + 1))
    redundant = [v for u, v in g.edges if u == 0 and v > 2]
    assert redundant and min(redundant) > SEARCH_BUDGET  # exact while the search fits the budget


@hazards
@strategies
def test_a_planner_after_another_starts_from_nothing(host, bufs, dependencies, strategy):
    """A dropped planner's tracker serves the next one, reset: what the first tracked (a slot, which sends every range
    to one shared map; its buffers' maps and their pieces) must not show in the next one's graph."""

    def first(cb):
        cb.fill_buffer(hal.ref(bufs[0], 0, 256), np.uint32(1))
        cb.execution_barrier()
        cb.update_buffer(hal.slot(0, 0, 16), np.arange(4, dtype=np.uint32))
        cb.execution_barrier()
        cb.fill_buffer(hal.ref(bufs[1], 0, 256), np.uint32(2))

    def second(cb):  # two buffers: no hazard between the fills but through a slot's shared map
        cb.fill_buffer(hal.ref(bufs[1], 0, 256), np.uint32(3))
        cb.execution_barrier()
        cb.fill_buffer(hal.ref(bufs[0], 0, 256), np.uint32(4))

    for _ in range(2):  # the second time, the first program's tracker too comes from the one before
        cb = record(host, first, dependencies=dependencies, strategy=strategy, binding_capacity=1)
        assert_graph(cb, [("fill", 0), ("update", 1), ("fill", 2)], [(0, 1), (1, 2)])
        del cb
        gc.collect()
        cb = record(host, second, dependencies=dependencies, strategy=strategy)
        assert_graph(cb, [("fill", 0), ("fill", 1)], [])
        del cb
        gc.collect()
