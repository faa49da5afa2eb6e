"""RESIZE_NEAREST and RESIZE_LINEAR against numpy references written with explicit loops from Paddle's
nearest_interp_v2 / bilinear_interp_v2 CPU kernels (the spec leaves these operations to Paddle's
operators of the same name).  Index arithmetic is done in float32 as Paddle does it, so that sampled
positions agree exactly; only the blending arithmetic gets a tolerance.  The references were checked
once, outside this suite, against paddlepaddle 3.3.1 on every case below.
"""

import numpy as np
import pytest
from dynutil import check_sizes, compile_op
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    P,
    b8,
    check_op,
    check_quantized,
    expect_error,
    f32,
    i32,
    i64,
    q8_input,
    rand,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType
F = np.float32
EXACT = {"rtol": 0, "atol": 0}
# Bilinear blends of 4 float32 products of inputs in [-2, 2], accumulated in a different order than the
# reference: a few float32 ulps.
BLEND = {"rtol": 1e-5, "atol": 1e-5}
EMPTY_F32 = Const(None, P.FLOAT32)
EMPTY_I32 = Const(None, P.INT32)


def run(op, inputs, shapes):
    return run_op(op, inputs, [Out() for _ in shapes], shapes)


def resize_out_size(in_hw, shape, scales):
    """``shape`` if given, else int(float32(in) * float32(scale)) (Paddle's static_cast<int>(in_h * scale_h))."""
    if shape is not None:
        return list(shape)
    return [int(F(size) * F(scale)) for size, scale in zip(in_hw, scales)]


def resize_ratio(in_size, out_size, scale, align_corners):
    """Paddle's interpolate_v2 ratio (float32): 0 for a 1-pixel output; (in - 1) / (out - 1) with
    align_corners; float(1. / scale) where a positive scale is given; else in / out."""
    if out_size <= 1:
        return F(0)
    if align_corners:
        return F(in_size - 1) / F(out_size - 1)
    if scale is not None and scale > 0:
        return F(1.0 / float(F(scale)))
    return F(in_size) / F(out_size)


def resize_ratios(x, out_hw, scales, align_corners):
    scales = scales if scales is not None and all(s > 0 for s in scales) else [None, None]
    return [resize_ratio(i, o, s, align_corners) for i, o, s in zip(x.shape[2:], out_hw, scales)]


def resize_nearest_ref(x, shape, scales, align_corners):
    """Paddle's nearest_interp_v2: src = int(ratio * dst + 0.5) with align_corners, else int(ratio * dst)."""
    n, c, h, w = x.shape
    out_h, out_w = resize_out_size((h, w), shape, scales)
    ratio_h, ratio_w = resize_ratios(x, (out_h, out_w), scales, align_corners)
    y = np.zeros((n, c, out_h, out_w), F)
    for i in range(out_h):
        for j in range(out_w):
            if align_corners:
                si, sj = int(ratio_h * F(i) + F(0.5)), int(ratio_w * F(j) + F(0.5))
            else:
                si, sj = int(ratio_h * F(i)), int(ratio_w * F(j))
            y[:, :, i, j] = x[:, :, si, sj]
    return y


def linear_source(k, ratio, size, half_pixel):
    """Paddle's bilinear_interp_v2 per axis: src = ratio * (k + 0.5) - 0.5 (align_mode 0) or ratio * k,
    clamped at 0; pixels int(src) and min(int(src) + 1, size - 1), weight of the second src - int(src)."""
    src = ratio * (F(k) + F(0.5)) - F(0.5) if half_pixel else ratio * F(k)
    src = max(src, F(0))
    low = int(src)
    return low, min(low + 1, size - 1), F(src - F(low))


def resize_linear_ref(x, shape, scales, align_corners, align_mode):
    n, c, h, w = x.shape
    out_h, out_w = resize_out_size((h, w), shape, scales)
    ratio_h, ratio_w = resize_ratios(x, (out_h, out_w), scales, align_corners)
    half_pixel = align_mode == 0 and not align_corners
    y = np.zeros((n, c, out_h, out_w), F)
    for i in range(out_h):
        h0, h1, lh = linear_source(i, ratio_h, h, half_pixel)
        for j in range(out_w):
            w0, w1, lw = linear_source(j, ratio_w, w, half_pixel)
            top = x[:, :, h0, w0] * (1 - lw) + x[:, :, h0, w1] * lw
            bottom = x[:, :, h1, w0] * (1 - lw) + x[:, :, h1, w1] * lw
            y[:, :, i, j] = top * (1 - lh) + bottom * lh
    return y


def resize_inputs(x_operand, shape, scales, align_corners, align_mode=None, shape_op=i32):
    inputs = [
        x_operand,
        shape_op(shape) if shape is not None else EMPTY_I32,
        f32(scales) if scales is not None else EMPTY_F32,
        b8([align_corners]),
    ]
    if align_mode is not None:
        inputs.append(i32([align_mode]) if align_mode != "empty" else EMPTY_I32)
    return inputs


# (input H, W, shape, scales): up/down sampling by shape; by scales, including non-integer ones where
# Paddle's ratio 1 / scale differs from in / out (5 * 1.5 = 7.5 -> 7 rows, ratio 0.667 not 0.714); a
# 1-pixel output; shape and scales both given (shape sets the size, scales the ratio, as in Paddle).
RESIZES = {
    "up_shape": ((3, 4), [6, 9], None),
    "down_shape": ((5, 7), [3, 4], None),
    "one_pixel": ((4, 5), [1, 1], None),
    "scales_x2": ((3, 4), None, [2.0, 2.0]),
    "scales_fraction": ((5, 6), None, [1.5, 0.7]),
    "scales_down": ((6, 7), None, [0.5, 0.6]),
    "shape_and_scales": ((4, 5), [6, 7], [1.6, 1.5]),
    "shape_and_bad_scales": ((4, 5), [3, 8], [-1.0, -1.0]),
}


@pytest.mark.parametrize("case", list(RESIZES.values()), ids=list(RESIZES))
@pytest.mark.parametrize("align_corners", [False, True], ids=["half", "corners"])
def test_resize_nearest(case, align_corners):
    hw, shape, scales = case
    x = rand(2, 3, *hw, seed=1)
    # Nearest only copies elements: exact.
    check_op(
        OP.RESIZE_NEAREST,
        resize_inputs(In(x), shape, scales, align_corners),
        resize_nearest_ref(x, shape, scales, align_corners),
        **EXACT,
    )


@pytest.mark.parametrize("case", list(RESIZES.values()), ids=list(RESIZES))
@pytest.mark.parametrize(
    "align_corners,align_mode", [(False, 0), (False, 1), (True, 0), (True, 1)], ids=["half", "asym", "c0", "c1"]
)
def test_resize_linear(case, align_corners, align_mode):
    hw, shape, scales = case
    x = rand(2, 3, *hw, seed=2)
    expected = resize_linear_ref(x, shape, scales, align_corners, align_mode)
    check_op(OP.RESIZE_LINEAR, resize_inputs(In(x), shape, scales, align_corners, align_mode), expected, **BLEND)


def test_resize_nearest_int64_shape_and_unknown_batch():
    x = rand(2, 3, 3, 5, seed=3)
    inputs = resize_inputs(In(x, dims=[UNKNOWN, 3, 3, 5]), [7, 4], None, False, shape_op=i64)
    expected = resize_nearest_ref(x, [7, 4], None, False)
    check_op(OP.RESIZE_NEAREST, inputs, expected, outputs=[Out(dims=[UNKNOWN, 3, 7, 4])], **EXACT)


def test_resize_linear_align_mode_defaults_to_1():
    # An empty align_mode operand: Paddle's default align_mode 1 (asymmetric), not 0.
    x = rand(1, 2, 3, 4, seed=4)
    inputs = resize_inputs(In(x), [5, 7], None, False, "empty")
    check_op(OP.RESIZE_LINEAR, inputs, resize_linear_ref(x, [5, 7], None, False, 1), **BLEND)


@pytest.mark.parametrize("linear", [False, True], ids=["nearest", "linear"])
def test_resize_symbolic_spatial_dims_integer_scale(linear):
    # An UNKNOWN height/width with integer scales: the output is (2H, 3W), computed at run time.
    x = rand(1, 2, 3, 4, seed=5)
    dims = [1, 2, UNKNOWN, UNKNOWN]
    if linear:
        inputs = resize_inputs(In(x, dims=dims), None, [2.0, 3.0], False, 0)
        expected = resize_linear_ref(x, None, [2.0, 3.0], False, 0)
    else:
        inputs = resize_inputs(In(x, dims=dims), None, [2.0, 3.0], True)
        expected = resize_nearest_ref(x, None, [2.0, 3.0], True)
    op = OP.RESIZE_LINEAR if linear else OP.RESIZE_NEAREST
    check_op(op, inputs, expected, outputs=[Out(dims=[1, 2, UNKNOWN, UNKNOWN])], **BLEND)


# (shape, scales, align_corners, align_mode) of resizes compiled once for [?, 3, ?, ?] and run at
# RESIZE_SIZES: sizes from scales (integer and fractional, whose float32 product is truncated at run time)
# or from a static shape (the ratio in / out then follows the input's size).
DYNAMIC_RESIZES = {
    "scales_x2": (None, [2.0, 2.0], False, 1),
    "scales_fraction": (None, [1.5, 0.7], False, 0),
    "scales_fraction_corners": (None, [1.5, 0.7], True, 1),
    "static_shape": ([6, 9], None, False, 0),
    "static_shape_corners": ([6, 9], None, True, 1),
}
RESIZE_SIZES = [(1, 3, 4), (2, 5, 6), (1, 8, 1)]


@pytest.mark.parametrize("case", list(DYNAMIC_RESIZES.values()), ids=list(DYNAMIC_RESIZES))
@pytest.mark.parametrize("linear", [False, True], ids=["nearest", "linear"])
def test_resize_unknown_batch_and_spatial_sizes(case, linear):
    shape, scales, align_corners, align_mode = case
    dims = [UNKNOWN, 3, UNKNOWN, UNKNOWN]
    x0 = rand(1, 3, 3, 4)
    op = OP.RESIZE_LINEAR if linear else OP.RESIZE_NEAREST
    inputs = resize_inputs(In(x0, dims=dims), shape, scales, align_corners, align_mode if linear else None)
    out_dims = [UNKNOWN, 3, *(shape if shape is not None else [UNKNOWN, UNKNOWN])]
    compilation = compile_op(op, inputs, [Out(dims=out_dims)])
    cases = []
    for k, (n, h, w) in enumerate(RESIZE_SIZES):
        x = rand(n, 3, h, w, seed=40 + k)
        if linear:
            expected = resize_linear_ref(x, shape, scales, align_corners, align_mode)
        else:
            expected = resize_nearest_ref(x, shape, scales, align_corners)
        cases.append(([x], [expected]))
    check_sizes(compilation, cases, **(BLEND if linear else EXACT))


@pytest.mark.parametrize("linear", [False, True], ids=["nearest", "linear"])
def test_resize_quantized(linear):
    x, x_real = q8_input(rand(1, 2, 4, 5, seed=6), 0.02)
    if linear:
        inputs = resize_inputs(x, [7, 3], None, False, 0)
        expected = resize_linear_ref(x_real, [7, 3], None, False, 0)
    else:
        inputs = resize_inputs(x, None, [1.5, 2.0], True)
        expected = resize_nearest_ref(x_real, None, [1.5, 2.0], True)
    check_quantized(OP.RESIZE_LINEAR if linear else OP.RESIZE_NEAREST, inputs, expected, out_scale=0.02)


RESIZE_ERRORS = {
    "both_empty": (None, None, None, "'shape'"),
    "three_dims": ([2, 3, 4], None, None, "'shape'"),
    "zero_dim": ([0, 3], None, None, "'shape'"),
    "negative_scales": (None, [-2.0, 2.0], None, "'scales'"),
    "one_scale": (None, [2.0], None, "'scales'"),
    "empty_output": (None, [0.1, 2.0], None, "'scales'"),
    "align_mode_2": ([4, 4], None, 2, "'align_mode'"),
}


@pytest.mark.parametrize("case", list(RESIZE_ERRORS.values()), ids=list(RESIZE_ERRORS))
def test_resize_invalid(case):
    shape, scales, align_mode, operand = case
    x = rand(1, 1, 3, 4)
    inputs = resize_inputs(In(x), shape, scales, False, 1 if align_mode is None else align_mode)
    expect_error(lambda: run(OP.RESIZE_LINEAR, inputs, [(1, 1, 4, 4)]), "RESIZE_LINEAR", operand)


def test_resize_needs_4d_input():
    inputs = resize_inputs(In(rand(1, 3, 4)), [4, 4], None, False)
    expect_error(lambda: run(OP.RESIZE_NEAREST, inputs, [(1, 3, 4, 4)]), "RESIZE_NEAREST", "'input'", "4-D")
