"""Convolutions."""

from __future__ import annotations

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import check_window, fuse, pair, rank4, relax_padding, spatial_pads
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O


@converter(O.CONV_2D)
def conv_2d(args: OpArgs) -> relax.Expr:
    """input, filter, bias, auto_pad, pads, strides, group, dilations, fuse_code -> output.

    Grouped cross-correlation as in Paddle's conv2d: output channel o of group g = o // (C_out / group)
    sums over input channels [g * C_in / group, (g + 1) * C_in / group); depthwise convolution is the case
    ``group == C_in`` with a ``[C_out, 1, kh, kw]`` filter (C_out a multiple of C_in).  Pads are the spec's
    [top, bottom, left, right] or Paddle's SAME (see ``spatial_pads``); an empty bias operand means none.
    """
    x, w = args.tensor(0), args.tensor(1)
    _, c_in, h, wd = rank4(args, x, 0)
    c_out, c_per_group, kh, kw = rank4(args, w, 1)
    strides = pair(args, 5, [1, 1])
    group = args.int(6, 1)
    dilations = pair(args, 7, [1, 1])
    if group <= 0 or (isinstance(c_in, int) and c_in % group) or c_out % group:
        args.fail(f"group {group} must be positive and divide C_in={c_in} and C_out={c_out}", 6)
    if isinstance(c_in, int) and c_per_group * group != c_in:
        args.fail(f"filter has {c_per_group} input channels per group, expected C_in / group = {c_in // group}", 1)
    pads = spatial_pads(args, 3, 4, [h, wd], [kh, kw], strides, dilations)
    check_window(args, [h, wd], pads, [(kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1], 1)
    y = relax.op.nn.conv2d(x, w, strides=strides, padding=relax_padding(pads), dilation=dilations, groups=group)
    if args.has(2):
        b = args.tensor(2)
        if args.shape(b) != [c_out]:
            args.fail(f"bias shape {args.shape(b)} must be [C_out] = [{c_out}]", 2)
        y = relax.op.add(y, relax.op.reshape(b, [1, c_out, 1, 1]))
    return fuse(args, y, 8)
