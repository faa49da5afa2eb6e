"""The ONNX op registry: one converter per ONNX op type, registered with ``@onnx_op``; and one graph
importer per control-flow op type (If, Loop, Scan), registered with ``@onnx_graph_op``.

The converters live in the modules of the ``ops`` package, loaded on the first look-up: the importer
(``imported_graph``) finds them here without importing them, so nothing they import (``control``
builds nested ``ImportedGraph`` objects) imports back into the importer."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from nnadapter_tvm.frontends.onnx import ops

if TYPE_CHECKING:
    import onnx

    from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
    from nnadapter_tvm.frontends.onnx.node_context import NodeContext
    from nnadapter_tvm.frontends.onnx.values import Value

    Converter = Callable[[NodeContext], "Value | list[Value | None] | None"]
    # (graph, node index, node, its inputs, opset): imports the node into ``graph`` (appending its unit).
    GraphImporter = Callable[[ImportedGraph, int, onnx.NodeProto, "list[Value | None]", int], None]

_CONVERTERS: dict[str, Converter] = {}
_GRAPH_IMPORTERS: dict[str, GraphImporter] = {}
# (node, its constant inputs, its folded outputs): records on the outputs what the folding lost.
FoldNote = Callable[["onnx.NodeProto", "list[Value | None]", "list[Value]"], None]
_FOLD_NOTES: dict[str, FoldNote] = {}


def _register(table: dict, kind: str, op_types: tuple[str, ...]) -> Callable:
    def register(fn: Callable) -> Callable:
        for op_type in op_types:
            if op_type in table:
                raise RuntimeError(f"ONNX op {op_type} registered twice ({table[op_type].__name__}, {fn.__name__})")
            if op_type in _CONVERTERS or op_type in _GRAPH_IMPORTERS:
                raise RuntimeError(f"ONNX op {op_type} registered both as a converter and as a {kind}")
            table[op_type] = fn
        return fn

    return register


def onnx_op(*op_types: str) -> Callable[[Converter], Converter]:
    """Register ``fn`` as the converter of ONNX ``op_types`` (default domain); registering twice raises."""
    return _register(_CONVERTERS, "converter", op_types)


def onnx_graph_op(*op_types: str) -> Callable[[GraphImporter], GraphImporter]:
    """Register ``fn`` as the graph importer of ONNX ``op_types``: ops whose attributes are graphs
    (If, Loop, Scan) import into the graph itself rather than through a ``NodeContext``."""
    return _register(_GRAPH_IMPORTERS, "graph importer", op_types)


def fold_note(op_type: str) -> Callable[[FoldNote], FoldNote]:
    """Register ``fn`` to run after a node of ``op_type`` whose inputs are all constants was folded at
    import: DequantizeLinear notes the quantized constant its float result came from (ops/quant.py)."""

    def register(fn: FoldNote) -> FoldNote:
        if op_type in _FOLD_NOTES:
            raise RuntimeError(f"fold note of ONNX op {op_type} registered twice")
        _FOLD_NOTES[op_type] = fn
        return fn

    return register


def get_fold_note(op_type: str) -> FoldNote | None:
    _load_families()
    return _FOLD_NOTES.get(op_type)


def get_converter(op_type: str) -> Converter | None:
    _load_families()
    return _CONVERTERS.get(op_type)


def get_graph_importer(op_type: str) -> GraphImporter | None:
    _load_families()
    return _GRAPH_IMPORTERS.get(op_type)


def supported_op_types() -> list[str]:
    _load_families()
    return sorted(_CONVERTERS)


@functools.cache
def _load_families() -> None:
    """Imports every converter family once (each registers its converters as it is imported)."""
    for info in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{info.name}")
