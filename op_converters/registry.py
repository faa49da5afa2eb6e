"""The converter registry: one function per standard operation."""

from __future__ import annotations

from collections.abc import Callable

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
    return _CONVERTERS.get(OperationType(op_type))


def supported_operations() -> frozenset[OperationType]:
    return frozenset(_CONVERTERS)
