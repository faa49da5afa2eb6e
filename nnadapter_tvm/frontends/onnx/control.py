"""Control flow: ONNX If (on a condition known only at run time), Loop and Scan.

NNAdapter models are static dataflow graphs, so control flow runs on the host around them, as
Paddle Lite runs ``conditional_block`` and ``while`` around its NNAdapter subgraphs: each branch or
body graph is imported as its own ``ImportedGraph`` (a nested one), planned into NNAdapter
subgraphs and host steps like the top graph, and compiled (or loaded from the cache) when the
Predictor is made, never while it runs. A ``ControlUnit`` (``control_unit``, which ``plan`` imports
without this module) is the node in the outer graph; at run time the session's ``ControlNode``
(``nnadapter_tvm.session.runner``) evaluates the condition, the trip count or the scan positions and
runs the nested plan(s).

ONNX bodies may read values of the enclosing graphs by name: those values are passed into the
nested graph as extra inputs (constants as initializers, so that they fold at import). Nested
control flow (an If in a Loop body) is a control unit inside the nested graph: the recursion
comes for free. Loop-carried values and Scan states whose shape changes across iterations (a
value that grows) get unknown dimensions where the body's result disagrees with its input, and the
body is imported again with those dims open, so one compiled body serves every iteration.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Sequence

import numpy as np
import onnx
import onnx.shape_inference

from nnadapter_tvm.errors import fail
from nnadapter_tvm.frontends.onnx.control_unit import Body, ControlUnit
from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
from nnadapter_tvm.frontends.onnx.plan import make_plan
from nnadapter_tvm.frontends.onnx.values import Shape, Value, node_label
from nnadapter_tvm.types import NNAdapterError, ResultCode

CONTROL_OPS = ("If", "Loop", "Scan")
# Set while the branches of an If that carry a duplicated tail are imported (see _import_if).
_SPECULATIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("speculative", default=False)
# Widening a loop-carried shape opens at least one more dim each round, so rank + 1 rounds suffice.
_MAX_WIDENING_ROUNDS = 8
# A Loop whose body needs its iteration number at import is imported once per iteration up to this count.
_MAX_UNROLLED = 64


def free_names(graph: onnx.GraphProto) -> list[str]:
    """The value names ``graph`` (and the graphs nested in its nodes) read from enclosing scopes,
    in the order of first use."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    used: list[str] = []
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                used.append(name)
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                used += [n for n in free_names(g) if n not in defined]
        defined.update(n for n in node.output if n)
    used += [v.name for v in graph.output if v.name not in defined]
    return list(dict.fromkeys(used))


def import_control(graph: ImportedGraph, index: int, node: onnx.NodeProto, inputs: list[Value | None], opset: int):
    """Import an If, Loop or Scan node of ``graph`` as a ``ControlUnit`` (appended to ``graph.units``)."""
    label = node_label(node, index)
    slots = [i for i, v in enumerate(inputs) if v is not None]
    unit = ControlUnit(node, index, [inputs[i] for i in slots], [], slots=slots, opset=opset)
    attrs = {a.name: a for a in node.attribute}
    names = list(node.output)
    try:
        if node.op_type == "If":
            outputs = _import_if(graph, unit, label, attrs, names)
            rest = _continuation(graph, index, node) if _ranks_diverge(unit) else None
            if rest is not None:
                # Values whose rank depends on the branch taken: the rest of the graph runs inside each
                # branch, where every rank is known (the tail is duplicated, once per branch).
                unit = ControlUnit(node, index, [inputs[i] for i in slots], [], slots=slots, opset=opset)
                names = [o.name for o in graph.model.graph.output]
                graph.continued_from = index  # ImportedGraph skips the nodes after this one
                branches = {k: _continued(attrs[k].g, node, rest, graph.model.graph) for k in _BRANCHES}
                token = _SPECULATIVE.set(True)
                try:
                    outputs = _import_if(graph, unit, label, branches, names)
                finally:
                    _SPECULATIVE.reset(token)
        elif node.op_type == "Loop":
            outputs = _import_loop(graph, unit, label, attrs, inputs)
        else:
            outputs = _import_scan(graph, unit, label, attrs, inputs)
    except NNAdapterError as err:
        if err.code != ResultCode.FEATURE_NOT_SUPPORTED or graph.options.host_fallback:
            raise
        # A body node no device runs: listed with the others (the bodies import their nodes
        # under the same options, so under host fallback such a node runs on the host instead).
        graph.needs_constant += getattr(err, "needs_constant_outer", [])
        message = str(err.args[0])
        graph.to_host(unit, message if message.startswith(label) else f"{label}: {message}")
        return
    unit.host = f"{node.op_type} (control flow) runs on the host around its compiled bodies"
    if names == list(node.output):
        unit.outputs = graph.bind(node, outputs)
    else:
        for value in outputs:
            graph.values[value.name] = value
        unit.outputs = outputs
    graph.note_sources(unit)
    graph.units.append(unit)


# -- importing the bodies ------------------------------------------------------------------


_BRANCHES = ("then_branch", "else_branch")


def _import_if(graph: ImportedGraph, unit: ControlUnit, label: str, attrs: dict, names: list[str]) -> list[Value]:
    """The branches (``attrs``: attribute protos, or GraphProtos) imported; the values ``names`` get."""
    failures: dict[str, NNAdapterError] = {}
    for name in _BRANCHES:
        if name not in attrs:
            fail(f"{label}: attribute '{name}' is required")
        body = attrs[name] if isinstance(attrs[name], onnx.GraphProto) else attrs[name].g
        try:
            unit.bodies[name] = _import_body(graph, unit, label, name, body, [])
        except NNAdapterError as err:
            if not _SPECULATIVE.get():
                raise
            failures[name] = err
    if len(failures) == len(_BRANCHES):
        raise failures["then_branch"]
    for name, err in failures.items():
        # Inside a duplicated tail, a branch may combine with an earlier branch in a way no input
        # reaches (a value squeezed twice): it fails only if it is ever taken.
        unit.bodies[name] = Body(name, None, None, 0, [], error=str(err.args[0]))
    good = [unit.bodies[n] for n in _BRANCHES if unit.bodies[n].graph is not None]
    then_out, else_out = good[0].graph.outputs, good[-1].graph.outputs
    if len(then_out) != len(else_out) or len(then_out) < len(names):
        fail(
            f"{label}: then_branch gives {len(then_out)} outputs, else_branch {len(else_out)}, "
            f"the node has {len(names)}"
        )
    outputs = []
    for k, name in enumerate(names):
        a, b = then_out[k], else_out[k]
        for branch, v in (("then_branch", a), ("else_branch", b)):
            if v.dtype is not None and np.dtype(v.dtype).kind == "O":
                fail(
                    f"{label}: output {k} of its {branch} is not a tensor (sequences and optionals are not supported)",
                    ResultCode.FEATURE_NOT_SUPPORTED,
                )
        if a.dtype is not None and b.dtype is not None and np.dtype(a.dtype) != np.dtype(b.dtype):
            fail(f"{label}: output {k} is {a.dtype} in then_branch and {b.dtype} in else_branch")
        # Dims the branches disagree on are known only when the condition is.
        shape = _merge(a.shape, b.shape)
        outputs.append(_outer_value(graph, name, a.dtype or b.dtype, shape))
    return outputs


def _ranks_diverge(unit: ControlUnit) -> bool:
    """Whether an output of the If has one rank in one branch and another (or none) in the other."""
    then_body, else_body = unit.bodies["then_branch"], unit.bodies["else_branch"]
    if then_body.graph is None or else_body.graph is None:
        return False
    return any(a.rank != b.rank for a, b in zip(then_body.graph.outputs, else_body.graph.outputs))


def _continuation(graph: ImportedGraph, index: int, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
    """The nodes imported after ``node``: the rest of its graph from node ``index`` on, through the
    branches of Ifs inlined on a constant condition (their results renamed to the If's outputs).
    None where ``node`` is not found that way (a node of an expanded function) or nothing follows."""
    nodes = graph.model.graph.node
    if index >= len(nodes):
        return None
    rest = _rest_after(graph, list(nodes[index:]), node)
    return rest or None


def _rest_after(graph: ImportedGraph, nodes: list[onnx.NodeProto], target: onnx.NodeProto) -> list | None:
    for i, node in enumerate(nodes):
        if node == target:
            return nodes[i + 1 :]
        cond = graph.values.get(node.input[0]) if node.op_type == "If" and node.input else None
        if cond is None or not cond.is_const:
            continue
        taken = "then_branch" if bool(np.reshape(cond.const, -1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == taken)
        inner = _rest_after(graph, list(branch.node), target)
        if inner is not None:
            renames = [
                onnx.helper.make_node("Identity", [out.name], [name], name=f"{name}/branch")
                for out, name in zip(branch.output, node.output)
                if name
            ]
            return inner + renames + nodes[i + 1 :]
    return None


def _continued(branch: onnx.GraphProto, node: onnx.NodeProto, rest: list, enclosing: onnx.GraphProto):
    """``branch`` followed by the ``rest`` of the enclosing graph: its results renamed to the If's
    outputs (Identity), then the rest's nodes; its outputs are the enclosing graph's."""
    g = onnx.GraphProto()
    g.name = branch.name
    g.node.extend(branch.node)
    g.initializer.extend(branch.initializer)
    g.sparse_initializer.extend(branch.sparse_initializer)
    for out, name in zip(branch.output, node.output):
        if name:
            g.node.append(onnx.helper.make_node("Identity", [out.name], [name], name=f"{name}/branch"))
    g.node.extend(rest)
    g.output.extend(enclosing.output)
    return g


def _import_loop(
    graph: ImportedGraph, unit: ControlUnit, label: str, attrs: dict, inputs: list[Value | None]
) -> list[Value]:
    if "body" not in attrs:
        fail(f"{label}: attribute 'body' is required")
    body = attrs["body"].g
    carried = inputs[2:]
    if any(v is None for v in carried):
        fail(f"{label}: loop-carried initial values must all be given")
    n = len(carried)
    if len(body.input) != n + 2 or len(body.output) < n + 1:
        fail(
            f"{label}: the body has {len(body.input)} inputs and {len(body.output)} outputs; with {n} "
            f"loop-carried values it needs {n + 2} inputs (iteration number, condition, values) "
            f"and at least {n + 1} outputs"
        )
    for k in (0, 1):
        if len(inputs) > k and inputs[k] is not None and inputs[k].shape not in (None, (), (1,)):
            fail(f"{label}: input {k} {inputs[k].describe()} must hold one element")
    fixed = [(np.dtype("int64"), ()), (np.dtype("bool"), ())]
    shapes = [_known_rank(label, v) for v in carried]
    try:
        own = fixed + [(v.dtype, s) for v, s in zip(carried, shapes)]
        _import_body(graph, unit, label, "body", body, own)
    except NNAdapterError as err:
        if body.input[0].name not in getattr(err, "needs_constant_inner", []):
            raise
        # The body needs its iteration number at import (a Slice at i): one body per iteration.
        trip = inputs[0] if inputs else None
        if trip is None or not trip.is_const or int(np.reshape(trip.const, -1)[0]) > _MAX_UNROLLED:
            if trip is not None and not trip.is_const:
                err.needs_constant_outer = [*getattr(err, "needs_constant_outer", []), *graph.input_ancestors(trip)]
            raise
        return _unroll_loop(graph, unit, label, body, carried, int(np.reshape(trip.const, -1)[0]))
    for _ in range(_MAX_WIDENING_ROUNDS):
        own = fixed + [(v.dtype, s) for v, s in zip(carried, shapes)]
        result = _import_body(graph, unit, label, "body", body, own)
        outs = result.graph.outputs
        widened = [_merge(s, o.shape, rank_of=s) for s, o in zip(shapes, outs[1 : n + 1])]
        if widened == shapes:
            break
        shapes = widened
    else:  # pragma: no cover - each round opens a dim, so the rounds run out only on a bug
        fail(f"{label}: the loop-carried shapes do not settle", ResultCode.DEVICE_INTERNAL_ERROR)
    unit.bodies["body"] = result
    values = []
    for k, name in enumerate(unit.node.output):
        out = outs[1 + k] if k + 1 < len(outs) else None
        if out is None:
            fail(f"{label}: output {k} '{name}' has no body output")
        if k < n:
            values.append(_outer_value(graph, name, carried[k].dtype, shapes[k]))
        else:  # a scan output: one element per iteration, stacked on a new first axis
            values.append(_outer_value(graph, name, out.dtype, _stacked(out.shape, 0, None)))
    return values


def _unroll_loop(
    graph: ImportedGraph, unit: ControlUnit, label: str, body: onnx.GraphProto, carried: list[Value], count: int
) -> list[Value]:
    """A Loop whose body needs its iteration number at import and whose trip count is known: one
    body per iteration, each with its number as a constant and the shapes the previous one gave."""
    n = len(carried)
    shapes = [[_known_rank(label, v)] for v in carried]  # per value: its shape before each iteration
    outs: list[Value] = []
    for i in range(count):
        own = [(np.dtype("int64"), (), np.array(i, np.int64)), (np.dtype("bool"), ())]
        own += [(v.dtype, s[-1]) for v, s in zip(carried, shapes)]
        result = _import_body(graph, unit, label, f"body#{i}", body, own)
        unit.bodies[f"body#{i}"] = result
        outs = result.graph.outputs
        for k in range(n):
            shapes[k].append(outs[1 + k].shape)
    unit.unrolled = count
    values = []
    for k, name in enumerate(unit.node.output):
        if k < n:  # the loop may stop after any iteration: the dims they all agree on
            shape = shapes[k][0]
            for other in shapes[k][1:]:
                shape = _merge(shape, other)
            values.append(_outer_value(graph, name, carried[k].dtype, shape))
        elif outs:
            values.append(_outer_value(graph, name, outs[1 + k].dtype, _stacked(outs[1 + k].shape, 0, None)))
        else:
            fail(
                f"{label}: a scan output of a loop of 0 iterations has no element type",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
    return values


def _import_scan(
    graph: ImportedGraph, unit: ControlUnit, label: str, attrs: dict, inputs: list[Value | None]
) -> list[Value]:
    if "body" not in attrs or "num_scan_inputs" not in attrs:
        fail(f"{label}: attributes 'body' and 'num_scan_inputs' are required")
    body = attrs["body"].g
    m = attrs["num_scan_inputs"].i
    batched = unit.opset < 9  # Scan-8: a batch axis 0 on every input and output, and sequence_lens first
    given = inputs[1:] if batched else inputs
    if any(v is None for v in given):
        fail(f"{label}: every state and scan input must be given")
    n = len(given) - m
    if n < 0 or len(body.input) != n + m or len(body.output) < n:
        fail(
            f"{label}: the body has {len(body.input)} inputs and {len(body.output)} outputs "
            f"for {n} states and {m} scans"
        )
    states, scans = given[:n], given[n:]
    axes = _scan_axes(label, attrs, "scan_input_axes", scans, m, batched)
    drop = 1 if batched else 0
    slices = []
    for v, axis in zip(scans, axes):
        shape = _known_rank(label, v)
        slices.append((v.dtype, shape[drop:axis] + shape[axis + 1 :]))
    shapes = [_known_rank(label, v)[drop:] for v in states]
    for _ in range(_MAX_WIDENING_ROUNDS):
        own = [(v.dtype, s) for v, s in zip(states, shapes)] + slices
        result = _import_body(graph, unit, label, "body", body, own)
        outs = result.graph.outputs
        widened = [_merge(s, o.shape, rank_of=s) for s, o in zip(shapes, outs[:n])]
        if widened == shapes:
            break
        shapes = widened
    else:  # pragma: no cover
        fail(f"{label}: the state shapes do not settle", ResultCode.DEVICE_INTERNAL_ERROR)
    unit.bodies["body"] = result
    length = scans[0].shape[axes[0]] if scans else 0
    batch = (states + scans)[0].shape[0] if batched and (states or scans) else None
    out_axes = _out_axes(attrs, outs[n:], batched)
    values = []
    for k, name in enumerate(unit.node.output):
        if k >= len(outs):
            fail(f"{label}: output {k} '{name}' has no body output")
        out = outs[k]
        shape = shapes[k] if k < n else _stacked(out.shape, out_axes[k - n], length)
        if batched and shape is not None:
            shape = (batch, *shape)
        values.append(_outer_value(graph, name, out.dtype, shape))
    return values


def _scan_axes(label: str, attrs: dict, key: str, scans: Sequence[Value], m: int, batched: bool) -> list[int]:
    if batched:
        return [1] * m
    axes = list(attrs[key].ints) if key in attrs else [0] * m
    if len(axes) != m:
        fail(f"{label}: {key} {axes} must hold one axis per scan input ({m})")
    result = []
    for axis, v in zip(axes, scans):
        rank = len(_known_rank(label, v))
        if not -rank <= axis < rank:
            fail(f"{label}: {key} {axis} is out of range for {v.describe()}")
        result.append(axis % rank)
    return result


def _out_axes(attrs: dict, outs: Sequence[Value], batched: bool) -> list[int]:
    if batched:
        return [0] * len(outs)
    axes = list(attrs["scan_output_axes"].ints) if "scan_output_axes" in attrs else [0] * len(outs)
    result = []
    for axis, out in zip(axes, outs):
        rank = (out.rank or 0) + 1
        result.append(axis % rank if out.rank is not None else axis)
    return result


def _import_body(
    graph: ImportedGraph, unit: ControlUnit, label: str, attr: str, body: onnx.GraphProto, own: list
) -> Body:
    """``body`` as a nested ImportedGraph whose inputs are ``own`` (dtype, shape) for the body's own
    inputs, then the enclosing graphs' values it reads; constant ones become initializers."""
    elem = onnx.helper.np_dtype_to_tensor_dtype
    g = onnx.GraphProto()
    g.name = body.name or attr
    g.node.extend(body.node)
    for node in g.node:
        _forget_shapes(node)
    g.initializer.extend(body.initializer)
    g.sparse_initializer.extend(body.sparse_initializer)
    for info, (dtype, shape, *value) in zip(body.input, own):
        if value:  # known at import (an unrolled loop's iteration number)
            g.initializer.append(onnx.numpy_helper.from_array(np.asarray(value[0], dtype), info.name))
            continue
        g.input.append(onnx.helper.make_tensor_value_info(info.name, elem(np.dtype(dtype)), _dims(shape)))
    captured = []
    for name in free_names(body):
        value = graph.values.get(name)
        if value is None:
            fail(f"{label}: {attr} reads '{name}', which no enclosing graph defines before it")
        if value.is_const:
            g.initializer.append(onnx.numpy_helper.from_array(np.asarray(value.const), name))
            continue
        if value.dtype is None:
            fail(
                f"{label}: {attr} reads {value.describe()}, whose element type is unknown",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        dims = _dims(value.shape, getattr(value, "dim_names", None) or _dim_params(graph, name))
        g.input.append(onnx.helper.make_tensor_value_info(name, elem(np.dtype(value.dtype)), dims))
        if not any(value is v for v in unit.inputs):
            unit.inputs.append(value)
        captured.append(next(k for k, v in enumerate(unit.inputs) if v is value))
    for out in body.output:  # the element type only: shapes come from the widened inputs
        info = onnx.ValueInfoProto()
        info.name = out.name
        if out.type.HasField("tensor_type") and out.type.tensor_type.elem_type:
            info.type.tensor_type.elem_type = out.type.tensor_type.elem_type
        g.output.append(info)
    model = onnx.helper.make_model(g, opset_imports=list(graph.model.opset_import))
    model.ir_version = graph.model.ir_version or model.ir_version
    with contextlib.suppress(Exception):  # best effort: the importer infers node by node where this fails
        model = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    try:
        nested = ImportedGraph(model, graph.options)
    except NNAdapterError as err:
        # Inputs of the nested graph that a converter needed as constants, traced to the top graph's inputs.
        outer = []
        for name in getattr(err, "needs_constant", []):
            v = graph.values.get(name)
            if v is not None and any(v is u for u in unit.inputs):
                outer += graph.input_ancestors(v)
        # The nested graph's listing ("N ONNX node(s) cannot run ...:" then one node a line) on one line.
        message = str(err.args[0])
        listed = message.split("\n  ")[1:] if "\n  " in message else [message]
        wrapped = NNAdapterError(err.code, f"in its {attr}: " + "; ".join(listed))
        wrapped.needs_constant_outer = outer
        wrapped.needs_constant_inner = list(getattr(err, "needs_constant", []))
        raise wrapped from None
    return Body(attr, nested, make_plan(nested), sum(len(entry) == 2 for entry in own), captured)


def _forget_shapes(node: onnx.NodeProto) -> None:
    """Drop the shapes recorded in ``node``'s graph attributes (value_info, and the outputs' shapes,
    which exporters declare as traced on one path): they were inferred for the enclosing graph's
    shapes, and the nested graph's own inference derives them again for its inputs."""
    for attr in node.attribute:
        for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            del g.value_info[:]
            for out in g.output:
                if out.type.HasField("tensor_type"):
                    out.type.tensor_type.ClearField("shape")
            for sub in g.node:
                _forget_shapes(sub)


def _dim_params(graph: ImportedGraph, name: str) -> list[str | None] | None:
    """The dim_params ONNX's inference gave value ``name`` of ``graph`` (``batch`` carried through a Relu)."""
    info = graph.value_infos.get(name)
    if info is None or not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
        return None
    return [
        d.dim_param if d.HasField("dim_param") and d.dim_param not in ("", "?") else None
        for d in info.type.tensor_type.shape.dim
    ]


def _dims(shape: Shape | None, names: Sequence[str | None] | None = None) -> list | None:
    """ONNX dims of ``shape``: an unknown dim keeps the dim_param the outer graph's input gave it, so
    that the nested graph shares that symbolic dimension (``batch`` in both scopes is one size)."""
    if shape is None:
        return None
    names = list(names) if names is not None and len(names) == len(shape) else [None] * len(shape)
    return [d if d is not None else names[k] for k, d in enumerate(shape)]


def _known_rank(label: str, v: Value) -> tuple:
    if v.shape is None:
        fail(f"{label}: the rank of {v.describe()} is unknown", ResultCode.FEATURE_NOT_SUPPORTED)
    return tuple(v.shape)


def _merge(a: Shape | None, b: Shape | None, rank_of: Shape | None = None) -> Shape | None:
    """Dims both shapes agree on; the others unknown. ``rank_of`` is the rank to keep when ``b``'s is unknown."""
    if a is None or b is None:
        base = rank_of if rank_of is not None else None
        return None if base is None else tuple(None for _ in base)
    if len(a) != len(b):
        if rank_of is not None:
            fail(
                f"a loop-carried value changes rank across iterations ({list(a)} -> {list(b)})",
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def _stacked(shape: Shape | None, axis: int, length: int | None) -> Shape | None:
    if shape is None:
        return None
    return (*shape[:axis], length, *shape[axis:])


def _outer_value(graph: ImportedGraph, name: str, dtype, shape: Shape | None) -> Value:
    """The control node's output ``name`` with the shape this import computed. ONNX's shapes for it
    are not trusted beyond the rank: exporters declare a scan output's length or a branch's dims as
    traced for one input, which another run need not share."""
    inferred_dtype, inferred = graph.inferred.get(name, (None, None))
    if shape is None and inferred is not None:
        shape = tuple(None for _ in inferred)
    return Value(name, np.dtype(dtype) if dtype is not None else inferred_dtype, shape)
