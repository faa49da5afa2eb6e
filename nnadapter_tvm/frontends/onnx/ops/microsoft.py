"""onnxruntime's com.microsoft operators that its own tools write into the files people ship: what the
transformer optimizer fuses (Gelu, BiasGelu, FastGelu, QuickGelu, SkipLayerNormalization,
SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization, EmbedLayerNormalization, Attention,
MultiHeadAttention, RotaryEmbedding), the 4-bit weights of its MatMulNBits quantizer and the LSTM of its
dynamic quantizer (DynamicQuantizeLSTM), each composed of standard NNAdapter operations.  This file holds
the helpers they share, the normalizations, the Gelu family and the quantized weights; Attention,
MultiHeadAttention and RotaryEmbedding are in ``microsoft_attention.py``.

Semantics are onnxruntime 1.32's CPU kernels' (docs/onnx.md, "com.microsoft"), checked against it by
tests/frontends/test_onnx_microsoft_ops.py; batch and sequence sizes may be symbolic (shapes computed with SHAPE,
GATHER and RANGE, so one compilation serves every size).  The Gelu family takes any float type, the others
float32 only; other element types, and the variants listed in docs/onnx.md, are refused with the attribute or
input named."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast
from nnadapter_tvm.frontends.onnx.ops.elementwise import is_float, op
from nnadapter_tvm.frontends.onnx.ops.recurrent import lstm_with_weights
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision

MS = "com.microsoft."


# -- helpers ---------------------------------------------------------------------------------------------------
def _f32(ctx: NodeContext, i: int, name: str) -> Value:
    v = ctx.input(i)
    if v.dtype != np.float32:
        ctx.unsupported(f"input {i} '{name}' {v.describe()}: {ctx.op_type} is imported in float32 only")
    return v


def _opt_f32(ctx: NodeContext, i: int, name: str) -> Value | None:
    return _f32(ctx, i, name) if ctx.has(i) else None


def _rank(ctx: NodeContext, v: Value, name: str, ranks: tuple[int, ...]) -> int:
    if v.rank not in ranks:
        ctx.fail(f"'{name}' {v.describe()} must have rank {' or '.join(map(str, ranks))}")
    return v.rank


def _static(ctx: NodeContext, v: Value, axis: int, name: str) -> int:
    d = v.shape[axis]
    if d is None:
        ctx.unsupported(f"'{name}' {v.describe()}: dimension {axis} must be known at import")
    return d


def _wanted(ctx: NodeContext, k: int) -> bool:
    return len(ctx.node.output) > k and bool(ctx.node.output[k])


def _refuse_inputs(ctx: NodeContext, names: dict[int, str]) -> None:
    for i, name in names.items():
        if ctx.has(i):
            ctx.unsupported(f"input {i} '{name}' is not supported")


def _refuse_outputs(ctx: NodeContext, names: dict[int, str]) -> None:
    for k, name in names.items():
        if _wanted(ctx, k):
            ctx.unsupported(f"output {k} '{name}' is not supported")


def _refuse_attrs(ctx: NodeContext, defaults: dict[str, object]) -> None:
    for name, default in defaults.items():
        value = ctx.attr(name, default)
        if value != default:
            ctx.unsupported(f"attribute '{name}' = {value} is not supported (only {default})")


def _f(ctx: NodeContext, value: float) -> Value:
    return ctx.constant(np.float32(value))


def _size(ctx: NodeContext, x: Value, axis: int, one_d: bool = False) -> Value:
    """Dimension ``axis`` of ``x`` as an INT32 scalar (``one_d``: a [1] tensor): a constant where it is
    static, else GATHER(SHAPE(x)), whose value the converters know as a symbolic expression."""
    d = x.shape[axis]
    if d is not None:
        return ctx.i32([d] if one_d else d)
    dims = ctx.emit(O.SHAPE, [x, ctx.i32(int(Precision.INT32))], dtype="int32", shape=(x.rank,))
    index = ctx.i32([axis] if one_d else axis)
    return ctx.emit(O.GATHER, [dims, index, ctx.i32(0)], shape=(1,) if one_d else ())


def _matmul(ctx: NodeContext, a: Value, b: Value) -> Value:
    """numpy.matmul of a [..., K] by a [K, N] matrix."""
    return ctx.emit(O.MAT_MUL, [a, b], shape=(*a.shape[:-1], b.shape[-1]))


# -- layer normalizations ----------------------------------------------------------------------------------------
def _layer_norm(
    ctx: NodeContext, x: Value, gamma: Value, beta: Value | None, eps: float, stats: bool
) -> tuple[Value, Value | None, Value | None]:
    """LayerNorm over the last axis: LAYER_NORMALIZATION, or (with the mean and 1 / std outputs) its
    composition (x - mean) * RSQRT(var + eps) * gamma + beta."""
    axis = x.rank - 1
    if not stats and gamma.shape == x.shape[axis:] and (beta is None or beta.shape == x.shape[axis:]):
        bias = ctx.f32(np.zeros([0], "float32")) if beta is None else beta
        y = ctx.emit(O.LAYER_NORMALIZATION, [x, gamma, bias, ctx.i32(axis), ctx.f32(eps)], shape=x.shape)
        return y, None, None
    kept = (*x.shape[:-1], 1)
    mean = ctx.emit(O.REDUCE_MEAN, [x, ctx.i32([axis]), ctx.boolean(True)], shape=kept)
    centred = op(ctx, O.SUB, x, mean)
    var = ctx.emit(O.REDUCE_MEAN, [op(ctx, O.MUL, centred, centred), ctx.i32([axis]), ctx.boolean(True)], shape=kept)
    inv = ctx.emit(O.RSQRT, [op(ctx, O.ADD, var, _f(ctx, eps))], shape=kept)
    y = op(ctx, O.MUL, op(ctx, O.MUL, centred, inv), gamma)
    if beta is not None:
        y = op(ctx, O.ADD, y, beta)
    return y, mean, inv


def _rms_norm(ctx: NodeContext, x: Value, gamma: Value, eps: float, axis: int) -> tuple[Value, Value]:
    """x * RSQRT(mean(x * x) + eps) * gamma over the axes from ``axis`` on, and the RSQRT."""
    axes = list(range(axis, x.rank))
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    square = ctx.emit(O.REDUCE_MEAN, [op(ctx, O.MUL, x, x), ctx.i32(axes), ctx.boolean(True)], shape=kept)
    inv = ctx.emit(O.RSQRT, [op(ctx, O.ADD, square, _f(ctx, eps))], shape=kept)
    return op(ctx, O.MUL, op(ctx, O.MUL, x, inv), gamma), inv


def _skip_norm(ctx: NodeContext, simplified: bool) -> list[Value]:
    x, skip, gamma = _f32(ctx, 0, "input"), _f32(ctx, 1, "skip"), _f32(ctx, 2, "gamma")
    beta = None if simplified else _opt_f32(ctx, 3, "beta")
    bias = _opt_f32(ctx, 3 if simplified else 4, "bias")
    _rank(ctx, x, "input", (2, 3))
    eps = float(ctx.attr("epsilon", 1e-12))
    total = op(ctx, O.ADD, x, skip)
    if bias is not None:
        total = op(ctx, O.ADD, total, bias)
    if simplified:
        y, inv = _rms_norm(ctx, total, gamma, eps, total.rank - 1)
        # onnxruntime's kernel writes 0 for the mean of the simplified form.
        mean = ctx.emit(O.FILL_LIKE, [inv, ctx.f32(0.0)], dtype="float32", shape=inv.shape)
    else:
        y, mean, inv = _layer_norm(ctx, total, gamma, beta, eps, stats=_wanted(ctx, 1) or _wanted(ctx, 2))
    return [y, mean, inv, total][: len(ctx.node.output)]


@onnx_op(MS + "SkipLayerNormalization")
def skip_layer_normalization(ctx: NodeContext) -> list[Value]:
    """SkipLayerNormalization -> LAYER_NORMALIZATION(input + skip + bias) (epsilon 1e-12 by default; skip
    [B, S, H], [1, S, H] or [S, H]); the mean and 1 / std outputs ([B, S, 1]) by REDUCE_MEAN and RSQRT; the
    sum (input_skip_bias_sum) as it is."""
    return _skip_norm(ctx, simplified=False)


@onnx_op(MS + "SkipSimplifiedLayerNormalization")
def skip_simplified_layer_normalization(ctx: NodeContext) -> list[Value]:
    """SkipSimplifiedLayerNormalization -> RMS normalization of input + skip + bias: s * RSQRT(mean(s * s) +
    epsilon) * gamma; mean output 0 (as onnxruntime's kernel writes it), inv_std_var, the sum."""
    return _skip_norm(ctx, simplified=True)


@onnx_op("SimplifiedLayerNormalization")
def simplified_layer_normalization(ctx: NodeContext) -> list[Value]:
    """SimplifiedLayerNormalization (onnxruntime's, registered in ONNX's domain) -> x * RSQRT(mean(x * x) +
    epsilon) * scale over the axes from ``axis`` (default -1, epsilon 1e-5); inv_std_var."""
    x, scale = _f32(ctx, 0, "X"), _f32(ctx, 1, "scale")
    rank = x.rank
    if rank is None:
        ctx.unsupported(f"the rank of {x.describe()} is unknown")
    axis = int(ctx.attr("axis", -1))
    if not -rank <= axis < rank:
        ctx.fail(f"axis {axis} is outside [-{rank}, {rank})")
    y, inv = _rms_norm(ctx, x, scale, float(ctx.attr("epsilon", 1e-5)), axis % rank)
    return [y, inv][: len(ctx.node.output)]


@onnx_op(MS + "EmbedLayerNormalization")
def embed_layer_normalization(ctx: NodeContext) -> list[Value]:
    """EmbedLayerNormalization -> GATHER of the word, position and segment embeddings, ADD, then
    LAYER_NORMALIZATION (epsilon 1e-12 by default); positions 0 .. S-1 (a SLICE of the table) or
    position_ids; mask_index = the count of 1s in each row of the mask (0 without a mask, as onnxruntime);
    embedding_sum the sum before normalization."""
    ids = ctx.input(0)
    if ids.dtype.kind not in "iu":
        ctx.fail(f"input_ids {ids.describe()} must be integers")
    _rank(ctx, ids, "input_ids", (2,))
    segments = ctx.optional(1)
    words, positions = _f32(ctx, 2, "word_embedding"), _f32(ctx, 3, "position_embedding")
    segment_table = _opt_f32(ctx, 4, "segment_embedding")
    gamma, beta = _f32(ctx, 5, "gamma"), _f32(ctx, 6, "beta")
    mask, position_ids = ctx.optional(7), ctx.optional(8)
    for table, name in ((words, "word_embedding"), (positions, "position_embedding")):
        _rank(ctx, table, name, (2,))
    hidden = _static(ctx, words, 1, "word_embedding")
    if (segments is None) != (segment_table is None):
        ctx.fail("segment_ids and segment_embedding must be given together")
    b, s = ids.shape
    total = ctx.emit(O.GATHER, [words, ids, ctx.i32(0)], shape=(b, s, hidden))
    if position_ids is None:
        count = _size(ctx, ids, 1, one_d=True)
        inputs = [positions, ctx.i32([0]), ctx.i32([0]), count, ctx.i32([1])]
        table = ctx.emit(O.SLICE, inputs, shape=(s, hidden))
    else:
        _rank(ctx, position_ids, "position_ids", (2,))
        table = ctx.emit(O.GATHER, [positions, position_ids, ctx.i32(0)], shape=(*position_ids.shape, hidden))
    total = op(ctx, O.ADD, total, table)
    if segments is not None:
        total = op(ctx, O.ADD, total, ctx.emit(O.GATHER, [segment_table, segments, ctx.i32(0)], shape=(b, s, hidden)))
    eps = float(ctx.attr("epsilon", 1e-12))
    y, _, _ = _layer_norm(ctx, total, gamma, beta, eps, stats=False)
    results = [y]
    if _wanted(ctx, 1) or _wanted(ctx, 2):
        if mask is None:
            ones = ctx.emit(O.FILL_LIKE, [ids, ctx.i32(0)], dtype="int32", shape=ids.shape)
        else:
            one = ctx.constant(np.array(1, mask.dtype))
            ones = cast(ctx, ctx.emit(O.EQUAL, [mask, one], dtype="bool", shape=mask.shape), "int32")
        count = ctx.emit(O.REDUCE_SUM, [ones, ctx.i32([1]), ctx.boolean(False)], shape=(b,))
        results += [count, total]
    return results[: len(ctx.node.output)]


# -- activations -------------------------------------------------------------------------------------------------
def _float_x(ctx: NodeContext) -> Value:
    x = ctx.input(0)
    if not is_float(x):
        ctx.unsupported(f"{ctx.op_type} of {x.dtype}: only float element types are supported")
    return x


def _gelu(ctx: NodeContext, x: Value, approximate: bool) -> Value:
    return ctx.emit(O.GELU, [x, ctx.constant([approximate], "bool")], shape=x.shape)


@onnx_op(MS + "Gelu")
def gelu(ctx: NodeContext) -> Value:
    """Gelu -> GELU (the exact erf form)."""
    return _gelu(ctx, _float_x(ctx), approximate=False)


@onnx_op(MS + "BiasGelu")
def bias_gelu(ctx: NodeContext) -> Value:
    """BiasGelu -> GELU(A + B), the exact erf form."""
    return _gelu(ctx, op(ctx, O.ADD, _float_x(ctx), ctx.input(1)), approximate=False)


@onnx_op(MS + "FastGelu")
def fast_gelu(ctx: NodeContext) -> Value:
    """FastGelu -> GELU(X + bias) in the tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    x = _float_x(ctx)
    if ctx.has(1):
        x = op(ctx, O.ADD, x, ctx.input(1))
    return _gelu(ctx, x, approximate=True)


@onnx_op(MS + "QuickGelu")
def quick_gelu(ctx: NodeContext) -> Value:
    """QuickGelu(alpha=1.702) -> x * SIGMOID(alpha * x)."""
    x = _float_x(ctx)
    alpha = float(ctx.attr("alpha", 1.702))
    scaled = op(ctx, O.MUL, x, ctx.constant(np.asarray(alpha, x.dtype)))
    return op(ctx, O.MUL, x, op(ctx, O.SIGMOID, scaled))


# -- quantized weights -------------------------------------------------------------------------------------------
def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes -> their ``bits``-bit values, the low bits first: [..., n] -> [..., n * 8 / bits]."""
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)


@onnx_op(MS + "MatMulNBits")
def mat_mul_n_bits(ctx: NodeContext) -> Value:
    """MatMulNBits -> MAT_MUL by the weight dequantized at import into float32 ((q - zero_point) * scale per
    block of block_size along K; 2, 4 or 8 bits, zero points packed, float or the default 2^(bits-1)), + bias.
    The product runs in float32 whatever accuracy_level says: at 4, where onnxruntime quantizes A to int8 per
    block, the results differ from onnxruntime's by that rounding."""
    a = _f32(ctx, 0, "A")
    _refuse_inputs(ctx, {4: "g_idx"})
    _refuse_attrs(ctx, {"weight_prepacked": 0})
    k_size, n_size = int(ctx.attr("K")), int(ctx.attr("N"))
    bits, block = int(ctx.attr("bits", 4)), int(ctx.attr("block_size"))
    if bits not in (2, 4, 8):
        ctx.unsupported(f"attribute 'bits' = {bits} (2, 4 or 8)")
    if block < 16 or block & (block - 1):
        ctx.fail(f"block_size {block} must be a power of 2, at least 16")
    if a.rank is None or a.shape[-1] not in (None, k_size):
        ctx.fail(f"A {a.describe()} must end in K = {k_size}")
    blocks = -(-k_size // block)
    packed = np.asarray(ctx.const(1))
    if packed.dtype != np.uint8 or packed.size != n_size * blocks * block * bits // 8:
        blob = block * bits // 8
        ctx.fail(f"B {ctx.input(1).describe()} must be uint8 [N, k_blocks, blob_size] = [{n_size}, {blocks}, {blob}]")
    quantized = _unpack(packed.reshape(n_size, blocks, -1), bits).astype(np.float32)
    scales = np.asarray(ctx.const(2))
    if scales.dtype != np.float32 or scales.size != n_size * blocks:
        ctx.fail(f"scales {ctx.input(2).describe()} must be float32 [N, k_blocks] = [{n_size}, {blocks}]")
    scales = scales.reshape(n_size, blocks, 1)
    zero_points = ctx.const(3, None)
    if zero_points is None:
        zeros = np.float32(1 << (bits - 1))
    elif zero_points.dtype == np.uint8:
        zeros = _unpack(zero_points.reshape(n_size, -1), bits)[:, :blocks].astype(np.float32)[..., None]
    else:
        zeros = np.asarray(zero_points, np.float32).reshape(n_size, blocks, 1)
    weight = ((quantized - zeros) * scales).reshape(n_size, -1)[:, :k_size]
    y = _matmul(ctx, a, ctx.constant(np.ascontiguousarray(weight.T, dtype=np.float32)))
    bias = _opt_f32(ctx, 5, "bias")
    return y if bias is None else op(ctx, O.ADD, y, bias)


@onnx_op(MS + "DynamicQuantizeLSTM")
def dynamic_quantize_lstm(ctx: NodeContext) -> list[Value | None]:
    """DynamicQuantizeLSTM -> the float LSTM extension operation on W and R dequantized at import ((q - zero
    point) * scale, per direction or per gate column), transposed to ONNX's layout.  onnxruntime also
    quantizes the input and the hidden state to uint8 at run time: its results differ from this float LSTM's
    by that rounding (about 1e-2 of the outputs' scale), which this import does not reproduce."""
    weights = []
    for i, name, scale_index in ((1, "W", 8), (2, "R", 10)):
        q = np.asarray(ctx.const(i))
        if q.ndim != 3 or q.dtype not in (np.int8, np.uint8):
            ctx.fail(f"{name} {ctx.input(i).describe()} must be int8 or uint8 [directions, size, 4 * hidden]")
        scale = np.asarray(ctx.const(scale_index), np.float32)
        zero = np.asarray(ctx.const(scale_index + 1))
        shape = (q.shape[0], 1, -1)  # per direction ([D]) or per column ([D, 4 * hidden])
        real = (q.astype(np.float32) - zero.astype(np.float32).reshape(shape)) * scale.reshape(shape)
        weights.append(ctx.constant(np.ascontiguousarray(real.transpose(0, 2, 1), dtype=np.float32)))
    return lstm_with_weights(ctx, weights[0], weights[1])
