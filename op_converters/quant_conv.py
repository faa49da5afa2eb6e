"""CONV_2D on quantized operands as integer products: 8-bit input times 8-bit filter, summed in int32.

The spec's quantized CONV_2D (ASYMM_QUANT_UINT8 or SYMM_QUANT_INT8 input, SYMM_QUANT_INT8 filter per
layer or per output channel, INT32 bias whose scale is input scale x filter scale) means

    real[o] = input_scale * filter_scale[o] * (sum (q_x - zero_x) * q_w[o] + q_bias[o])

and its output is requantized to the output operand's type (the runtime's rule, docs/quantization.md).
The sum is exact in int32 for any window an 8-bit model has (|q_x - zero_x| <= 255, |q_w| <= 128: 2^31
allows 65,793 products).  It is computed as ``conv2d(q_x, q_w, out_dtype="int32")`` of the stored values
with the input padded by its zero point, minus ``zero_x * sum q_w[o]`` (a constant), plus the bias; the
CPU targets give that integer convolution their 8-bit dot-product kernels (targets/cpu/int8.py), the
others TVM's own lowering.  The scale and ``fuse_code`` follow in float32, fused into the kernel.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.types import Precision

_INPUTS = (Precision.QUANT_UINT8_ASYMM_PER_LAYER, Precision.QUANT_INT8_SYMM_PER_LAYER)
_FILTERS = (Precision.QUANT_INT8_SYMM_PER_LAYER, Precision.QUANT_INT8_SYMM_PER_CHANNEL)
# A bias scale that differs from input scale x filter scale by more than this (relative) is added as a real
# value after the scaling instead of into the integer sum.
_BIAS_SCALE_TOLERANCE = 1e-6


def integer_conv_2d(
    args: OpArgs, strides: list[int], group: int, dilations: list[int], pads: list[int], c_out: int
) -> relax.Expr | None:
    """The real-valued result of a quantized CONV_2D computed on integers (see the module docstring), or
    None when the operands are not of that kind (a float or 16-bit input, a filter fed at run time): the
    converter then computes on dequantized values.  ``pads``: [top, bottom, left, right]."""
    x_operand, w_operand = args.operand("input"), args.operand("filter")
    xt, wt = x_operand.type, w_operand.type
    if xt.precision not in _INPUTS or wt.precision not in _FILTERS or not w_operand.is_constant:
        return None
    per_channel = wt.precision == Precision.QUANT_INT8_SYMM_PER_CHANNEL
    if per_channel and wt.channel_dim != 0:
        return None
    w = np.asarray(w_operand.value(), "int8")
    w_scale = np.broadcast_to(np.asarray(wt.scale, "float32").reshape(-1), [c_out])
    x_scale, x_zero = np.float32(xt.scale), int(xt.zero_point or 0)
    # Per output channel: the constant part of the integer sum, and the scale from it to real values.
    offset = -x_zero * w.astype("int64").sum(axis=(1, 2, 3))
    scale = (x_scale * w_scale).astype("float32")
    real_bias = None
    if args.has("bias"):
        bias = args.operand("bias")
        if args.shape(args.raw_tensor("bias")) != [c_out]:
            args.fail(f"bias shape {args.shape(args.raw_tensor('bias'))} must be [C_out] = [{c_out}]", "bias")
        if not bias.is_constant:
            return None
        b_scale = np.broadcast_to(np.asarray(bias.type.scale if bias.type.scale is not None else 0, "float32"), [c_out])
        if (
            bias.type.dtype == "int32"
            and not bias.type.zero_point
            and np.allclose(b_scale, scale, rtol=_BIAS_SCALE_TOLERANCE, atol=0)
        ):
            offset = offset + np.asarray(bias.value(), "int64").reshape(-1)
        else:
            real_bias = args.value("bias").astype("float32")
    x = args.raw_tensor("input")
    padding = [pads[0], pads[2], pads[1], pads[3]]  # Relax's [top, left, bottom, right]
    if x_zero and any(pads):
        # The padding holds real zeros: the stored zero point.
        width = [0, 0, 0, 0, pads[0], pads[1], pads[2], pads[3]]
        x = relax.op.nn.pad(x, width, pad_value=float(x_zero))
        padding = [0, 0, 0, 0]
    acc = relax.op.nn.conv2d(
        x,
        relax.const(w, "int8"),
        strides=strides,
        padding=padding,
        dilation=dilations,
        groups=group,
        out_dtype="int32",
    )
    if np.any(offset):
        if np.abs(offset).max() >= 2**31:
            return None
        acc = relax.op.add(acc, relax.const(offset.astype("int32").reshape(1, c_out, 1, 1), "int32"))
    y = relax.op.multiply(relax.op.astype(acc, "float32"), relax.const(scale.reshape(1, c_out, 1, 1), "float32"))
    if real_bias is not None:
        y = relax.op.add(y, relax.const(real_bias.reshape(1, c_out, 1, 1), "float32"))
    return y
