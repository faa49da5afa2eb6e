"""RESIZE_NEAREST and RESIZE_LINEAR, as Paddle's interpolate_v2 CPU kernels compute them.

Relax's ``resize2d`` differs from Paddle's arithmetic (it takes its ratio from the sizes, never from
``scales``, floors with an epsilon and divides by zero for a 1-pixel ``align_corners`` output), so a TE
compute writes Paddle's formulas in float32, and sampled positions match Paddle's bit for bit.  The ONNX
importer checks its Resize configurations against a numpy copy of these formulas
(frontends/onnx/ops/resize.py).
"""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import F32, dtype_of, f32, floats
from nnadapter_tvm.op_converters.helpers import rank4
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode


def _resize_size(args: OpArgs, in_hw: list) -> tuple[list, list[float] | None]:
    """Output (height, width) from ``shape`` (input 1) or else ``scales`` (input 2), and the scales
    that set the sampling ratio (None: the ratio is input / output size).

    As in Paddle's interpolate_v2: ``shape`` wins for the size, but positive ``scales`` still set the
    ratio (1 / scale); non-positive scales count as absent; a scaled size is int(float32(in) * scale).
    """
    shape = _shape_operand(args) if args.has("shape") else None
    scales = floats(args, "scales") if args.has("scales") else None
    if shape is None and scales is None:
        args.fail("one of 'shape' and 'scales' must be given (both are empty)", "shape")
    if scales is not None:
        if len(scales) != 2:
            args.fail(f"must hold 2 values (height, width), got {scales}", "scales")
        if not all(s > 0 for s in scales):
            if shape is None:
                args.fail(f"values must be positive when 'shape' is empty, got {scales}", "scales")
            scales = None
    if shape is not None:
        if len(shape) != 2 or any(isinstance(d, int) and d <= 0 for d in shape):
            args.fail(f"must hold 2 positive values (height, width), got {shape}", "shape")
        return shape, scales
    out = []
    for axis, size, scale in zip(("height", "width"), in_hw, scales):
        if isinstance(size, int):
            out_size = int(np.float32(size) * np.float32(scale))
            if out_size <= 0:
                args.fail(f"scale {scale} gives an empty output {axis} for an input {axis} of {size}", "scales")
        elif float(scale).is_integer():
            out_size = size * int(scale)
        else:
            # The same float32 product, truncated, evaluated where the size is known; a size the scale maps to
            # 0 would be an empty output (the scale is positive, so only small sizes can).
            product = tirx.Cast(F32, size) * tirx.const(float(np.float32(scale)), F32)
            out_size = tirx.Cast(dtype_of(size), product)
        out.append(out_size)
    return out, scales


def _shape_operand(args: OpArgs) -> list:
    """RESIZE_*'s ``shape`` operand: its values where constant, else the TIR expressions compile time
    knows for it (a size computed from the input's own dimensions, through ``OpArgs.shape_values``), else
    (sizes computed in float from the image's size, as detectors' transforms do) read at execution as
    new symbolic sizes."""
    if args.operand("shape").is_constant:
        return args.ints("shape")
    values = args.shape_values("shape")
    if values is not None:
        return values
    lengths = args.shape(args.raw_tensor("shape"))
    if len(lengths) != 1 or not isinstance(lengths[0], int):
        args.fail(f"must be 1-D with a known length, got shape {lengths}", "shape", ResultCode.FEATURE_NOT_SUPPORTED)
    return args.runtime_shape("shape", lengths[0], "resize_size")


def _resize_ratio(in_size, out_size, scale: float | None, align_corners: bool) -> tirx.PrimExpr:
    """Paddle's ratio in float32: 0 for a 1-pixel output; else float(in - 1) / (out - 1) with
    align_corners, else float(1. / scale) where scales are given, else float(in) / out."""
    if isinstance(out_size, int) and out_size <= 1:
        return f32(0.0)
    if align_corners:
        num, den = in_size - 1, out_size - 1
    elif scale is not None:
        return f32(np.float32(1.0 / float(np.float32(scale))))
    else:
        num, den = in_size, out_size
    if isinstance(num, int) and isinstance(den, int):
        return f32(np.float32(num) / np.float32(den))
    ratio = f32(num) / f32(den)
    return ratio if isinstance(out_size, int) else tirx.Select(out_size > 1, ratio, f32(0.0))


def _resize(args: OpArgs, linear: bool) -> relax.Expr:
    x = args.tensor("input")
    _, _, in_h, in_w = rank4(args, x, "input")
    align_corners = args.bool("align_corners", False)
    align_mode = args.int("align_mode", 1) if linear else 1
    if align_mode not in (0, 1):
        args.fail(f"must be 0 (half-pixel) or 1 (asymmetric), got {align_mode}", "align_mode")

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
            src = src + f32(0.5)
        return tirx.min(src.astype(dtype_of(k)), size - 1)  # truncation == floor: src >= 0

    def linear_index(k, ratio, size):
        kf = k.astype(F32)
        src = ratio * (kf + f32(0.5)) - f32(0.5) if half_pixel else ratio * kf
        src = tirx.max(src, f32(0.0))
        low = tirx.min(src.astype(dtype_of(k)), size - 1)
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
            one = f32(1.0)
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
