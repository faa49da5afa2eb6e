"""Softmax -> SOFTMAX, LogSoftmax -> LOG_SOFTMAX, Hardmax -> ARG_MAX + EQUAL + CAST (opset < 13: over
the input coerced to 2-D around ``axis``); Flatten -> RESHAPE or FLATTEN."""

from __future__ import annotations

import math

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast, norm_axis, rank_of, reshape
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision


def _prod(dims) -> int | None:
    return None if any(d is None for d in dims) else math.prod(dims)


def flatten_2d(ctx: NodeContext, x: Value, axis: int) -> Value:
    """[d0 .. d(axis-1), d(axis) .. dn] -> [prod(d0 .. d(axis-1)), prod(d(axis) .. dn)] (ONNX Flatten)."""
    rank = rank_of(ctx, x)
    outer, inner = _prod(x.shape[:axis]), _prod(x.shape[axis:])
    if outer is not None:
        return reshape(ctx, x, [outer, -1], (outer, inner))
    if inner is not None:
        return reshape(ctx, x, [-1, inner], (outer, inner))
    # Both products unknown: FLATTEN the leading and the trailing axes (each range holds 2+ axes here).
    if axis == rank or axis == 0:
        ctx.unsupported(f"Flatten of {x.describe()} at axis {axis}")
    y = ctx.emit(O.FLATTEN, [x, ctx.i32(axis), ctx.i32(rank - 1)], shape=(*x.shape[:axis], None))
    return ctx.emit(O.FLATTEN, [y, ctx.i32(0), ctx.i32(axis - 1)], shape=(None, None))


@onnx_op("Flatten")
def flatten(ctx: NodeContext) -> Value:
    """Flatten -> RESHAPE to [outer, -1] (or [-1, inner]), else two FLATTENs."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    axis = int(ctx.attr("axis", 1))
    if not -rank <= axis <= rank:
        ctx.fail(f"axis {axis} is outside [-{rank}, {rank}]")
    return flatten_2d(ctx, x, axis + rank if axis < 0 else axis)


def _coerced(ctx: NodeContext, x: Value, fn) -> Value:
    """``fn(v, axis)`` over ``x`` itself (opset >= 13, or when opset < 13's 2-D coercion changes nothing)
    or over ``x`` coerced to 2-D around ``axis`` and reshaped back."""
    rank = rank_of(ctx, x)
    if ctx.opset >= 13:
        return fn(x, norm_axis(ctx, int(ctx.attr("axis", -1)), rank))
    axis = int(ctx.attr("axis", 1))
    if not -rank <= axis <= rank:
        ctx.fail(f"axis {axis} is outside [-{rank}, {rank}]")
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1:
        return fn(x, axis)
    if not x.is_static:
        # Unknown leading dims: [d0 .. d(axis-1), inner] and back, RESHAPE's 0 copying each leading dim in
        # place; the coerced 2-D rows are then the last axis.  The trailing dims must be static.
        inner = _prod(x.shape[axis:])
        if inner is None or axis == 0:
            ctx.unsupported(
                f"{ctx.op_type} (opset {ctx.opset}) coerces {x.describe()} to 2-D at axis {axis}: needs static "
                "dims from the axis on"
            )
        lead = [0 if d is None else d for d in x.shape[:axis]]
        y = fn(reshape(ctx, x, [*lead, inner], (*x.shape[:axis], inner)), axis)
        return reshape(ctx, y, [*lead, *x.shape[axis:]], x.shape)
    y = fn(flatten_2d(ctx, x, axis), 1)
    return reshape(ctx, y, list(x.shape), x.shape)


@onnx_op("Softmax", "LogSoftmax")
def softmax(ctx: NodeContext) -> Value:
    """Softmax / LogSoftmax -> SOFTMAX / LOG_SOFTMAX along ``axis``."""
    x = ctx.input(0)
    if x.dtype.kind != "f":
        ctx.fail(f"{ctx.op_type} of {x.dtype}")
    op = O.SOFTMAX if ctx.op_type == "Softmax" else O.LOG_SOFTMAX
    return _coerced(ctx, x, lambda v, axis: ctx.emit(op, [v, ctx.i32(axis)], shape=v.shape))


@onnx_op("Hardmax")
def hardmax(ctx: NodeContext) -> Value:
    """Hardmax -> one-hot of the first maximum: CAST(EQUAL(ARG_MAX(x, axis, keepdim), iota along axis))."""
    x = ctx.input(0)
    if x.dtype.kind != "f":
        ctx.fail(f"Hardmax of {x.dtype}")

    def one_hot(v: Value, axis: int) -> Value:
        size = v.shape[axis]
        if size is None:
            ctx.unsupported(f"Hardmax needs a static size along axis {axis}, got {v.describe()}")
        kept = tuple(1 if i == axis else d for i, d in enumerate(v.shape))
        first = ctx.emit(
            O.ARG_MAX,
            [v, ctx.i32(axis), ctx.boolean(True), ctx.i32(int(Precision.INT64))],
            dtype="int64",
            shape=kept,
        )
        iota = np.arange(size, dtype="int64").reshape([size] + [1] * (v.rank - axis - 1))
        hit = ctx.emit(O.EQUAL, [first, ctx.constant(iota)], dtype="bool", shape=v.shape)
        return cast(ctx, hit, v.dtype)

    return _coerced(ctx, x, one_hot)
