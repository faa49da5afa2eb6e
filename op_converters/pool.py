"""2-D pooling.

Output sizes follow the spec: floor((H_in + pad_top + pad_bottom - k) / stride + 1), or ceil(...) when
``ceil_mode`` — every window the formula counts is computed, including a last ``ceil_mode`` window that
starts in (or past) the bottom/right padding, which PyTorch and TVM would drop.  Window (i, j) starts at
(i * stride_h - pad_top, j * stride_w - pad_left) and, as in Paddle's pooling kernels, is cut at the
padded input's far edge (H_in + pad_bottom, W_in + pad_right): a ``ceil_mode`` overhang past it covers
nothing and is never counted.  Max pooling takes the maximum of the real elements; average pooling
divides their sum by the number of real elements (``count_include_pad`` false) or of real and padding
elements inside [-pad_top, H_in + pad_bottom) x [-pad_left, W_in + pad_right) (true).  Paddle's CPU
kernel cuts at H_in + pad_top instead (it keeps only the leading pads), which agrees for symmetric
padding; with asymmetric pads this converter uses the padding as given.

A window with no real element (possible when a pad is at least the kernel, or for a ``ceil_mode`` window
past the input): max pooling gives the lowest float32, -FLT_MAX, and index -1, as Paddle's CPU kernels
(``MaxPool::initial``, max_pool2d_with_index) do; average pooling gives 0 with either
``count_include_pad``.  For ``count_include_pad`` true that is Paddle's value too (0 / padding count);
for false Paddle divides 0 by 0 and returns NaN, while NNAdapter's own reference kernel
(operation/math/pool2d.h) skips such windows and leaves its zero-initialized 0 — this converter gives 0,
a finite value that a quantized output can represent.

Where TVM's ``avg_pool2d``/``max_pool2d`` produce the spec's size (always without ``ceil_mode``; with it,
unless the last window starts at or past row H_in / column W_in, i.e. holds no real element) they
compute exactly this rule, empty windows included, and are used; otherwise a TE compute implements the
rule (tests/ops/test_pool.py checks both paths).  Relax's max pool is lowered by ``legalize_max_pool2d``
(registered over TVM's rule), which keeps its layout (NHWC next to convolutions) and its schedule.

NaN: every max pool (both paths, ADAPTIVE_MAX_POOL_2D too) gives NaN for a window holding a NaN anywhere,
as numpy's max does, and its index points at the first NaN; a window whose real elements are all -inf
gives -inf.  Sizes known only at execution (batch, H, W) are TIR expressions of the spec's formulas; a
window larger than the padded input at execution gives an empty output (not checked at run time).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import tvm
from tvm import relax, sym, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import (
    check_window,
    fuse,
    nan_max,
    pair,
    rank4,
    relax_padding,
    spatial_pads,
)
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.runtime.lowering_rules import register_legalize
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision


def _window(args: OpArgs, x: relax.Expr) -> tuple[list[int], list[int], list[int]]:
    """kernel_shape, strides and the spec-ordered pads [top, bottom, left, right] from the operands
    auto_pad, pads, kernel_shape and strides."""
    _, _, h, w = rank4(args, x, "input")
    kernel, strides = pair(args, "kernel_shape"), pair(args, "strides", [1, 1])
    pads = spatial_pads(args, [h, w], kernel, strides, [1, 1])
    check_window(args, [h, w], pads, kernel, "kernel_shape")
    return kernel, strides, pads


def _pool(
    args: OpArgs,
    x: relax.Expr,
    kind: str,
    kernel: list[int],
    strides: list[int],
    pads: list[int],
    ceil_mode: bool,
    count_include_pad: bool = False,
) -> relax.Var:
    """Max or average pooling by the module docstring's rule, at the spec's output size: Relax's pool where
    it produces that size, else a TE compute."""
    padding = relax_padding(pads)
    if kind == "max":
        call = relax.op.nn.max_pool2d(x, kernel, strides, padding, ceil_mode=ceil_mode)
    else:
        call = relax.op.nn.avg_pool2d(
            x, kernel, strides, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad
        )
    _, _, h, w = args.shape(x)
    out_hw = [
        _spec_size(size, before, after, k, s, ceil_mode)
        for size, before, after, k, s in zip((h, w), pads[0::2], pads[1::2], kernel, strides)
    ]
    # Relax infers its pool's output shape without emitting anything (a throwaway builder normalizes it).
    relax_hw = list(relax.BlockBuilder().normalize(call).ty.shape.values)[2:]
    analyzer = sym.Analyzer()
    if all(analyzer.can_prove_equal(a, b) for a, b in zip(out_hw, relax_hw)):
        return args.emit(call)
    return args.emit_te(
        lambda t: _pool_te(t, kind, kernel, strides, pads, out_hw, count_include_pad),
        x,
        primfunc_name_hint=f"{kind}_pool2d_spec",
    )


# The reductions start from -inf and taps in the padding count as -inf (the padding is left out, as ONNX
# says): a window whose real elements are all -inf gives -inf (numpy), also beside padding (counting the
# padding as -FLT_MAX gave -FLT_MAX there, a fuzz finding).  A window with no real element at all gives the
# lowest finite value, -FLT_MAX, as Paddle's kernels (MaxPool::initial) start from it (``_empty_windows``).
_MAX = nan_max(lambda dtype: tirx.const(float("-inf"), dtype), name="max_pool")


def _has_real_tap(start, k: int, d: int, size) -> tirx.PrimExpr:
    """Whether a window's taps start, start + d, ..., start + (k - 1) d along one axis reach [0, size)."""
    first = tirx.Select(start >= 0, tirx.const(0, str(start.ty)), tirx.floordiv(d - 1 - start, d))
    return tirx.all(first < k, start + first * d < size)


def _empty_windows(pooled: te.Tensor, starts: Callable, kernel: list, dilation: list, hw: list) -> te.Tensor:
    """``pooled`` with -FLT_MAX for each window that holds no real element (``starts(index)`` gives a
    window's first row and column): an element-wise stage, added only where the padding allows such
    windows (a pad at least the window's span, a ``ceil_mode`` window past the input)."""
    lowest = te.min_value(pooled.dtype)

    def pick(*index):
        (sh_, sw_) = starts(index)
        real = tirx.all(
            _has_real_tap(sh_, kernel[0], dilation[0], hw[0]), _has_real_tap(sw_, kernel[1], dilation[1], hw[1])
        )
        return tirx.if_then_else(real, pooled(*index), lowest)

    return te.compute(pooled.shape, pick, name="max_pool_empty_windows")


def _neg_inf(dtype: str) -> tirx.PrimExpr:
    return tirx.const(float("-inf"), dtype)


def nan_max_pool2d_te(
    x: te.Tensor,
    kernel: list,
    strides: list,
    dilation: list,
    padding: list,
    layout: str,
    out_hw: list,
) -> te.Tensor:
    """Relax's ``max_pool2d`` (``padding`` in Relax's order [top, left, bottom, right]) in ``layout``
    NCHW or NHWC at ``out_hw``, with a NaN-aware maximum: a window holding a NaN gives NaN wherever the
    NaN lies, as numpy's max (and the spec's reference) does.

    TOPI's pool reduces with ``max(acc, x) = acc > x ? acc : x``, which a later element overwrites when
    ``acc`` is NaN, so only a NaN in a window's last place survived.  The window is read in place, each
    tap outside the input taken as the lowest value (as TOPI's padding with ``min_value``), so there is no
    separate padding stage and the CPU schedule sees one reduction block (targets/cpu/generic.py
    vectorizes an NHWC pool over its channels; a 112x112x64 pool runs as fast as TOPI's).  The read is an
    ``if_then_else``, not a ``Select``: TVM simplifies a Select's value under its condition, which drops
    the index clamps, and a Select evaluates both sides, so it would read before the buffer.
    """
    h_axis, w_axis = layout.index("H"), layout.index("W")
    h, w = x.shape[h_axis], x.shape[w_axis]
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    top, left = padding[0], padding[1]
    shape = list(x.shape)
    shape[h_axis], shape[w_axis] = out_hw
    outside = _neg_inf(x.dtype)

    def maximum(*index):
        rh, rw = te.reduce_axis((0, kh), name="rh"), te.reduce_axis((0, kw), name="rw")
        hh, ww = index[h_axis] * sh - top + rh * dh, index[w_axis] * sw - left + rw * dw
        real = tirx.all(hh >= 0, hh < h, ww >= 0, ww < w)
        at = list(index)
        at[h_axis], at[w_axis] = tirx.max(tirx.min(hh, h - 1), 0), tirx.max(tirx.min(ww, w - 1), 0)
        return _MAX(tirx.if_then_else(real, x[tuple(at)], outside), axis=[rh, rw])

    pooled = te.compute(shape, maximum, name="max_pool2d")
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if max(top, padding[2]) < span_h and max(left, padding[3]) < span_w:
        return pooled  # every window holds a real element (ONNX requires pads below the kernel)
    return _empty_windows(pooled, lambda i: (i[h_axis] * sh - top, i[w_axis] * sw - left), [kh, kw], [dh, dw], [h, w])


_TOPI_MAX_POOL2D = tvm.ir.Op.get("relax.nn.max_pool2d").get_attr("FLegalize")


def legalize_max_pool2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``LegalizeOps`` rule for ``relax.nn.max_pool2d``: ``nan_max_pool2d_te`` for float NCHW / NHWC pools
    (every layout ``ConvertLayout`` gives them here), TVM's own rule otherwise."""
    attrs = call.attrs
    x = call.args[0]
    layout = str(attrs.layout)
    if layout not in ("NCHW", "NHWC") or str(attrs.out_layout) != layout or "float" not in str(x.ty.dtype):
        return _TOPI_MAX_POOL2D(bb, call)
    out = list(call.ty.shape.values)
    out_hw = [out[layout.index("H")], out[layout.index("W")]]
    return bb.call_te(
        nan_max_pool2d_te,
        x,
        [int(v) for v in attrs.pool_size],
        [int(v) for v in attrs.strides],
        [int(v) for v in attrs.dilation],
        [int(v) for v in attrs.padding],
        layout,
        out_hw,
        primfunc_name_hint="max_pool2d",
    )


def _max_pool2d_rule(default: Callable) -> Callable:
    return legalize_max_pool2d


# Every pipeline of ours (the CPU and GPU pipelines, tuning) lowers Relax's max pool NaN-aware; TVM's own
# rule stays as TVM ships it (runtime/lowering_rules.py).
register_legalize("relax.nn.max_pool2d", _max_pool2d_rule)


def _spec_size(size, before: int, after: int, k: int, s: int, ceil_mode: bool):
    """floor/ceil((size + before + after - k) / s + 1) as the spec writes it (size may be symbolic)."""
    numerator = size + before + after - k + (s - 1 if ceil_mode else 0)
    return numerator // s + 1 if isinstance(numerator, int) else tirx.floordiv(numerator, s) + 1


def _pool_te(
    x: te.Tensor,
    kind: str,
    kernel: list[int],
    strides: list[int],
    pads: list[int],
    out_hw: list,
    count_include_pad: bool,
) -> te.Tensor:
    """The module docstring's rule, window by window: the real elements of window (i, j) are those of rows
    [i * stride_h - pad_top, + k_h) and columns [j * stride_w - pad_left, + k_w) inside the input; an
    empty window gives -FLT_MAX (max) or 0 (average)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = kernel, strides
    top, bottom, left, right = pads
    dtype = x.dtype
    shape = [n, c, *out_hw]

    def real_and_value(b, ch, i, j, rh, rw, outside):
        """Whether tap (rh, rw) of window (i, j) is real, and its value (``outside`` where it is not: a
        guarded read, see ``nan_max_pool2d_te``)."""
        hh, ww = i * sh - top + rh, j * sw - left + rw
        real = tirx.all(hh >= 0, hh < h, ww >= 0, ww < w)
        value = x[b, ch, tirx.max(tirx.min(hh, h - 1), 0), tirx.max(tirx.min(ww, w - 1), 0)]
        return real, tirx.if_then_else(real, value, outside)

    if kind == "max":

        def maximum(b, ch, i, j):
            rh, rw = te.reduce_axis((0, kh), name="rh"), te.reduce_axis((0, kw), name="rw")
            # Padding left out (-inf); a NaN in the window gives NaN; an empty window -FLT_MAX (below).
            _, value = real_and_value(b, ch, i, j, rh, rw, _neg_inf(dtype))
            return _MAX(value, axis=[rh, rw])

        pooled = te.compute(shape, maximum, name="max_pool")
        return _empty_windows(pooled, lambda i: (i[2] * sh - top, i[3] * sw - left), [kh, kw], [1, 1], [h, w])

    def total(b, ch, i, j):
        rh, rw = te.reduce_axis((0, kh), name="rh"), te.reduce_axis((0, kw), name="rw")
        _, value = real_and_value(b, ch, i, j, rh, rw, tirx.const(0, dtype))
        return te.sum(value, axis=[rh, rw])

    sums = te.compute(shape, total, name="pool_sum")

    def extent(start, k, size, after):
        """Rows (or columns) counted along one axis: real ones, or real and padding ones (count_include_pad)."""
        if count_include_pad:
            return tirx.max(tirx.min(start + k, size + after) - start, 0)
        return tirx.max(tirx.min(start + k, size) - tirx.max(start, 0), 0)

    def average(b, ch, i, j):
        count = extent(i * sh - top, kh, h, bottom) * extent(j * sw - left, kw, w, right)
        mean = sums[b, ch, i, j] / tirx.Cast(dtype, tirx.max(count, 1))
        return tirx.Select(count > 0, mean, tirx.const(0, dtype))

    return te.compute(shape, average, name="avg_pool")


@converter(O.AVERAGE_POOL_2D)
def average_pool_2d(args: OpArgs) -> relax.Expr:
    """input, auto_pad, pads, kernel_shape, strides, ceil_mode, count_include_pad, fuse_code -> output.

    The sum of each window's real elements divided by their count (``count_include_pad`` false) or by the
    count of real and padding elements (true); a window without real elements gives 0 (module docstring).

    Reference: the spec (output size); Paddle's pool2d CPU kernel (window cut at the padded edge, divisor).
    """
    x = args.tensor("input")
    kernel, strides, pads = _window(args, x)
    ceil_mode, count_include_pad = args.bool("ceil_mode", False), args.bool("count_include_pad", False)
    return fuse(args, _pool(args, x, "avg", kernel, strides, pads, ceil_mode, count_include_pad))


@converter(O.MAX_POOL_2D)
def max_pool_2d(args: OpArgs) -> relax.Expr | list[relax.Expr]:
    """input, auto_pad, pads, kernel_shape, strides, ceil_mode, return_indices (false),
    return_indices_dtype (INT32 or INT64), fuse_code -> output, indices (when return_indices).

    ``indices`` holds, for each window, the position h * W_in + w of its maximum in the unpadded
    H_in * W_in plane of its channel, the first in row-major order among equal maxima (as Paddle's
    max_pool2d_with_index); a window without real elements gives -FLT_MAX and index -1.  The fused
    activation applies to ``output`` only.

    Reference: the spec (output size); Paddle's pool2d CPU kernel and max_pool2d_with_index for the indices.
    """
    x = args.tensor("input")
    kernel, strides, pads = _window(args, x)
    y = _pool(args, x, "max", kernel, strides, pads, args.bool("ceil_mode", False))
    out = fuse(args, y)
    dtype = _indices_dtype(args)
    if dtype is None:
        return out
    top, left = pads[0], pads[2]

    def bounds(i, stride, pad, k):
        start = i * stride - pad
        return start, start + k

    h_bounds = functools.partial(bounds, stride=strides[0], pad=top, k=kernel[0])
    w_bounds = functools.partial(bounds, stride=strides[1], pad=left, k=kernel[1])
    indices = args.emit_te(
        lambda x, y: _argmax_te(x, y, h_bounds, w_bounds, kernel, dtype), x, y, primfunc_name_hint="max_pool2d_index"
    )
    return [out, indices]


@converter(O.ADAPTIVE_AVERAGE_POOL_2D)
def adaptive_average_pool_2d(args: OpArgs) -> relax.Expr:
    """input, output_shape [H_out, W_out] -> output.  Bin i of an axis of size n averages
    [floor(i * n / out), ceil((i + 1) * n / out)), as Paddle and PyTorch do.

    Reference: the spec; Paddle's adaptive pool2d (AdaptStartIndex / AdaptEndIndex) for the bins.
    """
    x = args.tensor("input")
    rank4(args, x, "input")
    return relax.op.nn.adaptive_avg_pool2d(x, pair(args, "output_shape"))


@converter(O.ADAPTIVE_MAX_POOL_2D)
def adaptive_max_pool_2d(args: OpArgs) -> relax.Expr | list[relax.Expr]:
    """input, output_shape [H_out, W_out], return_indices (false), return_indices_dtype (INT32 or
    INT64) -> output, indices (when return_indices).

    Bin i of an axis of size n takes the maximum over [floor(i * n / out), ceil((i + 1) * n / out)),
    as Paddle and PyTorch do; ``indices`` holds the position h * W_in + w of that maximum in its
    channel's H_in * W_in plane, the first in row-major order among equal maxima.

    Reference: the spec; Paddle's adaptive max_pool2d_with_index (adaptive=True).
    """
    x = args.tensor("input")
    rank4(args, x, "input")
    out_hw = pair(args, "output_shape")

    y = args.emit_te(
        lambda t: _adaptive_max_te(t, out_hw, *_adaptive_bins(t, out_hw)), x, primfunc_name_hint="adaptive_max_pool2d"
    )
    dtype = _indices_dtype(args)
    if dtype is None:
        return y
    indices = args.emit_te(
        lambda x, y: _argmax_te(x, y, *_adaptive_bins(x, out_hw), dtype),
        x,
        y,
        primfunc_name_hint="adaptive_max_pool2d_index",
    )
    return [y, indices]


def _adaptive_bins(x: te.Tensor, out_hw: list[int]) -> tuple[Callable, Callable, list]:
    """Row and column bounds [floor(i * n / out), ceil((i + 1) * n / out)) of bin i, and the widest bin,
    ceil(n / out) + 1 (the reductions skip what lies past a bin's end), from ``x``'s own shape: inside a
    TE function a symbolic size must be the tensor's, not the Relax variable it came from."""
    _, _, h, w = x.shape

    def bounds(i, size, out):
        return (i * size) // out, ((i + 1) * size + out - 1) // out

    window = [(size + out - 1) // out + 1 for size, out in zip((h, w), out_hw)]
    return (
        functools.partial(bounds, size=h, out=out_hw[0]),
        functools.partial(bounds, size=w, out=out_hw[1]),
        window,
    )


def _adaptive_max_te(
    x: te.Tensor, out_hw: list[int], h_bounds: Callable, w_bounds: Callable, window: list
) -> te.Tensor:
    """y[n, c, i, j] = the NaN-aware maximum of x[n, c] over rows ``h_bounds(i)`` and columns ``w_bounds(j)``
    (each at most ``window`` long); a NaN anywhere in the bin gives NaN, as numpy's max does."""
    n, c, h, w = x.shape

    def maximum(b, ch, i, j):
        (h0, h1), (w0, w1) = h_bounds(i), w_bounds(j)
        rh, rw = te.reduce_axis((0, window[0]), name="rh"), te.reduce_axis((0, window[1]), name="rw")
        hh, ww = h0 + rh, w0 + rw
        real = tirx.all(hh < h1, ww < w1)
        value = tirx.if_then_else(real, x[b, ch, tirx.min(hh, h - 1), tirx.min(ww, w - 1)], _neg_inf(x.dtype))
        return _MAX(value, axis=[rh, rw])

    return te.compute([n, c, *out_hw], maximum, name="adaptive_max_pool")


def _indices_dtype(args: OpArgs) -> str | None:
    """The indices' dtype (operand ``return_indices_dtype``) when ``return_indices`` asks for them, else None."""
    wanted = args.bool("return_indices", False)
    if wanted != (args.output_count > 1):
        have = "an indices output" if args.output_count > 1 else "no indices output"
        args.fail(f"is {str(wanted).lower()} but the operation has {have}", "return_indices")
    if not wanted:
        return None
    declared = args.output_type(1).precision
    code = args.int("return_indices_dtype", int(declared))
    dtypes = {int(Precision.INT32): "int32", int(Precision.INT64): "int64"}
    if code not in dtypes:
        args.fail(f"{code} is not INT32={int(Precision.INT32)} or INT64={int(Precision.INT64)}", "return_indices_dtype")
    if code != declared:
        args.fail(
            f"asks for {Precision(code).name} indices, the indices output is {declared.name}", "return_indices_dtype"
        )
    return dtypes[code]


def _argmax_te(
    x: te.Tensor, y: te.Tensor, h_bounds: Callable, w_bounds: Callable, window: list[int], dtype: str
) -> te.Tensor:
    """indices[n, c, i, j] = min{h * W + w : (h, w) real, in window (i, j), x[n, c, h, w] == y[n, c, i, j]}, or -1.

    ``h_bounds(i)`` gives the window's rows [start, end) (possibly reaching into the padding), at most
    ``window[0]`` of them; the smallest flat position among equal maxima is the first in row-major order.
    A NaN maximum is found at the window's first NaN (numpy's argmax).
    """
    _, _, h, w = x.shape
    none = h * w  # larger than every position: "no element equals the maximum"

    def first(n, c, i, j):
        (h0, h1), (w0, w1) = h_bounds(i), w_bounds(j)
        rh = te.reduce_axis((0, window[0]), name="rh")
        rw = te.reduce_axis((0, window[1]), name="rw")
        hh, ww = h0 + rh, w0 + rw
        real = tirx.all(hh >= 0, hh < h, hh < h1, ww >= 0, ww < w, ww < w1)
        value = tirx.if_then_else(
            real, x[n, c, tirx.max(tirx.min(hh, h - 1), 0), tirx.max(tirx.min(ww, w - 1), 0)], tirx.const(0, x.dtype)
        )
        found = y[n, c, i, j]
        hit = tirx.all(real, tirx.Or(value == found, tirx.all(tirx.isnan(found), tirx.isnan(value))))
        return te.min(tirx.Select(hit, tirx.Cast("int64", hh * w + ww), tirx.Cast("int64", none)), axis=[rh, rw])

    position = te.compute(y.shape, first, name="first_max")
    return te.compute(
        y.shape,
        lambda *i: tirx.Cast(dtype, tirx.Select(position[i] == none, tirx.const(-1, "int64"), position[i])),
        name="indices",
    )
