"""CONV_2D and FULLY_CONNECTED on quantized operands as integer products: an 8-bit input times a constant
8-bit weight, summed in int32.

The spec's quantized CONV_2D and FULLY_CONNECTED (SYMM_QUANT_INT8 input, or ASYMM_QUANT_UINT8 as this
project extends them; SYMM_QUANT_INT8 weight per layer or per output channel; INT32 bias whose scale is
input scale x weight scale) mean

    real[o] = input_scale * weight_scale[o] * (sum (q_x - zero_x) * q_w[o] + q_bias[o])

and the output is requantized to the output operand's type (the runtime's rule, docs/quantization.md).
The sum is exact in int32 for any window an 8-bit model has (|q_x - zero_x| <= 255, |q_w| <= 128: 2^31
allows 65,793 products).  It is computed as ``conv2d`` / ``matmul`` of the stored values into int32 (a
convolution's input padded with its zero point), minus ``zero_x * sum q_w[o]`` (a constant), plus the
bias; the CPU targets give those integer products their 8-bit dot-product kernels (targets/cpu/int8.py),
the others TVM's own lowering.  The scale and ``fuse_code`` follow in float32, fused into the kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import relax

from nnadapter_tvm.model import Operand
from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.types import Precision

_INPUTS = (Precision.QUANT_UINT8_ASYMM_PER_LAYER, Precision.QUANT_INT8_SYMM_PER_LAYER)
_WEIGHTS = (Precision.QUANT_INT8_SYMM_PER_LAYER, Precision.QUANT_INT8_SYMM_PER_CHANNEL)
# A bias scale that differs from input scale x weight scale by more than this (relative) is added as a real
# value after the scaling instead of into the integer sum.
_BIAS_SCALE_TOLERANCE = 1e-6


class _Integer:
    """The constant parts of an integer product: the weight's stored values, per output channel the offset
    added to the sum (``-zero_x * sum q_w[o]``, plus an int32 bias of the right scale) and the scale from
    the sum to real values, and a real bias added after the scaling (another bias)."""

    def __init__(self, args: OpArgs, x: Operand, w: Operand, units: int, weight_name: str):
        wt = w.type
        self.weight = np.asarray(w.value(), "int8")
        self.x_zero = int(x.type.zero_point or 0)
        w_scale = np.broadcast_to(np.asarray(wt.scale, "float32").reshape(-1), [units])
        self.scale = (np.float32(x.type.scale) * w_scale).astype("float32")
        sums = self.weight.astype("int64").reshape(units, -1).sum(axis=1)
        self.offset = -self.x_zero * sums
        self.real_bias = None
        if args.has("bias"):
            bias = args.operand("bias")
            shape = args.shape(args.raw_tensor("bias"))
            if shape != [units]:
                args.fail(f"bias shape {shape} must be [{units}] (the {weight_name}'s output channels)", "bias")
            b_scale = np.broadcast_to(np.asarray(bias.type.scale or 0, "float32").reshape(-1), [units])
            if (
                bias.type.dtype == "int32"
                and not bias.type.zero_point
                and np.allclose(b_scale, self.scale, rtol=_BIAS_SCALE_TOLERANCE, atol=0)
            ):
                self.offset = self.offset + np.asarray(bias.value(), "int64").reshape(-1)
            else:
                self.real_bias = args.value("bias").astype("float32")

    def finish(self, acc: relax.Expr, channel_shape: list[int]) -> relax.Expr | None:
        """The real result of the int32 sums ``acc``, the per-channel constants shaped ``channel_shape``."""
        if np.any(self.offset):
            if np.abs(self.offset).max() >= 2**31:
                return None
            acc = relax.op.add(acc, relax.const(self.offset.astype("int32").reshape(channel_shape), "int32"))
        y = relax.op.multiply(relax.op.astype(acc, "float32"), relax.const(self.scale.reshape(channel_shape)))
        if self.real_bias is not None:
            y = relax.op.add(y, relax.const(self.real_bias.reshape(channel_shape), "float32"))
        return y


def _operands(args: OpArgs, input_name: str, weight_name: str, channel_dim: int) -> tuple | None:
    x, w = args.operand(input_name), args.operand(weight_name)
    if x.type.precision not in _INPUTS or w.type.precision not in _WEIGHTS or not w.is_constant:
        return None
    if w.type.precision == Precision.QUANT_INT8_SYMM_PER_CHANNEL and w.type.channel_dim != channel_dim:
        return None
    if args.has("bias") and not args.operand("bias").is_constant:
        return None
    return x, w


def integer_conv_2d(
    args: OpArgs, strides: list[int], group: int, dilations: list[int], pads: list[int], c_out: int
) -> relax.Expr | None:
    """The real result of a quantized CONV_2D computed on integers (see the module docstring), or None when
    the operands are not of that kind (a float or 16-bit input, a filter fed at run time): the converter
    then computes on dequantized values.  ``pads``: [top, bottom, left, right]."""
    found = _operands(args, "input", "filter", 0)
    if found is None:
        return None
    integer = _Integer(args, *found, c_out, "filter")
    x = args.raw_tensor("input")
    padding = [pads[0], pads[2], pads[1], pads[3]]  # Relax's [top, left, bottom, right]
    if integer.x_zero and any(pads):
        # The padding holds real zeros: the stored zero point.
        x = relax.op.nn.pad(x, [0, 0, 0, 0, *pads], pad_value=float(integer.x_zero))
        padding = [0, 0, 0, 0]
    acc = relax.op.nn.conv2d(
        x,
        relax.const(integer.weight, "int8"),
        strides=strides,
        padding=padding,
        dilation=dilations,
        groups=group,
        out_dtype="int32",
    )
    return integer.finish(acc, [1, c_out, 1, 1])


def integer_fully_connected(args: OpArgs, units: int, flatten: Callable[[relax.Expr], relax.Expr]) -> relax.Expr | None:
    """The real result of a quantized FULLY_CONNECTED computed on integers, or None (as ``integer_conv_2d``).
    ``flatten`` gives the stored input as ``[batch, input_size]``, as the converter flattens it."""
    found = _operands(args, "input", "weight", 0)
    if found is None:
        return None
    integer = _Integer(args, *found, units, "weight")
    x = flatten(args.raw_tensor("input"))
    weight = np.ascontiguousarray(integer.weight.T)  # [input_size, num_units]: the product's right operand
    acc = relax.op.matmul(x, relax.const(weight, "int8"), out_dtype="int32")
    return integer.finish(acc, [units])
