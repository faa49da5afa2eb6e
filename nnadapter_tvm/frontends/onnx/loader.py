"""Reading an ONNX model: parse, check, inline local functions, infer shapes."""

from __future__ import annotations

import math
import os

import onnx
import onnx.inliner
import onnx.shape_inference

from nnadapter_tvm.errors import fail
from nnadapter_tvm.types import ResultCode


def load_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """A checked model with local functions inlined and shapes inferred; errors name the file."""
    source = "the model"
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "the given bytes")
    else:
        source = os.fspath(model)
        try:
            with open(source, "rb") as f:
                head = f.read(1)
            proto = onnx.load(source) if head else None
        except FileNotFoundError:
            fail(f"{source}: no such file")
        except (OSError, onnx.onnx_cpp2py_export.checker.ValidationError) as err:
            fail(f"{source}: cannot read it: {err}")
        except Exception as err:  # protobuf's DecodeError and friends
            fail(f"{source} is not an ONNX model: {err}")
        if proto is None or not proto.HasField("graph"):
            fail(f"{source} is not an ONNX model (no graph)")
    # The checker, the inliner and shape inference each serialize the model they are given: they get it
    # without its weights (a BERT-base's 440 MB took 4 of its 9 s of import), and what they find is
    # copied back.
    light = _without_weights(proto)
    _check(light, source)
    if light.functions:
        light = onnx.inliner.inline_local_functions(light)
    try:
        light = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
    except Exception as err:  # shape inference raises InferenceError and friends
        fail(f"{source}: ONNX shape inference failed: {err}", ResultCode.INVALID_PARAMETER)
    found = {"node", "value_info", "output"}
    if proto is model:  # the caller's: left as it was given (its weights are copied, not moved)
        proto = _copy_without(model, {"graph", "functions"}, onnx.ModelProto())
        _copy_without(model.graph, found, proto.graph)
    for field in found:
        proto.graph.ClearField(field)
        getattr(proto.graph, field).extend(getattr(light.graph, field))
    proto.ClearField("functions")
    proto.functions.extend(light.functions)
    return proto


def _copy_without(message, skipped: set[str], into):
    """``into`` (an empty message of ``message``'s kind) given ``message``'s fields except ``skipped``."""
    for field in message.DESCRIPTOR.fields:
        if field.name not in skipped and _has(message, field):
            _copy_field(message, into, field)
    return into


#: Initializers of more elements than this are given to the checker and to shape inference as graph
#: inputs of their type and shape: their values inform neither (shape operands, axes and sizes are smaller).
LARGE_INITIALIZER = 4096


def _without_weights(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose large initializers are graph inputs of the same type and shape."""
    graph = proto.graph
    light = _copy_without(proto, {"graph"}, onnx.ModelProto())
    _copy_without(graph, {"initializer"}, light.graph)
    inputs = {info.name for info in graph.input}
    for init in graph.initializer:
        if math.prod(init.dims) <= LARGE_INITIALIZER:
            light.graph.initializer.append(init)
        elif init.name not in inputs:
            light.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return light


def _has(message, field) -> bool:
    if field.is_repeated:
        return len(getattr(message, field.name)) > 0
    return message.HasField(field.name) if field.has_presence else True


def _copy_field(source, target, field) -> None:
    if field.is_repeated:
        getattr(target, field.name).extend(getattr(source, field.name))
    elif field.message_type:
        getattr(target, field.name).CopyFrom(getattr(source, field.name))
    else:
        setattr(target, field.name, getattr(source, field.name))


def _check(proto: onnx.ModelProto, source: str) -> None:
    """onnx.checker, except that a graph input or output may leave its tensor shape out (rank unknown),
    as exporters write and onnxruntime accepts; the checker insists on the field.  The field is set
    empty only while the checker runs, so shape inference still sees the rank as unknown."""
    unshaped = [
        info.type.tensor_type
        for info in (*proto.graph.input, *proto.graph.output)
        if info.type.HasField("tensor_type") and not info.type.tensor_type.HasField("shape")
    ]
    for tensor_type in unshaped:
        tensor_type.shape.SetInParent()
    # onnxruntime registers a few of its own operators in ONNX's domain, and its transformer optimizer writes
    # them there (SimplifiedLayerNormalization, the RMS norm): the checker knows no such operator, so it
    # checks them as the custom operators they are (in a domain of their own) while it runs.
    hidden = [(n, n.domain) for n in _all_nodes(proto.graph) if n.domain in ("", "ai.onnx")]
    hidden = [(n, domain) for n, domain in hidden if n.op_type in ORT_ONNX_DOMAIN_OPS]
    for node, _ in hidden:
        node.domain = _ORT_DOMAIN
    imported = any(entry.domain == _ORT_DOMAIN for entry in proto.opset_import)
    if hidden and not imported:
        proto.opset_import.append(onnx.helper.make_opsetid(_ORT_DOMAIN, 1))
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as err:
        fail(f"{source} fails onnx.checker: {str(err).strip().splitlines()[0]}")
    finally:
        for tensor_type in unshaped:
            tensor_type.ClearField("shape")
        for node, domain in hidden:
            node.domain = domain
        if hidden and not imported:
            proto.opset_import.pop()


# onnxruntime's operators of ONNX's domain that its tools write (frontends/onnx/ops/microsoft.py converts them).
ORT_ONNX_DOMAIN_OPS = frozenset({"SimplifiedLayerNormalization"})
_ORT_DOMAIN = "com.microsoft"


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes and those of its subgraphs (If, Loop and Scan bodies)."""
    nodes = []
    for node in graph.node:
        nodes.append(node)
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                nodes.extend(_all_nodes(g))
    return nodes


def _parse(data: bytes, source: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:
        fail(f"{source} is not an ONNX model: {err}")
    if not proto.HasField("graph"):
        fail(f"{source} is not an ONNX model (no graph)")
    return proto
