"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin, TopK, CumSum ->
REDUCE_SUM/MEAN/MAX with elementwise ops around them, ARG_MAX/MIN, TOP_K, CUM_SUM."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx import shape_elements
from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import binary, cast, fold_if_empty, norm_axis, rank_of, reshape, to_rank0
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision

_INT32_MIN = -(2**31)
# The opset from which `axes` is an input rather than an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduced_shape(x: Value, axes: list[int], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if a in axes else d for a, d in enumerate(x.shape))
    return tuple(d for a, d in enumerate(x.shape) if a not in axes)


def _reduce(ctx: NodeContext, op: O, x: Value, axes: list[int], keepdims: bool) -> Value:
    """REDUCE_SUM/MEAN/MAX over ``axes`` (none: ``x`` itself, as NNAdapter's empty axes mean all);
    a rank-0 result (NNAdapter gives [1]) is reshaped to []."""
    if not axes:
        return x
    shape = _reduced_shape(x, axes, keepdims)
    y = ctx.emit(op, [x, ctx.i32(axes), ctx.boolean(keepdims)], shape=shape or (1,))
    return y if shape else to_rank0(ctx, y)


def _scalar(ctx: NodeContext, x: Value, value: object) -> Value:
    return ctx.constant(np.array(value, x.dtype))


def _unary(ctx: NodeContext, op: O, x: Value) -> Value:
    return ctx.emit(op, [x], shape=x.shape)


def _mul(ctx: NodeContext, a: Value, b: Value) -> Value:
    return binary(ctx, O.MUL, a, b, shape=a.shape if a.rank >= b.rank else b.shape)


def _reduce_min(ctx: NodeContext, x: Value, axes: list[int], keepdims: bool) -> Value:
    """min(x) = -max(-x) for floats; for integers ~max(~x) with ~x = all_ones - x (never overflows)."""
    if x.dtype.kind == "b":
        as_u8 = cast(ctx, x, "uint8")
        return cast(ctx, _reduce_min(ctx, as_u8, axes, keepdims), "bool")
    if x.dtype.kind == "f":
        neg = _mul(ctx, x, _scalar(ctx, x, -1))
        m = _reduce(ctx, O.REDUCE_MAX, neg, axes, keepdims)
        return _mul(ctx, m, _scalar(ctx, m, -1))
    ones = _scalar(ctx, x, np.iinfo(x.dtype).max if x.dtype.kind == "u" else -1)
    inverted = binary(ctx, O.SUB, ones, x, shape=x.shape)
    m = _reduce(ctx, O.REDUCE_MAX, inverted, axes, keepdims)
    return binary(ctx, O.SUB, _scalar(ctx, m, ones.const), m, shape=m.shape)


def _reduce_max(ctx: NodeContext, x: Value, axes: list[int], keepdims: bool) -> Value:
    if x.dtype.kind == "b":
        as_u8 = cast(ctx, x, "uint8")
        return cast(ctx, _reduce(ctx, O.REDUCE_MAX, as_u8, axes, keepdims), "bool")
    return _reduce(ctx, O.REDUCE_MAX, x, axes, keepdims)


def _slice(ctx: NodeContext, x: Value, axis: int, start: int, end: int) -> Value:
    shape = tuple(end - start if a == axis else d for a, d in enumerate(x.shape))
    inputs = [x, ctx.i32([axis]), ctx.i32([start]), ctx.i32([end]), ctx.i32([1])]
    return ctx.emit(O.SLICE, inputs, shape=shape)


def _reduce_prod(ctx: NodeContext, x: Value, axes: list[int], keepdims: bool) -> Value:
    """A product tree along each axis: halves multiplied (MUL) until one element is left."""
    if any(x.shape[a] is None for a in axes):
        ctx.unsupported(f"ReduceProd over axes {axes} of {x.describe()}: the reduced dims must be static")
    y = x
    for a in axes:
        k = x.shape[a]
        while k > 1:
            h = k // 2
            product = _mul(ctx, _slice(ctx, y, a, 0, h), _slice(ctx, y, a, h, 2 * h))
            if k % 2:
                rest = _slice(ctx, y, a, 2 * h, k)
                shape = tuple(h + 1 if b == a else d for b, d in enumerate(y.shape))
                product = ctx.emit(O.CONCAT, [product, rest, ctx.i32(a)], shape=shape)
            y, k = product, h + k % 2
    return _to_reduced(ctx, y, x, axes, keepdims)


def _sum(ctx: NodeContext, x: Value, axes: list[int], keepdims: bool) -> Value:
    return _reduce(ctx, O.REDUCE_SUM, x, axes, keepdims)


def _log_sum_exp(ctx: NodeContext, x: Value, axes: list[int], keepdims: bool) -> Value:
    """log(sum(exp(x))) computed as log(sum(exp(x - m))) + m, m the row's max (NaN where a NaN is), and m
    itself where m is infinite: log(sum(exp(x))) is +inf when some x is +inf and -inf when every x is
    -inf (onnxruntime, numpy in float64), where the shifted form computes inf - inf (NaN).  onnx's
    reference evaluator, which shifts by the max of the finite elements, gives NaN for rows without one."""
    m = _reduce(ctx, O.REDUCE_MAX, x, axes, True)
    shifted = _unary(ctx, O.EXP, binary(ctx, O.SUB, x, m, shape=x.shape))
    s = _unary(ctx, O.LOG, _reduce(ctx, O.REDUCE_SUM, shifted, axes, True))
    y = binary(ctx, O.ADD, s, m, shape=m.shape)
    infinite = ctx.emit(O.EQUAL, [_unary(ctx, O.ABS, m), _scalar(ctx, m, np.inf)], dtype="bool", shape=m.shape)
    y = ctx.emit(O.WHERE, [infinite, m, y], dtype=x.dtype, shape=m.shape)
    return _to_reduced(ctx, y, x, axes, keepdims)


def _to_reduced(ctx: NodeContext, y: Value, x: Value, axes: list[int], keepdims: bool) -> Value:
    """``y`` (``x`` reduced over ``axes`` with the axes kept) in the node's output shape: RESHAPE where that
    shape is static, else SQUEEZE of the kept axes (a RESHAPE target cannot name an unknown dim)."""
    out = _reduced_shape(x, axes, keepdims)
    if out == y.shape:
        return y
    if all(d is not None for d in out):
        return reshape(ctx, y, list(out), out_shape=out)
    return ctx.emit(O.SQUEEZE, [y, ctx.i32(sorted(axes))], shape=out)


def _compose(ctx: NodeContext, x: Value, axes: list[int], keepdims: bool) -> Value:
    op = ctx.op_type
    floats_only = ("ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")
    if op in floats_only and x.dtype.kind != "f":
        ctx.unsupported(f"{op} of {x.dtype}: the NNAdapter composition ({op} uses MEAN/POW/LOG) is float-only")
    if op == "ReduceSum":
        return _sum(ctx, x, axes, keepdims)
    if op == "ReduceMean":
        return _reduce(ctx, O.REDUCE_MEAN, x, axes, keepdims)
    if op == "ReduceMax":
        return _reduce_max(ctx, x, axes, keepdims)
    if op == "ReduceMin":
        return _reduce_min(ctx, x, axes, keepdims)
    if op == "ReduceProd":
        return _reduce_prod(ctx, x, axes, keepdims)
    if op == "ReduceL1":
        return _sum(ctx, _unary(ctx, O.ABS, x), axes, keepdims)
    if op == "ReduceSumSquare":
        return _sum(ctx, _mul(ctx, x, x), axes, keepdims)
    if op == "ReduceL2":
        s = _sum(ctx, _mul(ctx, x, x), axes, keepdims)
        return binary(ctx, O.POW, s, _scalar(ctx, s, 0.5), shape=s.shape)
    if op == "ReduceLogSum":
        return _unary(ctx, O.LOG, _sum(ctx, x, axes, keepdims))
    return _log_sum_exp(ctx, x, axes, keepdims)


_REDUCTIONS = (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare",
)  # fmt: skip


@onnx_op(*_REDUCTIONS)
def reduction(ctx: NodeContext) -> Value | np.ndarray:
    """ReduceX -> REDUCE_SUM/MEAN/MAX composed with ABS, MUL, POW, LOG, EXP (Min: MAX of the negation;
    Prod: a MUL tree); axes: attribute before opset 13 (ReduceSum) / 18 (the others), input after."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    folded = fold_if_empty(ctx)
    if folded is not None:
        return folded[0]
    axes = ctx.ints_attr_or_input("axes", 1, _AXES_INPUT_SINCE.get(ctx.op_type, 18), None)
    keepdims = bool(ctx.attr("keepdims", 1))
    if not axes:
        axes = [] if ctx.attr("noop_with_empty_axes", 0) else list(range(rank))
    axes = sorted({norm_axis(ctx, int(a), rank) for a in axes})
    if len(axes) == 0:
        x = ctx.emit(O.ASSIGN, [x], shape=x.shape)  # noop: only the elementwise part applies
    return _compose(ctx, x, axes, keepdims)


@onnx_op("ArgMax", "ArgMin")
def arg_max_min(ctx: NodeContext) -> Value:
    """ArgMax/ArgMin -> ARG_MAX/ARG_MIN (INT64); select_last_index: on the axis reversed (SLICE with
    step -1), the index mirrored as dim - 1 - index."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), rank)
    keepdims = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    dim = x.shape[axis]
    if last:
        if dim is None:
            ctx.unsupported("select_last_index on an axis of unknown size")
        x = ctx.emit(O.SLICE, [x, ctx.i32([axis]), ctx.i32([-1]), ctx.i32([_INT32_MIN]), ctx.i32([-1])], shape=x.shape)
    op = O.ARG_MAX if ctx.op_type == "ArgMax" else O.ARG_MIN
    shape = _reduced_shape(x, [axis], keepdims)
    inputs = [x, ctx.i32(axis), ctx.boolean(keepdims), ctx.i32(int(Precision.INT64))]
    y = ctx.emit(op, inputs, dtype="int64", shape=shape or (1,))
    if last:
        y = binary(ctx, O.SUB, ctx.i64(dim - 1), y, shape=y.shape)
    return y if shape else to_rank0(ctx, y)


@onnx_op("TopK")
def top_k(ctx: NodeContext) -> list[Value]:
    """TopK -> TOP_K (k: attribute before opset 10, input after: a constant, or computed from dimensions
    as detectors compute ``min(1000, anchors)``, which TOP_K's converter knows as an expression; ties by
    lower index first; sorted=0 allows any order, TOP_K's sorted order is one of them)."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    largest = bool(ctx.attr("largest", 1))
    sorted_ = bool(ctx.attr("sorted", 1))
    if ctx.opset >= 10 and not ctx.input(1).is_const and shape_elements.of(ctx.input(1)) is not None:
        k = ctx.input(1)
        if k.shape not in ((1,), ()):
            ctx.fail(f"k {k.describe()} must hold one value")
    else:
        k = ctx.ints_attr_or_input("k", 1, 10)[0]
        if k < 1:
            ctx.unsupported(f"k = {k}: TOP_K takes k >= 1")
        k = ctx.i64(k)
    inputs = [x, k, ctx.i32(axis), ctx.boolean(largest), ctx.boolean(sorted_), ctx.i32(int(Precision.INT64))]
    return ctx.emit(O.TOP_K, inputs, dtype=[x.dtype, "int64"], outputs=2)


@onnx_op("CumSum")
def cum_sum(ctx: NodeContext) -> Value:
    """CumSum -> CUM_SUM (axis a constant input; exclusive, reverse)."""
    x = ctx.input(0)
    axis = norm_axis(ctx, int(np.reshape(ctx.const(1), -1)[0]), rank_of(ctx, x))
    exclusive, reverse = bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))
    return ctx.emit(O.CUM_SUM, [x, ctx.i32(axis), ctx.boolean(exclusive), ctx.boolean(reverse)])
