"""ROI_ALIGN against a numpy reference written with explicit loops from Paddle's roi_align CPU kernel
(the spec leaves the operation to Paddle's operator of the same name).  Index arithmetic is done in
float32 as Paddle does it, so that sampled positions agree exactly; only the blending arithmetic gets a
tolerance.  The reference was checked once, outside this suite, against paddlepaddle 3.3.1 on every case
below.
"""

import math

import numpy as np
import pytest
from oputil import (
    UNKNOWN,
    In,
    Out,
    P,
    b8,
    check_op,
    check_quantized,
    expect_error,
    f32,
    i32,
    q8_input,
    rand,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType
F = np.float32
# Up to 4 x 9 bilinear float32 products of inputs in [-2, 2] per bin, accumulated in a different order
# than the reference: a few float32 ulps.
BLEND = {"rtol": 1e-5, "atol": 1e-5}


def run(op, inputs, shapes):
    return run_op(op, inputs, [Out() for _ in shapes], shapes)


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


@pytest.mark.parametrize("bad", [-3, 9, 2])
def test_roi_align_refuses_batch_indices_outside_the_batch(bad):
    """A batch index read at execution outside [0, N) fails naming the operation, the operand, the value
    and the range (numpy's x[batch_indices[r]] refuses it too; onnxruntime and Paddle reject it), instead
    of reading the nearest image."""
    x = rand(2, 2, 6, 7, seed=23)
    with pytest.raises(IndexError):
        x[[0, bad]]  # the reference refuses it too
    inputs = [In(x), In(ROIS[:2]), In(np.array([0, bad], "int32"), P.INT32), i32([2]), i32([2]), i32([2]), f32([1.0])]
    expect_error(
        lambda: run_op(OP.ROI_ALIGN, [*inputs, b8([False])], [Out(dims=[2, 2, 2, 2])], [(2, 2, 2, 2)]),
        "ROI_ALIGN",
        "'batch_indices'",
        f"batch index {bad} is out of range [0, 2)",
        code=nna.ResultCode.INVALID_DIMENSIONS,
    )


def test_roi_align_batch_indices_in_range_are_read():
    x = rand(2, 2, 6, 7, seed=23)
    inputs = [In(x), In(ROIS[:2]), In(np.array([1, 0], "int32"), P.INT32), i32([2]), i32([2]), i32([2]), f32([1.0])]
    expected = roi_align_ref(x, ROIS[:2], [1, 0], 2, 2, 2, 1.0, False)
    check_op(OP.ROI_ALIGN, [*inputs, b8([False])], expected, **BLEND)


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
