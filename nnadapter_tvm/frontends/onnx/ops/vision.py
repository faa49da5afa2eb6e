"""Vision: RoiAlign -> ROI_ALIGN, GridSample -> GRID_SAMPLE."""

from __future__ import annotations

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import cast
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations import onnx_vision
from nnadapter_tvm.types import InterpolateMode, PadMode
from nnadapter_tvm.types import OperationType as O


@onnx_op("RoiAlign")
def roi_align(ctx: NodeContext) -> Value:
    """RoiAlign (mode avg) -> ROI_ALIGN, (mode max) -> the ROI_ALIGN_ONNX extension;
    coordinate_transformation_mode half_pixel is ``aligned``, output_half_pixel (the only behaviour
    before opset 16) is not; batch_indices cast to INT32."""
    x, rois, batch = ctx.input(0), ctx.input(1), ctx.input(2)
    mode = ctx.attr("mode", "avg")
    if mode not in onnx_vision.ROI_ALIGN_MODES:
        ctx.fail(f"mode '{mode}' is not one of {', '.join(onnx_vision.ROI_ALIGN_MODES)}")
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
    if mode == "max":  # ROI_ALIGN averages its samples
        return ctx.emit(onnx_vision.ROI_ALIGN_ONNX, [*inputs, ctx.i32(onnx_vision.ROI_ALIGN_MODES.index(mode))])
    return ctx.emit(O.ROI_ALIGN, inputs)


_GRID_MODES = {
    "bilinear": InterpolateMode.BILINEAR,
    "linear": InterpolateMode.BILINEAR,
    "nearest": InterpolateMode.NEAREST,
}
_GRID_PADDING = {"zeros": PadMode.CONSTANT, "border": PadMode.EDGE, "reflection": PadMode.REFLECT}


@onnx_op("GridSample")
def grid_sample(ctx: NodeContext) -> Value:
    """GridSample (4-D; bilinear/linear or nearest; zeros, border or reflection padding) -> GRID_SAMPLE;
    bicubic or 5-D (volumetric) -> the GRID_SAMPLE_ONNX extension."""
    x, grid = ctx.input(0), ctx.input(1)
    mode = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")
    padding = ctx.attr("padding_mode", "zeros")
    if padding not in _GRID_PADDING:
        ctx.fail(f"padding_mode '{padding}'")
    if mode not in _GRID_MODES or x.rank != 4:
        return _grid_sample_onnx(ctx, x, grid, mode, padding)
    inputs = [
        x,
        grid,
        ctx.boolean(bool(ctx.attr("align_corners", 0))),
        ctx.i32(int(_GRID_MODES[mode])),
        ctx.i32(int(_GRID_PADDING[padding])),
    ]
    return ctx.emit(O.GRID_SAMPLE, inputs)


# ONNX's mode names (opset 16 spells them bilinear / bicubic) -> GRID_SAMPLE_ONNX's.
_GRID_ONNX_MODES = {
    "bilinear": "linear",
    "linear": "linear",
    "nearest": "nearest",
    "bicubic": "cubic",
    "cubic": "cubic",
}


def _grid_sample_onnx(ctx: NodeContext, x: Value, grid: Value, mode: str, padding: str) -> Value:
    """GridSample beyond GRID_SAMPLE (bicubic, 5-D) -> GRID_SAMPLE_ONNX."""
    if mode not in _GRID_ONNX_MODES:
        ctx.fail(f"mode '{mode}' is not one of {', '.join(_GRID_ONNX_MODES)}")
    if x.rank not in (4, 5) or x.dtype != "float32" or grid.dtype != "float32":
        ctx.unsupported(f"{x.describe()}, grid {grid.describe()}: GRID_SAMPLE_ONNX samples 4-D or 5-D float32 inputs")
    inputs = [
        x,
        grid,
        ctx.boolean(bool(ctx.attr("align_corners", 0))),
        ctx.i32(onnx_vision.GRID_SAMPLE_MODES.index(_GRID_ONNX_MODES[mode])),
        ctx.i32(onnx_vision.PADDING_MODES.index(padding)),
    ]
    return ctx.emit(onnx_vision.GRID_SAMPLE_ONNX, inputs)
