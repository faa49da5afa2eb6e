"""Tensor operations outside NNAdapter's standard set (nnadapter-tvm's built-in extensions, codes
2103-2106): EINSUM, COL2IM, DET and REVERSE_SEQUENCE, the ONNX operators of the same names
(op_converters/tensor_ops.py)."""

from __future__ import annotations

import numpy as np

from nnadapter_tvm.operations.schema import INT32, INT32_64, Arg
from nnadapter_tvm.operations.table import define
from nnadapter_tvm.precision import Precision as P

NUMBERS = (P.INT32, P.INT64, P.FLOAT16, P.FLOAT32, P.FLOAT64)
FLOATS = (P.FLOAT16, P.FLOAT32, P.FLOAT64)
MOVABLE = (P.BOOL8, P.INT8, P.UINT8, P.INT16, P.INT32, P.INT64, P.FLOAT16, P.FLOAT32, P.FLOAT64)


def equation_text(value: np.ndarray) -> str:
    """EINSUM's ``equation`` operand (UINT8, its ASCII bytes) as text, spaces removed."""
    return bytes(np.asarray(value, "uint8").reshape(-1).tolist()).decode("ascii").replace(" ", "")


def equation_operand(equation: str) -> np.ndarray:
    """The ``equation`` operand for ``equation`` (ONNX's attribute text)."""
    return np.frombuffer(equation.encode("ascii"), "uint8").copy()


def _infer_einsum(shapes: list, values: list) -> list:
    if values[-1] is None or any(s is None or any(d is None for d in s) for s in shapes[:-1]):
        return [None]
    operands = [np.empty(s, "float32") for s in shapes[:-1]]
    return [np.einsum(equation_text(values[-1]), *operands).shape]


EINSUM = define(
    "EINSUM",
    2103,
    [Arg("inputs", NUMBERS, variadic=True), Arg("equation", (P.UINT8,))],
    [Arg("output", NUMBERS)],
    infer=_infer_einsum,
).operation_type
COL2IM = define(
    "COL2IM",
    2104,
    [
        Arg("input", FLOATS),
        Arg("image_shape", INT32_64),
        Arg("block_shape", INT32_64),
        Arg("dilations", INT32_64, optional=True),
        Arg("pads", INT32_64, optional=True),
        Arg("strides", INT32_64, optional=True),
    ],
    [Arg("output", FLOATS)],
).operation_type
DET = define("DET", 2105, [Arg("input", FLOATS)], [Arg("output", FLOATS)]).operation_type
REVERSE_SEQUENCE = define(
    "REVERSE_SEQUENCE",
    2106,
    [
        Arg("input", MOVABLE),
        Arg("sequence_lens", INT32_64),
        Arg("batch_axis", INT32, optional=True),
        Arg("time_axis", INT32, optional=True),
    ],
    [Arg("output", MOVABLE)],
).operation_type
