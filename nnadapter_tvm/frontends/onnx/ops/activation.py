"""Activations: Relu, Sigmoid, Tanh, ..."""

from __future__ import annotations

from nnadapter_tvm.frontends.onnx.graph import NodeContext, Value
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.types import OperationType as O

_UNARY = {"Relu": O.RELU, "Sigmoid": O.SIGMOID, "Tanh": O.TANH}


@onnx_op(*_UNARY)
def unary(ctx: NodeContext) -> Value:
    """Relu, Sigmoid, Tanh -> RELU, SIGMOID, TANH."""
    return ctx.emit(_UNARY[ctx.op_type], [ctx.input(0)])
