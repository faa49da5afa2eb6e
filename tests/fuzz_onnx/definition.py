"""The ONNX fuzzer's third opinion: the operators' definition, as onnx's ReferenceEvaluator computes it
on the model converted to float64 (``to_float64``), with the max family propagating NaN and MaxPool,
LRN and DynamicQuantizeLinear computed from their definitions (``nan_propagating_ops``) (part of
tests/fuzz_onnx/).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .cases import Case, _ancestors
from .graph import F32, OPSET

DEFINITION = "the definition (onnx's reference evaluator in float64, with our documented NaN rules)"
# The operators whose NaN rule, documented in docs/reliability.md, is numpy's (a NaN anywhere in a window
# or row gives NaN, IEEE 754-2019 maximum/minimum) where onnxruntime skips NaN and onnx's evaluator skips
# it unless it comes first in a window.  ArgMax/ArgMin/Hardmax (the first NaN's index), TopK (NaN ranks
# above +inf), Max/Min, Clip and Relu already follow numpy in the evaluator.
NAN_PROPAGATING = ("MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin")
F64 = TensorProto.DOUBLE


def _float64_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    """``t`` as float64 if it is float32 (the values widened exactly: NaN, infinities and signs kept)."""
    if t.data_type != F32:
        return t
    return numpy_helper.from_array(numpy_helper.to_array(t).astype("float64"), t.name)


def _float64_type(tp: onnx.TypeProto) -> None:
    which = tp.WhichOneof("value")
    if which == "tensor_type" and tp.tensor_type.elem_type == F32:
        tp.tensor_type.elem_type = F64
    elif which == "sequence_type":
        _float64_type(tp.sequence_type.elem_type)
    elif which == "optional_type":
        _float64_type(tp.optional_type.elem_type)


def _float64_graph(g: onnx.GraphProto) -> None:
    for v in [*g.input, *g.output, *g.value_info]:
        _float64_type(v.type)
    for t in g.initializer:
        t.CopyFrom(_float64_tensor(t))
    for node in g.node:
        for attr in list(node.attribute):
            if attr.type == onnx.AttributeProto.TENSOR:
                attr.t.CopyFrom(_float64_tensor(attr.t))  # Constant's value, ConstantOfShape's value
            elif attr.type == onnx.AttributeProto.GRAPH:
                _float64_graph(attr.g)  # If's branches, Loop's and Scan's bodies
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _float64_graph(sub)
            if node.op_type == "Cast" and attr.name == "to" and attr.i == F32:
                attr.i = F64  # CastLike follows its converted second input
            if node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
                # A float32 constant by its attribute's kind: the same values as a float64 tensor.
                values = np.array(attr.f if attr.name == "value_float" else list(attr.floats), "float32")
                node.attribute.remove(attr)
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(values.astype("float64"))))


def _float_only(schema: Any, formal: Any) -> bool:
    """Whether ``formal`` (an input or output of ``schema``) takes float32 but not float64."""
    allowed = {formal.type_str}
    for constraint in schema.type_constraints:
        if constraint.type_param_str == formal.type_str:
            allowed = set(constraint.allowed_type_strs)
    return "tensor(float)" in allowed and "tensor(double)" not in allowed


def _keep_float32_operators(g: onnx.GraphProto, opset: int, types: dict[str, int]) -> None:
    """Operators whose definition is float32 only (DynamicQuantizeLinear's input, DequantizeLinear's
    scale and output before opset 19, QuantizeLinear's input) compute in float32 inside the float64 graph:
    their float32 inputs are cast back to float32 before them, their float32 outputs to float64 after
    (a quantization's rounding depends on its scale's precision, so float64 there would be another
    operator).  ``types``: each tensor's elem_type in the float32 model."""
    nodes = []
    for node in g.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                _keep_float32_operators(body, opset, types)
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        except Exception:
            nodes.append(node)
            continue
        before, after = [], []
        for i, name in enumerate(node.input):
            formal = schema.inputs[min(i, len(schema.inputs) - 1)] if schema.inputs else None
            if name and formal is not None and types.get(name) == F32 and _float_only(schema, formal):
                narrow = f"{name}__f32_for_{node.output[0]}"
                before.append(helper.make_node("Cast", [name], [narrow], to=F32))
                node.input[i] = narrow
        for i, name in enumerate(node.output):
            formal = schema.outputs[min(i, len(schema.outputs) - 1)] if schema.outputs else None
            if name and formal is not None and types.get(name, F32) == F32 and _float_only(schema, formal):
                narrow = f"{name}__f32"
                after.append(helper.make_node("Cast", [narrow], [name], to=F64))
                node.output[i] = narrow
        nodes += [*before, node, *after]
    del g.node[:]
    g.node.extend(nodes)


def _elem_types(g: onnx.GraphProto, types: dict[str, int]) -> dict[str, int]:
    """Name -> elem_type of every typed tensor of ``g`` and its bodies (inputs, outputs, value infos,
    initializers)."""
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.WhichOneof("value") == "tensor_type":
            types[v.name] = v.type.tensor_type.elem_type
    types.update({t.name: t.data_type for t in g.initializer})
    for node in g.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                _elem_types(body, types)
    return types


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` computing in float64: every float32 tensor type (inputs, outputs, value infos),
    initializer, Constant / ConstantOfShape value and Cast target, in the main graph and in every
    If / Loop / Scan body; operators defined for float32 only stay float32 between casts
    (``_keep_float32_operators``)."""
    try:  # the tensors' types, for the operators that stay float32
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:
        typed = model
    types = _elem_types(typed.graph, {})
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    _float64_graph(wide.graph)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    _keep_float32_operators(wide.graph, opset, types)
    return wide


def max_pool(
    x: np.ndarray,
    kernel_shape=None,
    pads=None,
    strides=None,
    dilations=None,
    ceil_mode=0,
    storage_order=0,
) -> np.ndarray:
    """ONNX MaxPool (explicit pads) from its definition: each output element the maximum of its window,
    padding left out, NaN anywhere in the window giving NaN (numpy's maximum); with ``ceil_mode`` a last
    window that would start in the end padding is dropped, as onnxruntime does."""
    rank = len(kernel_shape)
    spatial = x.shape[2:]
    pads = list(pads or [0] * (2 * rank))
    strides = list(strides or [1] * rank)
    dilations = list(dilations or [1] * rank)
    out_shape, pad_end = [], []
    for i in range(rank):
        span = dilations[i] * (kernel_shape[i] - 1) + 1
        total = spatial[i] + pads[i] + pads[rank + i] - span
        n = (-(-total // strides[i]) if ceil_mode else total // strides[i]) + 1
        if ceil_mode and (n - 1) * strides[i] >= spatial[i] + pads[i]:
            n -= 1
        out_shape.append(n)
        pad_end.append(max((n - 1) * strides[i] + span - spatial[i] - pads[i], 0))
    padded = np.pad(
        x,
        [(0, 0), (0, 0)] + [(pads[i], pad_end[i]) for i in range(rank)],
        constant_values=-np.inf,
    )
    result = np.full(x.shape[:2] + tuple(out_shape), -np.inf, x.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel_shape)):
        window = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offsets, dilations, out_shape, strides)
        )
        result = np.maximum(result, padded[(slice(None), slice(None), *window)])
    return result


def nan_propagating_ops(opset: int) -> list[type]:
    """``new_ops`` for onnx's ReferenceEvaluator: its own implementation of each ``NAN_PROPAGATING``
    operator at ``opset``, whose first output is NaN wherever a window or row it reduces holds a NaN
    (found by the same implementation run on the NaN mask)."""
    from onnx.reference.ops import load_op

    def make(op_type: str) -> type:
        base = load_op("", op_type, opset)
        smallest = op_type == "ReduceMin"

        def _run(self, x, *args, **kwargs):
            x = np.asarray(x)
            if op_type == "MaxPool" and len(self.output) == 1 and kwargs.get("auto_pad") in (None, "NOTSET", ""):
                # The evaluator's pool fails on some windows (it pads with NaN, then drops NaN: numpy's
                # max of nothing); this one is the definition, with numpy's maximum propagating NaN.
                return (max_pool(x, **{k: v for k, v in kwargs.items() if k != "auto_pad"}),)
            if x.dtype.kind != "f" or not np.isnan(x).any():
                return base._run(self, x, *args, **kwargs)
            # The evaluator's pools drop NaN and fail on a window of NaN alone (numpy's max of nothing):
            # the numbers' result comes from NaN as the reduction's identity, the NaN from the mask.
            out = base._run(self, np.where(np.isnan(x), np.inf if smallest else -np.inf, x), *args, **kwargs)
            nan = np.isnan(x).astype(x.dtype)
            # The max of the mask (the min of its negation for ReduceMin) is positive where a NaN is.
            hit = base._run(self, -nan if smallest else nan, *args, **kwargs)[0]
            hit = -hit if smallest else hit
            first = np.where(hit > 0, np.array(np.nan, out[0].dtype), out[0])
            return (first, *out[1:])

        schema = onnx.defs.get_schema(op_type, opset)
        return type(op_type, (base,), {"op_domain": "", "_run": _run, "op_schema": schema})

    return [make(op) for op in NAN_PROPAGATING] + [_lrn_op(opset), _dynamic_quantize_op(opset)] + _dequantize_op(opset)


def _dequantize_op(opset: int) -> list[type]:
    """DequantizeLinear below opset 19, which onnx's evaluator does not implement (it has 19 onward, the
    same formula (x - zero_point) * scale with more types): without it no output after a
    DynamicQuantizeLinear round trip had a second or third opinion."""
    from onnx.reference.ops import load_op

    if opset >= 19:
        return []
    base = load_op("", "DequantizeLinear", 19)
    schema = onnx.defs.get_schema("DequantizeLinear", opset)
    return [type("DequantizeLinear", (base,), {"op_domain": "", "op_schema": schema})]


def _dynamic_quantize_op(opset: int) -> type:
    """DynamicQuantizeLinear with our documented NaN rule (docs/reliability.md): NaN left out of the range
    (numpy's nanmin/nanmax), a NaN element quantized to 0, as onnxruntime does in most SIMD lanes (its
    range depends on the lane a NaN falls in; onnx's evaluator gives a NaN scale)."""
    from onnx.reference.ops import load_op

    base = load_op("", "DynamicQuantizeLinear", opset)

    def _run(self, x):
        x = np.asarray(x)
        nan = np.isnan(x)
        y, scale, zero_point = base._run(self, np.where(nan, 0, x).astype(x.dtype))
        return np.where(nan, np.zeros_like(y), y), scale, zero_point

    schema = onnx.defs.get_schema("DynamicQuantizeLinear", opset)
    return type("DynamicQuantizeLinear", (base,), {"op_domain": "", "_run": _run, "op_schema": schema})


def _lrn_op(opset: int) -> type:
    """LRN from its definition: onnx's evaluator loops over the batch instead of the channels (channels
    past the batch size keep a square sum of 0), and onnxruntime's running sum gives NaN once a channel
    outside the window squares to inf."""
    from onnx.reference.ops import load_op

    base = load_op("", "LRN", opset)

    def _run(self, x, alpha=None, beta=None, bias=None, size=None):
        x = np.asarray(x)
        square_sum = np.zeros_like(x)
        channels = x.shape[1]
        for c in range(channels):
            begin, end = max(0, c - (size - 1) // 2), min(channels, c + -(-(size - 1) // 2) + 1)
            square_sum[:, c] = np.sum(x[:, begin:end] ** 2, axis=1)
        return ((x / (bias + (alpha / size) * square_sum) ** beta).astype(x.dtype),)

    return type("LRN", (base,), {"op_domain": "", "_run": _run, "op_schema": onnx.defs.get_schema("LRN", opset)})


def definition(case: Case, second: list | None = None) -> list:
    """Each output as the operators' definition gives it: onnx's ReferenceEvaluator on ``case`` converted
    to float64 (``to_float64``), with the max family propagating NaN (``nan_propagating_ops``), rounded
    back to each output's type; where the evaluator cannot run an output's part in float64, the float32
    second opinion (``second``) stands in; None where neither has it."""
    from onnx.reference import ReferenceEvaluator

    opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    new_ops = nan_propagating_ops(opset)
    types = [helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in case.model.graph.output]

    def evaluate(model: onnx.ModelProto) -> list | None:
        feeds = {k: (v.astype("float64") if v.dtype == np.float32 else v) for k, v in case.feeds_of(model).items()}
        try:  # a model the conversion or the evaluator cannot handle leaves the float32 opinion in place
            wide = to_float64(model)
            with np.errstate(all="ignore"):
                return [np.asarray(v) for v in ReferenceEvaluator(wide, new_ops=new_ops).run(None, feeds)]
        except Exception:
            return None

    values = evaluate(case.model)
    if values is None:
        values = [
            (lambda alone: None if alone is None else alone[0])(evaluate(_ancestors(case.model, o.name)))
            for o in case.model.graph.output
        ]
    result = []
    for i, (value, dtype) in enumerate(zip(values, types)):
        if value is None:
            result.append(second[i] if second else None)
            continue
        with np.errstate(all="ignore"):
            result.append(value.astype(dtype) if value.dtype != dtype else value)
    return result
