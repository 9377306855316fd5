"""Helpers of the dependency tests (test_dependency_graphs.py, test_hazards_mode.py, ...).

Dependency rediscovery (DESIGN.md, "Dependency rediscovery"), checked on the recorded DAG.
Hand-written programs pin the exact graph for both dependency modes and both recording strategies
(the graph must not depend on the strategy). Generated programs check the properties every graph must
have: hazards ordered, acyclic, edges forward in index and segment, transitively reduced, barrier
semantics, and, for race-free programs without slots, equality with the transitive reduction of the
true hazard relation.
"""

from __future__ import annotations

import networkx as nx
import pytest

MODES = ("barriers", "hazards")
STRATEGIES = ("deferred", "single_pass")
BUF = 1024  # bytes per buffer in the hand-written programs


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


hazards = pytest.mark.parametrize("dependencies", ["hazards"])
