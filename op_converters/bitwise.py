"""Bitwise extensions (codes 2000-2009): AND/OR/XOR/NOT on the bits of integers, shifts, and BITCAST.

NNAdapter's AND/OR/XOR/NOT take BOOL8 only, and it has no shift or bit reinterpretation; ONNX's BitwiseAnd,
BitwiseOr, BitwiseXor, BitwiseNot, BitShift and BitCast need them. Each is registered as one of
nnadapter-tvm's built-in extensions (extensions.register_builtin) and computed by TVM's own operators.
"""

from __future__ import annotations

import numpy as np
from tvm import relax, topi

from nnadapter_tvm.extensions import register_builtin
from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.helpers import infer_broadcast, infer_same_shape
from nnadapter_tvm.op_schema import INT32, Arg
from nnadapter_tvm.types import Precision as P
from nnadapter_tvm.types import storage_dtype

# Every integer precision NNAdapter defines (ONNX's bitwise operations take these; BitShift the unsigned ones
# in the standard, signed ones too in onnx's reference and node cases).
INTEGERS = (P.INT8, P.UINT8, P.INT16, P.UINT16, P.INT32, P.UINT32, P.INT64, P.UINT64)
# The plain precisions BITCAST reinterprets between (BOOL8 is one byte, as in ONNX and numpy).
BITCASTABLE = (*INTEGERS, P.BOOL8, P.FLOAT16, P.FLOAT32, P.FLOAT64)

LEFT, RIGHT = 0, 1


def bitwise_binary(args: OpArgs) -> relax.Expr:
    """input0, input1 (the same integer precision, broadcast as numpy) -> output, input0 & input1
    (BITWISE_AND), input0 | input1 (BITWISE_OR) or input0 ^ input1 (BITWISE_XOR) on the bits of the
    integers (two's complement for signed ones).

    Reference: ONNX BitwiseAnd / BitwiseOr / BitwiseXor (numpy's bitwise_and / bitwise_or / bitwise_xor).
    """
    fn = {BITWISE_AND: relax.op.bitwise_and, BITWISE_OR: relax.op.bitwise_or, BITWISE_XOR: relax.op.bitwise_xor}
    return fn[args.type](args.raw_tensor("input0"), args.raw_tensor("input1"))


def bitwise_not(args: OpArgs) -> relax.Expr:
    """input (an integer) -> output, ~input: every bit flipped (for signed integers -input - 1).

    Reference: ONNX BitwiseNot (numpy's bitwise_not).
    """
    return relax.op.bitwise_not(args.raw_tensor("input"))


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


def _binary(name: str, code: int, fn) -> object:
    inputs = [Arg("input0", INTEGERS), Arg("input1", INTEGERS, same_as="input0")]
    return register_builtin(name, code, inputs, [Arg("output", INTEGERS)], fn, infer=infer_broadcast)


BITWISE_AND = _binary("BITWISE_AND", 2000, bitwise_binary)
BITWISE_OR = _binary("BITWISE_OR", 2001, bitwise_binary)
BITWISE_XOR = _binary("BITWISE_XOR", 2002, bitwise_binary)
BITWISE_NOT = register_builtin(
    "BITWISE_NOT", 2003, [Arg("input", INTEGERS)], [Arg("output", INTEGERS)], bitwise_not, infer=infer_same_shape
)
BIT_SHIFT = register_builtin(
    "BIT_SHIFT",
    2004,
    [Arg("input", INTEGERS), Arg("shift", INTEGERS, same_as="input"), Arg("direction", INT32)],
    [Arg("output", INTEGERS)],
    bit_shift,
    infer=infer_broadcast,
)
BITCAST = register_builtin(
    "BITCAST",
    2005,
    [Arg("input", BITCASTABLE), Arg("dtype", INT32)],
    [Arg("output", BITCASTABLE)],
    bitcast,
    infer=infer_same_shape,
)
