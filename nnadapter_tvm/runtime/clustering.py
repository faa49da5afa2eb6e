"""Grouping a dataflow graph's nodes, and the values that cross between the groups.

Two levels split a graph this way, as Paddle Lite does: the device split of one NNAdapter model
(``runtime.partition``: operations, values keyed by operand index) and the host-vs-TVM split of an
imported ONNX graph (``frontends.onnx.plan``: units, values keyed by ``id(Value)``). Both give this
module their nodes in a topological order and say how to read them (``label``, ``reads``,
``writes``, ``key``); it knows nothing else about them.

- ``cluster``: nodes with equal labels share a group; a node joins the latest group of its label
  that it can join without making the graph of groups cyclic (``consecutive``: only the group just
  before it); the groups come out in a topological order.
- ``wire``: each group's inputs (values it reads that no node of it writes) and outputs (values it
  writes that another group reads, or that are graph outputs).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Literal, TypeVar

N = TypeVar("N")  # a node
V = TypeVar("V")  # a value a node reads or writes

Reads = Callable[[N], Iterable[V]]
Key = Callable[[V], Hashable]


def cluster(
    nodes: Sequence[N],
    label: Callable[[N], Hashable | None],
    reads: Reads,
    writes: Reads,
    key: Key,
    consecutive: bool = False,
) -> list[list[N]]:
    """``nodes`` (topologically ordered) in groups of one ``label`` each (``None``: a group of its own).

    By default a node joins the latest group of its label that none of its other dependencies
    depends on (joining S while some dependency D depends on S would make S -> D -> S), and the
    groups are ordered by how many groups they depend on, transitively: a topological order. With
    ``consecutive`` a node joins only the group made just before it, so that the groups follow the
    nodes' order (a schedule the caller chose) and are in the order they were made."""
    groups: list[list[N]] = []
    labels: list[Hashable | None] = []
    if consecutive:
        for node in nodes:
            tag = label(node)
            if tag is None or not groups or labels[-1] != tag:
                groups.append([])
                labels.append(tag)
            groups[-1].append(node)
        return groups
    owner: dict[Hashable, int] = {}  # value key -> the group writing it
    ancestors: list[set[int]] = []  # the groups each group depends on, transitively
    for node in nodes:
        tag = label(node)
        deps = {owner[k] for k in map(key, reads(node)) if k in owner}
        candidates = (
            []
            if tag is None
            else [
                g
                for g, group_tag in enumerate(labels)
                if group_tag == tag and all(d == g or g not in ancestors[d] for d in deps)
            ]
        )
        if candidates:
            target = candidates[-1]
        else:
            groups.append([])
            labels.append(tag)
            ancestors.append(set())
            target = len(groups) - 1
        groups[target].append(node)
        for d in deps - {target}:
            ancestors[target] |= {d} | ancestors[d]
        # Anything depending on the target now also depends on what the target depends on.
        for anc in ancestors:
            if target in anc:
                anc |= ancestors[target]
        for v in writes(node):
            owner[key(v)] = target
    # A group's ancestors are all strictly before it, so sorting by ancestor count is a topological order.
    order = sorted(range(len(groups)), key=lambda g: (len(ancestors[g]), g))
    return [groups[g] for g in order]


def wire(
    groups: Sequence[Sequence[N]],
    reads: Reads,
    writes: Reads,
    key: Key,
    crosses: Callable[[V], bool],
    graph_outputs: Sequence[V],
    order: Literal["read", "written"],
) -> list[tuple[list[V], list[V]]]:
    """Per group (topologically ordered), its inputs and outputs.

    Inputs: the values its nodes read that ``crosses`` (not a constant) and that none of its nodes
    writes, in the order first read. Outputs: the values its nodes write that another group reads
    or that are among ``graph_outputs``; ``order`` ``"read"`` lists them as the later groups read
    them, then as ``graph_outputs`` lists them; ``"written"`` as its nodes write them. Each value
    once. A graph output no node writes is left to the caller."""
    written_in: dict[Hashable, int] = {key(v): g for g, group in enumerate(groups) for n in group for v in writes(n)}
    read_elsewhere: set[Hashable] = set()
    for g, group in enumerate(groups):
        for n in group:
            for v in reads(n):
                k = key(v)
                if written_in.get(k, g) != g:
                    read_elsewhere.add(k)
    output_keys = {key(v) for v in graph_outputs}
    wired: list[tuple[list[V], list[V]]] = []
    for g, group in enumerate(groups):
        inputs: list[V] = []
        seen: set[Hashable] = set()
        for n in group:
            for v in reads(n):
                k = key(v)
                if k not in seen and written_in.get(k) != g and crosses(v):
                    seen.add(k)
                    inputs.append(v)
        outputs: list[V] = []
        seen = set()
        if order == "read":
            candidates = [v for later in groups[g + 1 :] for n in later for v in reads(n)] + list(graph_outputs)
        else:
            candidates = [v for n in group for v in writes(n)]
        for v in candidates:
            k = key(v)
            if k not in seen and written_in.get(k) == g and (k in read_elsewhere or k in output_keys):
                seen.add(k)
                outputs.append(v)
        wired.append((inputs, outputs))
    return wired
