"""Elementwise arithmetic: Add, Sub, Mul, Div, ..."""

from __future__ import annotations

from nnadapter_tvm.frontends.onnx.graph import NodeContext, Value
from nnadapter_tvm.frontends.onnx.ops.common import binary
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.types import OperationType as O

_BINARY = {"Add": O.ADD, "Sub": O.SUB, "Mul": O.MUL, "Div": O.DIV}


@onnx_op(*_BINARY)
def arithmetic(ctx: NodeContext) -> Value:
    """Add, Sub, Mul, Div -> ADD, SUB, MUL, DIV with fuse_code NONE."""
    if ctx.op_type == "Div" and ctx.input(0).dtype.kind in "iu":
        ctx.unsupported("integer Div truncates toward zero; NNAdapter's DIV is a float division")
    return binary(ctx, _BINARY[ctx.op_type], ctx.input(0), ctx.input(1))
