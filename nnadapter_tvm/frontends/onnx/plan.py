"""The host-vs-TVM split of an imported ONNX graph: its plan (``nnadapter_tvm.session.runner`` runs it).

Paddle Lite's subgraph pass, at the framework level: the converted nodes (units) are grouped into
``CompiledSegment``s, each one NNAdapter model compiled by TVM (which the runtime may split further
by device: ``runtime.partition``, the NNAdapter level), and the nodes that run on the host (onnx's
reference evaluator, or control flow around nested plans) are ``HostStep``s between them. A ``Plan``
holds the steps in the order they run; values travel between them keyed by ``id(Value)``. Which
units are taken in which order is this module's policy (``_schedule``); the grouping and the
boundary wiring are ``runtime.clustering``'s, shared with the device split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.frontends.onnx.control_unit import ControlUnit
from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
from nnadapter_tvm.frontends.onnx.values import Unit, Value, precision_of
from nnadapter_tvm.model import Model, Operand
from nnadapter_tvm.runtime import clustering
from nnadapter_tvm.types import UNKNOWN, OperandType, ResultCode

if TYPE_CHECKING:
    from nnadapter_tvm.compilation import Compilation


@dataclasses.dataclass(eq=False)
class CompiledSegment:
    """Units whose operations form one NNAdapter model, compiled by TVM (Paddle Lite's subgraph pass
    makes these; the runtime may split one further by device, ``runtime.partition.DeviceSubgraph``).
    ``inputs``/``outputs``: the values it reads from and hands to the rest of the plan."""

    on_host: ClassVar[bool] = False

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
        """The NNAdapter model of this segment, built through the public API."""
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
    """A node run on the host (``unit.host`` says why): by onnx's reference evaluator, or a control unit
    (If/Loop/Scan) whose bodies' plans run around it."""

    on_host: ClassVar[bool] = True

    unit: Unit


Step = CompiledSegment | HostStep


@dataclasses.dataclass(eq=False)
class Plan:
    """The steps of one imported graph in the order they run: a sequence of ``CompiledSegment`` and
    ``HostStep``. ``nnadapter_tvm.session.runner.run_plan`` runs it and keeps in ``runner_state`` what it
    works out on the first run (where each step reads and writes: a loop body's plan runs often)."""

    graph: ImportedGraph
    steps: list[Step]
    runner_state: object = dataclasses.field(default=None, repr=False, compare=False)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: int) -> Step:
        return self.steps[index]

    @property
    def segments(self) -> list[CompiledSegment]:
        """The compiled segments of this plan (not those of control nodes' bodies)."""
        return [s for s in self.steps if isinstance(s, CompiledSegment)]

    def all_segments(self) -> list[CompiledSegment]:
        """Every compiled segment, those of control nodes' bodies (nested, depth first) included, in
        the order the plan meets them: the order in which they are compiled."""
        found: list[CompiledSegment] = []
        for step in self.steps:
            if isinstance(step, CompiledSegment):
                found.append(step)
            elif isinstance(step.unit, ControlUnit):
                for body in step.unit.bodies.values():
                    if body.plan is not None:
                        found += body.plan.all_segments()
        return found


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


def make_plan(graph: ImportedGraph) -> Plan:
    """Group converted units into as few compiled segments as the host nodes between them allow."""
    groups = clustering.cluster(_schedule(graph), _label, _reads, _writes, id, consecutive=True)
    steps: list[Step] = []
    for units in groups:
        unit = units[0]
        if unit.host is not None:
            steps.append(HostStep(unit))
        elif any(u.ops for u in units):  # units with no operations (pass-throughs) need no segment
            steps.append(CompiledSegment(sum(not s.on_host for s in steps), units))
    groups = [s.units if isinstance(s, CompiledSegment) else [s.unit] for s in steps]
    wired = clustering.wire(groups, _reads, _writes, id, _crosses, graph.outputs, order="written")
    for step, units, (inputs, outputs) in zip(steps, groups, wired):
        if isinstance(step, CompiledSegment):
            step.inputs = inputs
            # Its results are never read (e.g. only dangling outputs): keep the last one so the model is valid.
            step.outputs = outputs or [list({id(v): v for u in units for v in _writes(u)}.values())[-1]]
    return Plan(graph, steps)


def _schedule(graph: ImportedGraph) -> list[Unit]:
    """The units that run (folded ones do not), in the order the plan takes them: every converted unit
    whose inputs are ready, again and again (one segment takes as much as it can), then one ready
    host unit (whose outputs may make more converted units ready), and so on."""
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
    order: list[Unit] = []
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
        order += taken
        available |= made
        hosts = [u for u in remaining if u.host is not None and ready(u, set())]
        if not hosts and not taken:
            fail("the graph has a cycle or an input no node produces", ResultCode.INVALID_PARAMETER)
        for u in hosts[:1]:  # one at a time: the next may unlock more device work
            order.append(u)
            available |= {id(v) for v in u.outputs}
            remaining.remove(u)
    return order


# How runtime.clustering reads units: a host unit is a group of its own and reads its node's inputs;
# a converted unit reads and writes through its operations (values are keyed by id).
def _label(u: Unit) -> str | None:
    return None if u.host is not None else "compiled"


def _reads(u: Unit) -> list[Value]:
    if u.host is not None:
        return list(u.inputs)
    return [v for op in u.ops for v in op.inputs if v is not None]


def _writes(u: Unit) -> list[Value]:
    if u.host is not None:
        return list(u.outputs)
    return [v for op in u.ops for v in op.outputs]


def _crosses(v: Value) -> bool:
    return not v.is_const


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
    segment = CompiledSegment(0, [u for u in graph.units if u.ops], list(graph.inputs), list(graph.outputs))
    return segment.build_model()
