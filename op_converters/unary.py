"""Element-wise unary math, ASSIGN and CAST."""

from __future__ import annotations

import numpy as np
from tvm import relax

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import Precision, is_quantized, storage_dtype

_UNARY = {
    O.ABS: relax.op.abs,
    O.COS: relax.op.cos,
    O.SIN: relax.op.sin,
    O.EXP: relax.op.exp,
    O.LOG: relax.op.log,
    O.FLOOR: relax.op.floor,
    O.RSQRT: relax.op.rsqrt,
    O.SQUARE: relax.op.square,
}


@converter(*_UNARY)
def unary(args: OpArgs) -> relax.Expr:
    """input -> output = f(input) element-wise: abs, cos, sin, e^x, ln, floor, 1/sqrt(x), x^2.

    Quantized inputs are computed on their dequantized values and requantized to the output's
    scale (docs/quantization.md). LOG of a negative value and RSQRT of a negative value give NaN,
    LOG(0) gives -inf and RSQRT(0) +inf, as IEEE float32 does.

    Reference: the spec.
    """
    return _UNARY[args.type](args.tensor("input"))


@converter(O.ASSIGN)
def assign(args: OpArgs) -> relax.Expr:
    """input -> output, a copy of input.

    A quantized input is copied through its real values, so an output of another scale is
    requantized to that scale.

    Reference: the spec.
    """
    return args.tensor("input")


# The precisions CAST produces: every plain (unquantized) one, each stored as types.storage_dtype says.
_CAST_PRECISIONS = tuple(p for p in Precision if not is_quantized(p))


@converter(O.CAST)
def cast(args: OpArgs) -> relax.Expr:
    """input, dtype (a Precision code: BOOL8=0, INT8=1, UINT8=2, INT16=3, UINT16=4, INT32=5, UINT32=6,
    INT64=7, UINT64=8, FLOAT16=9, FLOAT32=10, FLOAT64=11) -> output of that precision, same shape.

    UINT16/UINT32/UINT64 (inputs and dtype codes), which the spec does not list, are accepted for
    ONNX models (op_schema.py widens CAST).

    Follows numpy's ``astype``: float -> integer truncates toward zero; any -> BOOL8 is
    ``x != 0`` (NaN gives true); BOOL8 -> number gives 0 or 1; narrowing integer casts wrap around (two's
    complement). A float outside an INT32 or INT64 target's range, +-inf or NaN gives the type's minimum
    (x86's "integer indefinite", what numpy and onnxruntime give there; ONNX leaves it undefined); for the
    narrower integer types such a value is unspecified, as in numpy and C.

    Reference: the spec; numpy's ``ndarray.astype`` for the conversion rules.
    """
    x = args.raw_tensor("input")
    code = args.int("dtype")
    if code not in _CAST_PRECISIONS:
        allowed = ", ".join(f"{p.name}={p.value}" for p in _CAST_PRECISIONS)
        args.fail(f"dtype {code} is not one of {allowed}", "dtype")
    dtype = storage_dtype(Precision(code))
    if dtype == str(x.ty.dtype):
        return x
    if dtype == "bool":
        # numpy's rule, x != 0, spelled !(x == 0): TVM lowers float != to an ordered compare,
        # which would turn NaN into false.
        return relax.op.logical_not(relax.op.equal(x, relax.const(0, str(x.ty.dtype))))
    if dtype in ("int32", "int64") and str(x.ty.dtype).startswith(("float", "bfloat")):
        # Without the test the conversion of such values is LLVM's poison, and TVM folds a cast back to
        # float into trunc(x) (Cast(Cast(3e9, INT32), FLOAT) gave 3e9, inf, NaN: a fuzz finding).
        bound = float(2 ** (np.iinfo(dtype).bits - 1))
        wide = "float64" if dtype == "int64" or str(x.ty.dtype) == "float64" else str(x.ty.dtype)
        xw = relax.op.astype(x, wide) if wide != str(x.ty.dtype) else x
        inside = relax.op.logical_and(
            relax.op.greater_equal(xw, relax.const(-bound, wide)), relax.op.less(xw, relax.const(bound, wide))
        )
        return relax.op.where(inside, relax.op.astype(x, dtype), relax.const(np.iinfo(dtype).min, dtype))
    return relax.op.astype(x, dtype)
