"""Type conversion and pass-through: Cast CastLike -> CAST; Identity -> ASSIGN; Dropout (inference) -> ASSIGN
and, for the mask, FILL_LIKE(true)."""

from __future__ import annotations

import numpy as np
import onnx

from nnadapter_tvm.frontends.onnx import shape_elements
from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast as cast_to
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O


def _onnx_dtype(ctx: NodeContext, to: int) -> np.dtype:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        ctx.unsupported(f"Cast to ONNX element type {to}, which has no NNAdapter precision")


@onnx_op("Cast", "CastLike")
def cast(ctx: NodeContext) -> Value:
    """Cast(to), CastLike(target) -> CAST (numpy's astype: floats truncate toward zero into integers)."""
    x = ctx.input(0)
    dtype = _onnx_dtype(ctx, ctx.attr("to")) if ctx.op_type == "Cast" else ctx.input(1).dtype
    if dtype is None or dtype.kind not in "biuf" or x.dtype is None:
        ctx.unsupported(f"Cast from {x.dtype} to {dtype}: an element type NNAdapter does not define")
    if x.dtype == dtype:
        return ctx.emit(O.ASSIGN, [x], shape=x.shape)
    y = cast_to(ctx, x, dtype)
    if dtype.kind == "f" and not x.is_const and shape_elements.of(x) is not None:
        y.from_integer = x  # dimensions: exact in any float type (below 2^24)
    return y


@onnx_op("Identity")
def identity(ctx: NodeContext) -> Value:
    """Identity -> ASSIGN."""
    x = ctx.input(0)
    return ctx.emit(O.ASSIGN, [x], shape=x.shape)


@onnx_op("Dropout")
def dropout(ctx: NodeContext) -> list[Value]:
    """Dropout in inference -> ASSIGN; the mask -> FILL_LIKE(x, true). Training mode (a constant true
    training_mode, or is_test=0 before opset 7) with a ratio other than 0 draws a random mask: unsupported."""
    x = ctx.input(0)
    training = bool(np.reshape(ctx.const(2, np.array(False)), -1)[0]) if ctx.opset >= 12 else False
    if ctx.opset < 7 and not ctx.attr("is_test", 0):
        training = True
    if training:
        ratio = ctx.attr_or_input("ratio", 1, 12, 0.5)
        if float(np.reshape(ratio, -1)[0]) != 0.0:
            ctx.unsupported("Dropout in training mode draws a random mask; no standard operation does")
    outputs = [ctx.emit(O.ASSIGN, [x], shape=x.shape)]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        mask_dtype = ctx.out_dtype(1) or np.dtype(bool)
        outputs.append(ctx.emit(O.FILL_LIKE, [x, ctx.constant([1], mask_dtype)], dtype=mask_dtype, shape=x.shape))
    return outputs
