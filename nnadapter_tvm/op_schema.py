"""Compatibility names for code written before ``nnadapter_tvm.operations``: the operand slot types and
precision groups (``Arg``, ``OpSchema``, ``F32``, ...) and ``SCHEMAS``, a read-only view of the operation
table's schemas by ``OperationType``. New code imports ``nnadapter_tvm.operations``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from nnadapter_tvm.operations import table
from nnadapter_tvm.operations.schema import (
    ANY,
    BIAS,
    BOOL,
    CASTABLE,
    COMPARABLE,
    F32,
    F32_INT32,
    F32_INT32_Q8,
    F32_INT_Q8,
    F32_Q8,
    F32_Q8_U8,
    FILL_VALUE,
    FILTER,
    FLOAT_SCALAR,
    INT8_UINT8,
    INT32,
    INT32_64,
    QUANT8,
    Arg,
    OpSchema,
)
from nnadapter_tvm.types import OperationType


class _Schemas(Mapping):
    def __getitem__(self, op_type: int) -> OpSchema:
        entry = table.lookup(op_type)
        if entry is None:
            raise KeyError(op_type)
        return entry.schema

    def __iter__(self) -> Iterator[OperationType]:
        return (e.operation_type for e in table.entries())

    def __len__(self) -> int:
        return len(table.entries())


SCHEMAS: Mapping[OperationType, OpSchema] = _Schemas()

__all__ = [
    "ANY", "BIAS", "BOOL", "CASTABLE", "COMPARABLE", "F32", "F32_INT32", "F32_INT32_Q8", "F32_INT_Q8", "F32_Q8",
    "F32_Q8_U8", "FILL_VALUE", "FILTER", "FLOAT_SCALAR", "INT8_UINT8", "INT32", "INT32_64", "QUANT8", "SCHEMAS",
    "Arg", "OpSchema",
]  # fmt: skip
