"""ROI_ALIGN_ONNX (extension 2202): ONNX's RoiAlign with its pooling mode, avg or max.

NNAdapter's ROI_ALIGN averages each bin's bilinear samples (Paddle's roi_align; ONNX's mode avg maps
onto it).  ONNX's mode max pools them differently, as onnxruntime (and ONNX's reference after it) do:
each sample contributes the largest of its four weighted corner terms (w1 * v1, ..., w4 * v4), not
their sum, and the bin takes the maximum over its samples.  Mode avg here is ROI_ALIGN's converter.
"""

from __future__ import annotations

from tvm import relax, te, tirx

from nnadapter_tvm.op_converters import roi_align as standard
from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import f32
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.onnx_vision import ROI_ALIGN_MODES as MODES
from nnadapter_tvm.types import OperationType as O


@converter(O.ROI_ALIGN_ONNX)
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
    return standard.roi_bins(args, _largest_term, te.max, _zero_if_empty, ("roi_align_max_pool", "roi_align_max"))


def _largest_term(a: tirx.PrimExpr, b: tirx.PrimExpr, c: tirx.PrimExpr, d: tirx.PrimExpr) -> tirx.PrimExpr:
    """Mode max's sample: the largest of its four weighted corner terms."""
    return tirx.max(tirx.max(a, b), tirx.max(c, d))


def _zero_if_empty(best: tirx.PrimExpr, count: tirx.PrimExpr) -> tirx.PrimExpr:
    return tirx.Select(count > 0, best, f32(0.0))  # a bin of no samples: the max's identity, -inf, becomes 0
