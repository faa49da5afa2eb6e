"""3-D convolution extensions (codes 2400-2409): CONV_3D_TRANSPOSE, ONNX's ConvTranspose over 3 spatial dims.

NNAdapter's convolutions are 2-D (CONV_2D_TRANSPOSE); a volumetric transposed convolution is registered as one
of nnadapter-tvm's built-in extensions (defined in nnadapter_tvm/operations/) and computed by TVM's conv3d_transpose.
"""

from __future__ import annotations

from tvm import relax

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.conv3d import out_sizes
from nnadapter_tvm.types import OperationType as O


def _dims(values: list, what: str) -> str:
    return f"{what} [" + ", ".join(str(v) if isinstance(v, int) else "?" for v in values) + "]"


@converter(O.CONV_3D_TRANSPOSE)
def conv_3d_transpose(args: OpArgs) -> relax.Expr:
    """input [N, C_in, D, H, W], filter [C_in, C_out / group, kd, kh, kw], bias [C_out] (optional), pads [6]
    (d_begin, h_begin, w_begin, d_end, h_end, w_end), strides [3], dilations [3], output_padding [3], group
    -> output [N, C_out, D_out, H_out, W_out].

    Input voxel (i, j, l) of channel c (group g = c // (C_in / group)) adds ``x * filter[c, o', a, b, e]`` to
    output channel g * C_out / group + o' at depth i * stride_d - d_begin + a * dilation_d (rows and columns
    alike); positions outside the output are dropped.  D_out = (D - 1) * stride_d - d_begin - d_end +
    (kd - 1) * dilation_d + 1 + output_padding_d (H_out, W_out alike); the output_padding positions past the
    full transposed result get the bias only.  output_padding lies in [0, max(stride, dilation)).

    Reference: ONNX ConvTranspose (onnx.reference's ConvTranspose) for 3 spatial dims.
    """
    x, w = args.tensor("input"), args.tensor("filter")
    xs, ws = args.shape(x), args.shape(w)
    if len(xs) != 5:
        args.fail(f"must be 5-D [N, C_in, D, H, W], got {_dims(xs, 'shape')}", "input")
    if len(ws) != 5 or not all(isinstance(d, int) for d in ws):
        args.fail(f"must be a static 5-D [C_in, C_out / group, kd, kh, kw], got {_dims(ws, 'shape')}", "filter")
    group = args.int("group", 1)
    c_in = xs[1]
    if group <= 0 or (isinstance(c_in, int) and c_in % group):
        args.fail(f"group {group} must be positive and divide C_in = {c_in}", "group")
    if isinstance(c_in, int) and ws[0] != c_in:
        args.fail(f"filter {ws} must be [C_in = {c_in}, C_out / group, kd, kh, kw]", "filter")
    named = {"pads": (6, [0] * 6), "strides": (3, [1] * 3), "dilations": (3, [1] * 3), "output_padding": (3, [0] * 3)}
    values = {}
    for name, (count, default) in named.items():
        values[name] = args.ints(name, default)
        if len(values[name]) != count:
            args.fail(f"must hold {count} values, got {values[name]}", name)
    pads, strides, dilations, extra = (values[n] for n in named)
    if min(strides) <= 0 or min(dilations) <= 0:
        args.fail(f"strides {strides} and dilations {dilations} must be positive", "strides")
    if min(pads) < 0:
        args.fail(f"must be non-negative, got {pads}", "pads")
    for p, s, d in zip(extra, strides, dilations):
        if not 0 <= p < max(s, d):
            args.fail(f"{extra} must lie in [0, max(stride, dilation) = {max(s, d)}) per axis", "output_padding")
    for size in out_sizes(xs[2:], ws[2:], pads, strides, dilations, extra):
        if size is not None and size <= 0:
            args.fail(f"the pads {pads} leave an output size of {size}", "pads")
    c_out = ws[1] * group
    # Positions [begin, begin + out) of the full result: TVM's output_padding must stay below the stride,
    # so crop max(end - output_padding, 0) positions at the end instead and append the zeros past the full
    # result (output_padding beyond end) with a pad.
    ends = [max(e - p, 0) for e, p in zip(pads[3:], extra)]
    zeros = [max(p - e, 0) for e, p in zip(pads[3:], extra)]
    y = relax.op.nn.conv3d_transpose(
        x, w, strides=strides, padding=[*pads[:3], *ends], dilation=dilations, groups=group
    )
    if any(zeros):
        y = relax.op.nn.pad(y, [0, 0, 0, 0, 0, zeros[0], 0, zeros[1], 0, zeros[2]])
    if args.has("bias"):
        b = args.tensor("bias")
        if args.shape(b) != [c_out]:
            args.fail(f"bias shape {args.shape(b)} must be [C_out] = [{c_out}]", "bias")
        y = relax.op.add(y, relax.op.reshape(b, [1, c_out, 1, 1, 1]))
    return y
