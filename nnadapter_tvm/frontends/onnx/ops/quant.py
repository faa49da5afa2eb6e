"""Quantization: QuantizeLinear -> QUANTIZE (constant parameters of a quantized NNAdapter type) or
DIV + round half to even + ADD + CLIP + CAST; DequantizeLinear -> DEQUANTIZE or CAST + SUB + MUL.
Dynamic quantization through nnadapter-tvm's extension operations (docs/quantization.md):
DynamicQuantizeLinear -> DYNAMIC_QUANTIZE_LINEAR; ConvInteger / MatMulInteger -> CONV_2D_INTEGER /
MAT_MUL_INTEGER (exact int32 sums, zero points that may be run-time tensors); QLinearConv / QLinearMatMul
-> the same integer products, then the requantization composed in float64 as ONNX's reference does."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import binary, broadcast_shape, cast, norm_axis, rank_of, reshape
from nnadapter_tvm.frontends.onnx.ops.conv import conv_operands, emit_conv
from nnadapter_tvm.frontends.onnx.registry import fold_note, onnx_op
from nnadapter_tvm.frontends.onnx.values import Quant, Value
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
    """CLIP to ``dtype``'s range, then CAST (exact: ``r`` holds integers).  NaN saturates to the minimum,
    as onnxruntime's QuantizeLinear gives (CLIP keeps NaN and a CAST of NaN is undefined): WHERE over
    GREATER_EQUAL(r, -inf), which only NaN fails."""
    info = np.iinfo(dtype)
    lo, hi = ctx.constant(np.asarray([info.min], r.dtype)), ctx.constant(np.asarray([info.max], r.dtype))
    number = ctx.emit(O.GREATER_EQUAL, [r, ctx.constant(np.asarray([-np.inf], r.dtype))], dtype="bool", shape=r.shape)
    r = ctx.emit(O.WHERE, [number, r, lo], dtype=r.dtype, shape=r.shape)
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
    return _quant_of(dtype, scales, zero, None if layout.per_tensor else layout.axis)


# The symmetric NNAdapter precisions of an element type: (per layer, per channel).
_SYMMETRIC = {
    np.dtype("int8"): (Precision.QUANT_INT8_SYMM_PER_LAYER, Precision.QUANT_INT8_SYMM_PER_CHANNEL),
    np.dtype("int32"): (Precision.QUANT_INT32_SYMM_PER_LAYER, Precision.QUANT_INT32_SYMM_PER_CHANNEL),
}


def _quant_of(dtype, scales: np.ndarray, zeros: np.ndarray, axis: int | None) -> Quant | None:
    """The NNAdapter quantized type of ``dtype`` values with these constant scales and zero points (per
    tensor when ``axis`` is None, else one per index of ``axis``): uint8 per tensor with its zero point, or
    int8 / int32 symmetric per tensor or per axis; None where no NNAdapter precision holds them."""
    if np.any(scales <= 0):
        return None
    if dtype == np.uint8 and axis is None:
        return Quant(Precision.QUANT_UINT8_ASYMM_PER_LAYER, float(scales[0]), int(zeros[0]))
    pair = _SYMMETRIC.get(np.dtype(dtype))
    if pair is None or np.any(zeros):
        return None
    if axis is None:
        return Quant(pair[0], float(scales[0]), 0)
    return Quant(pair[1], tuple(float(s) for s in scales), 0, axis)


def _shiftable(ctx: NodeContext, scale: Value, zp: Value | None) -> bool:
    """An int8 QuantizeLinear with constant parameters whose result is only ever dequantized (the default
    of onnxruntime's quantize_static: int8 activations with zero points) may store it shifted to uint8."""
    if zp is None or not zp.is_const or not scale.is_const or scale.const.size != 1 or scale.dtype != np.float32:
        return False
    return float(scale.const.reshape(-1)[0]) > 0 and ctx.graph.read_as_quantized(ctx.node.output[0])


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
    shifted = 0
    if quant is None and dtype == np.int8 and layout.per_tensor and _shiftable(ctx, scale, zp):
        # int8 with a zero point: stored as the uint8 q + 128 (Value.shifted), which NNAdapter quantizes.
        shifted, dtype = 128, np.dtype("uint8")
        zero_point = int(zp.const.reshape(-1)[0]) + shifted
        quant = Quant(Precision.QUANT_UINT8_ASYMM_PER_LAYER, float(scale.const.reshape(-1)[0]), zero_point)
    if quant is not None:
        axis = ctx.i32(layout.axis)
        zero = ctx.i32(np.zeros([1], "int32") if zp is None else zp.const.astype("int32").reshape(-1) + shifted)
        y = ctx.emit(O.QUANTIZE, [x, axis, ctx.constant(scale.const.reshape(-1)), zero], dtype=dtype, quant=quant)
        y.shifted = shifted
        return y
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
        zero = zp.const.reshape(-1).astype("int64") if zp is not None and zp.is_const else np.zeros(1, "int64")
        same_zero = zero + x.shifted == (q.zero_point or 0)
        if not (same_scale and np.all(same_zero) and out == np.float32):
            ctx.unsupported("DequantizeLinear of a quantized value with other parameters than its own")
        y = ctx.emit(O.DEQUANTIZE, [x], dtype="float32")
        y.dequantized = x
        return y
    if x.dtype.name not in _INT_TYPES and x.dtype != np.int32:
        ctx.unsupported(f"DequantizeLinear of {x.dtype}")
    layout = _Layout(ctx, x, scale)
    data = layout.data(cast(ctx, x, "float32"))
    if zp is not None:
        data = binary(ctx, O.SUB, data, cast(ctx, layout.param(zp), "float32"), shape=data.shape)
    y = binary(ctx, O.MUL, data, cast(ctx, layout.param(scale), "float32"), shape=data.shape)
    return cast(ctx, layout.restore(y), out)


@fold_note("DequantizeLinear")
def dequantized_constant(node, inputs: list[Value | None], outputs: list[Value]) -> None:
    """A DequantizeLinear of constants (a QDQ model's weights and int32 biases), folded to float at import:
    its result notes the quantized constant it came from (``Value.dequantized``) when an NNAdapter
    quantized type holds it: int8 or int32 with zero points 0 (symmetric), one scale or one per index of
    ``axis``; so that a Conv of it can compute on the integers (ops/conv.py)."""
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    if x.dtype not in (np.int8, np.int32) or scale.dtype != np.float32 or x.rank is None:
        return
    scales = scale.const.reshape(-1)
    if not np.all(np.isfinite(scales)) or any(a.name == "block_size" and a.i for a in node.attribute):
        return
    axis = None
    if scale.const.size != 1:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        axis = axis + x.rank if axis < 0 else axis
        if scale.rank != 1 or not 0 <= axis < x.rank or x.shape[axis] != scales.size:
            return
    zeros = np.zeros(1) if zp is None else zp.const.reshape(-1)
    quant = _quant_of(x.dtype, scales, zeros, axis)
    if quant is None:
        return
    outputs[0].dequantized = Value(f"{outputs[0].name}/quantized", x.dtype, x.shape, const=x.const, quant=quant)


_INT8 = ("int8", "uint8")


def _integer_operand(ctx: NodeContext, v: Value, what: str) -> Value:
    if v.dtype.name not in _INT8:
        ctx.unsupported(f"{what} {v.describe()}: {ctx.op_type} of 8-bit integers only")
    return v


def _zero_point_or_empty(ctx: NodeContext, i: int, like: Value) -> Value:
    """Input ``i`` (a zero point of ``like``'s type), or an empty operand (zero) when omitted."""
    zp = ctx.optional(i)
    if zp is None:
        return ctx.constant(np.zeros([0], like.dtype))
    if zp.dtype != like.dtype:
        ctx.fail(f"input {i} {zp.describe()} must have the type of {like.describe()}")
    return zp


def _as_rows(ctx: NodeContext, zp: Value) -> Value:
    """A 1-D per-row zero point [M] as [M, 1], which broadcasts against [..., M, K] (ONNX's per-row form)."""
    if zp.rank != 1 or zp.shape[0] == 1 or zp.shape[0] == 0:
        return zp
    if zp.is_const:
        return ctx.constant(zp.const.reshape(-1, 1))
    return reshape(ctx, zp, [-1, 1], (zp.shape[0], 1))


def _matmul_integer(ctx: NodeContext, a_i: int, b_i: int, a_zp_i: int, b_zp_i: int) -> Value:
    """MAT_MUL_INTEGER of inputs ``a_i`` and ``b_i`` with the zero points ``a_zp_i`` / ``b_zp_i`` (int32)."""
    a = _integer_operand(ctx, ctx.input(a_i), "input")
    b = _integer_operand(ctx, ctx.input(b_i), "input")
    a_zp, b_zp = ctx.optional(a_zp_i), ctx.optional(b_zp_i)
    inputs = [a, b]
    if a_zp is not None or b_zp is not None:
        inputs.append(_as_rows(ctx, _zero_point_or_empty(ctx, a_zp_i, a)))
    if b_zp is not None:
        inputs.append(_zero_point_or_empty(ctx, b_zp_i, b))
    return ctx.emit(O.MAT_MUL_INTEGER, inputs, dtype="int32", shape=ctx.out_shape())


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext) -> list[Value]:
    """DynamicQuantizeLinear -> DYNAMIC_QUANTIZE_LINEAR (extension operation 1010): y (uint8), y_scale and
    y_zero_point (scalars) computed from the input at run time, as ONNX's reference does."""
    x = ctx.input(0)
    if x.dtype != np.float32:
        ctx.unsupported(f"DynamicQuantizeLinear of {x.describe()}: float32 only")
    return ctx.emit(O.DYNAMIC_QUANTIZE_LINEAR, [x], dtype=["uint8", "float32", "uint8"], outputs=3)


@onnx_op("MatMulInteger")
def matmul_integer(ctx: NodeContext) -> Value:
    """MatMulInteger -> MAT_MUL_INTEGER (extension operation 1012): (a - a_zero_point) @ (b - b_zero_point)
    summed exactly in int32; zero points per tensor, a's per row ([M] or [..., M, 1]), b's per column
    ([N] or [..., 1, N]), constants or run-time tensors."""
    return _matmul_integer(ctx, 0, 1, 2, 3)


def _per_tensor_scale(ctx: NodeContext, s: Value) -> None:
    if s.dtype.kind != "f" or (s.rank or 0) > 1 or (s.rank == 1 and s.shape[0] != 1):
        ctx.unsupported(f"scale {s.describe()}: per-tensor float scales only")


def _factor(ctx: NodeContext, a_scale: Value, b_scale: Value, y_scale: Value) -> Value:
    """a_scale * b_scale / y_scale in the scales' own type (as the reference computes it)."""
    if a_scale.is_const and b_scale.is_const and y_scale.is_const:
        return ctx.constant(a_scale.const * b_scale.const / y_scale.const)
    shape = broadcast_shape(a_scale.shape or (), b_scale.shape or ())
    product = binary(ctx, O.MUL, a_scale, b_scale, shape=shape)
    return binary(ctx, O.DIV, product, y_scale, shape=broadcast_shape(shape, y_scale.shape or ()))


def _requantize(ctx: NodeContext, acc: Value, factor: Value, y_zp: Value | None, dtype: np.dtype) -> Value:
    """saturate(rint(acc * factor + y_zero_point)) in float64, ONNX's reference order: numpy promotes the
    int32 accumulator times a float32 (or float16) factor to float64."""
    t = binary(ctx, O.MUL, cast(ctx, acc, "float64"), cast(ctx, factor, "float64"), shape=acc.shape)
    if y_zp is not None:
        t = binary(ctx, O.ADD, t, cast(ctx, y_zp, "float64"), shape=acc.shape)
    return _saturate(ctx, _round_half_even(ctx, t), dtype)


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext) -> Value:
    """QLinearMatMul -> MAT_MUL_INTEGER (exact int32 sums), then rint(acc * (a_scale * b_scale / y_scale) +
    y_zero_point) in float64, saturated (ONNX's reference order)."""
    a_scale, b_scale, y_scale, y_zp = ctx.input(1), ctx.input(4), ctx.input(6), ctx.optional(7)
    for s in (a_scale, b_scale, y_scale):
        _per_tensor_scale(ctx, s)
    acc = _matmul_integer(ctx, 0, 3, 2, 5)
    dtype = y_zp.dtype if y_zp is not None else ctx.input(0).dtype
    return _requantize(ctx, acc, _factor(ctx, a_scale, b_scale, y_scale), y_zp, dtype)


def _conv_integer(ctx: NodeContext, w_i: int, x_zp_i: int, w_zp_i: int) -> Value:
    """CONV_2D_INTEGER (extension operation 1011) of input 0 and filter ``w_i`` (1-D as 2-D), int32."""
    nd, x, w = conv_operands(ctx, ctx.op_type, w_i)
    _integer_operand(ctx, x, "input")
    _integer_operand(ctx, w, "filter")
    if not w.is_static:
        ctx.unsupported(f"the filter {w.describe()} needs static dims")
    x_zp = _zero_point_or_empty(ctx, x_zp_i, x)
    w_zp = _zero_point_or_empty(ctx, w_zp_i, w)
    return emit_conv(ctx, O.CONV_2D_INTEGER, nd, x, w, [x_zp, w_zp], [], dtype="int32")


@onnx_op("ConvInteger")
def conv_integer(ctx: NodeContext) -> Value:
    """ConvInteger -> CONV_2D_INTEGER (extension operation 1011): (x - x_zero_point) * (w - w_zero_point)
    summed exactly in int32, the input padded with its zero point; x's zero point per tensor, w's per
    tensor or per output channel, either a run-time tensor (DynamicQuantizeLinear's output)."""
    return _conv_integer(ctx, 1, 2, 3)


@onnx_op("QLinearConv")
def qlinear_conv(ctx: NodeContext) -> Value:
    """QLinearConv -> CONV_2D_INTEGER (+ the int32 bias, exactly), then rint(acc * (x_scale * w_scale /
    y_scale) + y_zero_point) in float64, saturated (ONNX's reference order); w_scale per tensor or per
    output channel."""
    x_scale, w_scale, y_scale, y_zp = ctx.input(1), ctx.input(4), ctx.input(6), ctx.optional(7)
    for s in (x_scale, y_scale):
        _per_tensor_scale(ctx, s)
    acc = _conv_integer(ctx, 3, 2, 5)
    spatial = acc.rank - 2
    bias = ctx.optional(8)
    if bias is not None:
        if bias.dtype != np.int32 or bias.rank != 1:
            ctx.fail(f"the bias {bias.describe()} must be a 1-D int32 tensor")
        b = reshape(ctx, bias, [1, -1] + [1] * spatial, (1, bias.shape[0]) + (1,) * spatial)
        acc = binary(ctx, O.ADD, acc, b, shape=acc.shape)
    if w_scale.dtype.kind != "f" or (w_scale.rank or 0) > 1:
        ctx.unsupported(f"scale {w_scale.describe()}: a float scalar or one per output channel")
    if w_scale.rank == 1 and w_scale.shape[0] != 1:
        if w_scale.is_const:
            w_scale = ctx.constant(w_scale.const.reshape([-1] + [1] * spatial))
        else:
            w_scale = reshape(ctx, w_scale, [-1] + [1] * spatial, (w_scale.shape[0],) + (1,) * spatial)
    dtype = y_zp.dtype if y_zp is not None else ctx.input(0).dtype
    return _requantize(ctx, acc, _factor(ctx, x_scale, w_scale, y_scale), y_zp, dtype)
