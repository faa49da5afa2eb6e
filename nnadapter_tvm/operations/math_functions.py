"""Element-wise math extensions (codes 2010-2039): the inverse trigonometric and hyperbolic functions,
sinh and erf, ONNX's Mod and CumProd, which NNAdapter's standard set lacks (op_converters/math_functions.py).
One operation per function, so that a model names what it computes."""

from __future__ import annotations

from nnadapter_tvm.operations.schema import BOOL, INT32, Arg
from nnadapter_tvm.operations.shape_rules import infer_broadcast, infer_same_shape
from nnadapter_tvm.operations.table import define
from nnadapter_tvm.precision import Precision as P

FLOATS = (P.FLOAT16, P.FLOAT32, P.FLOAT64)
CUM_PROD_PRECISIONS = (*FLOATS, P.INT32, P.INT64, P.UINT32, P.UINT64)
# name -> code of the one-input functions
FUNCTION_CODES = {
    "ACOS": 2010,
    "ACOSH": 2011,
    "ASIN": 2012,
    "ASINH": 2013,
    "ATAN": 2014,
    "ATANH": 2015,
    "SINH": 2016,
    "ERF": 2017,
}

MATH_FUNCTIONS = {
    name: define(name, code, [Arg("input", FLOATS)], [Arg("output", FLOATS)], infer=infer_same_shape).operation_type
    for name, code in FUNCTION_CODES.items()
}
ACOS, ACOSH, ASIN, ASINH, ATAN, ATANH, SINH, ERF = MATH_FUNCTIONS.values()
MOD = define(
    "MOD",
    2020,
    [Arg("input0", FLOATS), Arg("input1", FLOATS, same_as="input0"), Arg("fmod", BOOL, optional=True)],
    [Arg("output", FLOATS)],
    infer=infer_broadcast,
).operation_type
CUM_PROD = define(
    "CUM_PROD",
    2030,
    [
        Arg("input", CUM_PROD_PRECISIONS),
        Arg("axis", INT32, optional=True),
        Arg("exclusive", BOOL, optional=True),
        Arg("reverse", BOOL, optional=True),
    ],
    [Arg("output", CUM_PROD_PRECISIONS)],
    infer=infer_same_shape,
).operation_type
