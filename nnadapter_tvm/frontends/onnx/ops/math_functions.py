"""Math functions beyond the standard operations: Acos Acosh Asin Asinh Atan Atanh Sinh Erf CumProd -> the
extensions ACOS, ACOSH, ASIN, ASINH, ATAN, ATANH, SINH, ERF, CUM_PROD (op_converters/math_functions.py).
Float Mod (MOD) is reached from elementwise.py's Mod converter."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import norm_axis, rank_of
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.math_functions import CUM_PROD, MATH_FUNCTIONS

_FUNCTIONS = {name.capitalize(): name for name in MATH_FUNCTIONS}


@onnx_op(*_FUNCTIONS)
def math_function(ctx: NodeContext) -> Value:
    """Acos, Acosh, Asin, Asinh, Atan, Atanh, Sinh, Erf -> ACOS, ACOSH, ASIN, ASINH, ATAN, ATANH, SINH, ERF."""
    x = ctx.input(0)
    if x.dtype is None or x.dtype.kind != "f":
        ctx.unsupported(f"{ctx.op_type} of {x.dtype}: computed for float16, float32 and float64")
    return ctx.emit(MATH_FUNCTIONS[_FUNCTIONS[ctx.op_type]], [x], shape=x.shape)


@onnx_op("CumProd")
def cum_prod(ctx: NodeContext) -> Value:
    """CumProd -> CUM_PROD (axis a constant input; exclusive, reverse)."""
    x = ctx.input(0)
    axis = norm_axis(ctx, int(np.reshape(ctx.const(1), -1)[0]), rank_of(ctx, x))
    exclusive, reverse = bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))
    return ctx.emit(CUM_PROD, [x, ctx.i32(axis), ctx.boolean(exclusive), ctx.boolean(reverse)], shape=x.shape)
