"""Outputs whose size depends on the data: NonZero Compress Unique NonMaxSuppression -> the extensions
NONZERO, COMPRESS, UNIQUE, ALL_CLASS_NON_MAX_SUPPRESSION (op_converters/selection.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.selection import ALL_CLASS_NON_MAX_SUPPRESSION, COMPRESS, NONZERO, UNIQUE


@onnx_op("NonZero")
def nonzero(ctx: NodeContext) -> Value:
    """NonZero -> NONZERO."""
    return ctx.emit(NONZERO, [ctx.input(0)], dtype="int64")


@onnx_op("Compress")
def compress(ctx: NodeContext) -> Value:
    """Compress -> COMPRESS (no axis: the flattened input)."""
    axis = ctx.attr("axis", None)
    condition = cast(ctx, ctx.input(1), "bool")
    return ctx.emit(COMPRESS, [ctx.input(0), condition, None if axis is None else ctx.i64(int(axis))])


@onnx_op("Unique")
def unique(ctx: NodeContext) -> list[Value]:
    """Unique -> UNIQUE (all four outputs; the node uses those it names)."""
    x = ctx.input(0)
    axis = ctx.attr("axis", None)
    inputs = [x, ctx.boolean(bool(ctx.attr("sorted", 1))), None if axis is None else ctx.i64(int(axis))]
    return ctx.emit(UNIQUE, inputs, dtype=[x.dtype, "int64", "int64", "int64"], outputs=4)


@onnx_op("NonMaxSuppression")
def non_max_suppression(ctx: NodeContext) -> Value:
    """NonMaxSuppression -> ALL_CLASS_NON_MAX_SUPPRESSION; max_output_boxes_per_class and the thresholds
    may be computed at run time (an empty or absent one takes ONNX's default)."""
    boxes, scores = ctx.input(0), ctx.input(1)
    if boxes.dtype != np.float32 or scores.dtype != np.float32:
        ctx.unsupported(f"{boxes.describe()} and {scores.describe()}: the boxes and scores must be FLOAT32")

    def scalar(i: int, dtype: str) -> Value:
        value = ctx.optional(i)
        if value is None or (value.is_const and np.size(value.const) == 0):
            return ctx.constant(np.zeros([0], dtype))  # the operation's absent operand
        if value.dtype != np.dtype(dtype):
            ctx.unsupported(f"input {i} {value.describe()}: ONNX says {dtype}")
        return value

    inputs = [
        boxes,
        scores,
        scalar(2, "int64"),
        scalar(3, "float32"),
        scalar(4, "float32"),
        ctx.i32(int(ctx.attr("center_point_box", 0))),
    ]
    return ctx.emit(ALL_CLASS_NON_MAX_SUPPRESSION, inputs, dtype="int64")
