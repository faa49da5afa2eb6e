"""The converter registry: one function per standard operation; operations registered beyond the
standard set (nnadapter_tvm.extensions) bring their own."""

from __future__ import annotations

from collections.abc import Callable

from nnadapter_tvm import extensions
from nnadapter_tvm.types import OperationType

Converter = Callable[..., object]
_CONVERTERS: dict[OperationType, Converter] = {}


def converter(*op_types: OperationType) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of ``op_types``; duplicates raise."""

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            op_type = OperationType(op_type)
            if op_type in _CONVERTERS:
                other = _CONVERTERS[op_type]
                raise RuntimeError(f"{op_type.name} already has a converter: {other.__module__}.{other.__name__}")
            _CONVERTERS[op_type] = fn
        return fn

    return register


def get_converter(op_type: OperationType) -> Converter | None:
    op_type = OperationType(op_type)
    found = _CONVERTERS.get(op_type)
    if found is None and (extension := extensions.get(op_type)) is not None:
        found = extension.converter
    return found


def supported_operations() -> frozenset[OperationType]:
    return frozenset(_CONVERTERS) | {e.operation_type for e in extensions.registered()}
