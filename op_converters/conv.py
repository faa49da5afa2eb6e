"""Convolutions: CONV_2D, CONV_2D_TRANSPOSE and DEFORMABLE_CONV_2D.

A CONV_2D of an 8-bit quantized input and a constant 8-bit symmetric filter sums integer products
(``quant_integer``).  Other quantized operands arrive dequantized (docs/quantization.md): a per-channel
filter is dequantized along its own ``channel_dim`` and a quantized bias with its own scales, so the
spec's relation ``bias_scale[i] = input_scale * filter_scale[i]`` is what a well-formed model satisfies
but is not needed for the result to be right.
"""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx, topi

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import (
    check_window,
    conv_geometry,
    fuse,
    pair,
    rank4,
    relax_padding,
    spatial_pads,
    unfused,
    with_plain_dims,
)
from nnadapter_tvm.op_converters.quant_integer import integer_conv_2d
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode


def _add_bias(args: OpArgs, y: relax.Expr, c_out: int) -> relax.Expr:
    """``y`` plus the [C_out] ``bias`` operand (an absent or empty operand means none)."""
    if not args.has("bias"):
        return y
    b = args.tensor("bias")
    if args.shape(b) != [c_out]:
        args.fail(f"bias shape {args.shape(b)} must be [C_out] = [{c_out}]", "bias")
    return relax.op.add(y, relax.op.reshape(b, [1, c_out, 1, 1]))


@converter(O.CONV_2D)
def conv_2d(args: OpArgs) -> relax.Expr:
    """input, filter, bias, auto_pad, pads, strides, group, dilations, fuse_code -> output.

    Grouped cross-correlation as in Paddle's conv2d: output channel o of group g = o // (C_out / group)
    sums over input channels [g * C_in / group, (g + 1) * C_in / group); depthwise convolution is the case
    ``group == C_in`` with a ``[C_out, 1, kh, kw]`` filter (C_out a multiple of C_in).  Pads are the spec's
    [top, bottom, left, right] or Paddle's SAME (see ``spatial_pads``); an empty bias operand means none.

    Reference: the spec; Paddle's conv2d for groups and SAME.
    """
    x, w = args.tensor("input"), args.tensor("filter")
    x_dims, w_dims = rank4(args, x, "input"), rank4(args, w, "filter")
    strides, group, dilations, pads = conv_geometry(args, x_dims, w_dims)
    c_out = w_dims[0]
    integer = integer_conv_2d(args, strides, group, dilations, pads, c_out)
    if integer is not None:
        return fuse(args, integer)
    pruned = _without_outer_taps(args, w, x_dims, w_dims, strides, dilations, pads)
    if pruned is not None:
        w, dilations, pads = pruned
    y = relax.op.nn.conv2d(x, w, strides=strides, padding=relax_padding(pads), dilation=dilations, groups=group)
    return fuse(args, _add_bias(args, y, c_out))


def _live_taps(size: int, taps: int, stride: int, dilation: int, before: int, after: int) -> tuple[int, int]:
    """The first and last filter tap along one axis that reads inside an input of ``size`` for some output
    position (the taps between them do too: the rows a tap reads move with it)."""
    out = (size + before + after - dilation * (taps - 1) - 1) // stride + 1
    live = [
        t for t in range(taps) if t * dilation - before <= size - 1 and (out - 1) * stride + t * dilation - before >= 0
    ]
    return (live[0], live[-1]) if live else (0, taps - 1)


def _without_outer_taps(
    args: OpArgs, w: relax.Expr, x_dims: list, w_dims: list, strides: list[int], dilations: list[int], pads: list[int]
) -> tuple[relax.Expr, list[int], list[int]] | None:
    """(filter, dilations, pads) without the outer tap rows and columns that read only padding, for every
    output position: a dilated convolution on a small map (DeepLabV3's ASPP, dilation 36 on 14x14, reads
    inside with its centre tap alone) then multiplies no zeros and pads no wider than it reads (the kernel
    pads its input by the whole window first).  Exact: each dropped product is a weight times a padding
    zero, so only where the sizes are known and the dropped weights are finite constants (inf x 0 is NaN);
    None where nothing is dropped, or a cut would leave a negative pad."""
    sizes, taps = x_dims[2:], w_dims[2:]
    if not all(isinstance(d, int) for d in (*sizes, *taps)) or not args.operand("filter").is_constant:
        return None
    cuts = [
        _live_taps(n, k, s, d, pads[2 * a], pads[2 * a + 1])
        for a, (n, k, s, d) in enumerate(zip(sizes, taps, strides, dilations))
    ]
    if all(lo == 0 and hi == k - 1 for (lo, hi), k in zip(cuts, taps)):
        return None
    new_pads, new_dilations = [], []
    for a, ((lo, hi), k, d) in enumerate(zip(cuts, taps, dilations)):
        new_pads += [pads[2 * a] - lo * d, pads[2 * a + 1] - (k - 1 - hi) * d]
        new_dilations.append(d if hi > lo else 1)  # one tap left: its dilation spans nothing
    if min(new_pads) < 0:
        return None
    weight = args.value("filter")
    if weight.dtype.kind != "f" or str(weight.dtype) != str(w.ty.dtype):
        return None  # a quantized filter: the kernel reads it dequantized
    kept = weight[:, :, cuts[0][0] : cuts[0][1] + 1, cuts[1][0] : cuts[1][1] + 1]
    dropped = np.ones(weight.shape[2:], bool)
    dropped[cuts[0][0] : cuts[0][1] + 1, cuts[1][0] : cuts[1][1] + 1] = False
    if not np.isfinite(weight[:, :, dropped]).all():
        return None
    return relax.const(np.ascontiguousarray(kept), str(weight.dtype)), new_dilations, new_pads


@converter(O.CONV_2D_TRANSPOSE)
def conv_2d_transpose(args: OpArgs) -> relax.Expr:
    """input, filter [C_in, C_out / group, kh, kw], bias, auto_pad, pads, strides, group, dilations,
    output_padding, output_shape, fuse_code -> output [N, C_out, H_out, W_out].

    Input pixel (i, j) of channel c (group g = c // (C_in / group)) adds ``x * filter[c, o', a, b]`` to
    output channel g * C_out / group + o' at row i * stride_h - pad_top + a * dilation_h (columns alike);
    rows outside [0, H_out) are dropped.  H_out = (H_in - 1) * stride_h - pad_top - pad_bottom +
    dilation_h * (kh - 1) + 1 + output_padding_h, or ``output_shape``'s height when that is given; the
    rows past the full transposed result (when output_padding exceeds pad_bottom) get the bias only.

    Filter layout: the spec writes [C_out, C_in, kh, kw], but the header, NNAdapter's shape inference
    (operation/conv2d_transpose.cc: C_out = group * filter[1]) and Paddle's conv2d_transpose use
    [C_in, C_out / group, kh, kw]; this converter follows the latter.  SAME pads are computed from the
    input size as for CONV_2D (NNAdapter's and Paddle's rule; unlike Paddle, dilation is kept, as CONV_2D
    keeps it).  As in Paddle, output_padding must lie in [0, max(stride, dilation)), ``output_shape`` in
    [computed, computed + stride), and given both, they must agree.

    Reference: Paddle's conv2d_transpose; NNAdapter's operation/conv2d_transpose.cc for shapes.
    """
    x, w = args.tensor("input"), args.tensor("filter")
    _, c_in, h, wd = rank4(args, x, "input")
    w_in, c_out_per_group, kh, kw = rank4(args, w, "filter")
    strides = pair(args, "strides", [1, 1])
    group = args.int("group", 1)
    dilations = pair(args, "dilations", [1, 1])
    if group <= 0 or (isinstance(c_in, int) and c_in % group):
        args.fail(f"group {group} must be positive and divide C_in={c_in}", "group")
    if isinstance(c_in, int) and w_in != c_in:
        args.fail(f"filter {[w_in, c_out_per_group, kh, kw]} must be [C_in = {c_in}, C_out / group, kh, kw]", "filter")
    c_out = c_out_per_group * group
    kernel = [(kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1]
    pads = spatial_pads(args, [h, wd], [kh, kw], strides, dilations)
    output_padding = args.ints("output_padding", [0, 0])
    if len(output_padding) != 2:
        args.fail(f"must hold 2 values (height, width), got {output_padding}", "output_padding")
    full = [(size - 1) * s + k for size, s, k in zip([h, wd], strides, kernel)]  # before cropping the pads
    computed = [f - before - after for f, before, after in zip(full, pads[0::2], pads[1::2])]
    for axis, size, p, s, d in zip(("height", "width"), computed, output_padding, strides, dilations):
        if isinstance(size, int) and size <= 0:
            args.fail(f"leave a {axis} of {size}: the pads exceed the full transposed output", "pads")
        if not 0 <= p < max(s, d):
            args.fail(f"{axis} {p} must lie in [0, max(stride, dilation) = {max(s, d)})", "output_padding")
    extra = output_padding
    if args.has("output_shape"):
        shape = args.ints("output_shape")
        if len(shape) != 2:
            args.fail(f"must hold 2 values (height, width), got {shape}", "output_shape")
        if not all(isinstance(c, int) for c in computed):
            args.fail("needs static spatial input dimensions", "output_shape", code=ResultCode.FEATURE_NOT_SUPPORTED)
        for axis, want, size, s in zip(("height", "width"), shape, computed, strides):
            if not size <= want < size + s:
                message = f"{axis} {want} must lie in [{size}, {size + s}) (the computed size plus < stride)"
                args.fail(message, "output_shape")
        extra = [want - size for want, size in zip(shape, computed)]
        if args.has("output_padding") and any(output_padding) and extra != output_padding:
            args.fail(f"{output_padding} disagrees with output_shape {shape} (which implies {extra})", "output_padding")
    # The output is rows [pad_top, pad_top + computed + extra) of the full result: crop less at the end,
    # and append zero rows where that runs past the full result.
    crop = [max(after - e, 0) for after, e in zip(pads[1::2], extra)]
    grow = [max(e - after, 0) for after, e in zip(pads[1::2], extra)]
    padding = [pads[0], pads[2], crop[0], crop[1]]

    if kh == strides[0] and kw == strides[1] and group == 1 and dilations == [1, 1] and not any(padding + grow):
        # Windows that tile the output without overlap (kernel = stride: the 2x2/2 upsampling of detectors'
        # FPN heads): each input pixel writes its own kh x kw block, a 1x1 convolution to kh * kw * C_out
        # channels followed by depth-to-space.  The convolution gets the packed CPU kernel and the NHWC
        # layout; TVM's NCHW conv2d_transpose took its generic reduction rule (a third of PP-OCRv4's det).
        # Plain variables for dims computed from the model's input sizes, in and out (as below): with
        # expression dims, PP-OCRv4 det's FPN did not finish compiling in 20 minutes.
        x = with_plain_dims(args, x, "conv2d_transpose_in")
        y = _transpose_as_conv(args, x, w, kh, kw, c_out)
        return fuse(args, _add_bias(args, with_plain_dims(args, y, "conv2d_transpose_out"), c_out))

    def transposed(data: te.Tensor, kernel: te.Tensor) -> te.Tensor:
        # What LegalizeOps makes of relax.nn.conv2d_transpose in NCHW (a dilated kernel is a zero-filled one).
        if any(d != 1 for d in dilations):
            kernel = topi.nn.dilate(kernel, [1, 1, *dilations], name="kernel_dilate")
        return topi.nn.group_conv2d_transpose_nchw(data, kernel, strides, padding, data.dtype, [0, 0], group)

    # A TE compute rather than relax.nn.conv2d_transpose: ConvertLayout would move that op to NHWC after
    # a convolution, where TVM has no lowering for it (the build then failed); as a call_tir it stays NCHW.
    y = args.emit_te(
        transposed, with_plain_dims(args, x, "conv2d_transpose_in"), w, primfunc_name_hint="conv2d_transpose"
    )
    # Its output dims too: convolutions fused after it failed FuseTIR on expression dims ("All shape inputs
    # are expected to be single tirx var").
    y = with_plain_dims(args, y, "conv2d_transpose_out")
    if any(grow):
        y = relax.op.nn.pad(y, [0, 0, 0, 0, 0, grow[0], 0, grow[1]])
    return fuse(args, _add_bias(args, y, c_out))


def _transpose_as_conv(args: OpArgs, x: relax.Expr, w: relax.Expr, kh: int, kw: int, c_out: int) -> relax.Expr:
    """A transposed convolution whose kernel equals its stride (no padding, groups or dilation):
    out[n, o, i * kh + a, j * kw + b] = sum_c x[n, c, i, j] * w[c, o, a, b], as a 1x1 convolution to channel
    (a * kw + b) * C_out + o, then depth-to-space (one compute: its index math divides by kh and kw
    only; as reshape, permute, reshape it divided by the sizes known only at execution, 2 ms for the
    320x320 map of PP-OCRv4 det)."""
    c_in = args.shape(x)[1]
    weight = relax.op.reshape(relax.op.permute_dims(w, [2, 3, 1, 0]), [kh * kw * c_out, c_in, 1, 1])
    y = args.emit(relax.op.nn.conv2d(x, weight))

    def depth_to_space(t: te.Tensor) -> te.Tensor:
        n, _, h, wd = t.shape
        return te.compute(
            (n, c_out, h * kh, wd * kw),
            lambda b, o, r, c: t[b, ((r % kh) * kw + c % kw) * c_out + o, r // kh, c // kw],
            name="depth_to_space",
        )

    # A kernel of its own: fused with the transpose before it (the convolution runs in NHWC), FuseTIR
    # failed on sizes known only at execution ("Inconsistent buffers ... mapped to the same relax var").
    return unfused(args.emit_te(depth_to_space, y, primfunc_name_hint="depth_to_space"))


def _deformable_sample(
    x: te.Tensor,
    offset: te.Tensor,
    mask: te.Tensor,
    kernel: tuple[int, int],
    starts: tuple[int, int],
    strides: list[int],
    dilations: list[int],
    deformable_group: int,
) -> te.Tensor:
    """col[n, c, i, j, y, x] = mask * bilinear(input[n, c], sampling point of tap (i, j) at output (y, x))."""
    n, c, h, w = x.shape
    kh, kw = kernel
    c_per_dg = c // deformable_group
    f32 = "float32"
    zero, one = tirx.const(0.0, f32), tirx.const(1.0, f32)
    hf, wf = tirx.Cast(f32, h), tirx.Cast(f32, w)

    def compute(b, ch, i, j, oy, ox):
        tap = (ch // c_per_dg) * (kh * kw) + i * kw + j
        py = tirx.Cast(f32, oy * strides[0] - starts[0] + i * dilations[0]) + offset[b, 2 * tap, oy, ox]
        px = tirx.Cast(f32, ox * strides[1] - starts[1] + j * dilations[1]) + offset[b, 2 * tap + 1, oy, ox]
        inside = tirx.all(py > -one, px > -one, py < hf, px < wf)
        # Clamped so that the float -> int conversion stays defined; outside points give 0 anyway.
        py = tirx.max(tirx.min(py, hf), -one)
        px = tirx.max(tirx.min(px, wf), -one)
        fy, fx = tirx.floor(py), tirx.floor(px)
        ly, lx = py - fy, px - fx
        y0, x0 = tirx.Cast("int64", fy), tirx.Cast("int64", fx)

        def at(yy, xx):
            valid = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w)
            yc = tirx.max(tirx.min(yy, h - 1), 0)
            xc = tirx.max(tirx.min(xx, w - 1), 0)
            return tirx.Select(valid, x[b, ch, yc, xc], zero)

        value = (
            (one - ly) * (one - lx) * at(y0, x0)
            + (one - ly) * lx * at(y0, x0 + 1)
            + ly * (one - lx) * at(y0 + 1, x0)
            + ly * lx * at(y0 + 1, x0 + 1)
        )
        return tirx.Select(inside, value * mask[b, tap, oy, ox], zero)

    out_h, out_w = offset.shape[2], offset.shape[3]
    return te.compute((n, c, kh, kw, out_h, out_w), compute, name="deformable_sample")


@converter(O.DEFORMABLE_CONV_2D)
def deformable_conv_2d(args: OpArgs) -> relax.Expr:
    """input, offset [N, 2 * dg * kh * kw, H_out, W_out], mask [N, dg * kh * kw, H_out, W_out], filter,
    bias, pads, strides, group, deformable_group (dg), dilations, fuse_code -> output.

    Modulated (v2) deformable convolution as Paddle's deformable_conv: tap (i, j) of output (y, x) for an
    input channel of deformable group d samples the input at (y * stride_h - pad_top + i * dilation_h +
    offset[n, 2 * t, y, x], x * stride_w - pad_left + j * dilation_w + offset[n, 2 * t + 1, y, x]) with
    t = d * kh * kw + i * kw + j, bilinearly (pixels outside the input count as 0; a point at or past -1
    or H_in / W_in gives 0), times mask[n, t, y, x]; the samples are then convolved with the grouped
    filter [C_out, C_in / group, kh, kw] as in CONV_2D, and the bias added.  The spec gives offset and
    mask the spatial size [H_in, W_in]; Paddle's kernel indexes them by output position, [H_out, W_out]
    (the same when stride 1 keeps the size), which this converter requires.

    Reference: Paddle's deformable_conv (v2, with mask; lite/kernels/host/deformable_conv_op.h).
    """
    x, offset, mask, w = args.tensor("input"), args.tensor("offset"), args.tensor("mask"), args.tensor("filter")
    n, c_in, h, wd = rank4(args, x, "input")
    c_out, c_per_group, kh, kw = rank4(args, w, "filter")
    pads = args.ints("pads", [0, 0, 0, 0])
    if len(pads) != 4 or any(p < 0 for p in pads):
        args.fail(f"must hold 4 non-negative values (top, bottom, left, right), got {pads}", "pads")
    strides = pair(args, "strides", [1, 1])
    group = args.int("group", 1)
    deformable_group = args.int("deformable_group", 1)
    dilations = pair(args, "dilations", [1, 1])
    if not isinstance(c_in, int):
        args.fail("needs a static channel dimension", "input", code=ResultCode.FEATURE_NOT_SUPPORTED)
    if group <= 0 or c_in % group or c_out % group:
        args.fail(f"group {group} must be positive and divide C_in={c_in} and C_out={c_out}", "group")
    if c_per_group * group != c_in:
        message = f"filter has {c_per_group} input channels per group, expected C_in / group = {c_in // group}"
        args.fail(message, "filter")
    if deformable_group <= 0 or c_in % deformable_group:
        args.fail(f"deformable_group {deformable_group} must be positive and divide C_in={c_in}", "deformable_group")
    kernel = [(kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1]
    check_window(args, [h, wd], pads, kernel, "filter")
    out_hw = [
        (size + before + after - k) // s + 1
        for size, before, after, k, s in zip([h, wd], pads[0::2], pads[1::2], kernel, strides)
    ]
    taps = deformable_group * kh * kw
    for name, expr, channels in (("offset", offset, 2 * taps), ("mask", mask, taps)):
        shape = args.shape(expr)
        want = [n, channels, *out_hw]
        if len(shape) != 4 or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(shape, want, strict=True)
        ):
            args.fail(f"shape {shape} must be [N, {channels}, H_out, W_out] = {want}", name)
    col = args.emit_te(
        _deformable_sample,
        x,
        offset,
        mask,
        (kh, kw),
        (pads[0], pads[2]),
        strides,
        dilations,
        deformable_group,
        primfunc_name_hint="deformable_conv2d_sample",
    )
    out_h, out_w = args.shape(offset)[2:]
    k = c_per_group * kh * kw
    col = relax.op.reshape(col, [n, group, k, out_h * out_w])
    weight = relax.op.reshape(w, [group, c_out // group, k])
    y = relax.op.reshape(relax.op.matmul(weight, col), [n, c_out, out_h, out_w])
    return fuse(args, _add_bias(args, y, c_out))
