"""Float32 scalars for the TE and TIR computes that work in float32 as their references do (Paddle's
resize, grid sample, ROI align and detection kernels; onnxruntime's recurrent layers): constants
rounded as C++ rounds a float literal, casts, and float operand lists."""

from __future__ import annotations

import numpy as np
from tvm import tirx

from nnadapter_tvm.op_converters.args import Key, OpArgs

F32 = "float32"


def f32(value) -> tirx.PrimExpr:
    """A float32 constant, or a PrimExpr cast to float32."""
    if isinstance(value, (int, float, np.floating, np.integer)):
        return tirx.const(float(np.float32(value)), F32)
    return value.astype(F32)


def dtype_of(e: tirx.PrimExpr) -> str:
    """The dtype of a TIR expression, as a string."""
    return str(e.ty)


def floats(args: OpArgs, i: Key) -> list[float]:
    """Operand ``i``'s values rounded to float32, as a flat list."""
    return [float(v) for v in np.reshape(np.asarray(args.value(i), F32), -1)]
