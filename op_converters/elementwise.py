"""Element-wise binary arithmetic with numpy broadcasting and ``fuse_code``, and variadic SUM."""

from __future__ import annotations

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import check_broadcast, fuse
from nnadapter_tvm.op_converters.registry import converter
from tvm import relax

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
    <op> is +, -, *, /, max, min or pow (input0 ^ input1).

    Quantized inputs are computed on their dequantized values (the two may have different
    scales) and requantized to the output's scale. POW of a negative base with a non-integer
    exponent gives NaN, as C's ``powf`` does.

    Reference: the spec.
    """
    check_broadcast(args, [0, 1])
    x, y = args.tensor(0), args.tensor(1)
    return fuse(args, _BINARY[args.type](x, y), 2)


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
    check_broadcast(args, [0, 1])
    x, y = args.tensor(0), args.tensor(1)
    if str(x.ty.dtype).startswith(("int", "uint")):
        return fuse(args, _int_floor_div(x, y), 2)
    return fuse(args, relax.op.floor(relax.op.divide(x, y)), 2)


@converter(O.SUM)
def sum_(args: OpArgs) -> relax.Expr:
    """input0, ..., input(n-1) -> output = input0 + input1 + ... + input(n-1), all n inputs
    broadcast together (numpy rules); one input is copied.

    Quantized inputs (each with its own scale) are summed by their real values in float32, left
    to right, and requantized to the output's scale.

    Reference: the spec.
    """
    check_broadcast(args, list(range(args.count)))
    result = args.tensor(0)
    for i in range(1, args.count):
        result = relax.op.add(result, args.tensor(i))
    return result
