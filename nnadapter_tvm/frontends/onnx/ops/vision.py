"""Vision: RoiAlign -> ROI_ALIGN, GridSample -> GRID_SAMPLE."""

from __future__ import annotations

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import InterpolateMode, PadMode
from nnadapter_tvm.types import OperationType as O


@onnx_op("RoiAlign")
def roi_align(ctx: NodeContext) -> Value:
    """RoiAlign (mode avg) -> ROI_ALIGN; coordinate_transformation_mode half_pixel is ``aligned``,
    output_half_pixel (the only behaviour before opset 16) is not; batch_indices cast to INT32."""
    x, rois, batch = ctx.input(0), ctx.input(1), ctx.input(2)
    mode = ctx.attr("mode", "avg")
    if mode != "avg":
        ctx.unsupported(f"mode '{mode}': ROI_ALIGN averages its samples")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if transform not in ("half_pixel", "output_half_pixel"):
        ctx.fail(f"coordinate_transformation_mode '{transform}'")
    if x.dtype != rois.dtype or x.dtype.kind != "f":
        ctx.unsupported(f"{x.describe()} and rois {rois.describe()}: ROI_ALIGN takes FLOAT32")
    indices = cast(ctx, batch, "int32")
    inputs = [
        x,
        rois,
        indices,
        ctx.i32(int(ctx.attr("output_height", 1))),
        ctx.i32(int(ctx.attr("output_width", 1))),
        ctx.i32(int(ctx.attr("sampling_ratio", 0))),
        ctx.f32(float(ctx.attr("spatial_scale", 1.0))),
        ctx.boolean(transform == "half_pixel"),
    ]
    return ctx.emit(O.ROI_ALIGN, inputs)


_GRID_MODES = {
    "bilinear": InterpolateMode.BILINEAR,
    "linear": InterpolateMode.BILINEAR,
    "nearest": InterpolateMode.NEAREST,
}
_GRID_PADDING = {"zeros": PadMode.CONSTANT, "border": PadMode.EDGE, "reflection": PadMode.REFLECT}


@onnx_op("GridSample")
def grid_sample(ctx: NodeContext) -> Value:
    """GridSample (4-D; bilinear/linear or nearest; zeros, border or reflection padding) -> GRID_SAMPLE."""
    x, grid = ctx.input(0), ctx.input(1)
    mode = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")
    padding = ctx.attr("padding_mode", "zeros")
    if mode not in _GRID_MODES:
        ctx.unsupported(f"mode '{mode}': GRID_SAMPLE interpolates bilinearly or takes the nearest pixel")
    if padding not in _GRID_PADDING:
        ctx.fail(f"padding_mode '{padding}'")
    if x.rank != 4:
        ctx.unsupported(f"{x.describe()}: GRID_SAMPLE samples 4-D [N, C, H, W] inputs only")
    inputs = [
        x,
        grid,
        ctx.boolean(bool(ctx.attr("align_corners", 0))),
        ctx.i32(int(_GRID_MODES[mode])),
        ctx.i32(int(_GRID_PADDING[padding])),
    ]
    return ctx.emit(O.GRID_SAMPLE, inputs)
