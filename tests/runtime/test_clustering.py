"""runtime.clustering, the grouping shared by the device split and the ONNX plan, checked on random
dataflow graphs against the properties it promises (each group one label, the graph of groups
acyclic and in topological order, consecutive groups as the runs of itertools.groupby, boundaries
as their definition reads), and on the diamond where a greedy merge would make a cycle."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from nnadapter_tvm.runtime import clustering


@dataclass(eq=False)
class Node:
    name: str
    label: str | None
    reads: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)


def random_graph(seed: int) -> tuple[list[Node], list[int], set[int]]:
    """Nodes in topological order over integer values; value 0 and 1 are graph inputs, 99 a constant."""
    rng = random.Random(seed)
    values, nodes = [0, 1], []
    for k in range(rng.randint(0, 14)):
        reads = rng.sample(values, min(len(values), rng.randint(1, 3))) + ([99] if rng.random() < 0.3 else [])
        writes = [len(values) + j for j in range(rng.randint(1, 2))]
        values += writes
        label = rng.choice(["a", "b", "c", None] if k % 2 else ["a", "b"])
        nodes.append(Node(f"n{k}", label, reads, writes))
    outputs = rng.sample(values, min(len(values), rng.randint(1, 3)))
    return nodes, outputs, {99}


def call_cluster(nodes: list[Node], consecutive: bool = False) -> list[list[Node]]:
    return clustering.cluster(
        nodes, lambda n: n.label, lambda n: n.reads, lambda n: n.writes, lambda v: v, consecutive=consecutive
    )


def call_wire(groups: list[list[Node]], outputs: list[int], consts: set[int], order: str) -> list:
    return clustering.wire(
        groups, lambda n: n.reads, lambda n: n.writes, lambda v: v, lambda v: v not in consts, outputs, order
    )


@pytest.mark.parametrize("seed", range(100))
def test_groups_are_acyclic_topological_and_of_one_label(seed: int) -> None:
    nodes, _, _ = random_graph(seed)
    groups = call_cluster(nodes)
    assert sorted(n.name for g in groups for n in g) == sorted(n.name for n in nodes)
    for g in groups:
        labels = {n.label for n in g}
        assert len(labels) == 1 and (None not in labels or len(g) == 1)
    group_of = {id(n): k for k, g in enumerate(groups) for n in g}
    writer = {v: n for n in nodes for v in n.writes}
    for n in nodes:  # every dependency comes from the same group or one before it: no cycle between groups
        for v in n.reads:
            if v in writer:
                assert group_of[id(writer[v])] <= group_of[id(n)]
    for g in groups:  # and each group keeps its nodes in the given (topological) order
        positions = [nodes.index(n) for n in g]
        assert positions == sorted(positions)


@pytest.mark.parametrize("seed", range(100))
def test_consecutive_groups_are_the_runs_of_equal_labels(seed: int) -> None:
    nodes, _, _ = random_graph(seed)
    runs = []
    for label, run in itertools.groupby(nodes, key=lambda n: n.label):
        members = list(run)
        runs += [[n] for n in members] if label is None else [members]
    assert call_cluster(nodes, consecutive=True) == runs


@pytest.mark.parametrize("order", ["read", "written"])
@pytest.mark.parametrize("seed", range(100))
def test_boundaries_follow_their_definition(seed: int, order: str) -> None:
    nodes, outputs, consts = random_graph(seed)
    groups = call_cluster(nodes)
    wired = call_wire(groups, outputs, consts, order)
    for k, (g, (inputs, outs)) in enumerate(zip(groups, wired)):
        inside = {v for n in g for v in n.writes}
        reads = [v for n in g for v in n.reads]
        assert inputs == list(dict.fromkeys(v for v in reads if v not in inside and v not in consts))
        read_elsewhere = {v for j, h in enumerate(groups) if j != k for n in h for v in n.reads}
        crossing = {v for v in inside if v in read_elsewhere or v in outputs}
        assert set(outs) == crossing and len(outs) == len(crossing)
        if order == "written":
            assert outs == [v for n in g for v in n.writes if v in crossing]
        else:
            later = [v for h in groups[k + 1 :] for n in h for v in n.reads] + outputs
            assert outs == [v for v in dict.fromkeys(later) if v in crossing]


def test_diamond_does_not_merge_into_a_cycle() -> None:
    """a = f(x) on A, b = g(a) on B, c = h(a, b) on A: c joining a's group would need b before and after it."""
    nodes = [Node("f", "A", [0], [1]), Node("g", "B", [1], [2]), Node("h", "A", [1, 2], [3])]
    groups = call_cluster(nodes)
    assert [[n.name for n in g] for g in groups] == [["f"], ["g"], ["h"]]
    assert call_wire(groups, [3], set(), "read") == [([0], [1]), ([1], [2]), ([1, 2], [3])]
    # Without the middle node on another label, everything is one group.
    nodes[1].label = "A"
    assert [[n.name for n in g] for g in call_cluster(nodes)] == [["f", "g", "h"]]
