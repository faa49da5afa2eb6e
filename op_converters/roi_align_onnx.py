"""ROI_ALIGN_ONNX (extension 2202): ONNX's RoiAlign with its pooling mode, avg or max.

NNAdapter's ROI_ALIGN averages each bin's bilinear samples (Paddle's roi_align; ONNX's mode avg maps
onto it).  ONNX's mode max pools them differently, as onnxruntime (and ONNX's reference after it) do:
each sample contributes the largest of its four weighted corner terms (w1 * v1, ..., w4 * v4), not
their sum, and the bin takes the maximum over its samples.  Mode avg here is ROI_ALIGN's converter.
"""

from __future__ import annotations

from tvm import relax, te, tirx

from nnadapter_tvm.extensions import register_builtin
from nnadapter_tvm.op_converters import roi_align as standard
from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import F32, dtype_of, f32
from nnadapter_tvm.op_converters.helpers import rank4
from nnadapter_tvm.op_schema import INT32, SCHEMAS, Arg
from nnadapter_tvm.types import OperationType as O

MODES = ("avg", "max")


def _roi_align_onnx(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R], output_height,
    output_width, sampling_ratio, spatial_scale, aligned, mode (0 avg, 1 max) -> output [R, C,
    output_height, output_width]: ONNX's RoiAlign (aligned = coordinate_transformation_mode half_pixel).

    The bins and their sampling points are ROI_ALIGN's (whose operands and checks these are); mode avg
    is ROI_ALIGN.  Mode max: a sample at (y, x) inside [-1, H] x [-1, W] (clamped into the map as in
    ROI_ALIGN) gives max(hy * hx * v(y0, x0), hy * lx * v(y0, x1), ly * hx * v(y1, x0), ly * lx * v(y1,
    x1)), one outside gives 0, and the bin is the maximum of its samples (0 for a bin without samples).

    Reference: ONNX RoiAlign (opset 16), onnx.reference.ops.op_roi_align (onnxruntime's CPU kernel).
    """
    mode = args.int("mode", 0)
    if not 0 <= mode < len(MODES):
        args.fail(f"must be one of {', '.join(f'{i}={n}' for i, n in enumerate(MODES))}, got {mode}", "mode")
    if MODES[mode] == "avg":
        return standard.roi_align(args)
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
    if sampling_ratio > standard.MAX_SAMPLING_RATIO:
        args.fail(
            f"sampling_ratio {sampling_ratio} is above the {standard.MAX_SAMPLING_RATIO} supported", "sampling_ratio"
        )
    spatial_scale = args.float("spatial_scale", 1.0)
    if not spatial_scale > 0:
        args.fail(f"must be positive, got {spatial_scale}", "spatial_scale")
    aligned = args.bool("aligned", False)
    standard._check_batch_indices(args, batch, args.shape(x)[0], batch_shape[0])

    def compute(data: te.Tensor, boxes: te.Tensor, batch_index: te.Tensor) -> te.Tensor:
        num, channels, h, w = data.shape
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
            return (
                standard._adaptive_samples(roi_h / f32(pooled_h), h, r),
                standard._adaptive_samples(roi_w / f32(pooled_w), w, r),
            )

        def sample(b, ch, y, x):
            """The largest weighted corner term of the bilinear sample at (y, x); 0 outside."""
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
            value = tirx.max(
                tirx.max(hy * hx * data[b, ch, y_low, x_low], hy * lx * data[b, ch, y_low, x_high]),
                tirx.max(ly * hx * data[b, ch, y_high, x_low], ly * lx * data[b, ch, y_high, x_high]),
            )
            return tirx.Select(outside, zero, value)

        def pooled(r, ch, ph, pw):
            xmin, ymin, roi_w, roi_h = roi(r)
            bin_h, bin_w = roi_h / f32(pooled_h), roi_w / f32(pooled_w)
            gh, gw = grid_size(r)
            iy = te.reduce_axis((0, tirx.max(gh, 0)), name="iy")
            ix = te.reduce_axis((0, tirx.max(gw, 0)), name="ix")
            y = ymin + ph.astype(F32) * bin_h + (iy.astype(F32) + half) * bin_h / gh.astype(F32)
            x = xmin + pw.astype(F32) * bin_w + (ix.astype(F32) + half) * bin_w / gw.astype(F32)
            b = tirx.min(tirx.max(batch_index[r].astype(dtype_of(r)), 0), num - 1)
            return te.max(sample(b, ch, y, x), axis=[iy, ix])

        out_shape = [boxes.shape[0], channels, pooled_h, pooled_w]
        best = te.compute(out_shape, pooled, name="roi_align_max_pool")

        def empty_is_zero(r, ch, ph, pw):
            gh, gw = grid_size(r)  # a bin of no samples: the max reduction's identity, -inf, becomes 0
            return tirx.Select(gh * gw > 0, best[r, ch, ph, pw], zero)

        return te.compute(out_shape, empty_is_zero, name="roi_align_max")

    return args.emit_te(compute, x, rois, batch)


ROI_ALIGN_ONNX = register_builtin(
    "ROI_ALIGN_ONNX",
    2202,
    [*SCHEMAS[O.ROI_ALIGN].inputs, Arg("mode", INT32, optional=True)],
    SCHEMAS[O.ROI_ALIGN].outputs,
    _roi_align_onnx,
)

__all__ = ["MODES", "ROI_ALIGN_ONNX"]
