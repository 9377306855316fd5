"""Generated programs: the properties every dependency graph must have, in both modes and strategies."""

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
from tests.hal.dependency_helpers import STRATEGIES, record

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
