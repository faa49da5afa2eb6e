"""Quantization: QuantizeLinear -> QUANTIZE (constant parameters of a quantized NNAdapter type) or
DIV + round half to even + ADD + CLIP + CAST; DequantizeLinear -> DEQUANTIZE or CAST + SUB + MUL;
QLinearMatMul / MatMulInteger -> MAT_MUL over zero-point-shifted float32 integers."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.graph import NodeContext, Quant, Value
from nnadapter_tvm.frontends.onnx.ops.common import binary, cast, norm_axis, rank_of, reshape
from nnadapter_tvm.frontends.onnx.ops.conv import conv_nd, conv_operands
from nnadapter_tvm.frontends.onnx.ops.matmul import matmul
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision

# Integer types a float32 holds exactly (every value, and every zero point).
_INT_TYPES = ("int8", "uint8", "int16", "uint16")


def _scalar(ctx: NodeContext, value: float, dtype: str = "float32") -> Value:
    return ctx.constant(np.asarray(value, dtype))


def _round_half_even(ctx: NodeContext, x: Value) -> Value:
    """f = FLOOR(x), d = x - f; f + 1 where d > 0.5, f + parity(f) where d == 0.5 (exact, as numpy's
    rint; parity f - 2 * FLOOR(f / 2) is 0 or 1). WHEREs, not AND/OR: LLVM rejects TVM's fused
    boolean OR here."""
    s = x.shape
    f = ctx.emit(O.FLOOR, [x], shape=s)
    d = binary(ctx, O.SUB, x, f, shape=s)
    half, zero, one = (_scalar(ctx, v, x.dtype) for v in (0.5, 0, 1))
    halves = ctx.emit(O.FLOOR, [binary(ctx, O.MUL, f, half, shape=s)], shape=s)
    parity = binary(ctx, O.SUB, f, binary(ctx, O.ADD, halves, halves, shape=s), shape=s)
    tie = ctx.emit(O.EQUAL, [d, half], dtype="bool", shape=s)
    above = ctx.emit(O.GREATER, [d, half], dtype="bool", shape=s)
    inc = ctx.emit(O.WHERE, [tie, parity, zero], dtype=x.dtype, shape=s)
    inc = ctx.emit(O.WHERE, [above, one, inc], dtype=x.dtype, shape=s)
    return binary(ctx, O.ADD, f, inc, shape=s)


def _saturate(ctx: NodeContext, r: Value, dtype: np.dtype) -> Value:
    """CLIP to ``dtype``'s range, then CAST (exact: ``r`` holds integers)."""
    info = np.iinfo(dtype)
    lo, hi = ctx.constant(np.asarray([info.min], r.dtype)), ctx.constant(np.asarray([info.max], r.dtype))
    return cast(ctx, ctx.emit(O.CLIP, [r, lo, hi], shape=r.shape), dtype)


class _Layout:
    """How a scale / zero point broadcasts against ``x``: per tensor, per axis, or per block of ``axis``."""

    def __init__(self, ctx: NodeContext, x: Value, scale: Value):
        self.ctx, self.x = ctx, x
        rank = rank_of(ctx, x)
        self.block = int(ctx.attr("block_size", 0))
        self.per_tensor = scale.rank == 0 or (scale.rank == 1 and scale.shape[0] == 1 and self.block == 0)
        # The axis matters for per-axis and blocked parameters only (a rank-1 x keeps the default 1).
        self.axis = 0 if self.per_tensor else norm_axis(ctx, int(ctx.attr("axis", 1)), rank)
        if self.block:
            if not x.is_static or scale.rank != rank:
                self.ctx.unsupported(f"blocked quantization needs static shapes, got {x.describe()}")
            size = x.shape[self.axis]
            if size % self.block or scale.shape[self.axis] != size // self.block:
                self.ctx.unsupported(f"blocks of {self.block} along axis {self.axis} of {x.describe()}")

    def data(self, v: Value) -> Value:
        """``v`` (shaped like x) split into blocks along the axis (blocked layout only)."""
        if not self.block:
            return v
        s = list(v.shape)
        shape = [*s[: self.axis], s[self.axis] // self.block, self.block, *s[self.axis + 1 :]]
        return reshape(self.ctx, v, shape, tuple(shape))

    def param(self, p: Value) -> Value:
        """A scale or zero point broadcastable against ``data(x)``."""
        if self.per_tensor:
            return p
        if self.block:
            s = list(p.shape)
            shape = [*s[: self.axis + 1], 1, *s[self.axis + 1 :]]
        else:
            if p.rank != 1:
                self.ctx.fail(f"a per-axis parameter {p.describe()} must be 1-D")
            shape = [p.shape[0]] + [1] * (self.x.rank - self.axis - 1)
        if p.is_const:
            return self.ctx.constant(p.const.reshape(shape))
        return reshape(self.ctx, p, shape, tuple(shape))

    def restore(self, v: Value) -> Value:
        return reshape(self.ctx, v, list(self.x.shape), self.x.shape) if self.block else v


def _out_type(ctx: NodeContext) -> np.dtype:
    zp = ctx.optional(2)
    if zp is not None:
        dtype = zp.dtype
    elif ctx.attr("output_dtype", 0):
        dtype = ctx.out_dtype()
    else:
        dtype = np.dtype("uint8")
    if dtype is None or dtype.name not in _INT_TYPES:
        ctx.unsupported(f"quantization to {dtype}: NNAdapter quantizes to 8- and 16-bit integers")
    return np.dtype(dtype)


def _native_quant(ctx: NodeContext, layout: _Layout, scale: Value, zp: Value | None, dtype) -> Quant | None:
    """The NNAdapter quantized type of QuantizeLinear's output, when its constant parameters have one."""
    if not scale.is_const or (zp is not None and not zp.is_const) or layout.block or scale.dtype != np.float32:
        return None
    zero = np.zeros([1], "int64") if zp is None else zp.const.astype("int64").reshape(-1)
    scales = scale.const.astype("float32").reshape(-1)
    if np.any(scales <= 0):
        return None
    if dtype == np.uint8 and layout.per_tensor:
        return Quant(Precision.QUANT_UINT8_ASYMM_PER_LAYER, float(scales[0]), int(zero[0]))
    if dtype == np.int8 and not np.any(zero):
        if layout.per_tensor:
            return Quant(Precision.QUANT_INT8_SYMM_PER_LAYER, float(scales[0]), 0)
        return Quant(Precision.QUANT_INT8_SYMM_PER_CHANNEL, tuple(float(s) for s in scales), 0, layout.axis)
    return None


@onnx_op("QuantizeLinear")
def quantize_linear(ctx: NodeContext) -> Value:
    """QuantizeLinear -> QUANTIZE to a quantized type (uint8 per tensor, int8 symmetric per tensor or
    axis, constant parameters); otherwise saturate(round_half_even(x / scale) + zero_point) composed."""
    x, scale, zp = ctx.input(0), ctx.input(1), ctx.optional(2)
    if x.dtype != np.float32 or scale.dtype != np.float32 or ctx.attr("precision", 0) not in (0, 1):
        ctx.unsupported(f"QuantizeLinear of {x.dtype} by a {scale.dtype} scale (float32 only)")
    dtype = _out_type(ctx)
    layout = _Layout(ctx, x, scale)
    quant = _native_quant(ctx, layout, scale, zp, dtype)
    if quant is not None:
        axis = ctx.i32(layout.axis)
        zero = ctx.i32(np.zeros([1], "int32") if zp is None else zp.const.astype("int32").reshape(-1))
        return ctx.emit(O.QUANTIZE, [x, axis, ctx.constant(scale.const.reshape(-1)), zero], dtype=dtype, quant=quant)
    data = layout.data(x)
    t = binary(ctx, O.DIV, data, layout.param(scale), shape=data.shape)
    r = _round_half_even(ctx, t)
    if zp is not None:
        r = binary(ctx, O.ADD, r, cast(ctx, layout.param(zp), "float32"), shape=data.shape)
    return layout.restore(_saturate(ctx, r, dtype))


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx: NodeContext) -> Value:
    """DequantizeLinear -> DEQUANTIZE of a quantized value with these parameters; otherwise
    (CAST(x) - CAST(zero_point)) * scale in float32, CAST to the scale's type."""
    x, scale, zp = ctx.input(0), ctx.input(1), ctx.optional(2)
    out = ctx.out_dtype() or scale.dtype
    if scale.dtype.kind != "f" or out.kind != "f":
        ctx.unsupported(f"DequantizeLinear by a {scale.dtype} scale to {out}")
    if x.quant is not None:
        q = x.quant
        same_scale = scale.is_const and np.allclose(scale.const.reshape(-1), np.reshape(q.scale, -1), rtol=0, atol=0)
        same_zero = (zp.const.reshape(-1) if zp is not None and zp.is_const else np.zeros(1)) == (q.zero_point or 0)
        if not (same_scale and np.all(same_zero) and out == np.float32):
            ctx.unsupported("DequantizeLinear of a quantized value with other parameters than its own")
        return ctx.emit(O.DEQUANTIZE, [x], dtype="float32")
    if x.dtype.name not in _INT_TYPES and x.dtype != np.int32:
        ctx.unsupported(f"DequantizeLinear of {x.dtype}")
    layout = _Layout(ctx, x, scale)
    data = layout.data(cast(ctx, x, "float32"))
    if zp is not None:
        data = binary(ctx, O.SUB, data, cast(ctx, layout.param(zp), "float32"), shape=data.shape)
    y = binary(ctx, O.MUL, data, cast(ctx, layout.param(scale), "float32"), shape=data.shape)
    return cast(ctx, layout.restore(y), out)


def _shifted(ctx: NodeContext, v: Value, zp: Value | None) -> Value:
    """v - zero_point as float32 (exact: both are 8-bit integers)."""
    if v.dtype.name not in ("int8", "uint8"):
        ctx.unsupported(f"{ctx.op_type} of {v.dtype}")
    f = cast(ctx, v, "float32")
    if zp is None:
        return f
    if zp.rank not in (0, None) and zp.shape != (1,):
        ctx.unsupported(f"per-row/column zero points {zp.describe()}")
    return binary(ctx, O.SUB, f, cast(ctx, zp, "float32"), shape=v.shape)


@onnx_op("MatMulInteger")
def matmul_integer(ctx: NodeContext) -> Value:
    """MatMulInteger -> MAT_MUL of (a - a_zero_point) and (b - b_zero_point) in float32, CAST to int32
    (exact while the sums stay below 2^24: checked from the reduction length)."""
    a, b = ctx.input(0), ctx.input(1)
    k = a.shape[-1] if a.shape else None
    if k is None or k * 255 * 255 >= 1 << 24:
        ctx.unsupported(f"a reduction over {k} products may exceed float32's exact integers")
    y = matmul(ctx, _shifted(ctx, a, ctx.optional(2)), _shifted(ctx, b, ctx.optional(3)), shape=ctx.out_shape())
    return cast(ctx, y, "int32")


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext) -> Value:
    """QLinearMatMul -> t = MAT_MUL(a - a_zp, b - b_zp) * (a_scale * b_scale / y_scale) + y_zp in float32,
    then round half to even, CLIP and CAST (ONNX's reference order)."""
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (ctx.input(i) for i in range(8))
    k = a.shape[-1] if a.shape else None
    if k is None or k * 255 * 255 >= 1 << 24:
        ctx.unsupported(f"a reduction over {k} products may exceed float32's exact integers")
    for s in (a_scale, b_scale, y_scale):
        if s.dtype.kind != "f" or (s.rank or 0) > 1 or (s.rank == 1 and s.shape[0] != 1):
            ctx.unsupported(f"scale {s.describe()}: per-tensor float scales only")
    prod = matmul(ctx, _shifted(ctx, a, a_zp), _shifted(ctx, b, b_zp), shape=ctx.out_shape())
    # The factor in the scales' own type (as the reference computes it), then float32.
    factor = binary(ctx, O.DIV, binary(ctx, O.MUL, a_scale, b_scale, shape=a_scale.shape), y_scale, shape=a_scale.shape)
    t = binary(ctx, O.MUL, prod, cast(ctx, factor, "float32"), shape=prod.shape)
    t = binary(ctx, O.ADD, t, cast(ctx, y_zp, "float32"), shape=prod.shape)
    return _saturate(ctx, _round_half_even(ctx, t), y_zp.dtype)


def _shifted_filter(ctx: NodeContext, w: Value, zp: Value | None) -> Value:
    """w - zero_point as float32, the zero point per tensor or per output channel."""
    if zp is not None and zp.rank == 1 and zp.shape[0] != 1:
        zp = reshape(ctx, zp, [-1, 1, 1, 1][: w.rank], (zp.shape[0],) + (1,) * (w.rank - 1))
    if zp is not None and zp.rank == 1:
        zp = reshape(ctx, zp, [1], (1,))
    if w.dtype.name not in ("int8", "uint8"):
        ctx.unsupported(f"{ctx.op_type} of {w.dtype}")
    f = cast(ctx, w, "float32")
    return f if zp is None else binary(ctx, O.SUB, f, cast(ctx, zp, "float32"), shape=w.shape)


def _integer_conv(ctx: NodeContext, w_index: int, x_zp: int, w_zp: int) -> Value:
    """CONV_2D of the zero-point-shifted input and filter in float32 (exact below 2^24, checked)."""
    _, x, w = conv_operands(ctx, ctx.op_type, w_index)
    if w.shape is None or any(d is None for d in w.shape[1:]):
        ctx.unsupported(f"the filter {w.describe()} needs static dims")
    terms = int(np.prod(w.shape[1:]))
    if terms * 255 * 255 >= 1 << 24:
        ctx.unsupported(f"a window of {terms} products may exceed float32's exact integers")
    xf = _shifted(ctx, x, ctx.optional(x_zp))
    wf = _shifted_filter(ctx, w, ctx.optional(w_zp))
    return conv_nd(ctx, xf, wf, ctx.f32(np.zeros([0], "float32")))


@onnx_op("ConvInteger")
def conv_integer(ctx: NodeContext) -> Value:
    """ConvInteger -> CONV_2D of (x - x_zero_point) and (w - w_zero_point) in float32, CAST to int32."""
    return cast(ctx, _integer_conv(ctx, 1, 2, 3), "int32")


@onnx_op("QLinearConv")
def qlinear_conv(ctx: NodeContext) -> Value:
    """QLinearConv -> CONV_2D of the shifted integers (+ the int32 bias) * (x_scale * w_scale / y_scale)
    + y_zero_point, rounded half to even, CLIP and CAST (ONNX's reference order)."""
    x_scale, w_scale, y_scale, y_zp = ctx.input(1), ctx.input(4), ctx.input(6), ctx.optional(7)
    acc = _integer_conv(ctx, 3, 2, 5)
    bias = ctx.optional(8)
    if bias is not None:
        b = reshape(
            ctx, cast(ctx, bias, "float32"), [1, -1] + [1] * (acc.rank - 2), (1, bias.shape[0]) + (1,) * (acc.rank - 2)
        )
        acc = binary(ctx, O.ADD, acc, b, shape=acc.shape)
    for s in (x_scale, y_scale):
        if (s.rank or 0) > 1 or (s.rank == 1 and s.shape[0] != 1):
            ctx.unsupported(f"scale {s.describe()}: per-tensor only")
    if w_scale.rank == 1 and w_scale.shape[0] != 1:
        w_scale = reshape(ctx, w_scale, [-1] + [1] * (acc.rank - 2), (w_scale.shape[0],) + (1,) * (acc.rank - 2))
    factor = binary(ctx, O.MUL, x_scale, w_scale, shape=w_scale.shape)
    factor = binary(ctx, O.DIV, factor, y_scale, shape=w_scale.shape)
    t = binary(ctx, O.MUL, acc, cast(ctx, factor, "float32"), shape=acc.shape)
    dtype = y_zp.dtype if y_zp is not None else ctx.input(0).dtype
    if y_zp is not None:
        t = binary(ctx, O.ADD, t, cast(ctx, y_zp, "float32"), shape=acc.shape)
    return _saturate(ctx, _round_half_even(ctx, t), dtype)
