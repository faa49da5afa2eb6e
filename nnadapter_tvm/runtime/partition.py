"""Multi-device partitioning, as the spec's runtime does it.

Each operation goes to the first device of the context that supports it; operations are
then clustered, per device, into subgraphs that keep the graph of subgraphs acyclic, and
the subgraphs are ordered topologically.  Tensors crossing a boundary become the outputs
of one subgraph and the inputs of the next.
"""

from __future__ import annotations

import dataclasses

from nnadapter_tvm.context import Context
from nnadapter_tvm.errors import fail
from nnadapter_tvm.model import Model, Operand, Operation
from nnadapter_tvm.types import ResultCode


@dataclasses.dataclass
class Subgraph:
    device_index: int
    operations: list[Operation]
    inputs: list[Operand] = dataclasses.field(default_factory=list)
    outputs: list[Operand] = dataclasses.field(default_factory=list)


def assign_devices(model: Model, context: Context) -> dict[int, int]:
    """Operation index -> index of the first device supporting it (and allowed by the context's
    DEVICE_<i>_(UN)SUPPORTED_OPERATIONS); all misses fail together."""
    drivers = [d.driver for d in context.devices]
    props = context.properties
    assignment, missing = {}, []
    for op in model.operations:
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


def partition(model: Model, assignment: dict[int, int]) -> list[Subgraph]:
    """Cluster ``model.operations`` (topologically sorted) into acyclic per-device subgraphs."""
    subgraphs: list[Subgraph] = []
    owner: dict[int, int] = {}  # operand index -> subgraph producing it
    ancestors: list[set[int]] = []  # subgraphs each subgraph depends on, transitively
    for op in model.operations:
        device = assignment[op.index]
        deps = {owner[o.index] for o in op.inputs if o.index in owner}
        # Joining S is safe unless some other dependency D already depends on S (S -> D -> op in S).
        candidates = [
            s
            for s, sub in enumerate(subgraphs)
            if sub.device_index == device and all(d == s or s not in ancestors[d] for d in deps)
        ]
        if candidates:
            target = candidates[-1]
        else:
            subgraphs.append(Subgraph(device, []))
            ancestors.append(set())
            target = len(subgraphs) - 1
        subgraphs[target].operations.append(op)
        for d in deps - {target}:
            ancestors[target] |= {d} | ancestors[d]
        # Anything depending on the target now also depends on what the target depends on.
        for anc in ancestors:
            if target in anc:
                anc |= ancestors[target]
        for o in op.outputs:
            owner[o.index] = target
    if not subgraphs:
        subgraphs.append(Subgraph(0, []))
        ancestors.append(set())
    order = _topological(len(subgraphs), ancestors)
    subgraphs = [subgraphs[i] for i in order]
    _set_boundaries(model, subgraphs)
    return subgraphs


def _topological(count: int, ancestors: list[set[int]]) -> list[int]:
    # A subgraph's ancestors are all strictly before it, so sorting by ancestor count is a topological order.
    return sorted(range(count), key=lambda s: (len(ancestors[s]), s))


def _set_boundaries(model: Model, subgraphs: list[Subgraph]) -> None:
    produced_in = {o.index: s for s, sub in enumerate(subgraphs) for op in sub.operations for o in op.outputs}
    model_outputs = {o.index for o in model.outputs}
    for s, sub in enumerate(subgraphs):
        seen_in, seen_out = set(), set()
        for op in sub.operations:
            for o in op.inputs:
                external = not o.is_constant and produced_in.get(o.index) != s
                if external and o.index not in seen_in:
                    seen_in.add(o.index)
                    sub.inputs.append(o)
        for later in subgraphs[s + 1 :]:
            for op in later.operations:
                for o in op.inputs:
                    if produced_in.get(o.index) == s and o.index not in seen_out:
                        seen_out.add(o.index)
                        sub.outputs.append(o)
        for o in model.outputs:
            if produced_in.get(o.index) == s and o.index not in seen_out:
                seen_out.add(o.index)
                sub.outputs.append(o)
    # Model outputs no operation produces (a model input or a constant) come out of the last subgraph.
    last = subgraphs[-1]
    for o in model.outputs:
        if o.index not in produced_in and o.index in model_outputs:
            if not o.is_constant and o not in last.inputs:
                last.inputs.append(o)
            if o not in last.outputs:
                last.outputs.append(o)
