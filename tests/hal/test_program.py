"""The Program the planner freezes at end(): its graph layout (lanes, join nodes) and its barrier flags keep
every dependency of the DAG, whatever the lane limit, strategy or dependency mode; and it is read-only."""

from __future__ import annotations

import gc
import heapq
import weakref

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hal
from hal.command_buffer import CommandBuffer
from hal.commands import Command
from hal.dependencies import Planner, lane_width
from hal.program import Program
from tests import kernels
from tests.conftest import open_device


@pytest.fixture(scope="module")
def device():
    with hal.create_device("host") as dev:
        yield dev


def record(host, sizes, fills, dependencies):
    """Segments of `sizes` commands (empty ones too: barriers in a row); command k fills its own range when
    k is in `fills`, else scales it; in hazards mode every third command also reads range 0."""
    exe = host.load_executable(kernels.SOURCE)
    out = host.allocate(256 * (sum(sizes) + 1))
    cb = host.create_command_buffer(mode="reusable", dependencies=dependencies, validate=False)
    with cb:
        k = 0
        for size in sizes:
            for _ in range(size):
                target = hal.ref(out, 256 * (k + 1), 256)
                if k in fills:
                    cb.fill_buffer(target, b"\x07")
                elif k % 3 == 0:
                    cb.dispatch(exe, "add", (1, 1, 1), (64,), (hal.ref(out, 0, 256), target, target))
                else:
                    cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (target,))
                k += 1
            cb.execution_barrier()
    return cb


def plan(cb, lanes, strategy, layout=True):
    """The Program of `cb`'s recording, planned again with a lane limit of `lanes`; `layout`: laid out while
    planning, else on first use."""
    planner = Planner(cb.dependencies, lanes, strategy == "single_pass", layout)
    if strategy == "single_pass":
        for c in cb.commands:
            planner.add(c)
    else:
        planner.plan(cb.commands)
    return planner.finish(cb.commands, {}, 0, {}, 0)


def layout(program):
    """The graph layout with its join nodes contracted: command -> commands it waits for, transitively."""
    graph = program.graph()
    return nx.transitive_closure_dag(graph)


@given(sizes=st.lists(st.integers(0, 12), min_size=1, max_size=7), lanes=st.integers(0, 5),
       fills=st.sets(st.integers(0, 60)), dependencies=st.sampled_from(["barriers", "hazards"]),
       strategy=st.sampled_from(["deferred", "single_pass"]))
@settings(max_examples=120, deadline=None)
def test_the_layout_keeps_every_dependency_in_lanes(device, sizes, lanes, fills, dependencies, strategy):
    cb = record(device, sizes, fills, dependencies)
    program = plan(cb, lanes, strategy)
    assert program.dependency_graph().edges == cb.dependency_graph().edges  # lanes change the layout only
    reach = layout(program)
    for u, v in cb.dependency_graph().edges:
        assert reach.has_edge(u, v), f"the layout lost the dependency {u} -> {v}"
    nodes = program.nodes
    assert sorted(c for c in nodes if c is not None) == list(range(len(cb.commands)))
    for k in range(len(nodes)):
        assert all(d < k for d in program.node_dependencies(k)), "a node waits for a later one"
    order = {program.node_of(i): i for i in range(len(cb.commands))}
    for (start, width), seg in zip(program.lanes, [s for s in cb.segments() if s.commands]):
        size = len(seg.commands)
        assert start == seg.commands[0].index
        if lanes:
            assert width == (lane_width(size, lanes) if strategy == "deferred" else lanes)
            for c in seg.commands:  # at most one lane predecessor of its own segment, `width` behind
                mine = [order[d] for d in program.node_dependencies(program.node_of(c.index))
                        if d in order and cb.commands[order[d]].segment == c.segment]
                assert mine in ([], [c.index - width])
        else:
            assert all(cb.commands[order[d]].segment != c.segment for c in seg.commands
                       for d in program.node_dependencies(program.node_of(c.index)) if d in order)


@given(sizes=st.lists(st.integers(0, 12), min_size=1, max_size=7), lanes=st.integers(0, 5),
       fills=st.sets(st.integers(0, 60)), dependencies=st.sampled_from(["barriers", "hazards"]),
       strategy=st.sampled_from(["deferred", "single_pass"]))
@settings(max_examples=60, deadline=None)
def test_a_layout_left_for_first_use_is_the_one_planning_lays_out(device, sizes, lanes, fills, dependencies,
                                                                 strategy):
    """A backend without a graph (host, Vulkan) has the planner skip the layout; asked for, it is the same."""
    cb = record(device, sizes, fills, dependencies)
    now, later = plan(cb, lanes, strategy), plan(cb, lanes, strategy, layout=False)
    assert later.nodes == now.nodes and later.lanes == now.lanes
    assert [later.node_dependencies(k) for k in range(len(now.nodes))] == \
        [now.node_dependencies(k) for k in range(len(now.nodes))]
    assert later.barriers == now.barriers and later.groups == now.groups


@given(sizes=st.lists(st.integers(0, 12), min_size=1, max_size=7), fills=st.sets(st.integers(0, 60)),
       dependencies=st.sampled_from(["barriers", "hazards"]))
@settings(max_examples=60, deadline=None)
def test_the_topological_order_runs_the_latest_ready_command_first(device, sizes, fills, dependencies):
    cb = record(device, sizes, fills, dependencies)
    graph = cb.dependency_graph()
    waiting = {v: graph.in_degree(v) for v in graph}
    ready, expected = [-v for v in graph if not waiting[v]], []
    heapq.heapify(ready)
    while ready:  # the reference: a heap of the ready commands, the largest index first
        u = -heapq.heappop(ready)
        expected.append(u)
        for v in graph.successors(u):
            waiting[v] -= 1
            if not waiting[v]:
                heapq.heappush(ready, -v)
    assert [c.index for c in cb.program.topological_order()] == expected


@given(sizes=st.lists(st.integers(0, 8), min_size=1, max_size=7), fills=st.sets(st.integers(0, 40)),
       dependencies=st.sampled_from(["barriers", "hazards"]), strategy=st.sampled_from(["deferred", "single_pass"]))
@settings(max_examples=80, deadline=None)
def test_a_replay_in_recording_order_has_a_barrier_across_every_dependency(device, sizes, fills, dependencies,
                                                                           strategy):
    cb = record(device, sizes, fills, dependencies)
    program = plan(cb, 0, strategy)
    barriers = set(program.barriers)
    for u, v in cb.dependency_graph().edges:
        assert any(u < b <= v for b in barriers), f"no barrier between {u} and its dependent {v}"
    if dependencies == "barriers" and strategy == "deferred":
        firsts = [s.commands[0].index for s in cb.segments() if s.commands]
        assert sorted(barriers) == firsts[1:]


def test_wide_fan_in_waits_on_the_last_node_of_each_lane(host):
    """98 commands in 5 lanes are 20 deep (deferred balances them: 5 lanes of 20 and less); the reducer after
    them waits for 5 nodes, through no join node (only it waits on that group)."""
    cb = record(host, [1, 98, 1], set(), "barriers")
    program = plan(cb, 5, "deferred")
    assert program.lanes == ((0, 1), (1, 5), (99, 1))
    reducer = program.node_dependencies(program.node_of(99))
    assert sorted(program.nodes[d] for d in reducer) == [94, 95, 96, 97, 98]


def test_a_shared_group_goes_through_one_join_node(host):
    cb = record(host, [3, 4], set(), "barriers")
    program = cb.program
    joins = [k for k, c in enumerate(program.nodes) if c is None]
    assert len(joins) == 1 and sorted(program.node_dependencies(joins[0])) == [program.node_of(i) for i in range(3)]
    for i in range(3, 7):
        assert program.node_dependencies(program.node_of(i)) == (joins[0],)
    assert program.graph().number_of_edges() == 3 + 4  # m + n, not m * n


def test_the_program_is_frozen_and_read_only(host):
    cb = record(host, [2, 1], set(), "barriers")
    program = cb.program
    assert program.frozen and program.commands == cb.commands and program.dependencies == "barriers"
    assert program.predecessors(2) == (0, 1) and program.groups == ((0, 1),) and program.group_of == (-1, -1, 0)
    assert program.slot_users == {} and program.slots_needed == 0 and program.regions == ()
    with pytest.raises(AttributeError):
        program.commands = ()
    assert [c.index for c in program.topological_order()] == [1, 0, 2]  # latest ready first
    recording = host.create_command_buffer()
    recording.begin()
    with pytest.raises(hal.ValidationError, match="program: the command buffer is recording; call end"):
        assert recording.program is None  # never reached: reading it raises


def test_slot_users_name_the_commands_of_each_slot(host):
    exe = host.load_executable(kernels.SOURCE)
    cb = host.create_command_buffer(mode="reusable", binding_capacity=3)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (4, 3), (hal.slot(0),))
        cb.execution_barrier()
        cb.copy_buffer(hal.slot(0, 0, 16), hal.slot(2, 0, 16))
        cb.fill_buffer(host.allocate(16), b"\x01")
    assert cb.program.slot_users == {0: (0, 1), 2: (1,)}
    assert cb.program.slots_needed == 3


def test_nested_names_the_commands_each_execute_commands_recorded(host):
    exe = host.load_executable(kernels.SOURCE)
    flag, out = host.allocate(4), host.allocate(64)
    inner = host.create_command_buffer(mode="reusable", binding_capacity=1)
    with inner:
        inner.dispatch(exe, "scale", (1, 1, 1), (4, 3), (hal.slot(0),))
        inner.execution_barrier()
        inner.fill_buffer(hal.slot(0), np.uint32(1))
    empty = host.create_command_buffer(mode="reusable")
    with empty:
        pass
    cb = host.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(out, np.uint32(0))
        cb.execute_commands(inner, (out,))
        cb.execute_commands(empty)
        with cb.if_nonzero(flag):
            cb.fill_buffer(out, np.uint32(2))
            cb.execute_commands(inner, (out,))
        cb.execute_commands(inner, (out,))
    program = cb.program
    assert program.nested == ((1, 3), (4, 6))
    assert [c.kind for c in program.commands[3:]] == ["if_nonzero", "dispatch", "fill"]
    assert program.commands[3].body.nested == ((1, 3),)
    kinds = [c.kind for c in program.commands]  # an enum whose members are also their names as strings
    assert kinds[3] is hal.CommandKind.IF_NONZERO and kinds[5] is hal.CommandKind.FILL
    assert all(isinstance(k, hal.CommandKind) for k in kinds)
    assert f"{kinds[3]} {kinds[4]!s}" == "if_nonzero dispatch" and repr(program.commands[5]).startswith("<fill #5")


def test_records_of_plain_dispatches_are_hidden_from_the_cycle_collector(device):
    """The collector passes over every tracked object at each young collection: the record of a dispatch with plain
    constants that binds device buffers and slots (nothing holding a command buffer) is untracked with its bindings.
    One that binds a transient (whose device is the command buffer: a cycle), reads a constant slot or takes
    indirect counts stays tracked, and so do the other commands."""
    exe = device.load_executable(kernels.SOURCE)
    out = device.allocate(1024)
    params = device.upload(np.ones(3, np.uint32), usage=hal.BufferUsage.DISPATCH_STORAGE)
    cb = device.create_command_buffer(binding_capacity=1, constant_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (hal.ref(out, 0, 256),))
        cb.dispatch(exe, "scale", (2, 1, 1), (64, 1.5), (hal.slot(0),))
        cb.dispatch(exe, "scale", (1, 1, 1), (64, np.float32(2)), (hal.ref(out, 256, 256),))
        cb.dispatch(exe, "scale", (1, 1, 1), (64, hal.constant_slot(0)), (hal.ref(out, 512, 256),))
        cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(hal.ref(out, 768, 256),))
        cb.execution_barrier()
        cb.fill_buffer(out, b"\x01")
    assert [gc.is_tracked(c) for c in cb.program.commands] == [False, False, True, True, True, True]
    assert [gc.is_tracked(c.bindings) for c in cb.program.commands[:2]] == [False, False]

    cb = device.create_command_buffer()
    with cb:
        scratch = cb.alloca(256)
        cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (hal.ref(out, 0, 256),))
        cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (scratch,))
    assert [gc.is_tracked(c) for c in cb.program.commands] == [False, True]


@pytest.mark.parametrize("backend", ["host", pytest.param("vulkan", marks=pytest.mark.vulkan),
                                     pytest.param("cuda", marks=pytest.mark.cuda)])
def test_plain_dispatches_hold_their_arguments_as_c_data_where_the_backend_reads_them(backend):
    """A dispatch with plain constants (ints, floats) that binds device buffers holds its workgroup counts, each
    binding's (handle, offset, length) and its constants' words as C data, written as they were checked, when its
    backend reads them there (Emitter.reads_arguments: Vulkan's, whose call stream encodes them without the GIL).
    One that binds a slot or a transient, reads a numpy scalar or a constant slot, or takes indirect counts holds
    none: its backend resolves it as it encodes it."""
    with open_device(backend) as dev:
        exe = dev.load_executable(kernels.SOURCE)
        out, other = dev.allocate(1024), dev.allocate(1024)
        params = dev.upload(np.ones(3, np.uint32), usage=hal.BufferUsage.DISPATCH_STORAGE)
        cb = dev.create_command_buffer(binding_capacity=1, constant_capacity=1)
        with cb:
            scratch = cb.alloca(256)
            cb.dispatch(exe, "scale", (2, 1, 1), (64, 3), (hal.ref(out, 0, 256),))
            cb.dispatch(exe, "add", (1, 1, 1), (64,), (hal.ref(out, 256, 256), other, hal.ref(out, 512, 256)))
            cb.dispatch(exe, "scale", [1, np.int32(3)], (64, -1.5), (hal.ref(out, 768, 256),))  # counts normalised
            cb.execution_barrier()
            cb.dispatch(exe, "scale", (1, 1, 1), (64, 2), (hal.slot(0),))
            cb.dispatch(exe, "scale", (1, 1, 1), (64, 2), (scratch,))
            cb.dispatch(exe, "scale", (1, 1, 1), (64, np.float32(2)), (hal.ref(out, 0, 256),))
            cb.dispatch(exe, "scale", (1, 1, 1), (64, hal.constant_slot(0)), (hal.ref(out, 256, 256),))
            cb.dispatch_indirect(exe, "mark", params, constants=(1,), bindings=(hal.ref(out, 512, 256),))
        arguments = [c.c_arguments for c in cb.program.commands]
        if not cb.emitter.reads_arguments:
            assert backend != "vulkan"
            assert arguments == [None] * 8
            return
        assert arguments[:3] == [
            ((2, 1, 1), ((out.handle, 0, 256),), (64, 3)),
            ((1, 1, 1), ((out.handle, 256, 256), (other.handle, 0, 1024), (out.handle, 512, 256)), (64,)),
            ((1, 3, 1), ((out.handle, 768, 256),), (64, 0xBFC00000)),  # -1.5 as float32 bits
        ]
        assert arguments[3:] == [None] * 5


@pytest.mark.parametrize("backend", ["host", pytest.param("vulkan", marks=pytest.mark.vulkan),
                                     pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_command_buffer_whose_records_bind_transients_is_collected(backend):
    """A transient's device is its command buffer, so a record binding one closes a reference cycle: the collector
    must see it (the record stays tracked) to free the command buffer and its transients."""
    with open_device(backend) as dev:
        exe = dev.load_executable(kernels.SOURCE)
        out = dev.allocate(1024)
        cb = dev.create_command_buffer()
        with cb:
            scratch = cb.alloca(256)
            cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (hal.ref(out, 0, 256),))
            cb.fill_buffer(scratch, b"\x02")
            cb.execution_barrier()
            cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (scratch,))
        dev.queue_execute(cb)
        dev.synchronize()
        dropped, transient = weakref.ref(cb), weakref.ref(scratch.buffer)
        del cb, scratch
        gc.collect()
        assert dropped() is None and transient() is None


KINDS = ("buffer", "transient", "slot", "constant slot", "fill", "region", "nested")


@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_whatever_its_records_bind_a_dropped_command_buffer_is_freed(device, kinds):
    """Hidden records (hal.commands.hide_from_collector) must close no reference cycle the collector cannot see:
    whatever mix of device buffers, transients, slots, constant slots, regions and nested command buffers (binding
    the outer one's transients) a recording holds, once dropped its command buffers and transients are freed."""
    exe = device.load_executable(kernels.SOURCE)
    out = device.allocate(256 * (len(kinds) + 1))
    flag = device.allocate(4)
    cb = device.create_command_buffer(binding_capacity=1, constant_capacity=1)
    inner = device.create_command_buffer(mode="reusable", binding_capacity=1)
    made = [weakref.ref(cb), weakref.ref(inner)]

    def transient(cb: hal.CommandBuffer) -> hal.BufferRef:
        ref = cb.alloca(256)
        made.append(weakref.ref(ref.buffer))
        return ref

    with inner:
        inner.dispatch(exe, "scale", (1, 1, 1), (64, 3), (hal.slot(0),))
    with cb:
        for k, kind in enumerate(kinds):
            target = hal.ref(out, 256 * k, 256)
            if kind == "buffer":
                cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (target,))
            elif kind == "transient":
                cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (transient(cb),))
            elif kind == "slot":
                cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (hal.slot(0),))
            elif kind == "constant slot":
                cb.dispatch(exe, "scale", (1, 1, 1), (64, hal.constant_slot(0)), (target,))
            elif kind == "fill":
                cb.fill_buffer(target, b"\x01")
            elif kind == "region":
                with cb.if_nonzero(flag):
                    cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (target,))
            else:
                cb.execute_commands(inner, (transient(cb),))
            cb.execution_barrier()
    device.queue_execute(cb, (out,), constants=(2,))
    device.synchronize()
    del cb, inner
    gc.collect()
    assert [r() for r in made] == [None] * len(made)


@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_a_dropped_command_buffer_leaves_nothing_for_the_cycle_collector(device, dependencies):
    """A recording of thousands of commands is freed when its command buffer goes, not at the next collection
    (the Program must not hold its planner, which holds it)."""
    exe = device.load_executable(kernels.SOURCE)
    out = device.allocate(1024)
    flag = device.allocate(4)
    gc.collect()
    gc.disable()
    try:
        for layout in (False, True):
            cb = device.create_command_buffer(dependencies=dependencies)
            with cb:
                for k in range(4):
                    cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (hal.ref(out, 256 * k, 256),))
                    cb.execution_barrier()
                with cb.if_nonzero(flag):
                    cb.fill_buffer(out, b"\x01")
            if layout:
                assert cb.program.nodes and cb.program.commands[-1].body.nodes
            del cb
        gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to be told apart: a buffer
        gc.collect()  # an earlier test dropped, whose last reference a queue thread let go of just now, is not ours
        recording = [o for o in gc.garbage if isinstance(o, (CommandBuffer, Program, Planner, Command))]
        assert not recording, recording
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
