"""Elementwise arithmetic and math: Add Sub Mul Div Pow Mod Max Min Sum Mean and the unary math ops
-> ADD/SUB/MUL/DIV/POW/MAX/MIN/SUM/FLOOR_DIV/ABS/EXP/LOG/SIN/COS/FLOOR, or short exact compositions."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import broadcast_shape, cast, fuse_none
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O

# NNAdapter's binary arithmetic takes a trailing fuse_code operand.
_FUSED = frozenset({O.ADD, O.SUB, O.MUL, O.DIV, O.MAX, O.MIN, O.POW, O.FLOOR_DIV})


def shape_of(*values: Value) -> tuple | None:
    """The numpy-broadcast shape of ``values`` (None when a rank is unknown)."""
    shape: tuple = ()
    for v in values:
        if v.shape is None:
            return None
        shape = broadcast_shape(shape, v.shape)
    return shape


def op(ctx: NodeContext, op_type: O, *inputs: Value, dtype: object = None) -> Value:
    """One elementwise NNAdapter operation on ``inputs`` (broadcast), fuse_code NONE where it has one."""
    operands = [*inputs, fuse_none(ctx)] if op_type in _FUSED else list(inputs)
    if op_type == O.WHERE and dtype is None:
        dtype = inputs[1].dtype
    return ctx.emit(op_type, operands, dtype=dtype, shape=shape_of(*inputs))


def scalar(ctx: NodeContext, value: object, like: Value) -> Value:
    """A rank-0 constant of ``like``'s element type."""
    return ctx.constant(value, like.dtype)


def is_int(v: Value) -> bool:
    return v.dtype is not None and v.dtype.kind in "iu"


def is_float(v: Value) -> bool:
    return v.dtype is not None and v.dtype.kind == "f"


# -- binary -------------------------------------------------------------------------------
_BINARY = {"Add": O.ADD, "Sub": O.SUB, "Mul": O.MUL}


@onnx_op(*_BINARY)
def arithmetic(ctx: NodeContext) -> Value:
    """Add, Sub, Mul -> ADD, SUB, MUL with fuse_code NONE."""
    return op(ctx, _BINARY[ctx.op_type], ctx.input(0), ctx.input(1))


def trunc_div(ctx: NodeContext, a: Value, b: Value) -> Value:
    """Integer division truncating toward zero (C, ONNX): FLOOR_DIV, plus one where the floored
    quotient q is negative and inexact (q * b != a)."""
    q = op(ctx, O.FLOOR_DIV, a, b)
    if a.dtype.kind == "u":
        return q
    negative = op(ctx, O.LESS, q, scalar(ctx, 0, q), dtype="bool")
    inexact = op(ctx, O.NOT_EQUAL, op(ctx, O.MUL, q, b), a, dtype="bool")
    return op(ctx, O.WHERE, op(ctx, O.AND, negative, inexact), op(ctx, O.ADD, q, scalar(ctx, 1, q)), q)


@onnx_op("Div")
def div(ctx: NodeContext) -> Value:
    """Div -> DIV (floats); integers -> FLOOR_DIV corrected to truncate toward zero."""
    a, b = ctx.input(0), ctx.input(1)
    if is_int(a):
        return trunc_div(ctx, a, b)
    return op(ctx, O.DIV, a, b)


@onnx_op("Mod")
def mod(ctx: NodeContext) -> Value:
    """Mod (integers) -> a - FLOOR_DIV(a, b) * b (fmod=0, the divisor's sign), or with the
    truncated quotient (fmod=1, the dividend's sign). Floats -> the extension MOD (exact: C's fmod, and
    numpy's mod for fmod=0), since a - b * trunc(a / b) rounds."""
    a, b = ctx.input(0), ctx.input(1)
    fmod = ctx.attr("fmod", 0)
    if fmod not in (0, 1):
        ctx.fail(f"fmod {fmod} is not 0 or 1")
    if is_float(a):
        from nnadapter_tvm.operations.math_functions import MOD

        return ctx.emit(MOD, [a, b, ctx.boolean(fmod == 1)], shape=shape_of(a, b))
    if not is_int(a):
        ctx.unsupported(f"Mod of {a.dtype} (fmod={fmod}): integers and floats only")
    q = trunc_div(ctx, a, b) if fmod == 1 else op(ctx, O.FLOOR_DIV, a, b)
    return op(ctx, O.SUB, a, op(ctx, O.MUL, q, b))


@onnx_op("Pow")
def pow_(ctx: NodeContext) -> Value:
    """Pow -> POW computed in numpy's promoted type of (base, exponent), cast back to the base's
    type (ONNX's reference: np.power(a, b).astype(a.dtype)); integer POW is exact and wraps."""
    a, b = ctx.input(0), ctx.input(1)
    common = np.result_type(a.dtype, b.dtype)
    result = op(ctx, O.POW, cast(ctx, a, common), cast(ctx, b, common))
    return cast(ctx, result, a.dtype)


_VARIADIC = {"Max": O.MAX, "Min": O.MIN, "Sum": O.ADD, "Mean": O.ADD}


@onnx_op(*_VARIADIC)
def variadic(ctx: NodeContext) -> Value:
    """Max, Min, Sum, Mean over 1..n inputs -> a chain of MAX / MIN / ADD (Mean: then DIV by n);
    one input -> ASSIGN."""
    inputs = [v for v in ctx.inputs() if v is not None]
    if not inputs:
        ctx.fail("needs at least one input")
    if len(inputs) == 1:
        return ctx.emit(O.ASSIGN, [inputs[0]], shape=inputs[0].shape)
    result = inputs[0]
    for v in inputs[1:]:
        result = op(ctx, _VARIADIC[ctx.op_type], result, v)
    if ctx.op_type == "Mean":
        result = op(ctx, O.DIV, result, scalar(ctx, len(inputs), result))
    return result


# -- unary --------------------------------------------------------------------------------
_UNARY = {"Abs": O.ABS, "Exp": O.EXP, "Log": O.LOG, "Sin": O.SIN, "Cos": O.COS, "Floor": O.FLOOR}


@onnx_op(*_UNARY)
def unary(ctx: NodeContext) -> Value:
    """Abs, Exp, Log, Sin, Cos, Floor -> ABS, EXP, LOG, SIN, COS, FLOOR."""
    x = ctx.input(0)
    if ctx.op_type == "Abs" and x.dtype.kind == "u":
        return ctx.emit(O.ASSIGN, [x], shape=x.shape)
    return op(ctx, _UNARY[ctx.op_type], x)


@onnx_op("Neg")
def neg(ctx: NodeContext) -> Value:
    """Neg -> MUL by -1 (exact, -0 included; integers wrap as in two's complement)."""
    x = ctx.input(0)
    if x.dtype.kind == "u":
        ctx.unsupported(f"Neg of {x.dtype}: ONNX defines Neg for signed types only")
    return op(ctx, O.MUL, x, scalar(ctx, -1, x))


@onnx_op("Reciprocal")
def reciprocal(ctx: NodeContext) -> Value:
    """Reciprocal -> DIV(1, x)."""
    x = ctx.input(0)
    return op(ctx, O.DIV, scalar(ctx, 1, x), x)


@onnx_op("Sqrt")
def sqrt(ctx: NodeContext) -> Value:
    """Sqrt -> POW(x, 0.5), which is sqrt except at -inf; that one is made NaN by WHERE."""
    x = ctx.input(0)
    root = op(ctx, O.POW, x, scalar(ctx, 0.5, x))
    minus_inf = op(ctx, O.EQUAL, x, scalar(ctx, -np.inf, x), dtype="bool")
    return op(ctx, O.WHERE, minus_inf, scalar(ctx, np.nan, x), root)


@onnx_op("Tan")
def tan(ctx: NodeContext) -> Value:
    """Tan -> SIN / COS."""
    x = ctx.input(0)
    return op(ctx, O.DIV, op(ctx, O.SIN, x), op(ctx, O.COS, x))


@onnx_op("Cosh")
def cosh(ctx: NodeContext) -> Value:
    """Cosh -> (EXP(x) + EXP(-x)) / 2 (no cancellation: both terms are positive; Sinh would cancel near 0
    and has no converter)."""
    x = ctx.input(0)
    minus = op(ctx, O.EXP, op(ctx, O.MUL, x, scalar(ctx, -1, x)))
    return op(ctx, O.MUL, op(ctx, O.ADD, op(ctx, O.EXP, x), minus), scalar(ctx, 0.5, x))


@onnx_op("Ceil")
def ceil(ctx: NodeContext) -> Value:
    """Ceil -> -FLOOR(-x) (exact)."""
    x = ctx.input(0)
    minus_one = scalar(ctx, -1, x)
    return op(ctx, O.MUL, op(ctx, O.FLOOR, op(ctx, O.MUL, x, minus_one)), minus_one)


@onnx_op("Round")
def round_(ctx: NodeContext) -> Value:
    """Round (half to even) -> f = FLOOR(x), d = x - f; f + 1 where d > 0.5, or d == 0.5 and f is odd.

    Exact: x - f is exact except for x in (-1, 0), where its rounding cannot move d across 0.5
    to a wrong answer (f = -1 is odd, so d == 0.5 rounds up, as the true d > 0.5 does).
    Integers, inf and NaN come out unchanged (d is 0 or NaN).
    """
    x = ctx.input(0)
    f = op(ctx, O.FLOOR, x)
    d = op(ctx, O.SUB, x, f)
    half = scalar(ctx, 0.5, x)
    f_half = op(ctx, O.MUL, f, half)
    odd = op(ctx, O.NOT_EQUAL, op(ctx, O.FLOOR, f_half), f_half, dtype="bool")
    tie = op(ctx, O.AND, op(ctx, O.EQUAL, d, half, dtype="bool"), odd)
    up = op(ctx, O.OR, op(ctx, O.GREATER, d, half, dtype="bool"), tie)
    return op(ctx, O.WHERE, up, op(ctx, O.ADD, f, scalar(ctx, 1, x)), f)


@onnx_op("Sign")
def sign(ctx: NodeContext) -> Value:
    """Sign -> WHERE(x > 0, 1, WHERE(x < 0, -1, x)): zeros and NaN pass through."""
    x = ctx.input(0)
    zero = scalar(ctx, 0, x)
    result = x
    if x.dtype.kind != "u":
        negative = op(ctx, O.LESS, x, zero, dtype="bool")
        result = op(ctx, O.WHERE, negative, scalar(ctx, -1, x), x)
    return op(ctx, O.WHERE, op(ctx, O.GREATER, x, zero, dtype="bool"), scalar(ctx, 1, x), result)
