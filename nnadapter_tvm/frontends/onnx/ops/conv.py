"""Convolutions: Conv -> CONV_2D, ConvTranspose -> CONV_2D_TRANSPOSE, DeformConv -> DEFORMABLE_CONV_2D
(1-D as 2-D between UNSQUEEZE and SQUEEZE)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops import qdq
from nnadapter_tvm.frontends.onnx.ops.common import cast, cast_back, fuse_none, in_float32, rank_of
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.operations.conv3d import CONV_3D_TRANSPOSE
from nnadapter_tvm.types import AutoPad
from nnadapter_tvm.types import OperationType as O


def spatial_attrs(ctx: NodeContext, nd: int) -> tuple[list[int], list[int], list[int]]:
    """strides, dilations and the ONNX-ordered pads [b1, b2, ..., e1, e2, ...] (attributes, defaults)."""
    strides = list(ctx.attr("strides", [1] * nd))
    dilations = list(ctx.attr("dilations", [1] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        ctx.fail(f"strides {strides}, dilations {dilations}, pads {pads} do not fit {nd} spatial dims")
    if min(strides) <= 0 or min(dilations) <= 0 or min(pads) < 0:
        ctx.fail(f"strides {strides} and dilations {dilations} must be positive, pads {pads} non-negative")
    return strides, dilations, pads


def same_pads(ctx: NodeContext, sizes, kernel, strides, dilations, mode: str) -> list[int]:
    """ONNX SAME_UPPER / SAME_LOWER: output ceil(in / stride), the odd pad at the end (upper) or start (lower)."""
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        if size is None:
            # Stride 1 pads (k - 1) * d in total whatever the size; a larger stride's pads depend on it.
            if s != 1:
                ctx.unsupported(f"auto_pad {mode} with stride {s} needs static spatial dims (got {list(sizes)})")
            total = (k - 1) * d
        else:
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begins.append(small if mode == "SAME_UPPER" else total - small)
        ends.append(total - small if mode == "SAME_UPPER" else small)
    return begins + ends


def resolve_pads(ctx: NodeContext, sizes, kernel, strides, dilations, pads) -> list[int]:
    """ONNX-ordered pads after auto_pad (NOTSET: the pads attribute; VALID: none; SAME_*: computed)."""
    mode = ctx.attr("auto_pad", "NOTSET")
    if mode == "NOTSET":
        return pads
    if mode == "VALID":
        return [0] * len(pads)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        return same_pads(ctx, sizes, kernel, strides, dilations, mode)
    ctx.fail(f"auto_pad '{mode}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")


def nn_pads(pads: list[int]) -> list[int]:
    """ONNX [h_begin, w_begin, h_end, w_end] -> NNAdapter [top, bottom, left, right]."""
    return [pads[0], pads[2], pads[1], pads[3]]


def lift_1d(ctx: NodeContext, v: Value) -> Value:
    """[N, C, W] -> [N, C, 1, W] (a 1-D operation as a 2-D one)."""
    if v.is_const:
        return ctx.constant(np.expand_dims(v.const, 2))
    shape = None if v.shape is None else (*v.shape[:2], 1, *v.shape[2:])
    return ctx.emit(O.UNSQUEEZE, [v, ctx.i32([2])], shape=shape)


def drop_1d(ctx: NodeContext, v: Value, k: int = 0) -> Value:
    """[N, C, 1, W] -> [N, C, W]: the node's output ``k``."""
    return ctx.emit(O.SQUEEZE, [v, ctx.i32([2])], shape=ctx.out_shape(k))


def lifted_shape(ctx: NodeContext, nd: int, k: int = 0):
    shape = ctx.out_shape(k)
    if shape is None or nd == 2:
        return shape
    return (*shape[:2], 1, *shape[2:])


def conv_operands(ctx: NodeContext, what: str = "Conv", w_index: int = 1) -> tuple[int, Value, Value]:
    """The spatial rank (1 or 2), the input and the filter (input ``w_index``)."""
    x, w = ctx.input(0), ctx.input(w_index)
    rank = rank_of(ctx, x)
    nd = rank - 2
    if nd not in (1, 2):
        ctx.unsupported(f"{what} with {nd} spatial dims: NNAdapter's convolutions are 2-D (1-D as 2-D)")
    if w.rank != rank:
        ctx.fail(f"the filter {w.describe()} must have the input's rank {rank}")
    kernel = ctx.attr("kernel_shape", None)
    if kernel is not None and w.shape is not None and list(kernel) != list(w.shape[2:]):
        ctx.fail(f"kernel_shape {list(kernel)} differs from the filter's spatial dims {list(w.shape[2:])}")
    return nd, x, w


def bias_operand(ctx: NodeContext, i: int) -> Value:
    b = ctx.optional(i)
    return b if b is not None else ctx.f32(np.zeros([0], "float32"))


def lift_attrs(nd: int, strides, dilations, pads):
    if nd == 2:
        return strides, dilations, pads
    return [1, *strides], [1, *dilations], [0, pads[0], 0, pads[1]]


@onnx_op("Conv")
def conv(ctx: NodeContext) -> Value:
    """Conv -> CONV_2D (1-D: UNSQUEEZE, CONV_2D, SQUEEZE); SAME_* pads are computed, the bias may be absent.
    A float16 Conv computes in float32 between CASTs (CONV_2D takes FLOAT32; every float16 value is exact
    in float32): the sums accumulate in float32 and the result is rounded to float16 once, as float16
    inference engines (onnxruntime's MLAS) do."""
    _, x, w = conv_operands(ctx)
    bias = bias_operand(ctx, 2)
    quantized = _quantized_operands(x, w, bias)
    if quantized is not None:
        return emit_conv(ctx, O.CONV_2D, 2, *quantized[:2], [quantized[2]], [fuse_none(ctx)], dtype="float32")
    if x.dtype == np.float16:
        x, back = in_float32(ctx, x, ("float16",), "")
        w = cast(ctx, w, "float32")
        bias = cast(ctx, bias, "float32")
        return cast_back(ctx, conv_nd(ctx, x, w, bias), back)
    return conv_nd(ctx, x, w, bias)


def _quantized_operands(x: Value, w: Value, bias: Value) -> tuple[Value, Value, Value] | None:
    """A QDQ Conv (DequantizeLinear of an 8-bit activation and of an int8 weight, symmetric per tensor or
    per output channel): the quantized input, filter and bias its float operands were dequantized from
    (``qdq``), for a CONV_2D on quantized operands that sums integer products
    (op_converters/quant_integer.py) and gives the real result, which the QuantizeLinear after it
    requantizes.  None for anything else (1-D, a float or run-time weight, a run-time bias)."""
    if x.rank != 4:
        return None
    xq, wq, bq = qdq.activation(x), qdq.weight(w, 0), qdq.bias(bias)
    return None if xq is None or wq is None or bq is None else (xq, wq, bq)


def conv_nd(ctx: NodeContext, x: Value, w: Value, bias: Value) -> Value:
    """CONV_2D of ``x`` and ``w`` (1-D or 2-D, the node's attributes) giving the node's output 0."""
    nd = x.rank - 2
    if w.shape is None or any(d is None for d in w.shape[2:]):
        ctx.unsupported(f"the filter {w.describe()} needs static spatial dims")
    return emit_conv(ctx, O.CONV_2D, nd, x, w, [bias], [fuse_none(ctx)])


def emit_conv(
    ctx: NodeContext,
    op: O,
    nd: int,
    x: Value,
    w: Value,
    extra: list[Value],
    tail: list[Value],
    dtype: str | None = None,
) -> Value:
    """``op`` (CONV_2D or CONV_2D_INTEGER, 1-D as 2-D) of ``x`` and the filter ``w`` with the node's
    geometry, giving its output 0: operands ``x, w, *extra``, auto_pad NONE, the pads (auto_pad resolved),
    strides, group, dilations, ``*tail``."""
    strides, dilations, pads = spatial_attrs(ctx, nd)
    sizes = [None if d is None or d < 0 else d for d in x.shape[2:]]
    pads = resolve_pads(ctx, sizes, w.shape[2:], strides, dilations, pads)
    group = int(ctx.attr("group", 1))
    if nd == 1:
        x, w = lift_1d(ctx, x), lift_1d(ctx, w)
    strides, dilations, pads = lift_attrs(nd, strides, dilations, pads)
    geometry = [
        ctx.i32(int(AutoPad.NONE)),
        ctx.i32(nn_pads(pads)),
        ctx.i32(strides),
        ctx.i32(group),
        ctx.i32(dilations),
    ]
    y = ctx.emit(op, [x, w, *extra, *geometry, *tail], dtype=dtype, shape=lifted_shape(ctx, nd))
    return drop_1d(ctx, y) if nd == 1 else y


def _transpose_geometry(ctx: NodeContext, sizes, kernel, strides, dilations, pads, output_padding):
    """Per spatial axis: the begin pad, the output size (None where the input size is known only at
    execution) and full - out, how many rows of the full transposed result (size full = s * (n - 1) +
    (k - 1) * d + 1) the output leaves out besides the output_padding, as ONNX's reference computes them.
    full - out does not depend on n except for an explicit ``output_shape``, which needs static sizes."""
    mode = ctx.attr("auto_pad", "NOTSET")
    nd = len(kernel)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    output_shape = ctx.attr("output_shape", None)
    explicit = "pads" in ctx.attrs and mode == "NOTSET"
    if output_shape is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        # out = n * s: full + output_padding - out = span + p - s whatever n.
        begins, outs, cut = [], [], []
        for n, span, s, p in zip(sizes, spans, strides, output_padding):
            total = span + p - s
            begins.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
            outs.append(None if n is None else n * s)
            cut.append(total - p)
        return begins, outs, cut
    if output_shape is not None:
        if None in sizes:
            ctx.unsupported(f"output_shape {list(output_shape)} with spatial dims known only at execution")
        full = [s * (n - 1) + span for n, s, span in zip(sizes, strides, spans)]
        output_shape = list(output_shape)[-nd:]
        if explicit:
            begins = pads[:nd]
        else:
            begins = []
            for f, p, out in zip(full, output_padding, output_shape):
                total = f + p - out
                begins.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
        return begins, output_shape, [f - out for f, out in zip(full, output_shape)]
    if mode == "VALID":
        pads = [0] * (2 * nd)
    cut = [b + e - p for p, b, e in zip(output_padding, pads[:nd], pads[nd:])]
    outs = [None if n is None else s * (n - 1) + span - c for n, s, span, c in zip(sizes, strides, spans, cut)]
    return pads[:nd], outs, cut


@onnx_op("ConvTranspose")
def conv_transpose(ctx: NodeContext) -> Value:
    """ConvTranspose -> CONV_2D_TRANSPOSE: the output is rows [pad_begin, pad_begin + out) of the full
    transposed result (zero past it), given to NNAdapter as pads plus output_padding; spatial dims known
    only at execution are fine unless ``output_shape`` is given.  3 spatial dims go to CONV_3D_TRANSPOSE
    (conv_transpose_3d below, an extension: NNAdapter's convolutions are 2-D)."""
    if ctx.input(0).rank == 5:
        return conv_transpose_3d(ctx)
    nd, x, w = conv_operands(ctx, "ConvTranspose")
    if w.shape is None or any(d is None for d in w.shape[2:]):
        ctx.unsupported(f"the filter {w.describe()} needs static spatial dims")
    sizes = [None if d is None or d < 0 else d for d in x.shape[2:]]
    kernel = list(w.shape[2:])
    strides, dilations, pads = spatial_attrs(ctx, nd)
    output_padding = list(ctx.attr("output_padding", [0] * nd))
    begins, outs, cuts = _transpose_geometry(ctx, sizes, kernel, strides, dilations, pads, output_padding)
    nn_begin, nn_end, nn_extra = [], [], []
    for n, s, d, b, out, cut in zip(sizes, strides, dilations, begins, outs, cuts):
        # Rows [b, b + out) of the full result: crop ``end`` rows after them, add ``extra`` zero rows past it.
        end = max(cut - b, 0)
        extra = end - (cut - b)
        if b < 0 or (out is not None and out <= 0) or extra >= max(s, d):
            ctx.unsupported(
                f"output rows [{b}, {b} + {out}) of the full transposed result (input size {n}) are not "
                "expressible with CONV_2D_TRANSPOSE (non-negative pads, output_padding < max(stride, dilation))"
            )
        nn_begin.append(b)
        nn_end.append(end)
        nn_extra.append(extra)
    group = int(ctx.attr("group", 1))
    if nd == 1:
        x, w = lift_1d(ctx, x), lift_1d(ctx, w)
        nn_begin, nn_end, nn_extra = [0, *nn_begin], [0, *nn_end], [0, *nn_extra]
    strides, dilations, _ = lift_attrs(nd, strides, dilations, [0, 0])
    y = ctx.emit(
        O.CONV_2D_TRANSPOSE,
        [
            x,
            w,
            bias_operand(ctx, 2),
            ctx.i32(int(AutoPad.NONE)),
            ctx.i32([nn_begin[0], nn_end[0], nn_begin[1], nn_end[1]]),
            ctx.i32(strides),
            ctx.i32(group),
            ctx.i32(dilations),
            ctx.i32(nn_extra),
            ctx.i32(np.zeros([0], "int32")),
            fuse_none(ctx),
        ],
        shape=lifted_shape(ctx, nd),
    )
    return drop_1d(ctx, y) if nd == 1 else y


@onnx_op("DeformConv")
def deform_conv(ctx: NodeContext) -> Value:
    """DeformConv -> DEFORMABLE_CONV_2D (a mask of ones when absent; offset_group as deformable_group)."""
    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    if rank_of(ctx, x) != 4:
        ctx.unsupported(f"DeformConv on {x.describe()}: DEFORMABLE_CONV_2D is 2-D")
    strides, dilations, pads = spatial_attrs(ctx, 2)
    group, offset_group = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    mask = ctx.optional(4)
    if mask is None:
        if offset.shape is None or any(d is None for d in offset.shape):
            ctx.unsupported(f"an absent mask needs a static offset shape, got {offset.describe()}")
        n, c2, h, wd = offset.shape
        mask = ctx.constant(np.ones([n, c2 // 2, h, wd], x.dtype))
    return ctx.emit(
        O.DEFORMABLE_CONV_2D,
        [
            x,
            offset,
            mask,
            w,
            bias_operand(ctx, 3),
            ctx.i32(nn_pads(pads)),
            ctx.i32(strides),
            ctx.i32(group),
            ctx.i32(offset_group),
            ctx.i32(dilations),
            fuse_none(ctx),
        ],
    )


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
    strides, dilations, pads = spatial_attrs(ctx, 3)
    output_padding = list(ctx.attr("output_padding", [0] * 3))
    begins, outs, cuts = _transpose_geometry(ctx, sizes, kernel, strides, dilations, pads, output_padding)
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
        bias_operand(ctx, 2),
        ctx.i32([*begins, *ends]),
        ctx.i32(strides),
        ctx.i32(dilations),
        ctx.i32(extras),
        ctx.i32(int(ctx.attr("group", 1))),
    ]
    return ctx.emit(CONV_3D_TRANSPOSE, operands)
