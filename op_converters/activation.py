"""Activations: one input, same shape out."""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs
from nnadapter_tvm.op_converters.helpers import clamp
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O

_UNARY = {
    O.RELU: lambda x: clamp(x, 0),
    O.RELU6: lambda x: clamp(x, 0, 6),
    O.SIGMOID: relax.op.sigmoid,
    O.TANH: lambda x: _tanh(x),
}


def _tanh(x: relax.Expr) -> relax.Expr:
    """tanh(x), accurate near 0: TVM lowers tanh as (exp(2x) - 1) / (exp(2x) + 1), whose subtraction
    cancels for small |x| (relative error 1.4e-3 at 1e-5, 1.3% at 1e-6, and 0 for |x| < 3e-8, a denormal
    tanh(1e-40) then log giving -inf: a fuzz finding).  Below 2^-4 the odd series x - x^3/3 + 2x^5/15 -
    17x^7/315 is exact to float32 rounding (the next term is below 1e-11 of x); NaN passes both ways."""
    x2 = relax.op.multiply(x, x)
    series = _const(-17.0 / 315.0, x)
    for c in (2.0 / 15.0, -1.0 / 3.0, 1.0):
        series = relax.op.add(relax.op.multiply(series, x2), _const(c, x))
    series = relax.op.multiply(series, x)
    small = relax.op.less(relax.op.abs(x), _const(0.0625, x))
    return relax.op.where(small, series, relax.op.tanh(x))


def _const(value: float, like: relax.Expr) -> relax.Expr:
    """A scalar of ``like``'s float type: FLOAT16/FLOAT64 inputs (widened, op_schema.py) need their own."""
    return relax.const(value, str(like.ty.dtype))


def _one_value(args: OpArgs, i: Key) -> relax.Expr:
    """Tensor operand ``i`` of shape [1] (constant or not) as a scalar expression."""
    t = args.tensor(i)
    shape = args.shape(t)
    if not all(isinstance(d, int) for d in shape):
        args.fail(f"must have a static shape holding one value, got {shape}", i)
    count = 1
    for d in shape:
        count *= d
    if count != 1:
        args.fail(f"must hold one value (shape [1]), got shape {shape}", i)
    return relax.op.reshape(t, [])


@converter(*_UNARY)
def unary(args: OpArgs) -> relax.Expr:
    """input -> output = f(input): RELU max(0, x); RELU6 min(6, max(0, x)); SIGMOID 1 / (1 + exp(-x));
    TANH tanh(x). NaN stays NaN (numpy's max/min; TVM's relu and clip would give 0 or the bound).

    Reference: the spec.
    """
    return _UNARY[args.type](args.tensor("input"))


@converter(O.SOFTMAX)
def softmax(args: OpArgs) -> relax.Expr:
    """input, axis (default 1) -> exp(x) / sum(exp(x), axis).

    Reference: the spec.
    """
    x = args.tensor("input")
    axis = args.axis("axis", len(args.shape(x)), 1)
    if str(x.ty.dtype) == "float16":
        return _softmax_float16(x, axis)
    return relax.op.nn.softmax(x, axis)


def _softmax_float16(x: relax.Expr, axis: int) -> relax.Expr:
    """A float16 softmax whose sum of exponentials accumulates in float32 and is rounded to float16 once,
    as numpy's float16 sum (the references) and float16 inference engines do; each exp and the division
    are rounded to float16 like theirs.  Summing in float16 drifts ulps from the reference."""
    e = relax.op.exp(relax.op.subtract(x, relax.op.max(x, axis, keepdims=True)))
    total = relax.op.sum(relax.op.astype(e, "float32"), axis, keepdims=True)
    return relax.op.divide(e, relax.op.astype(total, "float16"))


@converter(O.LOG_SOFTMAX)
def log_softmax(args: OpArgs) -> relax.Expr:
    """input, axis (default 1) -> log(exp(x) / sum(exp(x), axis)), computed stably as
    x - max - log(sum(exp(x - max))).

    Reference: the spec.
    """
    x = args.tensor("input")
    return relax.op.nn.log_softmax(x, args.axis("axis", len(args.shape(x)), 1))


@converter(O.CLIP)
def clip(args: OpArgs) -> relax.Expr:
    """input, min [1], max [1] (same type as input) -> min(max(input, min), max).

    `min` and `max` may be constants or model tensors; when min > max every element becomes
    `max`, exactly as the formula says. A NaN input stays NaN (Paddle's clip compares, so NaN
    passes through; TVM's max/min would turn it into a bound).
    Reference: the spec; Paddle's clip for NaN.
    """
    x = args.tensor("input")
    low, high = _one_value(args, "min"), _one_value(args, "max")
    if all(args.operand(i).is_constant and not np.isnan(args.value(i)).any() for i in ("min", "max")):
        # Bounds first: a NaN x fails both comparisons and passes through (helpers.clamp), with no
        # boolean mask that would keep the fused kernel (hard-swish's) off the vector schedules.
        return relax.op.minimum(high, relax.op.maximum(low, x))
    clipped = relax.op.minimum(relax.op.maximum(x, low), high)
    return relax.op.where(relax.op.isnan(x), x, clipped)


@converter(O.GELU)
def gelu(args: OpArgs) -> relax.Expr:
    """input, approximate (bool) -> 0.5 * x * (1 + erf(x / sqrt(2))), or with `approximate`
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).

    Reference: the spec (the paper it cites); Paddle's gelu(approximate) for the two forms.
    """
    x = args.tensor("input")
    return relax.op.nn.gelu_tanh(x) if args.bool("approximate") else relax.op.nn.gelu(x)


def _hard_sigmoid(args: OpArgs, x: relax.Expr) -> relax.Expr:
    alpha, beta = args.float("alpha"), args.float("beta")
    return clamp(relax.op.add(relax.op.multiply(x, _const(alpha, x)), _const(beta, x)), 0, 1)


@converter(O.HARD_SIGMOID)
def hard_sigmoid(args: OpArgs) -> relax.Expr:
    """input, alpha, beta -> max(0, min(1, alpha * x + beta)).

    Paddle's hard_sigmoid slope and offset map to alpha and beta.
    Reference: the spec.
    """
    return _hard_sigmoid(args, args.tensor("input"))


@converter(O.HARD_SWISH)
def hard_swish(args: OpArgs) -> relax.Expr:
    """input, alpha, beta -> x * max(0, min(1, alpha * x + beta)).

    Paddle's hard_swish(offset, threshold, scale) is alpha = 1 / threshold, beta = offset / threshold,
    times threshold / scale, which Paddle Lite emits as a separate MUL.
    Reference: the spec.
    """
    x = args.tensor("input")
    return relax.op.multiply(x, _hard_sigmoid(args, x))


@converter(O.LEAKY_RELU)
def leaky_relu(args: OpArgs) -> relax.Expr:
    """input, alpha -> x if x >= 0 else alpha * x.

    Reference: the spec.
    """
    x = args.tensor("input")
    alpha = _const(args.float("alpha"), x)
    return relax.op.where(relax.op.greater_equal(x, _const(0.0, x)), x, relax.op.multiply(x, alpha))


@converter(O.PRELU)
def prelu(args: OpArgs) -> relax.Expr:
    """input [N, C, ...], alpha (slope) [1] or [C] -> x if x >= 0 else slope * x, the slope
    broadcast along the channel axis 1.

    `alpha` may be a constant or a model tensor; Paddle's 'element' mode has no NNAdapter form.
    Reference: the spec; Paddle's prelu in its 'all' ([1]) and 'channel' ([C]) modes.
    """
    x = args.tensor("input")
    shape = args.shape(x)
    slope = args.tensor("alpha")
    slope_shape = args.shape(slope)
    if str(slope.ty.dtype) != str(x.ty.dtype):
        slope = relax.op.astype(slope, str(x.ty.dtype))  # the FLOAT32 slope of a FLOAT16/FLOAT64 input
    channels = shape[1] if len(shape) >= 2 else None
    if slope_shape == [1]:
        slope = relax.op.reshape(slope, [])
    elif len(slope_shape) == 1 and channels is not None and slope_shape[0] == channels:
        slope = relax.op.reshape(slope, [1, channels] + [1] * (len(shape) - 2))
    else:
        expected = "[1]" if channels is None else f"[1] or [C] = [{channels}]"
        args.fail(f"shape {slope_shape} must be {expected} for an input of shape {shape}", "alpha")
    return relax.op.where(relax.op.greater_equal(x, _const(0.0, x)), x, relax.op.multiply(x, slope))


def _softplus_te(x: te.Tensor, beta: float, threshold: float) -> te.Tensor:
    """log(1 + exp(beta * x)) / beta, or x where beta * x > threshold.

    Evaluated as (max(z, 0) + log1p(exp(-|z|))) / beta with z = beta * x, so nothing overflows.
    TIR has no log1p: log1p(e) = log(u) * e / (u - 1) with u = 1 + e rounded (Goldberg), exact to
    a few ulp even where e is tiny. u is its own stage, so that the arithmetic simplifier cannot
    fold (1 + e) - 1 back into e.
    """
    dtype = x.dtype  # FLOAT16/FLOAT64 inputs (widened) compute in their own type
    one, zero = tirx.const(1.0, dtype), tirx.const(0.0, dtype)
    b = tirx.const(beta, dtype)
    small = te.compute(x.shape, lambda *i: tirx.exp(-tirx.abs(x(*i) * b)), name="softplus_exp")
    rounded = te.compute(x.shape, lambda *i: one + small(*i), name="softplus_u")

    def compute(*index):
        value, e, u = x(*index), small(*index), rounded(*index)
        z = value * b
        log1p = tirx.Select(u == one, e, tirx.log(u) * e / (u - one))
        soft = (tirx.max(z, zero) + log1p) / b
        return tirx.Select(z > tirx.const(threshold, dtype), value, soft)

    return te.compute(x.shape, compute, name="softplus")


@converter(O.SOFTPLUS)
def softplus(args: OpArgs) -> relax.Expr:
    """input, alpha (the formula's beta) -> log(1 + exp(beta * x)) / beta; x where
    beta * x > threshold (20, Paddle's default).

    The spec names the one operand `alpha` but the formula uses it as `beta`; the header adds a
    `threshold` operand, which is read when present. beta = 0 is rejected.
    Reference: the spec with Paddle's softplus(beta, threshold=20).
    """
    beta = args.float("alpha")
    if beta == 0.0:
        args.fail("(the formula's beta) must be nonzero: the formula divides by it", "alpha")
    threshold = args.float("threshold", 20.0)
    return args.emit_te(_softplus_te, args.tensor("input"), beta, threshold, primfunc_name_hint="softplus")


@converter(O.SWISH)
def swish(args: OpArgs) -> relax.Expr:
    """input -> x / (1 + exp(-x)) = x * sigmoid(x).

    Reference: the spec.
    """
    x = args.tensor("input")
    return relax.op.multiply(x, relax.op.sigmoid(x))
