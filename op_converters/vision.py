"""Vision operations: resizing, grid sampling, ROI align, prior boxes, YOLO boxes, NMS.

The spec leaves these loosely defined; each follows Paddle's operator of the same name (its CPU
kernel), as its docstring says.  Relax's own operators differ from Paddle's arithmetic (``resize2d``
takes its ratio from the sizes, never from ``scales``, floors with an epsilon and divides by zero for
a 1-pixel ``align_corners`` output; ``roi_align`` takes [batch, x1, y1, x2, y2] rows and has no
``aligned``), so TE computes write Paddle's formulas in float32, and sampled positions match Paddle's
bit for bit.  PRIOR_BOX depends only on shapes and becomes constants; YOLO_BOX composes Relax ops;
NON_MAX_SUPPRESSION is a sequential TIR kernel whose padded result is cut to its run-time length.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import rank4
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import InterpolateMode, PadMode, ResultCode
from nnadapter_tvm.types import OperationType as O

F32 = "float32"


def _f32(value) -> tirx.PrimExpr:
    """A float32 constant, or a PrimExpr cast to float32."""
    if isinstance(value, (int, float, np.floating, np.integer)):
        return tirx.const(float(np.float32(value)), F32)
    return value.astype(F32)


def _dtype(e: tirx.PrimExpr) -> str:
    return str(e.ty)


def _floats(args: OpArgs, i: int) -> list[float]:
    return [float(v) for v in np.reshape(np.asarray(args.value(i), F32), -1)]


# -- RESIZE_NEAREST / RESIZE_LINEAR ---------------------------------------------------


def _resize_size(args: OpArgs, in_hw: list) -> tuple[list, list[float] | None]:
    """Output (height, width) from ``shape`` (input 1) or else ``scales`` (input 2), and the scales
    that set the sampling ratio (None: the ratio is input / output size).

    As in Paddle's interpolate_v2: ``shape`` wins for the size, but positive ``scales`` still set the
    ratio (1 / scale); non-positive scales count as absent; a scaled size is int(float32(in) * scale).
    """
    shape = _shape_operand(args, 1) if args.has(1) else None
    scales = _floats(args, 2) if args.has(2) else None
    if shape is None and scales is None:
        args.fail("one of 'shape' and 'scales' must be given (both are empty)", 1)
    if scales is not None:
        if len(scales) != 2:
            args.fail(f"must hold 2 values (height, width), got {scales}", 2)
        if not all(s > 0 for s in scales):
            if shape is None:
                args.fail(f"values must be positive when 'shape' is empty, got {scales}", 2)
            scales = None
    if shape is not None:
        if len(shape) != 2 or any(isinstance(d, int) and d <= 0 for d in shape):
            args.fail(f"must hold 2 positive values (height, width), got {shape}", 1)
        return shape, scales
    out = []
    for axis, size, scale in zip(("height", "width"), in_hw, scales):
        if isinstance(size, int):
            out_size = int(np.float32(size) * np.float32(scale))
            if out_size <= 0:
                args.fail(f"scale {scale} gives an empty output {axis} for an input {axis} of {size}", 2)
        elif float(scale).is_integer():
            out_size = size * int(scale)
        else:
            # The same float32 product, truncated, evaluated where the size is known; a size the scale maps to
            # 0 would be an empty output (the scale is positive, so only small sizes can).
            product = tirx.Cast(F32, size) * tirx.const(float(np.float32(scale)), F32)
            out_size = tirx.Cast(_dtype(size), product)
        out.append(out_size)
    return out, scales


def _shape_operand(args: OpArgs, i: int) -> list:
    """RESIZE_*'s ``shape`` operand: its values where constant, else the TIR expressions compile time
    knows for it (a size computed from the input's own dimensions, through ``OpArgs.shape_values``)."""
    if args.operand(i).is_constant:
        return args.ints(i)
    shape_values = getattr(args, "shape_values", None)
    values = shape_values(i) if shape_values is not None else None
    if values is None:
        args.fail(
            "must be a constant operand or computed from shapes (its values set the output size)",
            i,
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    return values


def _resize_ratio(in_size, out_size, scale: float | None, align_corners: bool) -> tirx.PrimExpr:
    """Paddle's ratio in float32: 0 for a 1-pixel output; else float(in - 1) / (out - 1) with
    align_corners, else float(1. / scale) where scales are given, else float(in) / out."""
    if isinstance(out_size, int) and out_size <= 1:
        return _f32(0.0)
    if align_corners:
        num, den = in_size - 1, out_size - 1
    elif scale is not None:
        return _f32(np.float32(1.0 / float(np.float32(scale))))
    else:
        num, den = in_size, out_size
    if isinstance(num, int) and isinstance(den, int):
        return _f32(np.float32(num) / np.float32(den))
    ratio = _f32(num) / _f32(den)
    return ratio if isinstance(out_size, int) else tirx.Select(out_size > 1, ratio, _f32(0.0))


def _resize(args: OpArgs, linear: bool) -> relax.Expr:
    x = args.tensor(0)
    _, _, in_h, in_w = rank4(args, x, 0)
    align_corners = args.bool(3, False)
    align_mode = args.int(4, 1) if linear else 1
    if align_mode not in (0, 1):
        args.fail(f"must be 0 (half-pixel) or 1 (asymmetric), got {align_mode}", 4)

    def geometry(h, w) -> tuple:
        """Output height and width and the two ratios for an input of h x w."""
        (out_h, out_w), scales = _resize_size(args, [h, w])
        scales = scales or [None, None]
        ratio_h = _resize_ratio(h, out_h, scales[0], align_corners)
        return out_h, out_w, ratio_h, _resize_ratio(w, out_w, scales[1], align_corners)

    geometry(in_h, in_w)  # checks the operands now
    half_pixel = linear and align_mode == 0 and not align_corners

    def nearest_index(k, ratio, size):
        src = ratio * k.astype(F32)
        if align_corners:
            src = src + _f32(0.5)
        return tirx.min(src.astype(_dtype(k)), size - 1)  # truncation == floor: src >= 0

    def linear_index(k, ratio, size):
        kf = k.astype(F32)
        src = ratio * (kf + _f32(0.5)) - _f32(0.5) if half_pixel else ratio * kf
        src = tirx.max(src, _f32(0.0))
        low = tirx.min(src.astype(_dtype(k)), size - 1)
        high = tirx.min(low + 1, size - 1)
        frac = src - low.astype(F32)
        return low, high, frac

    def compute(data: te.Tensor) -> te.Tensor:
        # Sizes and ratios from the tensor's own shape: a symbolic size inside a TE function must be its.
        n, c, h, w = data.shape
        out_h, out_w, ratio_h, ratio_w = geometry(*(int(d) if isinstance(d, tirx.IntImm) else d for d in (h, w)))

        def nearest(b, ch, i, j):
            return data[b, ch, nearest_index(i, ratio_h, h), nearest_index(j, ratio_w, w)]

        def bilinear(b, ch, i, j):
            h0, h1, lh = linear_index(i, ratio_h, h)
            w0, w1, lw = linear_index(j, ratio_w, w)
            one = _f32(1.0)
            top = data[b, ch, h0, w0] * (one - lw) + data[b, ch, h0, w1] * lw
            bottom = data[b, ch, h1, w0] * (one - lw) + data[b, ch, h1, w1] * lw
            return top * (one - lh) + bottom * lh

        body = bilinear if linear else nearest
        return te.compute([n, c, out_h, out_w], body, name="resize_linear" if linear else "resize_nearest")

    return args.emit_te(compute, x)


@converter(O.RESIZE_NEAREST)
def resize_nearest(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], shape [2] (or empty), scales [2] (or empty), align_corners -> output
    [N, C, H_out, W_out]; source index int(ratio * dst + 0.5) with align_corners, else int(ratio * dst).

    The size is ``shape`` if given, else int(float32(H) * scales[0]) (likewise W).  ratio =
    (H - 1) / (H_out - 1) with align_corners, else 1 / scales[0] when scales are given, else H / H_out;
    0 for a 1-pixel output; all in float32, as Paddle computes it.  shape and scales must be constant
    operands (the output size is fixed at compile time).

    Reference: Paddle's nearest_interp_v2 CPU kernel (paddle.nn.functional.interpolate, mode 'nearest').
    """
    return _resize(args, linear=False)


@converter(O.RESIZE_LINEAR)
def resize_linear(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], shape [2] (or empty), scales [2] (or empty), align_corners, align_mode
    (default 1) -> bilinear output [N, C, H_out, W_out]; src = ratio * dst (align_corners or
    align_mode 1) or max(ratio * (dst + 0.5) - 0.5, 0) (align_mode 0), blending pixels floor(src) and
    min(floor(src) + 1, H - 1).

    Size and ratio as for RESIZE_NEAREST.  align_mode defaults to 1, as in NNAdapter's operation
    header and Paddle's bilinear_interp_v2 operator.

    Reference: Paddle's bilinear_interp_v2 CPU kernel (paddle.nn.functional.interpolate, mode 'bilinear').
    """
    return _resize(args, linear=True)


# -- GRID_SAMPLE ----------------------------------------------------------------------


@converter(O.GRID_SAMPLE)
def grid_sample(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], grid [N, H_out, W_out, 2] of (x, y) in [-1, 1], align_corners, mode
    (BILINEAR, NEAREST; NONE = BILINEAR), pad_mode (CONSTANT or NONE = zeros, EDGE or REPLICATE = border,
    REFLECT = reflection) -> output [N, C, H_out, W_out].

    x maps to (x + 1) / 2 * (W - 1) with align_corners, else (x + 1) * W / 2 - 0.5 (likewise y); border
    clips to [0, W - 1]; reflection mirrors at the corner centres (align_corners) or edges, then clips.
    Bilinear weighs the 4 neighbours, a neighbour outside the input counting 0; nearest rounds halves
    to even (std::nearbyint, as Paddle 3.3 and PyTorch do) and gives 0 outside.  The output's spatial
    size is the grid's (the spec's "same shape as input" holds only for a grid of the input's size).

    Reference: Paddle's paddle.nn.functional.grid_sample (CPU kernel: mode, padding_mode, align_corners).
    """
    x, grid = args.tensor(0), args.tensor(1)
    n, _, _, _ = rank4(args, x, 0)
    grid_shape = args.shape(grid)
    if len(grid_shape) != 4 or grid_shape[3] != 2:
        args.fail(f"must have shape [N, H_out, W_out, 2], got {grid_shape}", 1)
    if isinstance(n, int) and isinstance(grid_shape[0], int) and n != grid_shape[0]:
        args.fail(f"batch {grid_shape[0]} differs from the input's {n}", 1)
    align_corners = args.bool(2, False)
    mode = args.int(3, InterpolateMode.BILINEAR)
    if mode not in (InterpolateMode.NONE, InterpolateMode.BILINEAR, InterpolateMode.NEAREST):
        args.fail(f"must be {_names(InterpolateMode)}, got {mode}", 3)
    pad_mode = args.int(4, PadMode.CONSTANT)
    if pad_mode not in tuple(PadMode):
        args.fail(f"must be {_names(PadMode)}, got {pad_mode}", 4)
    nearest = mode == InterpolateMode.NEAREST
    border = pad_mode in (PadMode.EDGE, PadMode.REPLICATE)
    reflection = pad_mode == PadMode.REFLECT

    def source(g: tirx.PrimExpr, size) -> tirx.PrimExpr:
        """Unnormalize a grid coordinate and apply the padding mode, as Paddle's Unnormalize and Clip."""
        max_val = _f32(size - 1)
        if align_corners:
            v = (g + _f32(1.0)) * (max_val * _f32(0.5))
        else:
            v = (g + _f32(1.0)) * (_f32(size) * _f32(0.5)) - _f32(0.5)
        if border:
            v = tirx.min(tirx.max(v, _f32(0.0)), max_val)
        elif reflection:
            if align_corners:
                if isinstance(size, tirx.IntImm) and size.value == 1:
                    return _f32(0.0)  # Paddle: a 1-pixel axis reflects onto its only pixel
                span = max_val * _f32(2.0)
                a = tirx.abs(v)
                extra = a - tirx.floor(a / span) * span
                v = tirx.Select(size > 1, tirx.min(extra, span - extra), _f32(0.0))
            else:
                span = _f32(size) * _f32(2.0)
                a = tirx.abs(v + _f32(0.5))
                extra = a - tirx.floor(a / span) * span
                v = tirx.min(extra, span - extra) - _f32(0.5)
                v = tirx.min(tirx.max(v, _f32(0.0)), max_val)
        return v

    def compute(data: te.Tensor, g: te.Tensor) -> te.Tensor:
        batch, channels, h, w = data.shape
        _, out_h, out_w, _ = g.shape

        def pixel(b, ch, yi, xi):
            """data[b, ch, yi, xi] for integer-valued float coordinates, 0 outside the input."""
            inside = tirx.all(xi >= _f32(0.0), xi <= _f32(w - 1), yi >= _f32(0.0), yi <= _f32(h - 1))
            yc = tirx.min(tirx.max(yi.astype(_dtype(b)), 0), h - 1)
            xc = tirx.min(tirx.max(xi.astype(_dtype(b)), 0), w - 1)
            return tirx.Select(inside, data[b, ch, yc, xc], _f32(0.0))

        def body(b, ch, i, j):
            gx = source(g[b, i, j, 0], w)
            gy = source(g[b, i, j, 1], h)
            if nearest:
                return pixel(b, ch, tirx.nearbyint(gy), tirx.nearbyint(gx))
            x0, y0 = tirx.floor(gx), tirx.floor(gy)
            x1, y1 = x0 + _f32(1.0), y0 + _f32(1.0)
            dw, de, dn, ds = gx - x0, x1 - gx, gy - y0, y1 - gy
            return (
                pixel(b, ch, y0, x0) * de * ds
                + pixel(b, ch, y0, x1) * dw * ds
                + pixel(b, ch, y1, x0) * de * dn
                + pixel(b, ch, y1, x1) * dw * dn
            )

        return te.compute([batch, channels, out_h, out_w], body, name="grid_sample")

    return args.emit_te(compute, x, grid)


def _names(enum) -> str:
    return "one of " + ", ".join(f"{m.name}={m.value}" for m in enum)


# -- ROI_ALIGN ------------------------------------------------------------------------


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
    outside [0, N) are clamped (Paddle rejects them).  The output's first dimension is R, the number of
    ROIs (the spec writes N).
    ``batch_indices`` holds one image index per ROI, as the spec says (Paddle's ``boxes_num``, a count
    per image, must be expanded to it).

    Reference: Paddle's paddle.vision.ops.roi_align (roi_align CPU kernel, with ``aligned``).
    """
    x, rois, batch = args.tensor(0), args.tensor(1), args.raw_tensor(2)
    rank4(args, x, 0)
    rois_shape, batch_shape = args.shape(rois), args.shape(batch)
    if len(rois_shape) != 2 or rois_shape[1] != 4:
        args.fail(f"must have shape [R, 4], got {rois_shape}", 1)
    if len(batch_shape) != 1 or (
        isinstance(batch_shape[0], int) and isinstance(rois_shape[0], int) and batch_shape[0] != rois_shape[0]
    ):
        args.fail(f"must have shape [R] = [{rois_shape[0]}] (one batch index per ROI), got {batch_shape}", 2)
    pooled_h, pooled_w = args.int(3), args.int(4)
    for i, v in ((3, pooled_h), (4, pooled_w)):
        if v <= 0:
            args.fail(f"must be positive, got {v}", i)
    sampling_ratio = args.int(5, -1)
    if sampling_ratio > MAX_SAMPLING_RATIO:
        args.fail(
            f"sampling_ratio {sampling_ratio} is above the {MAX_SAMPLING_RATIO} supported "
            f"(each bin would average {sampling_ratio}^2 samples)",
            5,
        )
    spatial_scale = args.float(6, 1.0)
    if not spatial_scale > 0:
        args.fail(f"must be positive, got {spatial_scale}", 6)
    aligned = args.bool(7, False)

    def compute(data: te.Tensor, boxes: te.Tensor, batch_index: te.Tensor) -> te.Tensor:
        num, channels, h, w = data.shape
        count_rois = boxes.shape[0]
        zero, one, half = _f32(0.0), _f32(1.0), _f32(0.5)
        offset = half if aligned else zero
        scale = _f32(spatial_scale)

        def roi(r):
            xmin, ymin = boxes[r, 0] * scale - offset, boxes[r, 1] * scale - offset
            xmax, ymax = boxes[r, 2] * scale - offset, boxes[r, 3] * scale - offset
            roi_w, roi_h = xmax - xmin, ymax - ymin
            if not aligned:
                roi_w, roi_h = tirx.max(roi_w, one), tirx.max(roi_h, one)
            return xmin, ymin, roi_w, roi_h

        def grid_size(r):
            if sampling_ratio > 0:
                return tirx.const(sampling_ratio, _dtype(r)), tirx.const(sampling_ratio, _dtype(r))
            _, _, roi_w, roi_h = roi(r)
            return _adaptive_samples(roi_h / _f32(pooled_h), h, r), _adaptive_samples(roi_w / _f32(pooled_w), w, r)

        def bilinear(b, ch, y, x):
            outside = tirx.any(y < _f32(-1.0), y > _f32(h), x < _f32(-1.0), x > _f32(w))
            y, x = tirx.max(y, zero), tirx.max(x, zero)
            y_low, x_low = y.astype(_dtype(b)), x.astype(_dtype(b))
            y_edge, x_edge = y_low >= h - 1, x_low >= w - 1
            y_low = tirx.Select(y_edge, h - 1, y_low)
            x_low = tirx.Select(x_edge, w - 1, x_low)
            y_high = tirx.Select(y_edge, h - 1, y_low + 1)
            x_high = tirx.Select(x_edge, w - 1, x_low + 1)
            ly = tirx.Select(y_edge, zero, y - y_low.astype(F32))
            lx = tirx.Select(x_edge, zero, x - x_low.astype(F32))
            hy, hx = one - ly, one - lx
            value = (
                hy * hx * data[b, ch, y_low, x_low]
                + hy * lx * data[b, ch, y_low, x_high]
                + ly * hx * data[b, ch, y_high, x_low]
                + ly * lx * data[b, ch, y_high, x_high]
            )
            return tirx.Select(outside, zero, value)

        def summed(r, ch, ph, pw):
            xmin, ymin, roi_w, roi_h = roi(r)
            bin_h, bin_w = roi_h / _f32(pooled_h), roi_w / _f32(pooled_w)
            gh, gw = grid_size(r)
            iy = te.reduce_axis((0, tirx.max(gh, 0)), name="iy")
            ix = te.reduce_axis((0, tirx.max(gw, 0)), name="ix")
            y = ymin + ph.astype(F32) * bin_h + (iy.astype(F32) + half) * bin_h / gh.astype(F32)
            x = xmin + pw.astype(F32) * bin_w + (ix.astype(F32) + half) * bin_w / gw.astype(F32)
            b = tirx.min(tirx.max(batch_index[r].astype(_dtype(r)), 0), num - 1)
            return te.sum(bilinear(b, ch, y, x), axis=[iy, ix])

        total = te.compute([count_rois, channels, pooled_h, pooled_w], summed, name="roi_align_sum")

        def average(r, ch, ph, pw):
            gh, gw = grid_size(r)
            return total[r, ch, ph, pw] / tirx.max(gh * gw, 1).astype(F32)

        return te.compute([count_rois, channels, pooled_h, pooled_w], average, name="roi_align")

    return args.emit_te(compute, x, rois, batch)


def _adaptive_samples(bin_size, extent, like):
    """ceil(bin_size) samples along one axis of a bin, at most extent + 1 (see roi_align): compared in
    float first, so that inf and NaN come out as the cap instead of an undefined float-to-int cast."""
    cap = (extent + 1).astype(F32)
    return tirx.ceil(tirx.Select(bin_size < cap, bin_size, cap)).astype(_dtype(like))


# -- PRIOR_BOX ------------------------------------------------------------------------


def _expand_aspect_ratios(ratios: list[float], flip: bool) -> list[float]:
    """1 first, then each new ratio (and 1 / ratio with flip); duplicates within 1e-6 dropped."""
    out = [1.0]
    for ar in ratios:
        if any(abs(ar - seen) < 1e-6 for seen in out):
            continue
        out.append(ar)
        if flip:
            out.append(1.0 / ar)
    return out


@converter(O.PRIOR_BOX)
def prior_box(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], image [N, C, H_img, W_img], min_sizes, max_sizes (or empty),
    aspect_ratios, variances [4], flip, clip, step_w, step_h (0: W_img / W, H_img / H), offset
    (default 0.5), min_max_aspect_ratios_order (default false) -> boxes, variances [H, W, P, 4].

    For cell (h, w), centre ((w + offset) * step_w, (h + offset) * step_h); per min size, the priors
    are [aspect ratios (1 first; 1/r added with flip), sqrt(min * max)] or, with
    min_max_aspect_ratios_order, [min (ratio 1), sqrt(min * max), other ratios]; each box is
    [(cx - bw/2) / W_img, (cy - bh/2) / H_img, (cx + bw/2) / W_img, (cy + bh/2) / H_img] with
    bw = size * sqrt(r), bh = size / sqrt(r), clipped to [0, 1] with clip.  Both outputs depend only
    on shapes, so they are computed at compile time as constants: H, W, H_img and W_img must be static.

    Reference: Paddle's paddle.vision.ops.prior_box (prior_box CPU kernel).
    """
    x, image = args.tensor(0), args.tensor(1)
    _, _, height, width = rank4(args, x, 0)
    _, _, img_h, img_w = rank4(args, image, 1)
    for i, dims in ((0, (height, width)), (1, (img_h, img_w))):
        if not all(isinstance(d, int) for d in dims):
            args.fail(
                "needs static height and width (the boxes are computed at compile time)",
                i,
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
    min_sizes = _floats(args, 2)
    max_sizes = _floats(args, 3) if args.has(3) else []
    ratios = _floats(args, 4) if args.has(4) else []
    variances = _floats(args, 5)
    flip, clip = args.bool(6, False), args.bool(7, False)
    step_w, step_h = args.float(8, 0.0), args.float(9, 0.0)
    offset = args.float(10, 0.5)
    min_max_order = args.bool(11, False)
    if not min_sizes or any(s <= 0 for s in min_sizes):
        args.fail(f"must hold at least one positive size, got {min_sizes}", 2)
    if max_sizes and (len(max_sizes) != len(min_sizes) or any(b <= a for a, b in zip(min_sizes, max_sizes))):
        args.fail(f"must be empty or hold one size per min size, each above it; min {min_sizes}, max {max_sizes}", 3)
    if any(r <= 0 for r in ratios):
        args.fail(f"must be positive, got {ratios}", 4)
    if len(variances) != 4:
        args.fail(f"must hold 4 values, got {variances}", 5)
    if step_w < 0 or step_h < 0:
        args.fail(f"steps must be non-negative (0: automatic), got {step_w}, {step_h}", 8)
    if step_w == 0 or step_h == 0:
        step_w, step_h = np.float32(img_w) / np.float32(width), np.float32(img_h) / np.float32(height)
    expanded = _expand_aspect_ratios(ratios, flip)
    half_sizes = []  # (half width, half height) of each prior of a cell, in output order
    for s, min_size in enumerate(min_sizes):
        shaped = [(min_size * math.sqrt(r) / 2, min_size / math.sqrt(r) / 2) for r in expanded]
        big = [(math.sqrt(min_size * max_sizes[s]) / 2,) * 2] if max_sizes else []
        if min_max_order:
            others = [hs for r, hs in zip(expanded, shaped) if abs(r - 1.0) >= 1e-6]
            half_sizes += [(min_size / 2, min_size / 2), *big, *others]
        else:
            half_sizes += [*shaped, *big]
    half = np.asarray(half_sizes, "float32")  # [P, 2]
    cx = (np.arange(width, dtype="float32") + np.float32(offset)) * np.float32(step_w)
    cy = (np.arange(height, dtype="float32") + np.float32(offset)) * np.float32(step_h)
    cx, cy = cx[None, :, None], cy[:, None, None]
    hw, hh = half[None, None, :, 0], half[None, None, :, 1]
    boxes = np.stack(
        np.broadcast_arrays(
            (cx - hw) / np.float32(img_w),
            (cy - hh) / np.float32(img_h),
            (cx + hw) / np.float32(img_w),
            (cy + hh) / np.float32(img_h),
        ),
        axis=-1,
    ).astype("float32")
    if clip:
        boxes = np.clip(boxes, 0, 1)
    var = np.broadcast_to(np.asarray(variances, "float32"), boxes.shape)
    return [relax.const(np.ascontiguousarray(boxes)), relax.const(np.ascontiguousarray(var))]


# -- YOLO_BOX -------------------------------------------------------------------------


@converter(O.YOLO_BOX)
def yolo_box(args: OpArgs) -> relax.Expr:
    """input [N, A * (5 + class_num), H, W] (iou_aware: [N, A * (6 + class_num), H, W], the A IoU
    channels first), imgsize [N, 2] (height, width), anchors [2A], class_num, conf_thresh,
    downsample_ratio, clip_bbox (default true), scale_x_y (default 1), iou_aware (default false),
    iou_aware_factor (default 0.5) -> boxes [N, A * H * W, 4], scores [N, A * H * W, class_num].

    Box (a, i, j) (row-major per anchor) decodes to centre ((j + sigmoid(tx) * s - (s - 1) / 2) *
    img_w / W, likewise y) and size (exp(tw) * anchor_w * img_w / (downsample_ratio * W), likewise h),
    as [x1, y1, x2, y2], clipped to [0, img_w - 1] x [0, img_h - 1] with clip_bbox; conf =
    sigmoid(obj) (iou_aware: conf^(1 - f) * sigmoid(iou)^f); scores = conf * sigmoid(class logits).
    Boxes and scores of a box with conf < conf_thresh are 0.

    Reference: Paddle's paddle.vision.ops.yolo_box (yolo_box CPU kernel).
    """
    x, imgsize = args.tensor(0), args.raw_tensor(1)
    n, channels, h, w = rank4(args, x, 0)
    anchors = args.ints(2)
    class_num = args.int(3)
    conf_thresh = args.float(4)
    downsample = args.int(5)
    clip_bbox = args.bool(6, True)
    scale_x_y = args.float(7, 1.0)
    iou_aware = args.bool(8, False)
    iou_factor = args.float(9, 0.5)
    if not anchors or len(anchors) % 2:
        args.fail(f"must hold (width, height) pairs, got {anchors}", 2)
    if class_num <= 0:
        args.fail(f"must be positive, got {class_num}", 3)
    if downsample <= 0:
        args.fail(f"must be positive, got {downsample}", 5)
    num_anchors = len(anchors) // 2
    per_anchor = 5 + class_num
    expected = num_anchors * (per_anchor + (1 if iou_aware else 0))
    if isinstance(channels, int) and channels != expected:
        what = "A * (6 + class_num)" if iou_aware else "A * (5 + class_num)"
        args.fail(f"has {channels} channels, expected {what} = {expected} for A = {num_anchors}", 0)
    if args.shape(imgsize)[1:] != [2] or len(args.shape(imgsize)) != 2:
        args.fail(f"must have shape [N, 2], got {args.shape(imgsize)}", 1)
    if not all(isinstance(d, int) for d in (h, w)):
        args.fail("needs a static height and width", 0, ResultCode.FEATURE_NOT_SUPPORTED)

    op = relax.op
    emit = args.emit

    def const(v) -> relax.Expr:
        return relax.const(np.asarray(v, "float32"))

    def channel(t: relax.Expr, start: int, stop: int) -> relax.Expr:
        return emit(op.strided_slice(t, axes=[2], begin=[start], end=[stop]))

    iou = None
    if iou_aware:
        iou = emit(op.strided_slice(x, axes=[1], begin=[0], end=[num_anchors]))  # [N, A, H, W]
        x = emit(op.strided_slice(x, axes=[1], begin=[num_anchors], end=[num_anchors * (per_anchor + 1)]))
    p = emit(op.reshape(x, [n, num_anchors, per_anchor, h, w]))
    size = emit(op.astype(imgsize, F32))  # [N, 2]: height, width
    img_h = emit(op.reshape(op.strided_slice(size, axes=[1], begin=[0], end=[1]), [n, 1, 1, 1]))
    img_w = emit(op.reshape(op.strided_slice(size, axes=[1], begin=[1], end=[2]), [n, 1, 1, 1]))
    conf = emit(op.sigmoid(op.reshape(channel(p, 4, 5), [n, num_anchors, h, w])))
    if iou_aware:
        conf = emit(
            op.multiply(
                op.power(conf, const(1.0 - np.float32(iou_factor))),
                op.power(op.sigmoid(iou), const(iou_factor)),
            )
        )
    bias = -0.5 * (scale_x_y - 1.0)
    grid_x = const(np.arange(w, dtype="float32").reshape(1, 1, 1, w))
    grid_y = const(np.arange(h, dtype="float32").reshape(1, 1, h, 1))
    anchor_w = const(np.asarray(anchors[0::2], "float32").reshape(1, num_anchors, 1, 1))
    anchor_h = const(np.asarray(anchors[1::2], "float32").reshape(1, num_anchors, 1, 1))

    def part(k: int) -> relax.Expr:
        return emit(op.reshape(channel(p, k, k + 1), [n, num_anchors, h, w]))

    def centre(k: int, grid: relax.Expr, img: relax.Expr, cells: int) -> relax.Expr:
        offset = op.add(op.multiply(op.sigmoid(part(k)), const(scale_x_y)), const(bias))
        return emit(op.divide(op.multiply(op.add(grid, offset), img), const(float(cells))))

    def extent(k: int, anchor: relax.Expr, img: relax.Expr, input_size: int) -> relax.Expr:
        return emit(op.divide(op.multiply(op.multiply(op.exp(part(k)), anchor), img), const(float(input_size))))

    cx, cy = centre(0, grid_x, img_w, w), centre(1, grid_y, img_h, h)
    bw, bh = extent(2, anchor_w, img_w, downsample * w), extent(3, anchor_h, img_h, downsample * h)
    half_w, half_h = emit(op.divide(bw, const(2.0))), emit(op.divide(bh, const(2.0)))
    x1, y1 = op.subtract(cx, half_w), op.subtract(cy, half_h)
    x2, y2 = op.add(cx, half_w), op.add(cy, half_h)
    if clip_bbox:
        zero = const(0.0)
        x1, y1 = op.maximum(x1, zero), op.maximum(y1, zero)
        x2 = op.minimum(x2, op.subtract(img_w, const(1.0)))
        y2 = op.minimum(y2, op.subtract(img_h, const(1.0)))
    keep = emit(op.greater_equal(conf, const(conf_thresh)))  # [N, A, H, W]
    boxes = emit(op.stack([emit(v) for v in (x1, y1, x2, y2)], axis=4))  # [N, A, H, W, 4]
    boxes = op.where(op.expand_dims(keep, 4), boxes, const(0.0))
    boxes = op.reshape(boxes, [n, num_anchors * h * w, 4])
    classes = emit(op.sigmoid(channel(p, 5, per_anchor)))  # [N, A, C, H, W]
    scores = op.multiply(classes, op.expand_dims(conf, 2))
    scores = op.where(op.expand_dims(keep, 2), scores, const(0.0))
    scores = op.reshape(op.permute_dims(scores, [0, 1, 3, 4, 2]), [n, num_anchors * h * w, class_num])
    return [boxes, scores]


# -- NON_MAX_SUPPRESSION --------------------------------------------------------------


def _jaccard(box: Callable, a: tirx.PrimExpr, b: tirx.PrimExpr, normalized: bool) -> tirx.PrimExpr:
    """Paddle's JaccardOverlap of boxes ``a`` and ``b`` ([xmin, ymin, xmax, ymax]); +1 on sides unless normalized."""
    b1, b2 = [box(a, k) for k in range(4)], [box(b, k) for k in range(4)]
    norm = _f32(0.0 if normalized else 1.0)

    def area(v):
        invalid = tirx.any(v[2] < v[0], v[3] < v[1])
        return tirx.Select(invalid, _f32(0.0), (v[2] - v[0] + norm) * (v[3] - v[1] + norm))

    disjoint = tirx.any(b2[0] > b1[2], b2[2] < b1[0], b2[1] > b1[3], b2[3] < b1[1])
    inter_w = tirx.min(b1[2], b2[2]) - tirx.max(b1[0], b2[0]) + norm
    inter_h = tirx.min(b1[3], b2[3]) - tirx.max(b1[1], b2[1]) + norm
    inter = inter_w * inter_h
    return tirx.Select(disjoint, _f32(0.0), inter / (area(b1) + area(b2) - inter))


def _nms_ir(ins, outs, *, background, score_threshold, limit, nms_threshold, eta, keep_top_k, normalized):
    """Paddle's MultiClassNMS for [N, M, 4] boxes and [N, C, M] scores, images one after another.

    ``order`` holds each (image, class)'s box indices by descending score (stable).  Kept rows are
    written, per image, by class then selection order, at the running offset ``total``.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    boxes, scores, order = ins
    out, index, counts, total, sel, cnt = outs
    num_images, num_boxes = boxes.shape[0], boxes.shape[1]
    num_classes = scores.shape[1]
    i64 = "int64"
    # One pass over a 1-trip loop: the kernel body is a sequence (T.seq_scope warns "unknown pragma").
    with IRBuilder() as ib, T.serial(0, 1):
        boxes, scores, order = T.buffer_proxy(boxes), T.buffer_proxy(scores), T.buffer_proxy(order)
        out, index, counts, total = (
            T.buffer_proxy(out),
            T.buffer_proxy(index),
            T.buffer_proxy(counts),
            T.buffer_proxy(total),
        )
        sel, cnt = T.buffer_proxy(sel), T.buffer_proxy(cnt)

        def local(dtype):
            return T.buffer_proxy(T.alloc_buffer((1,), dtype, scope="local"))

        written, rows, detections, rank, keep = local(i64), local(i64), local(i64), local(i64), local(i64)
        threshold = local(F32)
        written[0] = tirx.const(0, i64)
        with T.serial(0, num_images) as n:

            def box(i, k, n=n):
                return boxes[n, i, k]

            detections[0] = tirx.const(0, i64)
            with T.serial(0, num_classes) as c:
                cnt[n, c] = tirx.const(0, i64)
                with T.If(c != background), T.Then():
                    threshold[0] = _f32(nms_threshold)
                    with T.serial(0, limit(num_boxes)) as k:
                        idx = order[n, c, k]
                        with T.If(scores[n, c, idx] > _f32(score_threshold)), T.Then():
                            keep[0] = tirx.const(1, i64)
                            with T.serial(0, cnt[n, c]) as t:
                                overlap = _jaccard(box, idx, sel[n, c, t], normalized)
                                # Paddle keeps while overlap <= threshold (so NaN suppresses).
                                keep[0] = tirx.Select(overlap <= threshold[0], keep[0], tirx.const(0, i64))
                            with T.If(keep[0] == 1), T.Then():
                                sel[n, c, cnt[n, c]] = idx
                                cnt[n, c] = cnt[n, c] + 1
                                if eta < 1:
                                    with T.If(threshold[0] > _f32(0.5)), T.Then():
                                        threshold[0] = threshold[0] * _f32(eta)
                detections[0] = detections[0] + cnt[n, c]
            rows[0] = tirx.const(0, i64)
            with T.serial(0, num_classes) as c, T.serial(0, cnt[n, c]) as t:
                idx = sel[n, c, t]
                score = scores[n, c, idx]
                keep[0] = tirx.const(1, i64)
                if keep_top_k > -1:
                    # Keep the keep_top_k best of the image: rank by score, ties in (class, order).
                    with T.If(detections[0] > keep_top_k), T.Then():
                        rank[0] = tirx.const(0, i64)
                        with T.serial(0, num_classes) as c2, T.serial(0, cnt[n, c2]) as t2:
                            other = scores[n, c2, sel[n, c2, t2]]
                            before = tirx.any(c2 < c, tirx.all(c2 == c, t2 < t))
                            ahead = tirx.any(other > score, tirx.all(other == score, before))
                            rank[0] = rank[0] + ahead.astype(i64)
                        keep[0] = (rank[0] < keep_top_k).astype(i64)
                with T.If(keep[0] == 1), T.Then():
                    row = written[0] + rows[0]
                    out[row, 0] = c.astype(F32)
                    out[row, 1] = score
                    for k in range(4):
                        out[row, 2 + k] = boxes[n, idx, k]
                    index[row] = (n * num_boxes + idx).astype("int32")
                    rows[0] = rows[0] + 1
            counts[n] = rows[0].astype("int32")
            written[0] = written[0] + rows[0]
        total[0] = written[0]
    return ib.get()


@converter(O.NON_MAX_SUPPRESSION)
def non_max_suppression(args: OpArgs) -> relax.Expr:
    """bboxes [N, M, 4], scores [N, C, M], rois_num (must be empty), background_label, score_threshold,
    nms_top_k, nms_threshold, nms_eta, keep_top_k, normalized, return_index -> output [No, 6] rows
    (label, score, xmin, ymin, xmax, ymax), out_rois_num [N] (INT32), index [No] (INT32, n * M + box).

    Per image and class (but background_label), boxes scoring above score_threshold are taken by
    descending score (ties by index), at most nms_top_k (-1: all), and kept greedily while their
    Jaccard overlap with every kept box is <= the threshold, which starts at nms_threshold and is
    multiplied by nms_eta after each kept box while above 0.5 (eta < 1).  keep_top_k (-1: all) then
    keeps the best scores of the image.  Rows are ordered by image, class, then descending score.
    The row count No is known only at run time: a kernel fills padded buffers and a dynamic slice cuts
    them.  Only Paddle's 3-D case is supported (no ``rois_num``, 4 coordinates per box).  ``index``
    has shape [No] as NNAdapter's header says (Paddle's is [No, 1]).

    Reference: Paddle's multiclass_nms3 operator (CPU kernel); not in the spec, operands from the header.
    """
    boxes, scores = args.tensor(0), args.tensor(1)
    box_shape, score_shape = args.shape(boxes), args.shape(scores)
    if args.has(2):
        args.fail("the 2-D (LoD) form with rois_num is not supported", 2, ResultCode.FEATURE_NOT_SUPPORTED)
    if len(box_shape) != 3:
        args.fail(f"must have shape [N, M, 4], got {box_shape}", 0)
    if box_shape[2] in (8, 16, 24, 32):
        args.fail(f"polygon boxes ({box_shape[2]} coordinates) are not supported", 0, ResultCode.FEATURE_NOT_SUPPORTED)
    if box_shape[2] != 4:
        args.fail(f"must have shape [N, M, 4], got {box_shape}", 0)
    if len(score_shape) != 3:
        args.fail(f"must have shape [N, C, M], got {score_shape}", 1)
    for axis, (a, b) in enumerate(((box_shape[0], score_shape[0]), (box_shape[1], score_shape[2]))):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            what = "batch" if axis == 0 else "box count M"
            args.fail(f"{what} {b} differs from the boxes' {a} (bboxes {box_shape}, scores {score_shape})", 1)
    background = args.int(3, 0)
    score_threshold = args.float(4)
    nms_top_k = args.int(5, -1)
    nms_threshold = args.float(6, 0.3)
    eta = args.float(7, 1.0)
    keep_top_k = args.int(8, -1)
    normalized = args.bool(9, True)
    return_index = args.bool(10, False)
    if not eta > 0:
        args.fail(f"must be positive, got {eta}", 7)
    if return_index and args.output_count < 3:
        args.fail("is true but the operation has no 'index' output", 10)
    keep_top_k = keep_top_k if keep_top_k > -1 else -1

    def limit(num_boxes):
        return tirx.min(num_boxes, nms_top_k) if nms_top_k > -1 else num_boxes

    order = args.emit(relax.op.argsort(scores, axis=2, descending=True, dtype="int64"))

    def compute(b: te.Tensor, s: te.Tensor, o: te.Tensor) -> list[te.Tensor]:
        num_images, num_boxes = b.shape[0], b.shape[1]
        num_classes = s.shape[1]
        per_image = num_classes * limit(num_boxes)
        if keep_top_k > -1:
            per_image = tirx.min(per_image, keep_top_k)
        capacity = num_images * per_image
        shapes = [
            (capacity, 6),
            (capacity,),
            (num_images,),
            (1,),
            (num_images, num_classes, num_boxes),
            (num_images, num_classes),
        ]
        kernel = functools.partial(
            _nms_ir,
            background=background,
            score_threshold=score_threshold,
            limit=limit,
            nms_threshold=nms_threshold,
            eta=eta,
            keep_top_k=keep_top_k,
            normalized=normalized,
        )
        return te.extern(
            shapes,
            [b, s, o],
            kernel,
            dtype=[F32, "int32", "int32", "int64", "int64", "int64"],
            name="multiclass_nms",
        )

    result = args.emit_te(compute, boxes, scores, order)
    padded_out, padded_index, counts, total = (args.emit(relax.TupleGetItem(result, i)) for i in range(4))

    def i64(values) -> relax.Expr:
        return relax.const(np.asarray(values, "int64"), "int64")

    rows = tirx.Var("nms_rows", "int64")
    end = args.emit(relax.op.concat([total, i64([6])], axis=0))
    out = args.match_cast(
        args.emit(relax.op.dynamic_strided_slice(padded_out, i64([0, 0]), end, i64([1, 1]))), [rows, 6]
    )
    results = [out, counts]
    if args.output_count > 2:
        index = args.emit(relax.op.dynamic_strided_slice(padded_index, i64([0]), total, i64([1])))
        results.append(args.match_cast(index, [rows]))
    return results
