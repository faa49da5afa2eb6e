"""Normalizations: BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization, LRN
-> the NNAdapter operations of the same name; RMSNormalization, LpNormalization and
MeanVarianceNormalization (and the statistics outputs) -> REDUCE_MEAN / REDUCE_SUM compositions."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import binary, cast, cast_back, in_float32, norm_axis, rank_of
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O


def _kept(shape, axes) -> tuple | None:
    return None if shape is None else tuple(1 if i in axes else d for i, d in enumerate(shape))


def _mean(ctx: NodeContext, x: Value, axes: list[int], keep: bool = True) -> Value:
    shape = _kept(x.shape, axes) if keep else tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return ctx.emit(O.REDUCE_MEAN, [x, ctx.i32(axes), ctx.boolean(keep)], shape=shape)


def _scalar(ctx: NodeContext, value: float, like: Value) -> Value:
    return ctx.constant(np.asarray(value, like.dtype))


def _f32_params(ctx: NodeContext, x: Value, *indices: int) -> list[Value | None]:
    """Parameters of float32 normalizations: other float types are unsupported (the ops take FLOAT32)."""
    if x.dtype != np.float32:
        ctx.unsupported(f"{ctx.op_type} of {x.dtype}: the NNAdapter operation takes float32")
    return [ctx.optional(i) for i in indices]


@onnx_op("BatchNormalization")
def batch_normalization(ctx: NodeContext) -> Value | list[Value]:
    """BatchNormalization -> BATCH_NORMALIZATION; training_mode: batch statistics by REDUCE_MEAN and the
    running statistics as input * momentum + batch * (1 - momentum)."""
    x = ctx.input(0)
    scale, bias, mean, var = _f32_params(ctx, x, 1, 2, 3, 4)
    epsilon = ctx.f32(float(ctx.attr("epsilon", 1e-5)))
    training = bool(ctx.attr("training_mode", 0)) if ctx.opset >= 14 else len(ctx.node.output) > 1
    if not training:
        return ctx.emit(O.BATCH_NORMALIZATION, [x, scale, bias, mean, var, epsilon])
    rank = rank_of(ctx, x)
    axes = [0, *range(2, rank)]
    batch_mean = _mean(ctx, x, axes, keep=False)
    centred = binary(ctx, O.SUB, x, _mean(ctx, x, axes), shape=x.shape)
    batch_var = _mean(ctx, binary(ctx, O.MUL, centred, centred, shape=x.shape), axes, keep=False)
    y = ctx.emit(O.BATCH_NORMALIZATION, [x, scale, bias, batch_mean, batch_var, epsilon])
    momentum = float(ctx.attr("momentum", 0.9))

    def running(current: Value, batch: Value) -> Value:
        kept = binary(ctx, O.MUL, current, _scalar(ctx, momentum, x), shape=current.shape)
        new = binary(ctx, O.MUL, batch, _scalar(ctx, 1 - momentum, x), shape=current.shape)
        return binary(ctx, O.ADD, kept, new, shape=current.shape)

    return [y, running(mean, batch_mean), running(var, batch_var)]


@onnx_op("InstanceNormalization")
def instance_normalization(ctx: NodeContext) -> Value:
    """InstanceNormalization -> INSTANCE_NORMALIZATION."""
    x = ctx.input(0)
    scale, bias = _f32_params(ctx, x, 1, 2)
    return ctx.emit(O.INSTANCE_NORMALIZATION, [x, scale, bias, ctx.f32(float(ctx.attr("epsilon", 1e-5)))])


def _stash(ctx: NodeContext, x: Value) -> tuple[Value, np.dtype | None]:
    """``x`` in float32 (stash_type 1, the computation type) and the type to cast the results back to."""
    stash_type = int(ctx.attr("stash_type", 1))
    refusal = f"{ctx.op_type} of {x.dtype} with stash_type {ctx.attr('stash_type', 1)}"
    return in_float32(ctx, x, ("float16",) if stash_type == 1 else (), refusal)


@onnx_op("LayerNormalization")
def layer_normalization(ctx: NodeContext) -> Value | list[Value]:
    """LayerNormalization -> LAYER_NORMALIZATION (scale/bias of the normalized shape); otherwise, or with
    the Mean / InvStdDev outputs, (x - mean) * RSQRT(variance + epsilon) * scale + bias."""
    x, back = _stash(ctx, ctx.input(0))
    scale, bias = ctx.input(1), ctx.optional(2)
    rank = rank_of(ctx, x)
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    axes = list(range(axis, rank))
    epsilon = float(ctx.attr("epsilon", 1e-5))
    normalized = x.shape[axis:]
    extras = [k for k in (1, 2) if len(ctx.node.output) > k and ctx.node.output[k]]
    params = [scale] + ([bias] if bias is not None else [])
    direct = all(p.dtype == np.float32 and p.shape == normalized for p in params)
    if direct and not extras and back is None:
        empty = ctx.f32(np.zeros([0], "float32"))
        return ctx.emit(
            O.LAYER_NORMALIZATION, [x, scale, empty if bias is None else bias, ctx.i32(axis), ctx.f32(epsilon)]
        )
    mean = _mean(ctx, x, axes)
    centred = binary(ctx, O.SUB, x, mean, shape=x.shape)
    var = _mean(ctx, binary(ctx, O.MUL, centred, centred, shape=x.shape), axes)
    inv = ctx.emit(O.RSQRT, [binary(ctx, O.ADD, var, ctx.f32(epsilon), shape=var.shape)], shape=var.shape)
    y = binary(ctx, O.MUL, centred, inv, shape=x.shape)
    y = cast_back(ctx, y, back)
    y = binary(ctx, O.MUL, y, scale, shape=x.shape)
    if bias is not None:
        y = binary(ctx, O.ADD, y, bias, shape=x.shape)
    return [y, cast_back(ctx, mean, back), cast_back(ctx, inv, back)][: 1 + max(extras, default=0)]


@onnx_op("GroupNormalization")
def group_normalization(ctx: NodeContext) -> Value:
    """GroupNormalization -> GROUP_NORMALIZATION (opset 18's per-group scale/bias repeated per channel)."""
    x, back = _stash(ctx, ctx.input(0))
    scale, bias = ctx.input(1), ctx.input(2)
    groups = int(ctx.attr("num_groups"))
    channels = x.shape[1] if x.rank and x.rank >= 2 else None
    if channels is None:
        ctx.unsupported(f"GroupNormalization needs a static channel dim, got {x.describe()}")
    params = []
    for p in (scale, bias):
        if p.shape == (groups,) and groups != channels:  # opset 18: one value per group
            if not p.is_const:
                ctx.unsupported("a per-group scale/bias (opset 18) must be constant")
            p = ctx.constant(np.repeat(p.const, channels // groups))
        p = cast(ctx, p, "float32")
        params.append(p)
    epsilon = ctx.f32(float(ctx.attr("epsilon", 1e-5)))
    y = ctx.emit(O.GROUP_NORMALIZATION, [x, *params, epsilon, ctx.i32(groups)], shape=x.shape)
    return cast_back(ctx, y, back)


@onnx_op("RMSNormalization")
def rms_normalization(ctx: NodeContext) -> Value:
    """RMSNormalization -> x * RSQRT(REDUCE_MEAN(x * x) + epsilon) * scale."""
    x, back = _stash(ctx, ctx.input(0))
    scale = ctx.input(1)
    rank = rank_of(ctx, x)
    axes = list(range(norm_axis(ctx, int(ctx.attr("axis", -1)), rank), rank))
    mean_square = _mean(ctx, binary(ctx, O.MUL, x, x, shape=x.shape), axes)
    eps = ctx.f32(float(ctx.attr("epsilon", 1e-5)))
    inv = ctx.emit(O.RSQRT, [binary(ctx, O.ADD, mean_square, eps, shape=mean_square.shape)], shape=mean_square.shape)
    y = cast_back(ctx, binary(ctx, O.MUL, x, inv, shape=x.shape), back)
    return binary(ctx, O.MUL, y, scale)


@onnx_op("LRN")
def lrn(ctx: NodeContext) -> Value:
    """LRN -> LRN with alpha / size (NNAdapter's alpha multiplies the square sum undivided)."""
    x = ctx.input(0)
    _f32_params(ctx, x)
    size = int(ctx.attr("size"))
    alpha = float(ctx.attr("alpha", 1e-4)) / size
    args = [
        ctx.i32(size),
        ctx.f32(float(ctx.attr("bias", 1.0))),
        ctx.f32(alpha),
        ctx.f32(float(ctx.attr("beta", 0.75))),
    ]
    return ctx.emit(O.LRN, [x, *args])


@onnx_op("LpNormalization")
def lp_normalization(ctx: NodeContext) -> Value:
    """LpNormalization -> x / norm, norm = REDUCE_SUM(|x|) (p = 1) or POW(REDUCE_SUM(x * x), 0.5) (p = 2);
    0 where the norm is 0 (ONNX's reference)."""
    x = ctx.input(0)
    if x.dtype.kind != "f":
        ctx.unsupported(f"LpNormalization of {x.dtype}")
    rank = rank_of(ctx, x)
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    p = int(ctx.attr("p", 2))
    kept = _kept(x.shape, [axis])
    if p == 1:
        terms = ctx.emit(O.ABS, [x], shape=x.shape)
    elif p == 2:
        terms = binary(ctx, O.MUL, x, x, shape=x.shape)
    else:
        ctx.fail(f"p {p} must be 1 or 2")
    norm = ctx.emit(O.REDUCE_SUM, [terms, ctx.i32([axis]), ctx.boolean(True)], shape=kept)
    if p == 2:
        norm = binary(ctx, O.POW, norm, _scalar(ctx, 0.5, x), shape=kept)
    zero = ctx.emit(O.EQUAL, [norm, _scalar(ctx, 0, x)], dtype="bool", shape=kept)
    ratio = binary(ctx, O.DIV, x, norm, shape=x.shape)
    return ctx.emit(O.WHERE, [zero, _scalar(ctx, 0, x), ratio], dtype=x.dtype, shape=ctx.out_shape())


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(ctx: NodeContext) -> Value:
    """MeanVarianceNormalization -> (x - E[x]) / (POW(E[x^2] - E[x]^2, 0.5) + 1e-9), as ONNX's function body."""
    x = ctx.input(0)
    if x.dtype.kind != "f":
        ctx.unsupported(f"MeanVarianceNormalization of {x.dtype}")
    rank = rank_of(ctx, x)
    axes = sorted({norm_axis(ctx, int(a), rank) for a in ctx.attr("axes", [0, 2, 3])})
    mean = _mean(ctx, x, axes)
    mean_of_square = _mean(ctx, binary(ctx, O.POW, x, _scalar(ctx, 2, x), shape=x.shape), axes)
    square_of_mean = binary(ctx, O.POW, mean, _scalar(ctx, 2, x), shape=mean.shape)
    var = binary(ctx, O.SUB, mean_of_square, square_of_mean, shape=mean.shape)
    std = binary(ctx, O.POW, var, _scalar(ctx, 0.5, x), shape=mean.shape)
    centred = binary(ctx, O.SUB, x, mean, shape=x.shape)
    return binary(ctx, O.DIV, centred, binary(ctx, O.ADD, std, _scalar(ctx, 1e-9, x), shape=mean.shape))
