"""``OpArgs``: how a converter reads its operands, in the spec's order."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import tvm
from tvm import relax, tirx

from nnadapter_tvm.errors import fail
from nnadapter_tvm.model import Operand, Operation, assign_slots
from nnadapter_tvm.operations import schema_of
from nnadapter_tvm.runtime.runtime_check import RuntimeCheck
from nnadapter_tvm.types import QUANT_PER_CHANNEL, OperandType, ResultCode, is_quantized

if TYPE_CHECKING:
    from nnadapter_tvm.runtime.convert import ConvertContext

_REQUIRED = object()
# Operands are read by the spec's name (``args.int("group", 1)``) or, where a loop needs it, by position.
Key = int | str


class OpArgs:
    """The operands of one operation as a converter sees them.

    Tensors come back as Relax expressions (quantized tensors already dequantized to
    float32), attributes as Python values read from constant operands, with the spec's
    defaults for operands that are omitted or empty.
    """

    def __init__(self, operation: Operation, ctx: ConvertContext):
        self.operation = operation
        self.type = operation.type
        self._ctx = ctx
        self._schema = schema_of(operation.type)
        self._names = (
            [a.name for _, a in assign_slots(self.type.name, "input", self._schema.inputs, self.count)]
            if self._schema
            else []
        )

    def index(self, key: Key) -> int:
        """The position of operand ``key``: an int is a position, a str one of the spec's operand names
        (``nnadapter_tvm.operations``).  A trailing optional operand that was omitted resolves to its schema position,
        at or past ``count``, so ``has`` says False and readers return their default.  A variadic slot's
        name resolves to its first operand."""
        if isinstance(key, int):
            return key
        if key in self._names:
            return self._names.index(key)
        slots = [a.name for a in self._schema.inputs] if self._schema else []
        if key not in slots:
            raise KeyError(f"{self.type.name} has no operand named {key!r} (operands: {', '.join(slots)})")
        return max(slots.index(key), self.count)  # omitted: past the operands given

    # -- description --------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self.operation.inputs)

    @property
    def output_count(self) -> int:
        return len(self.operation.outputs)

    def name(self, i: Key) -> str:
        i = self.index(i)
        label = f"input {i}"
        if i < len(self._names):
            return f"{label} '{self._names[i]}'"
        slots = self._schema.inputs if self._schema else ()
        if i < len(slots) and not any(a.variadic for a in slots):
            return f"{label} '{slots[i].name}'"
        return label

    def fail(self, message: str, i: Key | None = None, code: ResultCode = ResultCode.INVALID_PARAMETER) -> NoReturn:
        i = None if i is None else self.index(i)
        where = f" {self.name(i)}" if i is not None else ""
        fail(f"{self.operation.describe()}{where}: {message}", code)

    def operand(self, i: Key) -> Operand:
        i = self.index(i)
        return self.operation.inputs[i]

    def input_type(self, i: Key) -> OperandType:
        i = self.index(i)
        return self.operation.inputs[i].type

    def output_type(self, i: int = 0) -> OperandType:
        return self.operation.outputs[i].type

    def has(self, i: Key) -> bool:
        """Whether operand ``i`` was given (omitted trailing and empty constants count as absent)."""
        i = self.index(i)
        if i >= self.count:
            return False
        operand = self.operand(i)
        return not (operand.is_constant and operand.type.is_static() and operand.type.element_count() == 0)

    # -- tensors ------------------------------------------------------------------
    def tensor(self, i: Key) -> relax.Expr:
        """Operand ``i`` as a Relax expression, dequantized to float32 if quantized."""
        i = self.index(i)
        if not self.has(i):
            self.fail("is required", i)
        return self._ctx.dequantized(self.operand(i))

    def raw_tensor(self, i: Key) -> relax.Expr:
        """Operand ``i`` in its storage dtype (no dequantization)."""
        i = self.index(i)
        if not self.has(i):
            self.fail("is required", i)
        return self._ctx.expr(self.operand(i))

    def tensors(self, start: int, stop: int | None = None) -> list[relax.Expr]:
        stop = self.count if stop is None else stop
        return [self.tensor(i) for i in range(start, stop)]

    def shape(self, expr: relax.Expr) -> list:
        """Static dims as ints, symbolic ones as TIR expressions."""
        return [int(d) if isinstance(d, int) or hasattr(d, "value") else d for d in _shape(expr)]

    # -- constant attributes ------------------------------------------------------
    def value(self, i: Key, default: Any = _REQUIRED) -> np.ndarray:
        i = self.index(i)
        if not self.has(i):
            if default is _REQUIRED:
                self.fail("is required", i)
            return default
        operand = self.operand(i)
        if not operand.is_constant:
            self.fail(
                "must be a constant operand (its value is needed at compile time)", i, ResultCode.FEATURE_NOT_SUPPORTED
            )
        value = operand.value()
        if is_quantized(operand.type.precision):
            value = dequantize_array(value, operand.type)
        return value

    def int(self, i: Key, default: Any = _REQUIRED) -> int:
        i = self.index(i)
        value = self.value(i, default)
        if value is default and default is not _REQUIRED:
            return default
        if np.size(value) != 1:
            self.fail(f"must hold one value, got {np.size(value)}", i)
        return int(np.reshape(value, -1)[0])

    def ints(self, i: Key, default: Any = _REQUIRED) -> list[int]:
        i = self.index(i)
        value = self.value(i, default)
        if value is default and default is not _REQUIRED:
            return default
        return [int(v) for v in np.reshape(value, -1)]

    def float(self, i: Key, default: Any = _REQUIRED) -> float:
        i = self.index(i)
        value = self.value(i, default)
        if value is default and default is not _REQUIRED:
            return default
        if np.size(value) != 1:
            self.fail(f"must hold one value, got {np.size(value)}", i)
        return float(np.reshape(value, -1)[0])

    def shape_values(self, i: Key) -> list | None:
        """Operand ``i``'s elements where compile time knows them: Python ints for static values, TIR
        expressions over the model's symbolic dimensions for computed shapes (op_converters.shape_values);
        None where they depend on data (then ``runtime_shape`` reads them at execution)."""
        i = self.index(i)
        from nnadapter_tvm.op_converters import shape_values

        if not self.has(i):
            self.fail("is required", i)
        values = shape_values.values_of(self, i, self._ctx.known)
        return None if values is None else shape_values.as_ints(values)

    def runtime_shape(self, i: Key, count: int, name: str) -> list[tirx.Var]:
        """Operand ``i`` (a 1-D integer tensor of ``count`` elements read at execution) as ``count`` new
        symbolic dimensions bound to its values when the function runs."""
        i = self.index(i)
        tensor = self.raw_tensor(i)
        dims = [tirx.Var(f"{name}{k}", "int64") for k in range(count)]
        shape = self.emit(relax.op.tensor_to_shape(relax.op.astype(tensor, "int64")))
        self.match_cast(shape, dims)
        return dims

    def bool(self, i: Key, default: Any = _REQUIRED) -> bool:
        i = self.index(i)
        return bool(self.int(i, default))

    def axis(self, i: Key, rank: int, default: Any = _REQUIRED) -> int:
        """An axis operand normalized to [0, rank); out of range fails naming the range."""
        i = self.index(i)
        axis = self.int(i, default)
        if not -rank <= axis < rank:
            self.fail(f"axis {axis} is out of range [-{rank}, {rank}) for a rank-{rank} input", i)
        return axis % rank

    def axes(self, i: Key, rank: int, default: Any = _REQUIRED, what: str = "") -> list[int]:
        """An axes operand normalized to [0, rank); out-of-range or repeated axes fail naming operand ``i``."""
        i = self.index(i)
        axes = self.ints(i, default)
        norm = []
        for a in axes:
            if not -rank <= a < rank:
                self.fail(f"axis {a} is out of range [-{rank}, {rank}){what}", i)
            norm.append(a % rank)
        if len(set(norm)) != len(norm):
            self.fail(f"axes {axes} name an axis twice", i)
        return norm

    # -- building -----------------------------------------------------------------
    def emit(self, expr: relax.Expr) -> relax.Var:
        return self._ctx.bb.emit(expr)

    def match_cast(self, expr: relax.Expr, dims: list) -> relax.Var:
        """Assert at run time that ``expr`` (a tensor, or a shape value) has ``dims`` (e.g. two symbolic
        batches are equal); new TIR variables in ``dims`` are bound to what execution finds.  (A guarded
        operation's result is read through a view before fusion: ``relax_passes.view_guarded_values``.)"""
        if isinstance(expr.ty, relax.ShapeType):
            return self._ctx.bb.match_cast(expr, relax.ShapeType(dims))
        return self._ctx.bb.match_cast(expr, relax.TensorType(dims, expr.ty.dtype))

    def emit_te(self, fn: Callable, *args: Any, **kwargs: Any) -> relax.Var:
        """``fn``'s TE kernel over ``args`` (Relax tensors, lists of them, TIR values), emitted as a
        ``call_tir`` now, its buffers shaped after the tensors' shapes as they are now (``anchored``)."""
        return self._ctx.bb.emit_te(fn, *(self.anchored(a) for a in args), **kwargs)

    def anchored(self, arg: Any) -> Any:
        """``arg`` (or each tensor of a list) as a kernel emitted now may read it: a tensor with a size
        written as an expression (``4 + n`` after a CONCAT) that a Relax op still to be legalized
        computes goes through a ``broadcast_to`` its own shape, an element-wise copy that FuseOps fuses.

        The kernel's buffer takes that shape as written now.  Legalization may write the producer's
        size otherwise (TOPI's concatenate simplifies ``4 + n`` to ``n + 4``, and the ops after it
        follow), and FuseTIR refuses a fused function where one tensor meets two buffers whose shapes
        differ in form ("Inconsistent buffers T_maximum and lv5 mapped to the same relax var": CONCAT,
        RELU, then REDUCE_MAX's kernel).  ``broadcast_to`` is legalized with the producer, and its
        output keeps the shape given here, the one the kernel reads."""
        if isinstance(arg, (list, tuple)):
            return type(arg)(self.anchored(a) for a in arg)
        if not isinstance(arg, relax.Expr) or not isinstance(arg.ty, relax.TensorType) or arg.ty.shape is None:
            return arg
        dims = _shape(arg)
        if all(isinstance(d, (int, tirx.IntImm, tirx.Var)) for d in dims):
            return arg
        value = self._ctx.bb.lookup_binding(arg) if isinstance(arg, relax.Var) else arg
        legalized = (
            isinstance(value, relax.Call)
            and isinstance(value.op, tvm.ir.Op)
            and value.op.name not in ("relax.call_tir", "relax.memory.view")
        )
        return self.emit(relax.op.broadcast_to(arg, dims)) if legalized else arg

    def require(
        self,
        expr: relax.Expr,
        condition: Any,
        message: str,
        i: Key | None = None,
        code: ResultCode = ResultCode.INVALID_PARAMETER,
    ) -> relax.Expr:
        """``expr`` guarded by ``condition`` (a TIR boolean over symbolic dimensions, or a bool).

        Where the condition is already known at compile time, false fails now (with ``code``) and true
        returns ``expr``; otherwise the compiled code asserts it before the result is used, and a failed
        execution raises INVALID_DIMENSIONS with ``message``, naming this operation and operand ``i``.
        Conditions must not divide by a dimension that may be 0 (write ``max(d, 1)``).
        """
        i = None if i is None else self.index(i)
        if isinstance(condition, bool):
            known: bool | None = condition
        else:
            simplified = tvm.sym.Analyzer().simplify(condition)
            known = bool(simplified.value) if isinstance(simplified, tirx.IntImm) else None
        if known is False:
            self.fail(message, i, code)
        if known:
            return expr
        where = f" {self.name(i)}" if i is not None else ""
        if not isinstance(expr, relax.Var):  # a call not yet emitted has no type to guard (MAT_MUL's transpose)
            expr = self._ctx.bb.emit(expr)
        return self._ctx.require(expr, condition, f"{self.operation.describe()}{where}: {message}")

    def check_value(self, value: relax.Expr, condition: Callable[[tirx.Var], Any], message: str, i: Key) -> None:
        """Assert at execution a condition on a value computed from *data*: ``value`` is an int64
        tensor of shape [1] (e.g. the worst index, one reduction over the indices); unless
        ``condition(v)`` holds for it, execution fails with INVALID_DIMENSIONS and ``message`` naming
        this operation and operand ``i`` (its ``{value}`` filled in with v).

        The guard is a match_cast of the value, as a shape, to ``select(ok, v, v -+ k)`` (k: the
        check's number): TVM's "(v vs. v -+ k)" names both (runtime_check.RuntimeCheck.numbered).
        It guards the value only, not the tensor that uses it: FuseOps reorders dataflow bindings by
        their tensor dependencies, ignoring symbolic ones, so a tensor guard could run before v is
        bound.  Consumers must therefore be safe on unchecked values (GATHER's take wraps), the
        execution failing once the guard runs.
        """
        i = self.index(i)
        bb = self._ctx.bb
        k = len(self._ctx.checks) + 1
        v = tirx.Var(f"value{k}", "int64")
        shape = bb.match_cast(bb.emit(relax.op.tensor_to_shape(value)), relax.ShapeType([v]))
        ok = condition(v)
        bb.match_cast(shape, relax.ShapeType([tirx.Select(ok, v, tirx.Select(v > 0, v - k, v + k))]))
        self.record_check(ok, message, i)

    def require_dims(self, condition: Any, dim: Any, message: str, i: Key | None = None) -> None:
        """Fail the execution with INVALID_DIMENSIONS and ``message`` (naming this operation and operand
        ``i``) unless ``condition``, over the model's symbolic dimensions, holds.

        The guard is a match_cast of the shape value (``dim``) to (select(condition, dim, dim + k)) for the
        check's number k, as ``require`` does, but on a shape rather than a tensor: no tensor passes
        through it, so ConvertLayout and fusion never see it (a tensor guard after a convolution, moved
        into NHWC, crashed FuseTIR).
        """
        i = None if i is None else self.index(i)
        bb = self._ctx.bb
        k = len(self._ctx.checks) + 1
        shape = bb.emit(relax.ShapeExpr([dim]))
        bb.match_cast(shape, relax.ShapeType([tirx.Select(condition, dim, dim + k)]))
        self.record_check(condition, message, i)

    def record_check(self, condition: Any, message: str, i: Key | None = None) -> None:
        """Record ``condition`` as a run-time check of this operation: an execution whose sizes break it is
        reported with ``message``, naming this operation and operand ``i``.  The caller guards it."""
        i = None if i is None else self.index(i)
        where = f" {self.name(i)}" if i is not None else ""
        self._ctx.checks.append(RuntimeCheck(condition, f"{self.operation.describe()}{where}: {message}"))


def _shape(expr: relax.Expr) -> list:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise TypeError(f"expected a tensor with a known rank, got {ty}")
    return list(ty.shape.values)


def dequantize_array(value: np.ndarray, t: OperandType) -> np.ndarray:
    scale = np.asarray(t.scale, "float32")
    if t.precision in QUANT_PER_CHANNEL:
        shape = [1] * value.ndim
        shape[t.channel_dim] = -1
        scale = scale.reshape(shape)
    return ((value.astype("float32") - np.float32(t.zero_point or 0)) * scale).astype("float32")
