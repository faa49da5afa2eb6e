"""ROI_ALIGN, as Paddle's roi_align CPU kernel computes it.

Relax's ``roi_align`` takes [batch, x1, y1, x2, y2] rows and has no ``aligned``, so a TE compute writes
Paddle's formulas in float32 (two reductions: the sum over each bin's samples, then their average).
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import F32, dtype_of, f32
from nnadapter_tvm.op_converters.helpers import rank4
from nnadapter_tvm.op_converters.indexing import _worst_index
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.runtime.runtime_check import VALUE, data_checks_enabled
from nnadapter_tvm.types import OperationType as O

# A fixed sampling_ratio above this is refused: 256^2 = 65536 samples per bin is already far beyond
# any model's (Paddle's detectors use 0 or 2), and 2^30 would run for days.
MAX_SAMPLING_RATIO = 256


@converter(O.ROI_ALIGN)
def roi_align(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R], output_height,
    output_width, sampling_ratio, spatial_scale, aligned -> output [R, C, output_height, output_width].

    Each ROI, scaled by spatial_scale (and shifted by -0.5 when aligned; unaligned ROIs are at least
    1 x 1), is cut into output_height x output_width bins; each bin averages sampling_ratio^2 bilinear
    samples (sampling_ratio <= 0: ceil(roi_height / output_height) x ceil(roi_width / output_width),
    read from the ROI at run time, capped at (H + 1) x (W + 1): exact for every ROI inside the feature
    map, whose bins are at most H + 1 by W + 1 pixels, while a huge, infinite or NaN ROI is sampled
    coarser rather than for hours) at the sub-bin centres; a sample beyond [-1, H] x [-1, W] counts 0,
    one inside is clamped to the border.  A fixed sampling_ratio above 256 is refused.  Batch indices
    must lie in [0, N) (Paddle and onnxruntime reject others): constant ones are checked at compile time,
    ones read at execution there, by one reduction over them (their minimum if negative, else their
    maximum), an index out of range failing with INVALID_DIMENSIONS naming it and the range (the kernel
    still clamps its reads, as the check may run after it).  The output's first dimension is R, the number of
    ROIs (the spec writes N).
    ``batch_indices`` holds one image index per ROI, as the spec says (Paddle's ``boxes_num``, a count
    per image, must be expanded to it).

    Reference: Paddle's paddle.vision.ops.roi_align (roi_align CPU kernel, with ``aligned``).
    """
    return roi_bins(args, _sum_of_terms, te.sum, _average, ("roi_align_sum", "roi_align"))


def _sum_of_terms(a: tirx.PrimExpr, b: tirx.PrimExpr, c: tirx.PrimExpr, d: tirx.PrimExpr) -> tirx.PrimExpr:
    return a + b + c + d  # the bilinear sample: its four weighted corner terms added


def _average(total: tirx.PrimExpr, count: tirx.PrimExpr) -> tirx.PrimExpr:
    return total / tirx.max(count, 1).astype(F32)  # a bin of no samples keeps its sum, 0


def roi_bins(
    args: OpArgs,
    combine: Callable[[tirx.PrimExpr, tirx.PrimExpr, tirx.PrimExpr, tirx.PrimExpr], tirx.PrimExpr],
    reduce: Callable,
    finish: Callable[[tirx.PrimExpr, tirx.PrimExpr], tirx.PrimExpr],
    names: tuple[str, str],
) -> relax.Expr:
    """ROI_ALIGN's operands, checks, bins and sampling grid, shared by ROI_ALIGN and ROI_ALIGN_ONNX.

    Each sample at (y, x) is ``combine`` of its four bilinear corner terms (hy * hx * v(y0, x0), hy * lx *
    v(y0, x1), ly * hx * v(y1, x0), ly * lx * v(y1, x1)), 0 outside [-1, H] x [-1, W]; ``reduce`` (te.sum,
    te.max) folds a bin's samples into the compute ``names[0]``, and ``finish(value, sample_count)`` turns
    that into the output, the compute ``names[1]``.
    """
    x, rois, batch = args.tensor("input"), args.tensor("rois"), args.raw_tensor("batch_indices")
    rank4(args, x, "input")
    rois_shape, batch_shape = args.shape(rois), args.shape(batch)
    if len(rois_shape) != 2 or rois_shape[1] != 4:
        args.fail(f"must have shape [R, 4], got {rois_shape}", "rois")
    if len(batch_shape) != 1 or (
        isinstance(batch_shape[0], int) and isinstance(rois_shape[0], int) and batch_shape[0] != rois_shape[0]
    ):
        args.fail(
            f"must have shape [R] = [{rois_shape[0]}] (one batch index per ROI), got {batch_shape}", "batch_indices"
        )
    pooled_h, pooled_w = args.int("output_height"), args.int("output_width")
    for name, v in (("output_height", pooled_h), ("output_width", pooled_w)):
        if v <= 0:
            args.fail(f"must be positive, got {v}", name)
    sampling_ratio = args.int("sampling_ratio", -1)
    if sampling_ratio > MAX_SAMPLING_RATIO:
        args.fail(
            f"sampling_ratio {sampling_ratio} is above the {MAX_SAMPLING_RATIO} supported "
            f"(each bin would average {sampling_ratio}^2 samples)",
            "sampling_ratio",
        )
    spatial_scale = args.float("spatial_scale", 1.0)
    if not spatial_scale > 0:
        args.fail(f"must be positive, got {spatial_scale}", "spatial_scale")
    aligned = args.bool("aligned", False)
    _check_batch_indices(args, batch, args.shape(x)[0], batch_shape[0])

    def compute(data: te.Tensor, boxes: te.Tensor, batch_index: te.Tensor) -> te.Tensor:
        num, channels, h, w = data.shape
        count_rois = boxes.shape[0]
        zero, one, half = f32(0.0), f32(1.0), f32(0.5)
        offset = half if aligned else zero
        scale = f32(spatial_scale)

        def roi(r):
            xmin, ymin = boxes[r, 0] * scale - offset, boxes[r, 1] * scale - offset
            xmax, ymax = boxes[r, 2] * scale - offset, boxes[r, 3] * scale - offset
            roi_w, roi_h = xmax - xmin, ymax - ymin
            if not aligned:
                roi_w, roi_h = tirx.max(roi_w, one), tirx.max(roi_h, one)
            return xmin, ymin, roi_w, roi_h

        def grid_size(r):
            if sampling_ratio > 0:
                return tirx.const(sampling_ratio, dtype_of(r)), tirx.const(sampling_ratio, dtype_of(r))
            _, _, roi_w, roi_h = roi(r)
            return _adaptive_samples(roi_h / f32(pooled_h), h, r), _adaptive_samples(roi_w / f32(pooled_w), w, r)

        def bilinear(b, ch, y, x):
            outside = tirx.any(y < f32(-1.0), y > f32(h), x < f32(-1.0), x > f32(w))
            y, x = tirx.max(y, zero), tirx.max(x, zero)
            y_low, x_low = y.astype(dtype_of(b)), x.astype(dtype_of(b))
            y_edge, x_edge = y_low >= h - 1, x_low >= w - 1
            y_low = tirx.Select(y_edge, h - 1, y_low)
            x_low = tirx.Select(x_edge, w - 1, x_low)
            y_high = tirx.Select(y_edge, h - 1, y_low + 1)
            x_high = tirx.Select(x_edge, w - 1, x_low + 1)
            ly = tirx.Select(y_edge, zero, y - y_low.astype(F32))
            lx = tirx.Select(x_edge, zero, x - x_low.astype(F32))
            hy, hx = one - ly, one - lx
            value = combine(
                hy * hx * data[b, ch, y_low, x_low],
                hy * lx * data[b, ch, y_low, x_high],
                ly * hx * data[b, ch, y_high, x_low],
                ly * lx * data[b, ch, y_high, x_high],
            )
            return tirx.Select(outside, zero, value)

        def reduced(r, ch, ph, pw):
            xmin, ymin, roi_w, roi_h = roi(r)
            bin_h, bin_w = roi_h / f32(pooled_h), roi_w / f32(pooled_w)
            gh, gw = grid_size(r)
            iy = te.reduce_axis((0, tirx.max(gh, 0)), name="iy")
            ix = te.reduce_axis((0, tirx.max(gw, 0)), name="ix")
            y = ymin + ph.astype(F32) * bin_h + (iy.astype(F32) + half) * bin_h / gh.astype(F32)
            x = xmin + pw.astype(F32) * bin_w + (ix.astype(F32) + half) * bin_w / gw.astype(F32)
            b = tirx.min(tirx.max(batch_index[r].astype(dtype_of(r)), 0), num - 1)
            return reduce(bilinear(b, ch, y, x), axis=[iy, ix])

        out_shape = [count_rois, channels, pooled_h, pooled_w]
        total = te.compute(out_shape, reduced, name=names[0])

        def finished(r, ch, ph, pw):
            gh, gw = grid_size(r)
            return finish(total[r, ch, ph, pw], gh * gw)

        return te.compute(out_shape, finished, name=names[1])

    return args.emit_te(compute, x, rois, batch)


def _check_batch_indices(args: OpArgs, batch: relax.Expr, num, count) -> None:
    """Every batch index must lie in [0, num) (``num`` the input's batch, static or symbolic; ``count`` the
    number of ROIs, which may be 0 only where it is symbolic): at compile time for constants, else at
    execution through OpArgs.check_value, as GATHER checks its indices."""
    n = str(num) if isinstance(num, int) else "N"
    if args.operand("batch_indices").is_constant:
        values = args.value("batch_indices")
        if values.size and (values.min() < 0 or values.max() >= num):
            args.fail(f"batch indices must lie in [0, {n}), got {values.tolist()}", "batch_indices")
        return
    if not data_checks_enabled() or (isinstance(count, int) and count == 0):
        return
    worst = args.emit_te(_worst_index, batch, 0)  # the minimum where negative, else the maximum
    size = "" if isinstance(num, int) else " (N: the input's batch at execution)"

    def in_range(v: tirx.Var) -> tirx.PrimExpr:
        ok = tirx.And(v >= 0, v < num)
        return ok if isinstance(count, int) else tirx.Or(ok, tirx.EQ(count, tirx.const(0, "int64")))

    args.check_value(worst, in_range, f"batch index {VALUE} is out of range [0, {n}){size}", "batch_indices")


def _adaptive_samples(bin_size, extent, like):
    """ceil(bin_size) samples along one axis of a bin, at most extent + 1 (see roi_align): compared in
    float first, so that inf and NaN come out as the cap instead of an undefined float-to-int cast."""
    cap = (extent + 1).astype(F32)
    return tirx.ceil(tirx.Select(bin_size < cap, bin_size, cap)).astype(dtype_of(like))
