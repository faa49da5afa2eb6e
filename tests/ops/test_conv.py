"""CONV_2D against a numpy reference written from the spec: groups, depthwise, dilation, strides,
every auto_pad mode, bias present or empty, every fuse_code, an UNKNOWN batch, and bad operands."""

import math

import numpy as np
import pytest
from oputil import UNKNOWN, Const, In, Out, check_op, fuse, fuse_ref, i32, rand, run_op

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


def conv2d_ref(x, w, b, pads, strides, dilations, group):
    """Direct grouped convolution in float64; ``pads`` in the spec's order [top, bottom, left, right]."""
    n, _, h, wd = x.shape
    c_out, c_per_group, kh, kw = w.shape
    top, bottom, left, right = pads
    (sh, sw), (dh, dw) = strides, dilations
    h_out = (h + top + bottom - (dh * (kh - 1) + 1)) // sh + 1
    w_out = (wd + left + right - (dw * (kw - 1) + 1)) // sw + 1
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (top, bottom), (left, right)))
    y = np.zeros((n, c_out, h_out, w_out))
    out_per_group = c_out // group
    for o in range(c_out):
        g = o // out_per_group
        xg = xp[:, g * c_per_group : (g + 1) * c_per_group]
        for i in range(kh):
            for j in range(kw):
                patch = xg[
                    :, :, i * dh : i * dh + sh * (h_out - 1) + 1 : sh, j * dw : j * dw + sw * (w_out - 1) + 1 : sw
                ]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j].astype("float64"))
    if b is not None:
        y += b.astype("float64")[None, :, None, None]
    return y.astype("float32")


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
