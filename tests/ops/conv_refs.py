"""Helpers the 2-D convolution tests share (test_conv.py, test_conv_transpose.py,
test_conv_deformable.py): the tolerances, Paddle's SAME padding, the padding modes, and the spec's
quantized filter and int32 bias."""

import math

import numpy as np
from oputil import Const, dequantize, quantize

import nnadapter_tvm as nna

OP = nna.OperationType
PAD = nna.AutoPad
P = nna.Precision
# Sums of up to C_in/group * kh * kw = 36 float32 products of magnitude <= 4, accumulated in a
# different order than the float64 reference: a few ulps of the partial sums.
RTOL, ATOL = 1e-5, 1e-4


def same_pads(in_hw, kernel, strides, dilations):
    """Paddle's SAME: total = max((ceil(in/stride) - 1) * stride + dilation * (k - 1) + 1 - in, 0),
    the smaller half before."""
    pads = []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        total = max((math.ceil(size / s) - 1) * s + d * (k - 1) + 1 - size, 0)
        pads += [total // 2, total - total // 2]
    return pads  # [top, bottom, left, right]


# (auto_pad, explicit pads [top, bottom, left, right]): asymmetric on purpose, so swapping orders shows.
PADDINGS = {"explicit": (PAD.NONE, [1, 0, 2, 1]), "same": (PAD.SAME, None), "valid": (PAD.VALID, None)}


def quant_filter(w, in_scale, channel_dim=None):
    """``w`` as a QUANT_INT8_SYMM_PER_LAYER filter (channel_dim None) or QUANT_INT8_SYMM_PER_CHANNEL along
    ``channel_dim``, with the scales the spec's bias relation needs; returns (operand, real values, scales)."""
    if channel_dim is None:
        scale = float(np.abs(w).max() / 127)
        q = quantize(w, scale)
        return Const(q, P.QUANT_INT8_SYMM_PER_LAYER, scale=scale), dequantize(q, scale), scale
    other = tuple(a for a in range(w.ndim) if a != channel_dim)
    scales = (np.abs(w).max(axis=other) / 127).astype("float32")
    q = quantize(w, scales, axis=channel_dim)
    operand = Const(q, P.QUANT_INT8_SYMM_PER_CHANNEL, scale=scales.tolist(), channel_dim=channel_dim)
    return operand, dequantize(q, scales, axis=channel_dim), scales


def quant_bias(b, in_scale, filter_scale):
    """The spec's int32 bias: bias_scale = input_scale * filter_scale (per layer or per channel)."""
    scale = np.float32(in_scale) * np.asarray(filter_scale, "float32")
    q = quantize(b, scale, dtype="int32", axis=0 if scale.ndim else None)
    if scale.ndim:
        operand = Const(q, P.QUANT_INT32_SYMM_PER_CHANNEL, scale=scale.tolist(), channel_dim=0)
        return operand, dequantize(q, scale, axis=0)
    return Const(q, P.QUANT_INT32_SYMM_PER_LAYER, scale=float(scale)), dequantize(q, scale)
