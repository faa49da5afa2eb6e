"""Pooling: MaxPool, AveragePool, LpPool -> MAX_POOL_2D / AVERAGE_POOL_2D (1-D as 2-D, 3-D as two 2-D
passes: the window is a product of per-axis ranges; dilated windows as PAD + one SLICE per tap);
GlobalAveragePool / GlobalMaxPool -> REDUCE_MEAN / REDUCE_MAX."""

from __future__ import annotations

import math

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops.common import binary, cast, cast_back, fuse_none, in_float32, rank_of, reshape
from nnadapter_tvm.frontends.onnx.ops.conv import lift_1d, resolve_pads, spatial_attrs
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import AutoPad, Precision
from nnadapter_tvm.types import OperationType as O

# Element types a max pooling computes exactly in float32 (every value is representable; max selects one).
_EXACT_IN_F32 = ("int8", "uint8", "int16", "uint16", "float16")


def _onnx_sizes(ctx: NodeContext, sizes, kernel, strides, pads, ceil_mode: bool) -> list[int | None]:
    """The output size per spatial axis by ONNX's rule: with ceil_mode, a last window that would start
    past the input and its begin pad is dropped.  An axis whose size is known only at execution gives
    None (the NNAdapter operation computes it); with ceil_mode that needs a last window that never
    starts past the input, whatever the size: (out - 1) * s >= n + begin is possible only when
    end + s > k (out - 1 = ceil((n + begin + end - k) / s) is below (n + begin + end - k + s) / s)."""
    nd = len(kernel)
    outs: list[int | None] = []
    for i, (n, k, s) in enumerate(zip(sizes, kernel, strides)):
        if n is None:
            if ceil_mode and pads[nd + i] + s > k:
                ctx.unsupported(
                    f"ceil_mode on an axis of unknown size with kernel {k}, stride {s} and end pad {pads[nd + i]}: "
                    "whether ONNX drops a last window that starts past the input depends on the size"
                )
            outs.append(None)
            continue
        span = n + pads[i] + pads[nd + i] - k
        if span < 0:
            ctx.fail(f"the window {k} exceeds the padded input ({n} + {pads[i]} + {pads[nd + i]})")
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= n + pads[i]:
            out -= 1
        outs.append(out)
    return outs


def _pool_2d(
    ctx: NodeContext, kind: str, x: Value, kernel, strides, pads, outs, count_include_pad=False, ceil=False
) -> Value:
    """One MAX_POOL_2D / AVERAGE_POOL_2D over the last two axes of 4-D ``x`` (ONNX-ordered ``pads``) giving
    ``outs`` (None on an axis of unknown size, where ``ceil`` says whether ONNX's ceil_mode applies).
    Where padding is never counted (max, or average without count_include_pad) a longer end pad stands
    for ceil_mode (s - 1 more on an axis of unknown size); otherwise NNAdapter's ceil_mode must give
    ``outs``."""
    sizes = _dims(x)[2:]
    begin, end = list(pads[:2]), list(pads[2:])
    counted_pad = kind == "avg" and count_include_pad
    need_ceil = False
    for a, (n, k, s, o) in enumerate(zip(sizes, kernel, strides, outs)):
        if n is None:
            if ceil and counted_pad:
                need_ceil = True
            elif ceil:
                end[a] += s - 1  # floor((n + b + e + s - 1 - k) / s) = ceil((n + b + e - k) / s)
            continue
        if (n + begin[a] + end[a] - k) // s + 1 == o:
            continue
        if counted_pad:
            need_ceil = True
            continue
        end[a] = max(end[a], (o - 1) * s + k - n - begin[a])
        if (n + begin[a] + end[a] - k) // s + 1 != o:
            ctx.unsupported(f"output size {list(outs)} is not expressible with floor-mode pooling")
    if need_ceil:
        ceil_sizes = [
            None if n is None else -(-(n + b + e - k) // s) + 1
            for n, b, e, k, s in zip(sizes, begin, end, kernel, strides)
        ]
        if any(c is not None and c != o for c, o in zip(ceil_sizes, outs)):
            ctx.unsupported(
                f"output size {list(outs)} with count_include_pad is neither NNAdapter's floor nor ceil "
                f"{ceil_sizes} size"
            )
    inputs = [
        x,
        ctx.i32(int(AutoPad.NONE)),
        ctx.i32([begin[0], end[0], begin[1], end[1]]),
        ctx.i32(list(kernel)),
        ctx.i32(list(strides)),
        ctx.boolean(need_ceil),
    ]
    shape = (*_dims(x)[:2], *outs)
    if kind == "max":
        return ctx.emit(
            O.MAX_POOL_2D, [*inputs, ctx.boolean(False), ctx.i32(int(Precision.INT64)), fuse_none(ctx)], shape=shape
        )
    return ctx.emit(O.AVERAGE_POOL_2D, [*inputs, ctx.boolean(count_include_pad), fuse_none(ctx)], shape=shape)


def _dims(x: Value) -> tuple:
    """``x``'s dims with every unknown one as None (an ONNX dim_value of -1 included)."""
    return tuple(None if d is None or d < 0 else d for d in x.shape)


def _window(ctx: NodeContext, x: Value):
    """kernel, strides, ONNX-ordered pads, ONNX output sizes (None where a size is known only at execution),
    dilations and whether ceil_mode applies, of a pooling node on ``x``."""
    rank = rank_of(ctx, x)
    nd = rank - 2
    if nd not in (1, 2, 3):
        ctx.unsupported(f"pooling over {nd} spatial dims (1-3 are composed from 2-D poolings)")
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != nd or min(kernel) <= 0:
        ctx.fail(f"kernel_shape {kernel} must hold {nd} positive values")
    strides, dilations, pads = spatial_attrs(ctx, nd)
    sizes = list(_dims(x)[2:])
    if None in sizes and any(d != 1 for d in dilations):
        ctx.unsupported(f"a dilated pooling needs static spatial dims (it is composed per tap), got {x.describe()}")
    mode = ctx.attr("auto_pad", "NOTSET")
    pads = resolve_pads(ctx, sizes, kernel, strides, dilations, pads)
    ceil_mode = bool(ctx.attr("ceil_mode", 0)) and mode == "NOTSET"
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    outs = _onnx_sizes(ctx, sizes, spans, strides, pads, ceil_mode)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        outs = [None if n is None else -(-n // s) for n, s in zip(sizes, strides)]
    return kernel, strides, pads, outs, dilations, ceil_mode


def _pool_nd(ctx: NodeContext, kind: str, x: Value, count_include_pad: bool = False) -> Value:
    """Pooling of ``kind`` over every spatial axis of ``x`` (rank 3-5), as 2-D poolings."""
    kernel, strides, pads, outs, dilations, ceil = _window(ctx, x)
    if any(d != 1 for d in dilations):
        return _dilated_pool(ctx, kind, x, kernel, strides, pads, outs, dilations, count_include_pad)
    nd = len(kernel)
    n, c, *sizes = _dims(x)
    if nd == 1:
        # [N, C, W] -> [N, C, 1, W] and back: UNSQUEEZE / SQUEEZE keep unknown dims unknown.
        y = _pool_2d(
            ctx,
            kind,
            lift_1d(ctx, x),
            [1, *kernel],
            [1, *strides],
            [0, pads[0], 0, pads[1]],
            [1, *outs],
            count_include_pad,
            ceil,
        )
        return ctx.emit(O.SQUEEZE, [y, ctx.i32([2])], shape=(n, c, outs[0]))
    if nd == 2:
        return _pool_2d(ctx, kind, x, kernel, strides, pads, outs, count_include_pad, ceil)
    if None in (c, *sizes):
        ctx.unsupported(f"a 3-D pooling (2-D passes through reshapes) needs static C, D, H and W, got {x.describe()}")
    d, h, w = sizes
    # Pass 1 over (H, W) for every depth slice, pass 2 over D: a window is a product of per-axis ranges,
    # so the maximum is the maximum of maxima and the average (each count a product of per-axis counts)
    # the average of averages.  RESHAPE's 0 copies an unknown batch.
    b = 0 if n is None else n
    x4 = reshape(ctx, x, [b, c * d, h, w], (n, c * d, h, w))
    hw = [pads[1], pads[2], pads[4], pads[5]]
    y = _pool_2d(ctx, kind, x4, kernel[1:], strides[1:], hw, outs[1:], count_include_pad)
    plane = outs[1] * outs[2]
    y = reshape(ctx, y, [b, c, d, plane], (n, c, d, plane))
    y = _pool_2d(
        ctx, kind, y, [kernel[0], 1], [strides[0], 1], [pads[0], 0, pads[3], 0], [outs[0], plane], count_include_pad
    )
    return reshape(ctx, y, [b, c, *outs], (n, c, *outs))


# A dilated window has more taps than this only in pathological models: each tap is one SLICE.
_MAX_DILATED_TAPS = 512


def _dilated_pool(ctx: NodeContext, kind: str, x: Value, kernel, strides, pads, outs, dilations, count_include_pad):
    """A dilated pooling (NNAdapter's poolings have no dilation) as PAD, then one strided SLICE per kernel tap,
    combined by MAX or by ADD and a division by each window's element count (computed at import: padding
    counts only with count_include_pad; the overhang of ceil_mode never counts)."""
    nd = len(kernel)
    taps = math.prod(kernel)
    if taps > _MAX_DILATED_TAPS:
        ctx.unsupported(f"a dilated window of {taps} taps (at most {_MAX_DILATED_TAPS} are composed)")
    sizes = list(x.shape[2:])
    begin = list(pads[:nd])
    end = [
        max(pads[nd + i], (o - 1) * s + (k - 1) * d + 1 - n - b)
        for i, (n, b, o, s, k, d) in enumerate(zip(sizes, begin, outs, strides, kernel, dilations))
    ]
    padded = [n + b + e for n, b, e in zip(sizes, begin, end)]
    fill = -np.inf if kind == "max" else 0.0
    pad_list = [0, 0, 0, 0] + [v for b, e in zip(begin, end) for v in (b, e)]
    xp = ctx.emit(O.PAD, [x, ctx.i32(pad_list), ctx.i32(1), ctx.f32(fill)], shape=(*x.shape[:2], *padded))
    out_shape = (*x.shape[:2], *outs)
    axes = list(range(2, 2 + nd))
    total = None
    for tap in np.ndindex(*kernel):
        starts = [t * d for t, d in zip(tap, dilations)]
        ends = [st + (o - 1) * s + 1 for st, o, s in zip(starts, outs, strides)]
        piece = ctx.emit(
            O.SLICE, [xp, ctx.i32(axes), ctx.i32(starts), ctx.i32(ends), ctx.i32(list(strides))], shape=out_shape
        )
        if total is None:
            total = piece
        else:
            total = binary(ctx, O.MAX if kind == "max" else O.ADD, total, piece, shape=out_shape)
    if kind == "max":
        return total
    # Which padded positions count: the input, plus the declared pads with count_include_pad.
    counted = np.zeros(padded, "float32")
    inner = tuple(slice(b, b + n) for b, n in zip(begin, sizes))
    declared = tuple(slice(0, b + n + pads[nd + i]) for i, (b, n) in enumerate(zip(begin, sizes)))
    if count_include_pad:
        counted[declared] = 1
    counted[inner] = 1
    counts = np.zeros(outs, "float32")
    for tap in np.ndindex(*kernel):
        index = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilations, outs, strides))
        counts += counted[index]
    return binary(ctx, O.DIV, total, ctx.f32(counts.reshape(1, 1, *outs)), shape=out_shape)


def _as_f32(ctx: NodeContext, x: Value, exact: tuple[str, ...]) -> tuple[Value, np.dtype | None]:
    """``x`` as float32 (CAST) when its type is one of ``exact``; the original type to cast back to."""
    return in_float32(ctx, x, exact, f"pooling of {x.dtype} (NNAdapter's poolings take float32)")


@onnx_op("MaxPool")
def max_pool(ctx: NodeContext) -> Value | list[Value]:
    """MaxPool -> MAX_POOL_2D (small integer and float16 inputs through an exact float32 CAST); the
    Indices output (flat positions in the input, row- or column-major) from MAX_POOL_2D's plane indices."""
    x, dtype = _as_f32(ctx, ctx.input(0), _EXACT_IN_F32)
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return _max_pool_with_indices(ctx, x)
    return cast_back(ctx, _pool_nd(ctx, "max", x), dtype)


def _max_pool_with_indices(ctx: NodeContext, x: Value) -> list[Value]:
    kernel, strides, pads, outs, dilations, _ = _window(ctx, x)
    if len(kernel) != 2 or x.dtype != np.float32 or any(d != 1 for d in dilations):
        ctx.unsupported("MaxPool's Indices output is supported for undilated 2-D float32 poolings")
    n, c, h, w = _dims(x)
    if None in (n, c, h, w):
        # The flat indices add n * C * H * W offsets computed at import.
        ctx.unsupported(f"MaxPool's Indices need a static shape, got {x.describe()}")
    if any(p >= k for p, k in zip(pads, kernel * 2)):
        ctx.unsupported(f"pads {pads} reach a kernel {kernel}: a window may hold no input element")
    floor_sizes = [
        (sz + pads[i] + pads[2 + i] - k) // s + 1 for i, (sz, k, s) in enumerate(zip((h, w), kernel, strides))
    ]
    ends = [
        max(pads[2 + i], (o - 1) * s + k - sz - pads[i])
        for i, (sz, k, s, o) in enumerate(zip((h, w), kernel, strides, outs))
    ]
    if (
        floor_sizes != outs
        and [(sz + pads[i] + ends[i] - k) // s + 1 for i, (sz, k, s) in enumerate(zip((h, w), kernel, strides))] != outs
    ):
        ctx.unsupported(f"output size {outs} is not expressible with floor-mode pooling")
    y, plane = ctx.emit(
        O.MAX_POOL_2D,
        [
            x,
            ctx.i32(int(AutoPad.NONE)),
            ctx.i32([pads[0], ends[0], pads[1], ends[1]]),
            ctx.i32(kernel),
            ctx.i32(strides),
            ctx.boolean(False),
            ctx.boolean(True),
            ctx.i32(int(Precision.INT64)),
            fuse_none(ctx),
        ],
        dtype=["float32", "int64"],
        shape=(n, c, *outs),
        outputs=2,
    )
    if int(ctx.attr("storage_order", 0)) == 1:
        # Column-major: h * W + w -> w * H + h, through float32 (exact: the plane holds < 2^24 elements).
        if h * w >= 1 << 24:
            ctx.unsupported(f"column-major indices of a {h}x{w} plane (at least 2^24 elements)")
        shape = (n, c, *outs)
        pf = cast(ctx, plane, "float32")
        row = ctx.emit(O.FLOOR, [binary(ctx, O.DIV, pf, ctx.f32(float(w)), shape=shape)], shape=shape)
        col = binary(ctx, O.SUB, pf, binary(ctx, O.MUL, row, ctx.f32(float(w)), shape=shape), shape=shape)
        pf = binary(ctx, O.ADD, binary(ctx, O.MUL, col, ctx.f32(float(h)), shape=shape), row, shape=shape)
        plane = cast(ctx, pf, "int64")
    offsets = (np.arange(n * c, dtype="int64") * (h * w)).reshape(n, c, 1, 1)
    return [y, binary(ctx, O.ADD, plane, ctx.constant(offsets), shape=ctx.out_shape(1))]


@onnx_op("AveragePool")
def average_pool(ctx: NodeContext) -> Value:
    """AveragePool -> AVERAGE_POOL_2D with count_include_pad."""
    x, dtype = _as_f32(ctx, ctx.input(0), ())
    return cast_back(ctx, _pool_nd(ctx, "avg", x, bool(ctx.attr("count_include_pad", 0))), dtype)


@onnx_op("LpPool")
def lp_pool(ctx: NodeContext) -> Value:
    """LpPool -> (sum of |x|^p over the window)^(1/p), the sum as kernel_size * AVERAGE_POOL_2D with
    count_include_pad (padding adds 0; every window then counts kernel_size elements)."""
    x, _ = _as_f32(ctx, ctx.input(0), ())
    p = float(ctx.attr("p", 2))
    if p <= 0:
        ctx.fail(f"p {p} must be positive")
    if ctx.attr("ceil_mode", 0):
        kernel, strides, pads, outs, _, _ = _window(ctx, x)
        nd = len(kernel)
        if None in outs:
            ctx.unsupported(f"LpPool with ceil_mode needs static spatial dims, got {x.describe()}")
        floor = [
            (n + pads[i] + pads[nd + i] - k) // s + 1 for i, (n, k, s) in enumerate(zip(x.shape[2:], kernel, strides))
        ]
        if floor != outs:
            ctx.unsupported(f"ceil_mode windows past the padding (output {outs}, floor {floor}) count fewer elements")
    powered = binary(ctx, O.POW, ctx.emit(O.ABS, [x], shape=x.shape), ctx.f32(p), shape=x.shape)
    avg = _pool_nd(ctx, "avg", powered, True)
    kernel = math.prod(ctx.attr("kernel_shape"))
    total = binary(ctx, O.MUL, avg, ctx.f32(float(kernel)), shape=avg.shape)
    return binary(ctx, O.POW, total, ctx.f32(1.0 / p), shape=avg.shape)


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: NodeContext) -> Value:
    """GlobalAveragePool / GlobalMaxPool -> REDUCE_MEAN / REDUCE_MAX over the spatial axes, kept."""
    x = ctx.input(0)
    rank = rank_of(ctx, x)
    if rank < 3:
        ctx.fail(f"needs rank >= 3 [N, C, spatial...], got {x.describe()}")
    op = O.REDUCE_MEAN if ctx.op_type == "GlobalAveragePool" else O.REDUCE_MAX
    return ctx.emit(op, [x, ctx.i32(list(range(2, rank))), ctx.boolean(True)])
