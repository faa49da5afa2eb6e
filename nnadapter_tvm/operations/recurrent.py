"""LSTM, GRU and RNN (nnadapter-tvm's extensions, 1001-1003): ONNX's operands, in its order, attributes as
operands. Each recurrent layer is one operation, not a host-driven loop of standard operations (one VM
call per time step): the whole recurrence runs in one kernel (op_converters/recurrent.py)."""

from __future__ import annotations

from nnadapter_tvm.operations.schema import BOOL, F32, FLOAT_SCALAR, INT32, Arg
from nnadapter_tvm.operations.table import define

_ATTRS = (
    Arg("direction", INT32, optional=True),
    Arg("layout", INT32, optional=True),
    Arg("activations", INT32, optional=True),
    Arg("activation_alpha", F32, optional=True),
    Arg("activation_beta", F32, optional=True),
    Arg("clip", FLOAT_SCALAR, optional=True),
)


def _define(name: str, code: int, *args: str | Arg) -> None:
    """input, weight, recurrence_weight, then optional bias, sequence_lens and ``args`` (names are
    optional FLOAT32 tensors) -> output, output_h (LSTM: and output_c)."""
    ins = [Arg("input", F32), Arg("weight", F32), Arg("recurrence_weight", F32), Arg("bias", F32, optional=True)]
    ins.append(Arg("sequence_lens", INT32, optional=True))
    ins += [a if isinstance(a, Arg) else Arg(a, F32, optional=True) for a in args]
    outs = [Arg("output", F32), Arg("output_h", F32, optional=True)]
    if "initial_c" in args:
        outs.append(Arg("output_c", F32, optional=True))
    # version None: these codes were the enum's from the start, versioned with the package
    define(name, code, ins, outs, version=None)


_define("LSTM", 1001, "initial_h", "initial_c", "peephole", *_ATTRS, Arg("input_forget", BOOL, optional=True))
_define("GRU", 1002, "initial_h", *_ATTRS, Arg("linear_before_reset", BOOL, optional=True))
_define("RNN", 1003, "initial_h", *_ATTRS)
