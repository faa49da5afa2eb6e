"""The device-independent model: operands, operations, validation and ordering."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import numpy as np

from nnadapter_tvm.errors import check, fail
from nnadapter_tvm.operations import OpSchema, schema_of
from nnadapter_tvm.types import Lifetime as L
from nnadapter_tvm.types import OperandType, OperationType

CONSTANT_LIFETIMES = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)


class Operand:
    """A tensor or scalar of a model; created by ``Model.add_operand``."""

    __slots__ = ("_value", "index", "model", "type")

    def __init__(self, model: Model, index: int, type: OperandType):
        self.model = model
        self.index = index
        self.type = type
        self._value: np.ndarray | memoryview | None = None

    @property
    def is_constant(self) -> bool:
        return self.type.lifetime in CONSTANT_LIFETIMES

    def value(self) -> np.ndarray:
        """The constant value as an array of the operand's dtype and dimensions."""
        check(self._value is not None, f"{self.describe()} has no constant value")
        arr = np.frombuffer(self._value, dtype=self.type.dtype) if isinstance(self._value, memoryview) else self._value
        return arr.reshape(self.type.dimensions)

    def describe(self) -> str:
        return f"operand #{self.index} ({self.type.describe()})"

    def __repr__(self) -> str:
        return f"<Operand {self.describe()}>"


class Operation:
    """One standard operation; operands are in the spec's order."""

    __slots__ = ("index", "inputs", "label", "outputs", "type")

    def __init__(self, index: int, type: OperationType, inputs: list[Operand], outputs: list[Operand]):
        self.index = index
        self.type = type
        self.inputs = inputs
        self.outputs = outputs
        # Where a framework's importer made it (e.g. "node 12 Reshape 'r'"), for messages only: it is not
        # part of the model (the model token leaves it out).
        self.label: str | None = None

    def describe(self) -> str:
        source = f", {self.label}" if self.label else ""
        return f"{self.type.name} (operation #{self.index}{source})"

    def __repr__(self) -> str:
        return f"<Operation {self.describe()}>"


def _as_bytes_view(value: object) -> memoryview:
    try:
        view = memoryview(value)
    except TypeError:
        fail(f"a constant value must support the buffer protocol (bytes, numpy array), got {type(value).__name__}")
    check(view.c_contiguous, "a constant value must be C-contiguous")
    if view.nbytes == 0:
        return memoryview(b"")  # memoryview cannot cast a view with a zero in its shape
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view


class Model:
    """``NNAdapterModel``: build with ``add_operand``/``add_operation``, then ``finish()``."""

    def __init__(self) -> None:
        self.operands: list[Operand] = []
        self.operations: list[Operation] = []
        self.inputs: list[Operand] = []
        self.outputs: list[Operand] = []
        self.finished = False
        self.destroyed = False
        self._producer: dict[int, Operation] = {}

    # -- building ---------------------------------------------------------------
    def _check_open(self) -> None:
        check(not self.destroyed, "the model was destroyed")
        check(not self.finished, "the model is finished and can no longer be changed")

    def _check_own(self, operand: object, what: str) -> Operand:
        check(not self.destroyed, "the model was destroyed")
        check(
            isinstance(operand, Operand) and operand.model is self,
            f"{what} is not an operand of this model (got {operand!r})",
        )
        return operand  # type: ignore[return-value]

    def add_operand(self, type: OperandType) -> Operand:
        self._check_open()
        check(isinstance(type, OperandType), f"add_operand needs an OperandType, got {type!r}")
        operand = Operand(self, len(self.operands), type.copy())
        self.operands.append(operand)
        return operand

    def set_operand_value(self, operand: Operand, value: object, copy: bool = True) -> None:
        self._check_open()
        operand = self._check_own(operand, "set_operand_value's operand")
        t = operand.type
        check(t.is_static(), f"{operand.describe()}: a constant needs known dimensions, got {t.dimensions}")
        check(operand.index not in self._producer, f"{operand.describe()} is an operation's output, not a constant")
        check(t.lifetime != L.MODEL_INPUT, f"{operand.describe()} is a model input, not a constant")
        if isinstance(value, np.ndarray) and value.dtype != np.dtype(t.dtype) and value.dtype != np.uint8:
            fail(f"{operand.describe()}: value has dtype {value.dtype}, expected {t.dtype} for {t.precision.name}")
        view = _as_bytes_view(value)
        expected = t.byte_length()
        check(
            view.nbytes == expected,
            f"{operand.describe()}: value is {view.nbytes} bytes, expected {expected} "
            f"({t.element_count()} x {t.dtype} for dimensions {t.dimensions})",
        )
        if copy:
            operand._value = np.frombuffer(view, dtype=t.dtype).copy()  # one copy (bytes(view) made a second)
            t.lifetime = L.CONSTANT_COPY
        else:
            operand._value = view
            t.lifetime = L.CONSTANT_REFERENCE

    def get_operand_type(self, operand: Operand) -> OperandType:
        return self._check_own(operand, "get_operand_type's operand").type.copy()

    def add_operation(self, type: OperationType, inputs: Sequence[Operand], outputs: Sequence[Operand]) -> Operation:
        self._check_open()
        try:
            op_type = OperationType(type)
        except ValueError:
            fail(f"unknown operation type {type!r}")
        name = op_type.name
        inputs = [self._check_own(o, f"{name} input {i}") for i, o in enumerate(inputs)]
        outputs = [self._check_own(o, f"{name} output {i}") for i, o in enumerate(outputs)]
        schema = schema_of(op_type)
        if schema is not None:
            validate_against_schema(name, schema, inputs, outputs)
        for i, out in enumerate(outputs):
            check(not out.is_constant, f"{name} output {i}: {out.describe()} is a constant")
            other = self._producer.get(out.index)
            check(
                other is None,
                f"{name} output {i}: {out.describe()} is already produced by {other and other.describe()}",
            )
            check(out.type.lifetime != L.MODEL_INPUT, f"{name} output {i}: {out.describe()} is a model input")
        operation = Operation(len(self.operations), op_type, inputs, outputs)
        self.operations.append(operation)
        for out in outputs:
            self._producer[out.index] = operation
        return operation

    def identify_inputs_and_outputs(self, inputs: Sequence[Operand], outputs: Sequence[Operand]) -> None:
        self._check_open()
        inputs = [self._check_own(o, f"model input {i}") for i, o in enumerate(inputs)]
        outputs = [self._check_own(o, f"model output {i}") for i, o in enumerate(outputs)]
        for i, o in enumerate(inputs):
            check(not o.is_constant, f"model input {i}: {o.describe()} is a constant")
            producer = self._producer.get(o.index)
            check(
                producer is None, f"model input {i}: {o.describe()} is produced by {producer and producer.describe()}"
            )
        check(len({o.index for o in inputs}) == len(inputs), "the model inputs list an operand twice")
        check(len({o.index for o in outputs}) == len(outputs), "the model outputs list an operand twice")
        check(outputs, "a model needs at least one output")
        for o in self.inputs:
            o.type.lifetime = L.TEMPORARY_VARIABLE
        for o in inputs:
            o.type.lifetime = L.MODEL_INPUT
        for o in outputs:
            if not o.is_constant and o.type.lifetime != L.MODEL_INPUT:
                o.type.lifetime = L.MODEL_OUTPUT
        self.inputs, self.outputs = inputs, outputs

    def finish(self) -> None:
        """Validate the whole graph: every operand defined, no cycle; then freeze."""
        self._check_open()
        check(self.outputs, "identify_inputs_and_outputs() must be called before finish()")
        input_ids = {o.index for o in self.inputs}
        for op in self.operations:
            for i, operand in enumerate(op.inputs):
                defined = operand.is_constant or operand.index in input_ids or operand.index in self._producer
                check(
                    defined,
                    f"{op.describe()} input {i}: {operand.describe()} is used but never defined "
                    "(not a constant, not a model input, not produced by any operation)",
                )
        for i, operand in enumerate(self.outputs):
            defined = operand.is_constant or operand.index in input_ids or operand.index in self._producer
            check(defined, f"model output {i}: {operand.describe()} is never produced")
        self.operations = self.sorted_operations()
        self.finished = True

    # -- queries ----------------------------------------------------------------
    def producer(self, operand: Operand) -> Operation | None:
        return self._producer.get(operand.index)

    def sorted_operations(self) -> list[Operation]:
        """Operations in topological order (stable: insertion order among ready ones)."""
        pending = {}
        consumers: dict[int, list[Operation]] = {}
        for op in self.operations:
            deps = {self._producer[o.index].index for o in op.inputs if o.index in self._producer}
            pending[op.index] = len(deps)
            for d in deps:
                consumers.setdefault(d, []).append(op)
        ready = [op.index for op in self.operations if pending[op.index] == 0]
        heapq.heapify(ready)
        by_index = {op.index: op for op in self.operations}
        order: list[Operation] = []
        while ready:
            op = by_index[heapq.heappop(ready)]
            order.append(op)
            for consumer in consumers.get(op.index, []):
                pending[consumer.index] -= 1
                if pending[consumer.index] == 0:
                    heapq.heappush(ready, consumer.index)
        if len(order) != len(self.operations):
            stuck = sorted(i for i, n in pending.items() if n > 0)
            names = ", ".join(by_index[i].describe() for i in stuck[:8])
            fail(f"the model has a cycle through: {names}")
        return order

    def to_dot(self) -> str:
        from nnadapter_tvm.debug import model_to_dot

        return model_to_dot(self)

    # -- lifetime ---------------------------------------------------------------
    def destroy(self) -> None:
        self.destroyed = True
        self.operands.clear()
        self.operations.clear()
        self.inputs, self.outputs = [], []
        self._producer.clear()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def validate_against_schema(name: str, schema: OpSchema, inputs: list[Operand], outputs: list[Operand]) -> None:
    for kind, args, operands in (("input", schema.inputs, inputs), ("output", schema.outputs, outputs)):
        slots = assign_slots(name, kind, args, len(operands))
        by_name: dict[str, Operand] = {}
        for operand, (pos, arg) in zip(operands, slots):
            by_name.setdefault(arg.name, operand)
            precision = operand.type.precision
            if arg.precisions and precision not in arg.precisions:
                allowed = ", ".join(p.name for p in arg.precisions)
                fail(
                    f"{name} {kind} {pos} '{arg.name}': {operand.describe()} has precision {precision.name}, "
                    f"expected one of {allowed}"
                )
            if arg.same_as and arg.same_as in by_name and precision != by_name[arg.same_as].type.precision:
                fail(
                    f"{name} {kind} {pos} '{arg.name}': precision {precision.name} differs from "
                    f"'{arg.same_as}' ({by_name[arg.same_as].type.precision.name})"
                )


def assign_slots(name: str, kind: str, args: Iterable, count: int) -> list:
    """Map each supplied operand position to its schema slot; fail on a wrong count."""
    args = list(args)
    required = [a for a in args if not a.optional]
    variadic = [a for a in args if a.variadic]
    names = ", ".join(a.name + ("..." if a.variadic else "") + ("?" if a.optional else "") for a in args)
    ok = count >= len(required) if variadic else len(required) <= count <= len(args)
    check(ok, f"{name} takes {_count_text(required, args, variadic)} {kind}s ({names}), got {count}")
    if not variadic:
        return [(i, args[i]) for i in range(count)]
    extra = count - len(args) + 1  # operands taken by the variadic slot
    slots = []
    for arg in args:
        repeat = extra if arg.variadic else 1
        slots.extend([arg] * repeat)
    return [(i, a) for i, a in enumerate(slots[:count])]


def _count_text(required: list, args: list, variadic: list) -> str:
    if variadic:
        return f"at least {len(required)}"
    if len(required) == len(args):
        return f"exactly {len(args)}"
    return f"{len(required)} to {len(args)}"
