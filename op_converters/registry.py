"""The converter registry: ``@converter(OperationType.X)`` attaches the decorated function to X's entry in
the operation table (``nnadapter_tvm.operations``), for the standard operations and the built-in
extensions alike; a custom operation's converter arrives through ``extensions.register_operation``."""

from __future__ import annotations

from collections.abc import Callable

from nnadapter_tvm.operations import table
from nnadapter_tvm.types import OperationType

Converter = Callable[..., object]


def converter(*op_types: OperationType) -> Callable[[Converter], Converter]:
    """Attach the decorated function as the converter of ``op_types``; a second one for an operation raises."""

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            table.attach(OperationType(op_type), fn)
        return fn

    return register


def get_converter(op_type: OperationType) -> Converter | None:
    entry = table.lookup(OperationType(op_type))
    return entry and entry.converter


def supported_operations() -> frozenset[OperationType]:
    return frozenset(e.operation_type for e in table.entries() if e.converter is not None)
