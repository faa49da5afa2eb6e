"""Comparisons, logical operations and WHERE (BOOL8 results)."""

from __future__ import annotations

from tvm import relax

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import broadcast_unknown, check_broadcast, same_float_operand
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O

_COMPARE = {
    O.EQUAL: relax.op.equal,
    O.NOT_EQUAL: relax.op.not_equal,
    O.GREATER: relax.op.greater,
    O.GREATER_EQUAL: relax.op.greater_equal,
    O.LESS: relax.op.less,
    O.LESS_EQUAL: relax.op.less_equal,
}

_SELF_COMPARE = {
    O.EQUAL: relax.op.logical_not,
    O.GREATER_EQUAL: relax.op.logical_not,
    O.LESS_EQUAL: relax.op.logical_not,
    O.NOT_EQUAL: lambda nan: nan,
}

_LOGICAL = {
    O.AND: relax.op.logical_and,
    O.OR: relax.op.logical_or,
    O.XOR: relax.op.logical_xor,
}


@converter(*_COMPARE)
def compare(args: OpArgs) -> relax.Expr:
    """input0, input1 -> BOOL8 output = input0 <op> input1 (numpy broadcasting), <op> one of
    ==, !=, >, >=, <, <=.

    Quantized inputs are compared by their dequantized values, so inputs of different scales
    compare correctly. BOOL8 inputs order false < true. NaN compares unequal to everything,
    itself included (IEEE).

    Reference: the spec.
    """
    check_broadcast(args, ["input0", "input1"])
    x, y = broadcast_unknown(args, ["input0", "input1"])
    if args.type in _SELF_COMPARE and same_float_operand(args):
        # x <op> x by IEEE: ==, >=, <= are true where x is not NaN, != where it is (> and < are false either way).
        nan = relax.op.isnan(x)
        return _SELF_COMPARE[args.type](nan)
    if str(x.ty.dtype) == "bool":
        # Compare booleans as 0/1 integers: TVM's llvm codegen fails on bool tensor compares.
        x, y = relax.op.astype(x, "int8"), relax.op.astype(y, "int8")
    if args.type == O.NOT_EQUAL:
        # As !(x == y): TVM lowers float != to an ordered compare, false for NaN; IEEE says true.
        return relax.op.logical_not(relax.op.equal(x, y))
    return _COMPARE[args.type](x, y)


@converter(*_LOGICAL)
def logical(args: OpArgs) -> relax.Expr:
    """input0, input1 (BOOL8) -> BOOL8 output = input0 && / || / xor input1 (numpy broadcasting).

    Reference: the spec (AND, OR); the upstream header nnadapter.h (XOR, not in the spec).
    """
    check_broadcast(args, ["input0", "input1"])
    return _LOGICAL[args.type](*broadcast_unknown(args, ["input0", "input1"]))


@converter(O.NOT)
def logical_not(args: OpArgs) -> relax.Expr:
    """input (BOOL8) -> BOOL8 output = !input.

    Reference: the spec.
    """
    return relax.op.logical_not(args.tensor("input"))


@converter(O.WHERE)
def where(args: OpArgs) -> relax.Expr:
    """condition (BOOL8), input0, input1 -> output = condition ? input0 : input1 (numpy.where,
    the three operands broadcast together).

    Quantized inputs are selected by their real values and requantized to the output's scale,
    so input0 and input1 may have different scales.

    Reference: the spec; numpy.where.
    """
    check_broadcast(args, ["condition", "input0", "input1"])
    return relax.op.where(*broadcast_unknown(args, ["condition", "input0", "input1"]))
