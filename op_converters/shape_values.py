"""Shape arithmetic at compile time: the values of small integer tensors known as expressions over the
model's symbolic dimensions.

A model whose inputs have dimensions unknown until execution often computes shapes inside the graph:
``SHAPE -> GATHER -> UNSQUEEZE -> CONCAT -> RESHAPE`` (the target is "the input's batch, then -1"), or
``SHAPE -> SLICE -> MUL -> FILL``.  Read as tensors, those shapes exist only at run time, and an
operation that needs its shape operand at compile time (RESHAPE, EXPAND, FILL, TILE, RANGE, SLICE,
RESIZE_*) could only give outputs of unknown rank and unrelated dimensions.  Here each such integer
tensor also carries its *values*, element by element, as TIR expressions over the same symbolic
variables the Relax function's inputs have (``in0_d2``, or a named dimension shared by several inputs),
so ``RESHAPE(x, CONCAT(GATHER(SHAPE(x), 0), [-1]))`` gets the output shape ``[n, 12 * h]`` exactly, and
later operations and schedules see extents they can reason about.

A rule per operation type computes its outputs' values from its inputs' values (constants count as
known).  Rules only ever derive values that the operation's Relax conversion also computes at run time:
the tensors still exist and stay correct where something reads their data; dead ones are dropped by
Relax.  Values that depend on data (a NonZero count, a TopK k read from a tensor) stay unknown, and the
consumers fall back to reading them at run time (``OpArgs.runtime_shape``).

Only integer tensors of at most ``MAX_ELEMENTS`` elements (a shape, a scalar) are tracked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import tvm
from tvm import tirx

from nnadapter_tvm.errors import TVM_ERRORS
from nnadapter_tvm.types import OperationType as O

if TYPE_CHECKING:  # args imports this module (OpArgs.shape_values): the name only, for the annotations
    from nnadapter_tvm.op_converters.args import Key

#: Tensors with more elements than this are data, not shapes: their values are not tracked.
MAX_ELEMENTS = 64

Values = list  # of tirx.PrimExpr (IntImm where static), in flat (row-major) order
Rule = Callable[["Reader"], "list[Values | None] | None"]
_RULES: dict[O, Rule] = {}


def rule(*op_types: O) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op_type in op_types:
            if op_type in _RULES:
                raise RuntimeError(f"{op_type.name} already has a shape-value rule")
            _RULES[op_type] = fn
        return fn

    return register


class Reader:
    """What a rule reads: its operation's operands, as known values, constants or Relax shapes; an
    operand is named as ``OpArgs`` names it (the spec's name, or a position where a rule loops)."""

    def __init__(self, args, known: dict[int, Values]):
        self.args = args
        self._known = known

    def index(self, name: str) -> int:
        """The position of the operand the spec calls ``name`` (after a variadic slot, its count)."""
        return self.args.index(name)

    def has(self, i: Key) -> bool:
        return self.args.has(i)

    def values(self, i: Key) -> Values | None:
        """Operand ``i``'s elements (flat), or None where they are not known at compile time."""
        return values_of(self.args, i, self._known)

    def const(self, i: Key, default: object = None) -> np.ndarray | None:
        if not self.args.has(i):
            return default
        operand = self.args.operand(i)
        return operand.value() if operand.is_constant else None

    def dtype(self, i: Key) -> str:
        return self.args.input_type(i).dtype

    def out_dtype(self, k: int = 0) -> str:
        return self.args.output_type(k).dtype

    def dims(self, i: Key) -> list | None:
        """Operand ``i``'s dimensions from its Relax expression (ints, TIR expressions)."""
        expr = self.args._ctx.expr(self.args.operand(i))
        shape = getattr(expr.ty, "shape", None)
        if shape is None:
            return None
        return [int(d.value) if isinstance(d, tirx.IntImm) else d for d in shape.values]


def values_of(args, i: Key, known: dict[int, Values]) -> Values | None:
    operand = args.operand(i)
    if operand.is_constant:
        value = np.asarray(operand.value())
        if value.dtype.kind not in "iub" or value.size > MAX_ELEMENTS:
            return None
        return [tirx.IntImm("int64", int(v)) for v in value.reshape(-1)]
    return known.get(operand.index)


def propagate(args, known: dict[int, Values]) -> None:
    """Record the values of ``args.operation``'s outputs that its rule can derive."""
    fn = _RULES.get(args.type)
    if fn is None:
        return
    if not all(o.type.dtype.startswith(("int", "uint")) for o in args.operation.outputs):
        return
    try:
        results = fn(Reader(args, known))
    except TVM_ERRORS:  # a malformed operand (TVM raises RuntimeError and kin): the converter reports it
        return
    if not results:
        return
    analyzer = tvm.sym.Analyzer()
    for operand, values in zip(args.operation.outputs, results):
        if values is not None and len(values) <= MAX_ELEMENTS:
            known[operand.index] = [_simplify(analyzer, v, operand.type.dtype) for v in values]


def _simplify(analyzer, value, dtype: str) -> tirx.PrimExpr:
    if isinstance(value, (int, np.integer)):
        return tirx.IntImm("int64", int(value))
    value = value if str(value.ty.dtype) == "int64" else tirx.Cast("int64", value)
    value = analyzer.simplify(value)
    if isinstance(value, tirx.IntImm) and dtype != "int64":
        # The tensor holds the value in its own width: wrap as the stored integer does.
        return tirx.IntImm("int64", int(np.array(value.value).astype(dtype)))
    return value


def as_ints(values: Sequence) -> list[int | tirx.PrimExpr]:
    """Static elements as Python ints, symbolic ones as TIR expressions."""
    return [int(v.value) if isinstance(v, tirx.IntImm) else v for v in values]


# -- rules ------------------------------------------------------------------------------------


@rule(O.SHAPE)
def _shape(r: Reader):
    dims = r.dims("input")
    if dims is None:
        return None
    return [[tirx.IntImm("int64", d) if isinstance(d, int) else d for d in dims]]


@rule(O.ASSIGN, O.RESHAPE, O.FLATTEN, O.SQUEEZE, O.UNSQUEEZE)
def _same_elements(r: Reader):
    return [r.values("input")]


@rule(O.CAST)
def _cast(r: Reader):
    values = r.values("input")
    if values is None or not r.dtype("input").startswith(("int", "uint")):
        return None
    return [values]


@rule(O.CONCAT)
def _concat(r: Reader):
    parts = [r.values(i) for i in range(r.index("axis"))]
    if any(p is None for p in parts):
        return None
    dims = r.dims(0)
    if dims is None or len(dims) != 1:
        return None  # only 1-D concatenations (of shapes) are tracked
    return [[v for p in parts for v in p]]


@rule(O.STACK)
def _stack(r: Reader):
    parts = [r.values(i) for i in range(r.index("axis"))]
    if any(p is None or len(p) != 1 for p in parts):
        return None
    return [[p[0] for p in parts]]


@rule(O.GATHER)
def _gather(r: Reader):
    data, indices = r.values("input"), r.const("indices")
    dims = r.dims("input")
    if data is None or indices is None or dims is None or len(dims) != 1:
        return None
    n = len(data)
    picked = []
    for k in np.reshape(indices, -1):
        k = int(k)
        if not -n <= k < n:
            return None  # out of range: the converter refuses it
        picked.append(data[k % n])
    return [picked]


@rule(O.SLICE)
def _slice(r: Reader):
    data = r.values("input")
    dims = r.dims("input")
    if data is None or dims is None or len(dims) != 1:
        return None
    starts, ends = r.const("starts"), r.const("ends")
    steps = r.const("steps", np.array([1]))
    if starts is None or ends is None or steps is None or np.size(starts) != 1:
        return None
    return [data[slice(int(np.reshape(starts, -1)[0]), int(np.reshape(ends, -1)[0]), int(np.reshape(steps, -1)[0]))]]


def _fused(r: Reader, values: Values | None) -> Values | None:
    """``values`` after the operation's ``fuse_code`` (NONE or RELU; None for the others)."""
    if values is None:
        return None
    code = r.const("fuse_code", np.array([0]))
    if code is None:
        return None
    code = int(np.reshape(code, -1)[0])
    if code == 0:
        return values
    if code == 1:  # RELU
        return [tirx.max(v, tirx.IntImm("int64", 0)) for v in values]
    return None


def _elementwise(fn: Callable) -> Rule:
    def apply(r: Reader):
        a, b = r.values("input0"), r.values("input1")
        if a is None or b is None:
            return None
        if len(a) != len(b):
            if len(a) == 1:
                a = a * len(b)
            elif len(b) == 1:
                b = b * len(a)
            else:
                return None
        return [_fused(r, [fn(x, y) for x, y in zip(a, b)])]

    return apply


def _truncdiv(x, y):
    if isinstance(y, tirx.IntImm) and y.value == 0:
        raise ValueError("division by zero")
    return tirx.truncdiv(x, y)


def _floordiv(x, y):
    if isinstance(y, tirx.IntImm) and y.value == 0:
        raise ValueError("division by zero")
    return tirx.floordiv(x, y)


rule(O.ADD)(_elementwise(lambda x, y: x + y))
rule(O.SUB)(_elementwise(lambda x, y: x - y))
rule(O.MUL)(_elementwise(lambda x, y: x * y))
rule(O.DIV)(_elementwise(_truncdiv))  # integer DIV truncates (C, onnxruntime)
rule(O.FLOOR_DIV)(_elementwise(_floordiv))
rule(O.MAX)(_elementwise(tirx.max))
rule(O.MIN)(_elementwise(tirx.min))


def _reduction(fn: Callable):
    """A reduction of a 1-D tensor (a shape, a list of counts) to its one element: detectors take the
    smallest of a constant and a count (``min(1000, anchors)``), written as ReduceMin of a Concat."""

    def apply(r: Reader):
        values, dims = r.values("input"), r.dims("input")
        if values is None or not values or dims is None or len(dims) != 1:
            return None
        result = values[0]
        for v in values[1:]:
            result = fn(result, v)
        return [[result]]

    return apply


rule(O.REDUCE_MAX)(_reduction(tirx.max))
rule(O.REDUCE_SUM)(_reduction(lambda x, y: x + y))


@rule(O.FILL)
def _fill(r: Reader):
    shape, value = r.const("shape"), r.values("value")
    if shape is None or value is None or len(value) != 1:
        return None
    return [value * int(np.prod(shape))]


@rule(O.EXPAND)
def _expand(r: Reader):
    value, target = r.values("input"), r.const("shape")
    if value is None or target is None or len(value) != 1:
        return None
    return [value * int(np.prod([max(int(t), 1) for t in np.reshape(target, -1)]))]
