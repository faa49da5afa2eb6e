"""ONNX ops defined as functions of other ONNX ops: expand a node into its function body, so an op
with no converter of its own still maps when the ops of its body do."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import onnx
import onnx.defs
import onnx.inliner
import onnx.shape_inference
from onnx import helper

from nnadapter_tvm.frontends.onnx.value_info import type_of


def expand(
    node: onnx.NodeProto, opset: int, input_types: Sequence[tuple[np.dtype | None, tuple | None]]
) -> tuple[list[onnx.NodeProto], int, dict] | None:
    """The nodes of ``node``'s function body (inputs, outputs and attributes bound), the opset they
    are written in and the types ONNX infers for their values; None when the op has no function
    body for this opset."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    type_protos = [_type_proto(dtype, shape) for dtype, shape in input_types]
    body = _body(schema, node, opset, type_protos)
    if body is None or not body.node:
        return None
    node = _with_defaults(node, schema)
    function = onnx.FunctionProto()
    function.CopyFrom(body)
    function.domain, function.name = "", node.op_type
    if not function.input:
        function.input.extend(i.name for i in schema.inputs)
        function.output.extend(o.name for o in schema.outputs)
        function.attribute.extend(schema.attributes)
    inputs = [helper.make_value_info(n, t) for n, t in zip(node.input, type_protos) if n and t is not None]
    if len(inputs) != len([n for n in node.input if n]):
        return None
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], "expand", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], functions=[function])
    try:
        inlined = onnx.inliner.inline_selected_functions(model, [("", node.op_type)])
    except Exception:  # the inliner asserts on bodies it cannot bind
        return None
    nodes = list(inlined.graph.node)
    if not nodes or any(n.op_type == node.op_type and n.domain in ("", "ai.onnx") for n in nodes):
        return None
    body_opset = next((o.version for o in body.opset_import if o.domain in ("", "ai.onnx")), opset)
    # Inference is best effort here: converters fall back on what they know.
    with contextlib.suppress(Exception):
        inlined = onnx.shape_inference.infer_shapes(inlined, data_prop=True)
    inferred = {info.name: type_of(info) for info in inlined.graph.value_info}
    return nodes, body_opset, inferred


def _body(schema: onnx.defs.OpSchema, node: onnx.NodeProto, opset: int, types: list) -> onnx.FunctionProto | None:
    present = [t for n, t in zip(node.input, types) if n]
    if schema.has_context_dependent_function and all(t is not None for t in present):
        # An omitted optional input has an empty type, as the function builder expects.
        types = [t if t is not None else onnx.TypeProto() for t in types]
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        if versions:
            try:
                data = schema.get_context_dependent_function_with_opset_version(
                    max(versions), node.SerializeToString(), [t.SerializeToString() for t in types]
                )
            except Exception:  # the builder rejects inputs it cannot expand for
                data = b""
            if data:
                return onnx.FunctionProto.FromString(data)
    versions = [v for v in schema.all_function_opset_versions if v <= opset]
    if versions:
        data = schema.get_function_with_opset_version(max(versions))
        if data:
            return onnx.FunctionProto.FromString(data)
    return None


def _with_defaults(node: onnx.NodeProto, schema: onnx.defs.OpSchema) -> onnx.NodeProto:
    """The node with the schema's default attribute values spelled out: the inliner binds only those given."""
    given = {a.name for a in node.attribute}
    full = onnx.NodeProto()
    full.CopyFrom(node)
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in given and default is not None and default.type != onnx.AttributeProto.UNDEFINED:
            value = onnx.AttributeProto()
            value.CopyFrom(default)
            value.name = name
            full.attribute.append(value)
    return full


def _type_proto(dtype: np.dtype | None, shape: tuple | None) -> onnx.TypeProto | None:
    if dtype is None:
        return None
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_type_proto(elem, None if shape is None else list(shape))
