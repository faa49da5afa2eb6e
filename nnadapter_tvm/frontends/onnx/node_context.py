"""``NodeContext``: what an ONNX op converter sees of its node, and how it records NNAdapter operations."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import onnx

from nnadapter_tvm import operations
from nnadapter_tvm.errors import fail
from nnadapter_tvm.frontends.onnx.schema_probe import check_schema, out_dtypes
from nnadapter_tvm.frontends.onnx.values import OpRecord, Quant, Shape, Value, node_label
from nnadapter_tvm.types import OperationType, ResultCode

if TYPE_CHECKING:
    from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph

_REQUIRED = object()


class NodeContext:
    """What an ONNX op converter sees: the node's inputs, attributes and inferred outputs, and
    ``emit`` to record NNAdapter operations."""

    def __init__(self, graph: ImportedGraph, node: onnx.NodeProto, index: int, inputs: list[Value | None], opset: int):
        self.graph = graph
        self.node = node
        self.index = index
        self.opset = opset
        self.ops: list[OpRecord] = []
        self._inputs = inputs
        self.attrs: dict[str, Any] = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        self._counter = itertools.count()

    # -- reading ------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return node_label(self.node, self.index)

    @property
    def op_type(self) -> str:
        return self.node.op_type

    def fail(self, message: str, code: ResultCode = ResultCode.INVALID_PARAMETER) -> NoReturn:
        fail(f"{self.label}: {message}", code)

    def unsupported(self, message: str) -> NoReturn:
        self.fail(message, ResultCode.FEATURE_NOT_SUPPORTED)

    @property
    def input_count(self) -> int:
        return len(self._inputs)

    def has(self, i: int) -> bool:
        return i < len(self._inputs) and self._inputs[i] is not None

    def input(self, i: int) -> Value:
        if not self.has(i):
            self.fail(f"input {i} is required")
        v = self._inputs[i]
        if v.dtype is None:
            self.unsupported(f"input {i} {v.describe()}: its element type is unknown")
        return v

    def optional(self, i: int) -> Value | None:
        return self._inputs[i] if self.has(i) else None

    def inputs(self) -> list[Value | None]:
        return list(self._inputs)

    def const(self, i: int, default: object = _REQUIRED) -> np.ndarray:
        """Input ``i``'s value, which must be known at import (an initializer or folded)."""
        if not self.has(i):
            if default is _REQUIRED:
                self.fail(f"input {i} is required")
            return default
        v = self._inputs[i]
        if not v.is_const:
            self.graph.needs_constant += self.graph.input_ancestors(v)
            self.unsupported(f"input {i} {v.describe()} must be a constant (an initializer or computable at import)")
        return v.const

    def attr(self, name: str, default: object = _REQUIRED) -> Any:
        if name not in self.attrs:
            if default is _REQUIRED:
                self.fail(f"attribute '{name}' is required")
            return default
        value = self.attrs[name]
        return value.decode() if isinstance(value, bytes) else value

    def attr_or_input(self, attr: str, i: int, since: int, default: object = _REQUIRED, runtime: bool = False) -> Any:
        """A parameter ONNX moved from attribute ``attr`` to input ``i`` at opset ``since``: before it the
        attribute's value, from it on input ``i``'s value known at import (``const``); ``default`` where
        the node gives neither. ``runtime``: an input computed at run time is returned as its ``Value``
        (for an operation that takes it as an operand) rather than refused."""
        if self.opset < since:
            return self.attr(attr, default)
        if runtime and self.has(i) and not self._inputs[i].is_const:
            return self._inputs[i]
        return self.const(i, default)

    def ints_attr_or_input(self, attr: str, i: int, since: int, default: object = _REQUIRED) -> list[int] | None:
        """``attr_or_input`` as a list of ints (a scalar becomes one element); None stays None."""
        value = self.attr_or_input(attr, i, since, default)
        return None if value is None else [int(v) for v in np.reshape(value, -1)]

    def out_shape(self, i: int = 0) -> Shape | None:
        info = self.graph.inferred.get(self.node.output[i]) if i < len(self.node.output) else None
        return None if info is None else info[1]

    def out_dtype(self, i: int = 0) -> np.dtype | None:
        info = self.graph.inferred.get(self.node.output[i]) if i < len(self.node.output) else None
        return None if info is None else info[0]

    # -- making values and operations -----------------------------------------------------
    def constant(self, value: object, dtype: str | np.dtype | None = None) -> Value:
        array = np.array(value, dtype=dtype)
        return Value(f"{self._prefix()}const{next(self._counter)}", array.dtype, array.shape, const=array)

    def i32(self, value: object) -> Value:
        return self.constant(value, "int32")

    def i64(self, value: object) -> Value:
        return self.constant(value, "int64")

    def f32(self, value: object) -> Value:
        return self.constant(value, "float32")

    def boolean(self, value: bool) -> Value:
        return self.constant(bool(value), "bool")

    def emit(
        self,
        op_type: OperationType,
        inputs: Sequence[Value | None],
        dtype: str | np.dtype | Sequence[str | np.dtype | None] | None = None,
        shape: Shape | str | None = "node",
        outputs: int = 1,
        quant: Quant | None = None,
    ) -> Value | list[Value]:
        """Record ``op_type`` on ``inputs``; its output(s) get ``dtype`` (default: the first input's;
        a list gives one per output) and ``shape`` (default ``"node"``: the ONNX-inferred shape of the
        node's output 0..n)."""
        if op_type == OperationType.ASSIGN and inputs[0] is not None and inputs[0].is_const and quant is None:
            return inputs[0]  # a copy of a constant is the constant (an empty one would read as omitted)
        check_schema(self.label, op_type, inputs, outputs, dtype, quant)
        dtypes = out_dtypes(inputs, dtype, outputs)
        inferred = self._extension_shapes(op_type, inputs, outputs) if shape == "node" else None
        results = []
        for k in range(outputs):
            out_shape = self.out_shape(k) if shape == "node" else shape
            if out_shape is None and inferred is not None:
                out_shape = inferred[k]
            name = f"{self._prefix()}{op_type.name.lower()}{next(self._counter)}"
            results.append(Value(name, dtypes[k], None if out_shape is None else tuple(out_shape), quant=quant))
        self.ops.append(OpRecord(op_type, list(inputs), results))
        return results[0] if outputs == 1 else results

    def _extension_shapes(self, op_type: OperationType, inputs: Sequence[Value | None], outputs: int) -> list | None:
        """An extension's or custom operation's output shapes from its own shape inference (its table entry), for
        the nodes of domains ONNX's shape inference does not know."""
        extension = operations.lookup(op_type)
        if extension is None or extension.infer is None:
            return None
        shapes = [None if v is None else v.shape for v in inputs]
        values = [None if v is None else v.const for v in inputs]
        try:
            inferred = list(extension.infer(shapes, values))
        except Exception as err:
            self.fail(f"the shape inference of {op_type.name} failed: {type(err).__name__}: {err}")
        if len(inferred) != outputs:
            self.fail(f"the shape inference of {op_type.name} gives {len(inferred)} shapes for {outputs} outputs")
        return [None if s is None else tuple(s) for s in inferred]

    def _prefix(self) -> str:
        return f"{self.node.name or self.node.output[0]}/"
