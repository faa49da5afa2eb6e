"""RESIZE_NEAREST, RESIZE_LINEAR, GRID_SAMPLE, ROI_ALIGN, PRIOR_BOX, YOLO_BOX and NON_MAX_SUPPRESSION
against numpy references written with explicit loops from Paddle's CPU kernels (the spec leaves these
operations to Paddle's operators of the same name).  Index arithmetic is done in float32 as Paddle does
it, so that sampled positions agree exactly; only the blending arithmetic gets a tolerance.  The
references were checked once, outside this suite, against paddlepaddle 3.3.1 on every case below.
"""

import math

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
# Bilinear blends of 4 (resize, grid_sample) or up to 4 x 9 (roi_align) float32 products of inputs in
# [-2, 2], accumulated in a different order than the reference: a few float32 ulps.
BLEND = {"rtol": 1e-5, "atol": 1e-5}
EMPTY_F32 = Const(None, P.FLOAT32)
EMPTY_I32 = Const(None, P.INT32)


def run(op, inputs, shapes):
    return run_op(op, inputs, [Out() for _ in shapes], shapes)


# -- RESIZE_NEAREST / RESIZE_LINEAR ---------------------------------------------------------


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


# -- GRID_SAMPLE ----------------------------------------------------------------------------

MODE = nna.InterpolateMode
PAD = nna.PadMode


def grid_source(g, size, align_corners, padding):
    """Paddle's Unnormalize then Clip for one coordinate, in float32."""
    g = F(g)
    v = (g + F(1)) * F((size - 1) * 0.5) if align_corners else (g + F(1)) * F(size * 0.5) - F(0.5)
    if padding == "border":
        v = min(max(v, F(0)), F(size - 1))
    elif padding == "reflection":
        if align_corners:
            if size == 1:
                return F(0)
            span = F((size - 1) * 2)
            a = abs(v)
            extra = a - F(math.floor(a / span)) * span
            v = min(extra, span - extra)
        else:
            span = F(size * 2)
            a = abs(v + F(0.5))
            extra = a - F(math.floor(a / span)) * span
            v = min(extra, span - extra) - F(0.5)
            v = min(max(v, F(0)), F(size - 1))
    return F(v)


def grid_sample_ref(x, grid, align_corners, mode, padding):
    n, c, h, w = x.shape
    _, out_h, out_w, _ = grid.shape
    y = np.zeros((n, c, out_h, out_w), F)

    def at(b, yi, xi):
        """x[b, :, yi, xi], or 0 outside the input (Paddle's IsInBound)."""
        if 0 <= xi <= w - 1 and 0 <= yi <= h - 1:
            return x[b, :, int(yi), int(xi)].astype("float64")
        return np.zeros(c)

    for b in range(n):
        for i in range(out_h):
            for j in range(out_w):
                gx = grid_source(grid[b, i, j, 0], w, align_corners, padding)
                gy = grid_source(grid[b, i, j, 1], h, align_corners, padding)
                if mode == "nearest":
                    # std::nearbyint: halves to even.
                    y[b, :, i, j] = at(b, np.rint(gy), np.rint(gx))
                    continue
                x0, y0 = math.floor(gx), math.floor(gy)
                dw, de, dn, ds = gx - x0, x0 + 1 - gx, gy - y0, y0 + 1 - gy
                y[b, :, i, j] = (
                    at(b, y0, x0) * de * ds
                    + at(b, y0, x0 + 1) * dw * ds
                    + at(b, y0 + 1, x0) * de * dn
                    + at(b, y0 + 1, x0 + 1) * dw * dn
                )
    return y


PADDINGS = {"zeros": PAD.CONSTANT, "border": PAD.EDGE, "reflection": PAD.REFLECT}
MODES = {"bilinear": MODE.BILINEAR, "nearest": MODE.NEAREST}


def grid_inputs(x_operand, grid, align_corners, mode, pad_mode):
    return [x_operand, In(grid), b8([align_corners]), i32([int(mode)]), i32([int(pad_mode)])]


@pytest.mark.parametrize("mode", list(MODES), ids=list(MODES))
@pytest.mark.parametrize("padding", list(PADDINGS), ids=list(PADDINGS))
@pytest.mark.parametrize("align_corners", [False, True], ids=["edges", "corners"])
def test_grid_sample(mode, padding, align_corners):
    # A grid reaching past [-1, 1] so that every padding mode matters; output 5 x 6 from a 4 x 5 input.
    x = rand(2, 3, 4, 5, seed=10)
    grid = rand(2, 5, 6, 2, seed=11, low=-1.6, high=1.6)
    expected = grid_sample_ref(x, grid, align_corners, mode, padding)
    inputs = grid_inputs(In(x), grid, align_corners, MODES[mode], PADDINGS[padding])
    check_op(OP.GRID_SAMPLE, inputs, expected, **BLEND)


def test_grid_sample_nearest_rounds_halves_to_even():
    # Unaligned, W = 4: x = -1 -> -0.5 (rounds to -0: inside, not -1: outside); x = 0.5 -> 2.5 (to 2, not 3);
    # x = 0 -> 1.5 (to 2); x = 1 -> 3.5 (to 4: outside).  Along H = 2: y = 0.5 -> 1.0, y = -0.5 -> 0.0,
    # y = 0 -> 0.5 (to 0).  Paddle 3.3's kernel gives exactly these.
    x = rand(1, 2, 2, 4, seed=12)
    grid = np.array([[[[-1.0, 0.5], [0.5, 0.5], [0.0, -0.5], [1.0, 0.0], [-0.25, 0.0]]]], F)
    expected = grid_sample_ref(x, grid, False, "nearest", "zeros")
    assert expected[0, 0, 0, 0] == x[0, 0, 1, 0] and expected[0, 0, 0, 1] == x[0, 0, 1, 2]
    assert expected[0, 0, 0, 3] == 0 and expected[0, 0, 0, 4] == x[0, 0, 0, 1]
    check_op(OP.GRID_SAMPLE, grid_inputs(In(x), grid, False, MODE.NEAREST, PAD.CONSTANT), expected, **EXACT)


@pytest.mark.parametrize(
    "mode,pad_mode,ref",
    [(MODE.NONE, PAD.NONE, ("bilinear", "zeros")), (MODE.BILINEAR, PAD.REPLICATE, ("bilinear", "border"))],
    ids=["none_is_bilinear_zeros", "replicate_is_border"],
)
def test_grid_sample_mode_aliases(mode, pad_mode, ref):
    x = rand(1, 2, 3, 3, seed=13)
    grid = rand(1, 2, 4, 2, seed=14, low=-1.4, high=1.4)
    expected = grid_sample_ref(x, grid, True, *ref)
    check_op(OP.GRID_SAMPLE, grid_inputs(In(x), grid, True, mode, pad_mode), expected, **BLEND)


def test_grid_sample_unknown_dims_and_1_pixel_reflection():
    # Symbolic batch and grid size; a 1-pixel-wide input with aligned reflection (span 0 -> 0).
    x = rand(2, 2, 3, 1, seed=15)
    grid = rand(2, 3, 2, 2, seed=16, low=-1.5, high=1.5)
    expected = grid_sample_ref(x, grid, True, "bilinear", "reflection")
    inputs = [
        In(x, dims=[UNKNOWN, 2, 3, 1]),
        In(grid, dims=[UNKNOWN, UNKNOWN, UNKNOWN, 2]),
        b8([True]),
        i32([int(MODE.BILINEAR)]),
        i32([int(PAD.REFLECT)]),
    ]
    check_op(OP.GRID_SAMPLE, inputs, expected, outputs=[Out(dims=[UNKNOWN, 2, UNKNOWN, UNKNOWN])], **BLEND)


def test_grid_sample_quantized():
    x, x_real = q8_input(rand(1, 2, 4, 4, seed=17), 0.02)
    grid = rand(1, 3, 3, 2, seed=18, low=-1.2, high=1.2)
    expected = grid_sample_ref(x_real, grid, False, "bilinear", "border")
    check_quantized(OP.GRID_SAMPLE, grid_inputs(x, grid, False, MODE.BILINEAR, PAD.EDGE), expected, out_scale=0.02)


@pytest.mark.parametrize(
    "grid_shape,mode,pad_mode,operand",
    [
        ((1, 3, 3, 3), MODE.BILINEAR, PAD.CONSTANT, "'grid'"),
        ((2, 3, 3, 2), MODE.BILINEAR, PAD.CONSTANT, "'grid'"),
        ((1, 3, 3, 2), 3, PAD.CONSTANT, "'mode'"),
        ((1, 3, 3, 2), MODE.BILINEAR, 9, "'pad_mode'"),
    ],
    ids=["grid_last_dim", "grid_batch", "mode", "pad_mode"],
)
def test_grid_sample_invalid(grid_shape, mode, pad_mode, operand):
    inputs = grid_inputs(In(rand(1, 2, 3, 3)), rand(*grid_shape), False, mode, pad_mode)
    expect_error(lambda: run(OP.GRID_SAMPLE, inputs, [(1, 2, 3, 3)]), "GRID_SAMPLE", operand)


# -- ROI_ALIGN ------------------------------------------------------------------------------


def roi_align_ref(x, rois, batch_indices, pooled_h, pooled_w, sampling_ratio, spatial_scale, aligned):
    """Paddle's roi_align CPU kernel: float32 ROI geometry, bilinear samples at sub-bin centres."""
    _, c, h, w = x.shape
    y = np.zeros((len(rois), c, pooled_h, pooled_w), F)
    scale = F(spatial_scale)
    off = F(0.5) if aligned else F(0)
    for r, (x1, y1, x2, y2) in enumerate(rois):
        data = x[batch_indices[r]].astype("float64")
        xmin, ymin, xmax, ymax = F(x1) * scale - off, F(y1) * scale - off, F(x2) * scale - off, F(y2) * scale - off
        roi_w, roi_h = xmax - xmin, ymax - ymin
        if not aligned:
            roi_w, roi_h = max(roi_w, F(1)), max(roi_h, F(1))
        bin_h, bin_w = roi_h / F(pooled_h), roi_w / F(pooled_w)
        # Adaptive: ceil(bin size) samples, capped at H + 1 (W + 1): the converter's documented limit,
        # which every ROI inside the feature map stays under (Paddle has none).
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(min(roi_h / F(pooled_h), F(h + 1)))
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(min(roi_w / F(pooled_w), F(w + 1)))
        count = max(grid_h * grid_w, 1)
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                total = np.zeros(c)
                for iy in range(grid_h):
                    yy = ymin + F(ph) * bin_h + (F(iy) + F(0.5)) * bin_h / F(grid_h)
                    for ix in range(grid_w):
                        xx = xmin + F(pw) * bin_w + (F(ix) + F(0.5)) * bin_w / F(grid_w)
                        total += roi_bilinear(data, float(yy), float(xx), h, w)
                y[r, :, ph, pw] = total / count
    return y


def roi_bilinear(data, yy, xx, h, w):
    if yy < -1.0 or yy > h or xx < -1.0 or xx > w:
        return 0.0
    yy, xx = max(yy, 0.0), max(xx, 0.0)
    y_low, x_low = int(yy), int(xx)
    if y_low >= h - 1:
        y_low = y_high = h - 1
        yy = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= w - 1:
        x_low = x_high = w - 1
        xx = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = yy - y_low, xx - x_low
    hy, hx = 1 - ly, 1 - lx
    return (
        hy * hx * data[:, y_low, x_low]
        + hy * lx * data[:, y_low, x_high]
        + ly * hx * data[:, y_high, x_low]
        + ly * lx * data[:, y_high, x_high]
    )


# x1, y1, x2, y2 in image coordinates (spatial_scale maps them onto the 6 x 7 feature map): ordinary,
# thin (below one pixel), partly outside, reaching past the far edges, and a whole-image box.
ROIS = np.array(
    [[1.0, 1.5, 6.5, 5.0], [2.2, 0.3, 2.6, 4.8], [-3.0, -2.0, 4.0, 3.0], [4.0, 3.0, 14.0, 13.0], [0, 0, 12, 10]],
    F,
)
BATCH_INDICES = np.array([0, 1, 1, 0, 1], "int32")


@pytest.mark.parametrize("sampling_ratio", [2, 0, -1], ids=["ratio2", "adaptive0", "adaptive-1"])
@pytest.mark.parametrize("aligned", [False, True], ids=["unaligned", "aligned"])
@pytest.mark.parametrize("spatial_scale,pooled", [(1.0, (2, 3)), (0.5, (3, 2))], ids=["scale1", "scale0.5"])
def test_roi_align(sampling_ratio, aligned, spatial_scale, pooled):
    x = rand(2, 3, 6, 7, seed=20)
    expected = roi_align_ref(x, ROIS, BATCH_INDICES, *pooled, sampling_ratio, spatial_scale, aligned)
    inputs = [
        In(x),
        In(ROIS),
        In(BATCH_INDICES, P.INT32),
        i32([pooled[0]]),
        i32([pooled[1]]),
        i32([sampling_ratio]),
        f32([spatial_scale]),
        b8([aligned]),
    ]
    check_op(OP.ROI_ALIGN, inputs, expected, **BLEND)


def test_roi_align_unknown_roi_count_and_batch():
    x = rand(2, 2, 5, 5, seed=21)
    rois, batch = ROIS[:3] * F(0.4), BATCH_INDICES[:3]
    expected = roi_align_ref(x, rois, batch, 2, 2, -1, 1.0, False)
    inputs = [
        In(x, dims=[UNKNOWN, 2, 5, 5]),
        In(rois, dims=[UNKNOWN, 4]),
        In(batch, P.INT32, dims=[UNKNOWN]),
        i32([2]),
        i32([2]),
        i32([-1]),
        f32([1.0]),
        b8([False]),
    ]
    check_op(OP.ROI_ALIGN, inputs, expected, outputs=[Out(dims=[UNKNOWN, 2, 2, 2])], **BLEND)


def test_roi_align_clamps_batch_indices():
    # Indices outside [0, N) read the nearest image instead of memory past the input (Paddle rejects them).
    x = rand(2, 2, 6, 7, seed=23)
    inputs = [
        In(x),
        In(ROIS[:2]),
        In(np.array([-3, 9], "int32"), P.INT32),
        i32([2]),
        i32([2]),
        i32([2]),
        f32([1.0]),
        b8([False]),
    ]
    expected = roi_align_ref(x, ROIS[:2], [0, 1], 2, 2, 2, 1.0, False)
    check_op(OP.ROI_ALIGN, inputs, expected, **BLEND)


def test_roi_align_quantized():
    x, x_real = q8_input(rand(2, 2, 6, 7, seed=22), 0.02)
    expected = roi_align_ref(x_real, ROIS, BATCH_INDICES, 2, 2, 2, 0.5, True)
    inputs = [x, In(ROIS), In(BATCH_INDICES, P.INT32), i32([2]), i32([2]), i32([2]), f32([0.5]), b8([True])]
    check_quantized(OP.ROI_ALIGN, inputs, expected, out_scale=0.02)


def _roi_inputs(x, rois, sampling_ratio, pooled=2):
    batch = np.zeros(len(rois), "int32")
    return [In(x), In(rois), In(batch, P.INT32), i32([pooled]), i32([pooled]), i32([sampling_ratio]), f32([1.0]),
            b8([False])]  # fmt: skip


def test_roi_align_adaptive_sampling_of_a_huge_roi_is_capped():
    """sampling_ratio 0 on a 1e6 x 1e6 ROI asked for 2.5e11 samples per bin (hours for a 4 x 4 input);
    capped at (H + 1) x (W + 1) it takes milliseconds.  The reference applies the same cap."""
    x = rand(1, 2, 4, 4, seed=24)
    rois = np.array([[0.0, 0.0, 1e6, 1e6], [0.5, 0.5, 3.0, 2.5]], F)
    expected = roi_align_ref(x, rois, [0, 0], 2, 2, 0, 1.0, False)
    check_op(OP.ROI_ALIGN, _roi_inputs(x, rois, 0), expected, **BLEND)


def test_roi_align_adaptive_sampling_of_non_finite_rois():
    """inf and NaN coordinates: the sample count is the cap (not an undefined float-to-int cast) and
    the result is the same on every run."""
    x = rand(1, 2, 4, 4, seed=25)
    rois = np.array([[0.0, 0.0, np.inf, 2.0], [np.nan, 0.0, 2.0, 2.0], [-np.inf, -np.inf, np.inf, np.inf]], F)
    first = run(OP.ROI_ALIGN, _roi_inputs(x, rois, 0), [(3, 2, 2, 2)])[0]
    again = run(OP.ROI_ALIGN, _roi_inputs(x, rois, 0), [(3, 2, 2, 2)])[0]
    assert first.tobytes() == again.tobytes()


def test_roi_align_sampling_ratio_above_the_limit():
    """A fixed sampling_ratio of 2^30 would average 2^60 samples per bin: refused, naming the limit."""
    inputs = _roi_inputs(rand(1, 2, 4, 4), np.zeros((1, 4), F), 1 << 30)
    expect_error(lambda: run(OP.ROI_ALIGN, inputs, [(1, 2, 2, 2)]), "ROI_ALIGN", "'sampling_ratio'", "256")


ROI_ERRORS = {
    "rois_5_columns": (np.zeros((2, 5), F), np.zeros(2, "int32"), 2, 0.5, "'rois'"),
    "indices_mismatch": (np.zeros((2, 4), F), np.zeros(3, "int32"), 2, 0.5, "'batch_indices'"),
    "zero_height": (np.zeros((2, 4), F), np.zeros(2, "int32"), 0, 0.5, "'output_height'"),
    "zero_scale": (np.zeros((2, 4), F), np.zeros(2, "int32"), 2, 0.0, "'spatial_scale'"),
}


@pytest.mark.parametrize("case", list(ROI_ERRORS.values()), ids=list(ROI_ERRORS))
def test_roi_align_invalid(case):
    rois, batch, pooled_h, scale, operand = case
    inputs = [
        In(rand(1, 2, 4, 4)),
        In(rois),
        In(batch, P.INT32),
        i32([pooled_h]),
        i32([2]),
        i32([1]),
        f32([scale]),
        b8([False]),
    ]
    expect_error(lambda: run(OP.ROI_ALIGN, inputs, [(2, 2, 2, 2)]), "ROI_ALIGN", operand)


# -- PRIOR_BOX ------------------------------------------------------------------------------


def prior_box_ref(feat_hw, img_hw, min_sizes, max_sizes, ratios, variances, flip, clip, steps, offset, mm_order):
    """Paddle's prior_box CPU kernel, one cell at a time."""
    height, width = feat_hw
    img_h, img_w = img_hw
    expanded = [1.0]
    for ar in ratios:
        if all(abs(ar - e) >= 1e-6 for e in expanded):
            expanded.append(ar)
            if flip:
                expanded.append(1.0 / ar)
    step_w, step_h = steps
    if step_w == 0 or step_h == 0:
        step_w, step_h = img_w / width, img_h / height
    cells = []
    for h in range(height):
        row = []
        for w in range(width):
            cx, cy = (w + offset) * step_w, (h + offset) * step_h
            priors = []

            def box(half_w, half_h, cx=cx, cy=cy, priors=priors):
                priors.append(
                    [(cx - half_w) / img_w, (cy - half_h) / img_h, (cx + half_w) / img_w, (cy + half_h) / img_h]
                )

            for s, min_size in enumerate(min_sizes):
                if mm_order:
                    box(min_size / 2, min_size / 2)
                    if max_sizes:
                        box(*[math.sqrt(min_size * max_sizes[s]) / 2] * 2)
                    for ar in expanded:
                        if abs(ar - 1.0) >= 1e-6:
                            box(min_size * math.sqrt(ar) / 2, min_size / math.sqrt(ar) / 2)
                else:
                    for ar in expanded:
                        box(min_size * math.sqrt(ar) / 2, min_size / math.sqrt(ar) / 2)
                    if max_sizes:
                        box(*[math.sqrt(min_size * max_sizes[s]) / 2] * 2)
            row.append(priors)
        cells.append(row)
    boxes = np.array(cells, "float64")
    if clip:
        boxes = np.clip(boxes, 0, 1)
    return boxes.astype(F), np.broadcast_to(np.array(variances, F), boxes.shape).copy()


def prior_inputs(feat, img, min_sizes, max_sizes, ratios, variances, flip, clip, steps, offset, mm_order):
    inputs = [
        In(feat),
        In(img),
        f32(min_sizes),
        f32(max_sizes) if max_sizes else EMPTY_F32,
        f32(ratios),
        f32(variances),
        b8([flip]),
        b8([clip]),
        f32([steps[0]]),
        f32([steps[1]]),
    ]
    if offset is not None:
        inputs.append(f32([offset]))
    if mm_order is not None:
        inputs.append(b8([mm_order]))
    return inputs


VARIANCES = [0.1, 0.1, 0.2, 0.2]
# (min_sizes, max_sizes, aspect_ratios, flip, clip, (step_w, step_h), offset, min_max_aspect_ratios_order);
# None for offset/order leaves the operand out (defaults 0.5 and false).  2.0 is repeated and 1.0 listed
# so that the duplicate removal shows.
PRIORS = {
    "defaults": ([4.0], [], [2.0], False, False, (0.0, 0.0), None, None),
    "flip_clip_max": ([4.0, 8.0], [6.0, 12.0], [2.0, 1.0, 2.0, 3.0], True, True, (0.0, 0.0), 0.5, False),
    "caffe_order": ([4.0, 8.0], [6.0, 12.0], [2.0, 3.0], True, False, (0.0, 0.0), 0.5, True),
    "explicit_steps": ([3.5], [7.0], [0.5], False, True, (3.0, 4.0), 0.3, True),
}


@pytest.mark.parametrize("case", list(PRIORS.values()), ids=list(PRIORS))
def test_prior_box(case):
    min_sizes, max_sizes, ratios, flip, clip, steps, offset, mm_order = case
    feat, img = rand(1, 2, 3, 4, seed=30), rand(1, 3, 12, 20, seed=31)
    expected = prior_box_ref(
        (3, 4),
        (12, 20),
        min_sizes,
        max_sizes,
        ratios,
        VARIANCES,
        flip,
        clip,
        steps,
        0.5 if offset is None else offset,
        bool(mm_order),
    )
    inputs = prior_inputs(feat, img, min_sizes, max_sizes, ratios, VARIANCES, flip, clip, steps, offset, mm_order)
    # Coordinates in [-1, 2] computed in float32 by both sides, in a slightly different order: 1e-6.
    check_op(OP.PRIOR_BOX, inputs, list(expected), rtol=1e-6, atol=1e-6)


PRIOR_ERRORS = {
    "three_variances": ([4.0], [], [0.1, 0.1, 0.2], "'variances'"),
    "max_below_min": ([4.0], [3.0], VARIANCES, "'max_sizes'"),
    "max_count": ([4.0, 5.0], [6.0], VARIANCES, "'max_sizes'"),
    "zero_min": ([0.0], [], VARIANCES, "'min_sizes'"),
}


@pytest.mark.parametrize("case", list(PRIOR_ERRORS.values()), ids=list(PRIOR_ERRORS))
def test_prior_box_invalid(case):
    min_sizes, max_sizes, variances, operand = case
    inputs = prior_inputs(
        rand(1, 2, 3, 4),
        rand(1, 3, 12, 20),
        min_sizes,
        max_sizes,
        [2.0],
        variances,
        False,
        False,
        (0.0, 0.0),
        None,
        None,
    )
    expect_error(lambda: run(OP.PRIOR_BOX, inputs, [(3, 4, 2, 4)] * 2), "PRIOR_BOX", operand)


def test_prior_box_needs_static_feature_size():
    inputs = prior_inputs(
        rand(1, 2, 3, 4), rand(1, 3, 12, 20), [4.0], [], [2.0], VARIANCES, False, False, (0.0, 0.0), None, None
    )
    inputs[0] = In(inputs[0].value, dims=[1, 2, UNKNOWN, 4])
    outputs = [Out(dims=[UNKNOWN, 4, 2, 4]), Out(dims=[UNKNOWN, 4, 2, 4])]
    expect_error(
        lambda: run_op(OP.PRIOR_BOX, inputs, outputs, [(3, 4, 2, 4)] * 2),
        "PRIOR_BOX",
        "'input'",
        code=nna.ResultCode.FEATURE_NOT_SUPPORTED,
    )


# -- YOLO_BOX -------------------------------------------------------------------------------


def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def yolo_box_ref(x, imgsize, anchors, class_num, conf_thresh, downsample, clip_bbox, scale_x_y, iou_aware, iou_f):
    """Paddle's yolo_box CPU kernel: boxes and scores stay 0 where conf < conf_thresh."""
    n, _, h, w = x.shape
    num_anchors = len(anchors) // 2
    boxes = np.zeros((n, num_anchors * h * w, 4))
    scores = np.zeros((n, num_anchors * h * w, class_num))
    bias = -0.5 * (scale_x_y - 1.0)
    for b in range(n):
        img_h, img_w = imgsize[b]
        base = num_anchors if iou_aware else 0  # the IoU channels come first
        for a in range(num_anchors):
            ch = base + a * (5 + class_num)
            for i in range(h):
                for j in range(w):
                    conf = sigmoid(x[b, ch + 4, i, j])
                    if iou_aware:
                        conf = conf ** (1 - iou_f) * sigmoid(x[b, a, i, j]) ** iou_f
                    if conf < conf_thresh:
                        continue
                    cx = (j + sigmoid(x[b, ch, i, j]) * scale_x_y + bias) * img_w / w
                    cy = (i + sigmoid(x[b, ch + 1, i, j]) * scale_x_y + bias) * img_h / h
                    bw = math.exp(x[b, ch + 2, i, j]) * anchors[2 * a] * img_w / (downsample * w)
                    bh = math.exp(x[b, ch + 3, i, j]) * anchors[2 * a + 1] * img_h / (downsample * h)
                    box = [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]
                    if clip_bbox:
                        box = [max(box[0], 0), max(box[1], 0), min(box[2], img_w - 1), min(box[3], img_h - 1)]
                    k = a * h * w + i * w + j
                    boxes[b, k] = box
                    scores[b, k] = [conf * sigmoid(x[b, ch + 5 + c, i, j]) for c in range(class_num)]
    return boxes.astype(F), scores.astype(F)


def yolo_inputs(x, imgsize, anchors, class_num, conf, down, clip_bbox, scale_x_y, iou_aware, iou_f):
    return [
        In(x),
        In(imgsize, P.INT32),
        i32(anchors),
        i32([class_num]),
        f32([conf]),
        i32([down]),
        b8([clip_bbox]),
        f32([scale_x_y]),
        b8([iou_aware]),
        f32([iou_f]),
    ]


ANCHORS = [10, 13, 16, 30]
IMGSIZE = np.array([[40, 56], [33, 21]], "int32")
# (class_num, conf_thresh, clip_bbox, scale_x_y, iou_aware, iou_aware_factor)
YOLOS = {
    "plain": (3, 0.3, True, 1.0, False, 0.5),
    "no_clip_scaled": (2, 0.5, False, 1.2, False, 0.5),
    "iou_aware": (1, 0.4, True, 1.05, True, 0.3),
    "keep_all": (2, 0.0, True, 1.0, True, 0.5),
}


@pytest.mark.parametrize("case", list(YOLOS.values()), ids=list(YOLOS))
def test_yolo_box(case):
    class_num, conf, clip_bbox, scale_x_y, iou_aware, iou_f = case
    channels = 2 * (5 + class_num + (1 if iou_aware else 0))
    x = rand(2, channels, 3, 4, seed=40, low=-3, high=3)
    expected = yolo_box_ref(x, IMGSIZE, ANCHORS, class_num, conf, 8, clip_bbox, scale_x_y, iou_aware, iou_f)
    inputs = yolo_inputs(x, IMGSIZE, ANCHORS, class_num, conf, 8, clip_bbox, scale_x_y, iou_aware, iou_f)
    # Pixel coordinates up to ~100 from exp/sigmoid in float32 against a float64 reference: ~1e-5 relative.
    check_op(OP.YOLO_BOX, inputs, list(expected), rtol=1e-5, atol=1e-4)


def test_yolo_box_unknown_batch_and_empty_defaults():
    # Empty clip_bbox / scale_x_y / iou_aware / iou_aware_factor take the header's defaults (true, 1, false, 0.5).
    x = rand(2, 2 * 7, 2, 3, seed=41, low=-3, high=3)
    expected = yolo_box_ref(x, IMGSIZE, ANCHORS, 2, 0.3, 16, True, 1.0, False, 0.5)
    inputs = yolo_inputs(x, IMGSIZE, ANCHORS, 2, 0.3, 16, True, 1.0, False, 0.5)
    inputs[0] = In(x, dims=[UNKNOWN, 14, 2, 3])
    inputs[1] = In(IMGSIZE, P.INT32, dims=[UNKNOWN, 2])
    inputs[6:] = [Const(None, P.BOOL8), EMPTY_F32, Const(None, P.BOOL8), EMPTY_F32]
    outputs = [Out(dims=[UNKNOWN, 12, 4]), Out(dims=[UNKNOWN, 12, 2])]
    check_op(OP.YOLO_BOX, inputs, list(expected), outputs=outputs, rtol=1e-5, atol=1e-4)


YOLO_ERRORS = {
    "channels": (15, ANCHORS, 2, 8, "'input'"),
    "odd_anchors": (14, [10, 13, 16], 2, 8, "'anchors'"),
    "class_num": (14, ANCHORS, 0, 8, "'class_num'"),
    "downsample": (14, ANCHORS, 2, 0, "'downsample_ratio'"),
}


@pytest.mark.parametrize("case", list(YOLO_ERRORS.values()), ids=list(YOLO_ERRORS))
def test_yolo_box_invalid(case):
    channels, anchors, class_num, down, operand = case
    inputs = yolo_inputs(rand(2, channels, 2, 2), IMGSIZE, anchors, class_num, 0.3, down, True, 1.0, False, 0.5)
    expect_error(lambda: run(OP.YOLO_BOX, inputs, [(2, 8, 4), (2, 8, 2)]), "YOLO_BOX", operand)


# -- NON_MAX_SUPPRESSION --------------------------------------------------------------------


def jaccard(b1, b2, normalized):
    """Paddle's JaccardOverlap: 0 for disjoint boxes; +1 on each side unless normalized."""
    if b2[0] > b1[2] or b2[2] < b1[0] or b2[1] > b1[3] or b2[3] < b1[1]:
        return F(0)
    norm = F(0 if normalized else 1)

    def area(b):
        return F(0) if b[2] < b[0] or b[3] < b[1] else (b[2] - b[0] + norm) * (b[3] - b[1] + norm)

    inter = (min(b1[2], b2[2]) - max(b1[0], b2[0]) + norm) * (min(b1[3], b2[3]) - max(b1[1], b2[1]) + norm)
    return inter / (area(b1) + area(b2) - inter)


def nms_ref(boxes, scores, background, score_thr, nms_top_k, nms_thr, eta, keep_top_k, normalized):
    """Paddle's multiclass_nms3 (3-D case): rows [label, score, box], counts per image, index n * M + box."""
    num_images, num_classes, m = scores.shape
    rows, index, counts = [], [], []
    for n in range(num_images):
        selected = {}
        for c in range(num_classes):
            if c == background:
                continue
            candidates = [(scores[n, c, i], i) for i in range(m) if scores[n, c, i] > score_thr]
            candidates.sort(key=lambda p: -p[0])  # stable: ties keep index order
            if nms_top_k > -1:
                candidates = candidates[:nms_top_k]
            kept, thr = [], F(nms_thr)
            for _, i in candidates:
                if all(jaccard(boxes[n, i], boxes[n, j], normalized) <= thr for j in kept):
                    kept.append(i)
                    if eta < 1 and thr > 0.5:
                        thr = F(thr * F(eta))
            selected[c] = kept
        if keep_top_k > -1 and sum(len(v) for v in selected.values()) > keep_top_k:
            pairs = [(scores[n, c, i], c, i) for c in sorted(selected) for i in selected[c]]
            pairs.sort(key=lambda p: -p[0])
            selected = {}
            for _, c, i in pairs[:keep_top_k]:
                selected.setdefault(c, []).append(i)
        count = 0
        for c in sorted(selected):
            for i in selected[c]:
                rows.append([c, scores[n, c, i], *boxes[n, i]])
                index.append(n * m + i)
                count += 1
        counts.append(count)
    return np.array(rows, F).reshape(-1, 6), np.array(counts, "int32"), np.array(index, "int32")


def nms_data(n, m, c, seed, pixels=False, ties=False):
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 1, (n, m, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(0.05, 0.6, (n, m, 2))], -1).astype(F)
    scores = rng.uniform(0, 1, (n, c, m)).astype(F)
    if ties:
        scores = (np.round(scores * 4) / 4).astype(F)
    return boxes * F(20) if pixels else boxes, scores


def nms_inputs(boxes, scores, bg, score_thr, top_k, nms_thr, eta, keep, normalized, return_index=True, dims=None):
    return [
        In(boxes, dims=dims and dims[0]),
        In(scores, dims=dims and dims[1]),
        EMPTY_I32,
        i32([bg]),
        f32([score_thr]),
        i32([top_k]),
        f32([nms_thr]),
        f32([eta]),
        i32([keep]),
        b8([normalized]),
        b8([return_index]),
    ]


NMS_OUTS = [Out(dims=[UNKNOWN, 6]), Out(P.INT32), Out(P.INT32, dims=[UNKNOWN])]
# (N, M, C, data seed, pixel boxes, tied scores), (background, score_threshold, nms_top_k, nms_threshold,
# nms_eta, keep_top_k, normalized)
NMS_CASES = {
    "plain": ((2, 10, 3, 50, False, False), (0, 0.2, -1, 0.5, 1.0, -1, True)),
    "all_classes_top_k": ((2, 10, 3, 51, False, False), (-1, 0.1, 4, 0.3, 1.0, -1, True)),
    "keep_top_k_ties": ((3, 9, 4, 52, False, True), (1, 0.0, -1, 0.5, 1.0, 5, True)),
    "adaptive_eta": ((1, 12, 2, 53, False, False), (-1, 0.0, -1, 0.7, 0.8, -1, True)),
    "pixel_boxes": ((2, 8, 3, 54, True, False), (0, 0.3, 6, 0.4, 1.0, 3, False)),
}


@pytest.mark.parametrize("case", list(NMS_CASES.values()), ids=list(NMS_CASES))
def test_non_max_suppression(case):
    (n, m, c, seed, pixels, ties), params = case
    boxes, scores = nms_data(n, m, c, seed, pixels, ties)
    expected = nms_ref(boxes, scores, *params)
    assert len(expected[0]) > 0
    # Rows copy inputs (labels, scores, boxes) and the selection is exact integer logic: exact.
    check_op(OP.NON_MAX_SUPPRESSION, nms_inputs(boxes, scores, *params), list(expected), outputs=NMS_OUTS, **EXACT)


def test_non_max_suppression_nothing_kept_and_unknown_dims():
    # A score threshold above every score: no row at all ([0, 6]), zero counts; symbolic N and M.
    boxes, scores = nms_data(2, 5, 2, 55)
    expected = nms_ref(boxes, scores, 0, 1.5, -1, 0.5, 1.0, -1, True)
    assert expected[0].shape == (0, 6)
    dims = [[UNKNOWN, UNKNOWN, 4], [UNKNOWN, 2, UNKNOWN]]
    outputs = [Out(dims=[UNKNOWN, 6]), Out(P.INT32, dims=[UNKNOWN]), Out(P.INT32, dims=[UNKNOWN])]
    inputs = nms_inputs(boxes, scores, 0, 1.5, -1, 0.5, 1.0, -1, True, dims=dims)
    check_op(OP.NON_MAX_SUPPRESSION, inputs, list(expected), outputs=outputs, **EXACT)


def test_non_max_suppression_without_index():
    boxes, scores = nms_data(2, 6, 2, 56)
    expected = nms_ref(boxes, scores, -1, 0.2, -1, 0.5, 1.0, -1, True)[:2]
    inputs = nms_inputs(boxes, scores, -1, 0.2, -1, 0.5, 1.0, -1, True, return_index=False)
    check_op(OP.NON_MAX_SUPPRESSION, inputs, list(expected), outputs=NMS_OUTS[:2], **EXACT)


@pytest.mark.parametrize(
    "boxes_shape,scores_shape,change,operand,code",
    [
        ((2, 5, 4), (2, 3, 6), None, "'scores'", nna.ResultCode.INVALID_PARAMETER),
        ((2, 5, 5), (2, 3, 5), None, "'bboxes'", nna.ResultCode.INVALID_PARAMETER),
        ((2, 5, 8), (2, 3, 5), None, "'bboxes'", nna.ResultCode.FEATURE_NOT_SUPPORTED),
        ((2, 5, 4), (2, 3, 5), (2, i32([5, 5])), "'rois_num'", nna.ResultCode.FEATURE_NOT_SUPPORTED),
        ((2, 5, 4), (2, 3, 5), (7, f32([0.0])), "'nms_eta'", nna.ResultCode.INVALID_PARAMETER),
    ],
    ids=["box_count", "box_size", "polygons", "rois_num", "eta"],
)
def test_non_max_suppression_invalid(boxes_shape, scores_shape, change, operand, code):
    inputs = nms_inputs(rand(*boxes_shape), rand(*scores_shape), 0, 0.1, -1, 0.5, 1.0, -1, True)
    if change is not None:
        inputs[change[0]] = change[1]
    fn = lambda: run_op(OP.NON_MAX_SUPPRESSION, inputs, NMS_OUTS, [(1, 6), (2,), (1,)])  # noqa: E731
    expect_error(fn, "NON_MAX_SUPPRESSION", operand, code=code)


def test_non_max_suppression_return_index_needs_output():
    inputs = nms_inputs(rand(1, 4, 4), rand(1, 2, 4), 0, 0.1, -1, 0.5, 1.0, -1, True, return_index=True)
    fn = lambda: run_op(OP.NON_MAX_SUPPRESSION, inputs, NMS_OUTS[:2], [(1, 6), (1,)])  # noqa: E731
    expect_error(fn, "NON_MAX_SUPPRESSION", "'return_index'")
