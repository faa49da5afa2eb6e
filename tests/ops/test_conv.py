"""CONV_2D against numpy references written from the spec: groups, depthwise, dilation, strides,
every auto_pad mode, bias present or empty, every fuse_code (NaN kept through the fused activation),
an UNKNOWN batch, quantized operands (int8 input/output; per-layer int8 filters with int32 bias,
per-channel ones with per-channel bias; a uint8 input with a zero point summed in integers), and bad
operands."""

import numpy as np
import pytest
from conv_refs import ATOL, OP, PAD, PADDINGS, RTOL, quant_bias, quant_filter, same_pads
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    check_op,
    check_quantized,
    conv2d_ref,
    fuse,
    fuse_ref,
    i32,
    integer_operands,
    q8_input,
    quantize,
    rand,
    run_op,
)

import nnadapter_tvm as nna

# (C_in, C_out, group): plain, grouped, depthwise (group == C_in == C_out), depthwise multiplier 2.
GROUPS = {"plain": (3, 4, 1), "group2": (4, 6, 2), "depthwise": (4, 4, 4), "depthwise_x2": (3, 6, 3)}


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


# -- quantized CONV_2D ----------------------------------------------------------------------------


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


# Dilated windows wider than the map: the converter drops the tap rows and columns that read only padding.
OUTER_TAPS = {
    "centre-only": dict(hw=(6, 7), kernel=(3, 3), pads=[8, 8, 8, 8], strides=[1, 1], dilations=[8, 8]),
    "middle-rows": dict(hw=(4, 5), kernel=(5, 5), pads=[6, 6, 6, 6], strides=[1, 1], dilations=[3, 3]),
    "strided-asymmetric": dict(hw=(5, 9), kernel=(3, 5), pads=[7, 2, 1, 9], strides=[2, 3], dilations=[6, 4]),
    "one-axis": dict(hw=(3, 11), kernel=(3, 3), pads=[5, 5, 1, 1], strides=[1, 1], dilations=[5, 1]),
}


@pytest.mark.parametrize("groups", [GROUPS["plain"], GROUPS["depthwise"]], ids=["plain", "depthwise"])
@pytest.mark.parametrize("case", list(OUTER_TAPS.values()), ids=list(OUTER_TAPS))
def test_conv2d_dilated_window_wider_than_the_map(groups, case):
    inputs, expected = conv_case(
        groups,
        PAD.NONE,
        case["pads"],
        case["strides"],
        case["dilations"],
        True,
        nna.FuseCode.NONE,
        hw=case["hw"],
        kernel=case["kernel"],
        seed=11,
    )
    check_op(OP.CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)


def test_conv2d_infinite_weight_on_padding_stays_nan():
    """A tap that reads only padding is kept where its weight is not finite: inf x 0 is NaN, as the
    reference computes it."""
    case = OUTER_TAPS["centre-only"]
    inputs, expected = conv_case(
        GROUPS["plain"],
        PAD.NONE,
        case["pads"],
        case["strides"],
        case["dilations"],
        False,
        nna.FuseCode.NONE,
        hw=case["hw"],
        kernel=case["kernel"],
        seed=13,
    )
    w = inputs[1].value.copy()
    w[1, 0, 0, 0] = np.inf
    inputs[1] = Const(w)
    x = inputs[0].value
    expected = conv2d_ref(x, w, None, case["pads"], case["strides"], case["dilations"], 1)
    assert np.isnan(expected[:, 1]).all()
    check_op(OP.CONV_2D, inputs, expected, rtol=RTOL, atol=ATOL)
