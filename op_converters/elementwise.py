"""Element-wise binary arithmetic with numpy broadcasting and ``fuse_code``, and variadic SUM."""

from __future__ import annotations

import functools

import numpy as np
import tvm
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import broadcast_unknown, check_broadcast, fuse, same_float_operand
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O

_BINARY = {
    O.ADD: relax.op.add,
    O.SUB: relax.op.subtract,
    O.MUL: relax.op.multiply,
    O.DIV: relax.op.divide,
    O.MAX: relax.op.maximum,
    O.MIN: relax.op.minimum,
    O.POW: relax.op.power,
}


@converter(*_BINARY)
def binary(args: OpArgs) -> relax.Expr:
    """input0, input1, fuse_code -> output = fuse(input0 <op> input1) with numpy broadcasting;
    <op> is +, -, *, /, max, min or pow (input0 ^ input1). MAX and MIN give NaN where either input is
    NaN, as numpy's maximum/minimum; so do the fused activations.

    Quantized inputs are computed on their dequantized values (the two may have different
    scales) and requantized to the output's scale. POW of a negative base with a non-integer
    exponent gives NaN, as C's ``powf`` does; by a constant exponent of 2, 3 or 4 it is the product
    x * x (* x ...), as onnxruntime computes it (within 2 ulp of ``powf``). Integer POW (beyond the
    spec, for ONNX's integer Pow) is numpy's: exact, wrapping around on overflow; a negative exponent
    gives the truncated real result (0, except for the bases 1 and -1; 0 for the base 0).

    Reference: the spec.
    """
    check_broadcast(args, ["input0", "input1"])
    x, y = broadcast_unknown(args, ["input0", "input1"])
    y = _unify_unknown_dims(args, x, y)
    if args.type == O.POW and str(x.ty.dtype).startswith(("int", "uint")):
        return fuse(args, _int_power(args, x, y))
    if args.type == O.POW and (power := _small_power(args, x, y)) is not None:
        return fuse(args, power)
    if args.type in (O.SUB, O.DIV) and same_float_operand(args):
        return fuse(args, _self_difference(x) if args.type == O.SUB else _self_ratio(x))
    if args.type in (O.MAX, O.MIN) and str(x.ty.dtype).startswith(("float", "bfloat")):
        # NaN in either input gives NaN, as numpy's maximum/minimum: TVM's max(a, b) passes a NaN b
        # through (see helpers.clamp), so y's NaN is the one that needs the explicit test.
        out = relax.op.where(relax.op.isnan(y), y, _BINARY[args.type](y, x))
        return fuse(args, out)
    return fuse(args, _BINARY[args.type](x, y))


def _small_power(args: OpArgs, x: relax.Expr, y: relax.Expr) -> relax.Expr | None:
    """x * x, x * x * x or (x * x) * (x * x) where the exponent is the constant 2, 3 or 4 (one element, of a
    rank no higher than x's, so that the product has the output's shape), else None. As onnxruntime
    computes them; TVM's ``pow`` for an exponent of 3 or more warned at every compile (GPT-2's GELU: 40
    times) and goes through exp and log."""
    operand = args.operand("input1")
    if not operand.is_constant or not operand.type.is_static() or operand.type.element_count() != 1:
        return None
    if len(args.shape(y)) > len(args.shape(x)) or not str(x.ty.dtype).startswith("float"):
        return None
    exponent = float(np.asarray(args.value("input1"), dtype="float64").reshape(-1)[0])
    if exponent not in (2.0, 3.0, 4.0):
        return None
    square = args.emit(relax.op.multiply(x, x))
    if exponent == 2.0:
        return square
    return relax.op.multiply(square, x if exponent == 3.0 else square)


def _self_difference(x: relax.Expr) -> relax.Expr:
    """x - x by IEEE (``same_float_operand``): +0 where x is finite, NaN where it is +-inf or NaN."""
    dtype = str(x.ty.dtype)
    return relax.op.where(relax.op.isfinite(x), relax.const(0.0, dtype), relax.const(float("nan"), dtype))


def _self_ratio(x: relax.Expr) -> relax.Expr:
    """x / x by IEEE (``same_float_operand``): 1 where x is finite and not 0, else NaN (0 / 0, inf / inf)."""
    dtype = str(x.ty.dtype)
    usable = relax.op.logical_and(relax.op.isfinite(x), relax.op.not_equal(x, relax.const(0.0, dtype)))
    return relax.op.where(usable, relax.const(1.0, dtype), relax.const(float("nan"), dtype))


def _unify_unknown_dims(args: OpArgs, x: relax.Expr, y: relax.Expr) -> relax.Expr:
    """``y`` with each dimension that is symbolic in both inputs, and not provably equal to ``x``'s, cast
    to ``x``'s, asserting at execution that they are equal.

    Relax cannot broadcast two different symbolic dimensions (either may be 1 at execution), and gives
    up the output's shape.  In real models they are one size computed two ways (an upsampled feature
    map added to a skip connection: 2 * (H // 32) against H // 16, equal for the input sizes the model
    takes), so that is what this converter requires; a 1 meant to broadcast against an unknown size must
    be static.  A mismatch fails the execution with INVALID_DIMENSIONS naming this operation.
    """
    xs, ys = args.shape(x), args.shape(y)
    rank = max(len(xs), len(ys))
    xs_aligned = [1] * (rank - len(xs)) + xs
    analyzer = tvm.sym.Analyzer()
    dims, conditions = list(ys), []
    for axis in range(len(ys)):
        a, b = xs_aligned[rank - len(ys) + axis], ys[axis]
        if isinstance(a, int) or isinstance(b, int) or analyzer.can_prove_equal(a, b):
            continue
        dims[axis] = a
        conditions.append(a == b)
    if not conditions:
        return y
    # A plain match_cast asserts the equality (TVM's message names the two values); the recorded check
    # lets a failed execution name this operation.  (OpArgs.require's guard, a match_cast to a Select
    # shape, crashed FuseTIR once ConvertLayout had moved it into NHWC.)
    message = (
        f"shape {_describe(ys)} must equal {_describe(xs)} where both are unknown until execution "
        "(runtime broadcasting of two unknown dimensions is not supported)"
    )
    args.record_check(functools.reduce(tirx.And, conditions), message, "input1")
    return args.match_cast(y, dims)


def _describe(shape: list) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _int_power_ir(ins, outs, *, bits: int):
    """base ** exponent (flat, same length) by squaring over every bit of the exponent, one element
    at a time, in the unsigned type of the same width: products wrap (two's complement) as numpy's
    do, never overflow (undefined in LLVM's signed arithmetic)."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    base, exponent = ins
    (out,) = outs
    dtype = str(base.dtype)
    unsigned = dtype if dtype.startswith("u") else "u" + dtype
    one = tirx.const(1, unsigned)
    with IRBuilder() as ib, T.serial(0, 1):
        base, exponent, out = T.buffer_proxy(base), T.buffer_proxy(exponent), T.buffer_proxy(out)
        result = T.buffer_proxy(T.alloc_buffer((1,), unsigned, scope="local"))
        square = T.buffer_proxy(T.alloc_buffer((1,), unsigned, scope="local"))
        with T.serial(0, base.shape[0]) as i:
            b, e = base[i], exponent[i]
            result[0] = one
            square[0] = b.astype(unsigned)
            with T.serial(0, bits) as k:
                bit = (e.astype(unsigned) >> k.astype(unsigned)) & one
                result[0] = tirx.Select(bit == one, result[0] * square[0], result[0])
                square[0] = square[0] * square[0]
            power = result[0].astype(dtype)
            if dtype.startswith("u"):
                out[i] = power
            else:
                # A negative exponent: the truncated real result, 0 except for the bases 1 and -1
                # (and 0 ** -n, which has none, gives 0).
                zero, minus_one = tirx.const(0, dtype), tirx.const(-1, dtype)
                odd = (e & tirx.const(1, dtype)) == tirx.const(1, dtype)
                small = tirx.Select(
                    b == tirx.const(1, dtype), b, tirx.Select(b == minus_one, tirx.Select(odd, b, b * b), zero)
                )
                out[i] = tirx.Select(e < zero, small, power)
    return ib.get()


def _int_power(args: OpArgs, x: relax.Expr, y: relax.Expr) -> relax.Expr:
    dtype = str(x.ty.dtype)
    # Broadcast both operands to the output's shape (x + 0 * y, y + 0 * x), then flatten them.
    xb = args.emit(relax.op.add(x, relax.op.zeros_like(y)))
    yb = args.emit(relax.op.add(y, relax.op.zeros_like(x)))
    shape = args.shape(xb)
    flat_x, flat_y = args.emit(relax.op.reshape(xb, [-1])), args.emit(relax.op.reshape(yb, [-1]))
    bits = int(dtype.removeprefix("u").removeprefix("int"))

    def compute(base: te.Tensor, exponent: te.Tensor) -> te.Tensor:
        kernel = functools.partial(_int_power_ir, bits=bits)
        return te.extern([base.shape], [base, exponent], kernel, dtype=[dtype], name="int_power")

    flat = args.emit_te(compute, flat_x, flat_y, primfunc_name_hint="int_power")
    return relax.op.reshape(flat, shape)


def _int_floor_div(x: relax.Expr, y: relax.Expr) -> relax.Expr:
    """Integer floor division that never traps: a zero divisor gives 0 and, for signed types,
    x // -1 is the wrapping negation (numpy's results); the hardware divide would raise SIGFPE."""
    dtype = str(x.ty.dtype)
    zero, one = relax.const(0, dtype), relax.const(1, dtype)
    by_zero = relax.op.equal(y, zero)
    if dtype.startswith("uint"):
        return relax.op.where(by_zero, zero, relax.op.floor_divide(x, relax.op.where(by_zero, one, y)))
    by_minus_one = relax.op.equal(y, relax.const(-1, dtype))
    safe = relax.op.where(relax.op.logical_or(by_zero, by_minus_one), one, y)
    quotient = relax.op.where(by_minus_one, relax.op.subtract(zero, x), relax.op.floor_divide(x, safe))
    return relax.op.where(by_zero, zero, quotient)


@converter(O.FLOOR_DIV)
def floor_div(args: OpArgs) -> relax.Expr:
    """input0, input1, fuse_code -> output = fuse(floor(input0 / input1)) with numpy broadcasting.

    The quotient is the correctly rounded float32 ``input0 / input1``, then floored: this is the
    spec's formula and Paddle's ``paddle.floor_divide`` for floats; it can differ from numpy's
    ``floor_divide`` (e.g. 1 / 0.1 rounds to 10, numpy gives 9). Division by zero gives +-inf
    (NaN for 0 / 0). Integer inputs (which the spec does not list; op_schema.py widens it for
    ONNX's integer Div and Mod) use integer floor division, as numpy's ``floor_divide``: a zero
    divisor gives 0, and the most negative value // -1 wraps around to itself.

    Reference: the spec; Paddle's ``paddle.floor_divide``. (Paddle-Lite's host kernel truncates
    toward zero instead; this follows the spec's floor.)
    """
    check_broadcast(args, ["input0", "input1"])
    x, y = broadcast_unknown(args, ["input0", "input1"])
    if str(x.ty.dtype).startswith(("int", "uint")):
        return fuse(args, _int_floor_div(x, y))
    return fuse(args, relax.op.floor(relax.op.divide(x, y)))


@converter(O.SUM)
def sum_(args: OpArgs) -> relax.Expr:
    """input0, ..., input(n-1) -> output = input0 + input1 + ... + input(n-1), all n inputs
    broadcast together (numpy rules); one input is copied.

    Quantized inputs (each with its own scale) are summed by their real values in float32, left
    to right, and requantized to the output's scale.

    Reference: the spec.
    """
    # ``inputs`` is variadic: its operands are read by position.
    check_broadcast(args, list(range(args.count)))
    return functools.reduce(relax.op.add, broadcast_unknown(args, list(range(args.count))))
