"""QDQ operands: the quantized values a QDQ model's DequantizeLinear nodes made its float operands of
(``Value.dequantized``), for the operations that compute on the integers (Conv, Gemm, MatMul: CONV_2D and
FULLY_CONNECTED on quantized operands, op_converters/quant_integer.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.values import Quant, Value
from nnadapter_tvm.types import Precision

_ACTIVATIONS = (Precision.QUANT_UINT8_ASYMM_PER_LAYER, Precision.QUANT_INT8_SYMM_PER_LAYER)
_BIASES = (Precision.QUANT_INT32_SYMM_PER_LAYER, Precision.QUANT_INT32_SYMM_PER_CHANNEL)


def activation(v: Value) -> Value | None:
    """The 8-bit activation (uint8 with a zero point, or symmetric int8, per tensor) ``v`` was dequantized
    from, or None."""
    q = v.dequantized
    return q if q is not None and q.quant is not None and q.quant.precision in _ACTIVATIONS else None


def weight(v: Value, channel_axis: int) -> Value | None:
    """The constant int8 weight ``v`` was dequantized from (symmetric, per tensor or per index of
    ``channel_axis``: the output channels), or None."""
    q = v.dequantized
    if q is None or q.quant is None or not q.is_const:
        return None
    if q.quant.precision == Precision.QUANT_INT8_SYMM_PER_LAYER:
        return q
    if q.quant.precision == Precision.QUANT_INT8_SYMM_PER_CHANNEL and q.quant.channel_dim == channel_axis:
        return q
    return None


def bias(v: Value) -> Value | None:
    """A bias as the integer product takes it: the int32 it was dequantized from, or the constant itself
    (added as real values after the scaling); None for a bias computed at run time."""
    q = v.dequantized
    if q is not None and q.quant is not None and q.quant.precision in _BIASES:
        return q
    return v if v.is_const else None


def transposed(w: Value) -> Value:
    """A 2-D quantized constant transposed, its channel axis with it."""
    q = w.quant
    channel = None if q.channel_dim is None else 1 - q.channel_dim
    const = np.ascontiguousarray(w.const.T)
    return Value(f"{w.name}/T", w.dtype, const.shape, const=const, quant=Quant(q.precision, q.scale, 0, channel))
