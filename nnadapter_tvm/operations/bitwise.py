"""Bitwise extensions (codes 2000-2009): AND/OR/XOR/NOT on the bits of integers, shifts, and BITCAST.

NNAdapter's AND/OR/XOR/NOT take BOOL8 only, and it has no shift or bit reinterpretation; ONNX's BitwiseAnd,
BitwiseOr, BitwiseXor, BitwiseNot, BitShift and BitCast need them (op_converters/bitwise.py).
"""

from __future__ import annotations

from nnadapter_tvm.operations.schema import INT32, Arg
from nnadapter_tvm.operations.shape_rules import infer_broadcast, infer_same_shape
from nnadapter_tvm.operations.table import define
from nnadapter_tvm.precision import Precision as P

# Every integer precision NNAdapter defines (ONNX's bitwise operations take these; BitShift the unsigned ones
# in the standard, signed ones too in onnx's reference and node cases).
INTEGERS = (P.INT8, P.UINT8, P.INT16, P.UINT16, P.INT32, P.UINT32, P.INT64, P.UINT64)
# The plain precisions BITCAST reinterprets between (BOOL8 is one byte, as in ONNX and numpy).
BITCASTABLE = (*INTEGERS, P.BOOL8, P.FLOAT16, P.FLOAT32, P.FLOAT64)

LEFT, RIGHT = 0, 1  # BIT_SHIFT's direction


def _binary(name: str, code: int):
    inputs = [Arg("input0", INTEGERS), Arg("input1", INTEGERS, same_as="input0")]
    return define(name, code, inputs, [Arg("output", INTEGERS)], infer=infer_broadcast).operation_type


BITWISE_AND = _binary("BITWISE_AND", 2000)
BITWISE_OR = _binary("BITWISE_OR", 2001)
BITWISE_XOR = _binary("BITWISE_XOR", 2002)
BITWISE_NOT = define(
    "BITWISE_NOT", 2003, [Arg("input", INTEGERS)], [Arg("output", INTEGERS)], infer=infer_same_shape
).operation_type
BIT_SHIFT = define(
    "BIT_SHIFT",
    2004,
    [Arg("input", INTEGERS), Arg("shift", INTEGERS, same_as="input"), Arg("direction", INT32)],
    [Arg("output", INTEGERS)],
    infer=infer_broadcast,
).operation_type
BITCAST = define(
    "BITCAST",
    2005,
    [Arg("input", BITCASTABLE), Arg("dtype", INT32)],
    [Arg("output", BITCASTABLE)],
    infer=infer_same_shape,
).operation_type
