"""Bitwise extensions (codes 2000-2009): AND/OR/XOR/NOT on the bits of integers, shifts, and BITCAST.

NNAdapter's AND/OR/XOR/NOT take BOOL8 only, and it has no shift or bit reinterpretation; ONNX's BitwiseAnd,
BitwiseOr, BitwiseXor, BitwiseNot, BitShift and BitCast need them. Each is registered as one of
nnadapter-tvm's built-in extensions (defined in nnadapter_tvm/operations/) and computed by TVM's own operators.
"""

from __future__ import annotations

import numpy as np
from tvm import relax, topi

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.operations.bitwise import BITCASTABLE, LEFT, RIGHT
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision as P
from nnadapter_tvm.types import storage_dtype


@converter(O.BITWISE_AND, O.BITWISE_OR, O.BITWISE_XOR)
def bitwise_binary(args: OpArgs) -> relax.Expr:
    """input0, input1 (the same integer precision, broadcast as numpy) -> output, input0 & input1
    (BITWISE_AND), input0 | input1 (BITWISE_OR) or input0 ^ input1 (BITWISE_XOR) on the bits of the
    integers (two's complement for signed ones).

    Reference: ONNX BitwiseAnd / BitwiseOr / BitwiseXor (numpy's bitwise_and / bitwise_or / bitwise_xor).
    """
    fn = {O.BITWISE_AND: relax.op.bitwise_and, O.BITWISE_OR: relax.op.bitwise_or, O.BITWISE_XOR: relax.op.bitwise_xor}
    return fn[args.type](args.raw_tensor("input0"), args.raw_tensor("input1"))


@converter(O.BITWISE_NOT)
def bitwise_not(args: OpArgs) -> relax.Expr:
    """input (an integer) -> output, ~input: every bit flipped (for signed integers -input - 1).

    Reference: ONNX BitwiseNot (numpy's bitwise_not).
    """
    return relax.op.bitwise_not(args.raw_tensor("input"))


@converter(O.BIT_SHIFT)
def bit_shift(args: OpArgs) -> relax.Expr:
    """input, shift (the same integer precision, broadcast as numpy), direction (0 = LEFT, 1 = RIGHT) ->
    output, input << shift or input >> shift.

    Left shifts drop the bits shifted past the type's width (signed values wrap in two's complement);
    right shifts of signed values are arithmetic (the sign bit fills in). A shift outside [0, bits)
    (negative, or at least the type's width) gives the full-width result, as numpy and onnx's reference
    do (C leaves it undefined and hardware masks the count): 0, or -1 for a right shift of a negative
    value.

    Reference: ONNX BitShift (onnx.reference's BitShift, which defines the out-of-range shifts).
    """
    x, shift = args.raw_tensor("input"), args.raw_tensor("shift")
    direction = args.int("direction")
    if direction not in (LEFT, RIGHT):
        args.fail(f"direction {direction} is not 0 (LEFT) or 1 (RIGHT)", "direction")
    dtype = str(x.ty.dtype)
    bits = np.dtype(dtype).itemsize * 8
    in_range = relax.op.less(shift, relax.const(bits, dtype))
    if np.dtype(dtype).kind == "i":
        in_range = relax.op.logical_and(in_range, relax.op.greater_equal(shift, relax.const(0, dtype)))
    # LLVM's shifts by bits or more are poison: shift by 0 there, the WHERE below picks the full-width result.
    safe = relax.op.where(in_range, shift, relax.const(0, dtype))
    if direction == LEFT:
        return relax.op.where(in_range, relax.op.left_shift(x, safe), relax.const(0, dtype))
    shifted = relax.op.right_shift(x, safe)
    if np.dtype(dtype).kind == "i":
        full = relax.op.right_shift(x, relax.const(bits - 1, dtype))  # -1 for negative values, else 0
    else:
        full = relax.const(0, dtype)
    return relax.op.where(in_range, shifted, full)


@converter(O.BITCAST)
def bitcast(args: OpArgs) -> relax.Expr:
    """input, dtype (a Precision code of the same element size: INT8/UINT8/BOOL8, INT16/UINT16/FLOAT16,
    INT32/UINT32/FLOAT32, INT64/UINT64/FLOAT64) -> output of that precision, the same shape, holding the
    input's bytes reinterpreted.

    BOOL8 is one byte holding 0 or 1 (as in ONNX and numpy): from BOOL8 gives 0 or 1; to BOOL8 gives
    true for a non-zero byte (numpy's ``view(bool)`` reads it so).

    Reference: ONNX BitCast (numpy's ``ndarray.view``).
    """
    x = args.raw_tensor("input")
    code = args.int("dtype")
    if code not in BITCASTABLE:
        allowed = ", ".join(f"{p.name}={p.value}" for p in BITCASTABLE)
        args.fail(f"dtype {code} is not one of {allowed}", "dtype")
    source, target = str(x.ty.dtype), storage_dtype(P(code))
    if np.dtype(source).itemsize != np.dtype(target).itemsize:
        args.fail(
            f"dtype {P(code).name} has {np.dtype(target).itemsize} bytes per element, the input ({source}) "
            f"{np.dtype(source).itemsize}: BITCAST keeps the element size",
            "dtype",
        )
    if source == target:
        return x
    if target == "bool":
        return relax.op.logical_not(relax.op.equal(x, relax.const(0, source)))
    if source == "bool":
        return relax.op.astype(x, target)  # a byte holding 0 or 1
    return args.emit_te(topi.reinterpret, x, target)
