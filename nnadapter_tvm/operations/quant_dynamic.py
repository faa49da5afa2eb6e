"""Dynamic quantization (nnadapter-tvm's extensions, 1010-1012): plain INT8/UINT8 tensors whose zero points
are operands (run-time tensors allowed), INT32 results with exact accumulation (docs/quantization.md;
op_converters/quant_dynamic.py)."""

from __future__ import annotations

from nnadapter_tvm.operations.schema import F32, INT8_UINT8, INT32, Arg
from nnadapter_tvm.operations.table import define
from nnadapter_tvm.precision import Precision as P

# version None: these codes were the enum's from the start, versioned with the package
define(
    "DYNAMIC_QUANTIZE_LINEAR",
    1010,
    [Arg("input", F32)],
    [Arg("output", (P.UINT8,)), Arg("scale", F32), Arg("zero_point", (P.UINT8,))],
    version=None,
)
# The zero points are "optional" but not trailing: may be given empty (zero).
define(
    "CONV_2D_INTEGER",
    1011,
    [
        Arg("input", INT8_UINT8),
        Arg("filter", INT8_UINT8),
        Arg("input_zero_point", INT8_UINT8, same_as="input"),
        Arg("filter_zero_point", INT8_UINT8, same_as="filter"),
        Arg("auto_pad", INT32),
        Arg("pads", INT32),
        Arg("strides", INT32),
        Arg("group", INT32),
        Arg("dilations", INT32),
    ],
    [Arg("output", INT32)],
    version=None,
)
define(
    "MAT_MUL_INTEGER",
    1012,
    [
        Arg("x", INT8_UINT8),
        Arg("y", INT8_UINT8),
        Arg("x_zero_point", INT8_UINT8, optional=True, same_as="x"),
        Arg("y_zero_point", INT8_UINT8, optional=True, same_as="y"),
    ],
    [Arg("output", INT32)],
    version=None,
)
