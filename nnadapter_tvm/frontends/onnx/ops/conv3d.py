"""ConvTranspose over 3 spatial dims -> CONV_3D_TRANSPOSE (op_converters/conv3d.py, an extension): NNAdapter's
convolutions are 2-D. Conv.py's ConvTranspose converter hands 5-D inputs here."""

from __future__ import annotations

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops import conv
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.op_converters.conv3d import CONV_3D_TRANSPOSE


def conv_transpose_3d(ctx: NodeContext) -> Value:
    """ConvTranspose on [N, C, D, H, W]: the output is positions [pad_begin, pad_begin + out) of the full
    transposed result per axis (auto_pad and output_shape resolved as for 2-D), given to CONV_3D_TRANSPOSE
    as non-negative pads plus output_padding (the positions past the full result)."""
    x, w = ctx.input(0), ctx.input(1)
    if w.rank != 5:
        ctx.fail(f"the filter {w.describe()} must have the input's rank 5")
    if w.shape is None or any(d is None for d in w.shape):
        ctx.unsupported(f"the filter {w.describe()} needs static dims")
    kernel = list(w.shape[2:])
    if ctx.attr("kernel_shape", None) is not None and list(ctx.attr("kernel_shape")) != kernel:
        ctx.fail(f"kernel_shape {list(ctx.attr('kernel_shape'))} differs from the filter's spatial dims {kernel}")
    sizes = [None if d is None or d < 0 else d for d in x.shape[2:]]
    strides, dilations, pads = conv.spatial_attrs(ctx, 3)
    output_padding = list(ctx.attr("output_padding", [0] * 3))
    begins, outs, cuts = conv._transpose_geometry(ctx, sizes, kernel, strides, dilations, pads, output_padding)
    ends, extras = [], []
    for n, s, d, b, out, cut in zip(sizes, strides, dilations, begins, outs, cuts):
        end = max(cut - b, 0)  # positions cropped after the output; ``extra`` zero positions past the full result
        extra = end - (cut - b)
        if b < 0 or (out is not None and out <= 0) or extra >= max(s, d):
            ctx.unsupported(
                f"output positions [{b}, {b} + {out}) of the full transposed result (input size {n}) are not "
                "expressible with CONV_3D_TRANSPOSE (non-negative pads, output_padding < max(stride, dilation))"
            )
        ends.append(end)
        extras.append(extra)
    operands = [
        x,
        w,
        conv.bias_operand(ctx, 2),
        ctx.i32([*begins, *ends]),
        ctx.i32(strides),
        ctx.i32(dilations),
        ctx.i32(extras),
        ctx.i32(int(ctx.attr("group", 1))),
    ]
    return ctx.emit(CONV_3D_TRANSPOSE, operands)
