"""The device split of an NNAdapter model, as the spec's runtime does it (NNAdapter's multi-device
partition; the ONNX frontend's host-vs-TVM split is another level, ``frontends.onnx.plan``).

Each operation goes to the first device of the context that supports it (a converter exists for it,
and the device's driver builds it); operations are then
clustered, per device, into device subgraphs that keep the graph of subgraphs acyclic, and the
subgraphs are ordered topologically (``runtime.clustering``). Operands crossing a boundary become
the outputs of one subgraph and the inputs of the next; values are keyed by operand index.
"""

from __future__ import annotations

import dataclasses

from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import fail
from nnadapter_tvm.model import Model, Operand, Operation
from nnadapter_tvm.runtime import clustering
from nnadapter_tvm.types import ResultCode


@dataclasses.dataclass
class DeviceSubgraph:
    """Operations of one model that run on one device of the context: one compiled module of the
    ``.nnc``. ``inputs``/``outputs``: the operands it reads from / hands to other subgraphs, the
    model's inputs and outputs among them."""

    device_index: int
    operations: list[Operation]
    inputs: list[Operand] = dataclasses.field(default_factory=list)
    outputs: list[Operand] = dataclasses.field(default_factory=list)


def assign_devices(model: Model, context: Context) -> dict[int, int]:
    """Operation index -> index of the first device supporting it (and allowed by the context's
    DEVICE_<i>_(UN)SUPPORTED_OPERATIONS); all misses fail together."""
    # Here, not at the top: loading a cached model imports this module but neither TVM's compiler nor
    # the converters.
    from nnadapter_tvm.op_converters import supported_operations

    drivers = [d.driver for d in context.devices]
    props = context.properties
    converted = supported_operations()
    assignment, missing = {}, []
    for op in model.operations:
        index = None
        if op.type in converted:
            index = next(
                (i for i, d in enumerate(drivers) if d.supports(op.type, props) and context.device_accepts(i, op.type)),
                None,
            )
        if index is None:
            missing.append(op.describe())
        else:
            assignment[op.index] = index
    if missing:
        names = ", ".join(d.name for d in drivers)
        fail(f"no device of the context ({names}) supports: {', '.join(missing)}", ResultCode.FEATURE_NOT_SUPPORTED)
    return assignment


def _reads(op: Operation) -> list[Operand]:
    return op.inputs


def _writes(op: Operation) -> list[Operand]:
    return op.outputs


def _index(operand: Operand) -> int:
    return operand.index


def _crosses(operand: Operand) -> bool:
    return not operand.is_constant


def split_by_device(model: Model, assignment: dict[int, int]) -> list[DeviceSubgraph]:
    """``model.operations`` (topologically sorted) as acyclic per-device subgraphs in topological
    order, each with its boundary operands (outputs as the later subgraphs read them, then the
    model's outputs); a model without operations is one empty subgraph on device 0."""
    groups = clustering.cluster(model.operations, lambda op: assignment[op.index], _reads, _writes, _index)
    subgraphs = [DeviceSubgraph(assignment[ops[0].index], ops) for ops in groups] or [DeviceSubgraph(0, [])]
    wired = clustering.wire(
        [sub.operations for sub in subgraphs], _reads, _writes, _index, _crosses, model.outputs, order="read"
    )
    for sub, (inputs, outputs) in zip(subgraphs, wired):
        sub.inputs, sub.outputs = inputs, outputs
    # Model outputs no operation produces (a model input or a constant) come out of the last subgraph.
    produced = {o.index for op in model.operations for o in op.outputs}
    last = subgraphs[-1]
    for o in model.outputs:
        if o.index not in produced:
            if not o.is_constant and o not in last.inputs:
                last.inputs.append(o)
            if o not in last.outputs:
                last.outputs.append(o)
    return subgraphs
