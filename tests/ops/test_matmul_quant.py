"""Quantized FULLY_CONNECTED and MAT_MUL against numpy references written from the spec: int8 input and
output (QUANT_INT8_SYMM_PER_LAYER); FULLY_CONNECTED weights per layer with a QUANT_INT32_SYMM_PER_LAYER
bias, or per output unit (QUANT_INT8_SYMM_PER_CHANNEL, channel_dim 0) with a QUANT_INT32_SYMM_PER_CHANNEL
bias whose scales are input_scale * weight_scale[i]; MAT_MUL with both operands int8."""

import numpy as np
import pytest
from oputil import (
    Const,
    In,
    Out,
    b8,
    check_quantized,
    dequantize,
    fuse,
    fuse_ref,
    integer_operands,
    q8_const,
    q8_input,
    quantize,
    rand,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType
P = nna.Precision
IN_SCALE = 0.02


def quant_weight(w, per_channel):
    """(operand, real values, scale or per-row scales) of an int8 weight [num_units, input_size]."""
    if not per_channel:
        scale = float(np.abs(w).max() / 127)
        q = quantize(w, scale)
        return Const(q, P.QUANT_INT8_SYMM_PER_LAYER, scale=scale), dequantize(q, scale), scale
    scales = (np.abs(w).max(axis=1) / 127).astype("float32")
    q = quantize(w, scales, axis=0)
    operand = Const(q, P.QUANT_INT8_SYMM_PER_CHANNEL, scale=scales.tolist(), channel_dim=0)
    return operand, dequantize(q, scales, axis=0), scales


def quant_bias(b, weight_scale):
    """The spec's int32 bias: bias_scale[i] = input_scale * weight_scale[i] (one value per layer)."""
    scale = np.float32(IN_SCALE) * np.asarray(weight_scale, "float32")
    if scale.ndim:
        q = quantize(b, scale, dtype="int32", axis=0)
        operand = Const(q, P.QUANT_INT32_SYMM_PER_CHANNEL, scale=scale.tolist(), channel_dim=0)
        return operand, dequantize(q, scale, axis=0)
    q = quantize(b, float(scale), dtype="int32")
    return Const(q, P.QUANT_INT32_SYMM_PER_LAYER, scale=float(scale)), dequantize(q, float(scale))


def fc_ref(x, w, b, code):
    """activation(input * weight' + bias) with the input flattened to [-1, input_size], in float64."""
    y = x.reshape(-1, w.shape[1]).astype("float64") @ w.T.astype("float64")
    if b is not None:
        y = y + b
    return fuse_ref(y.astype("float32"), code)


@pytest.mark.parametrize("per_channel", [False, True], ids=["weight_per_layer", "weight_per_channel"])
@pytest.mark.parametrize(
    "x_shape, input_size, bias, code",
    [((3, 8), 8, True, nna.FuseCode.NONE), ((2, 3, 2, 2), 6, True, nna.FuseCode.RELU6), ((4, 5), 5, False, 1)],
    ids=["2d", "rank4_flattened_relu6", "no_bias_relu"],
)
def test_fully_connected_quantized(per_channel, x_shape, input_size, bias, code):
    units = 5
    x, x_real = q8_input(rand(*x_shape, seed=1), IN_SCALE)
    w_op, w_real, w_scale = quant_weight(rand(units, input_size, seed=2), per_channel)
    if bias:
        b_op, b_real = quant_bias(rand(units, seed=3), w_scale)
    else:
        b_op, b_real = Const(None), None
    expected = fc_ref(x_real, w_real, b_real, code)
    check_quantized(OP.FULLY_CONNECTED, [x, w_op, b_op, fuse(code)], expected, out_scale=0.08)


def test_fully_connected_quantized_saturates():
    # Results far beyond 127 * out_scale clip to the int8 range.
    x, x_real = q8_input(np.full((2, 4), 2.0, "float32"), IN_SCALE)
    w_op, w_real, _ = quant_weight(np.array([[1.0] * 4, [-1.0] * 4], "float32"), False)
    got = check_quantized(OP.FULLY_CONNECTED, [x, w_op, Const(None), fuse(0)], fc_ref(x_real, w_real, None, 0), 0.01)
    assert (got[:, 0] == 127).all() and (got[:, 1] == -128).all()


def matmul_ref(x, y, tx, ty):
    """numpy.matmul after swapping the last two dims of each flagged operand (a vector is unchanged)."""
    if tx and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    if ty and y.ndim >= 2:
        y = np.swapaxes(y, -1, -2)
    return np.asarray(np.matmul(x.astype("float64"), y.astype("float64")), "float32")


@pytest.mark.parametrize(
    "x_shape, y_shape, tx, ty",
    [
        ((2, 4), (4, 3), False, False),
        ((4, 2), (3, 4), True, True),
        ((2, 1, 2, 4), (3, 4, 5), False, False),  # batch dims broadcast
        ((4,), (2, 3, 4), False, True),  # vector @ batched transposed
        ((2, 3, 4), (4,), False, False),  # batched @ vector
    ],
    ids=["2d", "both_transposed", "broadcast", "vector_x", "vector_y"],
)
def test_mat_mul_quantized(x_shape, y_shape, tx, ty):
    x, x_real = q8_input(rand(*x_shape, seed=4), IN_SCALE)
    y, y_real = q8_input(rand(*y_shape, seed=5), 0.03)
    check_quantized(OP.MAT_MUL, [x, y, b8([tx]), b8([ty])], matmul_ref(x_real, y_real, tx, ty), out_scale=0.1)


def test_mat_mul_quantized_constant_y():
    # y a constant int8 operand (dequantized at compile time), the transposes omitted.
    x, x_real = q8_input(rand(3, 4, seed=6), IN_SCALE)
    y, y_real = q8_const(rand(4, 2, seed=7), 0.025)
    check_quantized(OP.MAT_MUL, [x, y], matmul_ref(x_real, y_real, False, False), out_scale=0.1)


@pytest.mark.parametrize(
    "shape, per_channel, bias, code, out",
    [
        ((3, 40), True, "int32", nna.FuseCode.NONE, "uint8"),
        ((2, 3, 24), False, "int32", nna.FuseCode.RELU, "uint8"),  # flattened to [6, 24]
        ((1, 100), True, None, nna.FuseCode.RELU6, "uint8"),
        ((4, 33), True, "float32", nna.FuseCode.NONE, "float32"),  # a bias of another scale, added as reals
    ],
    ids=["per-channel", "flattened-per-layer", "no-bias", "float-bias"],
)
def test_fully_connected_uint8_input_sums_integers(shape, per_channel, bias, code, out):
    """A QUANT_UINT8_ASYMM_PER_LAYER input (zero point 131): input_scale * weight_scale * (sum (q_x - 131) *
    q_w + q_bias), summed exactly (int64 numpy), requantized to uint8 within one step or given as float32."""
    rng = np.random.default_rng(sum(shape))
    units, size = 20, shape[-1]
    qx = rng.integers(0, 256, shape).astype("uint8")
    qw, w_op, b_op, acc_scale, real_bias = integer_operands(rng, (units, size), IN_SCALE, per_channel, bias)
    acc = (qx.reshape(-1, size).astype("int64") - 131) @ qw.T.astype("int64")
    expected = fuse_ref(acc * acc_scale + real_bias, code)
    x = In(qx, P.QUANT_UINT8_ASYMM_PER_LAYER, scale=IN_SCALE, zero_point=131)
    inputs = [x, w_op, b_op, fuse(code)]
    if out == "float32":
        (got,) = run_op(OP.FULLY_CONNECTED, inputs, [Out()], [expected.shape])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
        return
    out_scale = float(np.abs(expected).max() / 200)
    want = quantize(expected, out_scale, 7, "uint8")
    (got,) = run_op(OP.FULLY_CONNECTED, inputs, [Out(P.QUANT_UINT8_ASYMM_PER_LAYER, None, out_scale, 7)], [want.shape])
    assert got.dtype == np.uint8 and np.abs(got.astype(int) - want.astype(int)).max() <= 1
