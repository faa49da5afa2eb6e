"""Imported units -> an execution plan: NNAdapter subgraphs (TVM) and host nodes in topological order."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.execution import host_copy, host_view, run_arrays
from nnadapter_tvm.frontends.onnx.control import ControlNode, ControlUnit
from nnadapter_tvm.frontends.onnx.host import HostNode
from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
from nnadapter_tvm.frontends.onnx.values import Unit, Value, precision_of
from nnadapter_tvm.model import Model, Operand
from nnadapter_tvm.types import UNKNOWN, OperandType, ResultCode

if TYPE_CHECKING:
    from nnadapter_tvm.compilation import Compilation


@dataclasses.dataclass(eq=False)
class Subgraph:
    """Units whose operations form one NNAdapter model, compiled by TVM."""

    index: int
    units: list[Unit]
    inputs: list[Value] = dataclasses.field(default_factory=list)
    outputs: list[Value] = dataclasses.field(default_factory=list)
    compilation: Compilation | None = None  # set when the Predictor compiles or loads it
    token: str | None = None

    @property
    def operation_count(self) -> int:
        return sum(len(u.ops) for u in self.units)

    def build_model(self) -> Model:
        """The NNAdapter model of this subgraph, built through the public API."""
        model = Model()
        operands: dict[int, Operand] = {}

        def operand(v: Value, where: str) -> Operand:
            if id(v) not in operands:
                operands[id(v)] = model.add_operand(operand_type(v, where))
                if v.is_const:
                    model.set_operand_value(operands[id(v)], np.ascontiguousarray(v.const))
            return operands[id(v)]

        for v in self.inputs:
            operand(v, f"subgraph {self.index} input")
        for unit in self.units:
            for op in unit.ops:
                ins = [operand(v, unit.label) for v in op.inputs if v is not None]
                outs = [operand(v, unit.label) for v in op.outputs]
                model.add_operation(op.type, ins, outs).label = unit.label
        model.identify_inputs_and_outputs(
            [operands[id(v)] for v in self.inputs], [operand(v, "subgraph output") for v in self.outputs]
        )
        model.finish()
        return model


@dataclasses.dataclass(eq=False)
class HostStep:
    """A node run on the host: onnx's reference evaluator, or a control node (If/Loop/Scan) that runs
    the nested plans of its bodies."""

    unit: Unit
    node: HostNode | ControlNode


def operand_type(v: Value, where: str) -> OperandType:
    if v.shape is None:
        fail(
            f"{where}: the rank of {v.describe()} is unknown (ONNX shape inference could not derive it)",
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    dims = [UNKNOWN if d is None else int(d) for d in v.shape]
    if v.quant is not None:
        q = v.quant
        return OperandType(q.precision, dims, scale=q.scale, zero_point=q.zero_point, channel_dim=q.channel_dim)
    names = [n if d is None else None for n, d in zip(v.dim_names or (), v.shape)]
    return OperandType(precision_of(v.dtype, f"{where}: {v.describe()}"), dims, dimension_names=names)


def make_plan(graph: ImportedGraph) -> list[Subgraph | HostStep]:
    """Group converted units into as few subgraphs as the host nodes between them allow."""
    available: set[int] = {id(v) for v in graph.inputs} | {id(v) for v in graph.values.values() if v.is_const}
    for u in graph.units:
        if u.folded:
            available |= {id(v) for v in u.outputs}

    def ready(u: Unit, extra: set[int]) -> bool:
        needed = {id(v) for op in u.ops for v in op.inputs if v is not None and not v.is_const} if u.ops else set()
        needed |= {id(v) for v in u.inputs if not v.is_const}
        produced_inside = {id(v) for op in u.ops for v in op.outputs}
        return (needed - produced_inside) <= (available | extra)

    remaining = [u for u in graph.units if not u.folded]
    steps: list[Subgraph | HostStep] = []
    while remaining:
        taken: list[Unit] = []
        made: set[int] = set()
        progress = True
        while progress:
            progress = False
            for u in list(remaining):
                if u.host is None and ready(u, made):
                    taken.append(u)
                    made |= {id(v) for v in u.outputs} | {id(v) for op in u.ops for v in op.outputs}
                    remaining.remove(u)
                    progress = True
        if any(u.ops for u in taken):
            steps.append(Subgraph(len([s for s in steps if isinstance(s, Subgraph)]), taken))
        available |= made
        hosts = [u for u in remaining if u.host is not None and ready(u, set())]
        if not hosts and not taken:
            fail("the graph has a cycle or an input no node produces", ResultCode.INVALID_PARAMETER)
        for u in hosts[:1]:  # one at a time: the next may unlock more device work
            runner = u.runner() if isinstance(u, ControlUnit) else HostNode(u.node, graph.opset)
            steps.append(HostStep(u, runner))
            available |= {id(v) for v in u.outputs}
            remaining.remove(u)
    _wire(graph, steps)
    return steps


def _wire(graph: ImportedGraph, steps: list[Subgraph | HostStep]) -> None:
    """Each subgraph's inputs (values it reads from outside) and outputs (values read after it)."""
    consumers: dict[int, set[int]] = {}
    for k, step in enumerate(steps):
        for v in _reads(step):
            consumers.setdefault(id(v), set()).add(k)
    graph_outputs = {id(v) for v in graph.outputs}
    for k, step in enumerate(steps):
        if not isinstance(step, Subgraph):
            continue
        produced: dict[int, Value] = {}
        for u in step.units:
            for op in u.ops:
                for v in op.outputs:
                    produced[id(v)] = v
        seen: set[int] = set()
        for v in _reads(step):
            if id(v) not in produced and not v.is_const and id(v) not in seen:
                seen.add(id(v))
                step.inputs.append(v)
        step.outputs = [
            v for key, v in produced.items() if key in graph_outputs or any(c != k for c in consumers.get(key, ()))
        ]
        if not step.outputs:
            # Its results are never read (e.g. only dangling outputs): keep the last one so the model is valid.
            step.outputs = [list(produced.values())[-1]]


def _reads(step: Subgraph | HostStep) -> list[Value]:
    if isinstance(step, HostStep):
        return list(step.unit.inputs)
    return [v for u in step.units for op in u.ops for v in op.inputs if v is not None]


def all_subgraphs(steps: Sequence[Subgraph | HostStep]) -> list[Subgraph]:
    """Every subgraph of the plan, those of control nodes' bodies (nested, depth first) included,
    in the order the plan meets them: the order in which they are compiled."""
    found: list[Subgraph] = []
    for step in steps:
        if isinstance(step, Subgraph):
            found.append(step)
        elif isinstance(step.unit, ControlUnit):
            for body in step.unit.bodies.values():
                found += all_subgraphs(body.steps)
    return found


def run_steps(
    graph: ImportedGraph, steps: Sequence[Subgraph | HostStep], arrays: Sequence, on_device: bool = False
) -> list:
    """Run the plan of ``graph`` on its inputs (numpy arrays, or tensors; every subgraph compiled); its
    outputs in order. Between subgraphs a value stays where the compiled code left it (a tensor on
    its device: a next subgraph on that device reads it without a copy); a host node reads a view of
    it. The outputs are numpy arrays the caller owns (a tensor's one copy), or with ``on_device`` the
    values as they are (a control node's body hands them to its next iteration)."""
    route = _route(graph, steps)
    env = dict(route.consts)
    env.update(zip(route.inputs, arrays))
    for host, step, reads, writes in route.steps:
        if host:
            results = step.node.run([host_view(env[k]) for k in reads])
        else:
            results = run_arrays(step.compilation, [env[k] for k in reads], on_device=True)
        env.update(zip(writes, results))
    if on_device:
        return [env[k] for k in route.outputs]
    return [host_copy(env[k]) for k in route.outputs]


class _Route:
    """Where each step of a plan reads its inputs and writes its outputs (keys of the values by id),
    and the constants it reads: worked out once per plan, not on every run (a loop body runs often)."""

    def __init__(self, graph: ImportedGraph, steps: Sequence[Subgraph | HostStep]):
        self.plan = steps
        self.consts: dict[int, np.ndarray] = {}
        self.inputs = [id(v) for v in graph.inputs]
        self.steps: list[tuple[bool, Subgraph | HostStep, list[int], list[int]]] = []
        for step in steps:
            host = isinstance(step, HostStep)
            reads, writes = (step.unit.inputs, step.unit.outputs) if host else (step.inputs, step.outputs)
            self.steps.append((host, step, [self._key(v) for v in reads], [id(v) for v in writes]))
        self.outputs = [self._key(v) for v in graph.outputs]

    def _key(self, value: Value) -> int:
        if value.is_const:
            self.consts[id(value)] = value.const
        return id(value)


def _route(graph: ImportedGraph, steps: Sequence[Subgraph | HostStep]) -> _Route:
    routes = graph.__dict__.setdefault("_plan_routes", {})
    route = routes.get(id(steps))
    if route is None or route.plan is not steps:
        route = routes[id(steps)] = _Route(graph, steps)
    return route


def execute(compilation: Compilation, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One execution of a compiled subgraph on ``arrays``; its outputs as new numpy arrays."""
    return run_arrays(compilation, list(arrays))


def single_model(graph: ImportedGraph) -> Model:
    """The whole graph as one NNAdapter model, inputs and outputs in the graph's order; for tools that
    take a ``Model`` (deploy). Fails when a node runs on the host or an output is not computed."""
    hosts = graph.host_units
    if hosts:
        fail(
            f"{len(hosts)} node(s) would run on the host ({hosts[0].label}, ...): not one NNAdapter model",
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    produced = {id(v) for u in graph.units for op in u.ops for v in op.outputs}
    for v in graph.outputs:
        if id(v) not in produced:
            fail(
                f"graph output {v.describe()} is a constant or an input, not computed by an operation",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
    subgraph = Subgraph(0, [u for u in graph.units if u.ops], list(graph.inputs), list(graph.outputs))
    return subgraph.build_model()
