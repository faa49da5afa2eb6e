"""QUANTIZE and DEQUANTIZE (the runtime's dequantize/requantize made explicit)."""

from __future__ import annotations

import numpy as np
from tvm import relax

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import QUANT_PER_CHANNEL
from nnadapter_tvm.types import OperationType as O


@converter(O.QUANTIZE)
def quantize(args: OpArgs) -> relax.Expr:
    """input (FLOAT32 or INT32), axis (default 1), scale [1] or [C], zero_point [1] or like scale
    -> output = saturate(round_half_to_even(input / scale) + zero_point).

    The quantization parameters appear twice, as operands and in the output operand's type; they must
    agree: ``scale`` equals the output's scale (one value, or one per channel along ``axis`` = the
    output's ``channel_dim`` for QUANT_INT8_SYMM_PER_CHANNEL), ``zero_point`` the output's zero point
    (0 for the symmetric types; a per-channel ``zero_point`` must be all zeros, the precision enum has no
    asymmetric per-channel type).  The runtime then quantizes to the output's type with the rule of
    docs/quantization.md (Paddle Lite's reference kernel truncates and saturates to [-127, 127]
    instead).  An INT32 input is taken as real values.

    Reference: the spec and the header (``zero_point`` INT32, default 0), with the project's rounding rule.
    """
    x = args.tensor("input")
    rank = len(args.shape(x))
    out = args.output_type(0)
    per_channel = out.precision in QUANT_PER_CHANNEL
    scale = np.reshape(args.value("scale"), -1).astype("float32")
    zero_point = np.reshape(args.value("zero_point", np.zeros([1], "int32")), -1)
    if per_channel:
        axis = args.axis("axis", rank, 1)
        if axis != out.channel_dim:
            args.fail(f"axis {axis} differs from the output's channel_dim {out.channel_dim}", "axis")
    want_scale = np.asarray(out.scale, "float32").reshape(-1)
    if scale.shape != want_scale.shape or not np.allclose(scale, want_scale, rtol=1e-6, atol=0):
        args.fail(f"{scale.tolist()} differs from the output operand's scale {want_scale.tolist()}", "scale")
    if zero_point.size not in (1, scale.size):
        args.fail(f"holds {zero_point.size} values, expected 1 or as many as scale ({scale.size})", "zero_point")
    if np.any(zero_point != np.round(zero_point)):
        args.fail(f"values {zero_point.tolist()} must be integers", "zero_point")
    want_zero = out.zero_point or 0
    if np.any(zero_point != want_zero):
        args.fail(f"{zero_point.tolist()} differs from the output operand's zero point {want_zero}", "zero_point")
    if x.ty.dtype != "float32":
        x = relax.op.astype(x, "float32")
    return x  # the runtime requantizes to the output's type


@converter(O.DEQUANTIZE)
def dequantize(args: OpArgs) -> relax.Expr:
    """input (quantized) -> output = (input - zero_point) * scale in FLOAT32, with the input type's
    scale and zero point (per channel along its ``channel_dim``).

    Reference: the spec.
    """
    return args.tensor("input")  # dequantized on entry
