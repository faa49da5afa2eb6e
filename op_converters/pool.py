"""2-D pooling."""

from __future__ import annotations

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import fuse, pair, rank4, relax_padding, spatial_pads
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode


@converter(O.AVERAGE_POOL_2D)
def average_pool_2d(args: OpArgs) -> relax.Expr:
    """input, auto_pad, pads, kernel_shape, strides, ceil_mode, count_include_pad, fuse_code -> output."""
    x = args.tensor(0)
    _, _, h, w = rank4(args, x, 0)
    kernel, strides = pair(args, 3), pair(args, 4, [1, 1])
    pads = spatial_pads(args, 1, 2, [h, w], kernel, strides, [1, 1])
    y = relax.op.nn.avg_pool2d(
        x,
        kernel,
        strides,
        relax_padding(pads),
        ceil_mode=args.bool(5, False),
        count_include_pad=args.bool(6, False),
    )
    return fuse(args, y, 7)


@converter(O.MAX_POOL_2D)
def max_pool_2d(args: OpArgs) -> relax.Expr:
    """input, auto_pad, pads, kernel_shape, strides, ceil_mode, return_indices, return_indices_dtype,
    fuse_code -> output (indices: see the operators issue)."""
    x = args.tensor(0)
    _, _, h, w = rank4(args, x, 0)
    kernel, strides = pair(args, 3), pair(args, 4, [1, 1])
    pads = spatial_pads(args, 1, 2, [h, w], kernel, strides, [1, 1])
    if args.bool(6, False) or args.output_count > 1:
        args.fail("return_indices is not supported yet", 6, ResultCode.FEATURE_NOT_SUPPORTED)
    y = relax.op.nn.max_pool2d(x, kernel, strides, relax_padding(pads), ceil_mode=args.bool(5, False))
    return fuse(args, y, 8)


@converter(O.ADAPTIVE_AVERAGE_POOL_2D)
def adaptive_average_pool_2d(args: OpArgs) -> relax.Expr:
    """input, output_shape [H_out, W_out] -> output (PyTorch/Paddle bin edges: floor/ceil)."""
    x = args.tensor(0)
    rank4(args, x, 0)
    return relax.op.nn.adaptive_avg_pool2d(x, pair(args, 1))
