"""Normalizations."""

from __future__ import annotations

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

from nnadapter_tvm.types import OperationType as O


@converter(O.BATCH_NORMALIZATION)
def batch_normalization(args: OpArgs) -> relax.Expr:
    """input [N, C, ...], scale, bias, mean, variance, epsilon (1e-5) ->
    (x - mean) / sqrt(variance + epsilon) * scale + bias, per channel (inference form)."""
    x = args.tensor(0)
    shape = args.shape(x)
    if len(shape) < 2:
        args.fail(f"must have rank >= 2 [N, C, ...], got {shape}", 0)
    channels = shape[1]
    broadcast = [1, channels] + [1] * (len(shape) - 2)
    params = []
    for i in range(1, 5):
        p = args.tensor(i)
        if args.shape(p) != [channels]:
            args.fail(f"shape {args.shape(p)} must be [C] = [{channels}]", i)
        params.append(relax.op.reshape(p, broadcast))
    scale, bias, mean, var = params
    eps = relax.const(args.float(5, 1e-5), "float32")
    inv = relax.op.multiply(relax.op.rsqrt(relax.op.add(var, eps)), scale)
    return relax.op.add(relax.op.multiply(relax.op.subtract(x, mean), inv), bias)
