"""Activations -> RELU, SIGMOID, TANH, LEAKY_RELU, PRELU, HARD_SIGMOID, HARD_SWISH, SOFTPLUS, GELU, SWISH,
CLIP, or short exact compositions (Elu, Selu, Celu, Softsign, ThresholdedRelu, Mish, Shrink)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import reshape
from nnadapter_tvm.frontends.onnx.ops.elementwise import is_float, is_int, op, scalar
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O


def _float_input(ctx: NodeContext) -> Value:
    x = ctx.input(0)
    if not is_float(x):
        ctx.unsupported(f"{ctx.op_type} of {x.dtype}: only float element types are supported")
    return x


def _attr_operand(ctx: NodeContext, value: float) -> Value:
    """A FLOAT32 attribute operand of shape [1] (alpha, beta, threshold)."""
    return ctx.f32([value])


@onnx_op("Relu")
def relu(ctx: NodeContext) -> Value:
    """Relu -> RELU (floats); MAX(x, 0) for integers."""
    x = ctx.input(0)
    if is_int(x):
        return op(ctx, O.MAX, x, scalar(ctx, 0, x))
    return op(ctx, O.RELU, x)


_UNARY = {"Sigmoid": O.SIGMOID, "Tanh": O.TANH}


@onnx_op(*_UNARY)
def unary(ctx: NodeContext) -> Value:
    """Sigmoid, Tanh -> SIGMOID, TANH."""
    return op(ctx, _UNARY[ctx.op_type], _float_input(ctx))


@onnx_op("LeakyRelu")
def leaky_relu(ctx: NodeContext) -> Value:
    """LeakyRelu(alpha=0.01) -> LEAKY_RELU."""
    x = _float_input(ctx)
    return ctx.emit(O.LEAKY_RELU, [x, _attr_operand(ctx, ctx.attr("alpha", 0.01))], shape=x.shape)


@onnx_op("PRelu")
def prelu(ctx: NodeContext) -> Value:
    """PRelu -> PRELU where the FLOAT32 slope is one value or one per channel (axis 1);
    otherwise WHERE(x < 0, x * slope, x) (slope broadcast to x)."""
    x, slope = _float_input(ctx), ctx.input(1)
    if x.dtype == np.float32 and slope.is_const and x.rank is not None and x.rank >= 1:
        s = np.asarray(slope.const)
        channels = x.shape[1] if x.rank >= 2 else None
        if s.size == 1:
            return ctx.emit(O.PRELU, [x, ctx.f32(s.reshape([1]))], shape=x.shape)
        # [C] broadcast along axis 1: slope shape (C, 1, ..., 1) of rank x.rank - 1, with extra leading 1s allowed.
        trailing = x.rank - 1
        dims = (1,) * (trailing - s.ndim) + s.shape if s.ndim <= trailing else None
        if dims is not None and channels is not None and dims[0] == channels and all(d == 1 for d in dims[1:]):
            return ctx.emit(O.PRELU, [x, ctx.f32(s.reshape([-1]))], shape=x.shape)
    negative = op(ctx, O.LESS, x, scalar(ctx, 0, x), dtype="bool")
    return op(ctx, O.WHERE, negative, op(ctx, O.MUL, x, slope), x)


def _exp_minus_one(ctx: NodeContext, x: Value) -> Value:
    return op(ctx, O.SUB, op(ctx, O.EXP, x), scalar(ctx, 1, x))


@onnx_op("Elu")
def elu(ctx: NodeContext) -> Value:
    """Elu(alpha=1) -> WHERE(x < 0, alpha * (EXP(x) - 1), x)."""
    x = _float_input(ctx)
    negative = op(ctx, O.LESS, x, scalar(ctx, 0, x), dtype="bool")
    below = op(ctx, O.MUL, _exp_minus_one(ctx, x), scalar(ctx, ctx.attr("alpha", 1.0), x))
    return op(ctx, O.WHERE, negative, below, x)


@onnx_op("Selu")
def selu(ctx: NodeContext) -> Value:
    """Selu(alpha, gamma) -> WHERE(x > 0, gamma * x, gamma * alpha * (EXP(x) - 1))."""
    x = _float_input(ctx)
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    positive = op(ctx, O.GREATER, x, scalar(ctx, 0, x), dtype="bool")
    above = op(ctx, O.MUL, x, scalar(ctx, gamma, x))
    below = op(ctx, O.MUL, op(ctx, O.MUL, _exp_minus_one(ctx, x), scalar(ctx, alpha, x)), scalar(ctx, gamma, x))
    return op(ctx, O.WHERE, positive, above, below)


@onnx_op("Celu")
def celu(ctx: NodeContext) -> Value:
    """Celu(alpha=1) -> MAX(0, x) + MIN(0, alpha * (EXP(x / alpha) - 1))."""
    x = _float_input(ctx)
    alpha = ctx.attr("alpha", 1.0)
    if alpha == 0:
        ctx.fail("alpha must be nonzero (Celu divides by it)")
    zero, a = scalar(ctx, 0, x), scalar(ctx, alpha, x)
    below = op(ctx, O.MUL, _exp_minus_one(ctx, op(ctx, O.DIV, x, a)), a)
    return op(ctx, O.ADD, op(ctx, O.MAX, x, zero), op(ctx, O.MIN, below, zero))


@onnx_op("HardSigmoid")
def hard_sigmoid(ctx: NodeContext) -> Value:
    """HardSigmoid(alpha=0.2, beta=0.5) -> HARD_SIGMOID."""
    x = _float_input(ctx)
    alpha, beta = _attr_operand(ctx, ctx.attr("alpha", 0.2)), _attr_operand(ctx, ctx.attr("beta", 0.5))
    return ctx.emit(O.HARD_SIGMOID, [x, alpha, beta], shape=x.shape)


@onnx_op("HardSwish")
def hard_swish(ctx: NodeContext) -> Value:
    """HardSwish -> HARD_SWISH(alpha=1/6, beta=0.5) for FLOAT32, else x * HARD_SIGMOID(x, 1/6, 0.5)."""
    x = _float_input(ctx)
    alpha, beta = _attr_operand(ctx, 1.0 / 6.0), _attr_operand(ctx, 0.5)
    if x.dtype == np.float32:
        return ctx.emit(O.HARD_SWISH, [x, alpha, beta], shape=x.shape)
    return op(ctx, O.MUL, x, ctx.emit(O.HARD_SIGMOID, [x, alpha, beta], shape=x.shape))


def _softplus(ctx: NodeContext, x: Value) -> Value:
    # beta 1, threshold +inf: the exact log(1 + exp(x)) everywhere (never the linear cut-off).
    return ctx.emit(O.SOFTPLUS, [x, _attr_operand(ctx, 1.0), _attr_operand(ctx, np.inf)], shape=x.shape)


@onnx_op("Softplus")
def softplus(ctx: NodeContext) -> Value:
    """Softplus -> SOFTPLUS(beta=1, threshold=+inf)."""
    return _softplus(ctx, _float_input(ctx))


@onnx_op("Mish")
def mish(ctx: NodeContext) -> Value:
    """Mish -> x * TANH(SOFTPLUS(x))."""
    x = _float_input(ctx)
    return op(ctx, O.MUL, x, op(ctx, O.TANH, _softplus(ctx, x)))


@onnx_op("Softsign")
def softsign(ctx: NodeContext) -> Value:
    """Softsign -> x / (1 + ABS(x))."""
    x = _float_input(ctx)
    return op(ctx, O.DIV, x, op(ctx, O.ADD, op(ctx, O.ABS, x), scalar(ctx, 1, x)))


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx: NodeContext) -> Value:
    """ThresholdedRelu(alpha=1) -> WHERE(x > alpha, x, 0)."""
    x = _float_input(ctx)
    above = op(ctx, O.GREATER, x, scalar(ctx, ctx.attr("alpha", 1.0), x), dtype="bool")
    return op(ctx, O.WHERE, above, x, scalar(ctx, 0, x))


@onnx_op("Gelu")
def gelu(ctx: NodeContext) -> Value:
    """Gelu(approximate none | tanh) -> GELU(approximate false | true)."""
    x = _float_input(ctx)
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        ctx.fail(f"approximate '{approximate}' is not 'none' or 'tanh'")
    return ctx.emit(O.GELU, [x, ctx.constant([approximate == "tanh"], "bool")], shape=x.shape)


@onnx_op("Swish")
def swish(ctx: NodeContext) -> Value:
    """Swish(alpha=1) -> SWISH for FLOAT32 with alpha 1, else x * SIGMOID(alpha * x)."""
    x = _float_input(ctx)
    alpha = ctx.attr("alpha", 1.0)
    if alpha == 1.0 and x.dtype == np.float32:
        return op(ctx, O.SWISH, x)
    scaled = x if alpha == 1.0 else op(ctx, O.MUL, x, scalar(ctx, alpha, x))
    return op(ctx, O.MUL, x, op(ctx, O.SIGMOID, scaled))


@onnx_op("Shrink")
def shrink(ctx: NodeContext) -> Value:
    """Shrink(bias=0, lambd=0.5) -> WHERE(x < -lambd, x + bias, WHERE(x > lambd, x - bias, 0))."""
    x = ctx.input(0)
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    if is_int(x) and (bias != int(bias) or lambd != int(lambd)):
        ctx.unsupported(f"Shrink of {x.dtype} with a fractional bias {bias} or lambd {lambd}")
    b = scalar(ctx, bias, x)
    above = op(
        ctx,
        O.WHERE,
        op(ctx, O.GREATER, x, scalar(ctx, lambd, x), dtype="bool"),
        op(ctx, O.SUB, x, b),
        scalar(ctx, 0, x),
    )
    if x.dtype.kind == "u":
        if lambd < 0:
            ctx.unsupported(f"Shrink of {x.dtype} with a negative lambd {lambd}")
        return above  # x < -lambd <= 0 never holds
    below = op(ctx, O.LESS, x, scalar(ctx, -lambd, x), dtype="bool")
    return op(ctx, O.WHERE, below, op(ctx, O.ADD, x, b), above)


def _clip_bound(ctx: NodeContext, x: Value, i: int, attr: str, default: float) -> Value | None:
    """Clip's bound, one value: attribute ``attr`` before opset 11 (``default`` when absent, Clip-6's
    float limit), input ``i`` from it on (None when absent: no bound; its ``Value`` when computed at run time)."""
    bound = ctx.attr_or_input(attr, i, 11, default if ctx.opset < 11 else None, runtime=True)
    if bound is None or isinstance(bound, Value):
        return bound
    return scalar(ctx, np.reshape(bound, []), x)


def _one_value(ctx: NodeContext, bound: Value) -> Value:
    """A bound as CLIP takes it: shape [1]."""
    if bound.is_const:
        return ctx.constant(np.reshape(bound.const, [1]), bound.dtype)
    return reshape(ctx, bound, [1], out_shape=(1,))


@onnx_op("Clip")
def clip(ctx: NodeContext) -> Value:
    """Clip -> CLIP (floats; an absent bound is the type's lowest / largest finite value, ONNX's
    numeric_limits default, so an infinity becomes finite as in onnxruntime); integers -> MAX / MIN with
    the given bounds. As CLIP and ONNX say, every element becomes max where min > max."""
    x = ctx.input(0)
    low = _clip_bound(ctx, x, 1, "min", -3.4028234663852886e38)
    high = _clip_bound(ctx, x, 2, "max", 3.4028234663852886e38)
    if is_float(x):
        limits = np.finfo(x.dtype)
        low = low if low is not None else scalar(ctx, limits.min, x)
        high = high if high is not None else scalar(ctx, limits.max, x)
        return ctx.emit(O.CLIP, [x, _one_value(ctx, low), _one_value(ctx, high)], shape=x.shape)
    result = x
    if low is not None:
        result = op(ctx, O.MAX, result, low)
    if high is not None:
        result = op(ctx, O.MIN, result, high)
    if result is x:
        return ctx.emit(O.ASSIGN, [x], shape=x.shape)
    return result
