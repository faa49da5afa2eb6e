"""Matrix products: MatMul -> MAT_MUL; Gemm -> FULLY_CONNECTED or MAT_MUL + MUL + ADD; QDQ products of a
constant int8 weight -> FULLY_CONNECTED on quantized operands."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.frontends.onnx.node_context import NodeContext
from nnadapter_tvm.frontends.onnx.ops import qdq
from nnadapter_tvm.frontends.onnx.ops.common import binary, fuse_none, to_rank0
from nnadapter_tvm.frontends.onnx.registry import onnx_op
from nnadapter_tvm.frontends.onnx.values import Value
from nnadapter_tvm.types import OperationType as O


def matmul(ctx: NodeContext, a: Value, b: Value, shape: object = "node") -> Value:
    """numpy.matmul(a, b) (1-D operands included: NNAdapter's [1] for 1-D . 1-D becomes a scalar)."""
    if a.rank == 1 and b.rank == 1:
        return to_rank0(ctx, ctx.emit(O.MAT_MUL, [a, b], shape=(1,)))
    return ctx.emit(O.MAT_MUL, [a, b], shape=shape)


@onnx_op("MatMul")
def mat_mul(ctx: NodeContext) -> Value:
    """MatMul -> MAT_MUL (numpy broadcasting and 1-D operands); a QDQ MatMul of an 8-bit activation by a
    constant 2-D int8 weight -> FULLY_CONNECTED on quantized operands (rows flattened, then reshaped back)."""
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype.kind != "f":
        ctx.unsupported(f"MatMul of {a.dtype}: MAT_MUL takes floating-point tensors")
    out = ctx.out_shape()
    if a.rank is not None and a.rank >= 2 and b.rank == 2 and out is not None and None not in out:
        rows = (int(np.prod(out[:-1])), out[-1])
        y = _quantized_fully_connected(ctx, a, b, ctx.constant(np.zeros([0], "float32")), False, rows)
        if y is not None:
            return y if a.rank == 2 else ctx.emit(O.RESHAPE, [y, ctx.i32(list(out))], shape=out)
    return matmul(ctx, a, b)


def _quantized_fully_connected(
    ctx: NodeContext, a: Value, b: Value, bias: Value, trans_b: bool, shape: object = "node"
) -> Value | None:
    """A QDQ product (DequantizeLinear of an 8-bit activation times a constant int8 weight, per tensor or
    per output column) as FULLY_CONNECTED on the quantized operands (``qdq``), which sums integer products
    and gives the real result; None for anything else."""
    aq, bq, biasq = qdq.activation(a), qdq.weight(b, 0 if trans_b else 1), qdq.bias(bias)
    if aq is None or bq is None or biasq is None:
        return None
    weight = bq if trans_b else qdq.transposed(bq)
    return ctx.emit(O.FULLY_CONNECTED, [aq, weight, biasq, fuse_none(ctx)], dtype="float32", shape=shape)


@onnx_op("Gemm")
def gemm(ctx: NodeContext) -> Value:
    """Gemm -> FULLY_CONNECTED (alpha = beta = 1, no transA, B and C constant or a [N] bias) or
    MAT_MUL (transposes as operands) then MUL alpha and ADD beta * C."""
    a, b, c = ctx.input(0), ctx.input(1), ctx.optional(2)
    if a.dtype.kind != "f":
        ctx.unsupported(f"Gemm of {a.dtype}: MAT_MUL takes floating-point tensors")
    if a.rank != 2 or b.rank != 2:
        ctx.fail(f"A {a.describe()} and B {b.describe()} must be 2-D")
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if beta == 0.0:
        # onnxruntime and onnx's reference evaluator leave beta * C out when beta is 0: C's NaN and
        # infinities do not reach Y (0 * NaN would).
        c = None
    trans_a, trans_b = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    out = ctx.out_shape()
    units = b.shape[0] if trans_b else b.shape[1]
    if c is not None and c.is_const and beta != 1.0:
        c = ctx.constant((np.asarray(beta, c.dtype) * c.const).astype(c.dtype))
        beta = 1.0
    bias = None
    if c is None:
        bias = ctx.constant(np.zeros([0], a.dtype))
    elif c.is_const and units is not None and c.const.size in (1, units) and (c.rank < 2 or c.shape == (1, units)):
        bias = ctx.constant(np.broadcast_to(c.const.reshape(-1), [units]).copy())
    fits = a.dtype == np.float32 and alpha == 1.0 and beta == 1.0 and not trans_a and bias is not None
    # A dequantized int32 bias as it is (its int32 values join the integer sums); ``bias`` is a float copy.
    exact_bias = c if c is not None and c.dequantized is not None and c.rank == 1 and c.shape == (units,) else bias
    quantized = _quantized_fully_connected(ctx, a, b, exact_bias, trans_b) if fits else None
    if quantized is not None:
        return quantized
    if fits and (trans_b or b.is_const):
        weight = b if trans_b else ctx.constant(np.ascontiguousarray(b.const.T))
        return ctx.emit(O.FULLY_CONNECTED, [a, weight, bias, fuse_none(ctx)])
    m = a.shape[1] if trans_a else a.shape[0]
    shape = (m, units)
    y = ctx.emit(O.MAT_MUL, [a, b, ctx.boolean(trans_a), ctx.boolean(trans_b)], shape=shape)
    if alpha != 1.0:
        y = binary(ctx, O.MUL, y, ctx.constant(np.asarray(alpha, a.dtype)), shape=shape)
    if c is None:
        return y
    if beta != 1.0:
        c = binary(ctx, O.MUL, c, ctx.constant(np.asarray(beta, a.dtype)), shape=c.shape)
    return binary(ctx, O.ADD, y, c, shape=out)
