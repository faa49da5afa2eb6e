"""The ONNX op registry: one converter per ONNX op type, registered with ``@onnx_op``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nnadapter_tvm.frontends.onnx.graph import NodeContext, Value

    Converter = Callable[[NodeContext], "Value | list[Value | None] | None"]

_CONVERTERS: dict[str, Converter] = {}


def onnx_op(*op_types: str) -> Callable[[Converter], Converter]:
    """Register ``fn`` as the converter of ONNX ``op_types`` (default domain); registering twice raises."""

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            if op_type in _CONVERTERS:
                raise RuntimeError(
                    f"ONNX op {op_type} registered twice ({_CONVERTERS[op_type].__name__}, {fn.__name__})"
                )
            _CONVERTERS[op_type] = fn
        return fn

    return register


def get_converter(op_type: str) -> Converter | None:
    _load_families()
    return _CONVERTERS.get(op_type)


def supported_op_types() -> list[str]:
    _load_families()
    return sorted(_CONVERTERS)


def _load_families() -> None:
    import importlib
    import pkgutil

    from nnadapter_tvm.frontends.onnx import ops

    for info in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{info.name}")
