"""CONV_2D, CONV_2D_TRANSPOSE and DEFORMABLE_CONV_2D against numpy references written from the spec
(and Paddle's conv2d_transpose / deformable_conv where the spec is loose): groups, depthwise, dilation,
strides, every auto_pad mode, bias present or empty, every fuse_code, an UNKNOWN batch, quantized
operands (int8 input/output; per-layer int8 filters with int32 bias, per-channel ones with per-channel
bias), and bad operands."""

import math

import numpy as np
import pytest
from dynutil import check_sizes, compile_op
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    check_op,
    check_quantized,
    conv2d_ref,
    dequantize,
    expect_error,
    fuse,
    fuse_ref,
    i32,
    i64,
    integer_operands,
    q8_input,
    quantize,
    rand,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType
PAD = nna.AutoPad
# Sums of up to C_in/group * kh * kw = 36 float32 products of magnitude <= 4, accumulated in a
# different order than the float64 reference: a few ulps of the partial sums.
RTOL, ATOL = 1e-5, 1e-4


def same_pads(in_hw, kernel, strides, dilations):
    """Paddle's SAME: total = max((ceil(in/stride) - 1) * stride + dilation * (k - 1) + 1 - in, 0),
    the smaller half before."""
    pads = []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        total = max((math.ceil(size / s) - 1) * s + d * (k - 1) + 1 - size, 0)
        pads += [total // 2, total - total // 2]
    return pads  # [top, bottom, left, right]


# (C_in, C_out, group): plain, grouped, depthwise (group == C_in == C_out), depthwise multiplier 2.
GROUPS = {"plain": (3, 4, 1), "group2": (4, 6, 2), "depthwise": (4, 4, 4), "depthwise_x2": (3, 6, 3)}
# (auto_pad, explicit pads [top, bottom, left, right]): asymmetric on purpose, so swapping orders shows.
PADDINGS = {"explicit": (PAD.NONE, [1, 0, 2, 1]), "same": (PAD.SAME, None), "valid": (PAD.VALID, None)}


def conv_case(groups, auto_pad, pads, strides, dilations, bias, code, n=2, hw=(7, 8), kernel=(3, 3), seed=0):
    c_in, c_out, group = groups
    x = rand(n, c_in, *hw, seed=seed)
    w = rand(c_out, c_in // group, *kernel, seed=seed + 1)
    b = rand(c_out, seed=seed + 2) if bias else None
    if auto_pad == PAD.SAME:
        ref_pads = same_pads(hw, kernel, strides, dilations)
    elif auto_pad == PAD.VALID:
        ref_pads = [0, 0, 0, 0]
    else:
        ref_pads = pads or [0, 0, 0, 0]  # an empty pads operand: no padding
    expected = fuse_ref(conv2d_ref(x, w, b, ref_pads, strides, dilations, group), code)
    pads_operand = i32(pads) if pads is not None else Const(None, nna.Precision.INT32)
    # An empty bias operand means "no bias" (zero), per OpArgs.has.
    bias_operand = Const(b) if bias else Const(None)
    inputs = [
        In(x),
        Const(w),
        bias_operand,
        i32([int(auto_pad)]),
        pads_operand,
        i32(strides),
        i32([group]),
        i32(dilations),
        fuse(code),
    ]
    return inputs, expected


@pytest.mark.parametrize("groups", list(GROUPS.values()), ids=list(GROUPS))
@pytest.mark.parametrize("padding", list(PADDINGS.values()), ids=list(PADDINGS))
@pytest.mark.parametrize("strides", [[1, 1], [2, 2]], ids=["s1", "s2"])
@pytest.mark.parametrize("dilations", [[1, 1], [2, 2]], ids=["d1", "d2"])
def test_conv2d_grid(groups, padding, strides, dilations):
    # Bias on for half the grid (by stride), empty for the other half.
    bias = strides[0] == 1
    inputs, expected = conv_case(groups, *padding, strides, dilations, bias, nna.FuseCode.NONE)
    check_op(OP.CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_conv2d_fuse_codes(code, bias):
    inputs, expected = conv_case(GROUPS["group2"], *PADDINGS["explicit"], [1, 2], [2, 1], bias, code, seed=5)
    check_op(OP.CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_mixed_strides_and_dilations():
    # Different height/width strides, dilations and kernel sizes, with SAME (odd totals put the extra pad after).
    inputs, expected = conv_case(
        GROUPS["plain"], PAD.SAME, None, [2, 1], [1, 2], True, nna.FuseCode.NONE, hw=(8, 9), kernel=(2, 3), seed=7
    )
    check_op(OP.CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_empty_pads_mean_no_padding():
    # auto_pad NONE with an empty pads operand: no padding.
    inputs, expected = conv_case(GROUPS["plain"], PAD.NONE, None, [1, 1], [1, 1], True, nna.FuseCode.RELU, seed=9)
    check_op(OP.CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_unknown_batch():
    inputs, expected = conv_case(GROUPS["group2"], *PADDINGS["explicit"], [2, 1], [1, 1], True, nna.FuseCode.RELU6)
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, *inputs[0].value.shape[1:]])
    out = Out(dims=[UNKNOWN, *expected.shape[1:]])
    check_op(OP.CONV_2D, inputs, expected, outputs=[out], rtol=RTOL, atol=ATOL)


def expect_invalid(inputs, expected_shape, operand):
    with pytest.raises(nna.NNAdapterError) as info:
        run_op(OP.CONV_2D, inputs, [Out()], [expected_shape])
    assert info.value.code == nna.ResultCode.INVALID_PARAMETER
    assert "CONV_2D" in str(info.value) and f"'{operand}'" in str(info.value), str(info.value)


def test_conv2d_group_not_dividing_channels():
    inputs, expected = conv_case(GROUPS["plain"], PAD.VALID, None, [1, 1], [1, 1], False, nna.FuseCode.NONE)
    inputs[6] = i32([2])  # C_in = 3
    expect_invalid(inputs, expected.shape, "group")


def test_conv2d_bad_fuse_code():
    inputs, expected = conv_case(GROUPS["plain"], PAD.VALID, None, [1, 1], [1, 1], False, nna.FuseCode.NONE)
    inputs[8] = i32([9])
    expect_invalid(inputs, expected.shape, "fuse_code")


def test_conv2d_three_pads():
    inputs, expected = conv_case(GROUPS["plain"], PAD.VALID, None, [1, 1], [1, 1], False, nna.FuseCode.NONE)
    inputs[3], inputs[4] = i32([int(PAD.NONE)]), i32([0, 0, 0])
    expect_invalid(inputs, expected.shape, "pads")


def test_conv2d_bad_auto_pad():
    inputs, expected = conv_case(GROUPS["plain"], PAD.VALID, None, [1, 1], [1, 1], False, nna.FuseCode.NONE)
    inputs[3] = i32([7])
    expect_invalid(inputs, expected.shape, "auto_pad")


def test_conv2d_bias_wrong_length():
    inputs, expected = conv_case(GROUPS["plain"], PAD.VALID, None, [1, 1], [1, 1], True, nna.FuseCode.NONE)
    inputs[2] = Const(rand(3))  # C_out = 4
    expect_invalid(inputs, expected.shape, "bias")


def test_conv2d_filter_larger_than_padded_input():
    # A dilated 3x3 filter spans 5 rows, more than the 4 (= 3 + 1 + 0) padded ones.
    inputs, _ = conv_case(GROUPS["plain"], PAD.NONE, [1, 0, 1, 1], [1, 1], [2, 1], False, nna.FuseCode.NONE, hw=(3, 6))
    expect_invalid(inputs, (2, 4, 1, 6), "filter")


# -- quantized CONV_2D ----------------------------------------------------------------------------

P = nna.Precision


def quant_filter(w, in_scale, channel_dim=None):
    """``w`` as a QUANT_INT8_SYMM_PER_LAYER filter (channel_dim None) or QUANT_INT8_SYMM_PER_CHANNEL along
    ``channel_dim``, with the scales the spec's bias relation needs; returns (operand, real values, scales)."""
    if channel_dim is None:
        scale = float(np.abs(w).max() / 127)
        q = quantize(w, scale)
        return Const(q, P.QUANT_INT8_SYMM_PER_LAYER, scale=scale), dequantize(q, scale), scale
    other = tuple(a for a in range(w.ndim) if a != channel_dim)
    scales = (np.abs(w).max(axis=other) / 127).astype("float32")
    q = quantize(w, scales, axis=channel_dim)
    operand = Const(q, P.QUANT_INT8_SYMM_PER_CHANNEL, scale=scales.tolist(), channel_dim=channel_dim)
    return operand, dequantize(q, scales, axis=channel_dim), scales


def quant_bias(b, in_scale, filter_scale):
    """The spec's int32 bias: bias_scale = input_scale * filter_scale (per layer or per channel)."""
    scale = np.float32(in_scale) * np.asarray(filter_scale, "float32")
    q = quantize(b, scale, dtype="int32", axis=0 if scale.ndim else None)
    if scale.ndim:
        operand = Const(q, P.QUANT_INT32_SYMM_PER_CHANNEL, scale=scale.tolist(), channel_dim=0)
        return operand, dequantize(q, scale, axis=0)
    return Const(q, P.QUANT_INT32_SYMM_PER_LAYER, scale=float(scale)), dequantize(q, scale)


@pytest.mark.parametrize(
    "per_channel, groups",
    [(False, GROUPS["plain"]), (True, GROUPS["plain"]), (True, GROUPS["depthwise_x2"])],
    ids=["per_layer", "per_channel", "per_channel_depthwise_x2"],
)
def test_conv2d_quantized(per_channel, groups):
    c_in, c_out, group = groups
    in_scale = 0.02
    x, x_real = q8_input(rand(2, c_in, 6, 7, seed=21), in_scale)
    w_op, w_real, w_scale = quant_filter(
        rand(c_out, c_in // group, 3, 3, seed=22), in_scale, 0 if per_channel else None
    )
    b_op, b_real = quant_bias(rand(c_out, seed=23), in_scale, w_scale)
    pads, strides, dilations = [1, 0, 2, 1], [2, 1], [1, 1]
    inputs = [x, w_op, b_op, i32([int(PAD.NONE)]), i32(pads), i32(strides), i32([group]), i32(dilations), fuse(0)]
    expected = conv2d_ref(x_real, w_real, b_real, pads, strides, dilations, group)
    check_quantized(OP.CONV_2D, inputs, expected, out_scale=0.1)


# (groups, pads [top, bottom, left, right], strides, fuse_code, per-channel filter, bias, output): the
# integer route (op_converters/quant_integer.py) of a uint8 input with a zero point.
U8_CASES = {
    "plain-padded": ("plain", [1, 0, 2, 1], [1, 1], nna.FuseCode.NONE, True, "int32", "uint8"),
    "per-layer-relu": ("plain", [1, 1, 1, 1], [2, 1], nna.FuseCode.RELU, False, "int32", "uint8"),
    "group2-relu6": ("group2", [0, 1, 1, 0], [1, 2], nna.FuseCode.RELU6, True, "int32", "uint8"),
    "depthwise": ("depthwise", [1, 1, 1, 1], [1, 1], nna.FuseCode.NONE, True, "int32", "uint8"),
    "depthwise-x2-no-bias": ("depthwise_x2", [1, 1, 1, 1], [2, 2], nna.FuseCode.RELU, True, None, "uint8"),
    "unpadded-float-out": ("plain", [0, 0, 0, 0], [1, 1], nna.FuseCode.NONE, True, "int32", "float32"),
    # A float bias (not input scale x filter scale) is added after the scaling.
    "float-bias": ("plain", [1, 1, 1, 1], [1, 1], nna.FuseCode.RELU, True, "float32", "uint8"),
}


@pytest.mark.parametrize("name", list(U8_CASES))
def test_conv2d_uint8_input_sums_integers(name):
    """A QUANT_UINT8_ASYMM_PER_LAYER input (zero point 131, the padding holding it), an int8 filter per
    layer or channel, an int32 bias: the result equals input_scale * filter_scale * (sum (q_x - 131) * q_w
    + q_bias), summed exactly (int64 numpy reference), then requantized to a uint8 output (zero point 7)
    within one step, or given as float32."""
    group_key, pads, strides, code, per_channel, bias, out = U8_CASES[name]
    c_in, c_out, group = GROUPS[group_key]
    rng = np.random.default_rng(len(name))
    in_scale, in_zero = 0.03, 131
    qx = rng.integers(0, 256, (2, c_in, 7, 8)).astype("uint8")
    qw, w_op, b_op, acc_scale, real_bias = integer_operands(
        rng, (c_out, c_in // group, 3, 3), in_scale, per_channel, bias
    )
    # The exact integer sums (float64 holds them exactly), then the scale.
    acc = conv2d_ref(qx.astype("float64") - in_zero, qw.astype("float64"), None, pads, strides, [1, 1], group)
    expected = fuse_ref(acc * acc_scale.reshape(1, -1, 1, 1) + np.reshape(real_bias, (1, -1, 1, 1)), code)
    x = In(qx, nna.Precision.QUANT_UINT8_ASYMM_PER_LAYER, scale=in_scale, zero_point=in_zero)
    inputs = [x, w_op, b_op, i32([int(PAD.NONE)]), i32(pads), i32(strides), i32([group]), i32([1, 1]), fuse(code)]
    if out == "float32":
        (got,) = run_op(OP.CONV_2D, inputs, [Out()], [expected.shape])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
        return
    out_scale, out_zero = float(np.abs(expected).max() / 200), 7
    want = quantize(expected, out_scale, out_zero, "uint8")
    (got,) = run_op(
        OP.CONV_2D, inputs, [Out(nna.Precision.QUANT_UINT8_ASYMM_PER_LAYER, None, out_scale, out_zero)], [want.shape]
    )
    assert got.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


# -- CONV_2D_TRANSPOSE ----------------------------------------------------------------------------


def conv2d_transpose_ref(x, w, b, pads, strides, dilations, group, out_hw):
    """Scatter form, in float64: input pixel (i, j) of channel c adds x * w[c, o', a, b] to output channel
    g * C_out/group + o' at (i * stride - pad_top + a * dilation, j * stride - pad_left + b * dilation);
    positions outside the [H_out, W_out] output are dropped.  ``w`` is [C_in, C_out / group, kh, kw]."""
    n, c_in, h, wd = x.shape
    _, out_per_group, kh, kw = w.shape
    top, _, left, _ = pads
    (sh, sw), (dh, dw) = strides, dilations
    y = np.zeros((n, out_per_group * group, *out_hw))
    in_per_group = c_in // group
    for c in range(c_in):
        g = c // in_per_group
        for o in range(out_per_group):
            for a in range(kh):
                for bb in range(kw):
                    for i in range(h):
                        r = i * sh - top + a * dh
                        if not 0 <= r < out_hw[0]:
                            continue
                        for j in range(wd):
                            q = j * sw - left + bb * dw
                            if 0 <= q < out_hw[1]:
                                y[:, g * out_per_group + o, r, q] += x[:, c, i, j] * w[c, o, a, bb]
    if b is not None:
        y += b.astype("float64")[None, :, None, None]
    return y.astype("float32")


def transpose_size(size, k, s, d, before, after):
    """The spec's H_out without output_padding: (H_in - 1) * stride - pads + dilation * (k - 1) + 1."""
    return (size - 1) * s - before - after + d * (k - 1) + 1


# (C_in, C_out, group) with the filter [C_in, C_out / group, kh, kw].
T_GROUPS = {"plain": (3, 4, 1), "group2": (4, 6, 2), "depthwise": (4, 4, 4)}


def transpose_case(
    groups,
    auto_pad,
    pads,
    strides,
    dilations,
    bias,
    code,
    output_padding=None,
    output_shape=None,
    hw=(3, 4),
    kernel=(3, 3),
    seed=0,
):
    c_in, c_out, group = groups
    x = rand(2, c_in, *hw, seed=seed)
    w = rand(c_in, c_out // group, *kernel, seed=seed + 1)
    b = rand(c_out, seed=seed + 2) if bias else None
    if auto_pad == PAD.SAME:
        # NNAdapter/Paddle: SAME pads come from the input size, as for a convolution of that input.
        ref_pads = same_pads(hw, kernel, strides, dilations)
    elif auto_pad == PAD.VALID:
        ref_pads = [0, 0, 0, 0]
    else:
        ref_pads = pads or [0, 0, 0, 0]
    sizes = [
        transpose_size(size, k, s, d, p0, p1)
        for size, k, s, d, p0, p1 in zip(hw, kernel, strides, dilations, ref_pads[0::2], ref_pads[1::2])
    ]
    if output_shape is not None:
        out_hw = output_shape
    else:
        out_hw = [size + p for size, p in zip(sizes, output_padding or [0, 0])]
    expected = fuse_ref(conv2d_transpose_ref(x, w, b, ref_pads, strides, dilations, group, out_hw), code)
    inputs = [
        In(x),
        Const(w),
        Const(b) if bias else Const(None),
        i32([int(auto_pad)]),
        i32(pads) if pads is not None else Const(None, P.INT32),
        i32(strides),
        i32([group]),
        i32(dilations),
        i32(output_padding) if output_padding is not None else Const(None, P.INT32),
        i32(output_shape) if output_shape is not None else Const(None, P.INT32),
        fuse(code),
    ]
    return inputs, expected


# Each group layout meets each padding mode once, with strides and dilations rotating through
# 1 and 2 (plus a mixed pair) so that each layout also sees each of them.
T_GRID = [
    ("plain", "explicit", [1, 1], [1, 1]),
    ("plain", "same", [2, 2], [2, 2]),
    ("plain", "valid", [2, 1], [1, 2]),
    ("group2", "explicit", [2, 2], [2, 2]),
    ("group2", "same", [1, 2], [2, 1]),
    ("group2", "valid", [1, 1], [1, 1]),
    ("depthwise", "explicit", [2, 1], [1, 2]),
    ("depthwise", "same", [1, 1], [1, 1]),
    ("depthwise", "valid", [2, 2], [2, 2]),
]


@pytest.mark.parametrize(
    "groups, padding, strides, dilations",
    T_GRID,
    ids=[f"{g}-{p}-s{s[0]}x{s[1]}-d{d[0]}x{d[1]}" for g, p, s, d in T_GRID],
)
def test_conv2d_transpose_grid(groups, padding, strides, dilations):
    bias = groups != "group2"  # the group2 cases take an empty bias operand
    inputs, expected = transpose_case(T_GROUPS[groups], *PADDINGS[padding], strides, dilations, bias, nna.FuseCode.NONE)
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "strides, dilations, pads, output_padding",
    [
        ([2, 2], [1, 1], [1, 1, 1, 1], [1, 1]),  # within pad_bottom/right: the crop shrinks
        ([3, 2], [1, 1], [0, 1, 1, 0], [2, 1]),  # past pad_bottom/right: zero rows (bias only) appended
        ([1, 1], [2, 3], [1, 0, 0, 0], [1, 2]),  # output_padding >= stride, allowed below dilation
    ],
    ids=["in_pads", "past_pads", "below_dilation"],
)
def test_conv2d_transpose_output_padding(strides, dilations, pads, output_padding):
    inputs, expected = transpose_case(
        T_GROUPS["group2"], PAD.NONE, pads, strides, dilations, True, nna.FuseCode.NONE, output_padding, seed=3
    )
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "dtype, extra", [(i32, (0, 0)), (i64, (1, 0)), (i32, (1, 1))], ids=["exact_i32", "plus_h_i64", "plus_hw_i32"]
)
def test_conv2d_transpose_output_shape(dtype, extra):
    # Computed size: (3 - 1) * 2 - 1 - 0 + 3 = 6 rows, (4 - 1) * 2 - 1 - 1 + 3 = 7 columns; output_shape
    # may add up to stride - 1, which lands where output_padding would.
    shape = [6 + extra[0], 7 + extra[1]]
    inputs, expected = transpose_case(
        T_GROUPS["plain"], PAD.NONE, [1, 0, 1, 1], [2, 2], [1, 1], True, nna.FuseCode.NONE, output_shape=shape
    )
    inputs[9] = dtype(shape)
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_transpose_output_shape_agreeing_with_output_padding():
    inputs, expected = transpose_case(
        T_GROUPS["plain"], PAD.NONE, [1, 0, 1, 1], [2, 2], [1, 1], False, 0, output_padding=[1, 1], output_shape=[7, 8]
    )
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("code", [nna.FuseCode.RELU, nna.FuseCode.RELU1], ids=lambda c: c.name)
def test_conv2d_transpose_fuse_codes(code):
    # fuse_code goes through the helper CONV_2D's tests cover; RELU6 is in test_conv2d_transpose_unknown_batch.
    inputs, expected = transpose_case(T_GROUPS["group2"], PAD.NONE, [0, 1, 1, 0], [2, 1], [1, 2], True, code, seed=5)
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_transpose_mixed_kernel_and_same():
    inputs, expected = transpose_case(
        T_GROUPS["plain"], PAD.SAME, None, [2, 3], [1, 1], True, nna.FuseCode.NONE, hw=(5, 4), kernel=(2, 3), seed=7
    )
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_transpose_unknown_batch():
    inputs, expected = transpose_case(T_GROUPS["group2"], PAD.NONE, [1, 0, 2, 1], [2, 1], [1, 1], True, 3)
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, *inputs[0].value.shape[1:]])
    out = Out(dims=[UNKNOWN, *expected.shape[1:]])
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, outputs=[out], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "groups, pads, strides, dilations, output_padding, auto_pad",
    [
        ("plain", [0, 0, 0, 0], [2, 2], [1, 1], None, PAD.NONE),  # PP-OCR det's k2 s2 upsampling
        ("group2", [1, 0, 2, 1], [2, 1], [1, 2], [1, 0], PAD.NONE),
        ("depthwise", None, [1, 1], [1, 1], None, PAD.SAME),  # SAME with stride 1: static pads
    ],
    ids=["k2s2", "pads_output_padding", "same_stride1"],
)
def test_conv2d_transpose_unknown_batch_and_spatial_sizes(groups, pads, strides, dilations, output_padding, auto_pad):
    """One compilation with [?, C_in, ?, ?]: H_out = (H_in - 1) * stride - pads + dilation * (k - 1) + 1 +
    output_padding as TIR expressions, checked at three sizes."""
    kernel = (2, 2) if strides == [2, 2] and pads == [0, 0, 0, 0] else (3, 3)
    c_in, c_out, group = T_GROUPS[groups]
    inputs, _ = transpose_case(
        T_GROUPS[groups], auto_pad, pads, strides, dilations, True, nna.FuseCode.NONE, output_padding, kernel=kernel
    )
    inputs[0] = In(inputs[0].value, dims=[UNKNOWN, c_in, UNKNOWN, UNKNOWN])
    compilation = compile_op(OP.CONV_2D_TRANSPOSE, inputs, [Out(dims=[UNKNOWN, c_out, UNKNOWN, UNKNOWN])])
    w, b = inputs[1].value, inputs[2].value
    cases = []
    for k, (n, hw) in enumerate([(1, (3, 4)), (2, (5, 2)), (1, (6, 7))]):
        x = rand(n, c_in, *hw, seed=30 + k)
        ref_pads = same_pads(hw, kernel, strides, dilations) if auto_pad == PAD.SAME else pads
        out_hw = [
            transpose_size(size, kk, s, d, p0, p1) + p
            for size, kk, s, d, p0, p1, p in zip(
                hw, kernel, strides, dilations, ref_pads[0::2], ref_pads[1::2], output_padding or [0, 0]
            )
        ]
        cases.append(([x], [conv2d_transpose_ref(x, w, b, ref_pads, strides, dilations, group, out_hw)]))
    check_sizes(compilation, cases, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kernel", [(2, 2), (3, 3), (2, 3), (1, 1)], ids=lambda k: f"k{k[0]}x{k[1]}")
@pytest.mark.parametrize("bias, code", [(True, nna.FuseCode.NONE), (False, nna.FuseCode.RELU)], ids=["bias", "relu"])
def test_conv2d_transpose_kernel_equal_to_stride(kernel, bias, code):
    """Windows that tile the output (kernel = stride, no pads): a 1x1 convolution to kh * kw * C_out
    channels, then depth-to-space (the converter's fast path), against the reference definition."""
    inputs, expected = transpose_case(
        (5, 7, 1), PAD.NONE, [0, 0, 0, 0], list(kernel), [1, 1], bias, code, kernel=kernel, hw=(4, 3)
    )
    check_op(OP.CONV_2D_TRANSPOSE, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "per_channel, groups", [(False, T_GROUPS["group2"]), (True, T_GROUPS["plain"])], ids=["per_layer", "per_channel"]
)
def test_conv2d_transpose_quantized(per_channel, groups):
    # Per channel along the filter's dimension 1, its output channels (group 1: all C_out of them).
    c_in, c_out, group = groups
    in_scale = 0.02
    x, x_real = q8_input(rand(2, c_in, 3, 4, seed=31), in_scale)
    w = rand(c_in, c_out // group, 3, 3, seed=32)
    w_op, w_real, w_scale = quant_filter(w, in_scale, 1 if per_channel else None)
    b_op, b_real = quant_bias(rand(c_out, seed=33), in_scale, w_scale)
    pads, strides = [1, 0, 0, 1], [2, 2]
    inputs = [x, w_op, b_op, i32([0]), i32(pads), i32(strides), i32([group]), i32([1, 1])]
    inputs += [i32([1, 0]), Const(None, P.INT32), fuse(0)]
    out_hw = [transpose_size(3, 3, 2, 1, 1, 0) + 1, transpose_size(4, 3, 2, 1, 0, 1)]
    expected = conv2d_transpose_ref(x_real, w_real, b_real, pads, strides, [1, 1], group, out_hw)
    check_quantized(OP.CONV_2D_TRANSPOSE, inputs, expected, out_scale=0.1)


def expect_transpose_invalid(inputs, shape, operand):
    expect_error(lambda: run_op(OP.CONV_2D_TRANSPOSE, inputs, [Out()], [shape]), "CONV_2D_TRANSPOSE", f"'{operand}'")


def base_transpose():
    return transpose_case(T_GROUPS["plain"], PAD.NONE, [1, 0, 1, 1], [2, 2], [1, 1], True, 0)


def test_conv2d_transpose_filter_channels_not_input_channels():
    inputs, expected = base_transpose()
    inputs[1] = Const(rand(4, 3, 3, 3))  # the spec's [C_out, C_in, ...] layout: dimension 0 is not C_in = 3
    expect_transpose_invalid(inputs, expected.shape, "filter")


@pytest.mark.parametrize(
    "index, value, operand",
    [
        (6, [2], "group"),  # C_in = 3
        (8, [2, 0], "output_padding"),  # >= max(stride, dilation) = 2
        (8, [-1, 0], "output_padding"),
        (8, [1], "output_padding"),
        (9, [5, 7], "output_shape"),  # below the computed 6 rows
        (9, [8, 7], "output_shape"),  # 6 + stride
        (9, [6, 7, 1], "output_shape"),
        (4, [4, 3, 1, 1], "pads"),  # 7 - 7 = 0 rows left
        (10, [7], "fuse_code"),
        (3, [5], "auto_pad"),
    ],
)
def test_conv2d_transpose_invalid(index, value, operand):
    inputs, expected = base_transpose()
    inputs[index] = i32(value)
    expect_transpose_invalid(inputs, expected.shape, operand)


def test_conv2d_transpose_output_padding_disagrees_with_output_shape():
    inputs, expected = base_transpose()
    inputs[8], inputs[9] = i32([1, 1]), i32([6, 7])
    expect_transpose_invalid(inputs, expected.shape, "output_padding")


def test_conv2d_transpose_bias_wrong_length():
    inputs, expected = base_transpose()
    inputs[2] = Const(rand(3))  # C_out = 4
    expect_transpose_invalid(inputs, expected.shape, "bias")


# -- DEFORMABLE_CONV_2D ---------------------------------------------------------------------------


def bilinear(plane, y, x):
    """Paddle's DmcnIm2colBilinear: corners outside the plane count as 0; a point at or beyond -1 or the
    size gives 0."""
    h, w = plane.shape
    if not (y > -1 and x > -1 and y < h and x < w):
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    ly, lx = y - y0, x - x0
    total = 0.0
    for yy, xx, weight in ((y0, x0, (1 - ly) * (1 - lx)), (y0, x0 + 1, (1 - ly) * lx)):
        total += weight * plane[yy, xx] if 0 <= yy < h and 0 <= xx < w else 0.0
    for yy, xx, weight in ((y0 + 1, x0, ly * (1 - lx)), (y0 + 1, x0 + 1, ly * lx)):
        total += weight * plane[yy, xx] if 0 <= yy < h and 0 <= xx < w else 0.0
    return total


def deformable_ref(x, offset, mask, w, b, pads, strides, dilations, group, dg):
    """Explicit loops in float64: sample every (channel, tap, output position), then the grouped product."""
    n, c_in = x.shape[:2]
    c_out, c_per_group, kh, kw = w.shape
    top, _, left, _ = pads
    (sh, sw), (dh, dw) = strides, dilations
    ho, wo = offset.shape[2:]
    x64, off64, mask64 = x.astype("float64"), offset.astype("float64"), mask.astype("float64")
    col = np.zeros((n, c_in, kh, kw, ho, wo))
    per_dg = c_in // dg
    for bi in range(n):
        for c in range(c_in):
            d = c // per_dg
            for i in range(kh):
                for j in range(kw):
                    t = d * kh * kw + i * kw + j
                    for oy in range(ho):
                        for ox in range(wo):
                            py = oy * sh - top + i * dh + off64[bi, 2 * t, oy, ox]
                            px = ox * sw - left + j * dw + off64[bi, 2 * t + 1, oy, ox]
                            col[bi, c, i, j, oy, ox] = mask64[bi, t, oy, ox] * bilinear(x64[bi, c], py, px)
    y = np.zeros((n, c_out, ho, wo))
    out_per_group = c_out // group
    for o in range(c_out):
        g = o // out_per_group
        y[:, o] = np.einsum("ncijyx,cij->nyx", col[:, g * c_per_group : (g + 1) * c_per_group], w[o])
    if b is not None:
        y += b[None, :, None, None]
    return y.astype("float32")


def deformable_case(
    groups, dg, pads, strides, dilations, bias, code, hw=(5, 6), kernel=(3, 3), seed=0, offset_range=2.0
):
    c_in, c_out, group = groups
    kh, kw = kernel
    ho = (hw[0] + pads[0] + pads[1] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    wo = (hw[1] + pads[2] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    x = rand(2, c_in, *hw, seed=seed)
    offset = rand(2, 2 * dg * kh * kw, ho, wo, seed=seed + 1, low=-offset_range, high=offset_range)
    mask = rand(2, dg * kh * kw, ho, wo, seed=seed + 2, low=0.0, high=1.0)
    w = rand(c_out, c_in // group, kh, kw, seed=seed + 3)
    b = rand(c_out, seed=seed + 4) if bias else None
    expected = fuse_ref(deformable_ref(x, offset, mask, w, b, pads, strides, dilations, group, dg), code)
    inputs = [In(x), In(offset), In(mask), Const(w), Const(b) if bias else Const(None)]
    inputs += [i32(pads), i32(strides), i32([group]), i32([dg]), i32(dilations), fuse(code)]
    return inputs, expected


# (C_in, C_out, group, deformable_group)
D_GROUPS = {"plain": ((3, 4, 1), 1), "group2": ((4, 6, 2), 1), "dg2": ((4, 4, 1), 2), "group2_dg4": ((4, 2, 2), 4)}


# Each group layout once, the geometry rotating; two more geometries for the deformable groups.
GEOMETRIES = {
    "same_size": ([1, 1, 1, 1], [1, 1], [1, 1]),
    "asym_s2x1_d1x2": ([1, 0, 2, 1], [2, 1], [1, 2]),
    "nopad_s1x2_d2x1": ([0, 0, 0, 0], [1, 2], [2, 1]),
}
D_GRID = [
    ("plain", "same_size"),
    ("group2", "asym_s2x1_d1x2"),
    ("dg2", "nopad_s1x2_d2x1"),
    ("dg2", "asym_s2x1_d1x2"),
    ("group2_dg4", "same_size"),
    ("group2_dg4", "nopad_s1x2_d2x1"),
]


@pytest.mark.parametrize("groups, geometry", D_GRID, ids=["-".join(c) for c in D_GRID])
def test_deformable_conv2d(groups, geometry):
    (c_in, c_out, group), dg = D_GROUPS[groups]
    pads, strides, dilations = GEOMETRIES[geometry]
    bias = geometry != "nopad_s1x2_d2x1"  # those take an empty bias operand
    inputs, expected = deformable_case((c_in, c_out, group), dg, pads, strides, dilations, bias, 0)
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_zero_offsets_unit_mask_is_conv2d():
    # With no displacement and a mask of ones the operation is CONV_2D on integer positions.
    inputs, _ = deformable_case((3, 4, 1), 1, [1, 0, 2, 1], [2, 1], [1, 2], True, 0, seed=4)
    x, w, b = inputs[0].value, inputs[3].value, inputs[4].value
    inputs[1] = In(np.zeros_like(inputs[1].value))
    inputs[2] = In(np.ones_like(inputs[2].value))
    check_op(OP.DEFORMABLE_CONV_2D, inputs, conv2d_ref(x, w, b, [1, 0, 2, 1], [2, 1], [1, 2], 1), rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_far_offsets_give_bias():
    # Every sampling point lands outside the input: only the bias remains.
    inputs, expected = deformable_case((3, 4, 1), 1, [1, 1, 1, 1], [1, 1], [1, 1], True, 0, seed=6)
    inputs[1] = In(np.full_like(inputs[1].value, 50.0))
    expected = np.broadcast_to(inputs[4].value[None, :, None, None], expected.shape).astype("float32")
    check_op(OP.DEFORMABLE_CONV_2D, inputs, np.ascontiguousarray(expected), rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_integer_offsets_at_edges():
    # Integer and half-integer offsets that land exactly on, just inside and just past the borders.
    inputs, _ = deformable_case((3, 2, 1), 1, [0, 0, 0, 0], [1, 1], [1, 1], False, 0, hw=(4, 4), seed=8)
    offset = np.random.default_rng(9).choice([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0], inputs[1].value.shape)
    inputs[1] = In(offset.astype("float32"))
    x, mask, w = inputs[0].value, inputs[2].value, inputs[3].value
    expected = deformable_ref(x, inputs[1].value, mask, w, None, [0, 0, 0, 0], [1, 1], [1, 1], 1, 1)
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("code", list(nna.FuseCode), ids=lambda c: c.name)
def test_deformable_conv2d_fuse_code(code):
    inputs, expected = deformable_case((4, 4, 2), 2, [1, 1, 0, 1], [1, 1], [1, 1], True, code, seed=10)
    raw = deformable_case((4, 4, 2), 2, [1, 1, 0, 1], [1, 1], [1, 1], True, nna.FuseCode.NONE, seed=10)[1]
    # The raw outputs span below 0, (0, 1), (1, 6) and above 6, so each activation clips something.
    assert (raw < 0).any() and ((raw > 0) & (raw < 1)).any() and ((raw > 1) & (raw < 6)).any() and (raw > 6).any()
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_deformable_conv2d_unknown_batch():
    inputs, expected = deformable_case((3, 4, 1), 1, [1, 1, 1, 1], [1, 1], [1, 1], True, 0, seed=12)
    for i in range(3):
        inputs[i] = In(inputs[i].value, dims=[UNKNOWN, *inputs[i].value.shape[1:]])
    out = Out(dims=[UNKNOWN, *expected.shape[1:]])
    check_op(OP.DEFORMABLE_CONV_2D, inputs, expected, outputs=[out], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("per_channel", [False, True], ids=["filter_per_layer", "filter_per_channel"])
def test_deformable_conv2d_quantized(per_channel):
    # offset and mask share the input's precision (QUANT_INT8_SYMM_PER_LAYER), each with its own scale.
    (c_in, c_out, group), dg = (4, 4, 1), 2
    pads, strides, dilations = [1, 1, 1, 1], [1, 1], [1, 1]
    in_scale = 0.02
    x, x_real = q8_input(rand(2, c_in, 4, 5, seed=41), in_scale)
    offset, offset_real = q8_input(rand(2, 2 * dg * 9, 4, 5, seed=42), 0.02)
    mask, mask_real = q8_input(rand(2, dg * 9, 4, 5, seed=43, low=0.0, high=1.0), 1 / 127)
    w_op, w_real, w_scale = quant_filter(rand(c_out, c_in, 3, 3, seed=44), in_scale, 0 if per_channel else None)
    b_op, b_real = quant_bias(rand(c_out, seed=45), in_scale, w_scale)
    inputs = [x, offset, mask, w_op, b_op, i32(pads), i32(strides), i32([group]), i32([dg]), i32(dilations), fuse(0)]
    expected = deformable_ref(x_real, offset_real, mask_real, w_real, b_real, pads, strides, dilations, group, dg)
    check_quantized(OP.DEFORMABLE_CONV_2D, inputs, expected, out_scale=0.05)


def expect_deformable_invalid(inputs, shape, operand):
    expect_error(lambda: run_op(OP.DEFORMABLE_CONV_2D, inputs, [Out()], [shape]), "DEFORMABLE_CONV_2D", f"'{operand}'")


def base_deformable():
    return deformable_case((4, 4, 2), 2, [1, 1, 1, 1], [2, 2], [1, 1], True, 0, seed=14)


@pytest.mark.parametrize(
    "index, value, operand",
    [
        (8, [3], "deformable_group"),  # C_in = 4
        (8, [0], "deformable_group"),
        (7, [3], "group"),
        (5, [1, 1, 1], "pads"),
        (6, [0, 1], "strides"),
        (10, [5], "fuse_code"),
    ],
)
def test_deformable_conv2d_invalid(index, value, operand):
    inputs, expected = base_deformable()
    inputs[index] = i32(value)
    expect_deformable_invalid(inputs, expected.shape, operand)


@pytest.mark.parametrize("index, operand", [(1, "offset"), (2, "mask")])
def test_deformable_conv2d_offset_and_mask_sized_like_the_input(index, operand):
    # The spec's [.., H_in, W_in]: with stride 2 that is not the output size Paddle indexes by.
    inputs, expected = base_deformable()
    channels = inputs[index].value.shape[1]
    inputs[index] = In(rand(2, channels, 5, 6))
    expect_deformable_invalid(inputs, expected.shape, operand)


def test_deformable_conv2d_offset_channels():
    inputs, expected = base_deformable()
    inputs[1] = In(rand(2, 18, *inputs[1].value.shape[2:]))  # 2 * dg * kh * kw = 36
    expect_deformable_invalid(inputs, expected.shape, "offset")


@pytest.mark.parametrize("code", [nna.FuseCode.RELU, nna.FuseCode.RELU6], ids=lambda c: c.name)
def test_conv2d_fused_activation_keeps_nan(code):
    """A NaN input pixel makes every output it reaches NaN, through the fused epilogue on the tile."""
    inputs, _ = conv_case(GROUPS["plain"], PAD.NONE, [1, 1, 1, 1], [1, 1], [1, 1], True, code, seed=8)
    x, w, b = inputs[0].value.copy(), inputs[1].value, inputs[2].value
    x[0, 0, 3, 4] = np.nan
    x[1, :, 0, 0] = np.nan
    inputs[0] = In(x)
    expected = fuse_ref(conv2d_ref(x, w, b, [1, 1, 1, 1], [1, 1], [1, 1], 1), code)
    assert np.isnan(expected).any()
    check_op(OP.CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)
