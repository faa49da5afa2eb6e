"""CONV_2D_TRANSPOSE against a numpy reference written from the spec (and Paddle's conv2d_transpose
where the spec is loose: the filter's [C_in, C_out / group, kh, kw] layout, SAME pads from the input
size): groups, depthwise, dilation, strides, every auto_pad mode, output_padding and output_shape,
bias present or empty, fuse_code, an UNKNOWN batch and spatial sizes known only at execution, the
kernel-equal-to-stride fast path, quantized operands (int8 input/output; per-layer int8 filters with
int32 bias, per-channel ones with per-channel bias), and bad operands."""

import numpy as np
import pytest
from conv_refs import ATOL, OP, PAD, PADDINGS, RTOL, P, quant_bias, quant_filter, same_pads
from dynutil import check_sizes, compile_op
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    check_op,
    check_quantized,
    expect_error,
    fuse,
    fuse_ref,
    i32,
    i64,
    q8_input,
    rand,
    run_op,
)

import nnadapter_tvm as nna


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
