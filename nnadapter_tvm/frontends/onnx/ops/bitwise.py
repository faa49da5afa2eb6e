"""Bit operations on integers: BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift BitCast -> the extensions
BITWISE_AND, BITWISE_OR, BITWISE_XOR, BITWISE_NOT, BIT_SHIFT, BITCAST (op_converters/bitwise.py)."""

from __future__ import annotations

import numpy as np
import onnx

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.elementwise import shape_of
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value, precision_of
from nnadapter_tvm.operations.bitwise import (
    BIT_SHIFT,
    BITCAST,
    BITWISE_AND,
    BITWISE_NOT,
    BITWISE_OR,
    BITWISE_XOR,
    LEFT,
    RIGHT,
)

_BINARY = {"BitwiseAnd": BITWISE_AND, "BitwiseOr": BITWISE_OR, "BitwiseXor": BITWISE_XOR}


def _integer(ctx: NodeContext, v: Value) -> Value:
    if v.dtype is None or v.dtype.kind not in "iu":
        ctx.fail(f"{v.describe()}: {ctx.op_type} takes integers")
    return v


@onnx_op(*_BINARY)
def bitwise_binary(ctx: NodeContext) -> Value:
    """BitwiseAnd, BitwiseOr, BitwiseXor -> BITWISE_AND, BITWISE_OR, BITWISE_XOR (broadcast)."""
    a, b = _integer(ctx, ctx.input(0)), _integer(ctx, ctx.input(1))
    return ctx.emit(_BINARY[ctx.op_type], [a, b], shape=shape_of(a, b))


@onnx_op("BitwiseNot")
def bitwise_not(ctx: NodeContext) -> Value:
    """BitwiseNot -> BITWISE_NOT."""
    x = _integer(ctx, ctx.input(0))
    return ctx.emit(BITWISE_NOT, [x], shape=x.shape)


@onnx_op("BitShift")
def bit_shift(ctx: NodeContext) -> Value:
    """BitShift(direction LEFT | RIGHT) -> BIT_SHIFT(direction 0 | 1); shifts outside [0, bits) give
    onnx's full-width result (0, or -1 for a right shift of a negative value)."""
    x, shift = _integer(ctx, ctx.input(0)), _integer(ctx, ctx.input(1))
    direction = ctx.attr("direction")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        ctx.fail(f"direction '{direction}' is not 'LEFT' or 'RIGHT'")
    code = LEFT if direction == "LEFT" else RIGHT
    return ctx.emit(BIT_SHIFT, [x, shift, ctx.i32(code)], shape=shape_of(x, shift))


@onnx_op("BitCast")
def bitcast(ctx: NodeContext) -> Value:
    """BitCast(to) -> BITCAST to the precision of ``to`` (same element size; ONNX's bool is one byte)."""
    x = ctx.input(0)
    to = ctx.attr("to")
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        ctx.unsupported(f"BitCast to ONNX element type {to}, which has no NNAdapter precision")
    precision = precision_of(dtype, ctx.label)
    if x.dtype is None or x.dtype.itemsize != dtype.itemsize:
        ctx.fail(f"BitCast of {x.describe()} to {dtype}: the element sizes differ")
    return ctx.emit(BITCAST, [x, ctx.i32(int(precision))], dtype=dtype, shape=x.shape)
