"""Slots in the dependency graph: unknown buffers alias each other and every buffer."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import hal
from tests.hal.dependency_helpers import BUF, MODES, assert_graph, hazards, record, scale, strategies


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
