"""Comparisons, logic and selection: Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not Where IsNaN
IsInf -> EQUAL, LESS, GREATER, LESS_EQUAL, GREATER_EQUAL, AND, OR, XOR, NOT, WHERE (IsNaN: NOT_EQUAL(x, x))."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.elementwise import is_float, op, scalar
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O

_COMPARE = {
    "Equal": O.EQUAL,
    "Less": O.LESS,
    "Greater": O.GREATER,
    "LessOrEqual": O.LESS_EQUAL,
    "GreaterOrEqual": O.GREATER_EQUAL,
}
_LOGICAL = {"And": O.AND, "Or": O.OR, "Xor": O.XOR}


@onnx_op(*_COMPARE)
def compare(ctx: NodeContext) -> Value:
    """Equal, Less, Greater, LessOrEqual, GreaterOrEqual -> EQUAL, LESS, GREATER, LESS_EQUAL, GREATER_EQUAL."""
    return op(ctx, _COMPARE[ctx.op_type], ctx.input(0), ctx.input(1), dtype="bool")


@onnx_op(*_LOGICAL)
def logical(ctx: NodeContext) -> Value:
    """And, Or, Xor -> AND, OR, XOR."""
    return op(ctx, _LOGICAL[ctx.op_type], ctx.input(0), ctx.input(1))


@onnx_op("Not")
def logical_not(ctx: NodeContext) -> Value:
    """Not -> NOT."""
    return op(ctx, O.NOT, ctx.input(0))


@onnx_op("Where")
def where(ctx: NodeContext) -> Value:
    """Where -> WHERE."""
    return op(ctx, O.WHERE, ctx.input(0), ctx.input(1), ctx.input(2))


def _float_input(ctx: NodeContext) -> Value:
    x = ctx.input(0)
    if not is_float(x):
        ctx.unsupported(f"{ctx.op_type} of {x.dtype}: only float element types are supported")
    return x


@onnx_op("IsNaN")
def isnan(ctx: NodeContext) -> Value:
    """IsNaN -> NOT(GREATER_EQUAL(x, -inf)): NaN is the one value not >= -inf. (NOT_EQUAL(x, x) says the
    same, but TVM's simplifier folds ``x != x`` to false once both sides are the same load.)"""
    x = _float_input(ctx)
    at_least = op(ctx, O.GREATER_EQUAL, x, ctx.constant(np.array(-np.inf, x.dtype)), dtype="bool")
    return op(ctx, O.NOT, at_least, dtype="bool")


@onnx_op("IsInf")
def isinf(ctx: NodeContext) -> Value:
    """IsInf(detect_negative=1, detect_positive=1) -> EQUAL(x, -inf) OR EQUAL(x, +inf)."""
    x = _float_input(ctx)
    signs = [s for s, attr in ((-1, "detect_negative"), (1, "detect_positive")) if ctx.attr(attr, 1)]
    if not signs:
        if not x.is_static:
            ctx.unsupported("IsInf detecting neither sign, of a tensor of unknown shape")
        return np.zeros(x.shape, bool)
    found = [op(ctx, O.EQUAL, x, scalar(ctx, s * np.inf, x), dtype="bool") for s in signs]
    return found[0] if len(found) == 1 else op(ctx, O.OR, *found)
