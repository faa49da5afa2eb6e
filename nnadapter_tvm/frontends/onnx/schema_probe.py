"""Schema probing: whether an NNAdapter operation a converter asks for defines the precisions of its
operands, checked before the operands exist in a model (the ONNX node then goes to the host)."""

from __future__ import annotations

import types

import numpy as np

from nnadapter_tvm.errors import fail
from nnadapter_tvm.frontends.onnx.values import Quant, precision_of
from nnadapter_tvm.model import validate_against_schema
from nnadapter_tvm.operations import schema_of
from nnadapter_tvm.types import NNAdapterError, OperationType, ResultCode


class _Probe:
    """What schema validation reads of an operand, for a value not yet in a model."""

    def __init__(self, label: str, dtype: np.dtype | None, quant: Quant | None, what: str):
        precision = quant.precision if quant is not None else precision_of(dtype, f"{label}: {what}")
        self.type = types.SimpleNamespace(precision=precision)
        self._what = what

    def describe(self) -> str:
        return self._what


def out_dtypes(inputs, dtype, outputs: int) -> list[np.dtype | None]:
    """Each output's dtype: ``dtype`` (one for all, or a list with one per output; None: the first input's)."""
    first = next((v for v in inputs if v is not None), None)
    default = first.dtype if first is not None else None
    per_output = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * outputs
    return [np.dtype(d) if d is not None else default for d in per_output]


def check_schema(label: str, op_type: OperationType, inputs, outputs: int, dtype, quant) -> None:
    """Precisions the NNAdapter operation does not define make the node (``label``) unsupported
    (host-able), not invalid."""
    schema = schema_of(op_type)
    if schema is None:
        return
    present = [v for v in inputs if v is not None]
    ins = [_Probe(label, v.dtype, v.quant, v.describe()) for v in present]
    dtypes = out_dtypes(inputs, dtype, outputs)
    outs = [_Probe(label, dtypes[k], quant, f"output {k}") for k in range(outputs)]
    try:
        validate_against_schema(op_type.name, schema, ins, outs)
    except NNAdapterError as err:
        fail(f"{label}: {err.args[0]}", ResultCode.FEATURE_NOT_SUPPORTED)
