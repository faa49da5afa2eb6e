"""2-D pooling.

Output sizes follow the spec: floor((H_in + pad_top + pad_bottom - k) / stride + 1), or ceil(...) when
``ceil_mode`` (no PyTorch-style dropping of a last window that starts in the padding).  Window (i, j)
starts at (i * stride_h - pad_top, j * stride_w - pad_left) and, as in Paddle's pooling kernels, is cut
at the padded input's far edge (H_in + pad_bottom, W_in + pad_right): a ``ceil_mode`` overhang past it
covers nothing and is never counted.  Max pooling takes the maximum of the real elements; average
pooling divides their sum by the number of real elements (``count_include_pad`` false) or of real and
padding elements (true).  Paddle's CPU kernel cuts at H_in + pad_top instead (it keeps only the leading
pads), which agrees for symmetric padding; with asymmetric pads this converter uses the padding as given.
TVM's ``avg_pool2d``/``max_pool2d`` implement exactly this (tests/ops/test_pool.py checks it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import check_window, fuse, pair, rank4, relax_padding, spatial_pads
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax, te, tirx, topi

from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision, ResultCode


def _window(args: OpArgs, x: relax.Expr) -> tuple[list[int], list[int], list[int]]:
    """kernel_shape, strides and Relax-ordered padding from inputs 1-4 (auto_pad, pads, kernel_shape, strides)."""
    _, _, h, w = rank4(args, x, 0)
    kernel, strides = pair(args, 3), pair(args, 4, [1, 1])
    pads = spatial_pads(args, 1, 2, [h, w], kernel, strides, [1, 1])
    check_window(args, [h, w], pads, kernel, 3)
    return kernel, strides, relax_padding(pads)


@converter(O.AVERAGE_POOL_2D)
def average_pool_2d(args: OpArgs) -> relax.Expr:
    """input, auto_pad, pads, kernel_shape, strides, ceil_mode, count_include_pad, fuse_code -> output."""
    x = args.tensor(0)
    kernel, strides, padding = _window(args, x)
    ceil_mode, count_include_pad = args.bool(5, False), args.bool(6, False)
    y = relax.op.nn.avg_pool2d(x, kernel, strides, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    return fuse(args, y, 7)


@converter(O.MAX_POOL_2D)
def max_pool_2d(args: OpArgs) -> relax.Expr | list[relax.Expr]:
    """input, auto_pad, pads, kernel_shape, strides, ceil_mode, return_indices (false),
    return_indices_dtype (INT32 or INT64), fuse_code -> output, indices (when return_indices).

    ``indices`` holds, for each window, the position h * W_in + w of its maximum in the unpadded
    H_in * W_in plane of its channel, the first in row-major order among equal maxima (as Paddle's
    max_pool2d_with_index); a window without real elements gives -1.  The fused activation applies to
    ``output`` only.

    Reference: the spec; Paddle's max_pool2d_with_index for the indices.
    """
    x = args.tensor(0)
    kernel, strides, padding = _window(args, x)
    y = args.emit(relax.op.nn.max_pool2d(x, kernel, strides, padding, ceil_mode=args.bool(5, False)))
    out = fuse(args, y, 8)
    dtype = _indices_dtype(args, 6, 7)
    if dtype is None:
        return out
    top, left = padding[0], padding[1]

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
    [floor(i * n / out), ceil((i + 1) * n / out)), as Paddle and PyTorch do."""
    x = args.tensor(0)
    rank4(args, x, 0)
    return relax.op.nn.adaptive_avg_pool2d(x, pair(args, 1))


@converter(O.ADAPTIVE_MAX_POOL_2D)
def adaptive_max_pool_2d(args: OpArgs) -> relax.Expr | list[relax.Expr]:
    """input, output_shape [H_out, W_out], return_indices (false), return_indices_dtype (INT32 or
    INT64) -> output, indices (when return_indices).

    Bin i of an axis of size n takes the maximum over [floor(i * n / out), ceil((i + 1) * n / out)),
    as Paddle and PyTorch do; ``indices`` holds the position h * W_in + w of that maximum in its
    channel's H_in * W_in plane, the first in row-major order among equal maxima.

    Reference: the spec; Paddle's adaptive max_pool2d_with_index (adaptive=True).
    """
    x = args.tensor(0)
    _, _, h, w = rank4(args, x, 0)
    out_hw = pair(args, 1)
    if not (isinstance(h, int) and isinstance(w, int)):
        args.fail("needs static spatial input dimensions", 0, ResultCode.FEATURE_NOT_SUPPORTED)
    y = args.emit_te(topi.nn.adaptive_pool, x, out_hw, "max", "NCHW", primfunc_name_hint="adaptive_max_pool2d")
    dtype = _indices_dtype(args, 2, 3)
    if dtype is None:
        return y

    def bounds(i, size, out):
        return (i * size) // out, ((i + 1) * size + out - 1) // out

    # The widest bin: ceil(n / out) + 1 covers every bin; the reduction skips what lies past a bin's end.
    window = [-(-size // out) + 1 for size, out in zip((h, w), out_hw)]
    h_bounds = functools.partial(bounds, size=h, out=out_hw[0])
    w_bounds = functools.partial(bounds, size=w, out=out_hw[1])
    indices = args.emit_te(
        lambda x, y: _argmax_te(x, y, h_bounds, w_bounds, window, dtype),
        x,
        y,
        primfunc_name_hint="adaptive_max_pool2d_index",
    )
    return [y, indices]


def _indices_dtype(args: OpArgs, flag_i: int, dtype_i: int) -> str | None:
    """The indices' dtype when ``return_indices`` (input ``flag_i``) asks for them, else None."""
    wanted = args.bool(flag_i, False)
    if wanted != (args.output_count > 1):
        have = "an indices output" if args.output_count > 1 else "no indices output"
        args.fail(f"is {str(wanted).lower()} but the operation has {have}", flag_i)
    if not wanted:
        return None
    declared = args.output_type(1).precision
    code = args.int(dtype_i, int(declared))
    dtypes = {int(Precision.INT32): "int32", int(Precision.INT64): "int64"}
    if code not in dtypes:
        args.fail(f"{code} is not INT32={int(Precision.INT32)} or INT64={int(Precision.INT64)}", dtype_i)
    if code != declared:
        args.fail(f"asks for {Precision(code).name} indices, the indices output is {declared.name}", dtype_i)
    return dtypes[code]


def _argmax_te(
    x: te.Tensor, y: te.Tensor, h_bounds: Callable, w_bounds: Callable, window: list[int], dtype: str
) -> te.Tensor:
    """indices[n, c, i, j] = min{h * W + w : (h, w) real, in window (i, j), x[n, c, h, w] == y[n, c, i, j]}, or -1.

    ``h_bounds(i)`` gives the window's rows [start, end) (possibly reaching into the padding), at most
    ``window[0]`` of them; the smallest flat position among equal maxima is the first in row-major order.
    """
    _, _, h, w = x.shape
    none = h * w  # larger than every position: "no element equals the maximum"

    def first(n, c, i, j):
        (h0, h1), (w0, w1) = h_bounds(i), w_bounds(j)
        rh = te.reduce_axis((0, window[0]), name="rh")
        rw = te.reduce_axis((0, window[1]), name="rw")
        hh, ww = h0 + rh, w0 + rw
        real = tirx.all(hh >= 0, hh < h, hh < h1, ww >= 0, ww < w, ww < w1)
        value = x[n, c, tirx.max(tirx.min(hh, h - 1), 0), tirx.max(tirx.min(ww, w - 1), 0)]
        hit = tirx.all(real, value == y[n, c, i, j])
        return te.min(tirx.Select(hit, tirx.Cast("int64", hh * w + ww), tirx.Cast("int64", none)), axis=[rh, rw])

    position = te.compute(y.shape, first, name="first_max")
    return te.compute(
        y.shape,
        lambda *i: tirx.Cast(dtype, tirx.Select(position[i] == none, tirx.const(-1, "int64"), position[i])),
        name="indices",
    )
