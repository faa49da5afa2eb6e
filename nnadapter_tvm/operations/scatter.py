"""Scatters (nnadapter-tvm's built-in extensions, codes 2100-2102): SCATTER_ELEMENTS, SCATTER_ND and
TENSOR_SCATTER, the ONNX operators of the same names (the old Scatter is SCATTER_ELEMENTS); computed in
op_converters/scatter.py."""

from __future__ import annotations

from nnadapter_tvm.operations.schema import INT32, INT32_64, Arg
from nnadapter_tvm.operations.shape_rules import infer_same_shape
from nnadapter_tvm.operations.table import define
from nnadapter_tvm.precision import Precision as P

DATA = (P.BOOL8, P.INT8, P.UINT8, P.INT16, P.INT32, P.INT64, P.FLOAT16, P.FLOAT32, P.FLOAT64)
# `reduction` operand values, by position
REDUCTIONS = ("none", "add", "mul", "max", "min")
# TENSOR_SCATTER's `mode` values, by position
TENSOR_SCATTER_MODES = ("linear", "circular")


def _define_scatter(name: str, code: int, options: list[Arg]):
    """SCATTER_ELEMENTS and SCATTER_ND: input, indices and updates, then the op's own optional operands;
    one output of the input's shape."""
    inputs = [Arg("input", DATA), Arg("indices", INT32_64), Arg("updates", DATA, same_as="input"), *options]
    return define(name, code, inputs, [Arg("output", DATA)], infer=infer_same_shape).operation_type


SCATTER_ELEMENTS = _define_scatter(
    "SCATTER_ELEMENTS", 2100, [Arg("axis", INT32, optional=True), Arg("reduction", INT32, optional=True)]
)
SCATTER_ND = _define_scatter("SCATTER_ND", 2101, [Arg("reduction", INT32, optional=True)])
TENSOR_SCATTER = define(
    "TENSOR_SCATTER",
    2102,
    [
        Arg("past_cache", DATA),
        Arg("update", DATA, same_as="past_cache"),
        Arg("write_indices", INT32_64, optional=True),
        Arg("axis", INT32, optional=True),
        Arg("mode", INT32, optional=True),
    ],
    [Arg("present_cache", DATA)],
    infer=infer_same_shape,
).operation_type
