"""The ONNX fuzzer's cases: whole graphs drawn from the vocabulary, several merged into one
multi-output model (one compilation for all), and a model cut down to what one output depends on
(part of tests/fuzz_onnx/).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper

# The builders register themselves in VOCABULARY when their modules are imported.
from . import ops_math, ops_nn, ops_shape  # noqa: F401
from .graph import F32, OPSET, VOCABULARY, Draw, Graph, Tensor, reads


# =================================================================================================
# Whole graphs and batches
# =================================================================================================
@dataclasses.dataclass
class Case:
    """One graph: a model whose outputs are its leaves, the feeds, and each output's depth."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    depths: dict[str, int]

    def feeds_of(self, model: onnx.ModelProto) -> dict[str, np.ndarray]:
        """The feeds of ``model``'s inputs (``model``: this case's model or a part of it)."""
        return {i.name: self.feeds[i.name] for i in model.graph.input if i.name in self.feeds}


def draw_graph(draw: Draw, prefix: str, max_nodes: int, vocabulary: list[str] | None = None) -> Case:
    g = Graph(prefix, draw)
    rank = draw.int(0, 4)
    g.add_input(tuple(draw.int(1, 5) for _ in range(rank)))
    if draw.bool(0.4):
        g.add_input(tuple(draw.int(1, 5) for _ in range(draw.int(1, 4))))
    names = sorted(vocabulary or VOCABULARY)
    target = draw.int(2, max_nodes)
    for _ in range(target * 3):
        if len(g.nodes) >= target:
            break
        before = len(g.nodes)
        if VOCABULARY[draw.choice(names)](g) and len(g.nodes) > before:
            g.settle(before)
    outs = g.outputs() or [t for t in g.pool if t.depth > 0][-1:]
    if not outs:  # nothing applied: one Identity keeps the case well-formed
        g.node("Identity", [g.pool[0].name])
        g.settle(len(g.nodes) - 1)
        outs = g.outputs()
    return _case(g, outs)


def _case(g: Graph, outs: list[Tensor]) -> Case:
    outputs = [helper.make_tensor_value_info(t.name, F32, list(t.shape)) for t in outs]
    used = {i for n in g.nodes for i in reads(n)}
    inputs = [v for v in g.inputs if v.name in used]
    feeds = {v.name: g.feeds[v.name] for v in inputs}
    graph = helper.make_graph(g.nodes, "fuzz", inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return Case(model, feeds, {t.name: t.depth for t in outs})


def merge(cases: list[Case]) -> Case:
    """Independent graphs (disjoint names) as one multi-output model: one compilation for all."""
    nodes, inits, inputs, outputs, feeds, depths = [], [], [], [], {}, {}
    for c in cases:
        g = c.model.graph
        nodes += g.node
        inits += g.initializer
        inputs += g.input
        outputs += g.output
        feeds.update(c.feeds)
        depths.update(c.depths)
    graph = helper.make_graph(nodes, "fuzz_batch", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return Case(model, feeds, depths)


def _ancestors(model: onnx.ModelProto, output: str) -> onnx.ModelProto:
    """``model`` cut down to what ``output`` depends on, ``output`` its only output."""
    producer = {o: n for n in model.graph.node for o in n.output}
    keep, stack = set(), [output]
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is not None and id(node) not in keep:
            keep.add(id(node))
            stack.extend(reads(node))  # a body's outer-scope reads too (If/Loop/Scan)
    nodes = [n for n in model.graph.node if id(n) in keep]
    used = {i for n in nodes for i in reads(n)}
    out = [o for o in model.graph.output if o.name == output] or [helper.make_empty_tensor_value_info(output)]
    graph = helper.make_graph(
        nodes,
        model.graph.name,
        [i for i in model.graph.input if i.name in used],
        out,
        initializer=[i for i in model.graph.initializer if i.name in used],
    )
    m = helper.make_model(graph, opset_imports=model.opset_import)
    m.ir_version = model.ir_version
    return m
