"""The table of operations, free of TVM: every operation's name, code, operand schema, kind and version.

- ``standard.py``: upstream's enum (its codes and ``OperationType``) and the schemas of its operations;
- one module per family of nnadapter-tvm's built-in extensions (codes 1000-9999), each defining its
  operations with ``table.define``: the same call a user's ``extensions.register_operation`` makes;
- ``table.py``: the entries and ``attach``, by which the converters (``op_converters/``) hang their kernel
  on an entry.

The enum, the model's schema checks, the model token and ``docs/operators.md`` all read this table; the
ONNX importer names an extension's member here without importing a converter.
"""

from __future__ import annotations

# The built-in extensions, one module per family (importing one defines its operations).
from nnadapter_tvm.operations import (
    bitwise,
    conv3d,
    math_functions,
    ml,
    onnx_vision,
    quant_dynamic,
    recurrent,
    scatter,
    selection,
    spectral,
    standard,
    tensor_ops,
)
from nnadapter_tvm.operations.schema import Arg, OpSchema
from nnadapter_tvm.operations.table import (
    BUILTIN_CODES,
    USER_CODES,
    Operation,
    OperationType,
    attach,
    define,
    entries,
    lookup,
    schema_of,
)

STANDARD_OPERATIONS = frozenset(OperationType[name] for name in standard.STANDARD)

__all__ = [
    "BUILTIN_CODES",
    "STANDARD_OPERATIONS",
    "USER_CODES",
    "Arg",
    "OpSchema",
    "Operation",
    "OperationType",
    "attach",
    "bitwise",
    "conv3d",
    "define",
    "entries",
    "lookup",
    "math_functions",
    "ml",
    "onnx_vision",
    "quant_dynamic",
    "recurrent",
    "scatter",
    "schema_of",
    "selection",
    "spectral",
    "tensor_ops",
]
