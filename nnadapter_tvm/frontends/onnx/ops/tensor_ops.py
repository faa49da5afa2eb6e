"""Einsum, Col2Im, Det, ReverseSequence -> the built-in extensions EINSUM, COL2IM, DET and
REVERSE_SEQUENCE (op_converters/tensor_ops.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.tensor_ops import COL2IM, DET, EINSUM, REVERSE_SEQUENCE, equation_operand


@onnx_op("Einsum")
def einsum(ctx: NodeContext) -> Value:
    """Einsum(equation) -> EINSUM (the equation as a UINT8 operand of its ASCII bytes)."""
    inputs = [ctx.input(i) for i in range(ctx.input_count)]
    equation = ctx.constant(equation_operand(ctx.attr("equation")))
    return ctx.emit(EINSUM, [*inputs, equation])


@onnx_op("Col2Im")
def col2im(ctx: NodeContext) -> Value:
    """Col2Im(dilations, pads, strides) -> COL2IM (image_shape and block_shape must be known at import)."""
    image = ctx.i64(np.asarray(ctx.const(1), "int64").reshape(-1))
    block = ctx.i64(np.asarray(ctx.const(2), "int64").reshape(-1))
    rank = block.const.size
    attrs = [ctx.i64(ctx.attr(name, default)) for name, default in
             (("dilations", [1] * rank), ("pads", [0] * 2 * rank), ("strides", [1] * rank))]  # fmt: skip
    return ctx.emit(COL2IM, [ctx.input(0), image, block, *attrs])


@onnx_op("Det")
def det(ctx: NodeContext) -> Value:
    """Det -> DET."""
    return ctx.emit(DET, [ctx.input(0)])


@onnx_op("ReverseSequence")
def reverse_sequence(ctx: NodeContext) -> Value:
    """ReverseSequence(batch_axis=1, time_axis=0) -> REVERSE_SEQUENCE."""
    axes = [ctx.i32(ctx.attr("batch_axis", 1)), ctx.i32(ctx.attr("time_axis", 0))]
    return ctx.emit(REVERSE_SEQUENCE, [ctx.input(0), ctx.input(1), *axes])
