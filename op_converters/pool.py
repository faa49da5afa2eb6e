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

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import check_window, fuse, pair, rank4, relax_padding, spatial_pads
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode


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
def max_pool_2d(args: OpArgs) -> relax.Expr:
    """input, auto_pad, pads, kernel_shape, strides, ceil_mode, return_indices, return_indices_dtype,
    fuse_code -> output (indices: see the operators issue)."""
    x = args.tensor(0)
    kernel, strides, padding = _window(args, x)
    if args.bool(6, False) or args.output_count > 1:
        args.fail("return_indices is not supported yet", 6, ResultCode.FEATURE_NOT_SUPPORTED)
    y = relax.op.nn.max_pool2d(x, kernel, strides, padding, ceil_mode=args.bool(5, False))
    return fuse(args, y, 8)


@converter(O.ADAPTIVE_AVERAGE_POOL_2D)
def adaptive_average_pool_2d(args: OpArgs) -> relax.Expr:
    """input, output_shape [H_out, W_out] -> output.  Bin i of an axis of size n averages
    [floor(i * n / out), ceil((i + 1) * n / out)), as Paddle and PyTorch do."""
    x = args.tensor(0)
    rank4(args, x, 0)
    return relax.op.nn.adaptive_avg_pool2d(x, pair(args, 1))
